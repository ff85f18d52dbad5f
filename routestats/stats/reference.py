"""The reference implementation's random procedures (METHODS 3.1-3.2), kept for bitwise comparison with it:
``numpy`` (``default_rng(seed)`` consumed column by column) and ``python-random`` (``random.Random`` one draw at a
time). :func:`routestats.stats.inference.paired_inference` runs them for ``mode="numpy"`` / ``"python-random"``.
Each returns (interval lows, interval highs, sign-flip counts) per column."""

from __future__ import annotations

import math
import random

import numpy as np

from routestats.stats.percentile import percentile_ci, quantile_levels

__all__ = ["numpy_mode", "python_mode"]


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
