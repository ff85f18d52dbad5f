"""The first hour of a new user (issue [first-hour]): what the README's steps and hints lead to works."""

from __future__ import annotations

import os
import shutil
import stat

from typer.testing import CliRunner

import reports
import routestats as rs
from routestats.cli import app
from routestats.rundir.synthetic import synthetic_pair


def test_a_folder_holding_one_run_reports_that_run(tmp_path):
    # was: "no variant=baseline baseline with a paired variant found" -- the hint a one-condition capture prints
    # (next: routestats report OUT) named the folder, and only OUT/baseline could be reported
    synthetic_pair(tmp_path / "pair", seed=1, n_examples=6)
    shutil.copytree(next(p for p in (tmp_path / "pair").iterdir() if "baseline" in p.name), tmp_path / "qa" / "baseline")
    rep = rs.analyse(tmp_path / "qa", resamples=100, permutations=100)
    assert rep.title == rs.analyse(tmp_path / "qa" / "baseline", resamples=100, permutations=100).title
    assert "layers" in rep.tables() and "effects" not in rep.tables()
    r = CliRunner().invoke(app, ["report", str(tmp_path / "qa"), "-o", str(tmp_path / "rep"), "--resamples", "100"])
    assert r.exit_code == 0, r.output


def test_reports_are_written_with_the_users_umask(tmp_path):
    # was: drwx------ and -rw------- under umask 022 (mkdtemp and mkstemp), unreadable by a colleague or a server
    synthetic_pair(tmp_path / "pair", seed=1, n_examples=6)
    rep = rs.analyse(tmp_path / "pair", resamples=100, permutations=100, flow="off")
    old = os.umask(0o022)
    try:
        reports.write(rep, tmp_path / "report", ("html",))
        from reports.paper import find, write_figure

        write_figure(find(rep, "answer"), tmp_path / "fig.pdf")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "fig.pdf").stat().st_mode) == 0o644
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in [tmp_path / "report", *(tmp_path / "report").rglob("*")]}
    assert all(m == (0o755 if p.is_dir() else 0o644) for p, m in modes.items()), \
        {str(p): oct(m) for p, m in modes.items() if m not in (0o755, 0o644)}


def test_operators_inside_a_pairs_run_leave_the_pair_a_pair(tmp_path):
    # was: after the README's `python -m runners regime runs/seed1001/saab ...`, `routestats report runs/seed1001`
    # gave "regime switching across models" and `table effects` failed with "unknown table 'effects'"
    from tests.test_regime_report import write_points

    synthetic_pair(tmp_path / "pair", seed=1, n_examples=6)
    variant = next(p for p in (tmp_path / "pair").iterdir() if "saab" in p.name)
    write_points(variant)
    rep = rs.analyse(tmp_path / "pair", resamples=100, permutations=100, flow="off")
    assert "effects" in rep.tables() and "regime" not in rep.title.lower()
    r = CliRunner().invoke(app, ["table", "effects", str(tmp_path / "pair"), "--resamples", "100"])
    assert r.exit_code == 0, r.output
    assert "Switching" in rs.analyse(variant, resamples=100).answer  # the run itself reports its operators


def test_a_typo_of_a_table_or_a_bad_figure_file_is_refused_before_the_analysis(tmp_path, monkeypatch):
    import routestats.analysis

    def boom(*a, **k):
        raise AssertionError("the analysis ran")

    monkeypatch.setattr(routestats.analysis, "analyse", boom)
    for args, says in ((["table", "efects", "data/demo_run"], "did you mean 'effects'?"),
                       (["figure", "answer", "data/demo_run", "-o", str(tmp_path / "f.jpg")], "a figure is written as"),
                       (["figure", "answer", "data/demo_run", "-o", str(tmp_path / "no" / "f.pdf")], "no such folder"),
                       (["figure", "answer", "data/demo_run", "-o", str(tmp_path / "kept.pdf")],
                        "kept.pdf exists; --force replaces it")):
        (tmp_path / "kept.pdf").write_bytes(b"%PDF my figure")
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 2 and says in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert (tmp_path / "kept.pdf").read_bytes() == b"%PDF my figure"  # the user's file, untouched


def test_a_mofa_rerun_keeps_a_run_of_its_settings_and_refuses_one_of_others(tmp_path):
    # was: `runners mofa` with another --steps into the same --out exited 0 and kept the old run, saying nothing
    import pytest

    pytest.importorskip("torch")
    from routestats.errors import RoutestatsError
    from runners.training.mofa import GPTConfig, MoFATrain, train_mofa_run

    text = ["The quick brown fox jumps over the lazy dog. " * 20]
    kw = dict(cfg=GPTConfig(n_ctx=16, n_layer=2, n_head=2, d_model=16, n_sigmoid=1), train_text=text,
              domains={"prose": text}, seed=1)
    run = train_mofa_run(tmp_path / "r", **kw, tc=MoFATrain(steps=2, batch_size=2))
    before = (run / "run.json").read_bytes()
    assert train_mofa_run(tmp_path / "r", **kw, tc=MoFATrain(steps=2, batch_size=2)) == run  # its settings: kept
    with pytest.raises(RoutestatsError, match=r"a complete run made with other settings \(steps 3 here vs 2 there\)"):
        train_mofa_run(tmp_path / "r", **kw, tc=MoFATrain(steps=3, batch_size=2))
    assert (run / "run.json").read_bytes() == before
    # issue [same-inputs]: a domain whose content changed under the same name was "complete with these settings;
    # kept"; the run records its domains' SHA-256 and the rerun is refused, naming them
    edited = {"prose": ["An entirely different text about other things. " * 20]}
    with pytest.raises(RoutestatsError, match=r"a complete run made with other settings \(domains "):
        train_mofa_run(tmp_path / "r", **{**kw, "domains": edited}, tc=MoFATrain(steps=2, batch_size=2))
    assert (run / "run.json").read_bytes() == before


def test_usage_errors_of_both_command_lines_are_one_line_and_exit_2(capsys):
    # was: three lines (usage, a hint, the error) from routestats, a boxed rich panel from python -m runners
    import pytest

    import runners.__main__ as rmain
    from routestats.usage import run_app

    for cli, args, says in (
            (app, ["report", "--bogus"], "error: No such option: --bogus (Possible options: --figures, --out); "
                                         "see 'routestats report --help'"),
            (app, ["report"], "error: Missing argument 'path'; see 'routestats report --help'"),
            (app, ["nosuch"], "error: No such command 'nosuch'; see 'routestats --help'"),
            (app, ["report", "data/demo_run", "--resamples", "abc"], "error: Invalid value for '--resamples'"),
            (rmain.app, ["saab", "--bogus"], "error: No such option: --bogus (Possible options: --out); "
                                             "see 'runners saab --help'")):
        with pytest.raises(SystemExit) as exc:
            run_app(cli, args, prog="routestats" if cli is app else "runners")
        out, err = capsys.readouterr()
        assert exc.value.code == 2 and out == "" and err.count("\n") == 1 and err.startswith(says), (args, err)
    with pytest.raises(SystemExit) as exc:  # help is still help, exit 0
        run_app(app, ["report", "--help"], prog="routestats")
    assert exc.value.code == 0 and "Usage: routestats report" in capsys.readouterr().out
