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
* the **statistics floor**: the random work METHODS fixes for the report's statistics (10,000
  bootstrap resamples, 20,000 sign patterns, 2,000 Spearman resamples per column), done at its floor
  in a process that imports only numpy: the shapes are recorded from the report's own calls (one
  in-process report inside :func:`routestats.stats.work.recording`, the statistics' public record of
  their work), each example set's draws are made once (raw generator
  words, unpacked bits, resample counts, converted once to float64) and every table pays only its
  matrix product; Spearman pays only its draws and counts (no ranks); the length association's permutation p
  (docs/methods.md: P random pairings of each length column) pays its P shuffles and one product (counted since
  the [report-floor] issue; earlier floors left it out, so their ratios were larger by its share). A lower bound on any
  implementation of the canonical procedures;
* ``python -c pass`` (the interpreter start every command pays);
* ``python -c 'import numpy, pandas'``: this machine's speed at imports, which most of the fixed cost is, so that the
  goals given in seconds can be read across machines.

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
# every floor runs with the process settings the CLI makes for itself (routestats.cli.tune_process_memory and
# one_blas_thread), so that no floor is slower, or spins more, for want of them
FLOOR_ENV = {"ARROW_DEFAULT_MEMORY_POOL": "jemalloc", "MALLOC_MMAP_THRESHOLD_": str(256 << 20),
             "MALLOC_TRIM_THRESHOLD_": str(256 << 20), "OPENBLAS_NUM_THREADS": "1"}

HASH = """
import hashlib, os, sys
for f in sys.argv[1:]:  # the same chunked SHA-256 as routestats.rundir.atomic.sha256_file, nothing imported
    if "@" in f:  # PATH@START+LENGTH: one piece of a file read in part (its own SHA-256)
        path, span = f.rsplit("@", 1)
        start, length = map(int, span.split("+"))
        fd = os.open(path, os.O_RDONLY)
        hashlib.sha256(os.pread(fd, length, start))
        os.close(fd)
        continue
    h = hashlib.sha256()
    with open(f, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
"""
RECORD = """
import json, sys
sys.argv = ["routestats", "report", sys.argv[1], "-o", sys.argv[2], "--force", "--flow", "off"]
from routestats.cli import main
from routestats.stats.work import recording  # the statistics' own record of their work: no function patched
with recording() as calls:
    try:
        main()
    except SystemExit:
        pass
print(json.dumps(calls))
"""
STATS_FLOOR = """
import json, sys
import numpy as np
calls = json.loads(sys.argv[1])
rng = np.random.default_rng(0)
sets = {}
for n, k, P, seed in calls["signs"]:  # tables sharing an example set and seed share its sign draws
    sets.setdefault((n, P, seed), []).append(k)
for (n, P, _seed), ks in sets.items():
    words = -(-n // 64)
    D = [rng.random((n, k)) for k in ks]
    for s in range(0, P, 2048):
        c = min(2048, P - s)
        raw = rng.bit_generator.random_raw(c * words).astype("<u8")
        f = np.unpackbits(raw.view(np.uint8).reshape(c, words * 8), axis=1, bitorder="little")[:, :n].astype(np.float64)
        for d in D:
            f @ d
tables = {}
for n, k, B in calls["boot_tables"]:
    tables.setdefault((n, B), []).append(k)
for n, B in {tuple(x) for x in calls["boot_draws"]} | set(tables):
    D = [rng.random((n, k)) for k in tables.get((n, B), [])]
    for s in range(0, B, 512):
        c = min(512, B - s)
        idx = (rng.random((c, n)) * n).astype(np.int64) + (np.arange(c) * n)[:, None]
        cnt = np.bincount(idx.ravel(), minlength=c * n).reshape(c, n).astype(np.float64)
        for d in D:
            cnt @ d
for b, n in calls["spearman"]:
    idx = rng.integers(0, n, size=(b, n)) + (np.arange(b) * n)[:, None]
    np.bincount(idx.ravel(), minlength=b * n)
for P, n, k in calls.get("pairings", []):  # the length association's permutation p: P shuffles of n ranks, one product
    y = rng.random((n, k))
    for s in range(0, P, 1024):
        rows = np.tile(rng.random(n), (min(1024, P - s), 1))
        for row in rows:
            rng.shuffle(row)
        rows @ y
for rows, n, L in calls["profile"]:
    bits = (rng.bit_generator.random_raw(-(-rows * n // 2)).astype("<u8").view("<u4")[: rows * n] >> 31)
    (bits.reshape(rows, n).astype(np.float64) @ rng.random((n, L)))
"""
SCAN = """
import sys
import pyarrow.parquet as pq
for f in sys.argv[1:]:
    pf = pq.ParquetFile(f)
    for i in range(pf.num_row_groups):
        pf.read_row_group(i)
"""


def record_statistics(data: Path, out: Path, env: dict) -> str:
    """JSON of the shapes of the statistics one report of ``data`` computes (see :data:`RECORD`)."""
    res = subprocess.run([sys.executable, "-c", RECORD, str(data), str(out)], check=True, capture_output=True,
                         text=True, env={**os.environ, **env})
    return res.stdout.strip().splitlines()[-1]


def measure_report(data: Path, exe: str, repeats: int) -> tuple[dict, list[str], list[str], str]:
    """The report of ``data`` and its floors, interleaved ``repeats`` times: (the best (CPU, wall) of each, the files
    the report verified, the pieces of files it read in part, the statistics it computed as JSON)."""
    env = {"ROUTESTATS_CACHE": "off"}
    rows: dict[str, list] = {"report": [], "hash": [], "scan": [], "stats": [], "start": []}
    files: list[str] = []
    pieces: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r"
        rec = record_statistics(data, out, env)
        for _ in range(repeats):
            rows["report"].append(child_cpu([exe, "report", str(data), "-o", str(out), "--force", *SAME], env))
            if not files:
                files, pieces = verified_files(out)
            rows["hash"].append(child_cpu([sys.executable, "-c", HASH, *files, *pieces]))
            rows["scan"].append(child_cpu([sys.executable, "-c", SCAN, *[f for f in files if f.endswith(".parquet")]],
                                          FLOOR_ENV))
            rows["stats"].append(child_cpu([sys.executable, "-c", STATS_FLOOR, rec], FLOOR_ENV))
            rows["start"].append(child_cpu([sys.executable, "-c", "pass"]))
    return {k: min(v) for k, v in rows.items()}, files, pieces, rec


def verified_files(out: Path) -> tuple[list[str], list[str]]:
    """The files a report verified (= read), from the provenance JSON its page embeds, and the 8 MiB pieces of the
    files it read in part (the word map's example: the hash floor hashes the same pieces)."""
    page = (out / "report.html").read_text()
    prov = json.loads(html_lib.unescape(page.split('<pre class="mono">', 1)[1].split("</pre>", 1)[0]))
    files: list[str] = []
    pieces: list[str] = []
    for role in ("baseline", "variant"):
        r = prov["runs"][role]
        files += [str(Path(r["path"]) / p) for p in r["files"]]
        for p, read in r.get("files_read_in_part", {}).items():
            piece = 8 << 20  # routestats.rundir.schema.VERIFY_PART_BYTES (nothing imported here)
            pieces += [f"{Path(r['path']) / p}@{i * piece}+{piece}" for i in read["pieces"]]
    return files, pieces


def print_floors(best: dict, files: list[str], pieces: list[str], rec: str, repeats: int) -> None:
    size = sum(os.path.getsize(f) for f in files) / 1e6
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; best of {repeats}; "
          f"the report read {len(files)} files, {size:.0f} MB: {', '.join(sorted({Path(f).name for f in files}))}"
          + (f"; and {len(pieces)} verified 8 MiB pieces of files read in part (hash floor: those pieces; "
             "scan floor: not counted)" if pieces else ""))
    rep = best["report"][0]
    for name, label in (("report", "routestats report, cache off"), ("hash", "hash floor: SHA-256 of those files"),
                        ("scan", "read floor: bare scan of those Parquet files"),
                        ("stats", "statistics floor: the canonical draws + products"), ("start", "python -c pass")):
        cpu, wall = best[name]
        print(f"{label:48s} {cpu:7.2f} s CPU {wall:7.2f} s wall   report / this = {rep / cpu:5.1f}x")
    hashing = best["hash"][0] - best["start"][0]  # the hash work itself, without the interpreter start
    print(f"verification (hash floor minus python start) = {hashing:.2f} s CPU = {100 * hashing / rep:.1f} % "
          "of the report's CPU")
    calls = json.loads(rec)
    print("statistics the report computed: " + ", ".join(f"{len(v)} {k} calls" for k, v in calls.items()))


def measure_small_and_warm(data: Path, exe: str, n_small: int, repeats: int) -> dict:
    """The fixed cost (a 2 x ``n_small`` pair's report) and its floors, the warm re-reports, peak RSS, --help."""
    from bench_storage import write_runs

    env = {"ROUTESTATS_CACHE": "off"}
    small = Path(str(data) + f"-small{n_small}")
    if not (small / "saab" / "run.json").is_file():
        write_runs(small, n_small, forms=("matrices", "reductions"))
    got = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r"
        got["fixed"] = min(child_cpu([exe, "report", str(small), "-o", str(out), "--force", *SAME], env)[0]
                           for _ in range(repeats))
        small_files = [str(p) for p in small.rglob("reductions.parquet")] + [str(p) for p in
                                                                             small.rglob("examples.parquet")]
        got["scan"] = min(child_cpu([sys.executable, "-c", SCAN, *small_files], FLOOR_ENV)[0] for _ in range(repeats))
        small_rec = record_statistics(small, out, env)
        got["stats"] = min(child_cpu([sys.executable, "-c", STATS_FLOOR, small_rec], FLOOR_ENV)[0]
                           for _ in range(repeats))
        warm_env = {"ROUTESTATS_CACHE": str(Path(tmp) / "cache")}
        again = [exe, "report", str(data), "-o", str(out), "--force", *SAME]
        child_cpu(again, warm_env)  # fills the caches
        # the same command again: the report cache answers (every input file's stamp unchanged)
        got["warm"] = min(child_cpu(again, warm_env)[0] for _ in range(repeats))
        # another setting: the report is computed again, from the metrics cache (reductions not re-read)
        got["warm_changed"] = min(child_cpu([*again, "--seed", str(7 + i)], warm_env)[0] for i in range(repeats))
        got["rss"] = peak_rss_mb(again, env)
    got["help"] = min(child_cpu([exe, "--help"])[0] for _ in range(5))
    # the machine's speed at what the fixed cost is mostly made of (imports): absolute goals read against it
    got["reference"] = min(child_cpu([sys.executable, "-c", "import numpy, pandas"], FLOOR_ENV)[0] for _ in range(5))
    return got


def print_targets(best: dict, small: dict, n: int, n_small: int) -> None:
    """Each target of the [report-floor] issue against its floor."""
    rep = best["report"][0]
    work_floor = best["scan"][0] + best["stats"][0] - best["start"][0]  # one interpreter start, not two
    marginal = (rep - small["fixed"]) / (n - n_small) * 1e3
    read_each = (best["scan"][0] - small["scan"]) / (n - n_small) * 1e3
    stats_each = (best["stats"][0] - small["stats"]) / (n - n_small) * 1e3
    print()
    print(f"{'target':68s} {'measured':>10s} {'floor':>10s} {'ratio':>7s} {'goal':>8s}")
    for label, got, floor, goal in (
            (f"2 x {n} report CPU (s) vs reading its files", rep, best["scan"][0], None),
            (f"2 x {n} report CPU (s) vs reading + its statistics' floor", rep, work_floor, 2.0),
            (f"fixed cost: 2 x {n_small} report CPU (s)", small["fixed"], None, 2.0),
            ("marginal CPU per example (ms) vs reading its inputs", marginal, read_each, None),
            ("marginal CPU per example (ms) vs reading + statistics' floor", marginal, read_each + stats_each, None),
            (f"warm re-report (cache hit), 2 x {n} (s)", small["warm"], None, 0.5),
            (f"another --seed (metrics cache; floor: the cold report), 2 x {n} (s)", small["warm_changed"], rep, None),
            ("routestats --help CPU (s)", small["help"], None, 0.15)):
        ratio = got / floor if floor else None
        verdict = "" if goal is None else "met" if (ratio if floor else got) <= goal else "NOT met"
        print(f"{label:68s} {got:10.3f} {('' if floor is None else f'{floor:.3f}'):>10s} "
              f"{('' if ratio is None else f'{ratio:.2f}x'):>7s} {('' if goal is None else '<= ' + str(goal)):>8s} "
              f"{verdict}")
    print(f"{'peak RSS of the 2 x ' + str(n) + ' report (MB)':68s} {small['rss']:10.0f}")
    ref = "this machine's speed: python -c 'import numpy, pandas' CPU (s)"
    print(f"{ref:68s} {small['reference']:10.3f}")


def compile_project() -> None:
    """Byte-compile the project's packages, as an installed package is: where the environment sets
    PYTHONDONTWRITEBYTECODE, every process would otherwise compile each imported module of the project afresh
    (0.2 s of a 2 x 64 report, measured), a cost no installed package pays."""
    root = HERE.parent
    subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(root / p) for p in ("routestats", "reports"))],
                   check=True, stdout=subprocess.DEVNULL)


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
    compile_project()
    best, files, pieces, rec = measure_report(data, exe, args.repeats)
    print_floors(best, files, pieces, rec, args.repeats)
    small = measure_small_and_warm(data, exe, args.small, args.repeats)
    print_targets(best, small, args.examples, args.small)


if __name__ == "__main__":
    main()
