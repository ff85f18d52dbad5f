"""Figures that read at 4, 12, 18 and 30 layers, with 2 and 3 fields and 4-12 heads (issue 32).

Every figure of a pair report is drawn from synthetic pairs of those shapes, and every figure of a
study (3 seeds at 4 and 30 layers; a tree with sweep and shuffled conditions) and of a MoFA tree (2 and
30 layers), and checked at the pixel level, as the page shows it (``reports.axes.DISPLAY_PX`` wide at most: a PNG at
130 dpi, or a page figure's SVG at 4/3 px a point). A page figure (a :class:`reports.canvas.Canvas`) is checked as
matplotlib draws the same marks, with matplotlib's own font metrics, not the layout's estimate of them:

* no text smaller than 9 px on the page;
* every text (titles, tick labels, legend entries, colour-bar labels) inside the canvas;
* the tick labels of one axis never overlap (the "10111213..." of 30 layers);
* cells that were not measured (NaN) are hatched, not drawn in a colour that reads as a value.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pandas as pd
import pytest

import routestats as rs
from reports.drawing import draw
from reports.axes import DISPLAY_PX, layer_step
from routestats.rundir.synthetic import synthetic_pair

DPI = 130  # reports.figures.save
MIN_PX = 9.0
SHAPES = [("pair", 4, 4, 2), ("pair", 12, 12, 3), ("pair", 18, 6, 3), ("pair", 30, 9, 2),  # layers, heads, fields
          ("study", 4, 4, 2), ("study", 30, 4, 2), ("study-conditions", 3, 2, 2), ("mofa", 2, 2, 1),
          ("mofa", 30, 4, 1)]
FIGURES_AT_LEAST = {"pair": 6, "study": 3, "study-conditions": 4, "mofa": 3}


def _tree(kind: str, d, layers: int, heads: int, fields: int):
    """A synthetic pair, study (3 seeds of pairs), study with conditions, or MoFA tree of this shape."""
    from tests.conftest import synthetic_mofa_tree, synthetic_study_tree

    def pair(out, seed):
        synthetic_pair(out, seed=seed, n_examples=8, n_layers=layers, n_heads=heads, length_range=(10, 16),
                       same_field_bias=[0.5] * layers, effect=list(np.linspace(-0.3, 0.6, layers)), n_fields=fields,
                       forms=("matrices", "reductions") if kind == "pair" else ("reductions",), steps=(1, 10))

    if kind == "pair":
        pair(d, 7)
    elif kind == "study":
        for seed in (1, 2, 3):
            pair(d / f"seed{seed}", seed)
    elif kind == "study-conditions":
        synthetic_study_tree(d)
    else:
        synthetic_mofa_tree(d, n_layers=layers, n_heads=heads)


@pytest.fixture(scope="module", params=SHAPES, ids=lambda s: f"{s[0]}-L{s[1]}-H{s[2]}-F{s[3]}")
def figures(request, tmp_path_factory):
    kind, layers, heads, fields = request.param
    d = tmp_path_factory.mktemp("scale") / kind
    _tree(kind, d, layers, heads, fields)
    rep = rs.analyse(d, resamples=100, permutations=100)
    figs = [f for s in rep.sections for f in s.figures if f.kind != "attention_explorer"]
    assert len(figs) >= FIGURES_AT_LEAST[kind]
    drawn = [(f.name, _as_figure(draw(f))) for f in figs]
    yield request.param, drawn
    import matplotlib.pyplot as plt

    for _, fig in drawn:
        plt.close(fig)


def _as_figure(drawing):
    """A matplotlib figure to measure: the drawing itself, or a canvas's marks replayed (remembering the canvas)."""
    if not hasattr(drawing, "marks"):
        return drawing
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = drawing.figure()
    FigureCanvasAgg(fig)
    fig.drawn_from = drawing
    return fig


def _texts(fig):
    """(text, window extent) of every text the figure draws: visible, not empty, on a shown axes."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    undrawn = set()  # tick labels of ticks outside the view (matplotlib keeps but never draws them)
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not lo - 1e-9 <= tick.get_loc() <= hi + 1e-9:
                    undrawn |= {id(tick.label1), id(tick.label2)}
    for t in fig.findobj(lambda a: hasattr(a, "get_text") and hasattr(a, "get_fontsize")):
        shown_axes = t.axes is None or (t.axes.get_visible() and t.axes.axison)
        if t.get_visible() and t.get_text().strip() and shown_axes and id(t) not in undrawn:
            yield t, t.get_window_extent(renderer)


def _px_per_pt(fig) -> float:
    """CSS pixels a point of the figure is on the page: a PNG at DPI, a canvas's SVG at 4/3, both scaled down to the
    page's width."""
    per_pt = 4 / 3 if hasattr(fig, "drawn_from") else DPI / 72
    return per_pt * min(1.0, DISPLAY_PX / (fig.get_figwidth() * 72 * per_pt))


def test_no_text_below_9_px_on_the_page(figures):
    shape, figs = figures
    small = [(name, t.get_text()[:20], round(t.get_fontsize() * _px_per_pt(fig), 1))
             for name, fig in figs for t, _ in _texts(fig) if t.get_fontsize() * _px_per_pt(fig) < MIN_PX]
    assert not small, f"{shape}: text under {MIN_PX} px on the page: {small[:8]}"


def test_every_text_lies_inside_the_canvas(figures):
    shape, figs = figures
    out = []
    for name, fig in figs:
        w, h = fig.get_figwidth() * fig.dpi, fig.get_figheight() * fig.dpi
        for t, bb in _texts(fig):
            if bb.x0 < -1 or bb.y0 < -1 or bb.x1 > w + 1 or bb.y1 > h + 1:
                out.append((name, t.get_text()[:20]))
    assert not out, f"{shape}: clipped text (legend entries, labels): {out[:8]}"


def test_tick_labels_never_run_together(figures):
    shape, figs = figures
    clashes = []
    for name, fig in figs:
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        drawn = {id(t) for t, _ in _texts(fig)}
        groups = [ax.get_xticklabels() for ax in fig.axes] + [ax.get_yticklabels() for ax in fig.axes]
        if hasattr(fig, "drawn_from"):  # a canvas's axes: the texts it drew under one group name (in drawing order)
            named = {}
            for t, (*_, group) in zip(fig.texts, fig.drawn_from.texts):
                if group:
                    named.setdefault(group, []).append(t)
            groups = list(named.values())
            assert groups, name
        for labels in groups:
            boxes = [lab.get_window_extent(r) for lab in labels if id(lab) in drawn]
            for a, b in itertools.combinations(boxes, 2):
                if a.overlaps(b) and a.intersection(a, b).width > 1 and a.intersection(a, b).height > 1:
                    clashes.append(name)
                    break
    assert not clashes, f"{shape}: overlapping tick labels in {sorted(set(clashes))}"


def test_layer_axes_are_thinned_but_start_at_the_first_layer():
    # layer_step keeps at most 15 labels: 30 layers -> every 2nd, 80 -> every 10th (a nice step, from layer 0)
    assert [layer_step(n) for n in (4, 12, 18, 30, 80)] == [1, 1, 2, 2, 10]


def test_unmeasured_cells_are_hatched_not_coloured(tmp_path):
    # a causal pair: every title query is trivial (excluded), so the title rows of field-to-field are NaN
    from matplotlib.patches import Rectangle

    d = tmp_path / "pair"
    synthetic_pair(d, seed=3, n_examples=8, n_layers=12, n_heads=4, length_range=(10, 16), same_field_bias=[0.5] * 12,
                   effect=[0.3] * 12, causal=True, forms=("reductions",))
    rep = rs.analyse(d, resamples=100, permutations=100)
    (f2f,) = [f for s in rep.sections for f in s.figures if f.kind == "field_heatmaps"]
    nan_cells = int(f2f.frames["field_to_field"]["mass"].isna().sum())
    assert nan_cells > 0
    fig = _as_figure(draw(f2f))
    hatched = [p for p in fig.findobj(Rectangle) if p.get_hatch() == "///"]
    assert len(hatched) == nan_cells  # one hatched patch per cell that was not measured
    svg = draw(f2f).svg()
    assert svg.count('fill="url(#rs-hatch)"') == nan_cells  # and so on the page
    # a cell is one number: a frame with one row twice is refused, not drawn with whichever came last
    for frame in (f2f.frames["field_to_field"], f2f.frames["field_to_field"].query("layer < 4")):  # compact, panels
        draw(dataclasses.replace(f2f, frames={**f2f.frames, "field_to_field": frame}))  # drawn once a row
        twice = pd.concat([frame, frame.iloc[[5]].assign(mass=0.99)], ignore_index=True)
        with pytest.raises(ValueError, match="two rows for"):
            draw(dataclasses.replace(f2f, frames={**f2f.frames, "field_to_field": twice}))
