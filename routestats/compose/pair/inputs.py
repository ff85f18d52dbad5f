"""The inputs of pair-report sections that are not routing metrics: task performance and training
curves, the init-vs-final table (METHODS 3.4a), the running mean the length figure draws, and the size
of an attention file on disk."""

from __future__ import annotations

import numpy as np
import pandas as pd

from routestats.rundir import schema as S
from routestats.rundir.collection import RunPair
from routestats.stats.inference import paired_inference
from routestats.studies.effects import paired_differences

__all__ = ["curves", "performance", "init_vs_final", "running_mean", "size_on_disk"]


def curves(p: RunPair) -> pd.DataFrame | None:
    frames = []
    for role, run in (("baseline", p.baseline), ("variant", p.variant)):
        if not run.has(S.METRICS):
            return None
        m = run.metrics()[["step", "phase", "loss", "accuracy"]]
        m.insert(0, "role", role)
        frames.append(m)
    return pd.concat(frames, ignore_index=True)


def performance(p: RunPair) -> pd.DataFrame:
    rows = []
    for role, run in (("baseline", p.baseline), ("variant", p.variant)):
        row = {"role": role, "run_id": run.run_id, "steps": None, "final_train_loss": np.nan, "eval_loss": np.nan,
               "eval_accuracy": np.nan}
        if run.has(S.METRICS):
            m = run.metrics()
            tr = m[m["phase"] == "train"].sort_values("step")
            ev = m[m["phase"] == "eval"].sort_values("step")
            if len(tr):
                row["steps"] = int(tr["step"].iloc[-1])
                row["final_train_loss"] = float(tr["loss"].iloc[-1])
            if len(ev):
                row["eval_loss"] = float(ev["loss"].iloc[-1])
                row["eval_accuracy"] = float(ev["accuracy"].iloc[-1])
        rows.append(row)
    return pd.DataFrame(rows)


def init_vs_final(ctx) -> pd.DataFrame | None:
    """Delta at the earliest stored step vs the final one, per example and layer (METHODS 3.4a): the change
    Δ_final − Δ_init with its inference (``p_holm``, ``ci_low``, ``ci_high``) and, for each end, whether Δ itself
    is distinguishable from 0 there (``p_holm_init``/``_final``, ``ci_low_init``/``_final``, ...); None without an
    earlier step holding the same examples."""
    p, s, step, D = ctx.pair, ctx.settings, ctx.step, ctx.D
    s0 = ctx.common_steps[0]
    if s0 == step:
        return None
    d0 = paired_differences(p, step=s0, examples=s.examples, trivial=s.trivial_queries, keys=s.keys)
    D0 = d0.pivot(index="example_id", columns="layer", values="diff").sort_index(axis=1)
    if not (D0.index.equals(D.index) and D0.columns.equals(D.columns)):
        return None  # not the same examples at both steps
    res = paired_inference((D - D0).to_numpy(), resampling=s.resampling, labels=list(D.columns)).to_frame()
    res = res.rename(columns={"label": "layer", "p_adj": "p_holm", "p_adj_floor": "p_holm_floor"})
    # is Δ itself distinguishable from 0 at each end (for its share)? At the end: the effects table's own verdict
    t = paired_inference(D0.to_numpy(), resampling=s.resampling, labels=list(D.columns)).to_frame()
    end = ctx.effects().set_index("layer").loc[list(D.columns)]
    res["p_holm_init"], res["ci_low_init"], res["ci_high_init"] = \
        t["p_adj"].to_numpy(), t["ci_low"].to_numpy(), t["ci_high"].to_numpy()
    res["p_holm_final"], res["ci_low_final"], res["ci_high_final"] = \
        end["p_holm"].to_numpy(), end["ci_low"].to_numpy(), end["ci_high"].to_numpy()
    res.insert(1, "step_init", s0)
    res.insert(2, "step_final", step)
    res.insert(3, "delta_init", D0.mean().to_numpy())
    res.insert(4, "delta_final", D.mean().to_numpy())
    res.insert(5, "share_at_init", res["delta_init"] / res["delta_final"])
    lo, hi = share_interval(D0.to_numpy(), D.to_numpy(), s.resampling)
    res.insert(6, "share_ci_low", lo)
    res.insert(7, "share_ci_high", hi)
    return res


def share_interval(early: np.ndarray, final: np.ndarray, r) -> tuple[np.ndarray, np.ndarray]:
    """Per layer, the percentile bootstrap interval of mean(early) / mean(final) over the examples (rows): the
    shared mode's resample counts of these examples and seed (the draws the paired tables already made: no new
    random work), each resample's ratio of weighted means; resamples whose final mean is 0 are left out. A share
    is stated only with this interval, and "outside 0-100 %" only where it excludes that range."""
    from routestats.stats.draws import bootstrap_count_chunks
    from routestats.stats.inference import percentile_ci

    n = len(final)
    ratios = []
    for cnt in bootstrap_count_chunks(n, r.resamples, r.seed):
        c = cnt.astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios.append((c @ early) / (c @ final))
    q = np.concatenate(ratios) if ratios else np.empty((0, early.shape[1]))
    lo, hi = np.full(q.shape[1], np.nan), np.full(q.shape[1], np.nan)
    for j in range(q.shape[1]):
        v = q[np.isfinite(q[:, j]), j]
        if v.size:
            lo[j], hi[j] = percentile_ci(v, r.confidence)
    return lo, hi


def running_mean(ex: pd.DataFrame) -> pd.DataFrame:
    """Per layer, the centred running mean of Δ over examples sorted by length (drawn in the length figure)."""
    window = max(5, ex["example_id"].nunique() // 20)
    parts = []
    for _, t in ex.groupby("layer", sort=True):
        t = t.sort_values(["length", "example_id"]).copy()
        # the running mean over examples sorted by length, one value per distinct length (many examples tied
        # at the cap would otherwise draw a vertical line there)
        rm = t["diff"].rolling(window, min_periods=1, center=True).mean()
        t["running_mean"] = rm.groupby(t["length"].to_numpy()).transform("mean").to_numpy()
        t["window"] = window
        parts.append(t)
    return pd.concat(parts, ignore_index=True)


def size_on_disk(path) -> int:
    """A file's size on disk, without hashing it (deciding whether to read the matrices must not cost a
    pass over them; the manifest's ``bytes`` is not validated, so it is not used). The file is verified
    when it is read."""
    try:
        return path.stat().st_size
    except OSError:
        return 0
