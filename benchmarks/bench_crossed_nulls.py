"""How often an exact null *study with crossed seeds* makes a positive headline claim (issue [true-words-2]).

``python benchmarks/bench_crossed_nulls.py N [SEED]`` writes N study trees whose seeds evaluate the *same* examples
(``synthetic_pair(..., examples_seed=...)``: seeds crossed with examples) with independent attention noise and no
planted change (``exact_null=True``, effect 0 in every layer): 3-5 seeds, 12-60 examples, 2-4 layers. Each is
analysed as ``routestats report`` analyses a tree (its study part only: ``pairs="none"``), and the printed headline
is read from ``claims.csv``: a positive claim is a layer said to rise or fall across seeds (or any of the pair
report's positive kinds), and, separately, the per-example Δ said to *correlate* across seeds (planted r = 0).
docs/methods.md records the rates.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.planted_truth import POSITIVE  # noqa: E402


def one(rng, root: Path) -> tuple[set, bool, dict]:
    """One crossed exact-null study: (positive headline kinds, correlation claimed, its design)."""
    import reports
    import routestats as rs
    from routestats.rundir.synthetic import synthetic_pair

    k, n, layers = int(rng.integers(3, 6)), int(rng.choice([12, 24, 40, 60])), int(rng.integers(2, 5))
    shared = int(rng.integers(1 << 30))
    for s in rng.choice(10_000, size=k, replace=False):
        synthetic_pair(root / "runs" / f"seed{s}", seed=int(s), n_examples=n, n_layers=layers, n_heads=2,
                       same_field_bias=[0.5] * layers, effect=[0.0] * layers, exact_null=True,
                       examples_seed=shared)
    rep = rs.analyse(root / "runs", resamples=499, permutations=999, length_resamples=99, flow="off", pairs="none",
                     seed=int(rng.integers(1000)))
    reports.write(rep, root / "out", ("markdown",))
    c = pd.read_csv(root / "out" / "claims.csv")
    printed = c[c["printed"]]
    head = printed[printed["where"] == "headline"]
    # "the per-example Δ correlates across seeds (...)", not "whether the per-example Δ correlates ... is not shown"
    correlated = printed["sentence"].str.contains(r"(?<!whether )the per-example Δ correlates across seeds \(").any()
    return set(head["kind"]) & POSITIVE, bool(correlated), {"seeds": k, "n": n, "layers": layers}


def main(n: int, seed: int = 2028) -> dict:
    rng = np.random.default_rng(seed)
    positive, correlated, kinds, t0 = 0, 0, Counter(), time.perf_counter()
    for i in range(n):
        root = Path(tempfile.mkdtemp())
        try:
            pos, corr, _ = one(rng, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        positive += bool(pos)
        correlated += corr
        kinds.update(pos)
        if (i + 1) % 25 == 0:
            print(f"{i + 1} crossed nulls, {positive} positive, {correlated} correlated, "
                  f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    out = {"crossed_nulls": n, "any_positive": positive, "rate": positive / max(n, 1), "by_kind": dict(kinds),
           "correlation_claimed": correlated, "seconds": round(time.perf_counter() - t0, 1)}
    print(out)
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]) if args else 100, int(args[1]) if len(args) > 1 else 2028)
