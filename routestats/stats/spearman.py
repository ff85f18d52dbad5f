"""Spearman's rho with a vectorised bootstrap CI (METHODS 3.4) and the hand-written average ranks of
the initialisation analysis (METHODS 3.4, 3.8); rho and p are ``scipy.stats.spearmanr``'s values."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special

from routestats.errors import RoutestatsError
from routestats.settings import Resampling
from routestats.stats.inference import holm, percentile_ci
from routestats.stats.slope import slope_hc2
from routestats.stats.work import note

__all__ = ["average_ranks", "spearman", "SpearmanResult", "spearman_ci", "spearman_permutation_p"]


def average_ranks(v) -> np.ndarray:
    """Average ranks (1-based; ties share the mean of their ranks) of a 1-D array: exactly the values of
    ``scipy.stats.rankdata(v, method="average")`` (integers and halves are exact in float64).

    >>> average_ranks([10.0, 30.0, 20.0, 20.0]).tolist()
    [1.0, 4.0, 2.5, 2.5]
    """
    v = np.asarray(v, dtype=np.float64)
    _order, starts, group = _tie_groups(v)
    ends = np.r_[starts[1:], len(v)]  # run g holds sorted positions starts[g] .. ends[g] - 1
    return ((starts + 1 + ends) / 2.0)[group]


def spearman(x, y) -> tuple[float, float]:
    """Spearman rho of two 1-D arrays and its two-sided p (t approximation, n - 2 df): bitwise the
    values of ``scipy.stats.spearmanr(x, y)`` (the same ranks, ``numpy.corrcoef`` on the same layout,
    the same t and ``stdtr``; tested), without importing scipy.stats (0.5 s CPU per report).
    NaN for a constant input, an input holding NaN, or fewer than 2 pairs, as there.

    >>> rho, p = spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7])
    >>> round(rho, 4), round(p, 4)
    (0.8208, 0.0886)
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = len(x)
    if n <= 1 or (x[0] == x).all() or (y[0] == y).all() or np.isnan(x).any() or np.isnan(y).any():
        return float("nan"), float("nan")
    # scipy ranks the columns of column_stack((x, y)) with apply_along_axis: a (2, n) buffer, transposed
    ranked = np.empty((2, n))
    ranked[0] = average_ranks(x)
    ranked[1] = average_ranks(y)
    rs = np.corrcoef(ranked.T, rowvar=False)
    dof = n - 2
    with np.errstate(divide="ignore", invalid="ignore"):
        t = rs * np.sqrt((dof / ((rs + 1.0) * (1.0 - rs))).clip(0))
        prob = 2 * special.stdtr(dof, -np.abs(t))
    return float(rs[1, 0]), float(prob[1, 0])


def spearman_permutation_p(x, y, permutations: int, seed: int) -> np.ndarray:
    """Two-sided permutation p of Spearman's rho of ``x`` with each column of ``y``: the share of ``permutations``
    random pairings of x with y (one ``default_rng(seed + 29)``, shared by the columns) whose |rho| reaches the
    observed one, by the plus-one rule ((count + 1) / (P + 1)). Exact in level under exchangeability (no
    association), ties included -- unlike the t approximation of :func:`spearman`, which with few examples and
    tied lengths rejects a true null more often than its alpha (METHODS, length association). NaN for a
    constant column.

    >>> p = spearman_permutation_p([1, 2, 3, 4, 5, 6], [[1.0], [2.0], [3.0], [4.0], [5.0], [6.0]], 999, 1)
    >>> bool(0.001 <= p[0] <= 0.004)  # only 2 of the 720 orderings are as extreme: p about 2/720
    True
    """
    rx = average_ranks(x)
    rx = rx - rx.mean()
    Y = np.asarray(y, dtype=np.float64)
    Y = Y[:, None] if Y.ndim == 1 else Y
    n, k = Y.shape
    ry = np.column_stack([average_ranks(Y[:, j]) for j in range(k)]) if k else np.empty((n, 0))
    ry = ry - ry.mean(axis=0)
    observed = np.abs(rx @ ry)  # rank vectors keep their norms under a permutation: |rho| is monotone in this
    tol = 1e-9 * np.maximum(observed, 1e-300)
    note("pairings", permutations, n, k)
    rng = np.random.default_rng(seed + 29)
    count = np.zeros(k, dtype=np.int64)
    chunk = max(1, min(1024, (1 << 21) // max(n, 1)))
    for s in range(0, permutations, chunk):
        c = min(chunk, permutations - s)
        # each row of x's ranks shuffled in place: the same draws and orders as
        # rng.permuted(broadcast_to(arange(n), (c, n)), axis=1) gathered from rx (tested), at n = 2,336 and
        # 20,000 pairings 0.64-0.68 s CPU against 0.87-1.05 s
        # (permuted copies through a buffered iterator; the index gather is a second pass)
        shuffled = np.tile(rx, (c, 1))
        for row in shuffled:
            rng.shuffle(row)
        count += (np.abs(shuffled @ ry) >= observed - tol).sum(axis=0)
    p = (count + 1) / (permutations + 1)
    constant = (np.abs(ry).max(axis=0) == 0) | (np.abs(rx).max() == 0)
    return np.where(constant, np.nan, p)


def _tie_groups(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort order, start of each run of equal values in that order, and each element's run index."""
    order = np.argsort(v, kind="stable")
    sv = v[order]
    starts = np.flatnonzero(np.r_[True, sv[1:] != sv[:-1]])
    group = np.empty(len(v), dtype=np.int64)
    group[order] = np.cumsum(np.r_[True, sv[1:] != sv[:-1]]) - 1
    return order, starts, group


# every Pearson sum below is at most n^3 in size (n counts, each product of two twice-deviations at most n^2):
# below 2^62 up to this n, so int64 sums cannot overflow
INTEGER_SUMS_UP_TO = 1_600_000


def _twice_rank_deviations(cum: np.ndarray, g: np.ndarray, n: int) -> np.ndarray:
    """Twice each run's average rank inside each resample less the mean rank (n + 1) / 2, from the running count
    ``cum`` (B, runs; the resampled values up to and including the run) and the run's count ``g``: the rank is
    (# below) + (g + 1) / 2, so twice its deviation is 2 cum - g - n, an integer (int64: exact)."""
    d = cum * 2
    d -= g
    d -= n
    return d


def _spearman_resamples(x: np.ndarray, y: np.ndarray, idx: np.ndarray, ties=None) -> np.ndarray:
    """Spearman rho (average ranks, Pearson of ranks) of x[idx[b]] and y[idx[b]] for each row b of idx.

    Equal to ranking each resample and correlating (``scipy.stats.spearmanr`` per resample; tested),
    but computed from the multiplicity of each original pair: ranks of repeated pairs coincide,
    so the Pearson sums become sums over the n originals weighted by their counts, taken in y's sorted order
    (y's ranks are then a running count; x's are one per run of equal x, from the running count at each run's
    end in x's sorted order). Counts and twice the rank deviations are integers, summed as integers (a running
    sum over integers is several times as fast as over floats, and no array is converted): the three Pearson
    sums, each 4 times its value, are exact, and below 2^53 up to n of about 200,000, so exactly what summing
    the halves and quarters as floats gave (rho bitwise unchanged; 4 cancels in rho). O(B n), no sort.
    ``ties`` (``(_tie_groups(x), _tie_groups(y))``) is reused across calls when given.
    """
    B, n = idx.shape
    tx, ty = (_tie_groups(x), _tie_groups(y)) if ties is None else ties
    note("spearman", B, n)
    counts = np.bincount((idx + n * np.arange(B)[:, None]).ravel(), minlength=B * n).reshape(B, n)
    (ox, sx, gx), (oy, sy, gy) = tx, ty
    # np.take, not counts[:, oy]: the fancy index lays its result out by columns, and a running sum along rows of
    # that layout takes 6 times as long
    cy = np.take(counts, oy, axis=1)  # counts in y's sorted order
    cum_y = np.cumsum(cy, axis=1)
    if len(sy) < n:  # ties in y: each run's running count at its end and its count; each position takes its run's
        ends = np.r_[sy[1:], n] - 1
        cum_run = np.take(cum_y, ends, axis=1)
        dy = np.take(_twice_rank_deviations(cum_run, np.diff(cum_run, axis=1, prepend=0), n), gy[oy], axis=1)
    else:
        dy = _twice_rank_deviations(cum_y, cy, n)
    # (B, runs of x): the running count at each run's end
    cum_x = np.take(np.cumsum(np.take(counts, ox, axis=1), axis=1), np.r_[sx[1:], n] - 1, axis=1)
    gxc = np.diff(cum_x, axis=1, prepend=0)
    dx_run = _twice_rank_deviations(cum_x, gxc, n)
    dx = np.take(dx_run, gx[oy], axis=1)  # x's (twice) rank deviation at each of y's sorted positions
    if n > INTEGER_SUMS_UP_TO:  # an integer sum could overflow: sum as floats instead
        cy, dx, dy, gxc, dx_run = (v.astype(np.float64) for v in (cy, dx, dy, gxc, dx_run))
    cov = np.einsum("bi,bi,bi->b", cy, dx, dy).astype(np.float64)
    den = np.sqrt(np.einsum("bg,bg,bg->b", gxc, dx_run, dx_run).astype(np.float64)
                  * np.einsum("bi,bi,bi->b", cy, dy, dy).astype(np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, cov / np.where(den > 0, den, 1.0), np.nan)


@dataclass(frozen=True)
class SpearmanResult:
    """Spearman rho per column of y against one x, with percentile bootstrap CIs and Holm."""

    labels: tuple
    n: int
    rho: np.ndarray
    p_raw: np.ndarray
    p_adj: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    resamples_kept: np.ndarray
    resamples: int
    seed: int
    p_t: np.ndarray | None = None  # the t approximation's p (scipy's) where p_raw is a permutation p
    permutations: int = 0
    p_permutation: np.ndarray | None = None  # with permutations: p_raw is the larger of these two
    p_robust: np.ndarray | None = None  # the least-squares slope's p, HC2 on Satterthwaite's df (stats.slope)

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "label": list(self.labels),
                "n": self.n,
                "rho": self.rho,
                "p_raw": self.p_raw,
                "p_adj": self.p_adj,
                "adj_method": "holm",
                "ci_low": self.ci_low,
                "ci_high": self.ci_high,
                "resamples_kept": self.resamples_kept,
                "resamples": self.resamples,
                "seed": self.seed,
                "p_t": self.p_raw if self.p_t is None else self.p_t,
                "permutations": self.permutations,
                "p_permutation": self.p_raw if self.p_permutation is None else self.p_permutation,
                "p_robust": self.p_raw if self.p_robust is None else self.p_robust,
                "method": "Spearman (average ranks) + percentile bootstrap"
                          + (" + the larger of a permutation p and an HC2 slope p" if self.permutations else ""),
            }
        )


def spearman_ci(x, y, *, resampling: Resampling | None = None, resamples: int | None = None, seed: int | None = None,
                confidence: float | None = None, labels=None, permutations: int | None = None) -> SpearmanResult:
    """Spearman rho of x with each column of y, bootstrap CI and Holm (METHODS 3.4).

    rho and its two-sided p are :func:`spearman` (``scipy.stats.spearmanr``'s values); with ``permutations``
    the p is the larger of :func:`spearman_permutation_p` (exact under independence) and the p of the least-squares
    slope of y on x with an HC2 standard error on Satterthwaite's df from each third of x's own spread
    (:func:`routestats.stats.slope.slope_hc2`: it
    tests y's mean against x, and holds where y's spread, not its mean, changes with x); where that p is undefined
    (a row of leverage 1) the permutation p alone, and 1 where rho and the slope are of opposite signs (the two
    disagree on the direction a sentence would state). ``p_t`` keeps the t approximation; ``p_permutation`` and
    ``p_robust`` the two. The bootstrap follows the
    reference: one ``default_rng(seed + 17)`` shared across columns in order; per column,
    ``resamples`` calls of ``integers(0, n, size=n)``; rho recomputed by ranking the
    resampled x and y (average ranks) and taking Pearson, vectorised over resamples (computed
    from each resample's counts in O(n) per resample, in chunks of 64 resamples);
    non-finite rho (a constant resample) are skipped.
    """
    r = Resampling.of(resampling, length_resamples=resamples, seed=seed, confidence=confidence)
    resamples, seed, confidence = r.length_resamples, r.seed, r.confidence
    xv = np.asarray(x, dtype=np.float64)
    Y = np.asarray(y, dtype=np.float64)
    if Y.ndim == 1:
        Y = Y[:, None]
    n, k = Y.shape
    if xv.shape != (n,):
        raise RoutestatsError(f"x has shape {xv.shape}, expected ({n},)")
    if n < 3:
        raise RoutestatsError("Spearman correlation needs at least 3 pairs")
    rng = np.random.default_rng(seed + 17)
    # (64 x n) working arrays stay in cache: 2.2x faster than 500 at n = 2,336; fewer rows beyond
    # n = 16,384 keep them at 8 MB each (each resample's rho is computed on its own row either way)
    chunk = max(1, min(64, (1 << 20) // n))
    x_ties = _tie_groups(xv)
    rho, p = np.empty(k), np.empty(k)
    lo, hi, kept = np.empty(k), np.empty(k), np.zeros(k, dtype=np.int64)
    for j in range(k):
        rho[j], p[j] = spearman(xv, Y[:, j])
        ties = (x_ties, _tie_groups(Y[:, j]))
        # one integers call per chunk draws what its rows' calls of size n would (the same stream)
        r = np.concatenate([
            _spearman_resamples(xv, Y[:, j], rng.integers(0, n, size=(min(chunk, resamples - s), n)), ties)
            for s in range(0, resamples, chunk)])
        r = r[np.isfinite(r)]
        kept[j] = r.size
        lo[j], hi[j] = percentile_ci(r, confidence) if r.size else (np.nan, np.nan)
    labels = tuple(range(k)) if labels is None else tuple(labels)
    p_t, p_perm, p_rob = p, None, None
    if permutations:  # exact under independence, and valid where y's spread changes with x: the larger of the two
        slope, _se, p_rob, _df = slope_hc2(xv, Y)
        p_perm = spearman_permutation_p(xv, Y, int(permutations), int(seed))
        # a direction is claimed only where rho and the slope agree on it: opposite signs give p 1
        p = np.where(np.isnan(p_perm), np.nan, np.where(np.sign(slope) * np.sign(rho) < 0, 1.0, np.fmax(p_perm, p_rob)))
    return SpearmanResult(labels, n, rho, p, holm(p), lo, hi, kept, int(resamples), int(seed), p_t,
                          int(permutations or 0), p_perm, p_rob)
