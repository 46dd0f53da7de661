#!/usr/bin/env python3
"""Report helpers of bench/run-all and bench/fs-bench (Python 3 stdlib only).

Subcommands (each documented at its function):
  sweep-md      JSON lines of `s3oram bench --json` runs -> markdown table
  sweep-plot    the same -> gnuplot PNG (latency vs capacity or vs block size)
  kernels       field_bench --benchmark_format=json -> kernels.md
  rss-sample    samples VmRSS/VmHWM of given PIDs into a CSV until SIGTERM
  rss-report    that CSV -> rss.md, rss.json, rss.png
  summary       everything in a run-all OUTDIR -> summary.md, summary.json
  check         every expected file of a run-all OUTDIR exists and parses

Conventions: KB = 1000 bytes, MB = 10^6 bytes, MiB = 2^20 bytes (as in
docs/PERFORMANCE.md). Fields of `s3oram bench --json` that only newer builds
print (max_ms, client_ms_per_access, server_ms_per_access) are shown when
present and never required.
"""
import argparse
import glob
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time

# ---------------------------------------------------------------------------
# Formatting


def fmt(v, digits=3):
    """Compact number: 3 significant digits below 10, fewer above."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return str(v)
    a = abs(v)
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a == 0:
        return "0"
    return f"{v:.{digits}g}" if a < 1 else f"{v:.2f}"


def fmt_si(v, unit=""):
    """1.23 G, 456 M, ... (powers of 1000)."""
    if v is None:
        return "-"
    for p, s in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= p:
            return f"{v / p:.3g} {s}{unit}"
    return f"{v:.3g} {unit}".rstrip()


def fmt_bytes(n):
    if n is None:
        return "-"
    if n >= 1e9:
        return f"{n / 1e9:.1f} GB"
    if n >= 1e6:
        return f"{n / 1e6:.0f} MB"
    return f"{n / 1e3:.0f} KB"


def parse_size(s):
    """1M, 64k, 4G (powers of 1024, like the s3oram CLI and fio)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?", str(s).strip().lower())
    if not m:
        raise ValueError(f"bad size {s!r}")
    return int(float(m.group(1)) * (1 << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[m.group(2)]))


def read_jsonl(path):
    """Records of a JSON-lines file (blank lines skipped); raises on bad lines."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except ValueError as e:
                raise ValueError(f"{path}:{n}: {e}") from None
    return out


def read_jsonl_lenient(path):
    try:
        return read_jsonl(path)
    except (OSError, ValueError) as e:
        print(f"runall: {e}", file=sys.stderr)
        return []


def write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def run_gnuplot(gp_path):
    if not shutil.which("gnuplot"):
        print("runall: gnuplot not found (scripts/install-deps installs gnuplot-nox); no plot",
              file=sys.stderr)
        return False
    r = subprocess.run(["gnuplot", gp_path], timeout=120)
    if r.returncode != 0:
        print(f"runall: gnuplot failed on {gp_path}", file=sys.stderr)
        return False
    return True


def md_cell(s):
    """Text for a markdown table cell (a '|' would end the cell)."""
    return str(s).replace("|", "\\|")


def gp_str(s):
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'


# ---------------------------------------------------------------------------
# s3oram bench --json records
#
# A record is {"setting" or "name": ..., "args": "...", "result": {bench JSON}}
# (engine-settings.sh writes "setting", run-all's sweeps write "name").

BREAKDOWNS = (("client_ms_per_access", "Client time per access (ms)"),
              ("server_ms_per_access", "Server time per access (ms)"))


def rec_name(r):
    return str(r.get("setting") or r.get("name") or r.get("label") or "?")


def bench_row(r):
    res = r.get("result", {})
    p = res.get("params", {})
    H = p.get("height")
    B = p.get("block_bytes")
    aps = res.get("accesses_per_s")
    mean = res.get("mean_ms")
    return {
        "name": rec_name(r), "B": B, "N": p.get("capacity_blocks"), "H": H,
        "Z": p.get("bucket_size"), "A": p.get("evict_rate"),
        "accesses": res.get("accesses"), "evictions": res.get("evictions"),
        "mean": mean, "p50": res.get("p50_ms"), "p99": res.get("p99_ms"),
        "max": res.get("max_ms"),
        "mean_per_level": mean / (H + 1) if mean is not None and H is not None else None,
        "aps": aps, "payload_Bps": aps * B if aps is not None and B else None,
        "cs": res.get("client_server_bytes_per_access"),
        "ss": res.get("server_server_bytes_per_access"),
        "storage": p.get("storage_bytes_per_server"),
        "sync": res.get("sync"), "kernels": res.get("kernels"),
        "args": r.get("args", ""),
    }


def breakdown_tables(recs):
    """Markdown for client_ms_per_access / server_ms_per_access: every key, in
    the order the records give them (union over records, first seen first)."""
    L = []
    for field, title in BREAKDOWNS:
        objs = [(rec_name(r), r.get("result", {}).get(field)) for r in recs]
        if not any(o is not None for _, o in objs):
            continue
        keys = []
        for _, o in objs:
            if isinstance(o, dict):
                for k in o:
                    if k not in keys:
                        keys.append(k)
            elif o is not None and "value" not in keys:
                keys.append("value")
        L.append(f"{title}: `{field}` as printed by `s3oram bench --json`, every key in the "
                 "order given.\n")
        L.append("| run | " + " | ".join(str(k) for k in keys) + " |")
        L.append("|---|" + "--:|" * len(keys))
        for name, o in objs:
            if isinstance(o, dict):
                cells = [fmt(o.get(k)) if not isinstance(o.get(k), (dict, list))
                         else json.dumps(o.get(k)) for k in keys]
            elif o is not None:
                cells = [fmt(o) if k == "value" else "-" for k in keys]
            else:
                cells = ["-"] * len(keys)
            L.append(f"| {name} | " + " | ".join(cells) + " |")
        L.append("")
    return L


def bench_table(recs, kind):
    rows = [bench_row(r) for r in recs]
    has_max = any(x["max"] is not None for x in rows)
    head = ["run", "B", "N", "H", "Z", "A", "accesses (evictions)", "mean ms", "p50 ms", "p99 ms"]
    if has_max:
        head.append("max ms")
    head += ["mean/(H+1) ms", "accesses/s"]
    if kind == "blocksize":
        head.append("payload MB/s")
    head += ["client↔server KB/access", "server↔server KB/access", "storage/server"]
    L = ["| " + " | ".join(head) + " |", "|---|" + "--:|" * (len(head) - 1)]
    for x in rows:
        c = [x["name"], fmt(x["B"]) if x["B"] is None else str(x["B"]), str(x["N"]), str(x["H"]),
             str(x["Z"]), str(x["A"]), f"{x['accesses']} ({x['evictions']})",
             fmt(x["mean"]), fmt(x["p50"]), fmt(x["p99"])]
        if has_max:
            c.append(fmt(x["max"]))
        c += [fmt(x["mean_per_level"]), fmt(x["aps"])]
        if kind == "blocksize":
            c.append(fmt(x["payload_Bps"] / 1e6 if x["payload_Bps"] is not None else None))
        c += [fmt(x["cs"] / 1000 if x["cs"] is not None else None),
              fmt(x["ss"] / 1000 if x["ss"] is not None else None), fmt_bytes(x["storage"])]
        L.append("| " + " | ".join(c) + " |")
    L.append("")
    if not has_max:
        L.append("(`max_ms`, the worst single access, is not printed by this `s3oram` build.)\n")
    return L


def cmd_sweep_md(a):
    """sweep-md JSONL MD --title T --kind engine|capacity|blocksize [--note N]"""
    recs = read_jsonl(a.jsonl)
    L = [f"# {a.title}\n"]
    if a.note:
        L.append(a.note + "\n")
    L.append("mean = wall time of the loop / accesses (evictions included); p50/p99/max = "
             "per-access latency; mean/(H+1) = mean per tree level; bytes are both directions, "
             "all servers; KB = 1000 bytes. Exact arguments per run below the tables.\n")
    if not recs:
        L.append("No runs recorded.\n")
    else:
        L += bench_table(recs, a.kind)
        L += breakdown_tables(recs)
        L.append("| run | `s3oram bench` arguments | sync | kernels |")
        L.append("|---|---|---|---|")
        for r in recs:
            x = bench_row(r)
            L.append(f"| {md_cell(x['name'])} | `{md_cell(x['args'])}` | {fmt(x['sync'])} | "
                     f"{x['kernels'] or '-'} |")
        L.append("")
    write(a.md, "\n".join(L))


def cmd_sweep_plot(a):
    """sweep-plot JSONL PNG --kind capacity|blocksize [--title T]: writes PNG
    (gnuplot) with its .dat and .gp beside it."""
    rows = [bench_row(r) for r in read_jsonl(a.jsonl)]
    rows = [x for x in rows if x["mean"] is not None]
    base = os.path.splitext(os.path.abspath(a.png))[0]
    dat, gp = base + ".dat", base + ".gp"
    if not rows:
        print(f"runall: no runs in {a.jsonl}; no plot", file=sys.stderr)
        return 1
    has_max = any(x["max"] is not None for x in rows)
    g = ['set terminal pngcairo size 1000,620 font "sans,10" noenhanced',
         "set bmargin 6", "set xlabel offset 0,-1.2",
         f"set output {gp_str(os.path.abspath(a.png))}",
         'set datafile missing "-"', "set grid", "set key top left box opaque",
         "set ytics nomirror", "set logscale y", "set format y '%g'", "set mxtics 1"]
    if a.kind == "capacity":
        rows.sort(key=lambda x: x["N"] * x["B"])
        with open(dat, "w") as f:
            f.write("# capacity_bytes name H Z mean_ms p50_ms p99_ms max_ms mean_per_level_ms\n")
            for x in rows:
                f.write(f"{x['N'] * x['B']} {x['name']} {x['H']} {x['Z']} {x['mean']} {x['p50']} "
                        f"{x['p99']} {x['max'] if x['max'] is not None else '-'} "
                        f"{x['mean_per_level']}\n")
        caps = [x["N"] * x["B"] for x in rows]
        hs = [x["H"] for x in rows]
        g += [f"set title {gp_str(a.title or 'ORAM access latency vs capacity (s3oram bench, default parameters)')}",
              "set logscale x 2",
              f"set xrange [{min(caps) / 1.6:g}:{max(caps) * 1.6:g}]",
              'set xlabel "capacity (log scale); tree height H and bucket size Z under each point"',
              'set ylabel "ms per access (log scale)"',
              'set y2label "tree height H"', "set y2tics 1",
              f"set y2range [{max(0, min(hs) - 2)}:{max(hs) + 2}]"]
        d = gp_str(dat)
        xt = 'xtic(sprintf("%s\\nH=%d Z=%d", strcol(2), $3, $4))'
        p = [f"{d} using 1:5:{xt} with linespoints lw 2 pt 7 title 'mean'",
             f"{d} using 1:6 with linespoints pt 5 title 'p50'",
             f"{d} using 1:7 with linespoints pt 9 title 'p99'"]
        if has_max:
            p.append(f"{d} using 1:8 with linespoints pt 11 title 'max'")
        p.append(f"{d} using 1:9 with linespoints lw 2 dt 3 pt 6 lc rgb 'dark-red' "
                 "title 'mean/(H+1): per tree level'")
        p.append(f"{d} using 1:3 axes x1y2 with linespoints dt 2 lc rgb 'black' pt 4 "
                 "title 'H (right axis)'")
        g.append("plot " + ", \\\n     ".join(p))
    else:
        rows.sort(key=lambda x: x["B"])
        with open(dat, "w") as f:
            f.write("# block_bytes name H Z mean_ms p50_ms p99_ms max_ms payload_MBps\n")
            for x in rows:
                f.write(f"{x['B']} {x['name']} {x['H']} {x['Z']} {x['mean']} {x['p50']} {x['p99']} "
                        f"{x['max'] if x['max'] is not None else '-'} {x['payload_Bps'] / 1e6}\n")
        bs = [x["B"] for x in rows]
        g += [f"set title {gp_str(a.title or 'ORAM access latency and payload rate vs block size')}",
              "set logscale x 2",
              f"set xrange [{min(bs) / 1.6:g}:{max(bs) * 1.6:g}]",
              'set xlabel "block size B (log scale); H and Z under each point"',
              'set ylabel "ms per access (log scale)"',
              'set y2label "payload MB/s = accesses/s x B (log scale)"',
              "set logscale y2", "set y2tics", "set format y2 '%g'"]
        d = gp_str(dat)
        xt = 'xtic(sprintf("%d\\nH=%d Z=%d", $1, $3, $4))'
        p = [f"{d} using 1:5:{xt} with linespoints lw 2 pt 7 title 'mean ms'",
             f"{d} using 1:6 with linespoints pt 5 title 'p50 ms'",
             f"{d} using 1:7 with linespoints pt 9 title 'p99 ms'"]
        if has_max:
            p.append(f"{d} using 1:8 with linespoints pt 11 title 'max ms'")
        p.append(f"{d} using 1:9 axes x1y2 with linespoints lw 2 dt 2 lc rgb 'black' pt 4 "
                 "title 'payload MB/s (right axis)'")
        g.append("plot " + ", \\\n     ".join(p))
    write(gp, "\n".join(g) + "\n")
    return 0 if run_gnuplot(gp) else 1


# ---------------------------------------------------------------------------
# Kernels (field_bench JSON)

TIME_TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def load_field_bench(path):
    """name (run_name) -> entry; medians when repetitions were aggregated."""
    with open(path) as f:
        d = json.load(f)
    out, order = {}, []
    for b in d.get("benchmarks", []):
        agg = b.get("aggregate_name")
        if agg is not None and agg != "median":
            continue
        name = b.get("run_name") or b.get("name")
        if name in out and agg is None and "aggregate_name" not in out[name]:
            pass  # several repetitions without aggregates: keep the first
        elif name in out and agg is None:
            continue
        if name not in order:
            order.append(name)
        out[name] = b
    return d.get("context", {}), out, order


def kernel_facts(path):
    """Figures the summary needs, from field_bench's JSON (None when absent)."""
    _, b, _ = load_field_bench(path)

    def get(name, key):
        e = b.get(name)
        if not e or e.get("error_occurred"):
            return None
        return e.get(key)

    zs = sorted({int(m.group(1)) for n in b for m in [re.search(r"/Z:(\d+)$", n)] if m})
    facts = {"shapes": zs, "path": {}, "path_tree": {}, "evict": {}}
    for z in zs:
        path = get(f"P31Path/dispatched/Z:{z}", "bytes_per_second")
        reads = {v: get(f"PathRead/{v}/Z:{z}", "bytes_per_second") for v in ("avx2", "scalar")}
        best = max((x for x in reads.values() if x), default=None)
        facts["path"][z] = {"path_Bps": path, "read_Bps": best,
                            "read_variant": next((v for v, x in reads.items() if x and x == best), None),
                            "ratio": path / best if path and best else None}
        tree_path = get(f"P31PathTree/dispatched/Z:{z}", "bytes_per_second")
        tree_read = get(f"PathReadTree/avx2/Z:{z}", "bytes_per_second")
        facts["path_tree"][z] = {"path_Bps": tree_path, "read_Bps": tree_read,
                                 "ratio": tree_path / tree_read if tree_path and tree_read else None}
        facts["evict"][z] = {"macs": get(f"P31Evict/dispatched/Z:{z}", "MAC/s")}
    facts["peak_scalar"] = get("P31Peak/scalar", "MAC/s")
    facts["peak_avx2"] = get("P31Peak/avx2", "MAC/s")
    return facts


def cmd_kernels(a):
    """kernels JSON MD [--command C]"""
    ctx, b, order = load_field_bench(a.json)
    L = ["# Kernel micro-benchmarks (bench/field_bench)\n"]
    if a.note:
        L.append(a.note + "\n")
    if a.command:
        L.append(f"Command: `{a.command}`\n")
    ctx_bits = [f"{k}: {ctx[k]}" for k in ("date", "num_cpus", "mhz_per_cpu", "load_avg",
                                           "library_build_type") if k in ctx]
    if ctx_bits:
        L.append("Google Benchmark context: " + "; ".join(str(x) for x in ctx_bits) + ".\n")
    L.append("One thread. Medians when repeated. payload B/s = slots multiplied x 4096 per "
             "second (comparable across fields), MAC/s = field multiply-accumulates per second, "
             "read B/s = bytes actually read (PathRead only). P31Peak = the machine's "
             "multiply-accumulate peak with every operand in registers (no loads, no "
             "reduction): the ceiling for the compute-bound eviction product.\n")
    L.append("| benchmark | time | MAC/s | payload B/s | read B/s |")
    L.append("|---|--:|--:|--:|--:|")
    for n in order:
        e = b[n]
        if e.get("error_occurred"):
            L.append(f"| {n} | skipped: {e.get('error_message', '?')} | | | |")
            continue
        ms = e.get("real_time", 0) * TIME_TO_MS.get(e.get("time_unit", "ns"), 1e-6)
        t = f"{ms:.3g} ms" if ms >= 0.01 else f"{ms * 1000:.3g} µs"
        L.append(f"| {n} | {t} | {fmt_si(e.get('MAC/s'))} | {fmt_si(e.get('bytes_per_second'))} | "
                 f"{fmt_si(e.get('read_B/s'))} |")
    L.append("")
    f = kernel_facts(a.json)
    L.append("## Retrieval inner product vs read bandwidth (target: P31Path ≥ 60 % of PathRead)\n")
    L.append("Same bytes read by both, so the ratio of their payload B/s is the share of "
             "the plain-read bandwidth the kernel reaches. P31Path = the dispatched kernel; "
             "PathRead = the faster of its avx2/scalar variants.\n")
    L.append("| Z | P31Path/dispatched payload B/s | PathRead payload B/s (variant) | ratio |")
    L.append("|--:|--:|--:|--:|")
    for z, p in f["path"].items():
        L.append(f"| {z} | {fmt_si(p['path_Bps'])} | {fmt_si(p['read_Bps'])} ({p['read_variant'] or '-'}) | "
                 f"{fmt(p['ratio'] * 100) + ' %' if p['ratio'] is not None else '-'} |")
    L.append("")
    L.append("## The same with every path read from memory\n")
    L.append("PathReadTree/P31PathTree read a new path of a 512 MiB pool each iteration (as a "
             "server reads its tree: one random path per access), so the data come from DRAM; "
             "PathRead/P31Path above re-read one path, which then sits in the last-level cache.\n")
    L.append("| Z | P31PathTree/dispatched payload B/s | PathReadTree/avx2 payload B/s | ratio |")
    L.append("|--:|--:|--:|--:|")
    for z, p in f["path_tree"].items():
        L.append(f"| {z} | {fmt_si(p['path_Bps'])} | {fmt_si(p['read_Bps'])} | "
                 f"{fmt(p['ratio'] * 100) + ' %' if p['ratio'] is not None else '-'} |")
    L.append("")
    L.append("## Eviction product vs the machine's multiply-accumulate peaks\n")
    ps, pa = f["peak_scalar"], f["peak_avx2"]
    L.append(f"P31Peak/scalar: {fmt_si(ps, 'MAC/s')}; P31Peak/avx2: {fmt_si(pa, 'MAC/s')}"
             + ("" if ps or pa else " (this field_bench has no P31Peak benchmarks, or they were "
                "filtered out)") + ".\n")
    L.append("| Z | P31Evict/dispatched MAC/s | % of scalar peak | % of AVX2 peak |")
    L.append("|--:|--:|--:|--:|")
    for z, e in f["evict"].items():
        m = e["macs"]
        L.append(f"| {z} | {fmt_si(m)} | {fmt(100 * m / ps) + ' %' if m and ps else '-'} | "
                 f"{fmt(100 * m / pa) + ' %' if m and pa else '-'} |")
    L.append("")
    write(a.md, "\n".join(L))


# ---------------------------------------------------------------------------
# RSS sampling


def read_status(pid):
    vals = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "State"):
                    vals[k] = v.split()[0] if k != "State" else v.strip()
    except OSError:
        return None
    if vals.get("State", "").startswith("Z") or "VmRSS" not in vals:
        return None
    # RssAnon is the process's own memory (heap, stacks); RssFile the resident
    # pages of mapped files, e.g. a server's mmapped share file, which are page
    # cache the kernel reclaims under pressure.
    return (int(vals["VmRSS"]), int(vals.get("VmHWM", 0)), int(vals.get("RssAnon", 0)),
            int(vals.get("RssFile", 0)))


def cmd_rss_sample(a):
    """rss-sample CSV SECONDS NAME=PID...: one row per live process every
    SECONDS (elapsed_s,process,pid,vmrss_kib,vmhwm_kib,rssanon_kib,rssfile_kib)
    until SIGTERM/SIGINT
    or until every PID is gone."""
    procs = []
    for spec in a.procs:
        name, _, pid = spec.partition("=")
        if not name or not pid.isdigit():
            sys.exit(f"rss-sample: NAME=PID expected, got {spec!r}")
        procs.append((name, int(pid)))

    def stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    new = not os.path.exists(a.csv) or os.path.getsize(a.csv) == 0
    t0 = time.monotonic()
    with open(a.csv, "a") as f:
        if new:
            f.write("elapsed_s,process,pid,vmrss_kib,vmhwm_kib,rssanon_kib,rssfile_kib\n")
        while True:
            t = time.monotonic() - t0
            alive = 0
            for name, pid in procs:
                s = read_status(pid)
                if s is None:
                    continue
                alive += 1
                f.write(f"{t:.1f},{name},{pid},{s[0]},{s[1]},{s[2]},{s[3]}\n")
            f.flush()
            if alive == 0:
                return
            time.sleep(a.seconds)


def load_rss(csv):
    per = {}
    with open(csv) as f:
        header = f.readline().strip().split(",")
        if header[:4] != ["elapsed_s", "process", "pid", "vmrss_kib"]:
            raise ValueError(f"{csv}: unexpected header {header}")
        for line in f:
            parts = line.strip().split(",")
            if len(parts) < 4:
                continue
            t, name, pid, rss = float(parts[0]), parts[1], int(parts[2]), int(parts[3])
            hwm = int(parts[4]) if len(parts) > 4 and parts[4] else None
            anon = int(parts[5]) if len(parts) > 5 and parts[5] else None
            filed = int(parts[6]) if len(parts) > 6 and parts[6] else None
            d = per.setdefault(name, {"pid": pid, "samples": [], "anon": [], "file": []})
            d["samples"].append((t, rss, hwm))
            if anon is not None:
                d["anon"].append(anon)
            if filed is not None:
                d["file"].append(filed)
    return per


def rss_stats(per):
    out = {}
    for name, d in per.items():
        s = d["samples"]
        ts = [x[0] for x in s]
        rss = [x[1] for x in s]
        hwm = [x[2] for x in s if x[2] is not None]
        mid = ts[0] + (ts[-1] - ts[0]) / 2
        first = [r for t, r, _ in s if t <= mid]
        second = [r for t, r, _ in s if t > mid] or first
        growth = max(second) - max(first)
        # "Bounded": the second half of the run peaks no higher than the first
        # half did, give or take 10 % or 16 MiB (allocator noise).
        bounded = growth <= max(0.10 * max(first), 16 * 1024)
        out[name] = {"pid": d["pid"], "samples": len(s), "duration_s": ts[-1] - ts[0],
                     "first_kib": rss[0], "last_kib": rss[-1], "max_kib": max(rss),
                     "max_first_half_kib": max(first), "max_second_half_kib": max(second),
                     "vmhwm_kib": max(hwm) if hwm else None, "growth_kib": growth,
                     "max_rssanon_kib": max(d["anon"]) if d.get("anon") else None,
                     "max_rssfile_kib": max(d["file"]) if d.get("file") else None,
                     "bounded": bounded}
    return out


def cmd_rss_report(a):
    """rss-report CSV --md MD --json JSON --png PNG [--cache-mib N] [--note T]"""
    per = load_rss(a.csv)
    st = rss_stats(per)
    doc = {"csv": os.path.abspath(a.csv), "cache_size_mib": a.cache_mib, "note": a.note,
           "processes": st}
    write(a.json, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    L = ["# Memory (VmRSS) during the fio run\n"]
    if a.note:
        L.append(a.note + "\n")
    L.append(f"Samples of `/proc/PID/status` (VmRSS; VmHWM = the kernel's own peak, which "
             f"catches what falls between samples) of the processes the benchmark started. "
             f"Daemon block cache (`cache_size`): "
             f"{f'{a.cache_mib:g}' + ' MiB' if a.cache_mib is not None else 'unknown'}. "
             "\"bounded\" = the second half of the run peaks no higher than the first half "
             "(tolerance 10 % or 16 MiB). MiB = 2^20 bytes.\n")
    L.append("RssAnon = the process's own memory (heap, stacks); RssFile = resident pages of "
             "mapped files (a server's mmapped share file: page cache, reclaimable). VmRSS = "
             "both.\n")
    L.append("| process | pid | samples | duration | first MiB | max MiB | VmHWM MiB | last MiB | "
             "max 1st half | max 2nd half | max RssAnon MiB | max RssFile MiB | cache_size MiB | "
             "bounded |")
    L.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|")
    mib = lambda k: fmt(k / 1024) if k is not None else "-"
    for name in sorted(st, key=lambda n: (not n.startswith("fused"), n)):
        s = st[name]
        cache = (f'{a.cache_mib:g}' if a.cache_mib is not None else "?") if name.startswith("fused") else "-"
        L.append(f"| {name} | {s['pid']} | {s['samples']} | {s['duration_s']:.0f} s | "
                 f"{mib(s['first_kib'])} | {mib(s['max_kib'])} | {mib(s['vmhwm_kib'])} | "
                 f"{mib(s['last_kib'])} | {mib(s['max_first_half_kib'])} | "
                 f"{mib(s['max_second_half_kib'])} | {mib(s.get('max_rssanon_kib'))} | "
                 f"{mib(s.get('max_rssfile_kib'))} | {cache} | {'yes' if s['bounded'] else 'NO'} |")
    L.append("")
    write(a.md, "\n".join(L))
    base = os.path.splitext(os.path.abspath(a.png))[0]
    dat, gp = base + "-plot.dat", base + ".gp"
    names = sorted(per, key=lambda n: (not n.startswith("fused"), n))
    with open(dat, "w") as f:
        for n in names:
            f.write(f"# {n}\n")
            for t, r, _ in per[n]["samples"]:
                f.write(f"{t / 60:.4f} {r / 1024:.2f}\n")
            f.write("\n\n")
    g = ['set terminal pngcairo size 1000,560 font "sans,10" noenhanced',
         f"set output {gp_str(os.path.abspath(a.png))}",
         f"set title {gp_str('VmRSS of the s3oramfs daemon and the servers during the fio run')}",
         'set xlabel "minutes since the mount"', 'set ylabel "VmRSS (MiB)"', "set grid",
         "set key outside right top", "set yrange [0:*]"]
    p = [f"{gp_str(dat)} index {i} using 1:2 with lines lw 2 title {gp_str(n)}"
         for i, n in enumerate(names)]
    if a.cache_mib is not None:
        p.append(f"{a.cache_mib} with lines dt 2 lc rgb 'black' title 'daemon cache_size'")
    g.append("plot " + ", \\\n     ".join(p))
    write(gp, "\n".join(g) + "\n")
    return 0 if (not names or run_gnuplot(gp)) else 1


# ---------------------------------------------------------------------------
# Summary


def machine_lines(repo, build):
    def sh(*cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass

    def commit(d):
        c = sh("git", "-C", d, "rev-parse", "--short=12", "HEAD")
        if not c:
            return "unknown"
        dirty = sh("git", "-C", d, "status", "--porcelain", "--untracked-files=no")
        return c + (" (uncommitted changes)" if dirty else "")

    src = None
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_HOME_DIRECTORY:"):
                    src = line.split("=", 1)[1].strip()
    except OSError:
        pass
    lines = [f"nproc {os.cpu_count()}, CPU \"{model}\", RAM {mem}, kernel {platform.release()}, "
             f"run-all at git {commit(repo)} ({repo})"]
    if src and os.path.realpath(src) != os.path.realpath(repo):
        lines.append(f"binaries from {build}, built from {src} at git {commit(src)}")
    else:
        lines.append(f"binaries from {build}")
    return lines


def latest_fio(path):
    recs = {}
    for r in read_jsonl_lenient(path):
        if "job" in r and "direct" in r:
            recs[(r["job"], r["direct"])] = r
    return recs


def cmd_summary(a):
    """summary OUTDIR --repo R --build B [--smoke]"""
    out = a.outdir
    rows = []  # (target, measured, met, source)

    def src(p):
        return os.path.relpath(p, out)

    def verdict(ok):
        if ok is None:
            return "—"
        if a.smoke:
            return "— (smoke)"
        return "yes" if ok else "**no**"

    # Engine settings.
    p = os.path.join(out, "engine-settings.jsonl")
    eng = {rec_name(r): r.get("result", {}) for r in read_jsonl_lenient(p)} if os.path.exists(p) else {}
    for name, limit in (("(i)", 10), ("(ii)", 5), ("(iii)", 80)):
        r = eng.get(name)
        if r and r.get("mean_ms") is not None:
            extra = f" (p50 {fmt(r.get('p50_ms'))}, p99 {fmt(r.get('p99_ms'))}" + (
                f", max {fmt(r['max_ms'])}" if r.get("max_ms") is not None else "") + ")"
            rows.append((f"{name} ≤ {limit} ms mean per access", f"{fmt(r['mean_ms'])} ms{extra}",
                         verdict(r["mean_ms"] <= limit), src(p)))
        else:
            rows.append((f"{name} ≤ {limit} ms mean per access", "not measured", "—", src(p)))
    r = eng.get("(i)")
    cs = r.get("client_server_bytes_per_access") if r else None
    rows.append(("(i) client↔server ≤ 160 KB per access",
                 f"{fmt(cs / 1000)} KB" if cs is not None else "not measured",
                 verdict(cs / 1000 <= 160) if cs is not None else "—", src(p)))

    # Kernels.
    p = os.path.join(out, "kernels.json")
    kf = None
    if os.path.exists(p):
        try:
            kf = kernel_facts(p)
        except (OSError, ValueError) as e:
            print(f"runall: {p}: {e}", file=sys.stderr)
    if kf and kf["path"]:
        z = max(z for z in kf["path"] if kf["path"][z]["ratio"] is not None) if any(
            v["ratio"] is not None for v in kf["path"].values()) else None
        if z is not None:
            k = kf["path"][z]
            t = kf["path_tree"].get(z, {})
            cached = (f"{fmt(k['ratio'] * 100)} % with the path in cache (P31Path/dispatched "
                      f"{fmt_si(k['path_Bps'], 'B/s')} vs PathRead/{k['read_variant']} "
                      f"{fmt_si(k['read_Bps'], 'B/s')}, payload)")
            if t.get("ratio") is not None:
                # A server reads each path from memory (its tree is far larger
                # than the cache): that is the memory read bandwidth the target
                # names; the cache-resident ratio is shown next to it.
                rows.append(("path kernel ≥ 60 % of memory read bandwidth",
                             f"{fmt(t['ratio'] * 100)} % at Z = {z} with paths from memory "
                             f"(P31PathTree/dispatched {fmt_si(t['path_Bps'], 'B/s')} vs "
                             f"PathReadTree/avx2 {fmt_si(t['read_Bps'], 'B/s')}); {cached}",
                             verdict(t["ratio"] >= 0.6), src(p)))
            else:
                rows.append(("path kernel ≥ 60 % of read bandwidth", cached,
                             verdict(k["ratio"] >= 0.6), src(p)))
        else:
            rows.append(("path kernel ≥ 60 % of read bandwidth", "not measured", "—", src(p)))
        ze = max((z for z in kf["evict"] if kf["evict"][z]["macs"]), default=None)
        if ze is not None:
            m = kf["evict"][ze]["macs"]
            ps, pa = kf["peak_scalar"], kf["peak_avx2"]
            bits = [f"P31Evict/dispatched {fmt_si(m, 'MAC/s')} at Z = {ze}"]
            if ps:
                bits.append(f"{fmt(100 * m / ps)} % of scalar peak {fmt_si(ps, 'MAC/s')}")
            if pa:
                bits.append(f"{fmt(100 * m / pa)} % of AVX2 peak {fmt_si(pa, 'MAC/s')}")
            if not ps and not pa:
                bits.append("no peak benchmarks in this field_bench")
            rows.append(("(information) eviction kernel vs the machine's MAC peaks",
                         "; ".join(bits), "—", src(p)))
    else:
        rows.append(("path kernel ≥ 60 % of read bandwidth", "not measured", "—", src(p)))

    # Filesystem.
    fs_dir = os.path.join(out, "fs")
    pf = os.path.join(fs_dir, "s3oramfs.jsonl")
    pr = os.path.join(fs_dir, "oram-raw.json")
    fio = latest_fio(pf) if os.path.exists(pf) else {}
    raw = None
    if os.path.exists(pr):
        try:
            with open(pr) as f:
                o = json.load(f)
            res = o.get("result", o)
            raw = {"aps": res["accesses_per_s"], "B": res["params"]["block_bytes"]}
            raw["Bps"] = raw["aps"] * raw["B"]
        except (OSError, ValueError, KeyError) as e:
            print(f"runall: {pr}: {e}", file=sys.stderr)
    for job, what in (("seqread", "fio seqread 1M direct=1 ≥ 80 % of raw bytes/s"),
                      ("seqwrite", "fio seqwrite 1M direct=1 ≥ 80 % of raw bytes/s")):
        r = fio.get((job, 1))
        if r and not r.get("error") and raw:
            ratio = r["bw_bytes"] / raw["Bps"]
            rows.append((what, f"{fmt(r['bw_bytes'] / 1e6)} MB/s = {fmt(ratio * 100)} % of raw "
                         f"{fmt(raw['Bps'] / 1e6)} MB/s ({fmt(raw['aps'])} accesses/s x {raw['B']} B)",
                         verdict(ratio >= 0.8), f"{src(pf)}, {src(pr)}"))
        else:
            why = "failed" if r and r.get("error") else "not measured"
            rows.append((what, why, "—", f"{src(pf)}, {src(pr)}"))
    r = fio.get(("randread", 1))
    what = "fio randread 4k direct=1 IOPS ≥ 80 % of raw accesses/s"
    if r and not r.get("error") and raw:
        ratio = r["iops"] / raw["aps"]
        rows.append((what, f"{fmt(r['iops'])} IOPS = {fmt(ratio * 100)} % of raw {fmt(raw['aps'])} "
                     "accesses/s", verdict(ratio >= 0.8), f"{src(pf)}, {src(pr)}"))
    else:
        rows.append((what, "failed" if r and r.get("error") else "not measured", "—",
                     f"{src(pf)}, {src(pr)}"))
    r = fio.get(("reread", 0))
    what = "cached re-read (direct=0) ≥ 1 GB/s"
    if r and not r.get("error"):
        rows.append((what, f"{fmt(r['bw_bytes'] / 1e9)} GB/s ({fmt(r['io_bytes'] / 2**20)} MiB re-read)",
                     verdict(r["bw_bytes"] >= 1e9), src(pf)))
    else:
        rows.append((what, "failed" if r and r.get("error") else "not measured", "—", src(pf)))

    # Latency vs tree height.
    p = os.path.join(out, "capacity.jsonl")
    caps = [bench_row(r) for r in read_jsonl_lenient(p)] if os.path.exists(p) else []
    caps = [x for x in caps if x["mean"] is not None and x["H"] is not None]
    what = "latency growth vs tree height (mean/(H+1) within ×1.5 across the sweep)"
    if len(caps) >= 2:
        caps.sort(key=lambda x: x["N"] * x["B"])
        lo, hi = caps[0], caps[-1]
        per = [x["mean_per_level"] for x in caps]
        spread = max(per) / min(per) if min(per) > 0 else None
        rows.append((what, f"{lo['name']} (H={lo['H']}): {fmt(lo['mean'])} ms, {fmt(lo['mean_per_level'])} "
                     f"ms/level → {hi['name']} (H={hi['H']}): {fmt(hi['mean'])} ms, "
                     f"{fmt(hi['mean_per_level'])} ms/level; per-level spread ×{fmt(spread)}",
                     verdict(spread is not None and spread <= 1.5), src(p)))
    else:
        rows.append((what, "not measured (fewer than 2 capacities)", "—", src(p)))

    # Memory.
    p = os.path.join(out, "memory", "rss.json")
    what = "RSS bounded during the long fio run"
    if os.path.exists(p):
        with open(p) as f:
            m = json.load(f)
        st = m.get("processes", {})
        if st:
            bits = []
            for n in sorted(st, key=lambda n: (not n.startswith("fused"), n)):
                s = st[n]
                anon = s.get("max_rssanon_kib")
                bits.append(f"{n} max {fmt(s['max_kib'] / 1024)} MiB" + (
                    f" (RssAnon {fmt(anon / 1024)} MiB)" if anon is not None else "") + (
                    f" (cache_size {m['cache_size_mib']:g} MiB)"
                    if n.startswith("fused") and m.get("cache_size_mib") is not None else ""))
            dur = max(s["duration_s"] for s in st.values())
            rows.append((what, f"{'; '.join(bits)}; over {dur:.0f} s",
                         verdict(all(s["bounded"] for s in st.values())), src(p)))
        else:
            rows.append((what, "no samples", "—", src(p)))
    else:
        rows.append((what, "not measured", "—", src(p)))

    # Over a network (bench/net-bench, profile paper-home).
    p = os.path.join(out, "net", "net.jsonl")
    if os.path.exists(p):
        net = {}
        for r in read_jsonl_lenient(p):
            if r.get("profile") == "paper-home":
                net[r.get("job")] = r
        def net_row(what, job, key, limit, unit, below):
            r = net.get(job)
            if not r or r.get(key) is None:
                rows.append((what, "not measured", "—", src(p)))
                return
            v = r[key]
            rows.append((what, f"{fmt(v)} {unit} (B={r.get('block_size')})",
                         verdict(v <= limit if below else v >= limit), src(p)))
        net_row("paper-home: sequential write, 1 MiB requests ≥ 140 KB/s", "seqwrite", "user_KBps",
                140, "KB/s", False)
        net_row("paper-home: sequential read (cold), 1 MiB requests ≥ 140 KB/s", "seqread",
                "user_KBps", 140, "KB/s", False)
        net_row("paper-home: client upload ≤ 3.6 bytes per user byte (seq write)", "seqwrite",
                "client_up_per_user_byte", 3.6, "B/B", True)
        net_row("paper-home: server↔server ≤ 80 bytes per user byte (seq write)", "seqwrite",
                "server_peer_per_user_byte", 80, "B/B", True)
        net_row("paper-home: cp -r of small files, then sync ≤ 10 s", "cp", "seconds", 10, "s", True)
    elif os.path.exists(os.path.join(out, "net", "SKIPPED")):
        rows.append(("paper-home targets (bench/net-bench)", "skipped: needs root", "—", "net/SKIPPED"))

    L = ["# s3oramfs performance: run-all summary\n"]
    for line in machine_lines(a.repo, a.build):
        L.append(f"- {line}")
    L.append(f"- written {time.strftime('%Y-%m-%d %H:%M:%S %Z')} from `{os.path.abspath(out)}`")
    L.append("")
    if a.smoke:
        L.append("**smoke run: figures not meaningful** (tiny parameters, only to check the "
                 "tooling end to end; nothing is compared with the targets).\n")
    L.append("| target | measured | met? | source |")
    L.append("|---|---|---|---|")
    for t, m, ok, s in rows:
        L.append(f"| {t} | {m} | {ok} | {s} |")
    L.append("")
    steps = os.path.join(out, "steps.tsv")
    if os.path.exists(steps):
        L.append("Steps (seconds, status):\n")
        total = 0
        L.append("| step | seconds | status | command |")
        L.append("|---|--:|---|---|")
        with open(steps) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 3:
                    total += int(parts[1]) if parts[1].isdigit() else 0
                    L.append(f"| {parts[0]} | {parts[1]} | {parts[2]} | "
                             f"{'`' + md_cell(parts[3]) + '`' if len(parts) > 3 and parts[3] else ''} |")
        L.append(f"| total | {total} | | |")
        L.append("")
    L.append("Details: engine-settings.md, capacity.md (latency-vs-capacity.png), blocksize.md "
             "(latency-vs-blocksize.png), kernels.md, fs/fio.md (fs/fio.png), memory/rss.md "
             "(memory/rss.png), net/net.md (net/net.png).\n")
    write(os.path.join(out, "summary.md"), "\n".join(L))
    write(os.path.join(out, "summary.json"), json.dumps(
        {"smoke": a.smoke, "rows": [dict(zip(("target", "measured", "met", "source"), r)) for r in rows]},
        indent=1) + "\n")


# ---------------------------------------------------------------------------
# Check


def cmd_check(a):
    """check OUTDIR --engine N --capacity N --blocksize N [--png] [--steps LIST]:
    exits 1 listing every missing file, unparsable JSON line or failed record
    of the given steps (summary.md and summary.json always)."""
    out = a.outdir
    steps = set(a.steps.split(","))
    problems = []

    def need(rel):
        p = os.path.join(out, rel)
        if not os.path.isfile(p) or os.path.getsize(p) == 0:
            problems.append(f"missing or empty: {rel}")
            return None
        return p

    def png(rel):
        p = need(rel)
        if p and a.png:
            with open(p, "rb") as f:
                if f.read(8) != b"\x89PNG\r\n\x1a\n":
                    problems.append(f"{rel}: not a PNG")

    def bench_jsonl(rel, n):
        p = need(rel)
        if not p:
            return
        try:
            recs = read_jsonl(p)
        except ValueError as e:
            problems.append(str(e))
            return
        if len(recs) != n:
            problems.append(f"{rel}: {len(recs)} records, expected {n}")
        for i, r in enumerate(recs, 1):
            res = r.get("result") if isinstance(r, dict) else None
            if not isinstance(res, dict) or not isinstance(res.get("mean_ms"), (int, float)) \
                    or not isinstance(res.get("params"), dict):
                problems.append(f"{rel}:{i}: no s3oram bench result (mean_ms, params)")

    need("summary.md")
    need("summary.json")
    if "engine" in steps:
        bench_jsonl("engine-settings.jsonl", a.engine)
        need("engine-settings.md")
    if "capacity" in steps:
        bench_jsonl("capacity.jsonl", a.capacity)
        need("capacity.md")
        png("latency-vs-capacity.png")
    if "blocksize" in steps:
        bench_jsonl("blocksize.jsonl", a.blocksize)
        need("blocksize.md")
        png("latency-vs-blocksize.png")
    if "kernels" in steps:
        need("kernels.txt")
        need("kernels.md")
        p = need("kernels.json")
        if p:
            try:
                _, b, _ = load_field_bench(p)
                for prefix in ("PathRead/", "P31Path/dispatched/", "P31Evict/dispatched/"):
                    if not any(n.startswith(prefix) and not b[n].get("error_occurred") for n in b):
                        problems.append(f"kernels.json: no successful {prefix}* benchmark")
            except (OSError, ValueError) as e:
                problems.append(f"kernels.json: {e}")
    if "fs" in steps:
        need("fs/fio.md")
        png("fs/fio.png")
        for label in ("passthrough", "s3oramfs"):
            p = need(f"fs/{label}.jsonl")
            if not p:
                continue
            recs = latest_fio(p)
            for job in ("seqwrite", "seqread", "randwrite", "randread", "smallfiles"):
                for d in (1, 0):
                    if (job, d) not in recs:
                        problems.append(f"fs/{label}.jsonl: no {job} direct={d} record")
            if ("reread", 0) not in recs:
                problems.append(f"fs/{label}.jsonl: no reread direct=0 record")
        p = need("fs/oram-raw.json")
        if p:
            try:
                with open(p) as f:
                    float(json.load(f)["result"]["accesses_per_s"])
            except (OSError, ValueError, KeyError, TypeError) as e:
                problems.append(f"fs/oram-raw.json: no result.accesses_per_s ({e!r})")
    if "net" in steps and not os.path.exists(os.path.join(out, "net", "SKIPPED")):
        need("net/net.md")
        png("net/net.png")
        p = need("net/net.jsonl")
        if p:
            try:
                recs = read_jsonl(p)
                if not recs or not all(isinstance(r.get("user_KBps"), (int, float)) for r in recs):
                    problems.append("net/net.jsonl: no records, or a record without user_KBps")
            except ValueError as e:
                problems.append(str(e))
    if "memory" in steps:
        need("memory/rss.md")
        need("memory/rss.json")
        png("memory/rss.png")
        p = need("memory/rss.csv")
        if p:
            try:
                per = load_rss(p)
                if not any(n.startswith("fused") for n in per):
                    problems.append("memory/rss.csv: no sample of the s3oramfs-fused process")
                if sum(1 for n in per if n.startswith("server")) < 3:
                    problems.append("memory/rss.csv: samples of fewer than 3 servers")
            except (OSError, ValueError) as e:
                problems.append(f"memory/rss.csv: {e}")
        p = need("memory/s3oramfs.jsonl")
        if p and ("randrw", 1) not in latest_fio(p):
            problems.append("memory/s3oramfs.jsonl: no randrw direct=1 record")
    # Every JSON-lines file anywhere (sweeps, fio records: a failed fio job is
    # recorded with "error") and every .json except fio's raw output (which
    # may carry notes before the object).
    for p in sorted(glob.glob(os.path.join(out, "**", "*.jsonl"), recursive=True)):
        try:
            recs = read_jsonl(p)
        except ValueError as e:
            problems.append(str(e))
            continue
        for i, r in enumerate(recs, 1):
            if isinstance(r, dict) and r.get("error"):
                problems.append(f"{os.path.relpath(p, out)}:{i}: {r.get('job', '')} "
                                f"direct={r.get('direct', '')}: {str(r['error'])[:200]}")
    for p in sorted(glob.glob(os.path.join(out, "**", "*.json"), recursive=True)):
        if f"{os.sep}raw{os.sep}" in p:
            continue
        try:
            with open(p) as f:
                json.load(f)
        except (OSError, ValueError) as e:
            problems.append(f"{os.path.relpath(p, out)}: {e}")
    if problems:
        print(f"run-all check: {len(problems)} problem(s) in {out}:", file=sys.stderr)
        for x in problems:
            print(f"  - {x}", file=sys.stderr)
        return 1
    print(f"run-all check: every expected output of steps {a.steps} is present and parses ({out})",
          file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sweep-md")
    s.add_argument("jsonl"), s.add_argument("md")
    s.add_argument("--title", required=True), s.add_argument("--kind", default="capacity")
    s.add_argument("--note", default="")
    s.set_defaults(fn=cmd_sweep_md)
    s = sub.add_parser("sweep-plot")
    s.add_argument("jsonl"), s.add_argument("png")
    s.add_argument("--kind", choices=("capacity", "blocksize"), required=True)
    s.add_argument("--title", default="")
    s.set_defaults(fn=cmd_sweep_plot)
    s = sub.add_parser("kernels")
    s.add_argument("json"), s.add_argument("md"), s.add_argument("--command", default="")
    s.add_argument("--note", default="")
    s.set_defaults(fn=cmd_kernels)
    s = sub.add_parser("rss-sample")
    s.add_argument("csv"), s.add_argument("seconds", type=float), s.add_argument("procs", nargs="+")
    s.set_defaults(fn=cmd_rss_sample)
    s = sub.add_parser("rss-report")
    s.add_argument("csv"), s.add_argument("--md", required=True), s.add_argument("--json", required=True)
    s.add_argument("--png", required=True), s.add_argument("--cache-mib", type=float, default=None)
    s.add_argument("--note", default="")
    s.set_defaults(fn=cmd_rss_report)
    s = sub.add_parser("summary")
    s.add_argument("outdir"), s.add_argument("--repo", required=True), s.add_argument("--build", required=True)
    s.add_argument("--smoke", action="store_true")
    s.set_defaults(fn=cmd_summary)
    s = sub.add_parser("check")
    s.add_argument("outdir")
    s.add_argument("--engine", type=int, required=True), s.add_argument("--capacity", type=int, required=True)
    s.add_argument("--blocksize", type=int, required=True), s.add_argument("--png", action="store_true")
    s.add_argument("--steps", default="engine,capacity,blocksize,kernels,fs,memory")
    s.set_defaults(fn=cmd_check)
    a = ap.parse_args()
    sys.exit(a.fn(a) or 0)


if __name__ == "__main__":
    main()
