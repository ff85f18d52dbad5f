"""Initialisation probes, analysis side (METHODS 3.8): do initial-state quantities predict which
seeds end up with a large displacement (delta_last - delta_penultimate)?

Inputs are the frames ``runners.training.initprobe`` writes (``init_summaries``, ``initial_loss``,
``one_update``) and per-seed final outcomes (e.g. :func:`routestats.studies.seed_table`'s
``displacement``). All correlations are Spearman rho (average ranks; NaN when either
variable is constant).

Examples
--------
>>> spearman_rho([1, 2, 3, 4], [10, 20, 30, 40]), spearman_rho([1, 2, 3, 4], [40, 30, 20, 10])
(1.0, -1.0)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from routestats.errors import RoutestatsError
from routestats.stats.spearman import spearman

__all__ = ["spearman_rho", "load_probe", "initial_loss_summary", "probe_correlations"]

SUMMARIES = ("field_embedding_distance", "mask_embedding_offset", "qkv_norm_ratio", "out_proj_norm_ratio",
             "ffn_norm_ratio")


def spearman_rho(x, y) -> float:
    """Spearman rho (Pearson on average ranks, :func:`routestats.stats.inference.spearman`); NaN when
    either input is constant."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise RoutestatsError("spearman_rho needs two 1-D arrays of equal length")
    return spearman(x, y)[0]


def load_probe(folder) -> dict[str, pd.DataFrame]:
    """Read the probe frames written by ``python -m runners init-probe``."""
    folder = Path(folder)
    out = {}
    for name in ("state_hashes", "init_summaries", "layer_norms", "initial_loss", "one_update"):
        p = folder / f"{name}.parquet"
        if p.is_file():
            out[name] = pd.read_parquet(p)
    if "initial_loss" not in out or "init_summaries" not in out:
        raise RoutestatsError(f"{folder}: not an init-probe folder (initial_loss / init_summaries missing)")
    h = out.get("state_hashes")
    if h is not None:
        bad = h.groupby("seed")["sha256"].nunique()
        if (bad > 1).any():
            raise RoutestatsError(f"seeds {bad[bad > 1].index.tolist()}: baseline and SAAB initial states differ")
    return out


def _paired_loss(loss: pd.DataFrame) -> pd.DataFrame:
    w = loss.pivot_table(index=["seed", "mask_seed", "block"], columns="variant", values="loss").reset_index()
    w["loss_change"] = w["saab"] - w["baseline"]
    return w


def initial_loss_summary(loss: pd.DataFrame) -> pd.DataFrame:
    """Per seed: mean of the (seed, mask) means of the SAAB - baseline loss change (= mean of all
    blocks x masks), sample SD across mask means, min, max and fraction of masks above 0."""
    w = _paired_loss(loss)
    per_mask = w.groupby(["seed", "mask_seed"])["loss_change"].mean().reset_index()
    g = per_mask.groupby("seed")["loss_change"]
    return pd.DataFrame({"mean": g.mean(), "sd_across_masks": g.std(ddof=1), "min": g.min(), "max": g.max(),
                         "fraction_masks_positive": g.apply(lambda x: float((x > 0).mean()))}).reset_index()


def probe_correlations(probe: dict[str, pd.DataFrame], outcomes: pd.DataFrame, outcome: str = "displacement",
                       exclude_first_block: bool = True) -> pd.DataFrame:
    """Spearman correlations of probe quantities with the per-seed ``outcome``.

    Rows (analysis, metric, spearman_rho, n_seeds): the five initial-state summaries; the
    overall initial loss change; per mask seed; excluding the first block; leave-one-seed-out
    (overall mean, each seed left out in turn); the one-update probe (SAAB - baseline change
    of the gradient ratio and of the AdamW update ratio); and per (block, mask) -- the
    correlations the reference never computed (their range is reported in the paper).
    """
    if "seed" not in outcomes.columns or outcome not in outcomes.columns:
        raise RoutestatsError(f"outcomes need columns 'seed' and {outcome!r}")
    y = outcomes.set_index("seed")[outcome]
    rows = []

    def add(analysis, metric, series):
        s = series.dropna()
        common = sorted(set(s.index) & set(y.index))
        if len(common) < 3:
            return
        rows.append({"analysis": analysis, "metric": metric,
                     "spearman_rho": spearman_rho(s.loc[common].to_numpy(), y.loc[common].to_numpy()),
                     "n_seeds": len(common)})

    summ = probe["init_summaries"].set_index("seed")
    for m in SUMMARIES:
        add("initial_parameter_summary", m, summ[m])
    w = _paired_loss(probe["initial_loss"])
    add("initial_loss", "initial_loss_overall_mean", w.groupby("seed")["loss_change"].mean())
    for m, g in w.groupby("mask_seed"):
        add("initial_loss", f"initial_loss_mask_{m}", g.groupby("seed")["loss_change"].mean())
    if exclude_first_block:
        first = w["block"].min()
        add("initial_loss", "initial_loss_excluding_first_block",
            w[w["block"] != first].groupby("seed")["loss_change"].mean())
    overall = w.groupby("seed")["loss_change"].mean()
    for s in sorted(overall.index):
        add("initial_loss", f"initial_loss_leave_out_seed_{s}", overall.drop(s))
    if "one_update" in probe:
        u = probe["one_update"].pivot_table(index="seed", columns="variant", values=["grad_ratio", "update_ratio"])
        add("one_update_probe", "gradient_ratio_change", u[("grad_ratio", "saab")] - u[("grad_ratio", "baseline")])
        add("one_update_probe", "update_ratio_change", u[("update_ratio", "saab")] - u[("update_ratio", "baseline")])
    for (b, m), g in w.groupby(["block", "mask_seed"]):
        add("initial_loss_block_mask", f"block_{b}_mask_{m}", g.set_index("seed")["loss_change"])
    out = pd.DataFrame(rows)
    bm = out[out["analysis"] == "initial_loss_block_mask"]["spearman_rho"]
    out.attrs["block_mask_range"] = (float(bm.min()), float(bm.max())) if len(bm) else (np.nan, np.nan)
    return out
