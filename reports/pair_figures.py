"""The figures of a pair's (and a single run's) report page, drawn on a :class:`reports.canvas.Canvas` from the
report's finished frames
(no plotting library: the page's seven figures cost 1.7 s of matplotlib per report, docs/performance.md).

Each drawer takes ``(frames, params)``; ``params["style"]`` (a :class:`reports.chart.Style`) sets the width and text
sizes (the page's by default, a paper column's from ``routestats figure``). Kinds here: ``answer_layers``, ``profile``,
``run_profile``, ``flow_measures``, ``mass_split``, ``paired_dots``, ``lengths``; the heat maps (``field_heatmaps``,
``head_heatmaps``, ``word_map``) are :mod:`reports.heat_figures`.

>>> import pandas as pd
>>> est = pd.DataFrame({"layer": [0, 1], "estimate": [0.1, 0.0], "low": [0.05, -0.05], "high": [0.15, 0.05],
...                     "asserted": ["rose", "includes"]})
>>> c = DRAWERS["answer_layers"]({"estimates": est}, {})
>>> round(c.width), sorted({t[5] for t in c.texts if t[6] == "x"})
(330, ['0', '1'])
"""

from __future__ import annotations

import dataclasses

import numpy as np

from reports.axes import labelled_layers
from reports.canvas import Canvas, text_width
from reports.chart import (axes, canvas_for, errorbars, layer_hex, layer_strip, legend, nice_ticks, padded, Panel,
                           registrar, Style, style_of, tick_labels, value_range, ylabel_room)

__all__ = ["DRAWERS", "ROLE_COLORS", "SHORT", "MOST_MARKS"]

DRAWERS: dict = {}
ROLE_COLORS = {"baseline": "#4C72B0", "variant": "#DD8452"}
SHORT = {"baseline": "baseline", "variant": "variant", "difference": "variant − baseline", "run": "run"}
VERDICT_COLORS = {"rose": "#2a7d4f", "fell": "#b03a2e", "excludes": "#8fbf9f", "includes": "#8c8c8c"}
VERDICT_WORDS = {"rose": "rose (p < α)", "fell": "fell (p < α)", "excludes": "interval excludes 0, p ≥ α",
                 "includes": "interval includes 0"}
MOST_MARKS = 3000  # examples drawn per layer in a scatter or a slope plot; beyond, an even sample, said on the figure


drawer = registrar(DRAWERS)


def _sample(n: int) -> np.ndarray:
    """Positions of at most :data:`MOST_MARKS` of ``n`` rows, evenly spread (all of them when fewer)."""
    return np.arange(n) if n <= MOST_MARKS else np.unique(np.linspace(0, n - 1, MOST_MARKS).round().astype(int))


def _layer_x(layers) -> tuple:
    layers = [int(x) for x in layers]
    return (min(layers) - 0.6, max(layers) + 0.6)


@drawer("answer_layers")
def answer_layers(frames, params) -> Canvas:
    """The answer at a glance: each layer's estimate and interval, coloured by the verdict the headline states
    (rose, fell, excludes 0 without p < α, includes 0); with ``points``, each unit's estimate (a seed's Δ) as a
    small dot beside it. Compact: it sits beside the first screen's sentence."""
    s = style_of(params)
    e = frames["estimates"].sort_values("layer")
    pts = frames.get("points")
    has_pts = pts is not None and len(pts)
    width = min(s.width, 330.0)
    ylim = value_range(e["low"], e["high"], pts["estimate"] if has_pts else [], zero=True)
    yt = nice_ticks(*ylim, 5)
    left = ylabel_room(s, tick_labels(yt)) + 2
    verdicts = [v for v in VERDICT_COLORS if (e["asserted"] == v).any()]
    entries = [(VERDICT_WORDS[v], VERDICT_COLORS[v], "bar") for v in verdicts]
    if has_pts:
        entries.append((f"each {params.get('points', 'unit')}", "#737373", "dot"))
    cols = 2 if len(entries) > 1 and width >= 300 else 1
    ph = 118.0
    leg_h = -(-len(entries) // cols) * s.text * 1.5
    height = 8 + ph + 5 + 2 * s.text * 1.25 + 8 + leg_h + 4
    c = canvas_for(s, width, height)
    p = Panel(c, left, 8, width - left - 8, ph, _layer_x(e["layer"]), ylim)
    n = len(e)
    axes(p, s, xticks=labelled_layers(e["layer"], 10), yticks=yt, xlabel="layer", zero=True,
         ylabel=f"Δ {params.get('metric', 'SFM')} ({params.get('conf', '95%')} interval)")
    if has_pts:
        jitter = np.random.default_rng(0).uniform(-0.12, 0.12, len(pts))
        c.dots(p.X(pts["layer"].to_numpy(float) - 0.22 + jitter), p.Y(pts["estimate"]), s.dot * 0.8, "#737373", 0.8)
    for v in verdicts:
        g = e[e["asserted"] == v]
        errorbars(p, g["layer"], g["estimate"], g["low"], g["high"], VERDICT_COLORS[v], s, cap=3 if n <= 12 else 0)
    legend(c, width / 2, height - leg_h - 4, entries, s, columns=cols, anchor="middle")
    return c


NARROW = 400.0  # points: narrower figures (a paper's column) stack their two panels


def _two_panels(s: Style, xa: tuple, xb: tuple, ya: tuple, yb: tuple, legend_room: float = 0.0, right: float = 0.0,
                share: float = 0.5, first_legend: bool = False) -> tuple:
    """A canvas of two panels (data ranges ``xa`` x ``ya`` and ``xb`` x ``yb``): side by side, the first ``share`` of
    the width, ``right`` points kept on their right (of both); stacked where the figure is narrower than :data:`NARROW`.
    ``legend_room`` points are kept below them, or, stacked with ``first_legend``, between them (a legend of the first
    panel's lines goes under that panel: :func:`_below` points under its frame either way). Returns (canvas, first
    panel, second panel, their y ticks)."""
    ta, tb = nice_ticks(*ya, 6), nice_ticks(*yb, 6)
    la, lb = ylabel_room(s, tick_labels(ta)), ylabel_room(s, tick_labels(tb))
    top = s.title * 1.4 + 8
    below = _below(s)
    if s.width >= NARROW:
        room = s.width - la - lb - 24 - right - 8
        ph = min(190.0, room * 0.31)
        c = Canvas(s.width, top + ph + below + legend_room)
        a = Panel(c, la, top, room * share, ph, xa, ya)
        return c, a, Panel(c, la + room * share + 24 + lb, top, room * (1 - share), ph, xb, yb), ta, tb
    left = max(la, lb)
    pw = s.width - left - right - 8
    ph = pw * 0.55
    c = Canvas(s.width, 2 * (top + ph + below) + legend_room)
    second = 2 * top + ph + below + (legend_room if first_legend else 0.0)
    return c, Panel(c, left, top, pw, ph, xa, ya), Panel(c, left, second, pw, ph, xb, yb), ta, tb


def _below(s: Style) -> float:
    """Points under a panel's frame for its tick labels and axis label: where a legend under it starts."""
    return 5 + 2 * s.text * 1.25 + 10


def _line(c: Canvas, p: Panel, xs, ys, color: str, s: Style) -> None:
    c.polyline(p.X(xs), p.Y(ys), color, s.line)
    c.dots(p.X(xs), p.Y(ys), s.dot * 1.2, color)


@drawer("profile")
def profile(frames, params) -> Canvas:
    """SFM per layer for both models, and the paired difference with its interval."""
    s = style_of(params)
    layers, effects = frames["layers"], frames["effects"].sort_values("layer")
    leg_h = s.text * 1.5 + 4
    lx = _layer_x(layers["layer"].unique())
    c, a, b, ta, tb = _two_panels(s, lx, lx, value_range(layers["sfm"]),
                                  value_range(effects["ci_low"], effects["ci_high"], zero=True), leg_h,
                                  first_legend=True)
    ticks = labelled_layers(layers["layer"].unique())
    axes(a, s, xticks=ticks, yticks=ta, xlabel="layer", ylabel="same-field mass", title="Layer profile", group="a")
    axes(b, s, xticks=ticks, yticks=tb, xlabel="layer", ylabel="Δ SFM (variant − baseline)", zero=True,
         title="Paired difference, 95% CI", group="b")
    for role in ("baseline", "variant"):
        t = layers[layers["role"] == role].sort_values("layer")
        _line(c, a, t["layer"], t["sfm"], ROLE_COLORS[role], s)
    errorbars(b, effects["layer"], effects["mean_diff"], effects["ci_low"], effects["ci_high"], "#55A868", s, cap=4)
    legend(c, a.x + a.w / 2, a.y + a.h + _below(s), [(SHORT[r], ROLE_COLORS[r], "line") for r in ROLE_COLORS], s,
           columns=2, anchor="middle")
    return c


@drawer("run_profile")
def run_profile(frames, params) -> Canvas:
    """One run: SFM and entropy per layer."""
    s = style_of(params)
    t = frames["layers"].sort_values("layer")
    lx = _layer_x(t["layer"])
    c, a, b, ta, tb = _two_panels(s, lx, lx, value_range(t["sfm"]), value_range(t["entropy"]))
    ticks = labelled_layers(t["layer"])
    axes(a, s, xticks=ticks, yticks=ta, xlabel="layer", ylabel="same-field mass", title="Layer profile", group="a")
    axes(b, s, xticks=ticks, yticks=tb, xlabel="layer", ylabel="entropy (nats)", title="Attention entropy", group="b")
    _line(c, a, t["layer"], t["sfm"], ROLE_COLORS["baseline"], s)
    _line(c, b, t["layer"], t["entropy"], "#55A868", s)
    return c


@drawer("flow_measures")
def flow_measures(frames, params) -> Canvas:
    """Δ SFM per layer with its interval under each routing measure (weights, norm-weighted, rollout)."""
    s = style_of(params)
    e = frames["effects"]
    measures = list(dict.fromkeys(e["measure"]))
    colors = dict(zip(measures, ("#4C72B0", "#C44E52", "#8172B3")))
    ylim = value_range(e["ci_low"], e["ci_high"], zero=True)
    yt = nice_ticks(*ylim, 6)
    left = ylabel_room(s, tick_labels(yt))
    key_w = max(text_width(m, s.text) for m in measures) + 30
    width = min(s.width, 600.0)
    ph = 190.0 if s.width > 400 else 120.0
    top = s.title * 1.4 + 8
    c = canvas_for(s, width, top + ph + 5 + 2 * s.text * 1.25 + 10)
    p = Panel(c, left, top, width - left - key_w - 8, ph, _layer_x(e["layer"].unique()), ylim)
    axes(p, s, xticks=labelled_layers(e["layer"].unique()), yticks=yt, xlabel="layer",
         ylabel="Δ SFM (variant − baseline)",
         zero=True, title="Three routing measures, paired CIs")
    step = 0.8 / len(measures)
    for k, m in enumerate(measures):
        t = e[e["measure"] == m].sort_values("layer")
        x = t["layer"].to_numpy(float) + (k - (len(measures) - 1) / 2) * step
        errorbars(p, x, t["mean_diff"], t["ci_low"], t["ci_high"], colors[m], s, cap=3)
    legend(c, p.x + p.w + 12, top + ph / 2 - len(measures) * s.text * 0.75,
           [(m, colors[m], "bar") for m in measures], s)
    return c


@drawer("mass_split")
def mass_split(frames, params) -> Canvas:
    """Per layer: same-field, other-field and unnamed mass (and the learned sinks' mass, where a model has them) as
    stacked bars, and the first key's mass as a black line."""
    s = style_of(params)
    m = frames["masses"]
    roles = [r for r in ("baseline", "variant", "run") if r in set(m["role"])]
    labels = params.get("labels", {})
    parts = [("sfm", "same field (S)", "#4C72B0"), ("cross_mass", "other named fields (C)", "#8FB0D9"),
             ("unnamed_mass", "outside named fields (U)", "#DD8452")]
    if "sink_mass" in m and float(m["sink_mass"].max()) > 0:  # learned attention sinks: the rest of each row
        parts.append(("sink_mass", "learned sinks (K)", "#BBBBBB"))
    entries = [(name, color, "bar_fill") for _, name, color in parts] + [("first key", "black", "line")]
    yt = nice_ticks(0.0, 1.0, 6)
    left = ylabel_room(s, tick_labels(yt))
    key_w = max(text_width(e[0], s.text) for e in entries) + 30
    gap = 14
    pw = (s.width - left - key_w - 8 - gap * (len(roles) - 1)) / len(roles)
    ph = min(190.0, pw * 0.62)
    top = s.title * 1.4 + 8
    c = Canvas(s.width, top + ph + 5 + 2 * s.text * 1.25 + 10)
    lx = _layer_x(m["layer"].unique())
    for j, role in enumerate(roles):
        t = m[m["role"] == role].sort_values("layer")
        p = Panel(c, left + j * (pw + gap), top, pw, ph, lx, (0.0, 1.05))
        axes(p, s, xticks=labelled_layers(t["layer"]), yticks=yt, ylabels=None if j == 0 else [""] * len(yt),
             xlabel="layer", ylabel="attention mass" if j == 0 else "", title=str(labels.get(role, role)),
             group=f"p{j}")
        x = t["layer"].to_numpy(float)
        bottom = np.zeros(len(t))
        half = 0.4 * p.w / (lx[1] - lx[0])
        for col, _, color in parts:
            v = t[col].to_numpy(float)
            for xx, b0, vv in zip(p.X(x), bottom, v):
                if vv > 0:
                    c.rect(float(xx - half), float(p.Y(b0 + vv)), float(2 * half), float(p.Y(b0) - p.Y(b0 + vv)),
                           fill=color, stroke="white", width=0.6)
            bottom += v
        _line(c, p, x, t["first_mass"].to_numpy(float), "black", dataclasses.replace(s, line=1.0, dot=1.4))
    legend(c, s.width - key_w + 4, top + ph / 2 - len(entries) * s.text * 0.75, entries, s)
    return c


@drawer("paired_dots")
def paired_dots(frames, params) -> Canvas:
    """Per layer: every example's baseline and variant value joined by a line (the paired distribution), the means
    in black."""
    s = style_of(params)
    d = frames["pairs"]
    layers = sorted(d["layer"].unique())
    cols = min(len(layers), 6)
    rows = -(-len(layers) // cols)
    ylim = value_range(d["baseline"], d["variant"])
    yt = nice_ticks(*ylim, 6)
    left = ylabel_room(s, tick_labels(yt))
    gap = 12
    pw = min(150.0, (s.width - left - 8 - gap * (cols - 1)) / cols)
    ph = 150.0 if s.width > 400 else 110.0
    top = s.title * 1.4 + 6
    row_h = top + ph + s.text * 1.3 + 10
    most = int(d.groupby("layer").size().max())
    note = f"{MOST_MARKS:,} of {most:,} examples drawn per layer, evenly spread" if most > MOST_MARKS else ""
    height = rows * row_h + (s.text * 1.6 if note else 0) + 4
    c = canvas_for(s, left + cols * pw + gap * (cols - 1) + 8, height)
    for k, layer in enumerate(layers):
        i, j = divmod(k, cols)
        p = Panel(c, left + j * (pw + gap), i * row_h + top, pw, ph, (-0.25, 1.25), ylim)
        g = d[d["layer"] == layer]
        axes(p, s, xticks=[0, 1], xlabels=["base", "var"], yticks=yt, ylabels=None if j == 0 else [""] * len(yt),
             ylabel="SFM per example" if j == 0 else "", title=f"L{layer}: {int((g['diff'] > 0).sum())}/{len(g)} up",
             group=f"p{k}")
        shown = g.iloc[_sample(len(g))]
        up = (shown["diff"] > 0).to_numpy()
        b, v = p.Y(shown["baseline"]), p.Y(shown["variant"])
        x0, x1 = float(p.X(0)), float(p.X(1))
        for mask, role in ((~up, "baseline"), (up, "variant")):
            if mask.any():
                c.segments(np.column_stack([np.full(mask.sum(), x0), b[mask], np.full(mask.sum(), x1), v[mask]]),
                           ROLE_COLORS[role], 0.8, alpha=0.25)
        means = p.Y([g["baseline"].mean(), g["variant"].mean()])
        c.polyline([x0, x1], means, "black", 2.2)
        c.dots([x0, x1], means, s.dot * 1.3, "black")
    if note:
        c.text(left, height - s.text * 0.8 - 2, note, s.text, "#595959")
    return c


@drawer("lengths")
def lengths(frames, params) -> Canvas:
    """Evaluated lengths (histogram) and each example's Δ SFM against its length, with a running mean per layer."""
    s = style_of(params)
    ex = frames["examples"]
    one = ex.drop_duplicates("example_id")
    counts, edges = np.histogram(one["length"], bins=min(30, max(5, one["length"].nunique())))
    layers = sorted(ex["layer"].unique())
    colors = layer_hex(len(layers))
    window = int(ex["window"].iloc[0])
    ya = (0.0, max(1.0, counts.max() * 1.06))
    yb = value_range(ex["diff"], zero=True)
    xlim = padded(float(edges[0]), float(edges[-1]), 0.03)
    xt = [v for v in nice_ticks(*xlim, 6) if xlim[0] <= v <= xlim[1]]
    entries = [(f"layer {x}", col, "line") for x, col in zip(layers, colors)]
    key_w = max(text_width(e[0], s.text) for e in entries) + 26 if len(layers) <= 8 else 60.0
    stacked = s.width < NARROW  # then the layers' key goes below, in rows
    key_rows = -(-len(entries) // 4) if stacked and len(layers) <= 8 else 0
    most = int(ex.groupby("layer").size().max())
    note = f"dots: {MOST_MARKS:,} of {most:,} examples per layer, evenly spread" if most > MOST_MARKS else ""
    c, a, b, ta, tb = _two_panels(s, xlim, xlim, ya, yb, right=0.0 if key_rows else key_w, share=0.42,
                                  legend_room=key_rows * s.text * 1.5 + (s.text * 1.6 if note else 0))
    ta = [v for v in ta if float(v).is_integer()]
    ph, height = a.h, c.height
    axes(a, s, xticks=xt, yticks=ta, xlabel="evaluated tokens", ylabel="examples", title="Length distribution",
         group="a")
    for n, lo, hi in zip(counts, edges[:-1], edges[1:]):
        if n:
            c.rect(float(a.X(lo)), float(a.Y(n)), float(a.X(hi) - a.X(lo)), float(a.Y(0) - a.Y(n)), fill="#4C72B0",
                   stroke="white", width=0.8)
    axes(b, s, xticks=xt, yticks=tb, xlabel="evaluated tokens", ylabel="Δ SFM (variant − baseline)", zero=True,
         title=f"Δ vs length (running mean of {window})", group="b")
    for color, layer in zip(colors, layers):
        t = ex[ex["layer"] == layer].sort_values("length", kind="stable")
        shown = t.iloc[_sample(len(t))]
        c.dots(b.X(shown["length"]), b.Y(shown["diff"]), s.dot * 0.75, color, 0.35)
        c.polyline(b.X(t["length"]), b.Y(t["running_mean"]), color, s.line * 1.4)
    kx = b.x + b.w + 12
    if key_rows:
        legend(c, s.width / 2, b.y + b.h + 5 + 2 * s.text * 1.25 + 8, entries, s, columns=4, anchor="middle")
    elif len(layers) <= 8:
        legend(c, kx, b.y + ph / 2 - len(layers) * s.text * 0.75, entries, s)
    else:
        layer_strip(c, kx, b.y, ph, layers, colors, s)
    if note:
        c.text(b.x, height - s.text * 0.8 - 2, note, s.text, "#595959")
    return c
