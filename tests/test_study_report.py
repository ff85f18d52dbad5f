"""Study (multi-run) reports: tables from routestats.studies, rendered to HTML and LaTeX."""

import numpy as np
import pytest
from typer.testing import CliRunner

import routestats as rs
from routestats.cli import app
from routestats.study_report import StudySettings, build_study_report
from routestats.studies import across_seed_tests, paired_deltas
from tests.test_report import compile_tex, need
from tests.test_studies import tree  # noqa: F401  (module fixture: 3 seeds x 6 conditions)

runner = CliRunner()


def test_study_report_tables_are_the_study_functions(tree):  # noqa: F811
    rep = build_study_report(tree, StudySettings(resamples=200, seed=5))
    t = rep.tables()
    assert {"seeds", "sweep", "placement", "shuffled", "across_seeds", "hierarchical", "variance_components"} <= set(t)
    assert "depth" not in t and "datasets" not in t  # one depth, one data set: not applicable
    np.testing.assert_array_equal(t["across_seeds"]["p_t"], across_seed_tests(paired_deltas(tree))["p_t"])
    assert rep.seeds == [1, 2, 3]


def test_study_report_cli_and_latex(tree, tmp_path):  # noqa: F811
    root = tree.runs[0].path.parent.parent
    r = runner.invoke(app, ["report", str(root), "-o", str(tmp_path / "o"), "--resamples", "200",
                            "--permutations", "200", "--pairs", "reference"])
    assert r.exit_code == 0, r.output
    html = (tmp_path / "o" / "report.html").read_text()
    assert "Across-seed inference" in html and "Bias strength" in html and "Shuffled control" in html
    assert html.count('<section class="pair"') == 1 + 3  # the study + 3 reference pairs
    tables = tmp_path / "o" / "tables"
    assert (tables / "Study-of-18-runs-sweep.tex").is_file()  # 3 seeds x 6 conditions; prefixed: several sections
    compile_tex(need("pdflatex"), tables, "tables.tex")


def test_pairs_option_validated(tree, tmp_path):  # noqa: F811
    root = tree.runs[0].path.parent.parent
    r = runner.invoke(app, ["report", str(root), "-o", str(tmp_path / "o"), "--pairs", "some"])
    assert r.exit_code == 2 and "--pairs must be auto, reference, all or none" in r.output
