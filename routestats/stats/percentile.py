"""Percentile bootstrap intervals, and how much a nominal 95 % one covers with few units (the simulation of
``benchmarks/bench_coverage.py``)."""

from __future__ import annotations

import numpy as np

from routestats.settings import Resampling

__all__ = ["PERCENTILE_COVERAGE_95", "SMALL_N", "percentile_coverage", "percentile_ci", "quantile_levels"]

# Coverage of the nominal 95% percentile interval of a mean, by n: (normal population, lognormal σ = 1), from
# benchmarks/bench_coverage.py (1000 samples per cell, 999 resamples each; docs/methods.md has the full table).
PERCENTILE_COVERAGE_95 = {5: (0.82, 0.72), 6: (0.87, 0.75), 8: (0.90, 0.79), 12: (0.91, 0.81), 20: (0.93, 0.85),
                          40: (0.94, 0.89)}
SMALL_N = 20  # below this many units a nominal 95% percentile interval covers under 93% in the simulation


def percentile_coverage(n: int) -> tuple[float, float]:
    """Simulated coverage of a nominal 95% percentile interval of a mean over ``n`` units, (normal, skewed):
    the tabulated n at or below ``n`` (coverage grows with n, so this errs low); n < 5 reads the n = 5 row.

    >>> percentile_coverage(6), percentile_coverage(7), percentile_coverage(3)
    ((0.87, 0.75), (0.87, 0.75), (0.82, 0.72))
    """
    at = max([k for k in PERCENTILE_COVERAGE_95 if k <= n], default=min(PERCENTILE_COVERAGE_95))
    return PERCENTILE_COVERAGE_95[at]


def percentile_ci(boot: np.ndarray, confidence: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of bootstrap replicates along axis 0 (``numpy.quantile``, linear)."""
    confidence = Resampling().confidence if confidence is None else confidence
    lo_q, hi_q = quantile_levels(confidence)
    lo, hi = np.quantile(boot, [lo_q, hi_q], axis=0)
    return lo, hi


def quantile_levels(confidence: float) -> tuple[float, float]:
    """Quantile levels of a central interval, rounded so 0.95 gives exactly 0.025 / 0.975."""
    lo = round((1.0 - confidence) / 2.0, 12)
    return lo, round(1.0 - lo, 12)
