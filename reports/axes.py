"""Axes that read at any size: layer axes thinned to a nice step, the layers' colours, and the page width a figure
is shown at."""

from __future__ import annotations

import numpy as np

from reports.canvas import PALETTES, colormap, hex_rgb

__all__ = ["DISPLAY_PX", "MAX_TICKS", "MAX_LEGEND_LAYERS", "layer_colors", "layer_step", "labelled_layers",
           "layer_ticks"]


def layer_colors(n: int) -> list:
    """Colours of n layers: distinct colour-blind-safe hues up to 8 layers (viridis would give two
    near-identical greens at 4), a sequential map beyond."""
    if n > 8:  # viridis at n evenly spaced inner points, as seaborn's palette("viridis", n) samples it
        return [tuple(float(v) for v in c) for c in colormap("viridis", np.linspace(0, 1, n + 2)[1:-1])]
    cb = PALETTES["colorblind"]
    return [hex_rgb(cb[i]) for i in (0, 1, 2, 4, 3, 8, 5, 9)[:n]]  # blue, orange, green, purple first: no two alike


DISPLAY_PX = 1100  # the width a figure is shown at in the report page (main column less its padding)
MAX_TICKS = 15  # layer axes show at most this many labels
MAX_LEGEND_LAYERS = 8  # beyond it, layers get a strip of their colours instead of legend entries


def layer_step(n: int, most: int = MAX_TICKS) -> int:
    """The label step of a layer axis of ``n`` layers: 1, 2, 5, 10, 20, ... so that at most ``most`` show.

    >>> [layer_step(n) for n in (4, 15, 16, 30, 80, 200)]
    [1, 1, 2, 2, 10, 20]
    """
    for step in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000):
        if -(-n // step) <= most:
            return step
    return -(-n // most)


def labelled_layers(layers, most: int = MAX_TICKS) -> list[int]:
    """The labelled layers: every layer, thinned to multiples of :func:`layer_step` on long axes (labels never run
    together: "10111213" at 30 layers), from the first.

    >>> labelled_layers(range(30))[:4]
    [0, 2, 4, 6]
    """
    layers = sorted(int(x) for x in layers)
    step = layer_step(len(layers), most)
    return [x for x in layers if x % step == 0] or layers[:1]


def layer_ticks(ax, layers, axis: str = "x", most: int = MAX_TICKS) -> None:
    """A matplotlib axis's ticks at :func:`labelled_layers`; grid lines stay on every labelled layer."""
    (ax.set_xticks if axis == "x" else ax.set_yticks)(labelled_layers(layers, most))


