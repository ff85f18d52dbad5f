"""``benchmarks/bench_report.py`` runs at HEAD (a fast variant): a refactor that breaks it fails here, not in a
release's performance table."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_statistics_record_their_work_through_the_public_hook():
    # the shapes bench_report's statistics floor redoes, recorded by the statistics themselves
    import routestats as rs
    from routestats.rundir.synthetic import demo_run_dir
    from routestats.stats.work import KINDS, recording

    with recording() as work:
        rs.analyse(demo_run_dir(), resamples=200, permutations=300, length_resamples=100, flow="off", seed=3)
    assert set(work) == set(KINDS)
    # the effects table: 32 examples x 4 layers, 300 sign patterns, the report's seed
    assert [32, 4, 300, 3] in work["signs"]
    assert [32, 200] in work["boot_draws"] and all(B == 200 for _, _, B in work["boot_tables"])
    # the length analyses' Spearman resamples, drawn in chunks: 100 per column in all
    assert work["spearman"] and sum(B for B, _ in work["spearman"]) % 100 == 0
    assert work["profile"]  # the profile-shape test
    # the length association's permutation p: the report's 300 permutations of the examples of the length analyses
    # (the demo run's 15 length-sample examples), one column a layer
    assert [300, 15, 4] in work["pairings"]
    with recording() as outside:
        pass
    assert not any(outside.values())  # nothing is noted without a computation


@pytest.mark.slow  # about a minute on 2 cores: five reports of small pairs and their floors
def test_bench_report_runs_at_a_small_size(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_report.py"), "--examples", "160",
                          "--small", "48", "--repeats", "1", "--data", str(tmp_path / "pair")],
                         capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    calls = re.search(r"statistics the report computed: (.*)", out).group(1)
    assert re.search(r"[1-9]\d* signs calls", calls) and re.search(r"[1-9]\d* boot_tables calls", calls)
    # every target row has a measured number, and the ratios against the floors are printed
    row = re.search(r"2 x 160 report CPU \(s\) vs reading \+ its statistics' floor\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x",
                    out)
    assert row and float(row.group(1)) > 0 and float(row.group(2)) > 0
    assert float(row.group(3)) == pytest.approx(float(row.group(1)) / float(row.group(2)), rel=0.01)
    assert re.search(r"peak RSS of the 2 x 160 report \(MB\)\s+\d+", out)
    # the machine's speed at imports, against which the goals given in seconds are read
    ref = re.search(r"this machine's speed: python -c 'import numpy, pandas' CPU \(s\)\s+([\d.]+)", out)
    assert ref and float(ref.group(1)) > 0
    json.loads(json.dumps(calls))  # printable
