"""Training-side analyses: SFM trajectories over checkpoint steps and gradient-norm ratios.

Examples
--------
>>> import tempfile
>>> from routestats.rundir.read import load_run
>>> from routestats.rundir.synthetic import synthetic_pair
>>> b, _ = synthetic_pair(tempfile.mkdtemp(), seed=0, n_examples=2, steps=(10, 20))
>>> g = gradient_checkpoint_summary(load_run(b), checkpoints=[10, 20])
>>> g[["checkpoint_step", "window_start_step", "window_end_step", "n_steps"]].values.tolist()
[[10, 1, 10, 10], [20, 11, 20, 10]]
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from routestats.errors import RoutestatsError
from routestats.rundir.read import Run

__all__ = ["trajectory", "gradient_norms", "gradient_ratios", "gradient_checkpoint_summary"]


def trajectory(obj, metric: str = "sfm", steps: Sequence[int] | None = None) -> pd.DataFrame:
    """Layer means of a per-example metric at every stored attention step.

    Columns: run_id, [role], step, layer, value, n_examples. Works for a Run or a RunPair
    (pairs use the steps both runs hold).
    """
    from routestats.metrics.passes import head_pass
    from routestats.metrics.routing import runs_by_role

    runs = runs_by_role(obj)
    common = sorted(set.intersection(*(set(r.attention_steps) for _, r in runs)))
    if steps is not None:
        missing = sorted(set(steps) - set(common))
        if missing:
            raise RoutestatsError(f"steps {missing} are not stored in every run (common steps: {common})")
        common = sorted(steps)
    if metric not in ("sfm", "entropy", "entropy_rownorm", "row_mass"):
        raise RoutestatsError(f"unknown metric {metric!r}")
    rows = []
    for role, run in runs:
        for step in common:
            h = head_pass(run, step).heads
            per_ex = h.groupby(["example_id", "layer"])[metric].mean()
            t = per_ex.groupby("layer").agg(value="mean", n_examples="size").reset_index()
            t.insert(0, "step", step)
            if role is not None:
                t.insert(0, "role", role)
            t.insert(0, "run_id", run.run_id)
            rows.append(t)
    out = pd.concat(rows, ignore_index=True)
    out["metric"] = metric
    return out


def gradient_norms(run: Run) -> pd.DataFrame:
    """Joint Q/K/V weight-gradient norm per step and layer: sqrt(|dWq|^2 + |dWk|^2 + |dWv|^2).

    Columns: step, layer, norm.
    """
    g = run.gradients()
    comps = set(g["component"].unique())
    if not {"q", "k", "v"} <= comps:
        raise RoutestatsError(f"{run.run_id}: gradients.parquet needs components q, k and v (has {sorted(comps)})")
    g = g[g["component"].isin(["q", "k", "v"])]
    counts = g.groupby(["step", "layer"]).size()
    if (counts != 3).any():
        bad = counts[counts != 3].index[0]
        raise RoutestatsError(f"{run.run_id}: gradients at step {bad[0]}, layer {bad[1]} lack or repeat a component")
    out = g.assign(sq=g["norm"] ** 2).groupby(["step", "layer"])["sq"].sum().map(np.sqrt).rename("norm")
    return out.reset_index()


def gradient_ratios(run: Run, upper: int = -1, lower: int = -2, window: int = 10) -> pd.DataFrame:
    """Per-step ratio of the joint Q/K/V gradient norm of layer ``upper`` to layer ``lower``.

    Defaults: last over penultimate layer. ``trailing_mean`` = mean of the per-step ratios
    over the last ``window`` rows ending at the step (mean of ratios, not ratio of means).
    Raises when the lower layer's norm is 0 at some step (the ratio would be undefined).
    Columns: run_id, step, lower_layer, upper_layer, lower_norm, upper_norm, ratio, trailing_mean.
    """
    n = gradient_norms(run)
    layers = sorted(n["layer"].unique())
    lo, up = layers[lower], layers[upper]
    wide = n.pivot(index="step", columns="layer", values="norm").sort_index()
    if (wide[lo] == 0).any():
        step = int(wide.index[(wide[lo] == 0).to_numpy()][0])
        raise RoutestatsError(f"{run.run_id}: layer {lo} gradient norm is 0 at step {step}; the ratio is undefined")
    out = pd.DataFrame(
        {
            "run_id": run.run_id,
            "step": wide.index.to_numpy(),
            "lower_layer": lo,
            "upper_layer": up,
            "lower_norm": wide[lo].to_numpy(),
            "upper_norm": wide[up].to_numpy(),
        }
    )
    out["ratio"] = out["upper_norm"] / out["lower_norm"]
    out["trailing_mean"] = out["ratio"].rolling(window, min_periods=1).mean()
    return out


def gradient_checkpoint_summary(
    run: Run, checkpoints: Sequence[int] | None = None, window: int = 10, upper: int = -1, lower: int = -2
) -> pd.DataFrame:
    """Trailing-window gradient ratios at checkpoint steps (METHODS 2.8).

    For checkpoint c: rows with step <= c, only if a row exists exactly at c; the last
    ``window`` rows (by count, so up to ``window``); mean and sample SD (0 for one row) of
    the per-step ratios, and the mean lower and upper norms. ``checkpoints`` defaults to
    the run's attention steps.
    """
    r = gradient_ratios(run, upper, lower, window)
    checkpoints = run.attention_steps if checkpoints is None else list(checkpoints)
    rows = []
    steps = r["step"].to_numpy()
    for c in checkpoints:
        if c not in steps:
            continue
        w = r[r["step"] <= c].tail(window)
        rows.append(
            {
                "run_id": run.run_id,
                "checkpoint_step": int(c),
                "window_start_step": int(w["step"].iloc[0]),
                "window_end_step": int(w["step"].iloc[-1]),
                "n_steps": len(w),
                "mean_ratio": float(w["ratio"].mean()),
                "sd_ratio": float(w["ratio"].std(ddof=1)) if len(w) > 1 else 0.0,
                "mean_lower_norm": float(w["lower_norm"].mean()),
                "mean_upper_norm": float(w["upper_norm"].mean()),
                "lower_layer": int(r["lower_layer"].iloc[0]),
                "upper_layer": int(r["upper_layer"].iloc[0]),
            }
        )
    return pd.DataFrame(rows)
