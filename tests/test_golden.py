"""Golden hashes of every report table and every HTML table cell (written before the [shape] move).

``ROUTESTATS_UPDATE_GOLDEN=1 pytest tests/test_golden.py`` rewrites the expected hashes in
``tests/golden/reports.json``. They were first written on the code as it stood before the layers were
moved into subpackages, and rewritten once at 12 digits (commit 734f78f) from code whose 17-digit
hashes equal those of 07f61e2 on the same machine. A refactor that changes any number, column, dtype
or rendered cell text fails here, and so does any change of ``claims.csv`` (every sentence the report
considered, its rows and its preconditions), hashed byte for byte since the [compose] move. Each table is hashed from its CSV with 12 significant digits: any
change beyond 1e-12 relative shows, while the last-bit differences of machine-specific vector maths
do not (numpy's SIMD loops and the OpenBLAS kernel are chosen per CPU: on an AVX2 machine 11 tables,
the perplexities among them, differed from 17-digit hashes written on another machine). To prove a
refactor bitwise, compare two commits' 17-digit hashes on one machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest


GOLDEN = Path(__file__).parent / "golden" / "reports.json"
RESAMPLES = dict(resamples=400, permutations=400, seed=7)


def frame_hash(df: pd.DataFrame) -> str:
    text = df.to_csv(index=False, float_format="%.12g") + "|" + ",".join(f"{c}:{t}" for c, t in df.dtypes.items())
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def html_cells(html: str) -> list[str]:
    """One hash per HTML data table (its header and cell texts), sorted (section order may move)."""
    out = []
    for t in re.findall(r'<table class="data[^"]*"[^>]*>(.*?)</table>', html, flags=re.S):
        cells = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", t, flags=re.S)
        out.append(hashlib.sha256("\x1f".join(cells).encode()).hexdigest()[:16])
    return sorted(out)


def _reports(tmp: Path) -> dict:
    """name -> (tables dict, html text) for the demo pair, a synthetic study and a synthetic MoFA tree."""
    from tests.golden_build import build_all

    return build_all(tmp, RESAMPLES)


def _current(tmp: Path) -> dict:
    got = {}
    for name, (tables, html, claims) in _reports(tmp).items():
        got[name] = {"tables": {k: frame_hash(v) for k, v in sorted(tables.items())}, "html": html_cells(html),
                     "claims": hashlib.sha256(claims.encode()).hexdigest()[:16]}
    return got


@pytest.mark.slow
def test_report_tables_and_cells_unchanged(tmp_path):
    got = _current(tmp_path)
    if os.environ.get("ROUTESTATS_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name]["tables"] == want[name]["tables"], name
        assert got[name]["html"] == want[name]["html"], name
        assert got[name]["claims"] == want[name]["claims"], name  # claims.csv, byte for byte
