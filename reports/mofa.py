"""Figures of a MoFA report on a :class:`reports.canvas.Canvas`, like a pair's page: the domain × ratio perplexity
heat map, the first screen's relative perplexity, the domains' PC1 scores and head entropy by type. The means and
z-scores come finished from the core.

>>> import pandas as pd
>>> s = pd.DataFrame({"domain": ["code", "news"], "pc1": [1.5, -0.5]})
>>> c = DRAWERS["mofa_pca"]({"scores": s}, {"explained": 0.8})
>>> sorted(t[5] for t in c.texts if t[6] == "y")
['code', 'news']
"""

from __future__ import annotations

import numpy as np

from reports.axes import labelled_layers
from reports.canvas import PALETTES, Canvas, text_width
from reports.chart import (axes, canvas_for, colorbar, heat, hex_colors, legend, nice_ticks, padded, Panel, registrar,
                           style_of, tick_labels, value_range, ylabel_room)

__all__ = ["DRAWERS"]

DRAWERS: dict = {}
drawer = registrar(DRAWERS)


def _viridis(n: int) -> list[str]:
    """``n`` colours of viridis at inner points, as the layers' colours take them (reports.axes.layer_colors)."""
    from reports.canvas import colormap

    return hex_colors(colormap("viridis", np.linspace(0, 1, n + 2)[1:-1]))


@drawer("mofa_heatmap")
def heatmap(frames, params) -> Canvas:
    """Mean perplexity per domain and ratio, written in each cell; the colour is the row's z-score."""
    s = style_of(params)
    m, z = frames["mean_ppl"], frames["zscore"]
    rows, cols = [str(x) for x in z.index], [str(x) for x in z.columns]
    vmax = float(np.nanmax(np.abs(z.to_numpy()))) if z.size else 1.0
    vmax = vmax if np.isfinite(vmax) and vmax > 0 else 1.0
    left = max((text_width(r, s.text) for r in rows), default=0.0) + 8
    cw = max(54.0, max((text_width(c_, s.text) for c_ in cols), default=0.0) + 10)
    ch = 22.0
    top = s.title * 1.4 + 4
    width = left + cw * len(cols) + 80
    c = canvas_for(s, width, top + ch * len(rows) + s.text * 1.3 + 5 + s.label * 1.3 + 8)
    labels = [[f"{v:.1f}" for v in row] for row in m.reindex(index=z.index, columns=z.columns).to_numpy()]
    heat(c, left, top, cw, ch, z.to_numpy(float), vmin=-vmax, vmax=vmax, cmap="RdBu_r", annot=True, size=s.text,
         labels=labels)
    for i, r in enumerate(rows):
        c.text(left - 4, top + (i + 0.5) * ch, r, s.text, anchor="end", group="y")
    for j, col in enumerate(cols):
        c.text(left + (j + 0.5) * cw, top + ch * len(rows) + 3, col, s.text, anchor="middle", valign="top", group="x")
    c.text(left + cw * len(cols) / 2, c.height - 4, "ratio (softmax:sigmoid)", s.label, anchor="middle",
           valign="bottom")
    c.text(left + cw * len(cols) / 2, top - 5, "Domain × ratio PPL (colour: row z-score)", s.title, anchor="middle",
           valign="bottom")
    colorbar(c, left + cw * len(cols) + 10, top, 9, ch * len(rows), vmin=-vmax, vmax=vmax, cmap="RdBu_r", style=s)
    return c


@drawer("mofa_answer")
def answer(frames, params) -> Canvas:
    """The first screen's figure: each ratio's perplexity relative to its domain's lowest mean (0 = the lowest), one
    line per domain through the seed means, each seed a faint dot."""
    s = style_of(params)
    r = frames["relative"]
    order = [str(x) for x in params["order"]]
    domains = list(dict.fromkeys(r["domain"]))
    colors = [PALETTES["colorblind"][k % 10] for k in range(len(domains))]
    ylim = value_range(100 * r["relative"], zero=True)
    yt = nice_ticks(*ylim, 5)
    key_w = max(text_width(str(d), s.text) for d in domains) + 30
    width = min(s.width, 330.0) if not s.fill else s.width
    left = ylabel_room(s, tick_labels(yt)) + s.label * 1.3
    ph = 118.0
    c = canvas_for(s, width, 8 + ph + 5 + 2 * s.text * 1.25 + 8)
    p = Panel(c, left, 8, c.width - left - key_w - 6, ph, (-0.5, len(order) - 0.5), ylim)
    axes(p, s, xticks=list(range(len(order))), xlabels=order, yticks=yt, xlabel="ratio (softmax:sigmoid heads)",
         zero=True)
    c.text(4, p.y + p.h / 2, "PPL above the domain's", s.text, anchor="middle", valign="top", rotate=90)
    c.text(4 + s.text * 1.2, p.y + p.h / 2, "lowest mean (%)", s.text, anchor="middle", valign="top", rotate=90)
    x = {str(ratio): i for i, ratio in enumerate(order)}
    for k, (dom, color) in enumerate(zip(domains, colors)):
        g = r[r["domain"] == dom]
        off = (k - (len(domains) - 1) / 2) * 0.06
        c.dots(p.X(g["ratio"].astype(str).map(x).to_numpy(float) + off), p.Y(100 * g["relative"]), s.dot * 0.7, color,
               0.45)
        mean = g.groupby(g["ratio"].astype(str))["relative"].mean().reindex(order)
        c.polyline(p.X(np.arange(len(order)) + off), p.Y(100 * mean.to_numpy()), color, s.line)
        c.dots(p.X(np.arange(len(order)) + off), p.Y(100 * mean.to_numpy()), s.dot, color)
    legend(c, p.x + p.w + 8, p.y + p.h / 2 - len(domains) * s.text * 0.75, [(str(d), col, "line") for d, col in
                                                                        zip(domains, colors)], s)
    return c


@drawer("mofa_pca")
def pca(frames, params) -> Canvas:
    """Each domain's PC1 score as a bar (> 0: softmax-leaning)."""
    s = style_of(params)
    sc = frames["scores"].sort_values("pc1")
    names = [str(d) for d in sc["domain"]]
    xlim = value_range(sc["pc1"], zero=True)
    left = max((text_width(n, s.text) for n in names), default=0.0) + 10
    bh = 16.0
    top = s.title * 1.4 + 6
    ph = bh * len(names) + 6
    width = min(s.width, 600.0)
    c = canvas_for(s, width, top + ph + 5 + 2 * s.text * 1.25 + 10)
    p = Panel(c, left, top, c.width - left - 10, ph, xlim, (-0.5, len(names) - 0.5))
    axes(p, s, xticks=nice_ticks(*xlim, 6), xlabel="PC1 score (> 0: softmax-leaning)",
         title=f"Domain response PC1 ({100 * params['explained']:.1f}%)")
    for i, (n, v) in enumerate(zip(names, sc["pc1"].to_numpy(float))):
        y = float(p.Y(len(names) - 1 - i))
        x0, x1 = sorted((float(p.X(0)), float(p.X(v))))
        c.rect(x0, y - bh * 0.4, x1 - x0, bh * 0.8, fill="#4C72B0" if v > 0 else "#DD8452")
        c.text(p.x - 4, y, n, s.text, anchor="end", group="y")
    c.line(float(p.X(0)), p.y, float(p.X(0)), p.y + p.h, "#4d4d4d", 1.0)
    return c


@drawer("mofa_entropy")
def entropy(frames, params) -> Canvas:
    """Row-normalised entropy per layer for softmax and sigmoid heads, one line per ratio."""
    s = style_of(params)
    ent = frames["entropy_layer"]
    ratios = [str(x) for x in params["ratios"]]
    colors = dict(zip(ratios, _viridis(len(ratios))))
    ylim = padded(float(ent["entropy"].min()), float(ent["entropy"].max())) if len(ent) else (0.0, 1.0)
    yt = nice_ticks(*ylim, 6)
    left = ylabel_room(s, tick_labels(yt))
    key_w = max(text_width(r, s.text) for r in ratios) + 30
    gap, top = 16.0, s.title * 1.4 + 8
    pw = (s.width - left - key_w - gap - 8) / 2
    ph = min(190.0, pw * 0.62)
    c = Canvas(s.width, top + ph + 5 + 2 * s.text * 1.25 + 10)
    lx = (ent["layer"].min() - 0.4, ent["layer"].max() + 0.4) if len(ent) else (-0.5, 0.5)
    for j, htype in enumerate(("softmax", "sigmoid")):
        p = Panel(c, left + j * (pw + gap), top, pw, ph, lx, ylim)
        axes(p, s, xticks=labelled_layers(ent["layer"].unique()), yticks=yt,
             ylabels=None if j == 0 else [""] * len(yt), xlabel="layer",
             ylabel="row-normalised entropy (nats)" if j == 0 else "", title=f"{htype} heads", group=f"p{j}")
        t = ent[ent["head_type"] == htype]
        for ratio, g in t.groupby(t["ratio"].astype(str)):
            g = g.sort_values("layer")
            c.polyline(p.X(g["layer"]), p.Y(g["entropy"]), colors.get(ratio, "#4d4d4d"), s.line)
            c.dots(p.X(g["layer"]), p.Y(g["entropy"]), s.dot * 1.1, colors.get(ratio, "#4d4d4d"))
    legend(c, s.width - key_w + 4, top + ph / 2 - len(ratios) * s.text * 0.75,
           [(r, colors[r], "line") for r in ratios], s)
    return c
