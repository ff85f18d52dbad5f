"""The plan report's sentences: each built from the plan's rows, each printed only when its checks hold.

The answer is the planned size; beside it stand the power one size below (so "the smallest" is shown, not
asserted), the Monte Carlo error, and where the test's floor first lets it reach alpha.
"""

from __future__ import annotations

import pandas as pd

from routestats.report import floor_text
from routestats.compose.plan.pilot import Pilot
from routestats.claim import Check, Claim
from routestats.report import Figure

__all__ = ["CLAIM_ORDER", "example_claims", "seed_claims"]

CLAIM_ORDER = ("plan_floor", "plan_examples", "plan_not_reached", "plan_seeds", "plan_seeds_not_reached",
               "pilot_power", "seed_tradeoff")


def _change(r) -> str:
    """The change asked, with its sign (a fall of 0.01 is "-0.01", never "+0.01")."""
    return f"{r['delta_asked']:+g} in every layer" if r["uniform"] else \
        f"the per-layer changes asked (smallest |Δ| {r['delta_min']:g})"


def example_claims(plan: pd.DataFrame, pilot: Pilot, spread: str, fig: Figure) -> list[Claim]:
    """The claims of a pilot pair's plan (one row, :attr:`PlanContext.examples`)."""
    r = plan.iloc[0]
    out = []
    a, target = float(r["alpha"]), repr(float(r["target"]))
    reach, k = int(r["n_reachable"]), int(r["n_layers"])
    below = f"{floor_text(r['floor_below'], r['floor_below'])} with {reach - 1}" if reach > 1 else "1 or more"
    out.append(Claim("plan_floor", f"No layer's change can reach p_Holm < {a:.3g} with fewer than {reach} examples: with "
                     f"the report's draws the smallest p_Holm over {k} layers is {below}, "
                     f"{floor_text(r['floor_reachable'], r['floor_reachable'])} with {reach} ({k} × (c + 1)/(P + 1), c the "
                     "drawn sign patterns as extreme as data all of one sign).", "headline", "plan",
                     (int(r["pilot_examples"]),), key="pilot_examples",
                     requires=(Check("the floor reaches alpha at n_reachable", f"floor_reachable < {a!r}"),
                               Check("and not one example fewer", f"not (floor_below < {a!r})")),
                     evidence=plan))
    # both wordings are built; their checks, not an if beside them, choose the one that prints
    planned = r["n_planned"] == r["n_planned"]
    n = int(r["n_planned"]) if planned else int(r["n_tried"])
    one_less = f"{n - 1} examples: {r['power_below']:.3f}" if n > reach else "the fewest at which the test can reach α"
    if n > reach and r["n_mc_error"] == r["n_mc_error"] and r["n_mc_error"] >= 1:
        # the step from n - 1 to n is smaller than the estimates' noise: said as what it means for n (the two powers
        # beside each other are each ± one SE; "within the Monte Carlo error" beside 0.802 and 0.773 read as if their
        # difference were noise)
        one_less += (f"; so n is known to about ± {r['n_mc_error']:.0f} examples: one Monte Carlo SE of power is "
                     f"worth that many on the power curve here")
    out.append(Claim(
        "plan_examples", f"For a true change of {_change(r)}, {n} examples give the hardest layer's headline test "
        f"{r['target']:.0%} power (estimated {r['power_planned']:.3f} ± {r['se_planned']:.3f} Monte Carlo SE; "
        f"{one_less}; every layer at once: {r['power_all']:.3f}), planned from {r['pilot_examples']} pilot "
        f"examples with {spread}; sign-flip with Holm over {k} layers at α {a:.3g}.", "headline", "plan",
        (int(r["pilot_examples"]),), key="pilot_examples", evidence=plan, figure=fig,
        requires=(Check("reaches the power", f"power_planned >= {target}"),
                  Check("one example fewer does not", f"power_below < {target} or n_planned == n_reachable")),
        short=f"{n} examples give {r['target']:.0%} power for a change of {_change(r)}"))
    out.append(Claim(
        "plan_not_reached", f"Up to {int(r['max_examples']):,} examples the hardest layer's headline test stays "
        f"below {r['target']:.0%} power for a change of {_change(r)} (estimated {r['power_planned']:.3f} at "
        f"{int(r['n_tried']):,}); a change this small needs a larger study than --max-examples allows.",
        "headline", "plan", (int(r["pilot_examples"]),), key="pilot_examples", evidence=plan, figure=fig,
        requires=(Check("no size reached the power", f"n_planned != n_planned and power_planned < {target}"),),
        short=f"more than {int(r['max_examples']):,} examples for {r['target']:.0%} power"))
    # how often, in plain words: "missed at least one time in five" beside a power of 0.049 said the opposite of
    # what the number means (missed 95 times in 100)
    missed = 100 * (1 - float(r["power_pilot"])) if r["power_pilot"] == r["power_pilot"] else float("nan")
    out.append(Claim(
        "pilot_power", f"At the pilot's own {r['pilot_examples']} examples the hardest layer's power for this "
        f"change is {r['power_pilot']:.3f}: a study of that size would miss a change this size about "
        f"{missed:.0f} times in 100 (± {100 * r['se_pilot']:.0f}, Monte Carlo).",
        "finding", "plan", (int(r["pilot_examples"]),), key="pilot_examples", evidence=plan,
        requires=(Check("the power at the pilot's size was simulated", "power_pilot == power_pilot"),)))
    return out


def seed_claims(plan: pd.DataFrame, pilot: Pilot, spread: str, fig: Figure) -> list[Claim]:
    """The claims of a pilot study's plan (one row per examples-per-seed, :attr:`PlanContext.seeds`)."""
    out = []
    target = repr(float(plan["target"].iloc[0]))
    for i in range(len(plan)):
        r = plan.iloc[i]
        m = int(r["examples"])
        # both wordings are built; their checks, not an if beside them, choose the one that prints
        k = int(r["seeds_planned"]) if r["seeds_planned"] == r["seeds_planned"] else int(r["max_seeds"])
        fewer = f"{k - 1} seeds: {r['power_below']:.3f}" if k > 2 else "the fewest the test takes"
        wordings = (
            ((f"{k} seeds of {m} examples each give the hardest layer's across-seed test {r['target']:.0%} power "
              f"for a change of {_change(r)} (estimated {r['power_planned']:.3f}; {fewer})"),
             (Check("reaches the power", f"power_planned >= {target}", where=f"examples == {m}"),
              Check("one seed fewer does not", f"power_below < {target} or seeds_planned == 2",
                    where=f"examples == {m}")), "plan_seeds"),
            ((f"Up to {int(r['max_seeds'])} seeds of {m} examples each the hardest layer's across-seed test stays "
              f"below {r['target']:.0%} power for a change of {_change(r)}"),
             (Check("no seed count reached the power", "seeds_planned != seeds_planned",
                    where=f"examples == {m}"),), "plan_seeds_not_reached"))
        for text, checks, kind in wordings:
            if r["pilot"]:
                text += (f", planned from the pilot's {int(r['pilot_seeds'])} seeds with {spread}; paired t with Holm "
                         f"over {len(pilot.layers)} layers at α {r['alpha']:g}, the seed as the unit.")
            else:
                text += "."
            out.append(Claim(kind if r["pilot"] else "seed_tradeoff", text, "headline" if r["pilot"] else "finding",
                             "seed_plan", (m,), key="examples", evidence=plan, requires=checks,
                             figure=fig if r["pilot"] else None, short=(text.split(" (")[0] if r["pilot"] else "")))
    return out
