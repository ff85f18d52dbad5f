"""What the matplotlib drawers share (Agg, seaborn's look: :mod:`reports.theme`): :func:`save` writes a figure's
PNG (+ vector copies) and returns the PNG bytes for embedding; :func:`heat` a labelled heat map; :func:`plain`
escapes user text. The drawers live in ``reports/mofa.py``,
``reports/regime.py`` and ``reports/plan.py`` (each registers into its own table with
:func:`reports.chart.registrar`); the pair, run and study pages' figures are drawn without matplotlib
(:mod:`reports.pair_figures`).
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from reports.chart import registrar  # noqa: E402,F401  (the drawer modules' F.registrar)
from reports.theme import RC  # noqa: E402

matplotlib.rcParams.update(RC)


def plain(text) -> str:
    """User text for matplotlib: '$' would start mathtext, so it is escaped."""
    return str(text).replace("$", r"\$")


def save(fig, folder: Path, name: str, vector: tuple = ()) -> bytes:
    """Write ``name.png`` and a copy per vector format (``pdf``, ``svg``) under ``folder`` (a report's
    temporary folder, renamed into place as a whole); return the PNG bytes."""
    from matplotlib.layout_engine import ConstrainedLayoutEngine, PlaceHolderLayoutEngine

    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        # laid out once, here: savefig would lay it out inside a draw of its own (rendering off) before drawing
        # it (word map, 2 x 64 pair: 2.8-3.2 -> 2.4-2.7 s CPU, three runs each)
        fig.get_layout_engine().execute(fig)
        fig.set_layout_engine("none")
    if isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
        # fig.tight_layout() leaves this placeholder behind, and savefig then draws the whole figure once
        # more (rendering off) before drawing it: a fifth of the figures' CPU, for the same pixels
        fig.set_layout_engine(None)
    buf = io.BytesIO()
    # layouts are set by tight_layout (no second "tight" draw); zlib level 2, not PIL's 6: the seven PNGs of a 2 x 64
    # pair page 0.85-1.04 -> 0.80 s CPU to save, 684 -> 746 kB
    fig.savefig(buf, format="png", dpi=130, pil_kwargs={"compress_level": 2})
    png = buf.getvalue()
    (folder / f"{name}.png").write_bytes(png)
    for fmt in vector:
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, **({"metadata": {"Date": None}} if fmt == "svg" else {}))
        (folder / f"{name}.{fmt}").write_bytes(buf.getvalue())
    plt.close(fig)
    return png


def heat(ax, m: pd.DataFrame, *, vmin, vmax, cmap, annot: bool = True, cbar: bool = False, fmt: str = "{:.2f}",
         ticklabels=None, labels=None, label_x: bool = True, label_y: bool = True):
    """A labelled heatmap with imshow (seaborn's heatmap redraws the whole figure per call).

    ``label_x`` / ``label_y`` False: that axis has no ticks at all (an inner panel of small multiples whose
    outer panels name the rows and columns). Its ticks are never made: every tick is two lines and a label,
    and making them to remove them cost the word map a third of its CPU."""
    data = np.asarray(m, dtype=float)
    im = ax.imshow(data, vmin=vmin, vmax=vmax, cmap=cmap, aspect="equal", interpolation="nearest")
    ax.grid(False)
    rows = [str(x) for x in m.index] if ticklabels is None else ticklabels
    cols = [str(x) for x in m.columns] if ticklabels is None else ticklabels
    if label_x:
        ax.set_xticks(range(data.shape[1]), cols, rotation=90 if ticklabels is not None else 0)
    else:
        ax.set_xticks([])
    if label_y:
        ax.set_yticks(range(data.shape[0]), rows)
    else:
        ax.set_yticks([])
    _hatch_missing(ax, data)  # not measured: hatched, never a colour that reads as a value
    if annot:
        cm = plt.get_cmap(cmap)
        for (i, j), v in np.ndenumerate(data):
            if np.isnan(v):
                ax.text(j, i, "–", ha="center", va="center", fontsize=9, color="0.4")
                continue
            r, g, b, _ = cm((v - vmin) / (vmax - vmin) if vmax > vmin else 0.5)
            ax.text(j, i, fmt.format(v) if labels is None else labels[i][j], ha="center", va="center", fontsize=9,
                    color="black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white")
    if cbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return im


def _hatch_missing(ax, data: np.ndarray) -> None:
    """Cells with no value (NaN: not measured, e.g. excluded trivial queries) hatched grey, never a colour."""
    for i, j in zip(*np.nonzero(np.isnan(data))):
        ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="0.93", hatch="///", edgecolor="0.6", lw=0))
