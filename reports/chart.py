"""Axes on a :class:`reports.canvas.Canvas`: a panel maps data to points, with nice ticks, grid, labels, titles,
error bars, heat maps (unmeasured cells hatched), colour bars and legends, in seaborn's whitegrid look.

A :class:`Style` carries the sizes: :data:`PAGE` for the report page, :func:`paper` for a column of a paper.

>>> nice_ticks(0.0, 1.0)
[0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
>>> tick_labels([0.0, 0.025, 0.05])
['0', '0.025', '0.050']
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from reports.axes import MAX_LEGEND_LAYERS, labelled_layers, layer_colors
from reports.canvas import GRID, INK, Canvas, colormap, rgb_hex, text_width

__all__ = ["Style", "PAGE", "paper", "style_of", "Panel", "SCALES", "canvas_for", "one_panel", "step_range",
           "log_ticks", "log_labels", "value_range", "nice_ticks", "tick_labels", "axes", "errorbars", "heat", "colorbar", "legend", "ylabel_room",
           "hex_colors", "layer_hex", "layer_strip", "registrar", "MAX_LEGEND_LAYERS"]


def registrar(table: dict):
    """A decorator ``drawer(kind)`` that enters ``fn(frames, params)`` (returning a drawing) into ``table`` (each
    drawing module keeps its own; :mod:`reports.drawing` joins them explicitly)."""

    def drawer(kind: str):
        def deco(fn):
            if kind in table:
                raise ValueError(f"two drawers for figure kind {kind!r}")
            table[kind] = fn
            return fn

        return deco

    return drawer


@dataclass(frozen=True)
class Style:
    """Sizes in points: the figure's full ``width``, tick and legend ``text``, axis ``label``, panel ``title``,
    line ``line`` width, dot ``dot`` radius, the ``least`` size a text may shrink to (9 CSS px on the page), and
    ``fill``: whether every figure takes exactly the width (a paper's) or may be narrower (the page's)."""

    width: float = 825.0  # the page's main column, 1,100 CSS px (reports.axes.DISPLAY_PX)
    text: float = 8.5
    label: float = 9.5
    title: float = 10.0
    line: float = 1.4
    dot: float = 2.6
    least: float = 6.75
    fill: bool = False


PAGE = Style()


def style_of(params) -> Style:
    """The style a drawer's ``params`` ask for (``params["style"]``), the page's by default."""
    return params.get("style", PAGE)


def paper(width_in: float) -> Style:
    """A paper's figure ``width_in`` inches wide: 8 pt text, 9 pt labels, thinner marks.

    >>> paper(3.3).width
    237.6
    """
    return Style(width=round(width_in * 72, 3), text=8.0, label=9.0, title=9.0, line=0.9, dot=1.7, least=8.0,
                 fill=True)


def hex_colors(rgbs) -> list[str]:
    """``#rrggbb`` of each RGB triple."""
    return [rgb_hex(c) for c in rgbs]


def nice_ticks(lo: float, hi: float, most: int = 6) -> list[float]:
    """Round values (1, 2, 2.5 or 5 times a power of ten apart) inside [lo, hi], at most ``most`` of them.

    >>> nice_ticks(-0.13, 0.42, 5)
    [-0.1, 0.0, 0.1, 0.2, 0.3, 0.4]
    """
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi <= lo:
        return [float(lo)] if np.isfinite(lo) else []
    raw = (hi - lo) / max(1, most - 1)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        step = m * mag
        first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
        if last - first + 1 <= most + 1:
            return [round(k * step, 12) + 0.0 for k in range(first, last + 1)]
    return [lo, hi]


def tick_labels(values) -> list[str]:
    """Labels with as many decimals as the finest tick needs (no '0.30000000000000004'); 10,000 and beyond as
    1e4, 2e4, ...

    >>> tick_labels([0.0, 5000.0, 20000.0])
    ['0', '5000', '2e4']
    """
    values = [float(v) for v in values]
    if max((abs(v) for v in values), default=0.0) >= 1e4 and all(float(v).is_integer() for v in values):
        return [_sci(v) for v in values]
    dec = 0
    for v in values:
        while dec < 6 and abs(round(v, dec) - v) > 1e-9 * max(1.0, abs(v)):
            dec += 1
    return [f"{v:.{dec}f}".replace("-", "−") if v != 0 else "0" for v in values]


def log_labels(values) -> list[str]:
    """Labels of a log axis: each value as short as it reads (1, 0.1, 0.01; 1e4 beyond 10,000).

    >>> log_labels([0.01, 0.1, 1.0, 10.0, 20000.0])
    ['0.01', '0.1', '1', '10', '2e4']
    """
    return [_sci(v) if abs(v) >= 1e4 else f"{float(v):g}" for v in values]


def _sci(v: float) -> str:
    if v == 0 or abs(v) < 1e4:
        return f"{v:.0f}".replace("-", "−")
    k = int(np.floor(np.log10(abs(v))))
    m = v / 10 ** k
    return (f"{m:g}e{k}" if abs(m - round(m, 1)) < 1e-9 else f"{v:.0f}").replace("-", "−")


def ylabel_room(style: Style, labels, axis_label: bool = True) -> float:
    """Points left of a panel for its tick labels (and its rotated axis label)."""
    widest = max((text_width(t, style.text) for t in labels), default=0.0)
    return widest + 5 + (style.label * 1.3 + 4 if axis_label else 0)


SCALES = {"linear": lambda v: v, "log": np.log10, "log1p": lambda v: np.log10(1 + v)}  # log1p: counts from 0


@dataclass(frozen=True)
class Panel:
    """A data rectangle on ``canvas``: top-left (x, y), size (w, h), the data ranges it shows, and each axis's
    scale (:data:`SCALES`: ``linear``, ``log``, or ``log1p`` for steps that start at 0)."""

    canvas: Canvas
    x: float
    y: float
    w: float
    h: float
    xlim: tuple
    ylim: tuple
    xscale: str = "linear"
    yscale: str = "linear"

    def X(self, v):
        """Points across of data x."""
        f = SCALES[self.xscale]
        lo, hi = f(np.asarray(self.xlim, dtype=float))
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.x + (f(np.asarray(v, dtype=float)) - lo) / (hi - lo) * self.w

    def Y(self, v):
        """Points down of data y."""
        f = SCALES[self.yscale]
        lo, hi = f(np.asarray(self.ylim, dtype=float))
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.y + self.h - (f(np.asarray(v, dtype=float)) - lo) / (hi - lo) * self.h


def log_ticks(lo: float, hi: float, zero: bool = False) -> list[float]:
    """Powers of ten inside [lo, hi] (with 2 and 5 times them where fewer than three powers fit); ``zero`` puts 0
    first (a log1p axis from step 0).

    >>> log_ticks(1, 5000), log_ticks(3, 40), log_ticks(0, 900, zero=True)
    ([1.0, 10.0, 100.0, 1000.0], [5.0, 10.0, 20.0], [0.0, 1.0, 10.0, 100.0])
    """
    lo_pos = max(lo, 1e-300) if not zero else max(lo, 1.0)
    k0, k1 = int(np.floor(np.log10(lo_pos))), int(np.ceil(np.log10(max(hi, lo_pos))))
    powers = [10.0 ** k for k in range(k0, k1 + 1) if lo_pos * (1 - 1e-9) <= 10.0 ** k <= hi * (1 + 1e-9)]
    if len(powers) < 3:
        powers = sorted(m * 10.0 ** k for k in range(k0, k1 + 1) for m in (1, 2, 5)
                        if lo_pos * (1 - 1e-9) <= m * 10.0 ** k <= hi * (1 + 1e-9))
    return ([0.0] if zero and lo <= 0 else []) + powers


def padded(lo: float, hi: float, frac: float = 0.06) -> tuple:
    """A range with a margin (a point range where lo = hi)."""
    if not np.isfinite(lo) or not np.isfinite(hi):
        return (0.0, 1.0)
    if hi <= lo:
        d = abs(lo) * 0.1 or 0.1
        return (lo - d, hi + d)
    d = (hi - lo) * frac
    return (lo - d, hi + d)


def value_range(*arrays, zero: bool = False) -> tuple:
    """The padded range of the finite values of ``arrays`` (with 0 inside it when ``zero``); (0, 1) when none is finite.

    >>> [round(v, 3) for v in value_range([0.2, 0.4], zero=True)]  # 0 to 0.4, padded by 6 % of 0.4 each side
    [-0.024, 0.424]
    """
    v = np.concatenate([np.asarray(a, dtype=float).ravel() for a in arrays] + ([np.zeros(1)] if zero else []))
    v = v[np.isfinite(v)]
    return padded(float(v.min()), float(v.max())) if len(v) else (0.0, 1.0)


def axes(p: Panel, style: Style, *, xticks=(), xlabels=None, yticks=(), ylabels=None, xlabel="", ylabel="",
         title="", grid: bool = True, zero: bool = False, group: str = "") -> None:
    """The panel's frame, grid at the ticks, tick labels, axis labels and title; ``zero`` a dashed line at y 0."""
    c = p.canvas
    xlabels = tick_labels(xticks) if xlabels is None else xlabels
    ylabels = tick_labels(yticks) if ylabels is None else ylabels
    for v in xticks:
        if grid:
            c.line(float(p.X(v)), p.y, float(p.X(v)), p.y + p.h, GRID, 0.8)
    for v in yticks:
        if grid:
            c.line(p.x, float(p.Y(v)), p.x + p.w, float(p.Y(v)), GRID, 0.8)
    if zero and p.ylim[0] < 0 < p.ylim[1]:
        c.line(p.x, float(p.Y(0)), p.x + p.w, float(p.Y(0)), "#4d4d4d", 0.9, dash=(4, 3))
    c.rect(p.x, p.y, p.w, p.h, stroke=GRID, width=1.0)
    for v, s in zip(xticks, xlabels):
        c.text(float(p.X(v)), p.y + p.h + 3, s, style.text, anchor="middle", valign="top", group=f"{group}x")
    for v, s in zip(yticks, ylabels):
        c.text(p.x - 4, float(p.Y(v)), s, style.text, anchor="end", group=f"{group}y")
    if xlabel:
        c.text(p.x + p.w / 2, p.y + p.h + 5 + style.text * 1.2, xlabel, style.label, anchor="middle", valign="top")
    if ylabel:
        widest = max((text_width(s, style.text) for s in ylabels), default=0.0)
        c.text(p.x - widest - 8, p.y + p.h / 2, ylabel, style.label, anchor="middle", valign="bottom", rotate=90)
    if title:
        c.text(p.x + p.w / 2, p.y - 5, title, style.title, anchor="middle", valign="bottom")


def errorbars(p: Panel, xs, est, low, high, color: str, style: Style, cap: float = 3.0) -> None:
    """Estimates as dots with their intervals as vertical lines (caps ``cap`` points wide; 0: none)."""
    xs, est, low, high = (np.asarray(v, dtype=float) for v in (xs, est, low, high))
    X, lo, hi = p.X(xs), p.Y(low), p.Y(high)
    segs = [(x, a, x, b) for x, a, b in zip(X, lo, hi) if np.isfinite(a) and np.isfinite(b)]
    if cap:
        segs += [(x - cap, y, x + cap, y) for x, a, b in zip(X, lo, hi) for y in (a, b) if np.isfinite(y)]
    if segs:
        p.canvas.segments(segs, color, style.line)
    p.canvas.dots(X, p.Y(est), style.dot * 1.2, color)


def heat(c: Canvas, x: float, y: float, cw: float, ch: float, data, *, vmin: float, vmax: float, cmap: str,
         annot: bool = False, fmt: str = "{:.2f}", size: float = 8.0, labels=None) -> None:
    """Cells of ``data`` (rows down, columns across) from (x, y), each ``cw`` x ``ch`` points, coloured on
    ``cmap`` over [vmin, vmax]; NaN cells hatched grey with a dash (not measured: never a colour that reads as a
    value); ``annot`` writes each value (or ``labels[i][j]``, another table's value) in black or white, whichever
    reads on its colour."""
    data = np.asarray(data, dtype=float)
    span = vmax - vmin if vmax > vmin else 1.0
    rgb = colormap(cmap, (np.nan_to_num(data, nan=vmin) - vmin) / span)
    if data.size:
        c.image(x, y, cw * data.shape[1], ch * data.shape[0], rgb)
    for i, j in zip(*np.nonzero(np.isnan(data))):
        c.rect(x + j * cw, y + i * ch, cw, ch, hatch=True)
    if annot:
        for (i, j), v in np.ndenumerate(data):
            r, g, b = rgb[i, j]
            ink = "#666666" if np.isnan(v) else ("black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white")
            said = labels[i][j] if labels is not None else "–" if np.isnan(v) else fmt.format(v).replace("-", "−")
            c.text(x + (j + 0.5) * cw, y + (i + 0.5) * ch, said, size, ink, anchor="middle")


def colorbar(c: Canvas, x: float, y: float, w: float, h: float, *, vmin: float, vmax: float, cmap: str,
             style: Style, label: str = "") -> None:
    """A vertical colour bar (``vmax`` on top) with ticks on its right and ``label`` beside them."""
    n = 64
    c.image(x, y, w, h, colormap(cmap, (np.arange(n)[::-1, None] + 0.5) / n))  # vmax at the top
    ticks = nice_ticks(vmin, vmax, 5)
    labels = tick_labels(ticks)
    for v, s in zip(ticks, labels):
        yy = y + h - (v - vmin) / (vmax - vmin) * h if vmax > vmin else y + h / 2
        c.line(x + w, yy, x + w + 3, yy, INK, 0.8)
        c.text(x + w + 5, yy, s, style.text, group="bar")
    if label:
        widest = max((text_width(s, style.text) for s in labels), default=0.0)
        c.text(x + w + 9 + widest, y + h / 2, label, style.text, anchor="middle", valign="top", rotate=90)


def legend(c: Canvas, x: float, y: float, entries, style: Style, columns: int = 1, anchor: str = "start") -> float:
    """Legend entries (label, colour, mark: ``line``, ``dash`` (a dashed line), ``dot``, ``bar`` (an interval) or
    ``bar_fill`` (a filled box)) in ``columns`` columns from (x, y)
    (``anchor`` middle: centred on x); returns its height."""
    size = style.text
    rows = -(-len(entries) // columns)
    col_w = [max(text_width(e[0], size) for e in entries[k::columns]) + 24 for k in range(min(columns, len(entries)))]
    left = x - sum(col_w) / 2 if anchor == "middle" else x
    for i, (label, color, mark) in enumerate(entries):
        r, k = divmod(i, columns)
        ex, ey = left + sum(col_w[:k]), y + (r + 0.5) * size * 1.5
        if mark == "line":
            c.line(ex, ey, ex + 14, ey, color, style.line * 1.3)
        elif mark == "dash":
            c.line(ex, ey, ex + 14, ey, color, style.line * 1.3, dash=(3, 2))
        elif mark == "bar_fill":
            c.rect(ex + 2, ey - size * 0.4, 10, size * 0.8, fill=color)
        elif mark == "bar":
            c.line(ex + 7, ey - size * 0.45, ex + 7, ey + size * 0.45, color, style.line)
            c.dots([ex + 7], [ey], style.dot * 1.2, color)
        else:
            c.dots([ex + 7], [ey], style.dot * 1.2, color)
        c.text(ex + 18, ey, label, size)
    return rows * size * 1.5


def layer_hex(n: int) -> list[str]:
    """The colours of ``n`` layers (:func:`reports.axes.layer_colors`) as ``#rrggbb``."""
    return hex_colors(layer_colors(n))


def layer_strip(c: Canvas, x: float, y: float, h: float, layers, colors, s: Style) -> None:
    """Beyond 8 layers: a strip of the layers' colours (first layer at the bottom), thinned labels beside it."""
    n = len(layers)
    ticks = set(labelled_layers(layers, 10))
    for k, (layer, col) in enumerate(zip(layers, colors)):
        yy = y + h - (k + 1) * h / n
        c.rect(x, yy, 9, h / n + 0.05, fill=col)
        if int(layer) in ticks:
            c.text(x + 13, yy + h / n / 2, str(layer), s.text, group="strip")
    c.text(x + 40, y + h / 2, "layer", s.text, anchor="middle", valign="top", rotate=90)


def step_range(steps) -> tuple:
    """(range, scale, ticks) of a training-step axis: log from the first step, or log of 1 + step from step 0
    (checkpoints crowd the start)."""
    lo, hi = float(np.min(steps)), float(np.max(steps))
    hi = max(hi, lo + 1)
    if lo >= 1:
        return (lo / 1.15, hi * 1.15), "log", log_ticks(lo, hi)
    return (0.0, hi * 1.15 + 0.15), "log1p", log_ticks(0.0, hi, zero=True)


def canvas_for(s: Style, width: float, height: float) -> Canvas:
    """The figure's canvas: its own ``width`` on the page (no wider than the page), exactly the width asked for a
    paper (``s.fill``)."""
    return Canvas(s.width if s.fill else min(width, s.width), height)


def one_panel(s, xlim, xscale, ylim, yticks, key_w: float, legend_room: float = 0.0, yscale: str = "linear"):
    """A canvas with one panel and ``key_w`` points for a key on its right."""
    left = ylabel_room(s, tick_labels(yticks))
    width = min(s.width, 640.0)
    ph = 190.0 if s.width > 400 else 120.0
    top = s.title * 1.4 + 8
    c = canvas_for(s, width, top + ph + 5 + 2 * s.text * 1.25 + 10 + legend_room)
    return c, Panel(c, left, top, c.width - left - key_w - 8, ph, xlim, ylim, xscale, yscale)
