"""Figures of a pair's training: SFM trajectories over checkpoints, the gradient-norm ratio and the training
loss (drawn from the report's frames; registered in :data:`DRAWERS`, joined by :mod:`reports.drawing`)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from reports.axes import MAX_LEGEND_LAYERS, layer_colors, layer_key, step_axis
from reports.figures import PALETTE, SHORT, registrar

DRAWERS: dict = {}  # the training figures of the one-pair report
drawer = registrar(DRAWERS)


@drawer("trajectories")
def _trajectories(frames, params):
    return trajectories(frames["trajectory"], params.get("labels", {}))


def trajectories(traj: pd.DataFrame, labels: dict):
    """SFM per layer over checkpoint steps; baseline dashed, variant solid."""
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(8.5, 3.8))
    layers = sorted(traj["layer"].unique())
    colors = layer_colors(len(layers))
    for c, layer in zip(colors, layers):
        for role, ls in (("baseline", "--"), ("variant", "-")):
            t = traj[(traj["role"] == role) & (traj["layer"] == layer)].sort_values("step")
            ax.plot(t["step"], t["sfm"], ls=ls, marker="o", ms=3, color=c)
    step_axis(ax, traj["step"])
    ax.set(xlabel="training step", ylabel="same-field mass", title="SFM trajectories")
    styles = [Line2D([], [], color="0.3", ls="--", label="baseline"), Line2D([], [], color="0.3", ls="-", label="variant")]
    if len(layers) <= MAX_LEGEND_LAYERS:
        handles = [Line2D([], [], color=c, marker="o", label=f"layer {layer}") for c, layer in zip(colors, layers)]
        ax.legend(handles=handles + styles, fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    else:  # many layers: a colour bar for them, the two line styles in a small legend
        layer_key(ax, colors, layers)
        ax.legend(handles=styles, fontsize=8, loc="best")
    fig.tight_layout()
    return fig


@drawer("gradient_ratios")
def _gradient_ratios(frames, params):
    return gradient_ratios(frames["steps"], params.get("labels", {}))


def gradient_ratios(steps: pd.DataFrame, labels: dict):
    """Trailing-mean gradient-norm ratio per step for both models (dashed line at 1)."""
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    for role in ("baseline", "variant"):
        t = steps[steps["role"] == role]
        ax.plot(t["step"], t["trailing_mean"], color=PALETTE[role], label=SHORT[role])
    ax.axhline(1.0, color="0.3", ls="--", lw=1)
    lo, up = int(steps["lower_layer"].iloc[0]), int(steps["upper_layer"].iloc[0])
    ax.set(xlabel="training step", ylabel=f"‖∇QKV L{up}‖ / ‖∇QKV L{lo}‖", title="Gradient-norm ratio (trailing mean)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


@drawer("training_curves")
def _training_curves(frames, params):
    return training_curves({r: g for r, g in frames["curves"].groupby("role")}, params.get("labels", {}))


def training_curves(metrics: dict, labels: dict):
    """Training loss per step for both models."""
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    for role, m in metrics.items():
        t = m[m["phase"] == "train"]
        ax.plot(t["step"], t["loss"], color=PALETTE[role], lw=1, label=SHORT[role],
                ls="--" if role == "variant" else "-")  # nearly equal curves: the dash keeps both visible
    ax.set(yscale="log", xlabel="training step", ylabel="MSM loss", title="Training loss")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
