"""Attention storage layouts at untouched-test scale, and the streaming report path.

Builds a synthetic paired run of 2 x N examples (default N = 2,336; lengths drawn like
DBpedia at cap 256: mean ~70, up to 256), 4 layers x 6 heads, then measures for each layer:

* ``f16-list``   one row per example x layer x head, matrix as list<float16>, zstd, no dictionary,
                 BYTE_STREAM_SPLIT (the default of routestats.RunWriter);
* ``f16-list-dict`` the same with pyarrow's default dictionary encoding (the known slow case);
* ``f16-blob``   the matrix as one binary blob per row;
* ``reductions`` per-query reductions only (routestats form "reductions").

Reported per layout: file size, write seconds, full-read seconds, peak RSS delta of a read,
and against raw float32 bytes. Then the metric pass of routestats over the default layout vs a
bare pyarrow scan of the same file (row group by row group), and the float16-vs-float32
difference in per-example SFM.

Run: ``python benchmarks/bench_storage.py [--examples 2336]``. Results go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

import routestats as rs
from routestats.rundir import schema as S
from routestats.rundir.write import RunWriter

FIELDS = {"named": {"3": "content", "4": "title"}, "mask_id": 5, "vocab_size": 6}


def lengths_like_dbpedia(rng, n, cap=256):
    x = np.clip(np.round(rng.lognormal(np.log(60), 0.45, n)), 8, cap).astype(int)
    return x


def attention(rng, L, H, n):
    z = rng.standard_normal((L, H, n, n)).astype(np.float32) * 2
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_runs(root: Path, n: int, seed: int = 0, dtype="float16", forms=("matrices",), pool: int = 0):
    """A synthetic 2 x n pair (baseline, saab). ``pool`` > 0 draws that many attention tensors per
    length and run and cycles through them (a large pair in minutes: the 2 x 70,000 scale test)."""
    rng = np.random.default_rng(seed)
    lens = lengths_like_dbpedia(rng, n)
    ex = pd.DataFrame({"example_id": np.arange(n), "split": "test", "source_index": np.arange(n),
                       "prepared_length": lens, "cap": 256,
                       "field_ids": [[4] * max(2, k // 8) + [3] * (k - max(2, k // 8)) for k in lens],
                       "in_test_sample": True})
    paths = []
    t0 = time.perf_counter()
    for variant in ("baseline", "saab"):
        w = RunWriter(root / variant, run_id=f"bench-{variant}", study="bench", factors={"variant": variant}, seed=0,
                      init_id="i", data_order_id="d", fields=FIELDS, overwrite=True)
        w.write_examples(ex)
        r2 = np.random.default_rng(seed + (variant == "saab"))
        drawn: dict = {}
        with w.attention(500, dtype=dtype, forms=forms) as sink:
            for i, k in enumerate(lens):
                if pool:
                    key = (int(k), i % pool)
                    if key not in drawn:
                        drawn[key] = attention(r2, 4, 6, int(k)).astype(np.float16 if dtype == "float16" else np.float32)
                    sink.add(i, drawn[key])
                else:
                    sink.add(i, attention(r2, 4, 6, int(k)))
        paths.append(w.finalize())
    return paths, time.perf_counter() - t0, lens


def rewrite(src: Path, dst: Path, **opts):
    t = pq.read_table(src)
    t0 = time.perf_counter()
    pq.write_table(t, dst, compression="zstd", row_group_size=8 * 24, **opts)
    return time.perf_counter() - t0


def to_blob(src: Path, dst: Path):
    t = pq.read_table(src)
    w = t["weights"].combine_chunks()
    offs = w.offsets.to_numpy()
    vals = w.values.to_numpy(zero_copy_only=False)
    blobs = [vals[offs[i]:offs[i + 1]].tobytes() for i in range(len(offs) - 1)]
    t2 = t.drop_columns(["weights"]).append_column("weights", pa.array(blobs, pa.binary()))
    t0 = time.perf_counter()
    pq.write_table(t2, dst, compression="zstd", use_dictionary=False, row_group_size=8 * 24)
    return time.perf_counter() - t0


def timed_read(path: Path):
    before = rss_mb()
    t0 = time.perf_counter()
    pf = pq.ParquetFile(path)
    n = 0
    for i in range(pf.num_row_groups):
        n += pf.read_row_group(i).num_rows
    return time.perf_counter() - t0, rss_mb() - before


def main(argv=None):
    os.environ["ROUTESTATS_CACHE"] = "off"  # measure computation, not the on-disk cache
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=2336)
    args = ap.parse_args(argv)
    print(f"load average: {os.getloadavg()[0]:.2f}; examples per run: {args.examples}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (b, v), secs, lens = write_runs(root / "f16", args.examples, forms=("matrices", "reductions"))
        raw = int(sum(4 * 24 * int(k) ** 2 for k in lens))
        mat = b / S.attention_file(500, "matrices")
        red = b / S.attention_file(500, "reductions")
        rows = [("f16-list (default)", os.path.getsize(mat), None)]
        alt = root / "dict.parquet"
        rows.append(("f16-list-dict", None, rewrite(mat, alt, use_dictionary=True)))
        blob = root / "blob.parquet"
        rows.append(("f16-blob", None, to_blob(mat, blob)))
        print(f"\nwrote 2 runs (matrices + reductions) in {secs:.1f} s; raw float32 bytes per run {raw / 1e6:.1f} MB\n")
        print("| layout | MB | vs raw float32 | full read (s) | read RSS delta (MB) |")
        print("|---|---|---|---|---|")
        for name, path in (("f16-list (default)", mat), ("f16-list-dict", alt), ("f16-blob", blob), ("reductions", red)):
            rt, mem = timed_read(path)
            print(f"| {name} | {os.path.getsize(path) / 1e6:.1f} | {os.path.getsize(path) / raw:.3f} | {rt:.2f} | {mem:.0f} |")
        # the metric pass vs a bare scan
        run_b, run_v = rs.load_run(b), rs.load_run(v)
        t0 = time.perf_counter()
        for p in (mat, v / S.attention_file(500, "matrices")):
            pf = pq.ParquetFile(p)
            for i in range(pf.num_row_groups):
                t = pf.read_row_group(i)
                t["weights"].combine_chunks().values.to_numpy(zero_copy_only=False)
        bare = time.perf_counter() - t0
        before = rss_mb()
        t0 = time.perf_counter()
        rs.head_metrics(run_b, form="matrices")
        rs.head_metrics(run_v, form="matrices")
        ours = time.perf_counter() - t0
        print(f"\nmetric pass (both runs, matrices): {ours:.2f} s vs bare pyarrow scan {bare:.2f} s "
              f"-> {ours / bare:.2f}x; peak RSS {rss_mb():.0f} MB (grew {rss_mb() - before:.0f} MB)")
        t0 = time.perf_counter()
        rs.head_metrics(rs.load_run(b), form="reductions")
        print(f"metric pass from reductions (one run): {time.perf_counter() - t0:.2f} s")
        # the whole report in a fresh process (no disk cache), peak RSS from /usr/bin/time
        import subprocess
        import sys

        for label, env_cache in (("cold (cache off)", "off"), ("cold, filling cache", str(root / "cache")),
                                 ("warm cache, other seed", str(root / "cache"))):
            seed = "7" if "other" in label else "1001"
            t0 = time.perf_counter()
            res = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "routestats.cli", "report",
                                  str(root / "f16"), "-o", str(root / "rep"), "--seed", seed],
                                 capture_output=True, text=True, env={**os.environ, "ROUTESTATS_CACHE": env_cache})
            wall = time.perf_counter() - t0
            rss = [ln for ln in res.stderr.splitlines() if "Maximum resident set size" in ln]
            peak = int(rss[0].split(":")[1]) / 1024 if rss else float("nan")
            print(f"routestats report ({label}): {wall:.1f} s wall, peak RSS {peak:.0f} MB, exit {res.returncode}; "
                  f"{wall / bare:.1f}x the bare scan")
        # float16 vs float32 storage effect on SFM
        (b32, _), _, _ = write_runs(root / "f32", min(args.examples, 400), dtype="float32")
        (b16, _), _, _ = write_runs(root / "f16s", min(args.examples, 400), dtype="float16")
        s32 = rs.sfm(rs.load_run(b32))["sfm"].to_numpy()
        s16 = rs.sfm(rs.load_run(b16))["sfm"].to_numpy()
        d = np.abs(s32 - s16)
        print(f"float16 vs float32 storage, per-example layer SFM: max |diff| {d.max():.2e}, mean {d.mean():.2e}")


if __name__ == "__main__":
    main()
