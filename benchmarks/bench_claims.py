"""Planted-truth sweep of the pair report's sentences (issue [true-words]).

``python benchmarks/bench_claims.py [N_NULL] [N_PLANTED] [N_STUDIES]`` writes N_NULL exact nulls and N_PLANTED pairs drawn
over the issue's ranges (n 5–1000, 2–32 layers, heavy-tailed differences, one-layer effects, ties, ceilings, censoring 0–80 %, causal,
three fields, two steps, undefined examples) and N_STUDIES trees of 3, 5 or 8 seeds by ``tests/planted_truth.py``, writes each report folder, and judges every printed
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

from tests.planted_studies import StudyScenario, run_study  # noqa: E402
from tests.planted_truth import draw, run_scenario, summary  # noqa: E402


def main(n_null: int = 100, n_planted: int = 60, n_studies: int = 12) -> dict:
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
    study_verdicts = []
    for i in range(n_studies):
        k = int(rng.choice([3, 5, 8]))
        layers = int(rng.choice([2, 3, 4, 6]))
        effect = tuple(float(rng.choice([0.0, 0.0, 0.1, -0.1, 0.3])) for _ in range(layers))
        sc = StudyScenario(tuple(int(s) for s in rng.choice(1000, k, replace=False)), int(rng.choice([8, 12, 24])),
                           effect, bias=float(rng.choice([0.5, 4.0])))
        study_verdicts += run_study(sc, Path(tempfile.mkdtemp()))
    verdicts += study_verdicts
    out = {**summary(verdicts), "studies": n_studies, "study": summary(study_verdicts), "nulls": n_null, "null_any_positive_rate": positives / max(n_null, 1),
           "null_positive_kinds": dict(kinds), "planted": n_planted,
           "false_by_kind": dict(Counter(v.kind for v in verdicts if not v.true)),
           "seconds": round(time.perf_counter() - t0, 1)}
    print(out)
    for v in verdicts:
        if not v.true:
            print("FALSE", v.kind, v.problems, "|", v.sentence[:240])
    return out


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]))
