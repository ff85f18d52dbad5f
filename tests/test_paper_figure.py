"""``routestats figure``: one figure of a report for a paper, at a column's width with 8–9 pt text."""

from __future__ import annotations

import re

import pytest

import routestats as rs
from reports.paper import COLUMN_IN, WIDE_IN, find, paper_figure, write_figure
from routestats.errors import RoutestatsError
from routestats.rundir.synthetic import demo_run_dir


@pytest.fixture(scope="module")
def rep():
    return rs.analyse(demo_run_dir(), resamples=199, permutations=999, flow="off")


@pytest.mark.parametrize("name, width", [("answer", COLUMN_IN), ("profile", WIDE_IN), ("head_sfm", WIDE_IN),
                                         ("profile", COLUMN_IN), ("word_map", WIDE_IN), ("lengths", COLUMN_IN),
                                         ("training", COLUMN_IN)])
def test_a_figure_fits_its_width_with_eight_to_nine_point_text(rep, name, width, tmp_path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    # one panel: a column by default; several: both columns by default, a column when asked (profile and lengths then
    # stack their two panels). The page's figures are laid out afresh at the width (a Canvas); the training figure is
    # matplotlib's, resized. Either is checked as matplotlib draws it: its own font metrics, not the layout's estimate
    fig = paper_figure(find(rep, name), width=None if name not in ("profile", "lengths") or width == WIDE_IN
                       else width)
    if hasattr(fig, "marks"):
        fig = fig.figure()
        FigureCanvasAgg(fig)
    assert tuple(fig.get_size_inches())[0] == pytest.approx(width)
    sizes = {t.get_fontsize() for t in fig.findobj(Text) if t.get_text()}
    assert sizes and sizes <= {8.0, 9.0}
    # nothing drawn outside the page: the tight bounding box of every artist lies within the figure
    fig.canvas.draw()
    box = fig.get_tightbbox(fig.canvas.get_renderer())
    w, h = fig.get_size_inches()
    assert box.x0 >= -0.01 and box.y0 >= -0.01 and box.x1 <= w + 0.01 and box.y1 <= h + 0.01, (box, w, h)
    out = write_figure(find(rep, name), tmp_path / f"{name}.pdf", width=width)
    pdf = out.read_bytes()
    # the PDF page is the width asked: 3.3 in = 237.6 pt (its MediaBox, in points)
    media = re.search(rb"/MediaBox \[\s*0 0 ([\d.]+) ([\d.]+)\s*\]", pdf)
    assert float(media.group(1)) == pytest.approx(width * 72, abs=0.01)


def test_a_page_figure_too_wide_for_a_column_is_refused_and_a_height_is_a_floor(rep, tmp_path):
    # three heat maps of six heads side by side do not fit 3.3 in with 8 pt text: refused, naming the remedy
    with pytest.raises(RoutestatsError, match=r"does not fit 3.3 in with 8-9 pt text .*--width 7 for both columns"):
        paper_figure(find(rep, "head_sfm"), width=COLUMN_IN)
    # the page figures take their height from their width: a taller --height leaves room, a shorter one is refused
    natural = paper_figure(find(rep, "answer")).height / 72
    assert paper_figure(find(rep, "answer"), height=natural + 1).height == pytest.approx((natural + 1) * 72)
    with pytest.raises(RoutestatsError, match=rf"needs {natural:.2f} in at 3.3 in wide"):
        paper_figure(find(rep, "answer"), height=natural - 0.5)
    svg = write_figure(find(rep, "answer"), tmp_path / "a.svg").read_text()
    assert 'width="237.6pt"' in svg  # a paper's SVG is sized in points: 3.3 in x 72


def test_a_mistyped_figure_name_gets_a_suggestion(rep, tmp_path):
    with pytest.raises(RoutestatsError, match=r"no figure 'profle'; did you mean 'profile'\?"):
        find(rep, "profle")
    with pytest.raises(RoutestatsError, match=r"\.pdf, \.svg, \.png"):
        write_figure(find(rep, "answer"), tmp_path / "fig.jpg")


def test_the_figure_command_writes_a_column_pdf_and_refuses_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from routestats.cli import app

    out = tmp_path / "fig.pdf"
    res = CliRunner().invoke(app, ["figure", "answer", str(demo_run_dir()), "-o", str(out), "--resamples", "199",
                                   "--permutations", "999"])
    assert res.exit_code == 0, res.output
    media = re.search(rb"/MediaBox \[\s*0 0 ([\d.]+) ([\d.]+)\s*\]", out.read_bytes())
    assert float(media.group(1)) == pytest.approx(237.6, abs=0.01)  # 3.3 in x 72 pt
    res = CliRunner().invoke(app, ["figure", "profle", str(demo_run_dir()), "-o", str(out), "--resamples", "199",
                                   "--force"])
    assert res.exit_code == 2 and "did you mean 'profile'?" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(app, ["figure", "answer", str(demo_run_dir()), "-o", str(out), "--width", "narrow"])
    assert res.exit_code == 2 and "--width must be column, wide or a number of inches" in res.output


def test_a_figure_onto_a_folder_is_refused_and_leaves_nothing(tmp_path):
    """Issue [same-inputs]: `figure -o` onto a folder (named like a figure) drew the figure, failed to rename onto the
    folder and left a hidden temporary file beside it. Refused first, in one line, nothing written."""
    from typer.testing import CliRunner

    from routestats.cli import app

    folder = tmp_path / "fig.pdf"
    folder.mkdir()
    res = CliRunner().invoke(app, ["figure", "answer", str(demo_run_dir()), "-o", str(folder), "--force"])
    assert res.exit_code == 2 and "is a folder; -o names the figure's file" in res.output, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.pdf"] and not list(folder.iterdir())
