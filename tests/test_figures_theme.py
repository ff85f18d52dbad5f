"""reports.theme against seaborn itself: the same matplotlib settings and palettes, so the figures
look as they did when drawn through ``seaborn.set_theme`` (the report no longer imports seaborn)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from reports import theme

SEABORN_RC = """
import json, matplotlib
matplotlib.use("Agg")
before = {k: str(v) for k, v in matplotlib.rcParams.items()}
import seaborn as sns
sns.set_theme(style="whitegrid", context="notebook")
after = {k: str(v) for k, v in matplotlib.rcParams.items()}
print(json.dumps({k: v for k, v in after.items() if before.get(k) != v}))
"""
OURS_RC = """
import json, matplotlib
matplotlib.use("Agg")
before = {k: str(v) for k, v in matplotlib.rcParams.items()}
import reports.figures
after = {k: str(v) for k, v in matplotlib.rcParams.items()}
print(json.dumps({k: v for k, v in after.items() if before.get(k) != v}))
"""


def _changed(code: str) -> dict:
    return json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def test_importing_the_figures_sets_what_seaborn_set_theme_sets():
    want = _changed(SEABORN_RC)
    want.pop("image.cmap")  # seaborn's own "rocket" map; every drawer names its colormap
    assert len(want) >= 30  # seaborn really changed the settings (the comparison is not vacuous)
    ours = _changed(OURS_RC)
    assert ours.pop("axes.titley") == "1.0"  # a speed setting, the same pixels (the next test)
    assert ours == want


def test_titles_placed_at_the_top_are_where_the_automatic_placement_puts_them(tmp_path):
    """axes.titley = 1.0 skips the automatic placement's search of every sibling axes' tick labels (0.4 s of the word
    map); no figure draws ticks above an axes, so the pixels are the automatic ones: every matplotlib figure of a
    regime report (a pair's, a study's and a MoFA report's figures are drawn without matplotlib) drawn both ways,
    compared pixel for pixel (a figure with top ticks would differ here)."""
    import matplotlib
    from PIL import Image

    import routestats as rs
    from reports.drawing import CANVAS_KINDS, REGISTRY, draw
    from reports.figures import save

    from routestats.compose.regime.build import build_regime_report
    from routestats.settings import AnalysisSettings
    from tests.test_regime_report import write_points

    rep = build_regime_report(write_points(tmp_path / "regime"), AnalysisSettings(probes=64, seed=0))
    figures = [f for r in rep.all_reports() for sec in r.sections for f in sec.figures
               if f.kind in REGISTRY and f.kind not in CANVAS_KINDS]
    assert len(figures) >= 3
    for f in figures:
        pixels = []
        for titley in (None, 1.0):
            with matplotlib.rc_context({"axes.titley": titley}):
                save(draw(f), tmp_path / str(titley), f.name)
            pixels.append(np.asarray(Image.open(tmp_path / str(titley) / f"{f.name}.png")))
        assert pixels[0].shape == pixels[1].shape and np.array_equal(*pixels), f.name


@pytest.mark.parametrize("name", ["viridis", "colorblind", "deep", "tab10"])
@pytest.mark.parametrize("n", [1, 2, 4, 9, 12])
def test_palettes_are_seaborns(name, n):
    import seaborn as sns

    np.testing.assert_array_equal(np.array(theme.palette(name, n)), np.array(sns.color_palette(name, n)))


def test_the_report_does_not_import_seaborn_or_scipy_stats_for_figures():
    code = "import sys, reports.render; print(sorted(m for m in ('seaborn', 'scipy.stats') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_saved_figure_is_drawn_once(tmp_path):
    # expected: one Figure.draw per PNG. matplotlib's savefig draws an extra time (rendering off) when the
    # figure still holds a layout engine, which fig.tight_layout() leaves behind as a placeholder
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    from reports.figures import save

    calls = []
    real = Figure.draw

    def counting(self, renderer):
        calls.append(1)
        return real(self, renderer)

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    ax.set(title="t", xlabel="x")
    fig.tight_layout()
    Figure.draw = counting
    try:
        png = save(fig, tmp_path, "f")
    finally:
        Figure.draw = real
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and (tmp_path / "f.png").read_bytes() == png
    assert len(calls) == 1


def test_a_pair_report_does_not_import_scipy_stats():
    """[report-floor]: the missed-change sentence's normal quantiles imported scipy.stats (1.1 s CPU a report, its
    distributions' docstrings parsed); a whole pair report, analysis and rendering, now runs without it."""
    code = ("import sys, tempfile, routestats as rs, reports; "
            "rep = rs.analyse('data/demo_run', resamples=200, permutations=200); "
            "reports.write(rep, tempfile.mkdtemp() + '/r', ('html', 'latex')); "
            "print('scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False"


@pytest.mark.parametrize("tree, least", [("data/demo_run", 10), ("data/demo_study", 4)])
def test_a_pair_or_study_report_is_drawn_without_importing_matplotlib(tmp_path, tree, least):
    # the pair page's figures (training ones included) and the study's are canvases written as SVG: matplotlib's import
    # and drawing were 1.7 s of a 2 x 64 report's 3 s (docs/performance.md). A PNG copy asked for is matplotlib's
    # (drawn by workers).
    code = (f"import sys, routestats as rs, reports; rep = rs.analyse({tree!r}, resamples=50, permutations=50); "
            "reports.write(rep, sys.argv[1], ('html',), figures=sys.argv[2:]); "
            "print(sorted(m for m in ('matplotlib', 'seaborn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "a")], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert len(list((tmp_path / "a" / "figures").glob("*.svg"))) >= least
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "b"), "png"], capture_output=True, text=True,
                         check=True)
    pngs = sorted(p.stem for p in (tmp_path / "b" / "figures").glob("*.png"))
    assert len(pngs) >= least and pngs == sorted(p.stem for p in (tmp_path / "b" / "figures").glob("*.svg"))
