"""The heat maps of a pair's (and a single run's) report page, drawn on a :class:`reports.canvas.Canvas` like
:mod:`reports.pair_figures`: field-to-field mass, head-level SFM and the word-level map. Cells that were not measured
are hatched, never coloured.

>>> import pandas as pd
>>> hs = pd.DataFrame({"role": ["run"] * 4, "layer": [0, 0, 1, 1], "head": [0, 1, 0, 1], "sfm": [0.5, 0.6, 0.7, None]})
>>> c = DRAWERS["head_heatmaps"]({"head_sfm": hs}, {})
>>> c.svg().count('fill="url(#rs-hatch)"')  # the one head with no value
1
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from reports.axes import labelled_layers
from reports.canvas import GRID, INK, Canvas, text_width
from reports.chart import Style, canvas_for, colorbar, heat, registrar, style_of, ylabel_room
from reports.pair_figures import SHORT

__all__ = ["DRAWERS"]

DRAWERS: dict = {}
drawer = registrar(DRAWERS)


def _roles(frame) -> list:
    return [r for r in ("baseline", "variant", "difference", "run") if r in set(frame["role"])]


def _scale(frame, col: str, role: str) -> dict:
    if role == "difference":
        v = frame.loc[frame["role"] == "difference", col].to_numpy(float)
        m = max(1e-9, float(np.nanmax(np.abs(v), initial=0.0)))
        return dict(vmin=-m, vmax=m, cmap="RdBu_r")
    return dict(vmin=0.0, vmax=1.0, cmap="viridis")


@drawer("field_heatmaps")
def field_heatmaps(frames, params) -> Canvas:
    """Field-to-field mass per layer: baseline, variant, difference (rows = source field, labelled values).

    Beyond 6 layers the small multiples would run to metres: then one heat map per role, layers across and the
    source → destination pairs down."""
    s = style_of(params)
    f2f = frames["field_to_field"]
    twice = f2f.duplicated(["role", "layer", "source_name", "destination_name"])
    if twice.any():  # a cell is one number: two would leave the drawing to pick one
        r = f2f[twice].iloc[0]
        raise ValueError(f"field_to_field has two rows for {r['role']} layer {r['layer']}, "
                         f"{r['source_name']} -> {r['destination_name']}")
    layers = sorted(f2f["layer"].unique())
    if len(layers) > 6:
        return _field_compact(f2f, layers, s)
    roles = _roles(f2f)
    names = list(dict.fromkeys(f2f.sort_values("source")["source_name"]))
    dests = list(dict.fromkeys(f2f.sort_values("destination")["destination_name"]))
    left = max(text_width(n, s.text) for n in names) + 6 + s.label * 1.3 + 4
    bottom = s.text * 1.3 + 5 + s.label * 1.3 + 6
    gap, top = 14, s.title * 1.4 + 4
    side = min(170.0, (s.width - left - 8 - gap * (len(roles) - 1)) / len(roles))
    cw, ch = side / len(dests), min(side / len(names), 46.0)
    row_h = top + ch * len(names) + 8
    c = canvas_for(s, left + len(roles) * side + gap * (len(roles) - 1) + 8, len(layers) * row_h + bottom)
    scale = {role: _scale(f2f, "mass", role) for role in roles}
    role_of, layer_of, mass = f2f["role"].to_numpy(), f2f["layer"].to_numpy(), f2f["mass"].to_numpy(float)
    src, dst = pd.Index(names).get_indexer(f2f["source_name"]), pd.Index(dests).get_indexer(f2f["destination_name"])
    for i, layer in enumerate(layers):
        for j, role in enumerate(roles):
            mine = (role_of == role) & (layer_of == layer)  # one row per source and destination: a matrix, NaN unseen
            m = np.full((len(names), len(dests)), np.nan)
            m[src[mine], dst[mine]] = mass[mine]
            x, y = left + j * (side + gap), i * row_h + top
            heat(c, x, y, cw, ch, m, annot=text_width("−0.00", s.text) <= cw - 2, size=s.text, **scale[role])
            c.text(x + side / 2, y - 5, f"L{layer} {SHORT[role]}", s.title, anchor="middle", valign="bottom")
            if j == 0:
                for r, n in enumerate(names):
                    c.text(x - 4, y + (r + 0.5) * ch, n, s.text, anchor="end", group=f"y{i}")
                c.text(x - left + 4, y + len(names) * ch / 2, "source", s.label, anchor="middle", valign="top",
                       rotate=90)
            if i == len(layers) - 1:
                for q, n in enumerate(dests):
                    c.text(x + (q + 0.5) * cw, y + len(names) * ch + 3, n, s.text, anchor="middle", valign="top",
                           group=f"x{j}")
                c.text(x + side / 2, y + len(names) * ch + 5 + s.text * 1.3, "destination", s.label,
                       anchor="middle", valign="top")
    return c


def _field_compact(f2f: pd.DataFrame, layers, s: Style) -> Canvas:
    roles = _roles(f2f)
    t = f2f.assign(pair=f2f["source_name"].astype(str) + " → " + f2f["destination_name"].astype(str))
    pairs = list(dict.fromkeys(t.sort_values(["source", "destination"])["pair"]))
    left = max(text_width(p, s.text) for p in pairs) + 8
    bar_room = 70.0
    cw = min(22.0, (s.width - left - bar_room) / len(layers))
    ch = 13.0
    top = s.title * 1.4 + 4
    block = top + ch * len(pairs) + s.text * 1.3 + 8
    height = len(roles) * block + s.label * 1.3 + 6
    c = canvas_for(s, left + cw * len(layers) + bar_room, height)
    ticks = set(labelled_layers(layers))
    for k, role in enumerate(roles):
        m = t[t["role"] == role].pivot(index="pair", columns="layer", values="mass").reindex(index=pairs,
                                                                                           columns=layers)
        y = k * block + top
        sc = _scale(t, "mass", role)
        heat(c, left, y, cw, ch, m.to_numpy(float), **sc)
        c.text(left + cw * len(layers) / 2, y - 5, SHORT[role], s.title, anchor="middle", valign="bottom")
        for r, name in enumerate(pairs):
            c.text(left - 4, y + (r + 0.5) * ch, name, s.text, anchor="end", group=f"y{k}")
        for q, layer in enumerate(layers):
            if int(layer) in ticks:
                c.text(left + (q + 0.5) * cw, y + len(pairs) * ch + 3, str(layer), s.text, anchor="middle",
                       valign="top", group=f"x{k}")
        colorbar(c, left + cw * len(layers) + 10, y, 9, ch * len(pairs), style=s, **sc)
    c.text(left + cw * len(layers) / 2, height - 4, "layer", s.label, anchor="middle", valign="bottom")
    return c


@drawer("head_heatmaps")
def head_heatmaps(frames, params) -> Canvas:
    """Head-level SFM (layer x head) for both models and their difference; values written in the cells up to 8
    heads and 12 layers, and beyond that the panels share the page's width and their ticks are thinned."""
    s = style_of(params)
    hs = frames["head_sfm"]
    roles = _roles(hs)
    layers, heads = sorted(hs["layer"].unique()), sorted(hs["head"].unique())
    big = len(heads) > 8 or len(layers) > 12
    left = ylabel_room(s, [str(x) for x in layers])
    bar_room, gap = 52.0, 10.0
    pw = (s.width - 8) / len(roles) - left - bar_room - gap
    cw = min(pw / len(heads), 34.0)
    ch = min(26.0, 300.0 / len(layers)) if big else min(cw * 0.8, 24.0)
    top = s.title * 1.4 + 4
    height = top + ch * len(layers) + s.text * 1.3 + 5 + s.label * 1.3 + 6
    unit = left + cw * len(heads) + bar_room + gap
    c = canvas_for(s, unit * len(roles) + 8, height)
    yt, xt = set(labelled_layers(layers, 15)), set(labelled_layers(heads, 6 if big else 15))
    for k, role in enumerate(roles):
        m = hs[hs["role"] == role].pivot(index="layer", columns="head", values="sfm").reindex(index=layers,
                                                                                             columns=heads)
        x0 = k * unit + left
        sc = _scale(hs, "sfm", role)
        heat(c, x0, top, cw, ch, m.to_numpy(float), annot=not big and text_width("−0.00", s.text) <= cw - 2,
             size=s.text, **sc)
        c.text(x0 + cw * len(heads) / 2, top - 5, SHORT[role], s.title, anchor="middle", valign="bottom")
        for r, layer in enumerate(layers):
            if int(layer) in yt:
                c.text(x0 - 4, top + (r + 0.5) * ch, str(layer), s.text, anchor="end", group=f"y{k}")
        for q, head in enumerate(heads):
            if int(head) in xt:
                c.text(x0 + (q + 0.5) * cw, top + len(layers) * ch + 3, str(head), s.text, anchor="middle",
                       valign="top", group=f"x{k}")
        c.text(x0 + cw * len(heads) / 2, height - 4, "head", s.label, anchor="middle", valign="bottom")
        c.text(x0 - left + 2, top + len(layers) * ch / 2, "layer", s.label, anchor="middle", valign="top", rotate=90)
        colorbar(c, x0 + cw * len(heads) + 8, top, 9, ch * len(layers), style=s, **sc)
    return c


@drawer("word_map")
def word_map(frames, params) -> Canvas:
    """Word-level attention of one example: a row per layer; baseline, variant and their difference.

    The panels share their words, so only the outer ones are labelled (query words on the left, key words below;
    every k-th word where the cells are smaller than the page's smallest text);
    baseline and variant share one colour scale, the difference has its own; field boundaries are drawn as lines
    and words outside any named field are greyed."""
    s = style_of(params)
    wm = frames["word_map"]
    n, rows = len(wm.words), len(wm.layers)
    words = [w if len(w) <= 14 else w[:13] + "…" for w in wm.words]
    shade = ["#8c8c8c" if f == "unnamed" else INK for f in wm.word_fields]
    gap = 8.0
    bar_room = 9 + 5 + text_width("−0.15", s.text) + 6 + s.text * 1.3 + 8  # a colour bar, its ticks and its label
    side = max(40.0, (s.width - 120 - gap - 2 * bar_room) / 3)  # the page's width less a first guess at the labels
    cell = side / max(n, 1)
    size = min(s.text, max(s.least, cell / 1.2))  # a word as tall as its cell, down to the smallest text allowed
    every = max(1, int(np.ceil(size * 1.2 / cell)))  # every k-th word where even that is taller than a cell
    label_w = max((text_width(w, size) for w in words[::every]), default=0.0)
    left = label_w + 6 + s.label * 1.3 + 4
    side = max(40.0, (s.width - left - gap - 2 * bar_room) / 3)
    cell = side / max(n, 1)
    top = s.title * 1.4 + 2
    row_h = top + side + 6
    height = rows * row_h + label_w + 6 + s.label * 1.3 + 6
    c = canvas_for(s, left + 3 * side + gap + 2 * bar_room, height)
    vmax = max(float(np.max(wm.matrices[(r, layer)])) for r in ("baseline", "variant") for layer in wm.layers)
    dmax = max(1e-9, max(float(np.abs(wm.matrices[("difference", layer)]).max()) for layer in wm.layers))
    bounds = [i for i in range(1, n) if wm.word_fields[i] != wm.word_fields[i - 1]]
    xs = [left, left + side + gap, left + 2 * side + gap + bar_room]
    for i, layer in enumerate(wm.layers):
        y = i * row_h + top
        for j, role in enumerate(("baseline", "variant", "difference")):
            sc = dict(vmin=-dmax, vmax=dmax, cmap="RdBu_r") if role == "difference" else \
                dict(vmin=0.0, vmax=vmax, cmap="viridis")
            heat(c, xs[j], y, cell, cell, np.asarray(wm.matrices[(role, layer)], dtype=float), **sc)
            ink = "black" if role == "difference" else "white"
            c.segments([(xs[j], y + b * cell, xs[j] + side, y + b * cell) for b in bounds]
                       + [(xs[j] + b * cell, y, xs[j] + b * cell, y + side) for b in bounds] or np.zeros((0, 4)),
                       ink, 1.0)
            c.rect(xs[j], y, side, side, stroke=GRID, width=0.8)
            c.text(xs[j] + side / 2, y - 4, f"L{layer} {SHORT[role]}", s.title, anchor="middle", valign="bottom")
        for r in range(0, n, every):
            c.text(left - 4, y + (r + 0.5) * cell, words[r], size, shade[r], anchor="end", group=f"y{i}")
        c.text(6, y + side / 2, "query word", s.label, anchor="middle", valign="top", rotate=90)
    base = rows * row_h
    for j in range(3):
        for q in range(0, n, every):
            c.text(xs[j] + (q + 0.5) * cell, base - 2, words[q], size, shade[q], anchor="end", rotate=90,
                   group=f"x{j}")
        c.text(xs[j] + side / 2, height - 4, "key word", s.label, anchor="middle", valign="bottom")
    span = base - top - 6
    colorbar(c, xs[1] + side + 10, top + 0.1 * span, 9, 0.8 * span, vmin=0.0, vmax=vmax, cmap="viridis", style=s,
             label="attention (baseline, variant)")
    colorbar(c, xs[2] + side + 10, top + 0.1 * span, 9, 0.8 * span, vmin=-dmax, vmax=dmax, cmap="RdBu_r", style=s,
             label="variant − baseline")
    return c
