"""A re-run of the same report on unchanged inputs is served from the report cache (reports/cache.py);
any change to a file under the inputs, to the settings or to the formats computes it afresh."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import routestats.analysis
from reports import cache
from routestats.cli import app
from routestats.rundir import schema as S
from routestats.rundir.synthetic import synthetic_pair

QUICK = ["--resamples", "40", "--permutations", "40", "--format", "html"]
runner = CliRunner()


def cli(*args):
    r = runner.invoke(app, [str(a) for a in args])
    return r.exit_code, r.output


@pytest.fixture
def pair(tmp_path, monkeypatch):
    monkeypatch.setenv("ROUTESTATS_CACHE", str(tmp_path / "cache"))
    synthetic_pair(tmp_path / "pair", seed=3, n_examples=6, n_layers=2, n_heads=2, same_field_bias=(0.5, 1.0),
                   effect=(0.2, 0.4), forms=("reductions",))
    return tmp_path / "pair"


@pytest.fixture
def analyses(monkeypatch):
    """Counts the analyses the CLI runs."""
    calls = []
    real = routestats.analysis.analyse
    monkeypatch.setattr(routestats.analysis, "analyse", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def _files(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_an_unchanged_rerun_is_a_copy_of_the_cached_report(pair, tmp_path, analyses):
    code, out = cli("report", pair, "-o", tmp_path / "a", *QUICK)
    assert code == 0, out
    code, out = cli("report", pair, "-o", tmp_path / "b", *QUICK)
    assert code == 0, out
    assert "from the cache" in out and len(analyses) == 1
    assert _files(tmp_path / "a") == _files(tmp_path / "b")  # every byte, the provenance's time included
    assert (tmp_path / "b" / "report.html").is_file() and f"html: {tmp_path / 'b' / 'report.html'}" in out


def test_a_relative_output_folder_is_cached_too(pair, tmp_path, analyses, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli("report", pair, "-o", "a", *QUICK)[0] == 0
    code, out = cli("report", pair, "-o", "b", *QUICK)
    assert code == 0 and "from the cache" in out and len(analyses) == 1, out
    assert _files(tmp_path / "a") == _files(tmp_path / "b")


def test_a_touched_added_or_changed_file_misses(pair, tmp_path, analyses):
    assert cli("report", pair, "-o", tmp_path / "a", *QUICK)[0] == 0
    f = pair / "saab" / S.attention_file(100, "reductions")
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # same bytes, touched
    code, out = cli("report", pair, "-o", tmp_path / "b", *QUICK)
    assert code == 0 and "from the cache" not in out and len(analyses) == 2
    (pair / "notes.txt").write_text("a new file in the tree")
    code, out = cli("report", pair, "-o", tmp_path / "c", *QUICK)
    assert code == 0 and "from the cache" not in out and len(analyses) == 3
    # rewritten with other bytes: the manifest no longer describes it, so the report is refused, not served
    t = pq.read_table(f).to_pandas()
    pq.write_table(pa.Table.from_pandas(t, schema=S.REDUCTIONS_SCHEMA, preserve_index=False), f, compression="gzip")
    code, out = cli("report", pair, "-o", tmp_path / "d", *QUICK)
    assert code == 2 and "differs from run.json" in out and not (tmp_path / "d").exists()


def test_other_settings_or_formats_miss(pair, tmp_path, analyses):
    assert cli("report", pair, "-o", tmp_path / "a", *QUICK)[0] == 0
    assert cli("report", pair, "-o", tmp_path / "b", *QUICK[:-2], "--format", "html,latex")[0] == 0
    assert cli("report", pair, "-o", tmp_path / "c", *QUICK, "--seed", "7")[0] == 0
    assert len(analyses) == 3
    assert (tmp_path / "b" / "tables" / "tables.tex").is_file() and not (tmp_path / "a" / "tables" / "tables.tex").exists()


def test_the_cache_keeps_the_latest_reports_and_ignores_a_damaged_entry(pair, tmp_path, analyses, monkeypatch):
    monkeypatch.setattr(cache, "KEEP", 2)
    for seed in (1, 2, 3):
        assert cli("report", pair, "-o", tmp_path / f"r{seed}", *QUICK, "--seed", seed)[0] == 0
    entries = [p for p in (tmp_path / "cache" / "reports").iterdir() if not p.name.startswith(".")]
    assert len(entries) == 2
    (entries[0] / "written.json").write_text('{"html": "../../outside.html"}')  # names a file outside it
    assert cache.lookup(entries[0].name) is None
    for e in entries:
        (e / "written.json").write_text("not json")
    code, out = cli("report", pair, "-o", tmp_path / "again", *QUICK, "--seed", 3)
    assert code == 0 and "from the cache" not in out and len(analyses) == 4


def test_cache_off_stores_nothing(pair, tmp_path, monkeypatch, analyses):
    monkeypatch.setenv("ROUTESTATS_CACHE", "off")
    for name in ("a", "b"):
        assert cli("report", pair, "-o", tmp_path / name, *QUICK)[0] == 0
    assert len(analyses) == 2 and not (tmp_path / "cache").exists()


def test_key_changes_with_the_code(tmp_path, monkeypatch):
    (tmp_path / "run.json").write_text("{}")
    a = cache.report_key([tmp_path], {}, ("html",), ())
    monkeypatch.setattr(cache, "_CODE", "another version of the code")
    assert cache.report_key([tmp_path], {}, ("html",), ()) != a
    assert len(a) == 64  # a SHA-256 hex digest


def test_a_file_that_appears_during_the_analysis_is_not_filed_under_the_old_key(pair, tmp_path, monkeypatch):
    real = routestats.analysis.analyse
    calls = []

    def analyse_while_a_file_appears(*a, **k):
        calls.append(1)
        if len(calls) == 1:
            (pair / "lengths.txt").write_text("appears while the first report is computed")
        return real(*a, **k)

    monkeypatch.setattr(routestats.analysis, "analyse", analyse_while_a_file_appears)
    assert cli("report", pair, "-o", tmp_path / "a", *QUICK)[0] == 0
    (pair / "lengths.txt").unlink()  # the tree is as it was when the first key was taken
    code, out = cli("report", pair, "-o", tmp_path / "b", *QUICK)
    assert code == 0 and "from the cache" not in out and len(calls) == 2


def test_an_entry_that_cannot_be_read_is_computed_afresh(pair, tmp_path, analyses, monkeypatch):
    assert cli("report", pair, "-o", tmp_path / "a", *QUICK)[0] == 0
    monkeypatch.setattr(cache, "lookup", lambda key: (tmp_path / "evicted meanwhile", {"html": "report.html"}))
    code, out = cli("report", pair, "-o", tmp_path / "b", *QUICK)
    assert code == 0 and "from the cache" not in out and len(analyses) == 2, out
    assert (tmp_path / "b" / "report.html").is_file()


def test_half_written_entries_of_dead_processes_are_removed(pair, tmp_path):
    stale = tmp_path / "cache" / "reports" / f".{'0' * 64}.999999999.tmp"
    (stale / "report").mkdir(parents=True)
    odd = stale.with_name(f".{'1' * 64}.{10 ** 30}.tmp")  # no pid can be that large
    odd.mkdir()
    assert cli("report", pair, "-o", tmp_path / "a", *QUICK)[0] == 0
    assert not stale.exists() and not odd.exists()
    assert len([p for p in (tmp_path / "cache" / "reports").iterdir()]) == 1


def test_a_report_from_the_cache_loads_neither_pandas_nor_matplotlib(pair, tmp_path):
    # issue [report-floor]: a warm re-report is a copy; its CPU was the imports of the analysis and the renderer
    # (0.8-1.05 s at 2 x 64, then 0.28-0.30 s without them, measured). A fresh process, as a user runs it. Nor
    # pydantic: typer 0.29 coerces every option through it (0.57 s a warm re-report against 0.30 s with typer 0.28,
    # measured; pyproject.toml keeps typer below 0.29)
    import subprocess
    import sys

    code, out = cli("report", pair, "-o", tmp_path / "a", *QUICK)
    assert code == 0, out
    probe = ("import sys\nfrom routestats.cli import main\nsys.argv = ['routestats', 'report', sys.argv[1], '-o', "
             "sys.argv[2], *sys.argv[3:]]\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in ('pandas', 'matplotlib', 'scipy', 'jinja2', 'pydantic') if m in sys.modules))")
    got = subprocess.run([sys.executable, "-c", probe, str(pair), str(tmp_path / "b"), *QUICK], capture_output=True,
                         text=True, env=os.environ.copy(), check=True)
    assert "from the cache" in got.stdout + got.stderr, got
    assert got.stdout.strip().splitlines()[-1] == "[]", got.stdout
