"""Power of the pair report's own headline test, by simulation from a pilot's paired differences.

The headline calls a layer's change *rose* (or *fell*) when its two-sided sign-flip p, Holm-adjusted over the
layers, is below the family's alpha and its percentile bootstrap interval lies on that side of 0
(:func:`routestats.compose.claims.direction_claim`). :func:`headline_power` estimates how often that happens
for a planned number of examples ``n`` and a true change ``delta`` per layer:

1. the pilot's per-example differences (examples x layers) are centred on their layer means (the null it
   carries), scaled by ``spread`` times sqrt(m / (m - 1)) (so that the population resampled has the pilot's SD as
   the report states it, ddof 1; ``spread`` 1: that SD; :func:`upper_spread`: its upper confidence bound) and
   shifted by ``delta``;
2. ``sims`` samples of ``n`` whole examples (rows: the layers' dependence is kept) are drawn with replacement;
3. each is analysed with :func:`routestats.stats.inference.paired_inference` -- the report's procedure and
   settings, one shared draw of signs and resamples for all samples of one size -- and Holm over its layers;
4. a layer counts as detected when the claim's rule holds on the side of its ``delta`` (a layer whose
   ``delta`` is 0 counts any claim: its rate is the false-positive rate).

The Monte Carlo error of each estimate is its binomial standard error, sqrt(p (1 - p) / sims).

Examples
--------
>>> import numpy as np
>>> pilot = np.random.default_rng(0).normal(0.0, 1.0, size=(40, 1))
>>> r = headline_power(pilot, [1.0], 12, alpha=0.05, sims=200, permutations=999, resamples=500)
>>> 0.8 < float(r.power[0]) <= 1.0   # d_z = 1 at n = 12: a one-sample t-test has about 0.92
True
>>> smallest_reachable_n(4, 0.0125)   # Holm over 4 layers, the report's draws: 4 x p_min(n) < 0.0125 first at n = 10
10
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from routestats.errors import RoutestatsError
from routestats.settings import Resampling
from routestats.stats.inference import holm, paired_inference, signflip_floor, signflip_floor_drawn

__all__ = ["PowerAtN", "headline_power", "detected", "upper_spread", "layer_spreads", "pooling", "upper_spreads",
           "smallest_reachable_n",
           "UPPER_SPREAD_LEVEL",
           "seed_power", "search_n", "drawn_floor", "power_target", "normal_guess", "detectable_change",
           "MAX_SIM_VALUES"]

UPPER_SPREAD_LEVEL = 0.8
"""The one-sided confidence of the pilot's upper spread bound (Browne 1995: plan from the 80 % upper
confidence limit of a pilot's SD, so that about four plans in five are not optimistic)."""

MAX_SIM_VALUES = 1 << 23  # the most simulated differences (64 MB of float64) analysed in one call


@dataclass(frozen=True)
class PowerAtN:
    """Estimated power at one sample size: per layer (``power``, aligned with ``layers``), for every layer
    with a nonzero ``delta`` at once (``power_all``) and for at least one (``power_any``)."""

    n: int
    layers: tuple
    delta: np.ndarray
    power: np.ndarray
    power_all: float
    power_any: float
    sims: int

    def se(self, p) -> np.ndarray:
        """The Monte Carlo standard error of an estimate ``p`` from this many samples."""
        p = np.asarray(p, dtype=np.float64)
        return np.sqrt(p * (1.0 - p) / self.sims)

    def to_frame(self) -> pd.DataFrame:
        """One row per layer and one for ``every layer`` / ``any layer``: n, layer, delta, power, se, sims."""
        rows = [{"n": self.n, "layer": str(l), "delta": float(d), "power": float(p)}
                for l, d, p in zip(self.layers, self.delta, self.power)]
        rows += [{"n": self.n, "layer": "every layer", "delta": np.nan, "power": self.power_all},
                 {"n": self.n, "layer": "any layer", "delta": np.nan, "power": self.power_any}]
        df = pd.DataFrame(rows)
        df["se"] = self.se(df["power"].to_numpy())
        df["sims"] = self.sims
        return df


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
    log(mean s^2) by the empirical-Bayes weight B = v / (v + tau^2): v = (kappa - (m - 3) / (m - 1)) / m is the
    sampling variance of a log variance from m examples (kappa: 3 + the layers' mean G2 excess kurtosis; v is
    2 / (m - 1) for normal differences) and tau^2 = max(0, var_j(L_j) - v) what the layers differ beyond it.
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
    """Each layer's pilot variance (ddof 1) and the weight B of :func:`layer_spreads` (0: each layer keeps its own)."""
    x = np.asarray(pilot, dtype=np.float64)
    m, k = x.shape
    c = x - x.mean(axis=0)
    s2 = (c * c).sum(axis=0) / max(m - 1, 1)
    if k < 2 or m < 4 or not (s2 > 0).all():
        return s2, 0.0
    g2 = (c ** 4).mean(axis=0) / (c * c).mean(axis=0) ** 2 - 3.0  # excess kurtosis, then its small-sample correction
    kappa = 3.0 + float((((m + 1) * g2 + 6) * (m - 1) / ((m - 2) * (m - 3))).mean())  # G2 (Joanes & Gill 1998)
    v = max((kappa - (m - 3) / (m - 1)) / m, 1e-12)
    L = np.log(s2)
    tau2 = max(0.0, float(L.var(ddof=1)) - v)
    return s2, v / (v + tau2)


def upper_spreads(pilot, level: float = UPPER_SPREAD_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Per layer, the factor that takes the spread a plan simulates (the pilot's SD pooled by
    :func:`layer_spreads`) to its one-sided ``level`` upper confidence bound, and the effective df it is read on.

    The spread is known as well as the rows it is estimated from: a layer pooled with others is estimated from all
    of them, so its bound is narrower than one layer's m - 1 df give, unless the layers move together; and
    heavy-tailed or many-zero rows estimate a variance worse than normal rows do. With L_j = log s_j^2 and the
    pooled L~_j = (1 - B) L_j + B log(mean s^2), var(L~_j) is the larger of two estimates from the pilot's rows:
    the delta method on each example's squared deviations (which carries their kurtosis and the layers'
    dependence) and normal theory with the layers' sample correlations (var L_j = 2 / (m - 1), cov = 2 r^2 /
    (m - 1)), so that neither a kurtosis nor a correlation understated by a small pilot narrows the bound. The
    factor is sqrt(d / chi2_{1 - level}(d)) on d = 2 / var(L~_j) df: with one normal layer exactly
    :func:`upper_spread` (d = m - 1). Fewer than 4 examples or a constant layer: :func:`upper_spread` for all.

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
    s2, B = pooling(x)
    if m < 4 or not (s2 > 0).all():
        return np.full(k, upper_spread(max(m, 2), level)), np.full(k, float(max(m - 1, 1)))
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
    V = np.maximum(delta, 2 * normal / (m - 1))
    var = (1 - B) ** 2 * np.diag(V)[:k] + B ** 2 * V[k, k] + 2 * B * (1 - B) * V[:k, k]
    d = 2.0 / np.maximum(var, 1e-12)
    return np.sqrt(d / special.chdtri(d, level)), d


def smallest_reachable_n(n_layers: int, alpha: float, resampling: Resampling | None = None) -> int | None:
    """The fewest examples at which some layer can reach p_Holm < ``alpha``: the smallest raw p the report's
    sign-flip test gives with its draws as made (:func:`~routestats.stats.inference.signflip_floor_drawn`: the plus-one
    rule over the drawn patterns that keep or flip every sign) times the Holm factor of the first step, the number of
    layers, falls below ``alpha``; None when the draws' own floor 1/(P + 1) never lets it. Every smaller n gives no
    p_Holm below ``alpha`` with these draws. That is the ``shared`` mode's stream (the default, and the only one
    ``routestats plan`` runs); the reference modes (``numpy``, ``python-random``) draw otherwise, and for them the
    floor is :func:`~routestats.stats.inference.signflip_floor`'s max(2/2^n, 1/(P + 1)), not read from draws.

    >>> smallest_reachable_n(4, 0.0167, Resampling(resamples=10_000, permutations=4_999, seed=1001))
    10
    """
    r = Resampling.of(resampling)
    if n_layers / (r.permutations + 1) >= alpha:
        return None
    n = 1
    while n_layers * drawn_floor(n, r) >= alpha:
        n += 1
    return n


def drawn_floor(n: int, resampling: Resampling | None = None) -> float:
    """The smallest raw sign-flip p over ``n`` examples with the ``resampling``'s draws: read from the draws in the
    ``shared`` mode (:func:`~routestats.stats.inference.signflip_floor_drawn`), the larger of 2/2^n and 1/(P + 1)
    in the reference modes (see :func:`smallest_reachable_n`)."""
    r = Resampling.of(resampling)
    if r.mode != "shared":
        return signflip_floor(n, r.permutations)[0]
    return signflip_floor_drawn(n, r.resamples, r.permutations, r.seed)


def detected(p_raw: np.ndarray, ci_low: np.ndarray, ci_high: np.ndarray, sign: np.ndarray,
             alpha: float) -> np.ndarray:
    """(samples, layers) booleans: the headline's rule per sample -- Holm over the layers of each row, then
    p_Holm < alpha with the interval above 0 (``sign`` > 0), below 0 (``sign`` < 0), or either (``sign`` 0).

    >>> p = np.array([[0.001, 0.2], [0.004, 0.001]])
    >>> lo, hi = np.array([[0.1, -0.1], [0.1, 0.2]]), np.array([[0.3, 0.1], [0.3, 0.4]])
    >>> detected(p, lo, hi, np.array([1, 1]), 0.01).tolist()
    [[True, False], [True, True]]
    """
    p_holm = np.vstack([holm(row) for row in p_raw])
    up, down = ci_low > 0, ci_high < 0
    side = np.where(sign > 0, up, np.where(sign < 0, down, up | down))
    return (p_holm < alpha) & side


def headline_power(pilot, delta, n: int, *, alpha: float, sims: int = 1000, spread: float = 1.0,
                   resampling: Resampling | None = None, seed: int | None = None, labels=None,
                   resamples: int | None = None, permutations: int | None = None) -> PowerAtN:
    """Estimated power of the headline's test at ``n`` examples for a true change ``delta`` (see the module
    docstring).

    Parameters
    ----------
    pilot : array_like, (m, k)
        The pilot's paired differences, examples x layers.
    delta : array_like, (k,)
        The true change per layer (variant − baseline).
    n : int
        The planned number of examples.
    alpha : float
        The family's share of the headline's alpha (the pair report's ``family_alpha``).
    sims : int
        Simulated samples (Monte Carlo error about sqrt(p (1 - p) / sims)).
    spread : float or array_like, (k,)
        The factor applied to the centred differences (1: the pilot's spread), or one per layer.
    resampling, resamples, permutations
        The test's settings (default: the report's); ``seed`` seeds the simulation (default: the settings').
    """
    r = Resampling.of(resampling, resamples=resamples, permutations=permutations)
    x = np.asarray(pilot, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2 or not np.isfinite(x).all():
        raise RoutestatsError(f"a pilot is a finite (examples x layers) matrix of at least 2 examples, got shape "
                              f"{x.shape}")
    d = np.asarray(delta, dtype=np.float64).reshape(-1)
    if d.shape != (x.shape[1],) or not np.isfinite(d).all():
        raise RoutestatsError(f"delta needs one finite value per layer ({x.shape[1]}), got {d.shape[0]}")
    spread = np.asarray(spread, dtype=np.float64)  # one factor, or one per layer (:func:`layer_spreads`)
    if int(n) < 2 or int(sims) < 1 or not np.all(spread > 0) or spread.size not in (1, x.shape[1]):
        raise RoutestatsError(f"n >= 2, sims >= 1 and spread > 0 are needed, got {n}, {sims}, {spread}")
    n, sims, k = int(n), int(sims), x.shape[1]
    m = x.shape[0]
    # resampling m centred rows draws from a population whose SD is the pilot's ddof-0 SD, sqrt((m - 1)/m) of the SD
    # the report prints (ddof 1): 5 % too few examples planned at m = 20 before any noise. Rescaled to ddof 1.
    base = (x - x.mean(axis=0)) * (spread.reshape(-1) * math.sqrt(m / (m - 1))) + d
    rng = np.random.default_rng([int(r.seed if seed is None else seed), n])
    hits = np.zeros((sims, k), dtype=bool)
    chunk = max(1, MAX_SIM_VALUES // (n * k))
    for s in range(0, sims, chunk):
        c = min(chunk, sims - s)
        rows = rng.integers(0, len(base), size=(c, n))
        sample = base[rows]  # (c, n, k)
        cols = sample.transpose(1, 0, 2).reshape(n, c * k)  # one column per (sample, layer)
        res = paired_inference(cols, resampling=r)
        shape = (c, k)
        hits[s:s + c] = detected(res.p_raw.reshape(shape), res.ci_low.reshape(shape), res.ci_high.reshape(shape),
                                 np.sign(d), alpha)
    moved = d != 0
    all_ = hits[:, moved].all(axis=1).mean() if moved.any() else np.nan
    any_ = hits[:, moved].any(axis=1).mean() if moved.any() else hits.any(axis=1).mean()
    labels = tuple(range(k)) if labels is None else tuple(labels)
    return PowerAtN(n, labels, d, hits.mean(axis=0), float(all_), float(any_), sims)


def power_target(res: PowerAtN) -> float:
    """What a plan asks to reach: the power of the hardest layer among those with a nonzero change."""
    moved = res.delta != 0
    return float(res.power[moved].min()) if moved.any() else float("nan")


def normal_guess(pilot, delta, alpha: float, power: float, spread: float) -> int:
    """A starting size from the normal approximation at the Bonferroni level alpha / k (each layer's SD,
    the hardest layer): n = ((z(1 - alpha / 2k) + z(power)) sd / |delta|)^2."""
    from scipy import stats

    x = np.asarray(pilot, dtype=np.float64)
    d = np.asarray(delta, dtype=np.float64)
    sd = x.std(axis=0, ddof=1) * spread
    z = stats.norm.ppf(1 - alpha / (2 * x.shape[1])) + stats.norm.ppf(power)
    moved = d != 0
    with np.errstate(over="ignore", divide="ignore"):
        need = (z * sd[moved] / np.abs(d[moved])) ** 2
    # a tiny change (1e-300) makes the guess overflow to inf: any guess past 2^62 starts the search at its top
    return int(max(2, math.ceil(min(float(need.max()), 2.0 ** 62)))) if moved.any() else 2


def search_n(power_at: Callable[[int], PowerAtN], target: float, start: int, lowest: int, most: int,
             say: Callable[[str], None] = lambda s: None) -> tuple[int | None, list[PowerAtN]]:
    """The smallest n in [lowest, most] whose estimated :func:`power_target` reaches ``target``: a bracket
    grown from ``start`` by factors of 1.5, then bisection to the example (power rises with n; each size is
    estimated once). Returns (n, or None when ``most`` does not reach it; every estimate made)."""
    seen: dict[int, PowerAtN] = {}

    def at(m: int) -> float:
        if m not in seen:
            seen[m] = power_at(m)
            say(f"n = {m:,}: power {power_target(seen[m]):.3f}")
        return power_target(seen[m])

    m = min(max(start, lowest), most)
    if at(m) >= target:
        hi = m
        lo = lowest - 1
        while hi > lowest:
            cand = max(lowest, int(hi / 1.5))
            if at(cand) >= target:
                hi = cand
            else:
                lo = cand
                break
    else:
        lo = m
        while True:
            if lo >= most:
                return None, sorted(seen.values(), key=lambda r: r.n)
            cand = min(most, max(lo + 1, int(math.ceil(lo * 1.5))))
            if at(cand) >= target:
                hi = cand
                break
            lo = cand
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if at(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi, sorted(seen.values(), key=lambda r: r.n)


def seed_power(var_between, var_within, delta, seeds: int, examples: int, *, alpha: float, sims: int = 4000,
               confidence: float | None = None, seed: int = 1001) -> np.ndarray:
    """Per-layer power of the study's across-seed test (paired t on each seed's mean Δ, Holm over layers,
    the t interval on the side of the change: :func:`routestats.compose.study.claims.across_seed_claims`)
    with ``seeds`` seeds of ``examples`` examples each.

    Each seed's mean Δ of a layer is drawn from Normal(delta, var_between + var_within / examples) -- the
    random-intercept model of :func:`routestats.studies.seeds.variance_components` -- independently across
    layers (the pilot's few seeds cannot estimate their dependence).

    >>> p = seed_power([0.0], [1.0], [0.5], seeds=10, examples=1, alpha=0.05, sims=4000)
    >>> round(float(p[0]), 2)   # statsmodels TTestPower().power(0.5, nobs=10, alpha=0.05) = 0.293
    0.29
    """
    from scipy import stats

    conf = Resampling().confidence if confidence is None else confidence
    vb, vw, d = (np.asarray(v, dtype=np.float64).reshape(-1) for v in (var_between, var_within, delta))
    if int(seeds) < 2 or int(examples) < 1:
        raise RoutestatsError(f"the across-seed test needs at least 2 seeds and 1 example each, got {seeds}, {examples}")
    sd = np.sqrt(vb + vw / int(examples))
    rng = np.random.default_rng([int(seed), int(seeds), int(examples)])
    x = d + sd * rng.standard_normal((int(sims), int(seeds), len(d)))
    k = int(seeds)
    m, s = x.mean(axis=1), x.std(axis=1, ddof=1)
    se = s / math.sqrt(k)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = 2 * stats.t.sf(np.abs(m / se), k - 1)
    p = np.where(se > 0, p, 1.0)
    q = stats.t.ppf(0.5 + conf / 2, k - 1)
    return detected(p, m - q * se, m + q * se, np.sign(d), alpha).mean(axis=0)


def detectable_change(sd, n: int, alpha: float, power: float = 0.8) -> np.ndarray:
    """A lower bound on the smallest change a layer's test detects with ``power`` at ``n`` examples:
    (z(1 - alpha / 2) + z(power)) * sd / sqrt(n), the normal approximation at the family's alpha, Holm's most
    lenient step. The sign-flip test at that level, with t's heavier tails and Holm's stricter earlier steps,
    detects less often, so any change smaller than this is missed at least 1 - ``power`` of the time.

    >>> round(float(detectable_change([0.03], 32, 0.05)[0]), 4)   # (1.960 + 0.8416) x 0.03 / sqrt(32)
    0.0149
    """
    from scipy import special  # ndtri is scipy.stats.norm.ppf (bitwise), without importing scipy.stats (1.1 s CPU)

    z = special.ndtri(1 - alpha / 2) + special.ndtri(power)
    return z * np.asarray(sd, dtype=np.float64) / math.sqrt(int(n))
