"""Figures of a pair's training, on a :class:`reports.canvas.Canvas` like the rest of the pair's page: SFM trajectories
over checkpoints, the gradient-norm ratio and the training loss (drawn from the report's frames; registered in
:data:`DRAWERS`, joined by :mod:`reports.drawing`).

>>> import pandas as pd
>>> steps = pd.DataFrame({"role": ["baseline", "variant"] * 2, "step": [0, 0, 100, 100],
...                       "trailing_mean": [1.0, 1.1, 1.2, 1.3], "lower_layer": 0, "upper_layer": 3})
>>> c = DRAWERS["gradient_ratios"]({"steps": steps}, {})
>>> sorted(t[5] for t in c.texts if t[6] == "x")  # steps from 0: a log axis of 1 + step, labelled in steps
['0', '1', '10', '100']
"""

from __future__ import annotations

import numpy as np

from reports.canvas import Canvas, text_width
from reports.chart import (MAX_LEGEND_LAYERS, axes, layer_hex, layer_strip, legend, log_labels, log_ticks, nice_ticks,
                           one_panel, padded, registrar, step_range, style_of)
from reports.pair_figures import ROLE_COLORS, SHORT

__all__ = ["DRAWERS"]

DRAWERS: dict = {}  # the training figures of the one-pair report
drawer = registrar(DRAWERS)


@drawer("trajectories")
def trajectories(frames, params) -> Canvas:
    """SFM per layer over checkpoint steps; baseline dashed, variant solid."""
    s = style_of(params)
    traj = frames["trajectory"]
    layers = sorted(traj["layer"].unique())
    colors = layer_hex(len(layers))
    xlim, xscale, xt = step_range(traj["step"])
    ylim = padded(float(traj["sfm"].min()), float(traj["sfm"].max()))
    yt = nice_ticks(*ylim, 6)
    styles = [("baseline", "#4d4d4d", "dash"), ("variant", "#4d4d4d", "line")]
    entries = [(f"layer {x}", col, "line") for x, col in zip(layers, colors)] \
        if len(layers) <= MAX_LEGEND_LAYERS else []
    key_w = max(text_width(e[0], s.text) for e in entries + styles) + 30 + (50 if not entries else 0)
    c, p = one_panel(s, xlim, xscale, ylim, yt, key_w)
    axes(p, s, xticks=xt, xlabels=log_labels(xt), yticks=yt, xlabel="training step", ylabel="same-field mass",
         title="SFM trajectories")
    for col, layer in zip(colors, layers):
        for role, dash in (("baseline", (4, 3)), ("variant", None)):
            t = traj[(traj["role"] == role) & (traj["layer"] == layer)].sort_values("step")
            c.polyline(p.X(t["step"]), p.Y(t["sfm"]), col, s.line, dash=dash)
            c.dots(p.X(t["step"]), p.Y(t["sfm"]), s.dot * 0.8, col)
    kx = p.x + p.w + 12
    if entries:
        legend(c, kx, p.y + p.h / 2 - len(entries + styles) * s.text * 0.75, entries + styles, s)
    else:  # many layers: a strip of their colours, the two line styles beside it
        layer_strip(c, kx, p.y, p.h, layers, colors, s)
        legend(c, kx + 50, p.y + p.h / 2 - s.text * 1.5, styles, s)
    return c


@drawer("gradient_ratios")
def gradient_ratios(frames, params) -> Canvas:
    """Trailing-mean gradient-norm ratio per step for both models (dashed line at 1)."""
    s = style_of(params)
    steps = frames["steps"]
    xlim, xscale, xt = step_range(steps["step"])
    v = steps["trailing_mean"].to_numpy(float)
    ylim = padded(float(min(np.nanmin(v), 1.0)), float(max(np.nanmax(v), 1.0)))
    yt = nice_ticks(*ylim, 6)
    entries = [(SHORT[r], ROLE_COLORS[r], "line") for r in ("baseline", "variant")]
    c, p = one_panel(s, xlim, xscale, ylim, yt, max(text_width(e[0], s.text) for e in entries) + 30)
    lo, up = int(steps["lower_layer"].iloc[0]), int(steps["upper_layer"].iloc[0])
    axes(p, s, xticks=xt, xlabels=log_labels(xt), yticks=yt, xlabel="training step",
         ylabel=f"‖∇QKV L{up}‖ / ‖∇QKV L{lo}‖", title="Gradient-norm ratio (trailing mean)")
    c.line(p.x, float(p.Y(1.0)), p.x + p.w, float(p.Y(1.0)), "#4d4d4d", 0.9, dash=(4, 3))
    for role in ("baseline", "variant"):
        t = steps[steps["role"] == role].sort_values("step")
        c.polyline(p.X(t["step"]), p.Y(t["trailing_mean"]), ROLE_COLORS[role], s.line)
    legend(c, p.x + p.w + 12, p.y + p.h / 2 - s.text * 1.5, entries, s)
    return c


@drawer("training_curves")
def training_curves(frames, params) -> Canvas:
    """Training loss per step for both models, on a log axis where every loss is positive."""
    s = style_of(params)
    curves = frames["curves"]
    train = curves[curves["phase"] == "train"]
    xlim, xscale, xt = step_range(train["step"])
    loss = train["loss"].to_numpy(float)
    loss = loss[np.isfinite(loss)]
    lo, hi = (float(loss.min()), float(loss.max())) if loss.size else (1.0, 10.0)
    if lo > 0:
        yscale, ylim, yt = "log", (lo / 1.15, hi * 1.15), log_ticks(lo / 1.15, hi * 1.15)
    else:
        yscale, ylim = "linear", padded(lo, hi)
        yt = nice_ticks(*ylim, 6)
    roles = [r for r in ("baseline", "variant") if (train["role"] == r).any()]
    entries = [(SHORT[r], ROLE_COLORS[r], "dash" if r == "variant" else "line") for r in roles]
    c, p = one_panel(s, xlim, xscale, ylim, yt, max(text_width(e[0], s.text) for e in entries) + 30, yscale=yscale)
    axes(p, s, xticks=xt, xlabels=log_labels(xt), yticks=yt, ylabels=log_labels(yt) if yscale == "log" else None,
         xlabel="training step", ylabel="MSM loss",
         title="Training loss")
    for role in roles:
        t = train[train["role"] == role].sort_values("step")
        # nearly equal curves: the dash keeps both visible
        c.polyline(p.X(t["step"]), p.Y(t["loss"]), ROLE_COLORS[role], s.line * 0.8,
                   dash=(4, 3) if role == "variant" else None)
    legend(c, p.x + p.w + 12, p.y + p.h / 2 - s.text * 1.5, entries, s)
    return c
