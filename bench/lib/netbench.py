#!/usr/bin/env python3
"""Helpers of bench/net-bench (one subcommand each):

  rewrite-server-config CONF --listen URL --peer-listen URL --peer J=URL ...
      rewrites a server TOML made by `s3oram cluster start` for the
      namespaces (listen addresses, peer endpoints); everything else is kept
  counters --prefix P [--servers N]
      bytes on each link class so far, from the interface counters of the
      namespaces P-client, P-s0..N-1 (JSON; N = 3 unless given): client_up = client eth0 tx,
      client_down = client eth0 rx, server_peer = the servers' eth0 tx minus
      what reached the client (their replies), i.e. what they sent each other
  fio-bytes FIO_JSON
      bytes read plus written by the (single) job
  record --profile ... --before JSON --after JSON ...
      one JSON line: the job's figures and bytes per user byte per link class
  report OUTDIR
      OUTDIR/net.md (table) and OUTDIR/net.png (gnuplot) from OUTDIR/net.jsonl
  check OUTDIR --profiles LIST --jobs LIST
      fails unless every profile and job has a record and the report exists
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runall import fmt, gp_str, read_jsonl, write  # noqa: E402  (the shared helpers)


# ---------------------------------------------------------------------------
def cmd_rewrite_server_config(a):
    with open(a.conf) as f:
        lines = f.read().split("\n")
    peers = {}
    for p in a.peer:
        j, _, url = p.partition("=")
        peers[int(j)] = url
    # Split into tables; rewrite keys by the table they are in.
    out, table, block = [], None, []

    def flush():
        if table == "peer":
            idx = None
            for ln in block:
                m = re.match(r"\s*index\s*=\s*(\d+)", ln)
                if m:
                    idx = int(m.group(1))
            if idx is None or idx not in peers:
                sys.exit(f"netbench: {a.conf}: [[peer]] without a --peer for it")
            block[:] = [re.sub(r'^(\s*endpoint\s*=\s*)".*"', lambda m: f'{m.group(1)}"{peers[idx]}"', ln)
                        for ln in block]
            del peers[idx]
        elif table == "server":
            block[:] = [re.sub(r'^(\s*listen\s*=\s*)".*"', lambda m: f'{m.group(1)}"{a.listen}"', ln)
                        for ln in block]
            block[:] = [re.sub(r'^(\s*peer_listen\s*=\s*)".*"',
                               lambda m: f'{m.group(1)}"{a.peer_listen}"', ln) for ln in block]
        out.extend(block)

    for ln in lines:
        s = ln.strip()
        if s.startswith("["):
            flush()
            block = []
            table = "peer" if s == "[[peer]]" else ("server" if s == "[server]" else s)
        block.append(ln)
    flush()
    if peers:
        sys.exit(f"netbench: {a.conf}: no [[peer]] with index {sorted(peers)}")
    text = "\n".join(out)
    if f'"{a.listen}"' not in text or f'"{a.peer_listen}"' not in text:
        sys.exit(f"netbench: {a.conf}: listen / peer_listen not found in [server]")
    write(a.conf, text)
    return 0


# ---------------------------------------------------------------------------
def link_stats(ns, dev="eth0"):
    r = subprocess.run(["ip", "-j", "-s", "-n", ns, "link", "show", "dev", dev],
                       capture_output=True, text=True, timeout=30, check=True)
    st = json.loads(r.stdout)[0]["stats64"]
    return st["tx"]["bytes"], st["rx"]["bytes"]


def cmd_counters(a):
    ctx, crx = link_stats(f"{a.prefix}-client")
    stx = sum(link_stats(f"{a.prefix}-s{i}")[0] for i in range(a.servers))
    print(json.dumps({"client_up": ctx, "client_down": crx, "server_peer": stx - crx}))
    return 0


def cmd_fio_bytes(a):
    with open(a.fio) as f:
        j = json.load(f)
    job = j["jobs"][0]
    print(job["read"]["io_bytes"] + job["write"]["io_bytes"])
    return 0


# ---------------------------------------------------------------------------
def cmd_record(a):
    before, after = json.loads(a.before), json.loads(a.after)
    rec = {"profile": a.profile, "job": a.job, "seconds": round(a.seconds, 3),
           "user_bytes": a.user_bytes, "capacity": a.capacity, "block_size": a.block_size,
           "init_args": a.init_args, "fused_opts": a.fused_opts, "note": a.note,
           "age": a.age or "young"}
    rec["user_KBps"] = round(a.user_bytes / a.seconds / 1000, 2) if a.seconds > 0 else None
    for k in ("client_up", "client_down", "server_peer"):
        d = after[k] - before[k]
        rec[k + "_bytes"] = d
        rec[k + "_per_user_byte"] = round(d / a.user_bytes, 3) if a.user_bytes else None
    if a.fio:
        with open(a.fio) as f:
            job = json.load(f)["jobs"][0]
        side = job["write"] if job["write"]["io_bytes"] else job["read"]
        rec["iops"] = round(side["iops"], 2)
        rec["fio_runtime_ms"] = job["job_runtime"] if "job_runtime" in job else side.get("runtime")
        clat = side.get("clat_ns", {}).get("percentile", {})
        rec["clat_p50_ms"] = round(clat.get("50.000000", 0) / 1e6, 2) if clat else None
        rec["clat_p99_ms"] = round(clat.get("99.000000", 0) / 1e6, 2) if clat else None
    if a.probe:
        with open(a.probe) as f:
            pr = json.load(f)
        for k in ("cold_reads", "wait_p50_ms", "wait_p99_ms", "wait_max_ms", "chunk_p50_s",
                  "chunk_max_s", "writer_seconds"):
            rec["probe_" + k] = pr.get(k)
    if a.status:
        with open(a.status) as f:
            for k, v in json.load(f).items():
                rec["status_" + k] = v
    print(json.dumps(rec))
    return 0


def cmd_status_summary(a):
    """Lines "WAY SECONDS" (bench/net-bench's status job) -> p50 and max per way."""
    times = {}
    with open(a.times) as f:
        for line in f:
            way, sec = line.split()
            times.setdefault(way, []).append(float(sec))
    out = {"runs": min((len(v) for v in times.values()), default=0)}
    for way, xs in times.items():
        xs.sort()
        out[way + "_p50_s"] = round(statistics.median(xs), 3)
        out[way + "_max_s"] = round(xs[-1], 3)
    print(json.dumps(out))
    return 0


# ---------------------------------------------------------------------------
JOB_ORDER = ["seqwrite", "seqread", "catread", "thinkread", "randread", "cp", "probe", "idle",
             "rekey", "status"]
# Jobs that move no user bytes: each has a table of its own, not a bar in the plot.
NO_USER_BYTES = ("idle", "rekey", "status")
PROFILE_ORDER = ["paper-home", "paper-lte", "lan", "local"]


def run_label(r):
    """A run's label in the plots: profile, block size and init arguments."""
    return (f"{r['profile']} B={r['block_size']}" + (f" {r['init_args']}" if r["init_args"] else "")
            + (" aged" if r.get("age") == "aged" else ""))


def table_row(r, cells):
    """A markdown row: the run's profile, block size, init arguments and age, then cells."""
    return "| " + " | ".join([r["profile"], str(r["block_size"]), r["init_args"] or "-",
                              r.get("age", "young")] +
                             cells) + " |"


def cmd_report(a):
    path = os.path.join(a.outdir, "net.jsonl")
    if not os.path.exists(path):
        print(f"netbench: no {path}", file=sys.stderr)
        return 1
    recs = read_jsonl(path)
    # The latest record per (profile, job, block size, init args).
    latest = {}
    for r in recs:
        latest[(r["profile"], r["job"], r["block_size"], r["init_args"], r.get("age", "young"))] = r
    rows = sorted(latest.values(), key=lambda r: (
        PROFILE_ORDER.index(r["profile"]) if r["profile"] in PROFILE_ORDER else 99,
        str(r["block_size"]), r["init_args"], r.get("age", "young"),
        JOB_ORDER.index(r["job"]) if r["job"] in JOB_ORDER else 99))
    md = ["# Network-emulated benchmark (bench/net-bench)", "",
          "User KB/s = bytes the job read or wrote / wall time (fio: from open to the end of the "
          "final fsync; cp: cp -r plus sync). Bytes per user byte: interface bytes (with TCP/IP "
          "headers) on each link class divided by the job's user bytes. Client up/down: the "
          "laptop's link; server-server: what the servers sent each other.", "",
          "Age: young = a new tree (mostly sparse holes); aged = every bucket written first "
          "(`s3oram age-fill`, net-bench --age), as a filesystem in use for months.", "",
          "| profile | B | init | age | job | user bytes | s | user KB/s | IOPS | p50 ms | "
          "client up B/B | client down B/B | server-server B/B |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(table_row(r, [
            r["job"], str(r["user_bytes"]),
            fmt(r["seconds"]), fmt(r["user_KBps"]), fmt(r.get("iops")), fmt(r.get("clat_p50_ms")),
            fmt(r["client_up_per_user_byte"]), fmt(r["client_down_per_user_byte"]),
            fmt(r["server_peer_per_user_byte"])]))
    probes = [r for r in rows if r["job"] == "probe"]
    if probes:
        md += ["", "Freeze probe (job `probe`: a 4 KiB O_DIRECT read of another cold file every "
               "interval while a writer appends in 4 MiB O_DIRECT+fsync chunks; waits over the "
               "first read of each file):", "",
               "| profile | B | init | age | writer KB/s | cold reads | wait p50 ms | wait p99 ms | "
               "wait max ms | chunk p50 s | slowest chunk s |",
               "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in probes:
            md.append(table_row(r, [
                fmt(r["user_KBps"]),
                fmt(r.get("probe_cold_reads")), fmt(r.get("probe_wait_p50_ms")),
                fmt(r.get("probe_wait_p99_ms")), fmt(r.get("probe_wait_max_ms")),
                fmt(r.get("probe_chunk_p50_s")), fmt(r.get("probe_chunk_max_s"))]))
    idles = [r for r in rows if r["job"] == "idle"]
    if idles:
        md += ["", "Idle mount (job `idle`: nobody works for the job's seconds; link bytes "
               "extrapolated to an hour):", "",
               "| profile | B | init | age | daemon options | s | client up MB/h | "
               "client down MB/h | server-server MB/h |",
               "|---|---|---|---|---|---|---|---|---|"]
        for r in idles:
            per_hour = 3600 / r["seconds"] / 1e6 if r["seconds"] else 0
            md.append(table_row(r, [
                r.get("fused_opts") or "(defaults)", fmt(r["seconds"]),
                fmt(r["client_up_bytes"] * per_hour), fmt(r["client_down_bytes"] * per_hour),
                fmt(r["server_peer_bytes"] * per_hour)]))
    rekeys = [r for r in rows if r["job"] == "rekey"]
    if rekeys:
        md += ["", "Rekey (job `rekey`: `s3oram rekey` of what the jobs before it wrote, end to "
               "end; raw/PROFILE/rekey.log has its accesses and evictions):", "",
               "| profile | B | init | age | s | client up MB | client down MB | "
               "server-server MB |",
               "|---|---|---|---|---|---|---|---|"]
        for r in rekeys:
            md.append(table_row(r, [
                fmt(r["seconds"]), fmt(r["client_up_bytes"] / 1e6),
                fmt(r["client_down_bytes"] / 1e6), fmt(r["server_peer_bytes"] / 1e6)]))
    statuses = [r for r in rows if r["job"] == "status"]
    if statuses:
        md += ["", "`s3oram status` (job `status`, the mount idle): through the mount's control "
               "socket, and with --direct (the state opened with this run's cheap KDF: the "
               "network's part only); seconds per run:", "",
               "| profile | B | init | age | runs | mount p50 s | mount max s | direct p50 s | "
               "direct max s |",
               "|---|---|---|---|---|---|---|---|---|"]
        for r in statuses:
            md.append(table_row(r, [
                fmt(r.get("status_runs")), fmt(r.get("status_mount_p50_s")),
                fmt(r.get("status_mount_max_s")), fmt(r.get("status_direct_p50_s")),
                fmt(r.get("status_direct_max_s"))]))
    notes = sorted({r["note"] for r in rows if r.get("note")})
    if notes:
        md += ["", "Notes: " + "; ".join(notes)]
    md += ["", f"Capacity: {', '.join(sorted({str(r['capacity']) for r in rows}))}; "
           f"daemon options: {', '.join(sorted({r['fused_opts'] or '(defaults)' for r in rows}))}."]
    write(os.path.join(a.outdir, "net.md"), "\n".join(md) + "\n")

    # Plot: user KB/s per job, one bar group per job, one bar per run label.
    labels = []
    for r in rows:
        lab = run_label(r)
        if lab not in labels:
            labels.append(lab)
    jobs = [j for j in JOB_ORDER if j not in NO_USER_BYTES and any(r["job"] == j for r in rows)]
    if not jobs:
        print("netbench: only idle and rekey records; no plot", file=sys.stderr)
        return 0
    dat = os.path.join(a.outdir, "net-plot.dat")
    gp = os.path.join(a.outdir, "net.gp")
    with open(dat, "w") as f:
        f.write("# job " + " ".join(f'"{lab}"' for lab in labels) + "\n")
        for j in jobs:
            vals = []
            for lab in labels:
                v = next((r["user_KBps"] for r in rows if r["job"] == j and run_label(r) == lab),
                         None)
                vals.append("-" if v is None else str(v))
            f.write(j + " " + " ".join(vals) + "\n")
        f.write("\n\n# link class bytes per user byte (seqwrite)\n")
    # Second panel: bytes per user byte on each link class, per run label,
    # for the sequential write (the job every run has first).
    dat2 = os.path.join(a.outdir, "net-bytes.dat")
    with open(dat2, "w") as f:
        f.write("# label client_up client_down server_peer (bytes per user byte, seqwrite)\n")
        for lab in labels:
            # seqwrite's, or (a run without it) the label's first job's.
            mine = [r for r in rows if run_label(r) == lab]
            r = next((r for r in mine if r["job"] == "seqwrite"), mine[0] if mine else None)
            vals = ["-"] * 3 if r is None else [
                str(max(r[k], 0.001)) if r.get(k) is not None else "-"
                for k in ("client_up_per_user_byte", "client_down_per_user_byte",
                          "server_peer_per_user_byte")]
            f.write(gp_str(lab) + " " + " ".join(vals) + "\n")
    png = os.path.join(a.outdir, "net.png")
    g = ['set terminal pngcairo size 1100,1000 font "sans,10" noenhanced',
         f"set output {gp_str(png)}", 'set datafile missing "-"',
         "set multiplot layout 2,1",
         "set style data histograms", "set style histogram clustered gap 1",
         "set style fill solid 0.8 border -1", "set boxwidth 0.9", "set grid ytics",
         "set logscale y", "set format y '%g'", 'set ylabel "user KB/s (log scale)"',
         "set key outside right top",
         "set title 's3oramfs over emulated networks (bench/net-bench): user throughput per job'"]
    plots = [f"{gp_str(dat)} using {i + 2}:xtic(1) title {gp_str(lab)}" for i, lab in enumerate(labels)]
    g.append("plot " + ", \\\n     ".join(plots))
    g += ['set ylabel "bytes per user byte (log scale)"',
          "set title 'Bytes on each link class per byte of user data (seqwrite; interface "
          "counters, headers included)'",
          f"plot {gp_str(dat2)} using 2:xtic(1) title 'client up', '' using 3 title 'client down', "
          "'' using 4 title 'server<->server'",
          "unset multiplot"]
    write(gp, "\n".join(g) + "\n")
    if not shutil.which("gnuplot"):
        print("netbench: gnuplot not found; no plot", file=sys.stderr)
        return 1
    r = subprocess.run(["gnuplot", gp], timeout=120)
    return 0 if r.returncode == 0 else 1


def cmd_check(a):
    """Every (profile, job) has a record with positive user bytes and time,
    and the report files exist."""
    ok = True
    try:
        recs = read_jsonl(os.path.join(a.outdir, "net.jsonl"))
    except (OSError, ValueError) as e:
        print(f"netbench check: {e}", file=sys.stderr)
        return 1
    for prof in a.profiles.split(","):
        for job in a.jobs.split(","):
            r = [x for x in recs if x["profile"] == prof and x["job"] == job]
            if not r:
                print(f"netbench check: no record for {prof}/{job}", file=sys.stderr)
                ok = False
            elif not ((r[-1]["user_bytes"] > 0 or job in NO_USER_BYTES) and r[-1]["seconds"] > 0 and
                      r[-1]["client_up_bytes"] > 0 and r[-1]["client_down_bytes"] > 0):
                print(f"netbench check: {prof}/{job}: no bytes or no time: {r[-1]}", file=sys.stderr)
                ok = False
    for f in ("net.md", "net.png"):
        p = os.path.join(a.outdir, f)
        if not os.path.exists(p) or os.path.getsize(p) == 0:
            print(f"netbench check: missing {p}", file=sys.stderr)
            ok = False
    print("netbench check: " + ("ok" if ok else "FAILED"), file=sys.stderr)
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("rewrite-server-config")
    s.add_argument("conf")
    s.add_argument("--listen", required=True)
    s.add_argument("--peer-listen", required=True)
    s.add_argument("--peer", action="append", default=[])
    s.set_defaults(fn=cmd_rewrite_server_config)
    s = sub.add_parser("counters")
    s.add_argument("--prefix", required=True)
    s.add_argument("--servers", type=int, default=3)
    s.set_defaults(fn=cmd_counters)
    s = sub.add_parser("fio-bytes")
    s.add_argument("fio")
    s.set_defaults(fn=cmd_fio_bytes)
    s = sub.add_parser("record")
    for k in ("profile", "job", "before", "after", "capacity", "block-size", "init-args",
              "fused-opts", "note", "age"):
        s.add_argument("--" + k, default="")
    s.add_argument("--seconds", type=float, required=True)
    s.add_argument("--user-bytes", type=int, required=True)
    s.add_argument("--fio")
    s.add_argument("--probe")
    s.add_argument("--status")
    s.set_defaults(fn=cmd_record)
    s = sub.add_parser("status-summary")
    s.add_argument("times")
    s.set_defaults(fn=cmd_status_summary)
    s = sub.add_parser("report")
    s.add_argument("outdir")
    s.set_defaults(fn=cmd_report)
    s = sub.add_parser("check")
    s.add_argument("outdir")
    s.add_argument("--profiles", required=True)
    s.add_argument("--jobs", required=True)
    s.set_defaults(fn=cmd_check)
    a = p.parse_args()
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
