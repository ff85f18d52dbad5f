"""Figures of a study (multi-run) report on a :class:`reports.canvas.Canvas`, like a pair's page: per-seed paired
differences, the bias-strength sweep, the shuffled control, trajectories across seeds and the forest of per-seed and
across-seed estimates. Every aggregate comes finished from the core.

>>> import pandas as pd
>>> lines = pd.DataFrame({"dataset": "d", "seed": [1, 1, 2, 2], "layer": [0, 1, 0, 1], "delta": [0.1, 0.2, 0.0, 0.1]})
>>> mean = pd.DataFrame({"layer": [0, 1], "delta": [0.05, 0.15]})
>>> c = DRAWERS["study_seeds"]({"lines": lines, "mean": mean}, {})
>>> [t[5] for t in c.texts if t[5].startswith(("seed", "mean"))]
['seed 1', 'seed 2', 'mean over seeds']
"""

from __future__ import annotations

import numpy as np

from reports.axes import labelled_layers
from reports.canvas import PALETTES, Canvas, text_width
from reports.chart import (MAX_LEGEND_LAYERS, axes, canvas_for, layer_hex, layer_strip, legend, log_labels, nice_ticks,
                           one_panel, padded, Panel, registrar, step_range, style_of, value_range, ylabel_room)

__all__ = ["DRAWERS"]

DRAWERS: dict = {}
drawer = registrar(DRAWERS)


def _layer_key(c: Canvas, p: Panel, layers, colors, s, extra=()) -> None:
    """The layers' key right of the panel: legend entries up to 8 layers, a strip of colours beyond."""
    entries = [(f"layer {x}", col, "line") for x, col in zip(layers, colors)]
    if len(layers) <= MAX_LEGEND_LAYERS:
        entries += list(extra)
        legend(c, p.x + p.w + 12, p.y + p.h / 2 - len(entries) * s.text * 0.75, entries, s)
    else:
        layer_strip(c, p.x + p.w + 12, p.y, p.h, layers, colors, s)


def _key_width(s, labels) -> float:
    return max((text_width(x, s.text) for x in labels), default=0.0) + 30


@drawer("study_seeds")
def seeds(frames, params) -> Canvas:
    """Each seed's paired difference per layer, and their mean."""
    s = style_of(params)
    lines, mean = frames["lines"], frames["mean"]
    groups = list(lines.groupby(["dataset", "seed"]))
    labels = [f"{ds} seed {seed}" if params.get("several_datasets") else f"seed {seed}" for (ds, seed), _ in groups]
    ylim = value_range(lines["delta"], mean["delta"], zero=True)
    yt = nice_ticks(*ylim, 6)
    c, p = one_panel(s, (lines["layer"].min() - 0.4, lines["layer"].max() + 0.4), "linear", ylim, yt,
                     _key_width(s, labels + ["mean over seeds"]))
    axes(p, s, xticks=labelled_layers(lines["layer"].unique()), yticks=yt, xlabel="layer", zero=True,
         ylabel="Δ SFM (SAAB − baseline)", title="Per-seed paired differences")
    deep = PALETTES["deep"]  # matplotlib's colour cycle under seaborn's theme, as the seeds were drawn
    colors = [deep[i % len(deep)] for i in range(len(groups))]
    for col, (_, g) in zip(colors, groups):
        g = g.sort_values("layer")
        c.polyline(p.X(g["layer"]), p.Y(g["delta"]), col, s.line * 0.7, alpha=0.6)
        c.dots(p.X(g["layer"]), p.Y(g["delta"]), s.dot, col, alpha=0.6)
    m = mean.sort_values("layer")
    c.polyline(p.X(m["layer"]), p.Y(m["delta"]), "black", s.line * 1.8)
    c.dots(p.X(m["layer"]), p.Y(m["delta"]), s.dot * 1.3, "black")
    entries = [(lab, col, "line") for lab, col in zip(labels, colors)] + [("mean over seeds", "black", "line")]
    legend(c, p.x + p.w + 12, p.y + p.h / 2 - len(entries) * s.text * 0.75, entries, s)
    return c


@drawer("study_sweep")
def sweep(frames, params) -> Canvas:
    """Δ SFM against the bias strength, per layer: each seed a dot, the mean a line."""
    s = style_of(params)
    points, mean = frames["points"], frames["mean"]
    layers = sorted(points["layer"].unique())
    colors = layer_hex(len(layers))
    ylim = value_range(points["delta"], mean["delta"], zero=True)
    yt = nice_ticks(*ylim, 6)
    xlim = padded(float(points["w_f"].min()), float(points["w_f"].max()))
    c, p = one_panel(s, xlim, "linear", ylim, yt, _key_width(s, [f"layer {x}" for x in layers]) if len(layers) <= 8
                     else 60.0)
    axes(p, s, xticks=nice_ticks(*xlim, 6), yticks=yt, xlabel="bias strength w_f", ylabel="Δ SFM", zero=True,
         title="Bias-strength sweep (points: seeds)")
    for col, layer in zip(colors, layers):
        g = points[points["layer"] == layer]
        c.dots(p.X(g["w_f"]), p.Y(g["delta"]), s.dot * 0.9, col, 0.6)
        m = mean[mean["layer"] == layer].sort_values("w_f")
        c.polyline(p.X(m["w_f"]), p.Y(m["delta"]), col, s.line)
        c.dots(p.X(m["w_f"]), p.Y(m["delta"]), s.dot * 1.2, col)
    _layer_key(c, p, layers, colors, s)
    return c


@drawer("study_shuffled")
def shuffled(frames, params) -> Canvas:
    """SAAB and the shuffled control against the baseline per layer: the mean over seeds, the range as a band."""
    s = style_of(params)
    bands = frames["bands"]
    conds = (("SAAB", "#DD8452"), ("shuffled", "#8172B3"))
    labels = [f"{label} − baseline (mean over seeds)" for label, _ in conds]
    ylim = value_range(bands["min"], bands["max"], bands["mean"], zero=True)
    yt = nice_ticks(*ylim, 6)
    c, p = one_panel(s, (bands["layer"].min() - 0.4, bands["layer"].max() + 0.4), "linear", ylim, yt,
                     _key_width(s, labels))
    axes(p, s, xticks=labelled_layers(bands["layer"].unique()), yticks=yt, xlabel="layer", ylabel="Δ SFM", zero=True,
         title="Shuffled control (band: range over seeds)")
    for label, color in conds:
        m = bands[bands["condition"] == label].sort_values("layer")
        x = p.X(m["layer"])
        c.polygon(np.r_[x, x[::-1]], np.r_[p.Y(m["max"]), p.Y(m["min"])[::-1]], color, 0.15)
        c.polyline(x, p.Y(m["mean"]), color, s.line)
        c.dots(x, p.Y(m["mean"]), s.dot * 1.2, color)
    legend(c, p.x + p.w + 12, p.y + p.h / 2 - 2 * s.text * 0.75, [(lab, col, "line") for lab, (_, col) in
                                                                   zip(labels, conds)], s)
    return c


@drawer("study_trajectories")
def trajectories(frames, params) -> Canvas:
    """Δ SFM per layer over training steps: each seed thin, the mean over seeds thick."""
    s = style_of(params)
    lines, mean = frames["lines"], frames["mean"]
    layers = sorted(lines["layer"].unique())
    colors = layer_hex(len(layers))
    xlim, xscale, xt = step_range(lines["step"])
    ylim = value_range(lines["delta"], mean["delta"], zero=True)
    yt = nice_ticks(*ylim, 6)
    c, p = one_panel(s, xlim, xscale, ylim, yt, _key_width(s, [f"layer {x}" for x in layers]) if len(layers) <= 8
                     else 60.0)
    axes(p, s, xticks=xt, xlabels=log_labels(xt), yticks=yt, xlabel="training step", ylabel="Δ SFM (SAAB − baseline)",
         zero=True, title="Trajectories (thin: seeds, thick: mean)")
    for col, layer in zip(colors, layers):
        for _, g in lines[lines["layer"] == layer].groupby("seed"):
            g = g.sort_values("step")
            c.polyline(p.X(g["step"]), p.Y(g["delta"]), col, s.line * 0.55, alpha=0.35)
        m = mean[mean["layer"] == layer].sort_values("step")
        c.polyline(p.X(m["step"]), p.Y(m["delta"]), col, s.line * 1.4)
        c.dots(p.X(m["step"]), p.Y(m["delta"]), s.dot * 0.8, col)
    _layer_key(c, p, layers, colors, s)
    return c


@drawer("study_forest")
def forest(frames, params) -> Canvas:
    """One panel per layer: per-seed Δ with intervals (grey), across-seed estimates with intervals (black)."""
    s = style_of(params)
    f = frames["forest"]
    layers = sorted(f["layer"].unique())
    labels = list(dict.fromkeys(f["label"]))
    cols = min(len(layers), 4)
    rows = -(-len(layers) // cols)
    left = ylabel_room(s, labels, axis_label=False) + 6
    gap, top = 14.0, s.title * 1.4 + 4
    pw = (s.width - left - 8 - gap * (cols - 1)) / cols
    ph = max(40.0, s.text * 1.9 * len(labels))
    row_h = top + ph + 5 + 2 * s.text * 1.25 + 10
    c = canvas_for(s, s.width, rows * row_h)
    xlim = value_range(f["ci_low"], f["ci_high"], f["estimate"], zero=True)
    xt = nice_ticks(*xlim, 4)  # "−0.0125 −0.0100" ran together in a narrow panel
    for k, layer in enumerate(layers):
        i, j = divmod(k, cols)
        g = f[f["layer"] == layer].set_index("label").reindex(labels)
        p = Panel(c, left + j * (pw + gap), i * row_h + top, pw, ph, xlim, (-0.7, len(labels) - 0.3))
        y = np.arange(len(labels))[::-1].astype(float)
        axes(p, s, xticks=xt, yticks=list(y), ylabels=labels if j == 0 else [""] * len(labels), xlabel="Δ SFM",
             title=f"layer {layer}", group=f"p{k}")
        if xlim[0] < 0 < xlim[1]:
            c.line(float(p.X(0)), p.y, float(p.X(0)), p.y + p.h, "#666666", 0.9, dash=(4, 3))
        seed = (g["level"] == "seed").to_numpy()
        for mask, color in ((seed, "#8c8c8c"), (~seed, "black")):
            yy, lo, hi, est = p.Y(y[mask]), p.X(g["ci_low"][mask]), p.X(g["ci_high"][mask]), p.X(g["estimate"][mask])
            segs = [(a, b, e, b) for a, b, e in zip(lo, yy, hi) if np.isfinite(a) and np.isfinite(e)]
            segs += [(x, b - 3, x, b + 3) for a, b, e in zip(lo, yy, hi) for x in (a, e) if np.isfinite(x)]
            if segs:
                c.segments(segs, color, s.line)
            c.dots(est, yy, s.dot * 1.2, color)
    return c
