"""What the matplotlib drawers share (Agg, seaborn's look: :mod:`reports.theme`): :func:`save` writes a figure's
PNG (+ vector copies) and returns the PNG bytes for embedding; :func:`plain` escapes user text. The drawers live in
``reports/regime.py`` and ``reports/plan.py`` (each registers into its own table with
:func:`reports.chart.registrar`); the pair, run, study and MoFA pages' figures are drawn without matplotlib
(:mod:`reports.pair_figures`).
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

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
