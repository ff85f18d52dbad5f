"""Drawers of the study (multi-run) figures; every aggregate comes finished from the core."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator
import numpy as np

from reports import figures as F
from reports.axes import layer_colors, layer_key, layer_ticks, step_axis

DRAWERS: dict = {}
drawer = F.registrar(DRAWERS)


@drawer("study_seeds")
def seeds(frames, params):
    lines, mean = frames["lines"], frames["mean"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for (ds, seed), g in lines.groupby(["dataset", "seed"]):
        label = f"{ds} seed {seed}" if params.get("several_datasets") else f"seed {seed}"
        ax.plot(g["layer"], g["delta"], marker="o", lw=1, alpha=0.6, label=F.plain(label))
    ax.plot(mean["layer"], mean["delta"], color="black", lw=2.5, marker="s", label="mean over seeds")
    ax.axhline(0, color="0.4", ls="--", lw=1)
    ax.set(xlabel="layer", ylabel="Δ SFM (SAAB − baseline)", title="Per-seed paired differences")
    layer_ticks(ax, lines["layer"].unique())
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    return fig


@drawer("study_sweep")
def sweep(frames, params):
    points, mean = frames["points"], frames["mean"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    layers = sorted(points["layer"].unique())
    for c, layer in zip(layer_colors(len(layers)), layers):
        g = points[points["layer"] == layer]
        ax.scatter(g["w_f"], g["delta"], color=c, s=12, alpha=0.6)
        m = mean[mean["layer"] == layer]
        ax.plot(m["w_f"], m["delta"], color=c, marker="o", label=f"layer {layer}")
    ax.axhline(0, color="0.4", ls="--", lw=1)
    ax.set(xlabel="bias strength w_f", ylabel="Δ SFM", title="Bias-strength sweep (points: seeds)")
    layer_key(ax, layer_colors(len(layers)), layers)
    fig.tight_layout()
    return fig


@drawer("study_shuffled")
def shuffled(frames, params):
    bands = frames["bands"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for label, color in (("SAAB", "#DD8452"), ("shuffled", "#8172B3")):
        m = bands[bands["condition"] == label]
        ax.plot(m["layer"], m["mean"], marker="o", color=color, label=f"{label} − baseline (mean over seeds)")
        ax.fill_between(m["layer"], m["min"], m["max"], color=color, alpha=0.15)
    ax.axhline(0, color="0.4", ls="--", lw=1)
    ax.set(xlabel="layer", ylabel="Δ SFM", title="Shuffled control (band: range over seeds)")
    layer_ticks(ax, bands["layer"].unique())
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


@drawer("study_trajectories")
def trajectories(frames, params):
    lines, mean = frames["lines"], frames["mean"]
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    layers = sorted(lines["layer"].unique())
    for c, layer in zip(layer_colors(len(layers)), layers):
        g = lines[lines["layer"] == layer]
        for _, gs in g.groupby("seed"):
            ax.plot(gs["step"], gs["delta"], color=c, lw=0.8, alpha=0.35)
        m = mean[mean["layer"] == layer]
        ax.plot(m["step"], m["delta"], color=c, lw=2, marker="o", ms=3, label=f"layer {layer}")
    ax.axhline(0, color="0.4", ls="--", lw=1)
    step_axis(ax, lines["step"])
    ax.set(xlabel="training step", ylabel="Δ SFM (SAAB − baseline)", title="Trajectories (thin: seeds, thick: mean)")
    layer_key(ax, layer_colors(len(layers)), layers)
    fig.tight_layout()
    return fig


@drawer("study_forest")
def forest(frames, params):
    """One panel per layer: per-seed Δ with CIs (grey), across-seed estimates with intervals (black)."""
    f = frames["forest"]
    layers = sorted(f["layer"].unique())
    labels = list(dict.fromkeys(f["label"]))
    cols = min(len(layers), 4)
    rows = -(-len(layers) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols, 0.3 * len(labels) * rows + 1.4), squeeze=False,
                             sharey=True)
    for ax, layer in zip(axes.ravel(), layers):
        g = f[f["layer"] == layer].set_index("label").reindex(labels)
        y = np.arange(len(labels))[::-1]
        seed = (g["level"] == "seed").to_numpy()
        for mask, color in ((seed, "0.55"), (~seed, "black")):
            ax.errorbar(g["estimate"][mask], y[mask], xerr=[(g["estimate"] - g["ci_low"])[mask],
                                                             (g["ci_high"] - g["estimate"])[mask]],
                        fmt="o", color=color, capsize=3, ms=4)
        ax.axvline(0, color="0.4", ls="--", lw=1)
        ax.set_yticks(y, [F.plain(x) for x in labels], fontsize=8)
        ax.set(title=f"layer {layer}", xlabel="Δ SFM")
        ax.xaxis.set_major_locator(MaxNLocator(4))  # "−0.0125 −0.0100" ran together in a narrow panel
    for ax in axes.ravel()[len(layers):]:
        ax.axis("off")
    fig.tight_layout()
    return fig
