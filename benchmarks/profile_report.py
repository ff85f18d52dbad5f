"""The report's CPU by phase, in one process: imports, then each stage the report announces.

``python benchmarks/profile_report.py PAIR [--repeats 3]`` runs ``routestats report PAIR --flow off`` in-process
(cache off; figures drawn in this process, ``ROUTESTATS_FIGURE_WORKERS=1``, so that their CPU is this process's)
and prints the CPU seconds of each phase: the imports every report pays, then every stage from one progress line
to the next (the stage named "layer summary" runs every section up to field-to-field: effects, adjustment,
claims; "figures" draws them all; "tables" writes CSV and LaTeX; "HTML" renders the page and renames the folder).
Each repeat is a fresh process; the median of each phase is printed, with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = """
import json, os, sys, time
os.environ["ROUTESTATS_CACHE"] = "off"
os.environ["ROUTESTATS_FIGURE_WORKERS"] = "1"
if hasattr(__import__("routestats.cli").cli, "one_blas_thread"):  # as the command line sets it, before numpy loads
    __import__("routestats.cli").cli.one_blas_thread()
t0 = time.process_time()
import routestats.cli, routestats.analysis, routestats.compose.pair.build, reports, reports.drawing, reports.render
phases = [["imports", time.process_time() - t0]]
mark = [time.process_time(), "start"]
real = routestats.cli._progress

from contextlib import contextmanager

@contextmanager
def timed():
    def say(label):
        now = time.process_time()
        phases.append([mark[1], now - mark[0]])
        mark[:] = [now, label]
    yield say

routestats.cli._progress = timed
sys.argv = ["routestats", "report", sys.argv[1], "-o", sys.argv[2], "--force", "--flow", "off"]
sys.stdout = open(os.devnull, "w")
try:
    routestats.cli.main()
except SystemExit:
    pass
phases.append([mark[1], time.process_time() - mark[0]])
sys.stdout = sys.__stdout__
print(json.dumps(phases))
"""


def phases(pair: str, out: str) -> list[list]:
    res = subprocess.run([sys.executable, "-c", CHILD, pair, out], capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pair")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="/tmp/profile-report-out")
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_report import compile_project

    compile_project()  # as installed: no module compiled afresh in every measured process
    load = os.getloadavg()[0]
    runs = [phases(args.pair, args.out) for _ in range(args.repeats)]
    names = [name for name, _ in runs[0]]
    med = {name: statistics.median(r[i][1] for r in runs) for i, name in enumerate(names)}
    total = sum(med.values())
    print(f"{args.pair}: median of {args.repeats} fresh processes, load average {load:.2f} on {os.cpu_count()} CPUs")
    for name in names:
        if name == "start" and med[name] < 0.005:
            continue
        label = name if len(name) < 40 else name[:37] + "..."
        print(f"  {label:40s} {med[name]:6.2f} s CPU  {100 * med[name] / total:5.1f} %")
    print(f"  {'total':40s} {total:6.2f} s CPU")


if __name__ == "__main__":
    main()
