"""The routestats CLI (typer CliRunner) and the committed demo run."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import routestats as rs
from routestats.cli import app
from routestats.rundir.synthetic import demo_run_dir, synthetic_pair

runner = CliRunner()


@pytest.fixture
def tree(tmp_path):
    synthetic_pair(tmp_path / "s1", seed=1, n_examples=6)
    return tmp_path


def test_info(tree):
    r = runner.invoke(app, ["info", str(tree)])
    assert r.exit_code == 0, r.output
    assert "2 runs" in r.output and "baseline" in r.output


def test_validate(tree):
    r = runner.invoke(app, ["validate", str(tree / "s1" / "saab")])
    assert r.exit_code == 0
    assert r.output.startswith("ok  synthetic-saab-seed1: manifest; file hashes")


def test_summary_prints_paired_effects(tree):
    r = runner.invoke(app, ["summary", str(tree), "--resamples", "200", "--permutations", "200"])
    assert r.exit_code == 0, r.output
    assert "paired SFM" in r.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["info", "/no/such/dir"], "error: /no/such/dir: no such file or directory"),
        (["validate", "{empty}"], "no runs found"),
        (["summary", "{incomplete}"], "1 incomplete run without run.json"),
    ],
)
def test_user_errors_exit_2_with_one_line(tmp_path, args, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "incomplete").mkdir()
    (tmp_path / "incomplete" / "examples.parquet").write_bytes(b"")
    args = [a.format(empty=tmp_path / "empty", incomplete=tmp_path / "incomplete") for a in args]
    r = runner.invoke(app, args)
    assert r.exit_code == 2
    assert message in r.output
    assert "Traceback" not in r.output


def test_corrupted_run_is_a_user_error(tree):
    m = tree / "s1" / "saab" / "run.json"
    data = json.loads(m.read_text())
    data["schema_version"] = "0.1"
    m.write_text(json.dumps(data))
    r = runner.invoke(app, ["info", str(tree / "s1" / "saab")])
    assert r.exit_code == 2 and "schema_version '0.1' is not supported" in r.output


def test_help_everywhere():
    for cmd in ([], ["info"], ["validate"], ["summary"]):
        r = runner.invoke(app, cmd + ["--help"])
        assert r.exit_code == 0 and "Usage" in r.output


# ------------------------------------------------------------------ the committed demo run
def test_demo_run_is_valid_and_paired():
    runs = rs.load_runs(demo_run_dir())
    assert len(runs) == 2
    for r in runs:
        r.validate(deep=True)
        assert r.attention_steps == [1, 10, 50, 100, 200, 300, 500]
        assert "SYNTHETIC" not in json.dumps(r.manifest)
    (p,) = runs.pairs()
    assert p.baseline.manifest["pairing"] == p.variant.manifest["pairing"]
    e = rs.paired_effects(p, resamples=500, permutations=500)
    assert len(e) == 4 and e["n"].unique().tolist() == [32]
    # SAAB raises same-field mass in every layer of this run (its headline effect)
    assert (e["mean_diff"] > 0).all()


def test_bundled_data_size_budget():
    # what a clone carries: corpora (~3.5 MB), the demo run (~12 MB: matrices and value norms at step 500)
    # and the demo study (~7.5 MB: reductions only)
    def size(p):
        return sum(f.stat().st_size for f in Path(p).rglob("*") if f.is_file())

    data = Path(demo_run_dir()).parent
    assert size(data / "demo_run") <= 13 * 1024 * 1024
    assert size(data / "demo_study") <= 8 * 1024 * 1024
    assert size(data) <= 25 * 1024 * 1024


def test_info_fits_80_columns_and_keeps_every_run_id(tree, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = runner.invoke(app, ["info", str(tree)])
    assert r.exit_code == 0, r.output
    ids = [p.parent.name for p in tree.rglob("run.json")]
    import json

    for p in tree.rglob("run.json"):
        assert json.loads(p.read_text())["run_id"] in r.output  # never cut to a few characters
    assert max(len(line) for line in r.output.splitlines()) <= 80
    assert ids


def test_every_option_has_help_text():
    from typer.main import get_command

    import runners.__main__ as runners_cli

    missing, options = [], 0
    for app_ in (app, runners_cli.app):
        for name, sub in get_command(app_).commands.items():
            opts = [p for p in sub.params if type(p).__name__.endswith("Option")]  # typer vendors its own click
            options += len(opts)
            missing += [f"{name} --{p.name}" for p in opts if not p.help]
    assert options > 100 and missing == []


def test_commands_use_a_memory_pool_that_returns_pages():
    # expected: pyarrow's own report of its default pool in a fresh process (jemalloc; mimalloc is
    # pyarrow's default, the one that keeps freed row groups resident), and the user's choice kept
    import os
    import subprocess
    import sys

    code = ("from routestats.cli import tune_process_memory; import pyarrow as pa; "
            "print(tune_process_memory()['arrow_pool'], pa.default_memory_pool().backend_name)")
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["jemalloc", "jemalloc"]
    out = subprocess.run([sys.executable, "-c", code], env={**env, "ARROW_DEFAULT_MEMORY_POOL": "system"},
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["system", "system"]


def test_validate_lines_fit_the_terminal(tree, monkeypatch):
    # was: one line of up to 445 characters per run
    monkeypatch.setenv("COLUMNS", "80")
    r = runner.invoke(app, ["validate", str(tree)])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert max(len(ln) for ln in lines) <= 79 and len(lines) > sum(ln.startswith("ok  ") for ln in lines)
    assert all(ln.startswith(("ok  ", "    ")) for ln in lines)


# ------------------------------------------------------------------ terminal tables never cut a number
def _words(text: str) -> set:
    """Every whitespace- or rule-separated word of terminal output."""
    import re

    return set(re.split(r"[\s│┃]+", text))


def _assert_whole(output: str, frames, columns: int) -> None:
    """Every header and every value of every (title, frame) appears whole (as the CLI formats it), and no
    line is wider than the terminal."""
    from reports.terminal import cell_text as _cell

    words = _words(output)
    for _, df in frames:
        cells = [str(c) for c in df.columns] + [_cell(v) for row in df.itertuples(index=False) for v in row]
        missing = [c for c in cells if not set(c.split()) <= words]
        assert missing == [], (missing, output)
    assert max(len(line) for line in output.splitlines()) <= columns, output


@pytest.mark.parametrize("columns", [80, 60, 200])
@pytest.mark.parametrize("point", [["--layer", "0", "--example", "0", "--all"], []])
def test_regime_terminal_tables_never_cut_a_number(tmp_path, monkeypatch, columns, point):
    # was: at 80 columns `lambda…`, `tau_c…` for headers, `4.441…` for 4.441e-16 (rich cut cells with an ellipsis)
    from routestats.compose.regime.build import build_regime_report, terminal_tables
    from routestats.settings import AnalysisSettings
    from tests.test_regime_report import write_points

    run = write_points(tmp_path / "run")
    monkeypatch.setenv("COLUMNS", str(columns))
    r = runner.invoke(app, ["regime", str(run), "--probes", "64", *point])
    assert r.exit_code == 0, r.output
    layer = {"layer": 0, "example": 0} if point else {}
    frames = terminal_tables(build_regime_report(run, AnalysisSettings(probes=64, **layer)), every=bool(point))
    _assert_whole(r.output, frames, columns)
    assert "max |analytic − autograd| 2e-16" in " ".join(r.output.split())  # an exponent kept whole
    assert "…" not in r.output
    if columns == 200:  # room enough: tables, not one block a row
        assert "┏" in r.output and "one block a row" not in r.output


def test_a_table_too_wide_for_the_terminal_is_one_block_a_row():
    from reports.terminal import long_format as _long_format, fit_columns

    headers, rows = ["layer", "lambda_max", "source"], [["0", "4.441e-16", "slice (finite forward)"]]
    assert fit_columns(headers, rows, [True, True, False], 40) == [5, 10, 15]  # 'forward)' wraps, numbers whole
    assert fit_columns(headers, rows, [True, True, False], 30) is None
    assert _long_format("t", headers, rows, 30) == ["t (one block a row: wider", "than the terminal)", "",
                                                    "  layer       0", "  lambda_max  4.441e-16",
                                                    "  source      slice (finite", "              forward)", ""]


def test_summary_tables_never_cut_a_number(tree, monkeypatch):
    from routestats.analysis import summary_tables
    from routestats.settings import AnalysisSettings

    monkeypatch.setenv("COLUMNS", "60")
    r = runner.invoke(app, ["summary", str(tree), "--resamples", "200", "--permutations", "200"])
    assert r.exit_code == 0, r.output
    frames = summary_tables(tree, AnalysisSettings(resamples=200, permutations=200))
    assert any("95% CI" in df for _, df in frames)
    _assert_whole(r.output, frames, 60)


def test_info_says_what_a_missing_seed_or_factor_is(tmp_path):
    # was: `seed None` for a pretrained model's capture and `eval_bias=nan` for a run without that factor
    from tests.conftest import FIELDS, make_examples

    def run(name, seed, factors, **extra):
        w = rs.RunWriter(tmp_path / name, run_id=name, study="mixed", factors=factors, seed=seed, init_id="init",
                         data_order_id="order", fields=FIELDS)
        w.write_examples(make_examples([[3, 4]]))
        with w.attention(10, forms=("matrices",)) as sink:
            sink.add(0, __import__("numpy").full((1, 1, 2, 2), 0.5, dtype="float32"))
        return w.finalize(**extra)

    run("captured", None, {"variant": "baseline"}, pretrained=True)
    run("trained", 7, {"variant": "saab", "eval_bias": "off"})
    r = runner.invoke(app, ["info", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "None" not in r.output and "nan" not in r.output, r.output
    blocks = {b.split("\n", 1)[0]: b for b in r.output.split("\n\n")[1:]}
    assert "pretrained (no seed)" in blocks["captured"] and "eval_bias" not in blocks["captured"]
    assert "seed 7 ·" in blocks["trained"] and "eval_bias=off" in blocks["trained"]  # an int, not 7.0


@pytest.mark.parametrize("name, says", [
    ("efects", "error: unknown table 'efects'; did you mean 'effects'? (routestats table --help lists every "
               "table name)"),
    ("bogus", "error: unknown table 'bogus'; this report has: adjusted, effects, entropy_effects,"),
], ids=["close", "none-close"])
def test_a_mistyped_table_name_gets_a_suggestion_in_one_line(tree, name, says):
    r = runner.invoke(app, ["table", name, str(tree), "--resamples", "100", "--permutations", "100"])
    assert r.exit_code == 2
    assert r.output.startswith(says) and len(r.output.strip().splitlines()) == 1, r.output


@pytest.mark.parametrize("given, expect", [(None, ("True", "1", 1)), ("2", ("False", "2", 2))])
def test_the_command_line_runs_blas_on_one_thread_unless_the_user_chose(given, expect):
    """[report-floor]: a second BLAS thread spins while the statistics multiply tall matrices by a few columns (2 x
    2,336 report: about 2 s more CPU, the same wall time); the command line asks for one, before numpy loads, and
    keeps a count the user set. The thread count is OpenBLAS's own, as threadpoolctl reads it from the library."""
    import os

    pytest.importorskip("threadpoolctl")
    code = ("import os; from routestats.cli import one_blas_thread; print(one_blas_thread()); "
            "print(os.environ.get('OPENBLAS_NUM_THREADS')); import numpy, threadpoolctl; "
            "print([i['num_threads'] for i in threadpoolctl.threadpool_info() if i['user_api'] == 'blas'][0])")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if given:
        env["OPENBLAS_NUM_THREADS"] = given
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout.split()
    assert (out[0], out[1], int(out[2])) == expect


@pytest.mark.parametrize("program", [["routestats"], ["runners"]])
def test_both_command_lines_say_their_version(program):
    """`routestats --version` was "No such option"; both command lines print their name and the package's version."""
    import routestats

    cmd = [sys.executable, "-m", "routestats.cli"] if program == ["routestats"] else [sys.executable, "-m", "runners"]
    res = subprocess.run([*cmd, "--version"], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == f"{program[0]} {routestats.__version__}", res.stderr


def test_terminal_escapes_in_a_planted_run_id_are_printed_as_text(tmp_path):
    """Issue [same-inputs]: a run id with terminal escapes (set the title, clear the screen) reached the terminal
    through `info` and `summary`. Every command line output escapes control characters: no ESC or BEL byte is
    printed, and the id is still shown, as its escapes."""
    base, var = synthetic_pair(tmp_path / "pair", seed=1, n_examples=6)
    evil = "evil\x1b]0;owned\x07\x1b[2J"
    m = json.loads((base / "run.json").read_text())
    m["run_id"] = evil
    (base / "run.json").write_text(json.dumps(m))
    for cmd in (["info", str(tmp_path / "pair")],
                ["summary", str(tmp_path / "pair"), "--resamples", "50", "--permutations", "50"]):
        res = subprocess.run([sys.executable, "-m", "routestats.cli", *cmd], capture_output=True, text=True,
                             env={**__import__("os").environ, "COLUMNS": "200"})
        out = res.stdout + res.stderr
        assert "\x1b" not in out and "\x07" not in out, (cmd, out[:400])
        if res.returncode == 0:
            assert "evil\\x1b]0;owned\\x07\\x1b[2J" in out, (cmd, out[:400])


def test_the_command_leaves_its_objects_to_the_operating_system():
    # main() freezes the collector's objects when the command is done (routestats.usage.run_console), so that the
    # collections at exit skip them (0.07 -> 0.015 s CPU after a 2 x 64 report); exit code and output unchanged
    probe = ("import gc, sys\nfrom routestats.cli import main\nsys.argv = ['routestats', '--version']\ntry:\n"
             "    main()\nexcept SystemExit as e:\n    print('code', e.code, 'frozen', gc.get_freeze_count())\n")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    lines = res.stdout.splitlines()
    assert lines[0].startswith("routestats ")  # --version printed as before
    code, frozen = lines[-1].split()[1], int(lines[-1].split()[3])
    assert code in ("0", "None") and frozen > 10_000, res.stdout
