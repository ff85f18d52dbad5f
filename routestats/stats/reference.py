"""The reference implementation's random procedures (METHODS 3.1-3.2), kept for bitwise comparison with it:
``numpy`` (``default_rng(seed)`` consumed column by column) and ``python-random`` (``random.Random`` one draw at a
time). :func:`routestats.stats.inference.paired_inference` runs them for ``mode="numpy"`` / ``"python-random"``.
Each returns (interval lows, interval highs, sign-flip counts) per column."""

from __future__ import annotations

import functools
import math
import random

import numpy as np

from routestats.stats.percentile import percentile_ci, quantile_levels

__all__ = ["numpy_mode", "python_mode", "reference_floor"]


def numpy_mode(d, resamples, permutations, rng, confidence):
    n, k = d.shape
    lo, hi, count = np.empty(k), np.empty(k), np.zeros(k, dtype=np.int64)
    for j in range(k):
        x = d[:, j]
        idx = rng.integers(0, n, size=(resamples, n))
        boot = x[idx].mean(axis=1)
        lo[j], hi[j] = percentile_ci(boot, confidence)
        signs = rng.choice([-1.0, 1.0], size=(permutations, n), replace=True)
        perm = np.abs((signs * x).mean(axis=1))
        count[j] = int((perm >= abs(x.mean())).sum())
    return lo, hi, count


def python_mode(d, resamples, permutations, seed, confidence):
    n, k = d.shape
    lo, hi, count = np.empty(k), np.empty(k), np.zeros(k, dtype=np.int64)
    lo_q, hi_q = quantile_levels(confidence)
    for j in range(k):
        x = d[:, j].tolist()
        r = random.Random(seed + j)
        means = sorted(sum(x[r.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
        lo[j] = means[math.floor(lo_q * (resamples - 1))]
        hi[j] = means[math.ceil(hi_q * (resamples - 1))]
        r = random.Random(seed + 100 + j)
        obs = abs(sum(x) / n)
        c = 0
        for _ in range(permutations):
            s = sum(v if r.getrandbits(1) else -v for v in x)
            if abs(s / n) >= obs:
                c += 1
        count[j] = c
    return lo, hi, count


@functools.lru_cache(maxsize=64)
def reference_floor(mode: str, n: int, columns: int, resamples: int, permutations: int, seed: int) -> float:
    """The smallest raw sign-flip p either reference mode gives any of ``columns`` columns of ``n`` examples, with its
    draws as they are made (each column draws its own sign patterns): (c + 1)/(P + 1), c the fewest patterns that
    keep or flip every sign among a column's P, which data all of one sign reach exactly. Beyond 62 examples 1/(P + 1)
    (c is 0 but with probability below 1e-9; it is a bound either way).

    >>> reference_floor("numpy", 12, 1, 100, 4999, 1) < max(2 / 2**12, 1 / 5000)  # the draws' own, not the max rule
    True
    """
    if n > 62:
        return 1.0 / (permutations + 1)
    fewest = permutations
    if mode == "numpy":  # numpy_mode's stream: each column's bootstrap indices, then its signs
        rng = np.random.default_rng(seed)
        for _ in range(columns):
            rng.integers(0, n, size=(resamples, n))
            signs = rng.choice([-1.0, 1.0], size=(permutations, n), replace=True)
            fewest = min(fewest, int((np.abs(signs.sum(axis=1)) == n).sum()))
    else:  # python_mode's: a Random of its own for each column's signs, one bit an example
        for j in range(columns):
            r = random.Random(seed + 100 + j)
            c = 0
            for _ in range(permutations):
                bits = sum(r.getrandbits(1) for _ in range(n))
                c += bits in (0, n)
            fewest = min(fewest, c)
    return (fewest + 1) / (permutations + 1)

