"""Learned vs mechanical: split a SAAB run's total effect with its bias-off evaluation (METHODS 3.4b).

With B the baseline, V_on the trained SAAB run and V_off the same weights evaluated with the bias
removed (``python -m runners evaluate RUN --bias off``), per example:
total = V_on - B, direct = V_on - V_off (what the bias does to these weights), learned = V_off - B
(what training changed); total = direct + learned exactly. Each gets the paired inference of
:func:`routestats.studies.effects.paired_effects`.
"""

from __future__ import annotations

import pandas as pd

from routestats.errors import RoutestatsError
from routestats.report import Column, Table
from routestats.rundir.collection import RunCollection, pair
from routestats.rundir.read import is_bias_off
from routestats.settings import AnalysisSettings
from routestats.studies.effects import paired_effects

__all__ = ["decomposition", "decompose", "decomposition_table", "COMPONENTS", "TITLE"]

COMPONENTS = ("total", "direct", "learned")


def decompose(base, on, off, settings: AnalysisSettings | None = None, step: int | None = None) -> pd.DataFrame:
    """total, direct and learned paired effects of one SAAB run ``on``, its bias-off evaluation ``off`` and
    their baseline ``base`` (columns as :func:`decomposition`), at ``step`` (default: ``settings.step``, else the
    SAAB run's final step, the step of the pair's other tables). A run without attention at that step is
    refused in one line: every table of a report is computed at the report's one step."""
    s = settings or AnalysisSettings()
    step = (on.final_step if s.step is None else s.step) if step is None else step
    for role, run in (("bias-off run", off), ("baseline", base), ("SAAB run", on)):
        if step not in run.attention_steps:
            have = ", ".join(map(str, run.attention_steps)) or "none"
            raise RoutestatsError(f"the {role} {run.run_id} holds attention at step {have} only, not at the report's "
                                  f"step {step}, so total = direct + learned is not computed; --step S computes every "
                                  "table at a step all three runs hold")
    kw = dict(resampling=s.resampling, examples=s.examples, step=step, trivial=s.trivial_queries, keys=s.keys)
    frames = []
    for name, p in (("total", pair(base, on)), ("direct", pair(off, on)), ("learned", pair(base, off))):
        e = paired_effects(p, **kw).rename(columns={"seed": "stats_seed"})
        e.insert(0, "seed", on.seed)
        e.insert(1, "source_run", on.run_id)
        e.insert(2, "component", name)
        frames.append(e)
    return pd.concat(frames, ignore_index=True)


def decomposition(runs: RunCollection, settings: AnalysisSettings | None = None) -> pd.DataFrame | None:
    """One row per (source run, component, layer); None when the tree holds no bias-off evaluation.

    Columns: seed (the runs'), source_run, component, then the :func:`paired_effects` columns (its
    ``seed`` of the random procedures renamed ``stats_seed``). A bias-off run without attention at the step is left out; the frame's ``attrs["left_out"]`` says which
    and why (when every one is left out, the first reason is raised).
    """
    s = settings or AnalysisSettings()
    frames, left_out = [], []
    for off in [r for r in runs if is_bias_off(r)]:
        try:
            on = runs.get(off.manifest["source_run"])
        except KeyError:
            continue
        bases = [r for r in runs if r.factors.get(s.factor) == s.baseline and r.init_id == off.init_id
                 and r.data_order_id == off.data_order_id]
        if bases:
            try:
                frames.append(decompose(bases[0], on, off, s))
            except RoutestatsError as exc:
                left_out.append(str(exc))
    if not frames:
        if left_out:
            raise RoutestatsError(left_out[0])
        return None
    out = pd.concat(frames, ignore_index=True)
    out.attrs["left_out"] = left_out
    return out


TITLE = "Learned vs mechanical: the bias on and off on the same weights"


def decomposition_table(frame: pd.DataFrame, conf: str) -> Table:
    """The shown decomposition table (METHODS 3.4b) of a pair or a study."""
    return Table("decomposition", frame, "Learned vs mechanical (METHODS 3.4b): total = SAAB − baseline, direct = "
                 "SAAB − the same weights with the bias removed, learned = bias-off − baseline (total = direct + "
                 f"learned per example); mean, {conf} bootstrap CI and sign-flip p, Holm over layers within each "
                 "component.",
                 (Column("Seed", "seed", "int"), Column("Component", "component", "text"), Column("Layer", "layer", "int"),
                  Column("Δ", "mean_diff"), Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"),
                  Column("d_z", "dz", "num", 2), Column("p (Holm)", "p_holm", "p", floor="p_holm_floor"), Column("n", "n", "int")))
