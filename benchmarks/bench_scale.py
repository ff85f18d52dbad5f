"""The report at the scale of whole splits: 2 x N pairs, reductions only, time and memory against N.

For each N (default 2,336, 10,000 and 70,000 -- the last the size of the full DBpedia validation
split) it builds, or reuses, a synthetic pair under ``--root`` with
:func:`bench_storage.write_runs` (``pool=3``: three attention draws per length and run, cycled, so
that 2 x 70,000 examples are written in minutes; the pair is never committed), then measures in
fresh processes, in CPU seconds (user + sys, children included):

* ``routestats report PAIR --flow off`` with the caches off, its CPU and peak RSS in one run (GNU time);
* the read floor: a bare pyarrow scan, row group by row group, of the files that report reads
  (both runs' ``examples.parquet`` and ``reductions.parquet``).

It prints per N the report CPU, its CPU per example and the same for the floor, so that linear
time shows as a constant per-example cost. Run:
``python benchmarks/bench_scale.py [--sizes 2336 10000 70000] [--root /tmp]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_report import FLOOR_ENV, SAME, SCAN, child_cpu, child_cpu_rss  # noqa: E402
from bench_storage import write_runs  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2336, 10000, 70000])
    ap.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()))
    args = ap.parse_args(argv)
    exe = str(Path(sys.executable).with_name("routestats"))
    env = {"ROUTESTATS_CACHE": "off"}
    rows = []
    for n in args.sizes:
        data = args.root / f"bench-scale-{n}"
        if not (data / "saab" / "run.json").is_file():
            print(f"writing 2 x {n} examples (reductions) to {data} ...", flush=True)
            _, secs, _ = write_runs(data, n, forms=("reductions",), pool=3)
            print(f"  written in {secs:.0f} s", flush=True)
        files = [str(p) for p in sorted(data.rglob("*.parquet")) if p.name in ("examples.parquet", "reductions.parquet")]
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "r"
            cpu, wall, rss = child_cpu_rss([exe, "report", str(data), "-o", str(out), *SAME], env)
        scan = child_cpu([sys.executable, "-c", SCAN, *files], FLOOR_ENV)[0]
        size = sum(os.path.getsize(f) for f in files) / 1e6
        rows.append((n, cpu, wall, rss, scan, size))
        print(f"2 x {n:6d}: report {cpu:7.1f} s CPU ({wall:6.1f} s wall), {1e3 * cpu / n:6.2f} ms CPU per example pair, "
              f"peak RSS {rss:5.0f} MB; read floor {scan:6.2f} s ({1e3 * scan / n:5.2f} ms per pair, {size:.0f} MB); "
              f"report / floor {cpu / scan:5.1f}x; load {os.getloadavg()[0]:.2f}", flush=True)
    if len(rows) > 1:
        (n0, c0, *_), (n1, c1, *_) = rows[0], rows[-1]
        print(f"marginal CPU per example pair between 2 x {n0} and 2 x {n1}: {1e3 * (c1 - c0) / (n1 - n0):.2f} ms")


if __name__ == "__main__":
    main()
