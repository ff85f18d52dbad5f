"""`routestats table --help` lists every table a report writes (routestats.table_names)."""

import routestats as rs
from routestats.compose.regime.build import build_regime_report
from routestats.table_names import REPORT_TABLES
from tests.conftest import synthetic_mofa_tree, synthetic_study_tree
from tests.test_regime_report import write_points

FAST = dict(resamples=100, permutations=100, length_resamples=50)


def listed(rep, kind):
    from routestats.metrics.definitions import paired_metrics

    got = {name for r in rep.all_reports() for name in r.tables()}
    names = set(REPORT_TABLES[kind]) | (set(REPORT_TABLES["pair"]) if kind == "study" else set())
    names |= {m.table for m in paired_metrics()} if kind in ("pair", "study") else set()
    assert got <= names, f"{kind}: tables missing from routestats.table_names: {sorted(got - names)}"
    return got


def test_every_table_of_every_report_kind_is_listed(tmp_path):
    from routestats.cli import app
    from typer.testing import CliRunner

    got = {"pair": listed(rs.analyse("data/demo_run", **FAST), "pair")}
    got["study"] = listed((synthetic_study_tree(tmp_path / "study"), rs.analyse(tmp_path / "study", pairs="all", **FAST))[1], "study")
    got["mofa"] = listed((synthetic_mofa_tree(tmp_path / "mofa"), rs.analyse(tmp_path / "mofa", **FAST))[1], "mofa")
    got["regime"] = listed(build_regime_report(write_points(tmp_path / "regime"), rs.AnalysisSettings(probes=64, seed=0)),
                           "regime")
    got["run"] = listed(rs.analyse("data/demo_run/saab", **FAST), "run")
    # the fixtures hold most of the listed tables (the rest need depth, data-set, init-probe or cost inputs)
    assert {"effects", "length_adjusted", "profile_shape", "init_vs_final", "word_map"} <= got["pair"]
    assert {"seeds", "sweep", "shuffled", "across_seeds", "forest"} <= got["study"]
    help_text = " ".join(CliRunner().invoke(app, ["table", "--help"], env={"COLUMNS": "200"}).output.split())
    for names in REPORT_TABLES.values():
        for name in names:
            assert f" {name}," in help_text or f" {name};" in help_text or f" {name}." in help_text, name
