"""One figure of a report, drawn for a paper: a column (3.3 in) or a two-column (7 in) width, 8–9 pt text,
vector PDF (or SVG, PNG) -- ``routestats figure NAME RUN -o fig.pdf``.

A page figure (the pair, run, study and MoFA reports') is laid out afresh by its own drawer at the paper's width with the
paper's text sizes (:func:`paper_canvas`). Any other figure is drawn by its own drawer (:data:`reports.drawing.REGISTRY`,
the same as the report's) inside seaborn's ``paper`` context (imported here, lazily: the report itself keeps the copied
theme of :mod:`reports.theme`, which spares every report seaborn's import), then set to the page width and every text
to 8 pt (ticks, legends, annotations) or 9 pt (axis labels, titles), so it is read at the size printed.

>>> names(_demo())
['answer', 'profile']
"""

from __future__ import annotations

import dataclasses

import io
from pathlib import Path

from routestats.errors import RoutestatsError
from routestats.rundir.atomic import usual_mode

__all__ = ["COLUMN_IN", "WIDE_IN", "names", "find", "panels", "paper_figure", "paper_canvas", "fit_page",
           "write_figure"]

COLUMN_IN = 3.3  # one column of a two-column paper (ACL, NeurIPS, ICML: 3.25-3.33 in)
WIDE_IN = 7.0  # both columns
TEXT_PT, LABEL_PT = 8, 9
FORMATS = ("pdf", "svg", "png")


def names(report) -> list[str]:
    """The figures a report can draw: ``answer`` (its first screen's) when it has one, then every section's, of
    the report and its parts, in order (a part's figure is ``PART:NAME`` when names repeat)."""
    from reports.render import answer_figure

    out = []
    for rep in report.all_reports():
        prefix = f"{rep.title}:" if rep is not report else ""
        if answer_figure(rep) is not None:
            out.append(prefix + "answer")
        out += [prefix + f.name for s in rep.sections for f in s.figures if f.kind != "attention_explorer"]
    return out


def find(report, name: str):
    """The :class:`routestats.report.Figure` called ``name`` (see :func:`names`); a clear error otherwise."""
    import difflib

    from reports.render import answer_figure

    for rep in report.all_reports():
        prefix = f"{rep.title}:" if rep is not report else ""
        if name in ("answer", prefix + "answer") and answer_figure(rep) is not None:
            return answer_figure(rep)
        for s in rep.sections:
            for f in s.figures:
                if name in (f.name, prefix + f.name) and f.kind != "attention_explorer":
                    return f
    have = names(report)
    close = difflib.get_close_matches(name, have, n=1)
    raise RoutestatsError(f"no figure {name!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                          + f" (this report draws: {', '.join(have) or 'none'})")


def panels(fig) -> int:
    """The figure's panels (axes that are not colour bars)."""
    return sum(1 for ax in fig.axes if ax.get_label() != "<colorbar>")


def paper_figure(figure, width: float | None = None, height: float | None = None):
    """Draw ``figure`` at ``width`` inches (default: a column for a one-panel figure, both columns for several;
    height: its own aspect within 0.62–1.2 x the width) with 8–9 pt text, markers and lines scaled with it."""
    from reports.drawing import CANVAS_KINDS, draw

    if figure.kind in CANVAS_KINDS:
        return paper_canvas(figure, width, height)
    import matplotlib.pyplot as plt
    import seaborn as sns
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    with sns.plotting_context("paper"), sns.axes_style("ticks"):
        fig = draw(figure)
    w, h = fig.get_size_inches()
    width = width or (COLUMN_IN if panels(fig) == 1 else WIDE_IN)
    fig.set_size_inches(width, height or min(max(width * h / w, 0.62 * width), 1.2 * width))
    shrink = min(1.0, max(0.5, width / w))  # marks drawn for the screen's width, drawn smaller with the page
    from matplotlib.collections import Collection
    from matplotlib.lines import Line2D

    for line in fig.findobj(Line2D):
        line.set_markersize(line.get_markersize() * shrink)
        line.set_linewidth(line.get_linewidth() * shrink)
        line.set_markeredgewidth(line.get_markeredgewidth() * shrink)
    for coll in fig.findobj(Collection):
        sizes = coll.get_sizes() if hasattr(coll, "get_sizes") else ()  # markers of a scatter; not a line's
        if len(sizes):
            coll.set_sizes(sizes * shrink ** 2)
    labels = set()
    for ax in fig.axes:
        labels |= {ax.title, ax.xaxis.label, ax.yaxis.label}
    for t in fig.findobj(Text):
        if t.get_text():
            t.set_fontsize(LABEL_PT if t in labels or t in fig.texts else TEXT_PT)
    for ax in fig.axes:
        ax.tick_params(length=2.5, width=0.6, pad=2)
        for spine in ax.spines.values():
            spine.set_linewidth(0.6)
    plt.close(fig)  # out of pyplot's registry, onto a canvas of its own: the object still draws and saves
    FigureCanvasAgg(fig)
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    if isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):  # lays out every artist on the page itself
        fig.get_layout_engine().set(w_pad=0.02, h_pad=0.02)
        return fig
    fig.tight_layout(pad=0.3)
    fit_page(fig)
    return fig


# drawn a column wide by default; the others both columns
ONE_PANEL = frozenset({"answer_layers", "flow_measures", "trajectories", "gradient_ratios", "training_curves"})


def paper_canvas(figure, width: float | None = None, height: float | None = None):
    """A page figure (:data:`reports.drawing.CANVAS_KINDS`) laid out afresh at ``width`` inches with 8-9 pt text
    (:func:`reports.chart.paper`); its height follows from its width. A taller ``height`` leaves room below it; a
    shorter one is refused in one line, with the height it needs."""
    from reports.chart import paper
    from reports.drawing import draw

    width = width or (COLUMN_IN if figure.kind in ONE_PANEL else WIDE_IN)
    c = draw(dataclasses.replace(figure, params={**figure.params, "style": paper(width)}))
    if c.problems():
        raise RoutestatsError(f"the figure does not fit {width:g} in with 8-9 pt text ({c.problems()[0]}); give it "
                              f"more room (--width {WIDE_IN:g} for both columns)")
    if height is not None:
        if height * 72 < c.height - 0.01:
            raise RoutestatsError(f"the figure needs {c.height / 72:.2f} in at {width:g} in wide with 8-9 pt text; "
                                  f"give it that --height or more (or leave --height out)")
        c.height = height * 72
    return c


def fit_page(fig, pad: float = 0.03) -> None:
    """Move the axes in until every artist (a legend or colour bar outside the axes too, which tight_layout
    leaves out) lies on the page: the page stays the width asked for."""
    w, h = fig.get_size_inches()
    for _ in range(4):
        fig.canvas.draw()
        box = fig.get_tightbbox(fig.canvas.get_renderer())
        over = (max(0.0, pad - box.x0), max(0.0, pad - box.y0), max(0.0, box.x1 - w + pad), max(0.0, box.y1 - h + pad))
        if not any(over):
            return
        sp = fig.subplotpars
        left, bottom, right, top = (sp.left + over[0] / w, sp.bottom + over[1] / h, sp.right - over[2] / w,
                                    sp.top - over[3] / h)
        if right - left < 0.2 or top - bottom < 0.2:
            raise RoutestatsError(f"the figure does not fit {w:g} x {h:g} in with 8-9 pt text; give it more room "
                                  f"(--width {WIDE_IN:g} for both columns, or --height)")
        fig.set_layout_engine(None)
        fig.subplots_adjust(left=left, bottom=bottom, right=right, top=top)


def checked_output(out: Path, width: str | None, height: float | None, force: bool = False) -> float | None:
    """The width in inches that ``--width`` names (column, wide or a number; None: the figure's own), once ``out``,
    ``width`` and ``height`` are known good: a figure format, an existing folder, no file replaced without
    ``force``; otherwise refused in one line.

    >>> checked_output(Path("f.pdf"), "wide", None), checked_output(Path("f.pdf"), "2.5", 2.0)
    (7.0, 2.5)
    >>> checked_output(Path("f.jpg"), None, None)
    Traceback (most recent call last):
    ...
    routestats.errors.RoutestatsError: f.jpg: a figure is written as .pdf, .svg, .png
    """
    try:
        inches = {None: None, "column": COLUMN_IN, "wide": WIDE_IN}[width] if width in (None, "column", "wide") \
            else float(width)
    except ValueError:
        raise RoutestatsError(f"--width must be column, wide or a number of inches, got {width!r}") from None
    if (inches is not None and not 1 <= inches <= 20) or (height is not None and not 0.5 <= height <= 20):
        raise RoutestatsError("--width and --height are inches: 1-20 and 0.5-20")
    out = Path(out)
    if out.suffix.lower().lstrip(".") not in FORMATS:
        raise RoutestatsError(f"{out}: a figure is written as {', '.join('.' + f for f in FORMATS)}")
    if not out.parent.is_dir():
        raise RoutestatsError(f"{out.parent}: no such folder")
    if out.is_dir():  # a rename onto a folder fails after the drawing, leaving the temporary file beside it
        raise RoutestatsError(f"{out}: is a folder; -o names the figure's file (e.g. {out / ('figure' + out.suffix)})")
    if out.exists() and not force:
        raise RoutestatsError(f"{out} exists; --force replaces it")
    return inches


def write_figure(figure, out: str | Path, width: float | None = None, height: float | None = None) -> Path:
    """Write ``figure`` for a paper to ``out`` (format from its suffix: pdf, svg, png at 300 dpi), atomically."""
    import os
    import tempfile

    out = Path(out)
    fmt = out.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise RoutestatsError(f"{out}: a figure is written as {', '.join('.' + f for f in FORMATS)}")
    if not out.parent.is_dir():
        raise RoutestatsError(f"{out.parent}: no such folder")
    fig = paper_figure(figure, width, height)
    buf = io.BytesIO()
    if hasattr(fig, "marks") and fmt == "svg":  # a canvas: its own SVG
        buf.write(fig.svg(points=True).encode())
    else:  # matplotlib's PDF or PNG (of a canvas's marks), or a matplotlib figure in any format
        fig = fig.figure() if hasattr(fig, "marks") else fig
        fig.savefig(buf, format=fmt, dpi=300, **({"metadata": {"Date": None}} if fmt == "svg" else {}))
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    with os.fdopen(fd, "wb") as fh:
        fh.write(buf.getvalue())
    os.chmod(tmp, usual_mode())  # mkstemp's 0600: the figure gets the user's umask, as any file they write
    os.replace(tmp, out)
    return out


def _demo():
    """A report with an answer figure and one section figure (doctests)."""
    import pandas as pd

    from routestats.claim import Claim
    from routestats.report import Figure, Report, Section

    est = pd.DataFrame({"layer": [0, 1], "estimate": [0.1, 0.05], "low": [0.05, 0.0], "high": [0.15, 0.1],
                        "asserted": ["rose", "includes"]})
    answer = Claim("rose", "…", "headline", short="SFM rose in layer 0 of 2.",
                   figure=Figure("answer", "answer_layers", {"estimates": est}))
    return Report("t", "s", (Section("effects", "E", figures=(Figure("profile", "profile", {}),), claims=(answer,)),))
