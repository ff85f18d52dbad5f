"""How often the length family claims an association when only Δ's spread changes with length (issue [true-words-3]).

Per size n, ``--nulls`` planted nulls of 4 layers: lengths drawn from 6-30 tokens (ties as real lengths have), each
layer's Δ of mean 0 at every length, its SD 0.5 at or below the median length and 3.0 above (a dependence of spread,
no association of centre), and, apart, Δ independent of length. Each null is tested as the report tests it
(:func:`routestats.stats.spearman.spearman_ci` with the permutation draws: the larger of the permutation p and the
studentised p, Holm over the 4 layers) at the family's share of α, 0.05 / 3; prints the share of nulls that name a
layer, with its binomial SE. Run: ``python benchmarks/bench_length_spread.py [--nulls 1000] [--permutations 2000]``.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from routestats.settings import Resampling
from routestats.stats.spearman import spearman_ci

K, ALPHA = 4, 0.05 / 3


def family_rate(n: int, nulls: int, permutations: int, spread: bool, seed: int) -> float:
    rng = np.random.default_rng(seed)
    named = 0
    r = Resampling(length_resamples=20)  # the interval is not what is measured: few resamples
    for s in range(nulls):
        x = rng.integers(6, 31, n).astype(float)
        sd = np.where(x > np.median(x), 3.0, 0.5)[:, None] if spread else 1.0
        y = rng.standard_normal((n, K)) * sd
        res = spearman_ci(x, y, resampling=r, seed=s, permutations=permutations)
        named += bool((res.p_adj < ALPHA).any())
    return named / nulls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nulls", type=int, default=1000)
    ap.add_argument("--permutations", type=int, default=2000)
    ap.add_argument("--sizes", default="8,12,16,20,40")
    a = ap.parse_args()
    print(f"load {os.getloadavg()[0]:.2f}; {K} layers, Holm at α {ALPHA:.4f}; {a.nulls} nulls a cell, "
          f"{a.permutations} permutations each")
    for n in [int(v) for v in a.sizes.split(",")]:
        t = time.process_time()
        rates = [family_rate(n, a.nulls, a.permutations, spread, 100 * n + spread) for spread in (True, False)]
        se = [np.sqrt(q * (1 - q) / a.nulls) for q in rates]
        print(f"n {n:3d}: spread changes with length {rates[0]:.3f} ± {se[0]:.3f}; independent {rates[1]:.3f} ± "
              f"{se[1]:.3f} (share {ALPHA:.3f}; {time.process_time() - t:.0f} s CPU)", flush=True)


if __name__ == "__main__":
    main()
