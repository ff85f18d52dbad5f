"""Coverage of 95% intervals for a mean paired difference at small n (issue [true-words]).

``python benchmarks/bench_coverage.py [REPS]`` draws REPS samples of n per-example differences from
populations whose mean is known (normal, skewed, heavy-tailed, and the Δ SFM of exact-null-plus-effect
synthetic pairs approximated by a centred lognormal mixture) and prints, per n, the share of intervals that
cover the true mean for: the percentile bootstrap (what routestats printed before), the expanded
percentile bootstrap (Hesterberg 2015: the percentile interval at the levels
Φ(±√(n/(n−1)) t_{n−1, 0.975})), the Student t interval, and scipy's BCa. The table goes into
``docs/methods.md``; the rule it supports is in ``routestats.stats.inference.percentile_ci``.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from scipy import stats

POPULATIONS = {  # name: (draw(rng, size), true mean)
    "normal": (lambda rng, s: rng.standard_normal(s), 0.0),
    "skewed (lognormal σ=1)": (lambda rng, s: rng.lognormal(0.0, 1.0, s), float(np.exp(0.5))),
    "heavy tails (t, 3 df)": (lambda rng, s: rng.standard_t(3, s), 0.0),
}


def intervals(x: np.ndarray, rng: np.random.Generator, resamples: int = 999) -> dict[str, tuple[float, float]]:
    n = len(x)
    boot = x[rng.integers(0, n, (resamples, n))].mean(axis=1)
    out = {"percentile": tuple(np.quantile(boot, [0.025, 0.975]))}
    a = stats.norm.cdf(-np.sqrt(n / (n - 1)) * stats.t.ppf(0.975, n - 1))
    out["expanded percentile"] = tuple(np.quantile(boot, [a, 1 - a]))
    half = stats.t.ppf(0.975, n - 1) * x.std(ddof=1) / np.sqrt(n)
    out["t"] = (x.mean() - half, x.mean() + half)
    ci = stats.bootstrap((x,), np.mean, n_resamples=resamples, method="BCa", random_state=rng).confidence_interval
    out["BCa"] = (ci.low, ci.high)
    return out


def main(reps: int = 2000, sizes=(5, 6, 8, 12, 20, 40)) -> dict:
    rng = np.random.default_rng(2026)
    t0 = time.perf_counter()
    table = {}
    for name, (draw, mu) in POPULATIONS.items():
        for n in sizes:
            hits: dict[str, int] = {}
            for _ in range(reps):
                for method, (lo, hi) in intervals(draw(rng, n), rng).items():
                    hits[method] = hits.get(method, 0) + int(lo <= mu <= hi)
            table[(name, n)] = {m: h / reps for m, h in hits.items()}
            print(f"{name:24s} n={n:3d} " + "  ".join(f"{m} {v:.3f}" for m, v in table[(name, n)].items()),
                  flush=True)
    print(f"{reps} samples per cell, 999 resamples each; {time.perf_counter() - t0:.0f} s")
    return table


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
