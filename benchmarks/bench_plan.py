"""Do plans achieve the power they state, on the pilots researchers have? (issue [plan-2])

For each of six planted populations of paired differences (examples x 4 layers, mean 0: normal, skewed, t with 3
df, layers sharing a common factor, unequal spreads across layers, many exact zeros), draws ``--pilots`` pilots of
20-64 examples, plans the n for 80 % power at a true change ``--delta`` in every layer the way ``routestats plan``
does (:func:`routestats.stats.power.search_n` over :func:`~routestats.stats.power.headline_power` from the pilot's
centred differences, scaled by the spread factor: ``pilot`` 1, the default ``upper`` its 80 % upper confidence
bound), and measures the power each planned n achieves on the population itself (the same headline test,
``--truth-sims`` fresh samples of n drawn from 40,000 population rows). Also the n the population needs for 80 %.

Prints, per population: the pilot plans' mean achieved power (claim: 0.80) with its standard error over the
pilots (8 pilots leave it about ± 0.03), the default's share of plans at or
above 0.80, and its mean n over the n the population needs; each twice: with each layer's spread as the pilot drew
it and chi-square on m - 1 df (the reference before pooling), and as ``routestats plan`` does it, pooled across
layers (:func:`routestats.stats.power.layer_spreads`) with each layer's bound on its effective df
(:func:`routestats.stats.power.upper_spreads`); ``--pooled`` prints only the latter. Run:
``python benchmarks/bench_plan.py [--pilots 32] [--sims 400] [--pooled]``; the test's settings are in the output.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

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


def planned_n(pilot: np.ndarray, delta: np.ndarray, factor: float, alpha: float, r: Resampling, sims: int,
              most: int) -> int | None:
    at = lambda n: P.headline_power(pilot, delta, n, alpha=alpha, sims=sims, spread=factor, resampling=r)  # noqa: E731
    reach = P.smallest_reachable_n(K, alpha, r)
    n, _ = P.search_n(at, 0.8, P.normal_guess(pilot, delta, alpha, 0.8, factor), reach, most)
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pilots", type=int, default=8)
    ap.add_argument("--sims", type=int, default=400, help="simulations per n in the plan's search")
    ap.add_argument("--truth-sims", type=int, default=1000, help="fresh samples per achieved power")
    ap.add_argument("--delta", type=float, default=0.008)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--pooled", action="store_true", help="only the plans routestats plan makes (layers pooled)")
    args = ap.parse_args()
    r = Resampling(resamples=500, permutations=2000, seed=1001)
    alpha = 0.05 / 3  # a pair report's layer family sharing alpha with two others
    delta = np.full(K, args.delta)
    t0 = time.process_time()
    print(f"load {os.getloadavg()[0]:.2f}; {K} layers, Δ {args.delta} in each, α {alpha:.4f} (Holm), "
          f"{r.resamples} resamples, {r.permutations} sign patterns; {args.sims} sims per n in the search, "
          f"{args.truth_sims} for each achieved power")
    print(f"{'population':11s} {'n needed':>8s} | {'pilot: mean achieved ± SE':>25s} {'n':>11s} | "
          f"{'default: >=0.80':>15s} {'mean achieved':>13s} {'n/needed':>8s}")
    for kind in args.kinds.split(","):
        rng = np.random.default_rng([2026, KINDS.index(kind)])  # a population's pilots whatever else is run
        truth = population(kind, 40_000, rng)
        achieved = lambda n: P.power_target(P.headline_power(  # noqa: E731
            truth, delta, n, alpha=alpha, sims=args.truth_sims, resampling=r, seed=7))
        need = planned_n(truth, delta, 1.0, alpha, r, args.truth_sims, 5000)
        res = {"pilot": [], "upper": [], "pilot_pooled": [], "upper_pooled": []}
        for i in range(args.pilots):
            m = int(rng.integers(20, 65))
            pilot = truth[rng.integers(0, len(truth), m)]
            pooled = P.layer_spreads(pilot)  # what routestats plan does; "as drawn": each layer's own pilot SD
            for mode, factor in (("pilot", 1.0), ("upper", P.upper_spread(m)), ("pilot_pooled", pooled),
                                 ("upper_pooled", P.upper_spreads(pilot)[0] * pooled)):
                if args.pooled and "pooled" not in mode:
                    continue
                n = planned_n(pilot, delta, factor, alpha, r, args.sims, 5000)
                res[mode].append((m, n, achieved(n) if n else float("nan")))
        for tag in (("pilot", "upper"), ("pilot_pooled", "upper_pooled"))[int(args.pooled):]:
            pw = np.array([a for _, _, a in res[tag[0]]])
            up = np.array([a for _, _, a in res[tag[1]]])
            n_up = np.array([n for _, n, _ in res[tag[1]]], dtype=float)
            n_pi = np.array([n for _, n, _ in res[tag[0]]], dtype=float)
            # the SE is the pilots' spread: what another set of as many pilots would move the mean by
            se = pw.std(ddof=1) / np.sqrt(len(pw))
            print(f"{kind:11s} {need:8d} | {pw.mean():18.3f} ± {se:.3f} {int(n_pi.min()):5d}-{int(n_pi.max()):<5d} | "
                  f"{(up >= 0.8).sum():>9d} of {len(up):<3d} {up.mean():13.3f} {n_up.mean() / need:8.2f}  "
                  f"{'layers pooled' if 'pooled' in tag[0] else 'as drawn'}", flush=True)
    print(f"{time.process_time() - t0:.0f} s CPU")


if __name__ == "__main__":
    main()
