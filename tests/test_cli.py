"""The routestats CLI (typer CliRunner) and the committed demo run."""

import json
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
    assert "2 run(s)" in r.output and "baseline" in r.output


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
        (["summary", "{incomplete}"], "1 incomplete run(s) without run.json"),
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
