"""Planted-truth sweep of the pair report's sentences (issue [true-words]).

``python benchmarks/bench_claims.py [N_NULL] [N_PLANTED]`` writes N_NULL exact nulls and N_PLANTED pairs drawn
over the issue's ranges (n 5–1000, 2–30 layers, one-layer effects, ties, ceilings, censoring 0–80 %, causal,
three fields, two steps) by ``tests/planted_truth.py``, writes each report folder, and judges every printed
sentence with the independent checker there. It prints the share of true sentences, the numbers that differ
from their cells, the rate of *any* positive headline claim on the nulls, and the false sentences by kind.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.planted_truth import draw, run_scenario, summary  # noqa: E402


def main(n_null: int = 100, n_planted: int = 60) -> dict:
    rng = np.random.default_rng(2026)
    t0 = time.perf_counter()
    verdicts, positives, kinds = [], 0, Counter()
    for i in range(n_null + n_planted):
        null = i < n_null
        sc = draw(rng, null=null, max_n=1000)
        v, pos = run_scenario(sc, Path(tempfile.mkdtemp()))
        verdicts += v
        if null:
            positives += bool(pos)
            kinds.update(pos)
        if (i + 1) % 20 == 0:
            print(f"{i + 1} scenarios, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    out = {**summary(verdicts), "nulls": n_null, "null_any_positive_rate": positives / max(n_null, 1),
           "null_positive_kinds": dict(kinds), "planted": n_planted,
           "false_by_kind": dict(Counter(v.kind for v in verdicts if not v.true)),
           "seconds": round(time.perf_counter() - t0, 1)}
    print(out)
    for v in verdicts:
        if not v.true:
            print("FALSE", v.kind, v.problems, "|", v.sentence[:240])
    return out


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
