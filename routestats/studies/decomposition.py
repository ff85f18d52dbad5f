"""Learned vs mechanical: split a SAAB run's total effect with its bias-off evaluation (METHODS 3.4b).

With B the baseline, V_on the trained SAAB run and V_off the same weights evaluated with the bias
removed (``python -m runners evaluate RUN --bias off``), per example:
total = V_on - B, direct = V_on - V_off (what the bias does to these weights), learned = V_off - B
(what training changed); total = direct + learned exactly. Each gets the paired inference of
:func:`routestats.studies.effects.paired_effects`.
"""

from __future__ import annotations

import pandas as pd

from routestats.rundir.collection import RunCollection, pair
from routestats.settings import AnalysisSettings
from routestats.studies.effects import paired_effects

__all__ = ["decomposition", "COMPONENTS"]

COMPONENTS = ("total", "direct", "learned")


def decomposition(runs: RunCollection, settings: AnalysisSettings | None = None) -> pd.DataFrame | None:
    """One row per (source run, component, layer); None when the tree holds no bias-off evaluation.

    Columns: seed (the runs'), source_run, component, then the :func:`paired_effects` columns (its
    ``seed`` of the random procedures renamed ``stats_seed``).
    """
    s = settings or AnalysisSettings()
    off_runs = [r for r in runs if r.factors.get("eval_bias") == "off" and r.manifest.get("source_run")]
    frames = []
    for off in off_runs:
        try:
            on = runs.get(off.manifest["source_run"])
        except KeyError:
            continue
        bases = [r for r in runs if r.factors.get(s.factor) == s.baseline and r.init_id == off.init_id
                 and r.data_order_id == off.data_order_id]
        if not bases:
            continue
        base = bases[0]
        step = min(on.final_step, off.final_step, base.final_step) if s.step is None else s.step
        kw = dict(resampling=s.resampling, examples=s.examples, step=step, trivial=s.trivial_queries, keys=s.keys)
        for name, p in (("total", pair(base, on)), ("direct", pair(off, on)), ("learned", pair(base, off))):
            e = paired_effects(p, **kw).rename(columns={"seed": "stats_seed"})
            e.insert(0, "seed", on.seed)
            e.insert(1, "source_run", on.run_id)
            e.insert(2, "component", name)
            frames.append(e)
    return pd.concat(frames, ignore_index=True) if frames else None
