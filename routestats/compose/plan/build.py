"""The plan report: how many examples (a pilot pair) or seeds (a pilot study) a study needs for a true change.

:func:`plan` returns the tidy power curve; :func:`build_plan_report` the :class:`~routestats.report.Report`
that ``routestats plan`` writes (its answer first: the planned size, the power there and one size below,
with their Monte Carlo errors; then the power curve with the pilot's and the planned size marked). Every
sentence is a claim whose checks read the plan's own rows (:mod:`routestats.compose.plan.claims`).

Examples
--------
>>> import tempfile
>>> from routestats.rundir.synthetic import synthetic_pair
>>> folder = tempfile.mkdtemp()
>>> _ = synthetic_pair(folder, seed=0, n_examples=12)
>>> q = PlanQuestion(delta=0.05, sims=100, max_examples=64)
>>> rep = build_plan_report(folder, q, AnalysisSettings(resamples=300, permutations=999))
>>> sorted(rep.tables())
['plan', 'power_curve']
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from routestats.compose.plan.claims import CLAIM_ORDER, example_claims, seed_claims
from routestats.compose.plan.pilot import Pilot, read_pilot
from routestats.compose.skeleton import build_report, generated_now
from routestats.errors import RoutestatsError
from routestats.report import Column, Figure, Report, Section, Table, section
from routestats.settings import AnalysisSettings
from routestats.stats import power as P

__all__ = ["PlanQuestion", "plan", "build_plan_report", "PLAN_SECTIONS", "example_simulation"]


MAX_DELTA = 1.0  # SFM and every mass are shares of a row's attention: a change of more than 1 cannot happen
MAX_SPREAD = 100.0  # a multiple of the pilot's spread beyond this plans for another pilot, not this one
MAX_SIMS = 100_000  # Monte Carlo SE at most 0.0016: more simulations buy time, not precision
MAX_EXAMPLES = 1_000_000  # one simulated sample of this many examples x 32 layers is 256 MB of float64


@dataclass(frozen=True)
class PlanQuestion:
    """What a plan is asked: the true change ``delta`` (one value for every layer, or one per layer), the
    ``power`` to reach, the pilot's ``spread`` to plan from (``upper``: its SD at a one-sided upper confidence
    bound, the default: 85 % for a pilot pair's layers, 80 % for a study's seeds; ``pilot``: as observed, the power
    averaged over its uncertainty; a number: that multiple of the pilot's), the
    simulated samples per size (``sims``) and the largest size tried (``max_examples``, ``max_seeds``).

    >>> PlanQuestion(delta=0.01).spread_label(32)
    "the pilot's spread at its 80% upper confidence bound (× 1.131)"
    >>> PlanQuestion(delta=0.01, power=1.2)
    Traceback (most recent call last):
    ...
    routestats.errors.RoutestatsError: --power must lie strictly between 0 and 1, got 1.2
    """

    delta: float | tuple = 0.01
    power: float = 0.8
    spread: str | float = "upper"
    sims: int = 1000
    max_examples: int = 4096
    max_seeds: int = 30

    def __post_init__(self):
        d = np.atleast_1d(np.asarray(self.delta, dtype=np.float64))
        if not np.isfinite(d).all() or not (d != 0).any():
            raise RoutestatsError(f"the change to detect (--delta, --delta-per-layer) must be finite and nonzero for "
                                  f"some layer, got {self.delta!r}")
        if (np.abs(d) > MAX_DELTA).any():
            raise RoutestatsError(f"the change to detect (--delta, --delta-per-layer) must be at most {MAX_DELTA:g} in "
                                  f"size: SFM is a share of attention, so it cannot move by more than {MAX_DELTA:g}; "
                                  f"got {self.delta!r}")
        if not 0 < self.power < 1:
            raise RoutestatsError(f"--power must lie strictly between 0 and 1, got {self.power!r}")
        if not (self.spread in ("upper", "pilot") or (isinstance(self.spread, (int, float)) and not
                                                      isinstance(self.spread, bool) and 0 < self.spread <= MAX_SPREAD)):
            raise RoutestatsError(f"--spread takes upper, pilot or a multiple of the pilot's spread above 0 and at most "
                                  f"{MAX_SPREAD:g}, got {self.spread!r}")
        for name, least, most in (("sims", 20, MAX_SIMS), ("max_examples", 4, MAX_EXAMPLES), ("max_seeds", 3, 1000)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not least <= v <= most:
                raise RoutestatsError(f"--{name.replace('_', '-')} takes a whole number from {least} to {most:,}, "
                                      f"got {v!r}")

    def deltas(self, n_layers: int) -> np.ndarray:
        d = np.atleast_1d(np.asarray(self.delta, dtype=np.float64))
        if d.size == 1:
            return np.repeat(d, n_layers)
        if d.size != n_layers:
            raise RoutestatsError(f"{d.size} per-layer changes for a pilot of {n_layers} layers")
        return d

    def spread_factor(self, n_pilot: int) -> float:
        if self.spread == "upper":
            return P.upper_spread(n_pilot)
        return 1.0 if self.spread == "pilot" else float(self.spread)

    def spread_label(self, n_pilot: int) -> str:
        f = self.spread_factor(n_pilot)
        if self.spread == "upper":
            return f"the pilot's spread at its {P.UPPER_SPREAD_LEVEL:.0%} upper confidence bound (× {f:.3f})"
        return "the pilot's spread as observed" if self.spread == "pilot" else f"{f:g} × the pilot's spread"

    def example_spreads(self, D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per layer of a pilot pair's differences ``D``: the factor on its (pooled) spread and the df of its
        bound (:func:`routestats.stats.power.upper_spreads` by default) or, with ``pilot``, the df its uncertainty
        is drawn on (:func:`routestats.stats.power.spread_df`); NaN df for a given multiple."""
        k = D.shape[1]
        if self.spread == "upper":
            return P.upper_spreads(D)
        if self.spread == "pilot":
            return np.ones(k), P.spread_df(D)
        return np.full(k, self.spread_factor(len(D))), np.full(k, np.nan)

    def example_spread_label(self, row) -> str:
        """:meth:`spread_label` for a pilot pair, whose bound is each layer's, on its effective df.

        >>> PlanQuestion(delta=0.01).example_spread_label({"spread_factor_min": 1.061, "spread_factor_max": 1.07,
        ...     "spread_df_min": 96.2, "spread_df_max": 104.9, "pilot_examples": 32})
        "the pilot's spread at its 85% upper confidence bound (× 1.061–1.070 by layer, on 96–105 effective df, \
where one normal layer of 32 examples has 31)"
        """
        if self.spread == "pilot":
            dlo, dhi = float(row["spread_df_min"]), float(row["spread_df_max"])
            d = f"{dlo:.0f}" if round(dlo) == round(dhi) else f"{dlo:.0f}–{dhi:.0f}"
            return (f"the pilot's spread as observed, the power averaged over what the pilot leaves possible for the "
                    f"true spread (on {d} effective df)")
        if self.spread != "upper":
            return self.spread_label(int(row["pilot_examples"]))
        lo, hi = float(row["spread_factor_min"]), float(row["spread_factor_max"])
        dlo, dhi = float(row["spread_df_min"]), float(row["spread_df_max"])
        f = f"{lo:.3f}" if round(lo, 3) == round(hi, 3) else f"{lo:.3f}–{hi:.3f} by layer"
        d = f"{dlo:.0f}" if round(dlo) == round(dhi) else f"{dlo:.0f}–{dhi:.0f}"
        m = int(row["pilot_examples"])
        return (f"the pilot's spread at its {P.EXAMPLE_SPREAD_LEVEL:.0%} upper confidence bound (× {f}, on {d} "
                f"effective df, where one normal layer of {m} examples has {m - 1})")


@dataclass(frozen=True)
class PlanContext:
    """The pilot, the question and the settings; the simulations run once (``cached_property``)."""

    pilot: Pilot
    question: PlanQuestion
    settings: AnalysisSettings
    say: Callable[[str], None] = field(default=lambda s: None, repr=False, compare=False)

    @functools.cached_property
    def examples(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(the plan row, the power curve) of a pilot pair: the smallest n whose hardest layer reaches the power."""
        p, q, s = self.pilot, self.question, self.settings
        D = p.D.to_numpy()
        delta = q.deltas(D.shape[1])
        factor, df, layers, shared, drawn = example_simulation(D, q)
        k = D.shape[1]
        reach = P.smallest_reachable_n(k, p.alpha, s.resampling)
        if reach is None:
            raise RoutestatsError(f"with {s.permutations:,} sign-flip draws no layer can reach p_Holm < {p.alpha:.3g} "
                                  f"over {k} layers at any n; raise --permutations")

        def power_at(n: int) -> P.PowerAtN:
            return P.headline_power(D, delta, n, alpha=p.alpha, sims=q.sims, spread=factor * layers,
                                    resampling=s.resampling, labels=p.layers, shared=shared, spread_df=drawn)

        start = P.normal_guess(D, delta, p.alpha, q.power, factor * layers)
        n, seen = P.search_n(power_at, q.power, start, reach, q.max_examples, self.say)
        by_n = {r.n: r for r in seen}
        top_n = n if n is not None else max(by_n)
        for m in {p.n_examples, *(int(top_n * f) for f in (0.25, 0.5, 0.75))}:  # the curve's shape, for the figure
            if reach <= m <= q.max_examples and m not in by_n:
                by_n[m] = power_at(m)
        curve = pd.concat([by_n[m].to_frame() for m in sorted(by_n)], ignore_index=True)
        top = by_n[n] if n is not None else by_n[max(by_n)]
        below = by_n.get(n - 1) if n is not None else None
        own = by_n.get(p.n_examples)
        row = {"pilot_examples": p.n_examples, "n_layers": k, "alpha": p.alpha, "families": p.families,
               "target": q.power, "delta_min": float(np.abs(delta[delta != 0]).min()),
               "delta_asked": float(delta[0]) if np.all(delta == delta[0]) else np.nan,
               "delta_max": float(np.abs(delta).max()), "uniform": bool(np.all(delta == delta[0])),
               "spread_factor_min": float(factor.min()), "spread_factor_max": float(factor.max()),
               "spread_df_min": float(np.nanmin(df)) if np.isfinite(df).any() else np.nan,
               "spread_df_max": float(np.nanmax(df)) if np.isfinite(df).any() else np.nan,
               "layer_spread_min": float(layers.min()),
               "layer_spread_max": float(layers.max()), "shared": shared, "sims": q.sims,
               "max_examples": q.max_examples,
               "n_reachable": reach,
               "floor_reachable": k * P.drawn_floor(reach, s.resampling),
               "floor_below": k * P.drawn_floor(reach - 1, s.resampling) if reach > 1 else np.nan,
               "n_planned": n if n is not None else np.nan, "n_tried": top.n,
               "power_planned": P.power_target(top), "power_all": top.power_all,
               "n_below": n - 1 if below is not None else np.nan,
               "power_below": P.power_target(below) if below is not None else np.nan,
               "power_pilot": P.power_target(own) if own is not None else np.nan}
        plan = pd.DataFrame([row])
        plan["se_planned"] = np.sqrt(plan["power_planned"] * (1 - plan["power_planned"]) / q.sims)
        plan["n_mc_error"] = _examples_per_se(by_n, n, float(plan["se_planned"].iloc[0]))
        plan["se_pilot"] = np.sqrt(plan["power_pilot"] * (1 - plan["power_pilot"]) / q.sims)
        return plan, curve

    @functools.cached_property
    def seeds(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(the seeds needed at each examples-per-seed, the power over seeds) of a pilot study."""
        from scipy import stats

        p, q, s = self.pilot, self.question, self.settings
        c = p.components
        delta = q.deltas(len(c))
        k0, n0 = p.n_seeds, p.n_examples
        vb, vw = c["var_between_seeds"].to_numpy(), c["var_within_seed"].to_numpy()
        if q.spread == "upper":  # the seed means' variance at its upper bound, put on the between-seed part
            total = vb + vw / n0
            vb = total * (k0 - 1) / stats.chi2.ppf(1 - P.UPPER_SPREAD_LEVEL, k0 - 1) - vw / n0
        elif q.spread != "pilot":
            vb, vw = vb * float(q.spread) ** 2, vw * float(q.spread) ** 2
        sizes = sorted({max(1, n0 // 2), n0, 2 * n0, 4 * n0})
        rows, plans = [], []
        for m in sizes:
            found = None
            for k in range(2, q.max_seeds + 1):
                pw = P.seed_power(vb, vw, delta, k, m, alpha=p.alpha, sims=q.sims, confidence=s.confidence,
                                  seed=s.seed)
                rows += [{"examples": m, "seeds": k, "layer": str(l), "power": float(v)} for l, v in zip(p.layers, pw)]
                hard = float(pw[delta != 0].min())
                rows.append({"examples": m, "seeds": k, "layer": "hardest layer", "power": hard})
                if hard >= q.power:
                    found = k
                    break
            self.say(f"{m} examples per seed: {found or f'more than {q.max_seeds}'} seeds")
            plans.append({"examples": m, "pilot": m == n0, "seeds_planned": found if found else np.nan})
        curve = pd.DataFrame(rows)
        curve["se"] = np.sqrt(curve["power"] * (1 - curve["power"]) / q.sims)
        plan = pd.DataFrame(plans)
        hard = curve[curve["layer"] == "hardest layer"].set_index(["examples", "seeds"])["power"]
        plan["power_planned"] = [hard.get((m, k), np.nan) for m, k in zip(plan["examples"], plan["seeds_planned"])]
        plan["power_below"] = [hard.get((m, k - 1), np.nan) for m, k in zip(plan["examples"], plan["seeds_planned"])]
        plan["target"] = q.power
        plan["pilot_seeds"] = k0
        plan["max_seeds"] = q.max_seeds
        plan["alpha"] = p.alpha
        plan["delta_min"] = float(np.abs(delta[delta != 0]).min())
        plan["delta_asked"] = float(delta[0]) if np.all(delta == delta[0]) else np.nan
        plan["uniform"] = bool(np.all(delta == delta[0]))
        plan["sims"] = q.sims
        return plan, curve


def _examples_per_se(by_n: dict, n: int | None, se: float) -> float:
    """How many examples one Monte Carlo standard error of the planned n's power is worth: the SE over the power
    curve's slope between the largest size simulated at or below 0.8 n and n (NaN without such a size or slope).
    "n - 1 gives less" is a difference within the noise when this is above 1."""
    lower = [m for m in by_n if n is not None and m <= 0.8 * n]
    if not lower:
        return float("nan")
    m = max(lower)
    slope = (P.power_target(by_n[n]) - P.power_target(by_n[m])) / (n - m)
    return se / slope if slope > 0 else float("nan")


@section("examples", "Examples needed")
def examples_section(ctx: PlanContext) -> Section | None:
    if ctx.pilot.kind != "pair":
        return None
    plan, curve = ctx.examples
    q = ctx.question
    fig = Figure("power_curve", "power_curve", {"curve": curve[curve["layer"] != "any layer"]},
                 {"target": q.power, "pilot": ctx.pilot.n_examples, "planned": plan["n_planned"].iloc[0],
                  "x": "examples"})
    t_plan = Table("plan", plan, "The plan: the smallest number of examples at which the hardest layer's headline "
                   "test reaches the power, estimated by simulation from the pilot.",
                   (Column("Pilot n", "pilot_examples", "int"), Column("Layers", "n_layers", "int"),
                    Column("α (family)", "alpha", "sig"), Column("Reachable from n", "n_reachable", "int"),
                    Column("Planned n", "n_planned", "int"), Column("Power", "power_planned", "num", 3),
                    Column("MC SE", "se_planned", "num", 3), Column("Power at n − 1", "power_below", "num", 3),
                    Column("Power at pilot n", "power_pilot", "num", 3)))
    t_curve = Table("power_curve", curve, f"Estimated power per layer at each size simulated ({q.sims:,} samples "
                    "each; MC SE = Monte Carlo standard error): the rate at which the headline calls the layer's "
                    "change, in its direction.",
                    (Column("n", "n", "int"), Column("Layer", "layer", "text"), Column("Δ", "delta", "num", 4),
                     Column("Power", "power", "num", 3), Column("MC SE", "se", "num", 3)))
    return Section(tables=(t_plan, t_curve), figures=(fig,),
                   claims=tuple(example_claims(plan, ctx.pilot, q.example_spread_label(plan.iloc[0])
                                               + _pooled_label(plan.iloc[0]), fig)))


@section("seeds", "Seeds needed")
def seeds_section(ctx: PlanContext) -> Section | None:
    if ctx.pilot.kind != "study":
        return None
    plan, curve = ctx.seeds
    q = ctx.question
    at_pilot = curve[(curve["examples"] == ctx.pilot.n_examples)]
    fig = Figure("power_curve", "power_curve", {"curve": at_pilot.rename(columns={"seeds": "n"})},
                 {"target": q.power, "pilot": ctx.pilot.n_seeds,
                  "planned": plan.loc[plan["pilot"], "seeds_planned"].iloc[0], "x": "seeds"})
    t_plan = Table("seed_plan", plan, "Seeds needed for the across-seed test (paired t, Holm over layers) at each "
                   "number of examples per seed, simulated from the pilot's variance split.",
                   (Column("Examples per seed", "examples", "int"), Column("Seeds", "seeds_planned", "int"),
                    Column("Power", "power_planned", "num", 3), Column("Power with one fewer", "power_below", "num", 3)))
    t_curve = Table("seed_power", curve, f"Estimated power per layer over seeds and examples per seed ({q.sims:,} "
                    "samples each).",
                    (Column("Examples", "examples", "int"), Column("Seeds", "seeds", "int"),
                     Column("Layer", "layer", "text"), Column("Power", "power", "num", 3),
                     Column("MC SE", "se", "num", 3)))
    return Section(tables=(t_plan, t_curve), figures=(fig,),
                   claims=tuple(seed_claims(plan, ctx.pilot, q.spread_label(ctx.pilot.n_seeds), fig)))


PLAN_SECTIONS = (examples_section, seeds_section)


def example_simulation(D: np.ndarray, question: PlanQuestion) -> tuple:
    """How a plan simulates a pilot pair's differences ``D`` (examples x layers), as ``question`` asks: (the factor
    on each layer's spread and its df, :meth:`PlanQuestion.example_spreads`; each layer's pooling factor,
    :func:`routestats.stats.power.layer_spreads`; the weight its power is read with the layers', B of
    :func:`~routestats.stats.power.pooling`; the df its spread is drawn on with ``--spread pilot``, else None).
    ``headline_power(D, delta, n, spread=factor * layers, shared=B, spread_df=drawn, ...)`` is the plan's power."""
    factor, df = question.example_spreads(D)
    layers = P.layer_spreads(D)  # equally variable layers share one spread: no hardest layer by chance
    shared = P.pooling(D)[1]  # ... and their powers are read together by the same weight (P.power_target)
    drawn = df if question.spread == "pilot" else None  # as observed: the power expected over its uncertainty
    return factor, df, layers, shared, drawn


def _pooled_label(row) -> str:
    """What pooling the layers' spreads did (:func:`routestats.stats.power.layer_spreads`), for the plan's sentence:
    the weight B says which (1: the layers differ no more than chance gives 19 times in 20; below 1/2: beyond it,
    by more than 0.4 of chance's mean spread, so that each layer keeps nearly its own).

    >>> _pooled_label({"layer_spread_min": 0.93, "layer_spread_max": 1.08, "shared": 1.0})
    ", each layer's pooled to the layers' mean spread, as they differ by no more than chance gives 19 times in 20 \
(× 0.93–1.08), and the layers' powers read together"
    >>> _pooled_label({"layer_spread_min": 0.99, "layer_spread_max": 1.02, "shared": 0.06})
    ", each layer's spread nearly its own, as the layers differ beyond what chance gives 19 times in 20 (pooled \
by weight 0.06: × 0.99–1.02)"
    >>> _pooled_label({"layer_spread_min": 1.0, "layer_spread_max": 1.0, "shared": 0.0})
    ''
    """
    lo, hi = float(row["layer_spread_min"]), float(row["layer_spread_max"])
    shared = float(row["shared"])
    if abs(lo - 1) < 5e-3 and abs(hi - 1) < 5e-3 and shared < 5e-3:  # kept as drawn: nothing to say
        return ""
    if shared >= 1.0 - 1e-12:
        return (f", each layer's pooled to the layers' mean spread, as they differ by no more than chance gives 19 "
                f"times in 20 (× {lo:.2f}–{hi:.2f}), and the layers' powers read together")
    if shared < 0.5:
        return (f", each layer's spread nearly its own, as the layers differ beyond what chance gives 19 times in 20 "
                f"(pooled by weight {shared:.2f}: × {lo:.2f}–{hi:.2f})")
    return (f", each layer's spread pooled part way toward the layers' mean, as they differ somewhat beyond what "
            f"chance gives 19 times in 20 (weight {shared:.2f}: × {lo:.2f}–{hi:.2f}), and the layers' powers read "
            f"together by the same weight")


def _context(path, question: PlanQuestion, settings, progress) -> PlanContext:
    s = AnalysisSettings.of(settings)
    say = progress or (lambda label: None)
    pilot = read_pilot(path, s, say)
    delta = question.deltas(len(pilot.layers))  # a change per layer of another model: refused before any simulation
    if pilot.kind == "pair":
        check_pilot_pair(pilot, delta, path)
    if question.max_examples * max(1, len(pilot.layers)) > P.MAX_SIM_VALUES * 4:
        raise RoutestatsError(f"--max-examples {question.max_examples:,} over {len(pilot.layers)} layers would hold "
                              f"{question.max_examples * len(pilot.layers) * 8 / 2**20:,.0f} MB per simulated sample; "
                              f"at most {P.MAX_SIM_VALUES * 4 // max(1, len(pilot.layers)):,} examples for this pilot")
    return PlanContext(pilot, question, s, say)


def check_pilot_pair(pilot: Pilot, delta: np.ndarray, path) -> None:
    """Refuse, in one line, a pilot pair a plan cannot mean anything for: no layer with a paired SFM difference (no
    query in a named field), fewer than 2 examples (no spread to plan from), or a layer asked to move whose
    differences are all equal (zero spread: every sample would be the same, and any n would "detect" it)."""
    D = pilot.D
    if D is None or D.shape[1] == 0:
        raise RoutestatsError(f"{path}: the pilot has no layer with a paired SFM difference (no query in a named "
                              "field): nothing to plan from")
    if D.shape[0] < 2:
        raise RoutestatsError(f"{path}: the pilot has {D.shape[0]} example with a paired SFM difference; a plan needs at "
                              "least 2 to estimate their spread")
    flat = [str(c) for c, sd, d in zip(D.columns, D.to_numpy(dtype=np.float64).std(axis=0, ddof=1), delta)
            if d != 0 and not sd > 0]
    if flat:
        raise RoutestatsError(f"{path}: the pilot's differences do not vary in layer{'s' if len(flat) > 1 else ''} "
                              f"{', '.join(flat)} (zero spread: the two runs' attention is the same there), so no "
                              "sample size can be planned from it; give those layers a change of 0 with "
                              "--delta-per-layer, or plan from a pilot whose runs differ")


def build_plan_report(path, question: PlanQuestion, settings: AnalysisSettings | None = None,
                      progress: Callable[[str], None] | None = None) -> Report:
    """The plan report of the pilot at ``path`` (see the module docstring)."""
    ctx = _context(path, question, settings, progress)
    p = ctx.pilot
    what = "examples" if p.kind == "pair" else "seeds"
    methods = (
        f"Power is estimated by simulation: {question.sims:,} samples per size, each analysed with the report's own "
        "test and settings, the rate at which its headline calls a layer's change in the planted direction. "
        + ("Samples of n whole examples (their layers together) are drawn with replacement from the pilot's per-example "
           "differences, centred on their layer means, scaled to the planned spread (each layer's variance pooled "
           "toward the layers' mean variance by as much as they differ within sampling noise) and shifted by Δ; each "
           "sample gets "
           "the percentile bootstrap and the two-sided sign-flip test with Holm over the layers at the family's α "
           f"({p.alpha:.3g}: the report's α shared by its {p.families} headline families); the size searched is the "
           "smallest n whose hardest layer reaches the power (bracketing, then bisection)."
           if p.kind == "pair" else
           "Each seed's mean Δ per layer is drawn from Normal(Δ, var_between + var_within / examples), the pilot's "
           "random-intercept variance split (REML), layers independent; each sample gets the paired t-test across "
           f"seeds with Holm over the layers at α {p.alpha:g} and its t interval."))
    return build_report(ctx, PLAN_SECTIONS, title=f"Plan: {what} for a change of {_delta_text(question)}",
                        subtitle=f"Pilot: {p.subject} · {p.n_examples} examples"
                                 + (f" × {p.n_seeds} seeds" if p.kind == "study" else "")
                                 + f" · {len(p.layers)} layers · target power {question.power:.0%}",
                        methods=methods, claim_order=CLAIM_ORDER,
                        provenance={"pilot": str(path), "analysis": {"generated": generated_now(),
                                                                   "settings": asdict(ctx.settings),
                                                                   "question": asdict(question)}},
                        facts={"pilot_kind": p.kind, "pilot_examples": p.n_examples, "alpha": p.alpha})


def _delta_text(q: PlanQuestion) -> str:
    d = np.atleast_1d(np.asarray(q.delta, dtype=np.float64))
    return f"{d[0]:+g} SFM in every layer" if d.size == 1 else "Δ SFM " + ", ".join(f"{v:+g}" for v in d) + " by layer"


def plan(path, delta=0.01, *, power: float = 0.8, spread="upper", sims: int = 1000, max_examples: int = 4096,
         max_seeds: int = 30, settings: AnalysisSettings | None = None, progress=None) -> pd.DataFrame:
    """The power curve of a plan from the pilot at ``path`` as a tidy frame (a pilot pair: n, layer, delta, power,
    se, sims, planned; a pilot study: examples, seeds, layer, power, se, planned); see :class:`PlanQuestion`."""
    q = PlanQuestion(delta=delta if np.ndim(delta) == 0 else tuple(delta), power=power, spread=spread, sims=sims,
                     max_examples=max_examples, max_seeds=max_seeds)
    ctx = _context(path, q, settings, progress)
    if ctx.pilot.kind == "pair":
        row, curve = ctx.examples
        return curve.assign(planned=curve["n"] == row["n_planned"].iloc[0])
    rows, curve = ctx.seeds
    best = dict(zip(rows["examples"], rows["seeds_planned"]))
    return curve.assign(planned=[best.get(m) == k for m, k in zip(curve["examples"], curve["seeds"])])
