"""The look of every figure: seaborn's ``whitegrid`` style in its ``notebook`` context, as matplotlib
settings, and the few seaborn palettes the drawers use -- without importing seaborn (which imports
scipy.stats: about 1.5 s CPU per report for a style sheet).

:data:`RC` is what ``seaborn.set_theme(style="whitegrid", context="notebook")`` (seaborn 0.13)
sets; ``tests/test_figures_theme.py`` checks it and :func:`palette` against seaborn itself.

>>> palette("colorblind", 2)
[(0.00392156862745098, 0.45098039215686275, 0.6980392156862745), (0.8705882352941177, 0.5607843137254902, 0.0196078431372549)]
"""

from __future__ import annotations

import numpy as np
from cycler import cycler
from matplotlib import colormaps
from matplotlib.colors import to_rgb

from reports.canvas import PALETTES

_HEX = PALETTES

RC = {
    "axes.axisbelow": True,
    "axes.edgecolor": ".8",
    "axes.grid": True,
    "axes.labelcolor": ".15",
    "axes.labelsize": 12.0,
    "axes.linewidth": 1.25,
    "axes.prop_cycle": cycler("color", [to_rgb(c) for c in _HEX["deep"]]),
    "axes.titlesize": 12.0,
    # where the automatic placement would put it (no figure draws ticks above an axes), without asking every
    # sibling axes for its tick labels' extents on each draw: the word map's titles cost 0.4 s CPU that way
    "axes.titley": 1.0,
    "font.sans-serif": ["Arial", "DejaVu Sans", "Liberation Sans", "Bitstream Vera Sans", "sans-serif"],
    "font.size": 12.0,
    "grid.color": ".8",
    "grid.linewidth": 1.0,
    "legend.fontsize": 11.0,
    "legend.title_fontsize": 12.0,
    "lines.solid_capstyle": "round",
    "patch.edgecolor": "w",
    "patch.force_edgecolor": True,
    "text.color": ".15",
    "xtick.bottom": False,
    "xtick.color": ".15",
    "xtick.labelsize": 11.0,
    "xtick.major.size": 6.0,
    "xtick.major.width": 1.25,
    "xtick.minor.size": 4.0,
    "xtick.minor.width": 1.0,
    "ytick.color": ".15",
    "ytick.labelsize": 11.0,
    "ytick.left": False,
    "ytick.major.size": 6.0,
    "ytick.major.width": 1.25,
    "ytick.minor.size": 4.0,
    "ytick.minor.width": 1.0,
}
# seaborn also makes its own "rocket" map the default; every drawer here names its colormap


def palette(name: str, n: int) -> list[tuple[float, float, float]]:
    """``n`` colours of a named palette, as ``seaborn.color_palette(name, n)`` gives them: the
    qualitative ``deep``, ``colorblind`` and ``tab10`` cycle; a matplotlib colormap (``viridis``) is
    sampled at n evenly spaced inner points (its two ends left out)."""
    if name in _HEX or name == "tab10":
        base = [to_rgb(c) for c in _HEX[name]] if name in _HEX else [tuple(c) for c in colormaps["tab10"].colors]
        return [tuple(float(x) for x in base[i % len(base)]) for i in range(n)]
    rgba = colormaps[name](np.linspace(0, 1, int(n) + 2)[1:-1])
    return [tuple(float(x) for x in c[:3]) for c in rgba]
