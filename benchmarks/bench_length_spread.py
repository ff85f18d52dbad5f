"""How often the length family claims an association when only Δ's spread changes with length (issue [true-words-3]).

Per size n, ``--nulls`` planted nulls of 4 layers, lengths drawn from 6-30 tokens (ties as real lengths have), each
layer's Δ of mean 0 at every length with a spread that changes with length: its SD 0.5 at or below the median length
and 3.0 above (``step``); t3 noise whose scale grows as length (``t3 linear``) or as length cubed (``cubic``); integer
Δ in -2..2, tripled above the median length (``discrete``: a metric of few values); and, apart, Δ independent of
length (``independent``). Each null is tested as the report tests it (:func:`routestats.stats.spearman.spearman_ci`
with the permutation draws: the larger of the permutation p and the HC2 slope p, Holm over the 4 layers) at the
family's share of α, 0.05 / 3; prints the share of nulls that name a layer, with its binomial SE, and the share of
samples in which a planted association in one layer (Δ = (length - 18) / 8 + N(0, 1)) is found (``power``).
Run: ``python benchmarks/bench_length_spread.py [--nulls 1000] [--permutations 2000]``.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from routestats.settings import Resampling
from routestats.stats.spearman import spearman_ci

K, ALPHA = 4, 0.05 / 3


def above_median(x):
    return (x > np.median(x))[:, None]


DESIGNS = {
    "step": lambda g, x: g.standard_normal((len(x), K)) * np.where(above_median(x), 3.0, 0.5),
    "t3 linear": lambda g, x: g.standard_t(3, (len(x), K)) * (x / 18)[:, None],
    "cubic": lambda g, x: g.standard_normal((len(x), K)) * ((x / 18) ** 3)[:, None],
    "discrete": lambda g, x: g.integers(-2, 3, (len(x), K)) * np.where(above_median(x), 3.0, 1.0),
    "independent": lambda g, x: g.standard_normal((len(x), K)),
    "power": lambda g, x: g.standard_normal((len(x), K)) + ((x - 18) / 8)[:, None] * (np.arange(K) == 0),
}


def family_rate(n: int, nulls: int, permutations: int, design: str, seed: int) -> float:
    rng = np.random.default_rng(seed)
    named = 0
    r = Resampling(length_resamples=20)  # the interval is not what is measured: few resamples
    for s in range(nulls):
        x = rng.integers(6, 31, n).astype(float)
        res = spearman_ci(x, DESIGNS[design](rng, x), resampling=r, seed=s, permutations=permutations)
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
        cells = []
        for i, design in enumerate(DESIGNS):
            q = family_rate(n, a.nulls, a.permutations, design, 100 * n + i)
            cells.append(f"{design} {q:.3f} ± {np.sqrt(q * (1 - q) / a.nulls):.3f}")
        print(f"n {n:3d}: " + "; ".join(cells) + f" (share {ALPHA:.3f}; {time.process_time() - t:.0f} s CPU)",
              flush=True)


if __name__ == "__main__":
    main()
