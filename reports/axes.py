"""Axes that read at any size: layer axes thinned to a nice step, a colour bar of layers instead of a
long legend, log step axes, and the page width a figure is shown at."""

from __future__ import annotations

import numpy as np

from reports.canvas import PALETTES, colormap, hex_rgb

__all__ = ["DISPLAY_PX", "MAX_TICKS", "MAX_LEGEND_LAYERS", "layer_colors", "step_axis", "layer_step",
           "layer_ticks", "layer_key"]


def layer_colors(n: int) -> list:
    """Colours of n layers: distinct colour-blind-safe hues up to 8 layers (viridis would give two
    near-identical greens at 4), a sequential map beyond."""
    if n > 8:  # viridis at n evenly spaced inner points, as seaborn's palette("viridis", n) samples it
        return [tuple(float(v) for v in c) for c in colormap("viridis", np.linspace(0, 1, n + 2)[1:-1])]
    cb = PALETTES["colorblind"]
    return [hex_rgb(cb[i]) for i in (0, 1, 2, 4, 3, 8, 5, 9)[:n]]  # blue, orange, green, purple first: no two alike


def step_axis(ax, steps) -> None:
    """Training steps on a log axis (checkpoints crowd the start); symlog from 0 only when a step 0 is stored."""
    if len(steps) and float(np.min(steps)) >= 1:
        ax.set_xscale("log")
    else:
        ax.set_xscale("symlog")
        ax.set_xlim(left=0)  # steps are never negative


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
