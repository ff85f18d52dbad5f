"""How the golden test builds its reports (the one part of it that follows the public API)."""

from __future__ import annotations

from pathlib import Path


def build_all(tmp: Path, kw: dict) -> dict:
    import reports
    import routestats as rs
    from routestats.rundir.synthetic import demo_run_dir
    from tests.conftest import synthetic_mofa_tree, synthetic_study_tree

    out = {}
    synthetic_study_tree(tmp / "study")
    synthetic_mofa_tree(tmp / "mofa")
    for name, path in (("pair", demo_run_dir()), ("study", tmp / "study"), ("mofa", tmp / "mofa")):
        rep = rs.analyse(path, **kw)
        reports.write(rep, tmp / f"{name}-out", ("html",))
        out[name] = (rep.tables(), (tmp / f"{name}-out" / "report.html").read_text(),
                     (tmp / f"{name}-out" / "claims.csv").read_text())
    return out
