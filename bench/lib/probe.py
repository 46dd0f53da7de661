#!/usr/bin/env python3
"""The freeze probe (bench/net-bench job `probe`).

A writer appends SIZE bytes to DIR/w.dat in CHUNK pieces, each written with
O_DIRECT and fsynced (what `dd oflag=direct conv=fsync` does), while a reader
reads 4 KiB with O_DIRECT from the start of another cold file every INTERVAL
(DIR/c0, c1, ... in turn; a read that takes longer than the interval is
followed by the next at once). Every wait is what a user who opens a file
sees while the filesystem is busy, evictions included. When the files run
out, reads go on from the start again and are marked as repeats (the
daemon's cache may answer them); the statistics are over the first reads.

Writes one JSON object to OUT: the reader's waits (ms) and their p50, p99
and max, the writer's chunk times (s), its bytes and seconds, and any error.
Exit status 0 if the writer finished and no read failed, 1 otherwise.
"""
import argparse
import json
import mmap
import os
import sys
import threading
import time

READ = 4096


def percentile(xs, q):
    """Nearest-rank percentile of a non-empty list."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))
    return s[k]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--files", type=int, required=True)
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--chunk", type=int, default=4 << 20)
    ap.add_argument("--interval-ms", type=int, default=2000)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.files < 1 or a.size < 1 or a.chunk < 4096 or a.chunk % 4096 or a.interval_ms < 1:
        print("probe: --files, --size >= 1, --chunk a multiple of 4096, --interval-ms >= 1",
              file=sys.stderr)
        return 2

    done = threading.Event()
    reads = []  # {"at_s", "ms", "file", "repeat"}
    errors = []
    t_begin = time.monotonic()

    def reader():
        buf = mmap.mmap(-1, READ)
        i = 0
        while not done.is_set():
            name = f"c{i % a.files}"
            t0 = time.monotonic()
            try:
                fd = os.open(os.path.join(a.dir, name), os.O_RDONLY | os.O_DIRECT)
                try:
                    os.preadv(fd, [buf], 0)
                finally:
                    os.close(fd)
            except OSError as e:
                errors.append(f"read {name}: {e}")
                return
            t1 = time.monotonic()
            reads.append({"at_s": round(t0 - t_begin, 3), "ms": round((t1 - t0) * 1000, 3),
                          "file": name, "repeat": i >= a.files})
            i += 1
            done.wait(max(0.0, a.interval_ms / 1000 - (t1 - t0)))

    chunks = []
    written = 0
    th = threading.Thread(target=reader, daemon=True)
    th.start()
    w0 = time.monotonic()
    try:
        buf = mmap.mmap(-1, a.chunk)
        buf.write(os.urandom(a.chunk))
        fd = os.open(os.path.join(a.dir, "w.dat"),
                     os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
        try:
            while written < a.size:
                t0 = time.monotonic()
                n = os.pwritev(fd, [buf], written)
                os.fsync(fd)
                chunks.append(round(time.monotonic() - t0, 3))
                written += n
        finally:
            os.close(fd)
    except OSError as e:
        errors.append(f"write at {written}: {e}")
    w1 = time.monotonic()
    done.set()
    th.join(timeout=600)

    cold = [r["ms"] for r in reads if not r["repeat"]]
    out = {"files": a.files, "interval_ms": a.interval_ms, "chunk_bytes": a.chunk,
           "writer_bytes": written, "writer_seconds": round(w1 - w0, 3),
           "chunk_s": chunks, "reads": reads, "cold_reads": len(cold), "errors": errors}
    if chunks:
        out["chunk_max_s"] = max(chunks)
        out["chunk_p50_s"] = percentile(chunks, 50)
    if cold:
        out["wait_p50_ms"] = percentile(cold, 50)
        out["wait_p99_ms"] = percentile(cold, 99)
        out["wait_max_ms"] = max(cold)
    with open(a.out, "w") as f:
        json.dump(out, f)
    print(f"probe: wrote {written} bytes in {w1 - w0:.1f} s ({len(chunks)} chunks, slowest "
          f"{out.get('chunk_max_s', 0):.2f} s); {len(cold)} cold reads: p50 "
          f"{out.get('wait_p50_ms', 0):.1f} ms, p99 {out.get('wait_p99_ms', 0):.1f} ms, max "
          f"{out.get('wait_max_ms', 0):.1f} ms" + (f"; errors: {errors}" if errors else ""),
          file=sys.stderr)
    return 0 if not errors and written >= a.size else 1


if __name__ == "__main__":
    sys.exit(main())
