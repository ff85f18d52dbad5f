"""The word map's layout is arithmetic from its widest word (reports.heat_figures.word_map): nothing it draws may leave
the page, no two words of one axis may run together, and no word is written below the page's smallest text, whatever
the words and layers. Checked as matplotlib draws the same marks (its own font metrics, not the layout's estimate)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from reports.chart import PAGE, paper  # noqa: E402
from reports.heat_figures import DRAWERS  # noqa: E402
from routestats.studies.word_map import WordMap  # noqa: E402


def a_map(words, layers) -> WordMap:
    rng = np.random.default_rng(0)
    n = len(words)
    mats = {}
    for layer in layers:
        a, b = rng.dirichlet(np.ones(n), size=n), rng.dirichlet(np.ones(n), size=n)
        mats.update({("baseline", layer): a, ("variant", layer): b, ("difference", layer): b - a})
    fields = ["unnamed"] + ["title"] * (n // 2) + ["body"] * (n - 1 - n // 2)
    return WordMap(0, list(words), fields, tuple(layers), mats)


@pytest.mark.parametrize("style", [PAGE, paper(7.0)], ids=["page", "paper"])
@pytest.mark.parametrize("words, layers", [
    ([str(i) for i in range(40)], (2, 3)),  # short labels, 40 words
    ([f"w{i}" for i in range(120)], (0,)),  # 120 words: cells smaller than any readable text (every k-th word)
    (["[CLS]"] + ["supercalifragilisticexpialidocious" if i % 5 == 0 else f"wörd{i}" for i in range(1, 18)],
     range(6)),  # labels cut at 14 characters, six layers
    (["a", "b", "c"], (0,)),  # one layer, three words
])
def test_every_word_lies_on_the_page_readable_and_apart(words, layers, style):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    c = DRAWERS["word_map"]({"word_map": a_map(words, layers)}, {"style": style})
    fig = c.figure()
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    w, h = fig.get_size_inches() * fig.dpi
    boxes = {}
    for t, (*_, size, text, group) in zip(fig.texts, c.texts):
        bb = t.get_window_extent(r)
        assert bb.x0 >= -1 and bb.y0 >= -1 and bb.x1 <= w + 1 and bb.y1 <= h + 1, text
        assert size >= style.least  # 6.75 pt = 9 CSS px on the page; 8 pt in a paper
        if group:
            boxes.setdefault(group, []).append(bb)
    assert len(boxes) == len(tuple(layers)) + 3 + 1  # query words per row of panels, key words per column, the bars
    for group, bbs in boxes.items():
        for a, b in itertools.combinations(bbs, 2):
            assert not (a.overlaps(b) and a.intersection(a, b).width > 1 and a.intersection(a, b).height > 1), group
    shown = sum(len(v) for k, v in boxes.items() if k.startswith("x"))
    assert shown >= 3 * min(len(words), 6)  # at least 6 key words a panel (a paper column of long words), or all
