"""The paired t-test per column with a t-based CI and Holm (``scipy.special`` tails; the seed-level
and MoFA analyses' test)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from routestats.settings import Resampling
from routestats.stats.inference import as_matrix, holm

__all__ = ["PairedT", "paired_t"]


@dataclass(frozen=True)
class PairedT:
    """Paired t-tests per column (``scipy.stats.ttest_rel`` on variant vs baseline)."""

    labels: tuple
    n: int
    mean_diff: np.ndarray
    statistic: np.ndarray
    df: int
    p_raw: np.ndarray
    p_adj: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    confidence: float

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "label": list(self.labels),
                "n": self.n,
                "mean_diff": self.mean_diff,
                "statistic": self.statistic,
                "df": self.df,
                "p_raw": self.p_raw,
                "p_adj": self.p_adj,
                "adj_method": "holm",
                "ci_low": self.ci_low,
                "ci_high": self.ci_high,
                "confidence": self.confidence,
                "method": "paired t-test",
            }
        )


def paired_t(d, confidence: float | None = None, labels=None) -> PairedT:
    """Paired t-test of mean difference 0 per column, with a t-based CI and Holm across columns.

    >>> r = paired_t([0.5, 1.0, 1.5, 2.0])
    >>> round(float(r.statistic[0]), 4), r.df
    (3.873, 3)
    """
    confidence = Resampling().confidence if confidence is None else confidence
    from scipy import stats

    a = as_matrix(d)
    n, k = a.shape
    res = stats.ttest_1samp(a, 0.0, axis=0)
    ci = res.confidence_interval(confidence)
    labels = tuple(range(k)) if labels is None else tuple(labels)
    p = np.asarray(res.pvalue, dtype=np.float64)
    return PairedT(labels, n, a.mean(axis=0), np.asarray(res.statistic, dtype=np.float64), n - 1, p, holm(p),
                   np.asarray(ci.low, dtype=np.float64), np.asarray(ci.high, dtype=np.float64), confidence)
