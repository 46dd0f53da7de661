#!/usr/bin/env bash
# A/B of two builds at the engine settings (i)-(iii) of docs/PERFORMANCE.md §2,
# young (a fresh, mostly sparse tree) and aged (`s3oram bench --age`: every
# block written, then 2^(H-1) evictions so every bucket holds data), the two
# builds interleaved so both see the same machine.
#   bench/engine-ab.sh OLD_S3ORAM NEW_S3ORAM OUTDIR [RUNS] [CASES]
# Each s3oram finds the s3oram-serverd of its own build (../serverd/). Both
# builds need `s3oram bench --age` for the aged cases. CASES: setting:tree
# pairs, default "(i):young (i):aged (ii):young (iii):young (iii):aged".
# (ii) is not aged by default: at the paper's Z = 64 (safe: 135) a tree that
# holds all its blocks overflows within a few dozen evictions, as the bound
# (2^-3.8 per eviction) says. Odd runs time the old build first, even runs
# the new one. A failed run is recorded ("failed") and the others go on.
# Appends to OUTDIR/ab.jsonl (one record per run) and writes OUTDIR/ab.md
# (means over the runs, per setting and tree).
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,16p "$0" >&2; exit 2; }
OLD=$1 NEW=$2 OUT=$3 RUNS=${4:-2}
CASES=${5:-"(i):young (i):aged (ii):young (iii):young (iii):aged"}
mkdir -p "$OUT"
touch "$OUT/ab.jsonl"
first_run=$(python3 -c 'import json, sys; print(1 + max([0] + [json.loads(l)["run"] for l in open(sys.argv[1]) if l.strip()]))' "$OUT/ab.jsonl")
declare -A ARGS=(
  ["(i)"]="--block-size 4096 --height 8 --bucket-size 333 --evict-rate 280 --allow-unsafe-params --accesses 1400"
  ["(ii)"]="--block-size 4096 --height 10 --bucket-size 64 --evict-rate 48 --allow-unsafe-params --accesses 960"
  ["(iii)"]="--block-size 65536 --height 4 --bucket-size 333 --evict-rate 280 --allow-unsafe-params --accesses 1120"
)
for run in $(seq "$first_run" $((first_run + RUNS - 1))); do
  for case in $CASES; do
    setting=${case%%:*} mode=${case##*:}
    extra=""
    [ "$mode" = aged ] && extra="--age"
    order="old new"
    [ $((run % 2)) -eq 0 ] && order="new old"
    for build in $order; do
      bin=$OLD
      [ "$build" = new ] && bin=$NEW
      # shellcheck disable=SC2086  # the arguments are word lists
      if ! json=$("$bin" bench --json ${ARGS[$setting]} $extra 2>"$OUT/last-stderr.txt"); then
        echo "run $run $setting $mode $build: FAILED: $(tail -n 1 "$OUT/last-stderr.txt")" >&2
        json='{"failed": true}'
      fi
      echo "{\"run\": $run, \"setting\": \"$setting\", \"mode\": \"$mode\", \"build\": \"$build\", \"result\": $json}" \
        | tee -a "$OUT/ab.jsonl" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
x = r["result"]
head = "run %d %-5s %-5s %s" % (r["run"], r["setting"], r["mode"], r["build"])
if not x.get("failed"):
    print("%s: mean %.2f ms, p50 %.2f, p99 %.2f, max %.1f, %d evictions"
          % (head, x["mean_ms"], x["p50_ms"], x["p99_ms"], x["max_ms"], x["evictions"]), file=sys.stderr)'
    done
  done
done
rm -f "$OUT/last-stderr.txt"
python3 - "$OUT/ab.jsonl" >"$OUT/ab.md" <<'PY'
import json, sys
from collections import defaultdict
runs = defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    if not r["result"].get("failed"):
        runs[(r["setting"], r["mode"], r["build"])].append(r["result"])
print("| setting | tree | old mean ms (runs) | new mean ms (runs) | change of the means "
      "| p50 old / new | p99 old / new | max old / new | client↔server KB per access, new |")
print("|---|---|---|---|---|---|---|---|---|")
for setting in ["(i)", "(ii)", "(iii)"]:
    for mode in ["young", "aged"]:
        o, n = runs.get((setting, mode, "old")), runs.get((setting, mode, "new"))
        if not o or not n:
            continue
        mo = sum(x["mean_ms"] for x in o) / len(o)
        mn = sum(x["mean_ms"] for x in n) / len(n)
        f = lambda xs, k: " / ".join(f"{x[k]:.2f}" for x in xs)
        mx = lambda xs, k: max(x[k] for x in xs)
        print(f"| {setting} | {mode} | {f(o, 'mean_ms')} | {f(n, 'mean_ms')} | {100 * (mn / mo - 1):+.0f} % "
              f"| {o[0]['p50_ms']:.2f} / {n[0]['p50_ms']:.2f} | {o[0]['p99_ms']:.2f} / {n[0]['p99_ms']:.2f} "
              f"| {mx(o, 'max_ms'):.0f} / {mx(n, 'max_ms'):.0f} "
              f"| {n[0]['client_server_bytes_per_access'] / 1000:.1f} |")
PY
cat "$OUT/ab.md"
