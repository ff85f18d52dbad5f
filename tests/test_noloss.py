"""Nothing a user wrote is ever lost ([no-loss]): one test per case of the catalogue, each of which
failed before the fix (the name says the case), plus a race: a process writing into the output folder
throughout a --force report loses nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import reports
import routestats as rs
from routestats.cli import app
from routestats.rundir.synthetic import synthetic_pair

FAST = ["--resamples", "100", "--permutations", "100"]


def everything(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def kept_folders(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f"{out.name}.kept-*"))


@pytest.fixture(scope="module")
def pair_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("pair")
    synthetic_pair(d, seed=1, n_examples=8)
    return d


@pytest.fixture(scope="module")
def small_report(pair_dir):
    return rs.analyse(pair_dir, resamples=100, permutations=100, flow="off")


# ------------------------------------------------------------------ writers that cannot delete a foreign file
def test_force_keeps_a_file_saved_into_the_folder_while_the_report_is_drawn(tmp_path, small_report, monkeypatch):
    # was: the foreign-file check ran when writing started and the old folder was removed whole at the end
    out = tmp_path / "report"
    reports.write(small_report, out, ("html",))
    from reports import folder

    real = folder.put_file

    def saving_meanwhile(path, data):  # the user saves a note while the new report is being written
        if path.name == folder.MARKER:
            (out / "NOTES.txt").write_text("my notes")
        return real(path, data)

    monkeypatch.setattr(folder, "put_file", saving_meanwhile)
    reports.write(small_report, out, ("html",), force=True)
    assert (out / "NOTES.txt").read_text() == "my notes" and (out / "report.html").is_file()


def test_an_edited_report_file_is_kept_beside_the_new_report(tmp_path, small_report):
    out = tmp_path / "report"
    reports.write(small_report, out, ("html",))
    (out / "claims.csv").write_text("my edited claims")  # edited after it was written: no longer what we wrote
    with pytest.raises(rs.RoutestatsError, match="holds files routestats did not write"):
        reports.write(small_report, out, ("html",), force=True)
    assert (out / "claims.csv").read_text() == "my edited claims"


@pytest.mark.parametrize("marker", ['{"written_by": "routestats"}\n',  # the first format: no list
                                    '{"written_by": "routestats", "files": ["report.html", "tables/x.csv"]}\n',
                                    "", "{not json", '{"written_by": "routestats", "format": 2, "files": {}}'])
def test_force_over_an_old_empty_or_damaged_marker_refuses_and_keeps_every_byte(tmp_path, small_report, marker):
    # was: an old-format marker granted the report layout, so --force deleted the user's files under tables/
    out = tmp_path / "old-report"
    (out / "tables").mkdir(parents=True)
    (out / "tables" / "x.csv").write_text("the user's own table")
    (out / "report.html").write_text("<html>old</html>")
    (out / ".routestats-report").write_text(marker)
    before = everything(out)
    with pytest.raises(rs.RoutestatsError, match="proves nothing, so --force would lose report.html, tables/"):
        reports.write(small_report, out, ("html",), force=True)
    assert everything(out) == before and not kept_folders(out)


def test_a_process_writing_into_the_folder_throughout_a_forced_report_loses_nothing(tmp_path):
    from reports.folder import write_folder

    out = tmp_path / "report"
    write_folder(out, lambda tmp: {"a": _put(tmp / "report.html", "one")})
    wrote: dict[str, str] = {}
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            name = f"user-{i:04d}.txt"
            try:
                (out / name).write_text(f"line {i}")
                wrote[name] = f"line {i}"
            except OSError:
                pass  # the folder's name was between two folders: this write did not happen
            i += 1
            time.sleep(0.0005)

    def fill(tmp):
        t.start()
        time.sleep(0.2)  # the report is being drawn
        return {"a": _put(tmp / "report.html", "two")}

    t = threading.Thread(target=writer)
    try:
        write_folder(out, fill, force=True, notice=lambda line: None)
        time.sleep(0.05)
    finally:
        stop.set()
        t.join()
    assert len(wrote) > 50
    found = {}
    for folder in [out, *kept_folders(out)]:
        found.update({k: v.decode() for k, v in everything(folder).items() if k.startswith("user-")})
    assert found == wrote  # every file the user wrote, with its content, none lost
    assert (out / "report.html").read_text() == "two"


def _put(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ------------------------------------------------------------------ bounded input, tracebacks
def test_a_tree_of_1100_nested_folders_is_one_line_in_under_5_s(tmp_path):
    # was: RecursionError from os.walk (exit 1) in info, table and report
    deep = tmp_path / "deep"
    deep.mkdir()
    p = str(deep)
    for _ in range(1100):  # made one level at a time (pathlib's and os's own makedirs recurse)
        p += "/d"
        os.mkdir(p)
    synthetic_pair(tmp_path / "deep" / "pair", seed=1, n_examples=4)
    try:
        for cmd in (["info", str(deep)], ["table", "effects", str(deep), *FAST],
                    ["report", str(deep), "-o", str(tmp_path / "r"), *FAST]):
            t0 = time.perf_counter()
            res = CliRunner().invoke(app, cmd)
            assert time.perf_counter() - t0 < 5
            assert res.exit_code == 2 and "nest deeper than 64 levels" in res.output, res.output
            assert len(res.output.strip().splitlines()) == 1
    finally:  # removed one level at a time: pytest's own clean-up (shutil.rmtree) recurses
        while p != str(deep):
            os.rmdir(p)
            p = os.path.dirname(p)


def _bias_off(root: Path, source: str, name: str, steps=None) -> Path:
    off = root / name
    shutil.copytree(root / "baseline", off)
    m = json.loads((off / "run.json").read_text())
    m.update(run_id=f"synthetic-{name}", factors={"variant": "saab_bias_off", "eval_bias": "off"}, source_run=source)
    if steps is not None:  # keep only these steps' attention
        import re

        keep = [f for f in m["files"] if not f["path"].startswith("attention/") or
                int(re.search(r"step=(\d+)", f["path"]).group(1)) in steps]
        for f in m["files"]:
            if f not in keep:
                (off / f["path"]).unlink()
                (off / f["path"]).parent.rmdir()
        m["files"] = keep
        m["attention"]["steps"] = {k: v for k, v in m["attention"]["steps"].items() if int(k) in steps}
    (off / "run.json").write_text(json.dumps(m))
    return off


@pytest.mark.parametrize("case", ["two bias-off runs", "source_run names no run", "no source_run"])
def test_a_pair_with_odd_bias_off_runs_stays_a_pair_and_says_why(tmp_path, case):
    # was: ValueError: The truth value of a Series is ambiguous; then read as a study of 3 runs with no effects
    # table (issue [no-escape]): a pair beside bias-off runs that are not its one evaluation is still the pair
    synthetic_pair(tmp_path, seed=3, n_examples=8)
    if case == "two bias-off runs":
        _bias_off(tmp_path, "synthetic-saab-seed3", "saab-bias-off")
        _bias_off(tmp_path, "synthetic-saab-seed3", "saab-bias-off-2")
    elif case == "source_run names no run":
        _bias_off(tmp_path, "synthetic-nothing-seed3", "saab-bias-off")
    else:
        off = _bias_off(tmp_path, "", "saab-bias-off")
        m = json.loads((off / "run.json").read_text())
        m.pop("source_run")
        (off / "run.json").write_text(json.dumps(m))
    res = CliRunner().invoke(app, ["table", "effects", str(tmp_path), "--format", "csv", *FAST])
    assert res.exit_code == 0 and "Traceback" not in res.output, res.output
    rep = rs.analyse(tmp_path, resamples=100, permutations=100, flow="off")
    assert "effects" in rep.tables() and "decomposition" not in rep.tables()
    why = {"two bias-off runs": "2 bias-off evaluations lie beside the pair",
           "source_run names no run": "names source_run 'synthetic-nothing-seed3', not the variant synthetic-saab-seed3",
           "no source_run": "names no source_run, not the variant synthetic-saab-seed3"}[case]
    assert why in rep.section("decomposition").skipped


def test_a_bias_off_run_at_another_step_is_left_out_with_a_line(tmp_path):
    # was: the decomposition was computed at step 50 beside step-100 tables, its caption naming no step
    synthetic_pair(tmp_path, seed=3, n_examples=12, steps=(50, 100))
    _bias_off(tmp_path, "synthetic-saab-seed3", "saab-bias-off", steps=(50,))
    rep = rs.analyse(tmp_path, resamples=100, permutations=100, flow="off")
    assert "decomposition" not in rep.tables()
    sec = rep.section("decomposition")
    assert "step 100" in sec.skipped and "holds attention at step 50 only" in sec.skipped
    at50 = rs.analyse(tmp_path, resamples=100, permutations=100, flow="off", step=50)
    assert at50.frame("decomposition")["mean_diff"].notna().all()


@pytest.mark.parametrize("name,value", [("ROUTESTATS_FIGURE_WORKERS", "abc"), ("ROUTESTATS_MAX_DECODE_MB", "inf"),
                                        ("ROUTESTATS_MAX_DECODE_RATIO", "-3"), ("ROUTESTATS_FIGURE_WORKERS", "1.5")])
def test_a_bad_environment_variable_is_one_line_naming_it(pair_dir, tmp_path, monkeypatch, name, value):
    # was: FIGURE_WORKERS=abc an internal error; MAX_DECODE_MB=inf blamed examples.parquet
    monkeypatch.setenv(name, value)
    for cmd in (["info", str(pair_dir)], ["report", str(pair_dir), "-o", str(tmp_path / "r"), *FAST]):
        res = CliRunner().invoke(app, cmd)
        assert res.exit_code == 2 and res.output.strip().startswith(f"error: {name}={value}: expected"), res.output
        assert "examples.parquet" not in res.output and len(res.output.strip().splitlines()) == 1


def test_a_file_changed_during_the_report_publishes_nothing(tmp_path, monkeypatch):
    # was: caught (no numbers mixed), but published with exit 0 and sections reading "Not computed: ... differs"
    from routestats.compose.pair import sections as secs

    synthetic_pair(tmp_path / "pair", seed=2, n_examples=8)
    original = secs.flow_section
    victim = tmp_path / "pair" / "saab" / "attention" / "step=000100" / "matrices.parquet"

    @secs.section("flow", secs.FLOW_TITLE)
    def swapping(ctx):  # another file renamed over the variant's matrices between the passes
        other = tmp_path / "other.parquet"
        shutil.copy(tmp_path / "pair" / "baseline" / "attention" / "step=000100" / "matrices.parquet", other)
        os.replace(other, victim)
        return original(ctx)

    monkeypatch.setattr(secs, "flow_section", swapping)
    res = CliRunner().invoke(app, ["report", str(tmp_path / "pair"), "-o", str(tmp_path / "out"), *FAST,
                                   "--flow", "on"])
    assert res.exit_code == 2 and "differs from run.json" in res.output, res.output
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.partial-*"))


def test_a_57_mb_record_is_refused_in_one_line_with_little_memory(tmp_path):
    # was: one 57 MB JSONL line took capture to 9 GB at --cap 32; a CSV field over 128 KiB an internal error
    pytest.importorskip("torch")
    import subprocess
    import sys

    big = tmp_path / "big.jsonl"
    with open(big, "w") as f:
        f.write(json.dumps({"label": "a", "title": "t", "content": "w " * (57 << 19)}) + "\n")
    # VmHWM, the process's own peak (ru_maxrss keeps the forking parent's across exec: the test runner's)
    code = ("import sys\nfrom runners.pretrained.records import read_records\nfrom routestats.errors import "
            "RoutestatsError\nrss = lambda: int(next(x for x in open('/proc/self/status') if x.startswith('VmHWM'))"
            ".split()[1]) // 1024\n"
            "print(rss())\ntry:\n    read_records(sys.argv[1], 'jsonl')\nexcept RoutestatsError as e:\n    print(e)\n"
            "print(rss())")
    out = subprocess.run([sys.executable, "-c", code, str(big)], capture_output=True, text=True, check=True).stdout
    imported_mb, message, peak_mb = out.strip().splitlines()
    assert message == f"{big}: line 1 is over the 8 MB record limit (--max-record-mb)", out
    # peak RSS (the imports, torch among them, about 300 MB of it) and what reading the record added
    assert int(peak_mb) < 500 and int(peak_mb) - int(imported_mb) < 64, out
    from runners.pretrained.records import read_records

    wide = tmp_path / "wide.csv"
    wide.write_text('label,title,content\n1,"a title","' + "x" * (200 << 10) + '"\n')
    assert len(read_records(wide, "dbpedia")[0].fields[1][1]) == 200 << 10  # 200 KiB: read (was: internal error)
    with pytest.raises(rs.RoutestatsError, match=r"wide.csv: a field near line 2 is over the 0.125 MB record limit"):
        read_records(wide, "dbpedia", max_bytes=1 << 17)


# ------------------------------------------------------------------ messages that say the reason
def test_a_layer_whose_heads_are_all_pruned_is_left_out_of_the_norm_weighted_table_and_said(tmp_path):
    # was: the whole norm-weighted and rollout section dropped under an unrelated reason
    import numpy as np

    from tests.test_flow import FIELD_LISTS, write_with_norms
    from tests.conftest import random_attention

    rng = np.random.default_rng(7)
    att = [random_attention(rng, 2, 3, len(g)) for g in FIELD_LISTS * 2]
    fields = FIELD_LISTS * 2
    norms = [rng.uniform(0.5, 2.0, (2, 3, len(g))) for g in fields]
    pruned = [n.copy() for n in norms]
    for n in pruned:
        n[1] = 0.0  # every head of layer 1 transports nothing in the variant
    write_with_norms(tmp_path / "b", att, fields, norms, run_id="b", variant="baseline")
    write_with_norms(tmp_path / "v", att, fields, pruned, run_id="v", variant="saab")
    rep = rs.analyse(tmp_path, resamples=100, permutations=100, flow="on")
    sec = rep.section("flow")
    assert not sec.skipped, sec.skipped
    norm = rep.frame("norm_effects")
    assert list(norm["layer"]) == [0]  # layer 1 left out, layer 0 kept
    assert "Layer 1 is left out: in one run every head of it transports nothing" in rep.table("norm_effects").caption
    assert list(rep.frame("rollout_effects")["layer"]) == [0, 1]


def test_a_one_example_pair_says_why_it_has_no_effects_table(tmp_path):
    # was: "this report has no table 'effects'" (it used to say paired inference needs at least 2 pairs)
    synthetic_pair(tmp_path, seed=1, n_examples=1)
    res = CliRunner().invoke(app, ["table", "effects", str(tmp_path), "--format", "csv", *FAST])
    assert res.exit_code == 2 and "at least 2" in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1


# ------------------------------------------------------------------ LaTeX for any string and any layout
@pytest.mark.slow
def test_latex_with_control_characters_and_wide_long_tables_compiles_in_one_and_two_columns(tmp_path):
    # was: control characters in a run id broke tables.tex; --wide on a 30-layer table emitted a longtable
    from tests.conftest import compile_tex, need
    from tests.test_report import PLAIN, TWOCOL

    pdflatex = need("pdflatex")
    b, v = synthetic_pair(tmp_path / "pair", seed=2, n_examples=10, n_layers=30, n_heads=2, length_range=(8, 12),
                          same_field_bias=[0.5] * 30, effect=[0.3] * 30)
    m = json.loads((v / "run.json").read_text())
    m["run_id"] = "saab\x1b[31m\x00\x07 run_1 \\ {x}"
    (v / "run.json").write_text(json.dumps(m))
    rep = rs.analyse(tmp_path / "pair", resamples=100, permutations=100, flow="off")
    folder = tmp_path / "tex"
    folder.mkdir()
    for name in ("layers", "layer_contrasts", "effects"):
        tex = reports.table_text(rep, name, "latex", wide=True)
        assert "longtable" not in tex and "\\begin{table*}" in tex and "\x1b" not in tex and "\x00" not in tex
        (folder / f"{name}.tex").write_text(tex)
        for doc, body in (("one", PLAIN), ("two", TWOCOL)):
            path = folder / f"{doc}-{name}.tex"
            path.write_text(body.format(body="\\input{" + name + ".tex}"))
            compile_tex(pdflatex, folder, path.name)
    contrasts = (folder / "layer_contrasts.tex").read_text()
    assert contrasts.count("\\begin{table*}") == 13 and "(rows 433–435 of 435)" in contrasts  # 435 rows, 36 a float
    reports.write(rep, tmp_path / "out", ("latex",))
    compile_tex(pdflatex, tmp_path / "out" / "tables", "tables.tex")


# ------------------------------------------------------------------ interrupted work leaves the folder usable
def test_a_killed_captures_partial_folder_neither_blocks_readers_nor_stays(tmp_path):
    # was: SIGTERM left .capture-partial-* inside --out; info and report refused the folder, later captures kept it
    synthetic_pair(tmp_path / "runs", seed=4, n_examples=6)
    stale = tmp_path / "runs" / ".capture-partial-999999999-abc"  # where an earlier release left it
    shutil.copytree(tmp_path / "runs" / "saab", stale / "saab")
    res = CliRunner().invoke(app, ["info", str(tmp_path / "runs")])
    assert res.exit_code == 0 and "2 runs" in res.output, res.output
    assert rs.analyse(tmp_path / "runs", resamples=100, permutations=100, flow="off").frame("effects") is not None
    pytest.importorskip("torch")
    from runners.pretrained.destination import sweep_partials

    beside = tmp_path / f".runs.capture-partial-{os.getpid()}-live"  # a capture still running: kept
    beside.mkdir()
    sweep_partials(tmp_path / "runs")
    assert not stale.exists() and beside.is_dir()


@pytest.mark.parametrize("with_marker", [False, True])
def test_a_dead_writers_folder_holding_a_users_file_is_refused_and_kept_whole(tmp_path, with_marker):
    """Issue [same-inputs]: a dead report writer's partial folder holding a user's NOTES.txt: the first report failed
    with "Directory not empty" after removing the marker, the second deleted the folder with the notes, exit 0.
    Now nothing is removed unless every entry is one the dead writer wrote: refused before any change, naming the
    file, twice over; once the notes are moved out, the folder goes and the report is written."""
    import json

    from routestats.rundir.atomic import sha256_file

    out = tmp_path / "out"
    stale = tmp_path / ".out.partial-999999999-abc"  # no such process
    (stale / "figures").mkdir(parents=True)
    (stale / "figures" / "answer.png").write_bytes(b"png")
    (stale / "report.html").write_text("<p>old</p>")
    if with_marker:  # a report the dead writer had finished (swapped aside)
        files = {f: sha256_file(stale / f) for f in ("figures/answer.png", "report.html")}
        (stale / ".routestats-report").write_text(json.dumps({"written_by": "routestats", "format": 2, "files": files}))
    (stale / "NOTES.txt").write_text("my notes")
    runner = CliRunner()
    for _ in range(2):
        r = runner.invoke(app, ["report", "data/demo_run", "-o", str(out), "--resamples", "100", "--permutations", "100"])
        assert r.exit_code == 2 and "NOTES.txt" in r.output and len(r.output.strip().splitlines()) == 1, r.output
        assert (stale / "NOTES.txt").read_text() == "my notes" and (stale / "report.html").is_file()
        assert (stale / ".routestats-report").is_file() == with_marker and not out.exists()
    (stale / "NOTES.txt").rename(tmp_path / "NOTES.txt")
    r = runner.invoke(app, ["report", "data/demo_run", "-o", str(out), "--resamples", "100", "--permutations", "100"])
    assert r.exit_code == 0, r.output
    assert not stale.exists() and (out / "report.html").is_file()


def test_an_output_name_too_long_for_its_temporary_sibling_is_refused_before_the_analysis(tmp_path):
    """Issue [same-inputs]: a 240-character report name failed after the analysis, naming the hidden temporary
    folder (.NAME.partial-PID-XXXXXXXX is over the file system's 255 bytes). Refused first, in one line."""
    from reports.folder import MAX_NAME_BYTES

    long = tmp_path / ("r" * 240)
    r = CliRunner().invoke(app, ["report", "data/demo_run", "-o", str(long)])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "at most 229" in r.output, r.output
    assert MAX_NAME_BYTES == 229 and not list(tmp_path.iterdir())
    ok = tmp_path / ("r" * MAX_NAME_BYTES)  # the longest name allowed is written
    r = CliRunner().invoke(app, ["report", "data/demo_run", "-o", str(ok), "--resamples", "100", "--permutations", "100"])
    assert r.exit_code == 0 and (ok / "report.html").is_file(), r.output
