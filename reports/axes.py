"""Axes that read at any size: layer axes thinned to a nice step, a colour bar of layers instead of a
long legend, log step axes, integer count axes, the page width a figure is shown at, and the word map's panels
placed by arithmetic."""

from __future__ import annotations

import numpy as np

from reports.theme import palette

__all__ = ["DISPLAY_PX", "MAX_TICKS", "MAX_LEGEND_LAYERS", "layer_colors", "step_axis", "integer_ticks", "layer_step",
           "layer_ticks", "layer_key", "longest_label", "word_map_boxes", "WORD_MAP_INCHES"]


def layer_colors(n: int) -> list:
    """Colours of n layers: distinct colour-blind-safe hues up to 8 layers (viridis would give two
    near-identical greens at 4), a sequential map beyond."""
    if n > 8:
        return palette("viridis", n)
    cb = palette("colorblind", 10)
    return [cb[i] for i in (0, 1, 2, 4, 3, 8, 5, 9)[:n]]  # blue, orange, green, purple first: no two alike


def step_axis(ax, steps) -> None:
    """Training steps on a log axis (checkpoints crowd the start); symlog from 0 only when a step 0 is stored."""
    if len(steps) and float(np.min(steps)) >= 1:
        ax.set_xscale("log")
    else:
        ax.set_xscale("symlog")
        ax.set_xlim(left=0)  # steps are never negative


def integer_ticks(axis) -> None:
    """Count axes show whole numbers only."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


DISPLAY_PX = 1100  # the width a figure is shown at in the report page (main column less its padding)
MAX_TICKS = 15  # layer axes show at most this many labels
MAX_LEGEND_LAYERS = 8  # beyond it, layers get a colour bar instead of legend entries


def layer_step(n: int, most: int = MAX_TICKS) -> int:
    """The label step of a layer axis of ``n`` layers: 1, 2, 5, 10, 20, ... so that at most ``most`` show.

    >>> [layer_step(n) for n in (4, 15, 16, 30, 80, 200)]
    [1, 1, 2, 2, 10, 20]
    """
    for step in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000):
        if -(-n // step) <= most:
            return step
    return -(-n // most)


def layer_ticks(ax, layers, axis: str = "x", most: int = MAX_TICKS) -> None:
    """Layer ticks at every layer, thinned to multiples of :func:`layer_step` on long axes (labels never
    run together: "10111213" at 30 layers); grid lines stay on every labelled layer."""
    layers = sorted(int(x) for x in layers)
    step = layer_step(len(layers), most)
    ticks = [x for x in layers if x % step == 0] or layers[:1]
    (ax.set_xticks if axis == "x" else ax.set_yticks)(ticks)


def layer_key(ax, colors, layers, fontsize: int = 8) -> None:
    """How the layers' colours are read: a legend beside the axes up to :data:`MAX_LEGEND_LAYERS` layers,
    a colour bar of the layers beyond (a legend of 30 entries would run off the canvas)."""
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.cm import ScalarMappable

    layers = [int(x) for x in layers]
    if len(layers) <= MAX_LEGEND_LAYERS:
        ax.legend(fontsize=fontsize, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
        return
    sm = ScalarMappable(norm=BoundaryNorm(np.arange(len(layers) + 1) - 0.5, len(layers)), cmap=ListedColormap(colors))
    bar = ax.figure.colorbar(sm, ax=ax, fraction=0.05, pad=0.02)
    step = layer_step(len(layers), 10)
    idx = [i for i, x in enumerate(layers) if x % step == 0]
    bar.set_ticks(idx, labels=[str(layers[i]) for i in idx])
    bar.minorticks_off()
    bar.ax.tick_params(labelsize=fontsize)
    bar.set_label("layer", fontsize=fontsize + 1)


def longest_label(fig, labels, size: float) -> float:
    """The width in inches of the widest of ``labels`` at font ``size``, measured by the figure's renderer
    (one measure per distinct label: a layout engine asks every tick label of every panel, several times)."""
    from matplotlib.font_manager import FontProperties

    renderer, prop = fig.canvas.get_renderer(), FontProperties(size=size)
    widths = [renderer.get_text_width_height_descent(t, prop, ismath=False)[0] for t in set(labels)]
    return max(widths, default=0.0) / fig.dpi


# width: the figure's, as wide as the constrained layout's was (3.6 x 3 + 1 in): the page scales every figure to its
# width, and a wider one would print the words below 9 px (tests/test_figure_scale.py)
WORD_MAP_INCHES = dict(width=11.8, gap=0.12, title=0.34, label=0.3, pad=0.12, bar=0.15, bar_room=1.35, edge=0.1)


def word_map_boxes(fig, rows: int, label: float) -> dict:
    """Where the word map's panels and colour bars go, in figure fractions, and the figure's size set to fit.

    Laid out by arithmetic from the widest word (``label`` inches) rather than by a layout engine, which
    measured every tick label of every panel (word map of a 2 x 64 pair: 0.55 s of its 1.0 s CPU).
    Columns: baseline, variant, their colour bar, the difference, its colour bar; a row per layer.

    >>> import matplotlib.pyplot as plt
    >>> fig = plt.figure()
    >>> b = word_map_boxes(fig, rows=2, label=0.3)
    >>> len(b["panels"]), len(b["panels"][0]), len(b["bars"])
    (2, 3, 2)
    >>> round(b["panels"][0][1][0] - b["panels"][0][0][0] - b["panels"][0][0][2], 4) > 0  # columns do not overlap
    True
    >>> plt.close(fig)
    """
    d = WORD_MAP_INCHES
    left = bottom = d["edge"] + d["label"] + label + d["pad"]
    s = max(1.5, (d["width"] - left - d["gap"] - 2 * d["bar_room"]) / 3)  # each panel's side
    cols_x = [left, left + s + d["gap"], left + 2 * s + d["gap"] + d["bar_room"]]
    bars_x = [left + 2 * s + d["gap"] + d["pad"], cols_x[2] + s + d["pad"]]
    width = cols_x[2] + s + d["bar_room"]
    row_h = s + d["title"]
    height = bottom + rows * row_h + d["edge"]
    fig.set_size_inches(width, height)
    panels = [[(x / width, (bottom + (rows - 1 - i) * row_h) / height, s / width, s / height) for x in cols_x]
              for i in range(rows)]
    span = rows * row_h - d["title"]
    bar = (bottom + 0.1 * span, 0.8 * span)  # as tall as 80 % of the panels' span, centred
    bars = [(x / width, bar[0] / height, d["bar"] / width, bar[1] / height) for x in bars_x]
    return {"panels": panels, "bars": bars}
