"""A report and a table in a notebook: ``_repr_html_`` shows the first screen (answer, its figure), findings and
the tables; without the renderer, the same words without figures."""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET

import routestats as rs
from routestats.report import NOTEBOOK_VIEWS, plain_html
from routestats.rundir.synthetic import demo_run_dir


def test_a_report_renders_in_a_notebook_with_its_answer_figure_and_tables():
    import reports  # noqa: F401  (enters the views)
    from PIL import Image

    rep = rs.analyse(demo_run_dir(), resamples=199, permutations=4999, flow="off")
    html = rep._repr_html_()
    assert f"font-weight:700'>{rep.answer}</p>" in html  # the brief answer, bold, first
    # the answer figure inline, as the page draws it: an SVG 330 pt wide, floated beside the words, well-formed
    svg = re.search(r"<svg viewBox=.*?</svg>", html, re.S).group(0)
    root = ET.fromstring(svg)
    assert root.get("viewBox").startswith("0 0 330 ") and "float:right" in root.get("style")
    # and as a PNG for whoever wants one: matplotlib draws the same marks, 330 pt = 4.58 in at 110 dpi
    from reports.notebook import figure_png

    assert Image.open(io.BytesIO(figure_png(rep.answer_claim.figure))).size[0] == round(330 / 72 * 110)
    for name in rep.tables():
        assert f"<code>{name}</code>" in html
    assert len(re.findall("<li>", html)) >= len(rep.findings) + len(rep.tables())
    # a table as the report shows it: its formatted cells (the HTML page's), not the raw frame
    t = rep.table("effects")._repr_html_()
    # (p_Holm here is 4 x 1/5000 = 0.0008, which the report prints as "< 0.001")
    assert "<th>p (Holm)</th>" in t and "<td>&lt; 0.001</td>" in t and "0.0008" not in t
    # a terminal's repr is one short line with the answer, not every frame (it was 30,381 characters)
    assert repr(rep).startswith("<Report 'demo-docstrings-dbpedia-saab-seed1001 vs") and len(repr(rep)) < 300


def test_without_the_renderer_the_words_still_show(monkeypatch):
    monkeypatch.setattr("routestats.report.NOTEBOOK_VIEWS", {})
    rep = rs.analyse(demo_run_dir(), resamples=199, permutations=4999, flow="off")
    html = rep._repr_html_()
    assert html == plain_html(rep) and "<img" not in html and "<svg" not in html and rep.answer in html
    assert "import reports</code> shows the figures" in html
    assert NOTEBOOK_VIEWS  # the real registry was left as it was
