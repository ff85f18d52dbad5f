"""No writer ever touches a path outside its own folder (issue [no-escape]).

Each case is the adversary's: a report marker, a stale partial folder or a run's ``run.json`` naming a file
outside the folder (relative, absolute, dotted, through a link), or a marker that is a FIFO or a link to
``/dev/zero``. A victim file outside the output folder, whose SHA-256 the planted list gives correctly (so the
old rule would have removed it), must survive byte for byte; the writer refuses in one line. Every case failed
before the fix (the removal unlinked ``folder / rel`` whenever the hash matched; the marker was read whole).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reports import folder as F
from routestats.cli import app
from routestats.errors import RoutestatsError
from routestats.rundir.replace import remove_written, replace_folder

ROOT = Path(__file__).resolve().parents[1]
VICTIM_BYTES = b"a user's file outside the output folder\n"
SHA = hashlib.sha256(VICTIM_BYTES).hexdigest()  # the hash an adversary can compute for a file of known content


@pytest.fixture
def victim(tmp_path) -> Path:
    p = tmp_path / "victim.txt"
    p.write_bytes(VICTIM_BYTES)
    return p


class Hung(BaseException):
    """Raised by the alarm: no ``except OSError`` (or ``Exception``) of the code under test can swallow it."""


@pytest.fixture(autouse=True)
def no_hang():
    """A FIFO read blocks forever: each test here must end within 20 s."""
    def boom(*_):
        raise Hung("hung (a FIFO or device was read)")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def fill(tmp: Path) -> dict:
    (tmp / "report.html").write_text("<p>new</p>")
    return {"html": tmp / "report.html"}


def old_report(out: Path, files: dict) -> None:
    """An earlier report folder whose marker lists ``files`` (relative path -> SHA-256)."""
    out.mkdir()
    (out / "report.html").write_text("<p>old</p>")
    listed = {"report.html": hashlib.sha256(b"<p>old</p>").hexdigest(), **files}
    (out / F.MARKER).write_text(json.dumps({"written_by": "routestats", "format": F.MARKER_FORMAT, "files": listed}))


def escapes(victim: Path, out: Path) -> dict[str, str]:
    """Every path form of the issue that names ``victim`` from inside ``out`` (a sibling of it)."""
    return {"dotted": "../victim.txt", "absolute": str(victim), "inner dots": "tables/../../victim.txt"}


@pytest.mark.parametrize("form", ["dotted", "absolute", "inner dots"])
def test_force_over_a_marker_naming_a_path_outside_refuses_and_removes_nothing(tmp_path, victim, form):
    out = tmp_path / "out"
    old_report(out, {escapes(victim, out)[form]: SHA})
    with pytest.raises(RoutestatsError, match="not a normalised relative path inside") as e:
        F.write_folder(out, fill, force=True)
    assert "\n" not in str(e.value)
    assert victim.read_bytes() == VICTIM_BYTES
    assert (out / "report.html").read_text() == "<p>old</p>"  # the old report untouched, nothing swapped


def test_force_over_a_marker_naming_a_file_through_a_link_refuses(tmp_path, victim):
    out = tmp_path / "out"
    old_report(out, {"tables/victim.txt": SHA})
    (out / "tables").symlink_to(tmp_path)  # tables/victim.txt is the victim, through a link inside the folder
    with pytest.raises(RoutestatsError, match="passes through a link"):
        F.write_folder(out, fill, force=True)
    assert victim.read_bytes() == VICTIM_BYTES


def test_a_marker_that_is_a_link_proves_nothing(tmp_path, victim):
    elsewhere = tmp_path / "elsewhere"
    old_report(elsewhere, {"victim.txt": SHA})
    out = tmp_path / "out"
    out.mkdir()
    (out / F.MARKER).symlink_to(elsewhere / F.MARKER)
    with pytest.raises(RoutestatsError):
        F.write_folder(out, fill, force=True)
    assert victim.read_bytes() == VICTIM_BYTES


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_marker_that_is_a_fifo_or_dev_zero_is_refused_at_once(tmp_path, kind):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.html").write_text("x")
    if kind == "fifo":
        os.mkfifo(out / F.MARKER)
    else:
        (out / F.MARKER).symlink_to("/dev/zero")
    with pytest.raises(RoutestatsError, match="not an earlier routestats report|proves nothing"):
        F.check_output(out, force=True)


def test_a_marker_listing_a_fifo_is_not_read(tmp_path):
    out = tmp_path / "out"
    old_report(out, {"pipe": SHA})
    os.mkfifo(out / "pipe")
    assert F.foreign_files(out) == ["pipe"]  # listed but not a regular file: not proven, and never read


def test_a_stale_partial_folder_naming_a_path_outside_refuses_a_plain_report(tmp_path, victim):
    out = tmp_path / "out"
    stale = tmp_path / f".{out.name}.partial-999999999-abc"  # no such process
    old_report(stale, {"../victim.txt": SHA, "../../victim.txt": SHA})
    with pytest.raises(RoutestatsError, match="not a normalised relative path"):
        F.check_output(out)
    with pytest.raises(RoutestatsError):
        F.write_folder(out, fill)
    assert victim.read_bytes() == VICTIM_BYTES and not out.exists()


def test_the_cli_refuses_in_one_line_with_exit_2_before_the_analysis(tmp_path, victim):
    out = tmp_path / "out"
    old_report(out, {"../victim.txt": SHA})
    r = CliRunner().invoke(app, ["report", "data/demo_run", "-o", str(out), "--force"])
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and "victim.txt" in r.output
    assert victim.read_bytes() == VICTIM_BYTES


def test_remove_written_is_the_gate_for_every_caller(tmp_path, victim):
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "ours.txt").write_bytes(VICTIM_BYTES)
    for bad in ("../victim.txt", str(victim), "a/../../victim.txt", "./ours.txt", ""):
        with pytest.raises(RoutestatsError):
            remove_written(inner, {"ours.txt": SHA, bad: SHA})
        assert (inner / "ours.txt").exists()  # all or nothing: the good entry stays too
    assert victim.read_bytes() == VICTIM_BYTES
    assert remove_written(inner, {"ours.txt": SHA}) == [] and not inner.exists()  # the rule still removes ours


def run_naming(folder: Path, rel: str) -> Path:
    """A capture-like run folder whose run.json lists ``rel`` with the victim's hash."""
    folder.mkdir(parents=True)
    (folder / "examples.parquet").write_bytes(b"x")
    files = [{"path": "examples.parquet", "sha256": hashlib.sha256(b"x").hexdigest(), "size": 1},
             {"path": rel, "sha256": SHA, "size": len(VICTIM_BYTES)}]
    (folder / "run.json").write_text(json.dumps({"schema_version": "1", "files": files, "pretrained": True,
                                                 "evaluation": {"kind": "pretrained"}}))
    return folder


@pytest.mark.parametrize("rel", ["../../victim.txt", "/ABS", "x/../../../victim.txt"])
def test_runners_replacing_runs_refuse_a_run_json_naming_a_path_outside(tmp_path, victim, rel):
    from runners.outputs import check_replaceable

    rel = str(victim) if rel == "/ABS" else rel
    out = tmp_path / "runs"
    run_naming(out / "baseline", rel)
    with pytest.raises(RoutestatsError, match="not a normalised relative path"):
        check_replaceable(out)  # capture --force, runners demo: before any work
    with pytest.raises(RoutestatsError):
        replace_folder(tmp_path, out, {rel: SHA})  # and the swap itself, before anything moves
    assert victim.read_bytes() == VICTIM_BYTES


def test_a_report_onto_a_folder_that_cannot_be_moved_says_nothing_changed(tmp_path, monkeypatch):
    """A mount point (EBUSY) or read-only parent: the old words said the new report was in place."""
    from routestats.rundir import replace

    out = tmp_path / "out"
    F.write_folder(out, fill)
    real = os.rename

    def busy(a, b):
        if Path(a) == out:
            raise OSError(errno.EBUSY, "Device or resource busy")
        return real(a, b)

    monkeypatch.setattr(replace, "exchange", lambda a, b: False)
    monkeypatch.setattr(replace.os, "rename", busy)
    with pytest.raises(RoutestatsError, match="nothing was changed") as e:
        F.write_folder(out, fill, force=True)
    assert "in place" not in str(e.value)
    assert (out / "report.html").read_text() == "<p>new</p>" and not list(tmp_path.glob(".out.partial-*"))


def test_json_of_a_run_is_read_only_as_a_bounded_regular_file(tmp_path):
    from routestats.rundir.manifest import read_json

    os.mkfifo(tmp_path / "run.json")
    with pytest.raises(RoutestatsError, match="FIFO"):
        read_json(tmp_path / "run.json")
    (tmp_path / "z.json").symlink_to("/dev/zero")
    with pytest.raises(RoutestatsError, match="link"):
        read_json(tmp_path / "z.json")
    (tmp_path / "big.json").write_text("[" + "0," * 600 + "0]")
    with pytest.raises(RoutestatsError, match="more than"):
        read_json(tmp_path / "big.json", limit=1000)


# ------------------------------------------------------------------ bounded inputs where capture reads them
def test_a_datasets_folder_naming_an_arrow_file_outside_is_refused(tmp_path):
    datasets = pytest.importorskip("datasets")
    from runners.pretrained.records import read_records

    datasets.disable_progress_bars()
    datasets.Dataset.from_dict({"title": ["a"], "content": ["b"]}).save_to_disk(tmp_path / "outside")
    datasets.Dataset.from_dict({"title": ["c"], "content": ["d"]}).save_to_disk(tmp_path / "ds")
    state = json.loads((tmp_path / "ds" / "state.json").read_text())
    arrow = next((tmp_path / "outside").glob("*.arrow"))
    for name in (f"../outside/{arrow.name}", str(arrow)):
        state["_data_files"] = [{"filename": name}]
        (tmp_path / "ds" / "state.json").write_text(json.dumps(state))
        with pytest.raises(RoutestatsError, match="not a normalised relative path inside the datasets folder"):
            read_records(tmp_path / "ds", None, ["title", "content"])
    (tmp_path / "dd").mkdir()
    (tmp_path / "dd" / "dataset_dict.json").write_text("[]")  # was: AttributeError ('list' object has no .get)
    with pytest.raises(RoutestatsError, match="names no splits"):
        read_records(tmp_path / "dd", None, ["title", "content"])
    (tmp_path / "dd" / "dataset_dict.json").write_text(json.dumps({"splits": ["../ds"]}))
    with pytest.raises(RoutestatsError, match="not a normalised relative path"):
        read_records(tmp_path / "dd", None, ["title", "content"], split="../ds")


def test_a_config_of_a_million_layers_is_refused_before_anything_is_built(tmp_path):
    pytest.importorskip("transformers")
    from runners.pretrained.load import read_checkpoint

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 1_000_000,
                                                      "hidden_size": 64, "num_attention_heads": 4}))
    with pytest.raises(RoutestatsError, match="describes 1000000 layers.*refused before building it"):
        read_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 64,
                                                      "hidden_size": 65536, "intermediate_size": 262144,
                                                      "num_attention_heads": 64}))
    # 64 x (4 x 65536^2 + 3 x 65536 x 262144) + 32,000 (llama's default vocabulary) x 65536 = 4.4001e12
    # parameters: 16,392 GiB in float32, above any machine here
    with pytest.raises(RoutestatsError, match=r"about 4,400.1 G parameters .* 16,392 GiB in float32, more than this "):
        read_checkpoint(tmp_path)


def test_a_tokenizer_beyond_the_models_vocabulary_is_named_as_not_belonging(tmp_path):
    pytest.importorskip("torch")
    T = pytest.importorskip("transformers")
    from runners.corpora import Record
    from runners.pretrained.capture import plan_capture
    from runners.pretrained.load import prepare_model
    from tests.tiny_models import config, tokenizer, words_of

    tok, ids = tokenizer(words_of(["alpha beta gamma delta epsilon zeta"]), "plain")
    cfg = config("llama", 5, ids)  # an embedding of 5 rows for a tokenizer of more ids
    model = T.AutoModel.from_config(cfg, attn_implementation="eager").eval()
    with pytest.raises(RoutestatsError, match="does not belong to the model") as e:
        loaded = prepare_model(model, tok)
        plan_capture(loaded, [Record("0", (("title", "alpha zeta"), ("content", "epsilon delta")))], fields=None,
                     cap=16, special="unnamed", truncation="only-last")
    assert "\n" not in str(e.value)


def test_a_decoder_capture_of_records_with_empty_fields_reports(tmp_path):
    """Was: capture of records whose content is empty, then `report`, ended in an internal error in
    highest_layers (KeyError: no example defines every layer); now the report is written and says why the paired
    sections are empty."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.tiny_models import save_tiny

    model = save_tiny("llama", tmp_path / "model", ["alpha beta gamma delta"])
    (tmp_path / "r.csv").write_text("title,content\n" + "alpha beta,\n" * 6)
    from runners.pretrained.capture import capture_runs
    from runners.pretrained.records import read_records
    from runners.pretrained.seam import Condition
    from runners.pretrained.load import load_model

    recs = read_records(tmp_path / "r.csv", "csv")
    capture_runs(load_model(model), recs, tmp_path / "runs", conditions=[Condition("baseline"),
                                                                        Condition("bias", bias=1.0)], cap=16)
    r = CliRunner().invoke(app, ["report", str(tmp_path / "runs"), "-o", str(tmp_path / "rep"), "--resamples", "100"])
    assert r.exit_code == 0 and "internal error" not in r.output, r.output
    import routestats as rs

    rep = rs.analyse(tmp_path / "runs", resamples=100)
    assert "sfm is undefined in every one of the 6 examples" in rep.section("effects").skipped

    r = CliRunner().invoke(app, ["table", "norm_effects", str(tmp_path / "runs")])  # reductions only: no matrices
    assert r.exit_code == 2 and "did you mean" not in r.output and "no table 'norm_effects' in this report" in r.output


# ------------------------------------------------------------------ messages that say what is true
def test_a_byte_order_mark_is_not_text_in_csv_or_jsonl(tmp_path):
    pytest.importorskip("torch")
    from runners.pretrained.records import read_records

    rows = (ROOT / "data" / "docstrings_dbpedia" / "val.csv").read_bytes().splitlines(keepends=True)[:3]
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbf" + b"".join(rows))  # as a spreadsheet saves it
    plain = read_records(ROOT / "data" / "docstrings_dbpedia" / "val.csv", "dbpedia", limit=3)
    assert read_records(tmp_path / "bom.csv", "dbpedia") == plain  # was: "its first row looks like a header"
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + b'{"title": "a b", "content": "c d"}\n')
    assert [dict(r.fields) for r in read_records(tmp_path / "bom.jsonl", "jsonl")] == [{"title": "a b", "content": "c d"}]
    (tmp_path / "bin.jsonl").write_bytes(b'{"title": "a"}\n\xff\xfe\x00binary\n')
    with pytest.raises(RoutestatsError, match="line 2 is not UTF-8 text"):
        read_records(tmp_path / "bin.jsonl", "jsonl")


def test_a_binary_or_odd_domain_file_is_one_line(tmp_path):
    pytest.importorskip("torch")
    from runners.training.domains import read_domain

    (tmp_path / "d.txt").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xd8")
    (tmp_path / "d.jsonl").write_text('{"text": "a"}\n[1, 2]\n')
    (tmp_path / "e.jsonl").write_text('{"text": "a"}\nnot json\n')
    for name, words in (("d.txt", "not UTF-8 text"), ("d.jsonl", 'line 2 is not an object with a "text" string'),
                        ("e.jsonl", "not JSONL")):
        with pytest.raises(RoutestatsError, match=words) as e:
            read_domain(tmp_path / name)
        assert "\n" not in str(e.value)


def test_slurm_off_a_cluster_is_one_line_before_anything(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from runners.launch import make_launcher

    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch, no srun
    with pytest.raises(RoutestatsError, match="--launcher slurm: no sbatch/srun on this machine"):
        make_launcher("slurm", tmp_path / "w")
    assert not (tmp_path / "w").exists()


def test_a_tampered_operator_index_is_refused_by_the_writer(tmp_path):
    pytest.importorskip("torch")
    from runners.regime.grid import kept_points

    (tmp_path / "index.json").write_text(json.dumps({"points": [{"layer": 0}]}))
    with pytest.raises(RoutestatsError, match="not an operator index routestats wrote"):
        kept_points(tmp_path, "0" * 64, {})
    (tmp_path / "index.json").write_text(json.dumps({"checkpoint_sha256": "0" * 64, "settings": {}, "points": [
        {"layer": 0, "example": 0, "token_arg": None, "file": "../victim.npz", "sha256": SHA}]}))
    with pytest.raises(RoutestatsError, match="not a normalised relative path inside the operators folder"):
        kept_points(tmp_path, "0" * 64, {})
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "index.json").unlink()
    (tmp_path / "index.json").symlink_to(tmp_path / "fifo.json")
    with pytest.raises(RoutestatsError, match="link"):
        kept_points(tmp_path, "0" * 64, {})


@pytest.fixture
def mount_point(tmp_path):
    """A tmpfs mounted at tmp_path/mnt (root only: skipped where mounting is not allowed)."""
    import subprocess

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "none", str(mnt)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield mnt
    subprocess.run(["umount", str(mnt)], capture_output=True)


def test_a_mount_point_is_refused_before_any_work_by_report_and_capture(mount_point):
    # was: report --force "the new report is in place, but the old one could not be cleared"; capture "Invalid
    # cross-device link" after the whole capture
    with pytest.raises(RoutestatsError, match="is a mount point, and a report folder is swapped into place whole"):
        F.check_output(mount_point, force=True)
    pytest.importorskip("torch")
    from runners.pretrained.destination import check_destination

    with pytest.raises(RoutestatsError, match="is a mount point; the runs are written beside --out"):
        check_destination(mount_point, ["baseline"], force=True, cli=True)


def test_a_marker_of_many_entries_is_checked_in_linear_time(tmp_path):
    """Issue [same-inputs]: a planted marker of 400,000 entries made `report --force` take 522 s (every entry's folders
    checked and resolved again). The folders an entry passes through are proved once for all entries below them:
    10 times the entries take at most about 10 times as long (a quadratic rule would take 100 times), and a link
    on the way is still refused."""
    import time

    from routestats.rundir.replace import check_written

    def took(n):
        files = {f"tables/part{i % 7}/t{i}.csv": SHA for i in range(n)}
        t = time.process_time()
        check_written(tmp_path, files)
        return time.process_time() - t

    took(2_000)  # warm
    small, large = min(took(5_000) for _ in range(3)), min(took(50_000) for _ in range(2))
    assert large < 25 * max(small, 1e-3), (small, large)
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "part3").symlink_to(tmp_path.parent)
    with pytest.raises(RoutestatsError, match="passes through a link"):
        check_written(tmp_path, {"tables/part1/a.csv": SHA, "tables/part3/b.csv": SHA})
