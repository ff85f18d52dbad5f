"""The word map's screen layout is arithmetic from its widest word (reports.figures.word_map_boxes), not a layout
engine: nothing it draws may leave the page or run into a neighbour, whatever the words and layers."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from reports.figures import word_map  # noqa: E402
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


@pytest.mark.parametrize("words, layers", [
    ([str(i) for i in range(40)], (2, 3)),  # short labels, 40 words (6 pt)
    (["[CLS]"] + ["supercalifragilisticexpialidocious" if i % 5 == 0 else f"wörd{i}" for i in range(1, 18)],
     range(6)),  # labels cut at 14 characters, six layers
    (["a", "b", "c"], (0,)),  # one layer, three words
])
def test_every_artist_of_the_word_map_lies_on_its_page_and_no_label_enters_a_panel(words, layers):
    fig = word_map(a_map(words, layers), {})
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    box = fig.get_tightbbox(r)
    w, h = fig.get_size_inches()
    assert box.x0 >= -0.01 and box.y0 >= -0.01 and box.x1 <= w + 0.01 and box.y1 <= h + 0.01, (box, w, h)
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>" and ax.images]
    assert len(panels) == 3 * len(tuple(layers))
    extents = [ax.get_window_extent(r) for ax in fig.axes]
    for ax in panels:  # the tick labels, titles and axis labels of each panel overlap no other axes' frame
        texts = [t for t in ax.get_xticklabels() + ax.get_yticklabels() + [ax.title, ax.xaxis.label, ax.yaxis.label]
                 if t.get_text()]
        for t in texts:
            tb = t.get_window_extent(r)
            for other, ob in zip(fig.axes, extents):
                if other is not ax:
                    assert not tb.overlaps(ob), (t.get_text(), ax.get_title(), other.get_label() or other.get_title())
