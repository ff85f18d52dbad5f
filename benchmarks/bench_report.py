"""The report at untouched-test scale against the floors of the same work, in one run.

Builds (or reuses, with ``--data``) a synthetic 2 x N pair (default N = 2,336; both storage
forms, as the runners write them) with :func:`bench_storage.write_runs`, then measures, each in
a fresh process, in CPU seconds (user + sys of the process and its children):

* ``routestats report PAIR`` with the on-disk cache off (``ROUTESTATS_CACHE=off``): every file
  read is hashed, reduced and rendered;
* the **hash floor**: SHA-256 of exactly the files that report verified (its provenance lists
  them), in one process that imports nothing but hashlib -- the cost of verification on its own
  (its share of the report is taken after subtracting the interpreter start);
* the **read floor**: a bare pyarrow scan, row group by row group, of exactly those files;
* ``python -c pass`` (the interpreter start every command pays).

Ratios are printed against the floors, with the machine's load. Run:
``python benchmarks/bench_report.py [--examples 2336] [--data /tmp/bench-pair]``.
"""

from __future__ import annotations

import argparse
import html as html_lib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child_cpu(cmd: list[str], env: dict | None = None) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of a command and the children it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, **(env or {})})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def child_cpu_rss(cmd: list[str], env: dict | None = None) -> tuple[float, float, float]:
    """(CPU seconds, wall seconds, peak RSS in MB) of one run of a command (GNU time writes the RSS to a
    file; its own CPU is negligible): one run instead of two where a run takes minutes."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as f:
        cpu, wall = child_cpu(["/usr/bin/time", "-f", "%M", "-o", f.name, *cmd], env)
        return cpu, wall, int(f.read().strip().splitlines()[-1]) / 1024


def peak_rss_mb(cmd: list[str], env: dict | None = None) -> float:
    """Peak resident memory (MB) of one run of a command, in a fresh process (GNU time)."""
    res = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True,
                         env={**os.environ, **(env or {})})
    return int(res.stderr.strip().splitlines()[-1]) / 1024


# the same sections at every size: rollout / norm-weighted SFM read the full matrices, which the default
# report does only when they are small (flow auto), so the small and the large pair would differ
SAME = ["--flow", "off"]

HASH = """
import hashlib, sys
for f in sys.argv[1:]:  # the same chunked SHA-256 as routestats.rundir.atomic.sha256_file, nothing imported
    h = hashlib.sha256()
    with open(f, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
"""
SCAN = """
import sys
import pyarrow.parquet as pq
for f in sys.argv[1:]:
    pf = pq.ParquetFile(f)
    for i in range(pf.num_row_groups):
        pf.read_row_group(i)
"""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=2336)
    ap.add_argument("--data", type=Path, default=None, help="folder of the pair (made when missing)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--small", type=int, default=64, help="examples of the small pair (the fixed cost)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from bench_storage import write_runs

    data = args.data or Path(tempfile.mkdtemp(prefix="bench-pair-"))
    if not (data / "saab" / "run.json").is_file():
        t0 = time.perf_counter()
        write_runs(data, args.examples, forms=("matrices", "reductions"))
        print(f"wrote the 2 x {args.examples} pair in {time.perf_counter() - t0:.1f} s under {data}")
    exe = str(Path(sys.executable).with_name("routestats"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r"
        env = {"ROUTESTATS_CACHE": "off"}
        rows = {"report": [], "hash": [], "scan": [], "start": []}
        files: list[str] = []
        for i in range(args.repeats):
            rows["report"].append(child_cpu([exe, "report", str(data), "-o", str(out), "--force", *SAME], env))
            if not files:
                page = (out / "report.html").read_text()
                # the provenance JSON the report embeds lists exactly the files it verified (= read)
                prov = json.loads(html_lib.unescape(page.split('<pre class="mono">', 1)[1].split("</pre>", 1)[0]))
                for role in ("baseline", "variant"):
                    r = prov["runs"][role]
                    files += [str(Path(r["path"]) / p) for p in r["files"]]
            rows["hash"].append(child_cpu([sys.executable, "-c", HASH, *files]))
            rows["scan"].append(child_cpu([sys.executable, "-c", SCAN, *[f for f in files if f.endswith(".parquet")]]))
            rows["start"].append(child_cpu([sys.executable, "-c", "pass"]))
    best = {k: min(v) for k, v in rows.items()}
    size = sum(os.path.getsize(f) for f in files) / 1e6
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; best of {args.repeats}; "
          f"the report read {len(files)} files, {size:.0f} MB: {', '.join(sorted({Path(f).name for f in files}))}")
    rep = best["report"][0]
    for name, label in (("report", "routestats report, cache off"), ("hash", "hash floor: SHA-256 of those files"),
                        ("scan", "read floor: bare scan of those Parquet files"), ("start", "python -c pass")):
        cpu, wall = best[name]
        print(f"{label:48s} {cpu:7.2f} s CPU {wall:7.2f} s wall   report / this = {rep / cpu:5.1f}x")
    hashing = best["hash"][0] - best["start"][0]  # the hash work itself, without the interpreter start
    print(f"verification (hash floor minus python start) = {hashing:.2f} s CPU = {100 * hashing / rep:.1f} % "
          "of the report's CPU")
    # the other targets of the speed issue, each against its floor
    small = Path(str(data) + f"-small{args.small}")
    if not (small / "saab" / "run.json").is_file():
        write_runs(small, args.small, forms=("matrices", "reductions"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r"
        fixed = min(child_cpu([exe, "report", str(small), "-o", str(out), "--force", *SAME], env)[0]
                    for _ in range(args.repeats))
        small_files = [str(p) for p in small.rglob("reductions.parquet")] + [str(p) for p in small.rglob("examples.parquet")]
        small_scan = min(child_cpu([sys.executable, "-c", SCAN, *small_files])[0] for _ in range(args.repeats))
        cache = Path(tmp) / "cache"
        warm_env = {"ROUTESTATS_CACHE": str(cache)}
        child_cpu([exe, "report", str(data), "-o", str(out), "--force", *SAME], warm_env)  # fills the caches
        # the same command again: the report cache answers (every input file's stamp unchanged)
        warm = min(child_cpu([exe, "report", str(data), "-o", str(out), "--force", *SAME], warm_env)[0]
                   for _ in range(args.repeats))
        # another setting: the report is computed again, from the metrics cache (reductions not re-read)
        warm_changed = min(child_cpu([exe, "report", str(data), "-o", str(out), "--force", *SAME, "--seed", str(7 + i)],
                                     warm_env)[0] for i in range(args.repeats))
        rss = peak_rss_mb([exe, "report", str(data), "-o", str(out), "--force", *SAME], env)
    helpcpu = min(child_cpu([exe, "--help"])[0] for _ in range(5))
    n = args.examples
    marginal = (rep - fixed) / (n - args.small) * 1e3
    read_each = (best["scan"][0] - small_scan) / (n - args.small) * 1e3
    print()
    print(f"{'target':58s} {'measured':>10s} {'floor':>10s} {'ratio':>7s} {'goal':>8s}")
    for label, got, floor, goal in (
            (f"2 x {n} report CPU (s) vs reading its files", rep, best["scan"][0], 4.0),
            (f"2 x {n} report CPU (s), absolute", rep, None, 3.5),
            (f"fixed cost: 2 x {args.small} report CPU (s)", fixed, None, 2.0),
            ("marginal CPU per example (ms) vs reading its inputs", marginal, read_each, 2.0),
            (f"warm re-report (cache hit), 2 x {n} (s)", warm, None, 1.5),
            (f"another --seed (metrics cache; floor: the cold report), 2 x {n} (s)", warm_changed, rep, None),
            ("routestats --help CPU (s)", helpcpu, None, 0.15)):
        ratio = got / floor if floor else None
        verdict = "" if goal is None else "met" if (ratio if floor else got) <= goal else "NOT met"
        print(f"{label:58s} {got:10.3f} {('' if floor is None else f'{floor:.3f}'):>10s} "
              f"{('' if ratio is None else f'{ratio:.2f}x'):>7s} {('' if goal is None else '<= ' + str(goal)):>8s} {verdict}")
    print(f"{'peak RSS of the 2 x ' + str(n) + ' report (MB)':58s} {rss:10.0f}")

if __name__ == "__main__":
    main()
