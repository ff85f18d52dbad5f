"""CPU cost of ``routestats --help`` against the floor of the same work (a bare Python start).

Runs each command N times, interleaved, and reports the median child CPU seconds (user + sys,
from ``resource.getrusage(RUSAGE_CHILDREN)``), the ratio to the floor and the machine's load.

    python benchmarks/bench_cli_start.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys


def cpu_of(cmd: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    exe = shutil.which("routestats") or sys.exit("routestats is not installed (pip install -e .)")
    cmds = {"python -c pass (floor)": [sys.executable, "-c", "pass"],
            "python -S -c 'import routestats' (package import)": [sys.executable, "-c", "import routestats"],
            "routestats --help": [exe, "--help"],
            "routestats report --help": [exe, "report", "--help"]}
    times = {k: [] for k in cmds}
    for _ in range(args.runs):
        for k, c in cmds.items():
            times[k].append(cpu_of(c))
    floor = statistics.median(times["python -c pass (floor)"])
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {args.runs} interleaved runs each")
    for k, t in times.items():
        m = statistics.median(t)
        print(f"{k:55s} median {m:.3f} s CPU  ({m / floor:.1f}x the bare start)")


if __name__ == "__main__":
    main()
