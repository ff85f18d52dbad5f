"""Do plans achieve the power they state, on the pilots researchers have? (issue [plan-2])

For each of six planted populations of paired differences (examples x 4 layers, mean 0: normal, skewed, t with 3
df, layers sharing a common factor, unequal spreads across layers, many exact zeros), draws ``--pilots`` pilots of
20-64 examples, plans the n for 80 % power at a true change ``--delta`` in every layer the way ``routestats plan``
does (:func:`planned_n`: the layers' spreads pooled by :func:`routestats.stats.power.layer_spreads`, their powers
read together by the same weight, :func:`~routestats.stats.power.power_target`; ``--spread pilot``: the power
expected over the spread's uncertainty, :func:`~routestats.stats.power.spread_df`; the default: each layer's spread
at its 85 % upper bound, :func:`~routestats.stats.power.upper_spreads`), and measures the power each planned n
achieves on the population itself (the same headline test, ``--truth-sims`` fresh samples of n drawn from 40,000
population rows). Also the n the population needs for 80 %.

Prints, per population: the pilot plans' mean achieved power (claim: 0.80) with its standard error over the
pilots (8 pilots leave it about ± 0.03), the default's share of plans at or above 0.80, its mean achieved power
and its mean n over the n the population needs, and the floor of that ratio (:func:`floor_ratio`: the least a plan
proportional to the pilot's variance can plan while 4 of 5 of its plans are not optimistic). Run:
``python benchmarks/bench_plan.py [--pilots 32] [--sims 1000] [--kinds normal,t3]``; the test's settings are in the
output.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from routestats.compose.plan.build import PlanQuestion, example_simulation
from routestats.settings import Resampling
from routestats.stats import power as P

K = 4  # layers
KINDS = ("normal", "skewed", "t3", "correlated", "unequal", "zeros")


def population(kind: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` rows of one planted population of paired differences (SD about 0.02 a layer), centred."""
    z = rng.standard_normal((size, K))
    if kind == "normal":
        x = z
    elif kind == "skewed":
        x = (rng.gamma(2.0, 1.0, (size, K)) - 2.0) / np.sqrt(2.0)
    elif kind == "t3":
        x = rng.standard_t(3, (size, K)) / np.sqrt(3.0)
    elif kind == "correlated":
        x = 0.9 * rng.standard_normal((size, 1)) + np.sqrt(1 - 0.81) * z
    elif kind == "unequal":
        x = z * np.array([0.5, 1.0, 1.5, 2.0])
    elif kind == "zeros":
        x = np.where(rng.uniform(size=(size, K)) < 0.6, 0.0, z * np.sqrt(1 / 0.4))
    else:
        raise ValueError(kind)
    x = 0.02 * x
    return x - x.mean(axis=0)


def planned_n(pilot: np.ndarray, delta: np.ndarray, mode: str, alpha: float, r: Resampling, sims: int,
              most: int) -> int | None:
    """The n ``routestats plan`` plans from ``pilot`` (``mode``: ``pilot`` or ``upper``, the default), simulated as
    :meth:`routestats.compose.plan.build.PlanContext.examples` simulates it (``example_simulation``)."""
    factor, _, layers, shared, drawn = example_simulation(pilot, PlanQuestion(delta=tuple(delta), spread=mode))
    at = lambda n: P.headline_power(pilot, delta, n, alpha=alpha, sims=sims, spread=factor * layers,  # noqa: E731
                                    resampling=r, shared=shared, spread_df=drawn)
    reach = P.smallest_reachable_n(K, alpha, r)
    n, _ = P.search_n(at, 0.8, P.normal_guess(pilot, delta, alpha, 0.8, factor * layers), reach, most)
    return n


def floor_ratio(truth: np.ndarray, alike: bool, rng: np.random.Generator, pilots: int = 20_000) -> float:
    """The least mean n / needed that a plan proportional to the pilot's variance can have while at least 4 of 5
    of its plans are not optimistic, knowing the population (which layers are alike, how its variance scatters).

    The n a mean's test needs is proportional to the variance, so a plan c x (pilot variance) / (true variance)
    times the needed n is not optimistic where c s^2 >= sigma^2: c is the inverse of the 20th percentile of
    s^2 / sigma^2 over pilots of 20-64 examples, and the mean n / needed is c E[s^2] / sigma^2 = c. s^2 is the mean
    of the alike layers' sample variances (the most a plan can pool) or, where they are not alike, the hardest
    layer's own. It bounds every plan that is a fixed multiple of the pilot's variance, even one chosen for the
    population; a multiple that moves with more of the pilot is not bound by it.
    """
    sig2 = truth.var(axis=0)
    ratio = np.empty(pilots)
    for i in range(pilots):
        s2 = truth[rng.integers(0, len(truth), int(rng.integers(20, 65)))].var(axis=0, ddof=1)
        ratio[i] = s2.mean() / sig2.mean() if alike else s2[-1] / sig2[-1]
    return float(ratio.mean() / np.quantile(ratio, 0.2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pilots", type=int, default=8)
    ap.add_argument("--sims", type=int, default=1000, help="simulations per n in the plan's search (the CLI's)")
    ap.add_argument("--truth-sims", type=int, default=4000, help="fresh samples per achieved power")
    ap.add_argument("--delta", type=float, default=0.008)
    ap.add_argument("--kinds", default=",".join(KINDS))
    args = ap.parse_args()
    r = Resampling(resamples=500, permutations=2000, seed=1001)
    alpha = 0.05 / 3  # a pair report's layer family sharing alpha with two others
    delta = np.full(K, args.delta)
    t0 = time.process_time()
    print(f"load {os.getloadavg()[0]:.2f}; {K} layers, Δ {args.delta} in each, α {alpha:.4f} (Holm), "
          f"{r.resamples} resamples, {r.permutations} sign patterns; {args.sims} sims per n in the search, "
          f"{args.truth_sims} for each achieved power")
    print(f"{'population':11s} {'n needed':>8s} | {'pilot: mean achieved ± SE':>25s} {'n':>11s} | "
          f"{'default: >=0.80':>15s} {'mean achieved':>13s} {'n/needed':>8s} {'floor':>5s}")
    for kind in args.kinds.split(","):
        rng = np.random.default_rng([2026, KINDS.index(kind)])  # a population's pilots whatever else is run
        truth = population(kind, 40_000, rng)
        # the hardest layer's power of the population itself. Its layers are planted alike but for "unequal": there
        # the smallest layer's rate; elsewhere the layers' mean rate (the smallest of four equal rates estimated
        # with noise is biased low by about one Monte Carlo SE: 1.3 points at 1,000 samples)
        alike = 0.0 if kind == "unequal" else 1.0
        achieved = lambda n: P.power_target(P.headline_power(  # noqa: E731
            truth, delta, n, alpha=alpha, sims=args.truth_sims, resampling=r, seed=7, shared=alike))
        at_truth = lambda n: P.headline_power(truth, delta, n, alpha=alpha, sims=args.truth_sims,  # noqa: E731
                                              resampling=r, seed=7, shared=alike)
        need, _ = P.search_n(at_truth, 0.8, P.normal_guess(truth, delta, alpha, 0.8, 1.0),
                             P.smallest_reachable_n(K, alpha, r), 5000)
        res = {"pilot": [], "upper": []}
        for i in range(args.pilots):
            m = int(rng.integers(20, 65))
            pilot = truth[rng.integers(0, len(truth), m)]
            for mode in res:
                n = planned_n(pilot, delta, mode, alpha, r, args.sims, 5000)
                res[mode].append((m, n, achieved(n) if n else float("nan")))
        pw = np.array([a for _, _, a in res["pilot"]])
        up = np.array([a for _, _, a in res["upper"]])
        n_up = np.array([n for _, n, _ in res["upper"]], dtype=float)
        n_pi = np.array([n for _, n, _ in res["pilot"]], dtype=float)
        # the SE is the pilots' spread: what another set of as many pilots would move the mean by
        se = pw.std(ddof=1) / np.sqrt(len(pw))
        print(f"{kind:11s} {need:8d} | {pw.mean():18.3f} ± {se:.3f} {int(n_pi.min()):5d}-{int(n_pi.max()):<5d} | "
              f"{(up >= 0.8).sum():>9d} of {len(up):<3d} {up.mean():13.3f} {n_up.mean() / need:8.2f} "
              f"{floor_ratio(truth, alike == 1.0, np.random.default_rng([2027, KINDS.index(kind)])):5.2f}",
              flush=True)
    print(f"{time.process_time() - t0:.0f} s CPU")


if __name__ == "__main__":
    main()
