"""How often an exact null makes a positive headline claim (issue [true-words-2]).

``python benchmarks/bench_nulls.py N [SEED]`` writes N exact nulls drawn as the planted-truth sweep draws them
(``tests/planted_truth.draw(null=True, max_n=300)``: n 5–300, 2–32 layers, censoring, causal runs, three fields,
a quarter with two checkpoint steps, a fifth heavy-tailed, some with a bias-off evaluation), analyses each, and
counts the reports whose headline prints a positive claim (``tests/planted_truth.any_positive``: a layer that rose
or fell, a profile shape, a length association, an early change), by kind and for the two-step, heavy-tailed and
bias-off ones. ``--two-step N`` draws two-step nulls only (n 8–48, 2–4 layers).
docs/methods.md records the rates (1,000 nulls: 29 min on 2 cores).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.planted_truth import Scenario, draw, run_scenario  # noqa: E402


def main(n: int, seed: int = 2027, two_step: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    positive, kinds, steps2, steps2_positive, t0 = 0, Counter(), 0, 0, time.perf_counter()
    subsets = Counter()  # (subset, "n" or "positive"): heavy-tailed and bias-off nulls counted apart
    for i in range(n):
        if two_step:
            size = int(rng.choice([8, 12, 24, 48]))  # drawn first: the stream docs/methods.md's numbers came from
            sc = Scenario(seed=int(rng.integers(1 << 30)), n=size, effect=(0.0,) * int(rng.choice([2, 3, 4])),
                          steps=(10, 100))
        else:
            sc = draw(rng, null=True, max_n=300)
        root = Path(tempfile.mkdtemp())
        _, pos = run_scenario(sc, root)
        shutil.rmtree(root, ignore_errors=True)
        positive += bool(pos)
        kinds.update(pos)
        if len(sc.steps) > 1:
            steps2 += 1
            steps2_positive += bool(pos)
        for name, member in (("heavy_tailed", sc.noise_df is not None), ("bias_off", sc.learned is not None)):
            subsets[(name, "n")] += member
            subsets[(name, "positive")] += member and bool(pos)
        if (i + 1) % 50 == 0:
            print(f"{i + 1} nulls, {positive} positive, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    out = {"nulls": n, "any_positive": positive, "rate": positive / max(n, 1), "by_kind": dict(kinds),
           "two_step": steps2, "two_step_positive": steps2_positive,
           **{f"{a}_{b}": c for (a, b), c in sorted(subsets.items())}, "seconds": round(time.perf_counter() - t0, 1)}
    print(out)
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    two = "--two-step" in args
    args = [a for a in args if a != "--two-step"]
    main(int(args[0]) if args else 100, int(args[1]) if len(args) > 1 else (7 if two else 2027), two)
