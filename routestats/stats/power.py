"""Power of the pair report's own headline test, by simulation from a pilot's paired differences.

The headline calls a layer's change *rose* (or *fell*) when its two-sided sign-flip p, Holm-adjusted over the
layers, is below the family's alpha and its percentile bootstrap interval lies on that side of 0
(:func:`routestats.compose.claims.direction_claim`). :func:`headline_power` estimates how often that happens
for a planned number of examples ``n`` and a true change ``delta`` per layer:

1. the pilot's per-example differences (examples x layers) are centred on their layer means (the null it
   carries), scaled by ``spread`` times sqrt(m / (m - 1)) (so that the population resampled has the pilot's SD as
   the report states it, ddof 1; ``spread`` 1: that SD; :func:`upper_spreads`: its upper confidence bound; with
   ``spread_df``, times one draw per sample of the spread the pilot leaves possible, :func:`spread_draws`) and
   shifted by ``delta``;
2. ``sims`` samples of ``n`` whole examples (rows: the layers' dependence is kept) are drawn with replacement;
3. each is analysed with :func:`routestats.stats.inference.paired_inference` -- the report's procedure and
   settings, one shared draw of signs and resamples for all samples of one size -- and Holm over its layers;
4. a layer counts as detected when the claim's rule holds on the side of its ``delta`` (a layer whose
   ``delta`` is 0 counts any claim: its rate is the false-positive rate); a plan asks :func:`power_target` of the
   layers' rates (the hardest, read with the layers pooled with it by ``shared``).

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
from routestats.stats.pilot_spread import (DELTA_CAP, EXAMPLE_SPREAD_LEVEL, POOL_CHANCE, UPPER_SPREAD_LEVEL,
                                          layer_spreads, pooling, spread_df, spread_draws, spread_variances,
                                          upper_spread, upper_spreads)

__all__ = ["PowerAtN", "headline_power", "detected", "upper_spread", "layer_spreads", "pooling", "upper_spreads",
           "spread_df", "spread_variances", "spread_draws",
           "smallest_reachable_n",
           "UPPER_SPREAD_LEVEL", "EXAMPLE_SPREAD_LEVEL", "POOL_CHANCE", "DELTA_CAP",
           "seed_power", "search_n", "drawn_floor", "power_target", "normal_guess", "detectable_change",
           "MAX_SIM_VALUES"]

MAX_SIM_VALUES = 1 << 23  # the most simulated differences (64 MB of float64) analysed in one call


@dataclass(frozen=True)
class PowerAtN:
    """Estimated power at one sample size: per layer (``power``, aligned with ``layers``), for every layer
    with a nonzero ``delta`` at once (``power_all``) and for at least one (``power_any``); ``shared`` is the weight
    with which a layer's power is read from the layers sharing its change (:func:`power_target`)."""

    n: int
    layers: tuple
    delta: np.ndarray
    power: np.ndarray
    power_all: float
    power_any: float
    sims: int
    shared: float = 0.0

    @property
    def hardest(self) -> float:
        """What a plan asks to reach (:func:`power_target`)."""
        return power_target(self)

    def se(self, p) -> np.ndarray:
        """The Monte Carlo standard error of an estimate ``p`` from this many samples."""
        p = np.asarray(p, dtype=np.float64)
        return np.sqrt(p * (1.0 - p) / self.sims)

    def to_frame(self) -> pd.DataFrame:
        """One row per layer and one for ``hardest layer`` (:func:`power_target`), ``every layer`` and ``any
        layer``: n, layer, delta, power, se, sims."""
        rows = [{"n": self.n, "layer": str(l), "delta": float(d), "power": float(p)}
                for l, d, p in zip(self.layers, self.delta, self.power)]
        rows += [{"n": self.n, "layer": "hardest layer", "delta": np.nan, "power": self.hardest},
                 {"n": self.n, "layer": "every layer", "delta": np.nan, "power": self.power_all},
                 {"n": self.n, "layer": "any layer", "delta": np.nan, "power": self.power_any}]
        df = pd.DataFrame(rows)
        df["se"] = self.se(df["power"].to_numpy())
        df["sims"] = self.sims
        return df


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
                   resamples: int | None = None, permutations: int | None = None, shared: float = 0.0,
                   spread_df=None) -> PowerAtN:
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
    shared : float
        The weight with which each layer's power is read from the layers sharing its change
        (:func:`power_target`; the pooling weight of :func:`layer_spreads`).
    spread_df : array_like, (k,), optional
        The effective df of each layer's spread (:func:`spread_df`): each simulated sample's spread is then drawn
        as the true spread may be, given the pilot's, sqrt(d / chi2_d) times it (one draw per sample for all
        layers), so that the power is the power expected over the pilot's uncertainty about the spread (see
        :func:`spread_df`). None: the spread as given.
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
    if not 0.0 <= float(shared) <= 1.0:
        raise RoutestatsError(f"shared is a weight from 0 to 1, got {shared}")
    n, sims, k = int(n), int(sims), x.shape[1]
    m = x.shape[0]
    # resampling m centred rows draws from a population whose SD is the pilot's ddof-0 SD, sqrt((m - 1)/m) of the SD
    # the report prints (ddof 1): 5 % too few examples planned at m = 20 before any noise. Rescaled to ddof 1.
    base = (x - x.mean(axis=0)) * (spread.reshape(-1) * math.sqrt(m / (m - 1)))
    rng = np.random.default_rng([int(r.seed if seed is None else seed), n])
    scale = None if spread_df is None else spread_draws(spread_df, k, sims, rng)
    if scale is None:
        base = base + d  # shifted once here, not once per chunk of samples
    hits = np.zeros((sims, k), dtype=bool)
    chunk = max(1, MAX_SIM_VALUES // (n * k))
    for s in range(0, sims, chunk):
        c = min(chunk, sims - s)
        rows = rng.integers(0, len(base), size=(c, n))
        sample = base[rows]  # (c, n, k)
        if scale is not None:
            sample *= scale[s:s + c, None, :]
            sample += d
        cols = sample.transpose(1, 0, 2).reshape(n, c * k)  # one column per (sample, layer)
        res = paired_inference(cols, resampling=r)
        shape = (c, k)
        hits[s:s + c] = detected(res.p_raw.reshape(shape), res.ci_low.reshape(shape), res.ci_high.reshape(shape),
                                 np.sign(d), alpha)
    moved = d != 0
    all_ = hits[:, moved].all(axis=1).mean() if moved.any() else np.nan
    any_ = hits[:, moved].any(axis=1).mean() if moved.any() else hits.any(axis=1).mean()
    labels = tuple(range(k)) if labels is None else tuple(labels)
    return PowerAtN(n, labels, d, hits.mean(axis=0), float(all_), float(any_), sims, float(shared))


def power_target(res: PowerAtN) -> float:
    """What a plan asks to reach: the power of the hardest layer among those with a nonzero change, each layer's
    power read as (1 - B) x its own + B x the mean of the layers asked the same |change|, B = ``res.shared``.

    Layers pooled to one spread (:func:`layer_spreads`, weight B) still differ in the shape of their pilot rows: a
    tail or a run of zeros one layer's rows drew by chance. The smallest of their simulated powers is then the layer
    whose rows came out least favourable, biased low as the largest of their SDs was biased up; read from the layers
    together by the same weight that pooled their spreads, it is not (in a screen of 32 pilots with the report's test
    approximated by t-tests, t3 and 60 %-zero pilots planned 7-10 % fewer examples, nearer what their populations
    need).

    >>> r = PowerAtN(50, (0, 1), np.array([0.1, 0.1]), np.array([0.70, 0.90]), 0.65, 0.95, 1000)
    >>> power_target(r), power_target(PowerAtN(**{**r.__dict__, "shared": 1.0}))
    (0.7, 0.8)
    """
    moved = res.delta != 0
    if not moved.any():
        return float("nan")
    p = np.asarray(res.power, dtype=np.float64)
    if res.shared > 0:
        size = np.abs(res.delta)
        same = (size[:, None] == size[None, :]) & moved[None, :]
        p = (1.0 - res.shared) * p + res.shared * (same @ p) / np.maximum(same.sum(axis=1), 1)
    return float(p[moved].min())


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
