"""Drawers of the MoFA figures; the means and z-scores come finished from the core."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from reports import figures as F
from reports.axes import layer_ticks
from reports.theme import palette

DRAWERS: dict = {}
drawer = F.registrar(DRAWERS)


@drawer("mofa_heatmap")
def heatmap(frames, params):
    m, z = frames["mean_ppl"], frames["zscore"]
    fig, ax = plt.subplots(figsize=(1.2 * m.shape[1] + 3, 0.5 * len(m) + 1.5))
    vmax = float(np.nanmax(np.abs(z.to_numpy()))) or 1.0
    F.heat(ax, z.rename(index=F.plain), vmin=-vmax, vmax=vmax, cmap="RdBu_r", cbar=True,
           labels=[[f"{v:.1f}" for v in row] for row in m.to_numpy()])
    ax.set(xlabel="ratio (softmax:sigmoid)", ylabel="", title="Domain × ratio PPL (colour: row z-score)")
    fig.tight_layout()
    return fig


@drawer("mofa_answer")
def answer(frames, params):
    """The first screen's figure: each ratio's perplexity relative to its domain's lowest mean (0 = the lowest),
    one line per domain through the seed means, each seed a faint dot."""
    r = frames["relative"]
    order = list(params["order"])
    domains = list(dict.fromkeys(r["domain"]))
    colors = palette("colorblind", len(domains))
    fig, ax = plt.subplots(figsize=(4.6, 2.7))
    x = {ratio: i for i, ratio in enumerate(order)}
    for k, (dom, color) in enumerate(zip(domains, colors)):
        g = r[r["domain"] == dom]
        off = (k - (len(domains) - 1) / 2) * 0.06
        ax.scatter(g["ratio"].map(x) + off, 100 * g["relative"], s=8, color=color, alpha=0.45, lw=0)
        m = g.groupby("ratio")["relative"].mean().reindex(order)
        ax.plot(np.arange(len(order)) + off, 100 * m.to_numpy(), marker="o", ms=4, lw=1.4, color=color,
                label=F.plain(dom))
    ax.axhline(0, color="0.25", lw=0.9, ls="--")
    ax.set_xticks(range(len(order)), order)
    ax.tick_params(labelsize=9)
    ax.set_xlabel("ratio (softmax:sigmoid heads)", fontsize=10)
    ax.set_ylabel("PPL above the domain's\nlowest mean (%)", fontsize=9)
    ax.legend(fontsize=7.5, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout(pad=0.4)
    return fig


@drawer("mofa_pca")
def pca(frames, params):
    s = frames["scores"].sort_values("pc1")
    fig, ax = plt.subplots(figsize=(7, 0.4 * len(s) + 1.5))
    ax.barh([F.plain(d) for d in s["domain"]], s["pc1"], color=np.where(s["pc1"] > 0, "#4C72B0", "#DD8452"))
    ax.axvline(0, color="0.3", lw=1)
    ax.set(xlabel="PC1 score (> 0: softmax-leaning)", title=f"Domain response PC1 ({100 * params['explained']:.1f}%)")
    fig.tight_layout()
    return fig


@drawer("mofa_entropy")
def entropy(frames, params):
    ent = frames["entropy_layer"]
    ratios = params["ratios"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    colors = dict(zip(ratios, palette("viridis", len(ratios))))
    for ax, htype in zip(axes, ("softmax", "sigmoid")):
        t = ent[ent["head_type"] == htype]
        for r, g in t.groupby("ratio"):
            ax.plot(g["layer"], g["entropy"], marker="o", color=colors[r], label=r)
        ax.set(title=f"{htype} heads", xlabel="layer", ylabel="row-normalised entropy (nats)")
        layer_ticks(ax, ent["layer"].unique())
        if len(t):
            ax.legend(fontsize=8, title="ratio")
    fig.tight_layout()
    return fig
