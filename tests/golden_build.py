"""How the golden test builds its reports (the one part of it that follows the public API)."""

from __future__ import annotations

from pathlib import Path


def build_all(tmp: Path, kw: dict) -> dict:
    import reports
    import routestats as rs
    from routestats.rundir.synthetic import demo_run_dir
    from routestats.studies.mofa_report import build_mofa_report
    from routestats.studies.pair_report import ReportSettings, build_pair_report
    from routestats.studies.study_report import StudySettings, build_study_report
    from tests.conftest import synthetic_mofa_tree, synthetic_study_tree

    out = {}
    pair = rs.load_runs(demo_run_dir()).pairs()[0]
    rep = build_pair_report(pair, ReportSettings(**kw))
    reports.render([rep], tmp / "pair", ("html",))
    out["pair"] = (rep.tables(), (tmp / "pair" / "report.html").read_text())

    tree = synthetic_study_tree(tmp / "study")
    rep = build_study_report(tree, StudySettings(resamples=kw["resamples"], seed=kw["seed"]))
    reports.render([rep], tmp / "study-out", ("html",))
    out["study"] = (rep.tables(), (tmp / "study-out" / "report.html").read_text())

    tree = synthetic_mofa_tree(tmp / "mofa")
    rep = build_mofa_report(tree)
    reports.render([rep], tmp / "mofa-out", ("html",))
    out["mofa"] = (rep.tables(), (tmp / "mofa-out" / "report.html").read_text())
    return out
