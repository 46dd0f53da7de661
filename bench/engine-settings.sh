#!/usr/bin/env bash
# Runs `s3oram bench` at the four settings of docs/PERFORMANCE.md and prints one
# JSON line per setting (and a markdown table row on stderr).
#   bench/engine-settings.sh [path/to/s3oram] [extra bench options...]
set -euo pipefail
S3ORAM=${1:-build/release/cli/s3oram}
shift || true
run() {
  local name=$1; shift
  local json
  json=$("$S3ORAM" bench --json "$@")
  echo "{\"setting\": \"$name\", \"args\": \"$*\", \"result\": $json}"
  python3 - "$name" "$json" >&2 <<'PY'
import json, sys
name, r = sys.argv[1], json.loads(sys.argv[2])
p = r["params"]
print(f"| {name} | B={p['block_bytes']} H={p['height']} Z={p['bucket_size']} A={p['evict_rate']} "
      f"| {r['accesses']} ({r['evictions']} ev.) | {r['mean_ms']:.2f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} "
      f"| {r['accesses_per_s']:.1f} | {r['client_server_bytes_per_access']/1000:.1f} "
      f"| {r['server_server_bytes_per_access']/1000:.1f} |")
PY
}
run "(i)"   --block-size 4096  --height 8  --bucket-size 333 --evict-rate 280 --allow-unsafe-params --accesses 1400 "$@"
run "(ii)"  --block-size 4096  --height 10 --bucket-size 64  --evict-rate 48  --allow-unsafe-params --accesses 960 "$@"
run "(iii)" --block-size 65536 --height 4  --bucket-size 333 --evict-rate 280 --allow-unsafe-params --accesses 1120 "$@"
run "(iv)"  --block-size 4096  --capacity 1G --accesses 2000 "$@"
