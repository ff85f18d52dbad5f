"""The spread a plan simulates from its pilot: each layer's SD pooled with the layers' where they differ only by
chance (:func:`layer_spreads`, :func:`pooling`), its one-sided upper confidence bound on the effective df of what
estimates it (:func:`upper_spreads`, the default plan), and the df its uncertainty is drawn on when a plan takes
the spread as observed (:func:`spread_df`, :func:`spread_draws`). Used by :mod:`routestats.stats.power`.
"""

from __future__ import annotations

import math

import numpy as np

from routestats.errors import RoutestatsError
from routestats.stats.inference import array_key

__all__ = ["UPPER_SPREAD_LEVEL", "EXAMPLE_SPREAD_LEVEL", "DELTA_CAP", "POOL_CHANCE", "upper_spread", "layer_spreads",
           "pooling", "chance_dispersion", "POOL_DRAWS", "upper_spreads", "spread_df", "spread_variances", "spread_draws"]

UPPER_SPREAD_LEVEL = 0.8
"""The one-sided confidence of the pilot's upper spread bound (Browne 1995: plan from the 80 % upper
confidence limit of a pilot's SD, so that about four plans in five are not optimistic); a study's seeds use it."""

EXAMPLE_SPREAD_LEVEL = 0.85
"""The same for a pilot pair's layers (:func:`upper_spreads`). A plan is optimistic when its spread bound falls
short or its simulated power came out high by chance: at 80 % the layers' bound covered its spread in about 80 % of
pilots but the plans that used it were not optimistic in 70-84 % of them (a screen of 64 pilots of each of the six
planted populations of ``benchmarks/bench_plan.py``, the report's test approximated by t-tests); at 85 % in
72-89 %."""

DELTA_CAP = 2.0
"""The delta method's variance of a log variance is used up to this multiple of normal theory's
(:func:`upper_spreads`)."""

POOL_CHANCE = 0.95
"""Layers' spreads count as their own only beyond what sampling spreads them this often (:func:`pooling`)."""

_CHANCE_SEEN: dict = {}  # chance_dispersion's last answer, keyed by its input's content (array_key)

POOL_DRAWS = 500
"""Shuffles of the pilot's examples across its layers that tell what chance spreads their variances by
(:func:`chance_dispersion`)."""


def upper_spread(n_pilot: int, level: float = UPPER_SPREAD_LEVEL) -> float:
    """The factor that takes a pilot's SD to its one-sided upper confidence bound (chi-square on n - 1 df):
    sqrt((n - 1) / chi2.ppf(1 - level, n - 1)).

    >>> round(upper_spread(32), 4)   # scipy.stats.chi2.ppf(0.2, 31) = 24.255...: sqrt(31 / 24.255)
    1.1305
    """
    from scipy import stats

    if n_pilot < 2:
        raise RoutestatsError(f"a pilot needs at least 2 examples to estimate a spread, got {n_pilot}")
    return float(math.sqrt((n_pilot - 1) / stats.chi2.ppf(1.0 - level, n_pilot - 1)))


def layer_spreads(pilot) -> np.ndarray:
    """Per layer, the factor that takes its pilot SD to the SD a plan simulates: each layer's variance pooled toward
    the layers' mean variance by as much as their differences are what sampling alone would give.

    The hardest layer of a plan is the one with the largest spread. Taken from the pilot as drawn, it is the layer
    whose SD came out largest by chance when the layers are equally variable (the largest of k noisy estimates is
    biased up), and plans were larger than needed. Here the log variances L_j = log s_j^2 are shrunk toward
    log(mean s^2) by the weight B = (v / (v + tau^2))^2 (empirical Bayes, squared: :func:`pooling`): v is how far
    chance alone spreads the layers' log variances, var_j(L_j), on average, and tau^2 = max(0, var_j(L_j) - q) what
    the layers differ beyond what chance gives 19 times in 20 (q, :data:`POOL_CHANCE`), both read from the pilot's
    examples shuffled across its layers (:func:`chance_dispersion`).
    Layers that differ in fact keep their own spread (B near 0); equally variable layers share the pooled one (B
    near 1). One layer, fewer than 4 examples or a constant layer: 1 for every layer.

    >>> rng = np.random.default_rng(0)
    >>> equal = rng.normal(0, 1, (30, 4))               # four equally variable layers: pooled
    >>> f = layer_spreads(equal)
    >>> bool(np.allclose(f ** 2 * equal.var(axis=0, ddof=1), equal.var(axis=0, ddof=1).mean()))
    True
    >>> unequal = rng.normal(0, 1, (30, 4)) * [0.5, 1, 1.5, 2]   # spreads that differ in fact: kept, nearly
    >>> bool(np.all(np.abs(layer_spreads(unequal) - 1) < 0.1))
    True
    """
    s2, B = pooling(pilot)
    if B == 0:
        return np.ones(len(s2))
    return np.exp(B * (np.log(s2.mean()) - np.log(s2)) / 2)


def pooling(pilot) -> tuple[np.ndarray, float]:
    """Each layer's pilot variance (ddof 1) and the weight B of :func:`layer_spreads` (0: each layer keeps its own):
    the empirical-Bayes weight v / (v + tau^2), squared, with what chance gives read from the pilot's own rows
    (:func:`chance_dispersion`)."""
    x = np.asarray(pilot, dtype=np.float64)
    m, k = x.shape
    c = x - x.mean(axis=0)
    s2 = (c * c).sum(axis=0) / max(m - 1, 1)
    if k < 2 or m < 4 or not (s2 > 0).all():
        return s2, 0.0
    # what chance gives 19 times in 20 is allowed before any of the spread counts as the layers' own: with
    # tau^2 = var - v (chance's mean), chance alone exceeded it 39 times in 100 over 4 layers and kept equally
    # variable layers apart in two pilots of five (the hardest again the one drawn largest)
    v, allowance = chance_dispersion(c)
    tau2 = max(0.0, float(np.log(s2).var(ddof=1)) - allowance)
    # squared: the empirical-Bayes weight v / (v + tau^2) assumes the layers' log variances scatter normally about
    # their mean, and k = 4 of them say little about tau^2. Where one layer is hardest in fact (SDs 0.5 : 1 : 1.5 : 2)
    # it still drew that layer 3 % toward the others, and plans from the pilot's spread achieved 0.767 where they
    # claimed 0.80 (0.790 squared: benchmarks/bench_plan.py, 32 pilots). Squaring keeps 1 (chance alone) and near-1
    # weights and all but removes small ones (0.04 -> 0.0016).
    return s2, (v / (v + tau2)) ** 2


def chance_dispersion(centred) -> tuple[float, float]:
    """How far chance alone spreads the layers' log variances var_j(L_j): its mean v and its
    :data:`POOL_CHANCE` quantile, over :data:`POOL_DRAWS` shuffles of each example's values across the layers
    (``default_rng(0)``; the layers ordered by variance first, so that their order does not matter).

    Shuffled within examples, the layers are exchangeable: each keeps the examples' dependence (a factor the layers
    share moves them together) and the rows' shape (tails, exact zeros), and differs from the others only by
    chance. Normal theory with the pilot's kurtosis (v = (kappa - (m - 3) / (m - 1)) / m, used before) understated
    chance where a small pilot understates its kurtosis: t3 and 60 %-zero pilots of 20-64 examples kept equally
    variable layers apart in 20 % and 10 % of pilots, planning on the layer drawn largest (here 6 %, 6 %;
    normal, skewed and layers sharing a factor 3-7 %). An example whose shuffle leaves a layer constant counts as
    spread without bound.

    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(0, 1, (40, 4))
    >>> v, q = chance_dispersion(x - x.mean(axis=0))
    >>> bool(0.02 < v < q)   # normal rows: v near 2 / (m - 1) = 0.051
    True
    """
    c = np.ascontiguousarray(centred, dtype=np.float64)
    m, k = c.shape
    key = array_key(c)
    if key in _CHANCE_SEEN:  # a plan asks for one pilot's chance three times (pooling, its factors, their bound)
        return _CHANCE_SEEN[key]
    c = c[:, np.argsort(c.var(axis=0), kind="stable")]
    rng = np.random.default_rng(0)
    out = np.empty(POOL_DRAWS)
    chunk = max(1, 2_000_000 // (m * k))
    for start in range(0, POOL_DRAWS, chunk):
        n = min(chunk, POOL_DRAWS - start)
        shuffled = np.take_along_axis(np.broadcast_to(c, (n, m, k)), np.argsort(rng.random((n, m, k)), axis=2),
                                      axis=2)
        with np.errstate(divide="ignore", invalid="ignore"):
            spread = np.log(shuffled.var(axis=1, ddof=1)).var(axis=1, ddof=1)
        out[start:start + n] = np.where(np.isfinite(spread), spread, np.inf)
    finite = out[np.isfinite(out)]
    with np.errstate(invalid="ignore"):
        q = float(np.quantile(out, POOL_CHANCE))  # nan where it falls beside an unbounded spread: unbounded
    _CHANCE_SEEN.clear()  # the last pilot's only: by content, so a changed pilot is never answered from it
    _CHANCE_SEEN[key] = (float(finite.mean()) if finite.size else math.inf, math.inf if math.isnan(q) else q)
    return _CHANCE_SEEN[key]


def upper_spreads(pilot, level: float = EXAMPLE_SPREAD_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Per layer, the factor that takes the spread a plan simulates (the pilot's SD pooled by
    :func:`layer_spreads`) to its one-sided ``level`` upper confidence bound, and the effective df it is read on.

    The spread is known as well as the rows it is estimated from: a layer pooled with others is estimated from all
    of them, so its bound is narrower than one layer's m - 1 df give, unless the layers move together; and
    heavy-tailed or many-zero rows estimate a variance worse than normal rows do. With L_j = log s_j^2 and the
    pooled L~_j = (1 - B) L_j + B log(mean s^2), var(L~_j) is the larger of two estimates from the pilot's rows:
    the delta method on each example's squared deviations (which carries their kurtosis and the layers'
    dependence) and normal theory with the layers' sample correlations (var L_j = 2 / (m - 1), cov = 2 r^2 /
    (m - 1)), so that neither a kurtosis nor a correlation understated by a small pilot narrows the bound; the delta
    method's at most :data:`DELTA_CAP` times normal theory's (a pilot's fourth moments are its least stable
    numbers: in a screen with the report's test approximated by t-tests, t3 pilots planned 1.6-1.8 times the
    examples their population needs uncapped, 1.3-1.4 times capped, 56-75 % of plans not optimistic either way).
    The factor is sqrt(d / chi2_{1 - level}(d)) on d = 2 / var(L~_j) df: with one normal
    layer exactly :func:`upper_spread` at ``level`` (d = m - 1). Fewer than 4 examples or a constant layer:
    :func:`upper_spread` for all.

    >>> rng = np.random.default_rng(1)
    >>> one = rng.normal(0, 1, (32, 1))
    >>> f, d = upper_spreads(one)   # one layer: never narrower than chi-square on m - 1 df
    >>> bool(f[0] >= upper_spread(32) - 1e-12 and d[0] <= 31)
    True
    >>> f, d = upper_spreads(rng.normal(0, 1, (32, 4)))   # four independent layers, pooled: about 4 (m - 1) df
    >>> bool(np.all(f < upper_spread(32)) and np.all(d > 62))
    True
    """
    from scipy import special

    x = np.asarray(pilot, dtype=np.float64)
    m, k = x.shape
    got = spread_variances(x)
    if got is None:
        return np.full(k, upper_spread(max(m, 2), level)), np.full(k, float(max(m - 1, 1)))
    normal, delta = got
    var = np.maximum(np.minimum(delta, DELTA_CAP * normal), normal)
    d = 2.0 / np.maximum(var, 1e-12)
    return np.sqrt(d / special.chdtri(d, level)), d


def spread_df(pilot) -> np.ndarray:
    """Per layer, the df of the spread a plan simulates (the pilot's SD pooled by :func:`layer_spreads`) by normal
    theory with the layers' sample correlations: 2 / var(L~_j) (:func:`spread_variances`); m - 1 for one layer.

    ``routestats plan --spread pilot`` draws each simulated study's spread from what these df leave possible
    (:func:`spread_draws`), so that its power is the power expected over the pilot's uncertainty about the spread:
    a plan from the spread as observed reached its claimed power on average only where the pilot's layers pooled
    many df (power is concave in the spread: a spread drawn low costs more power than one drawn high gives; where
    one layer was clearly hardest, on its own m - 1 df, 0.750 was achieved where 0.80 was claimed:
    ``benchmarks/bench_plan.py``, 32 pilots).

    >>> x = np.random.default_rng(1).normal(0, 1, (32, 1))
    >>> spread_df(x).tolist()
    [31.0]
    """
    x = np.asarray(pilot, dtype=np.float64)
    m, k = x.shape
    got = spread_variances(x)
    return np.full(k, float(max(m - 1, 1))) if got is None else 2.0 / np.maximum(got[0], 1e-12)


def spread_variances(pilot) -> tuple[np.ndarray, np.ndarray] | None:
    """Per layer, the sampling variance of the pooled log variance L~_j = (1 - B) L_j + B log(mean s^2) of
    :func:`layer_spreads`: (normal theory with the layers' sample correlations, the delta method on each example's
    squared deviations); None below 4 examples or with a constant layer. See :func:`upper_spreads`.

    >>> x = np.random.default_rng(2).normal(0, 1, (25, 1))
    >>> normal, delta = spread_variances(x)
    >>> round(float(normal[0]), 6) == round(2 / 24, 6)   # one normal layer: var(log s^2) = 2 / (m - 1)
    True
    """
    x = np.asarray(pilot, dtype=np.float64)
    m, k = x.shape
    s2, B = pooling(x)
    if m < 4 or not (s2 > 0).all():
        return None
    c = x - x.mean(axis=0)
    # each example's squared deviations, and their sum over layers: log(mean s^2) is the log of the sum's mean
    q = np.column_stack([c * c, (c * c).sum(axis=1)])
    mu = q.mean(axis=0)
    delta = np.cov(q, rowvar=False, ddof=1).reshape(k + 1, k + 1) / ((m - 1) * np.outer(mu, mu))
    r2 = np.corrcoef(c, rowvar=False).reshape(k, k) ** 2
    w = s2 / s2.sum()
    normal = np.empty((k + 1, k + 1))
    normal[:k, :k] = r2
    normal[:k, k] = normal[k, :k] = r2 @ w
    normal[k, k] = w @ r2 @ w
    normal *= 2 / (m - 1)

    def pooled(V):
        return (1 - B) ** 2 * np.diag(V)[:k] + B ** 2 * V[k, k] + 2 * B * (1 - B) * V[:k, k]

    return pooled(normal), pooled(np.maximum(delta, normal))


def spread_draws(spread_df, k: int, sims: int, rng: np.random.Generator) -> np.ndarray:
    """(sims, k) factors sqrt(d_j / chi2_{d_j}) on each layer's spread, one uniform draw per sample shared by the
    layers (the spread the pilot leaves possible: the pilot's SD over the true SD is sqrt(chi2_d / d) for normal
    rows on d df).

    >>> f = spread_draws([30.0], 1, 20000, np.random.default_rng(0))
    >>> bool(abs(np.median(f) - np.sqrt(30 / 29.336)) < 0.01)   # scipy.stats.chi2.median(30) = 29.336
    True
    """
    from scipy import special

    d = np.broadcast_to(np.asarray(spread_df, dtype=np.float64).reshape(-1), (k,))
    if not (np.isfinite(d).all() and (d > 0).all()):
        raise RoutestatsError(f"spread_df needs a positive finite df per layer, got {d}")
    u = rng.uniform(size=(sims, 1))
    return np.sqrt(d / special.chdtri(d, u))
