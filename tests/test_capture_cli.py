"""``python -m runners capture`` refuses bad input in one line (exit 2) before anything is written,
and never destroys a folder it did not write. Tiny models from tests/tiny_models.py (no download);
the CLI runs in-process through ``runners.__main__.main`` (its real exit codes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from tests.conftest import random_attention, runners_cli, write_run  # noqa: E402
from tests.tiny_models import save_tiny  # noqa: E402

pytestmark = pytest.mark.torch
ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "data" / "docstrings_dbpedia" / "val.csv"
TEXTS = [ln for ln in RECORDS.read_text().splitlines()[:8]]


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return save_tiny("bert", tmp_path_factory.mktemp("bert") / "model", TEXTS)


def run_cli(args, capsys) -> tuple[int, str, str]:
    return runners_cli(["capture", "--threads", "1", *args], capsys)


def tree_bytes(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_an_intervention_on_an_observed_model_is_refused_before_anything_is_written(tmp_path, capsys):
    # no list of names decides: MPNet adds a relative-position bias in its own attention module, outside
    # transformers' AttentionInterface; the load probe finds that, so capture observes its own weights
    # (issue [every-model]) and refuses --bias in one line, before anything is written
    import json

    from tests.tiny_models import tokenizer

    folder = tmp_path / "mpnet"
    tok, ids = tokenizer(["alpha", "beta"], "bert")
    cfg = T.MPNetConfig(vocab_size=len(tok) + 4, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, pad_token_id=ids["pad"])
    T.AutoModel.from_config(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    base = ["--model", folder, "--records", RECORDS, "--limit", "2"]
    code, _, err = run_cli([*base, "--out", tmp_path / "out", "--bias", "1"], capsys)
    assert code == 2 and len(err.strip().splitlines()) <= 3, err  # "loading ...", "loaded ...", the refusal
    assert "MPNetModel does not route its attention through transformers' AttentionInterface" in err
    assert "--bias and --ablate are refused" in err and not (tmp_path / "out").exists()
    code, _, err = run_cli([*base, "--out", tmp_path / "observed"], capsys)
    assert code == 0, err
    ev = json.loads((tmp_path / "observed" / "baseline" / "run.json").read_text())["evaluation"]["capture"]
    assert ev["path"] == "observed"


def test_a_config_the_seam_cannot_capture_is_refused(tmp_path, capsys):
    folder = tmp_path / "gpt2"
    cfg = T.GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_positions=32, reorder_and_upcast_attn=True)
    T.AutoModel.from_config(cfg).save_pretrained(folder)
    code, _, err = run_cli(["--model", folder, "--records", RECORDS, "--out", tmp_path / "out"], capsys)
    assert code == 2 and "reorder_and_upcast_attn" in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("extra, says", [
    (["--ablate", "0.99"], "--ablate 0.99: BertModel has layers 0-1 and heads 0-3"),
    (["--ablate", "x.y"], "--ablate 'x.y': expected LAYER.HEAD"),
    (["--ablate", "99.0"], "--ablate 99.0: BertModel has layers 0-1"),
    (["--layers", "7"], "--layers 7: BertModel has layers 0-1"),
    (["--cap", "5000"], "--cap 5000 exceeds the 512 positions"),
    (["--truncation", "middle"], "--truncation must be one of only-last, longest-first"),
    (["--batch-size", "0"], "--batch-size must be at least 1"),
    (["--forms", "everything"], "--forms 'everything': expected reductions and/or matrices"),
])
def test_bad_options_exit_2_in_one_line(bert, tmp_path, capsys, extra, says):
    code, _, err = run_cli(["--model", bert, "--records", RECORDS, "--out", tmp_path / "out", "--limit", "3",
                            *extra], capsys)
    assert code == 2, err
    assert says in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_records_that_are_not_utf8_are_refused(bert, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b'"1","t\xff\xfe","content"\n')
    code, _, err = run_cli(["--model", bert, "--records", bad, "--out", tmp_path / "out"], capsys)
    assert code == 2 and "not UTF-8" in err


def test_a_folder_of_trained_runs_is_never_replaced(bert, tmp_path, capsys, rng):
    out = tmp_path / "runs"

    write_run(out / "baseline", [random_attention(rng, 2, 2, 4)], [[4, 4, 3, 3]])
    (out / "NOTES.txt").write_text("mine")
    before = tree_bytes(out)
    for force in ([], ["--force"]):
        code, _, err = run_cli(["--model", bert, "--records", RECORDS, "--out", out, "--limit", "3", *force], capsys)
        assert code == 2, err
        assert tree_bytes(out) == before  # every byte in place
    assert "not a run written by capture" in err


def test_an_existing_run_is_refused_naming_the_callers_option(tmp_path):
    # was: "pass --force" to Python callers of capture_runs, who pass force=True
    from routestats.errors import RoutestatsError
    from runners.pretrained.destination import check_destination

    (tmp_path / "baseline").mkdir()
    with pytest.raises(RoutestatsError, match=r"baseline: exists; pass force=True to replace it") as python:
        check_destination(tmp_path, ["baseline"], False)
    assert "--force" not in str(python.value)
    with pytest.raises(RoutestatsError, match=r"baseline: exists; pass --force to replace it"):
        check_destination(tmp_path, ["baseline"], False, cli=True)
    with pytest.raises(RoutestatsError, match=r"not a run written by capture .*; choose another out$"):
        check_destination(tmp_path, ["baseline"], True)
    with pytest.raises(RoutestatsError, match=r"choose another --out$"):
        check_destination(tmp_path, ["baseline"], True, cli=True)


def test_force_replaces_only_earlier_captures_atomically(bert, tmp_path, capsys):
    out = tmp_path / "cap"
    args = ["--model", bert, "--records", RECORDS, "--out", out, "--limit", "3", "--cap", "20", "--bias", "1"]
    assert run_cli(args, capsys)[0] == 0
    first = json.loads((out / "bias" / "run.json").read_text())
    code, _, err = run_cli(args, capsys)
    assert code == 2 and "exists; pass --force" in err
    assert run_cli([*args, "--force"], capsys)[0] == 0
    again = json.loads((out / "bias" / "run.json").read_text())
    assert again["created"] >= first["created"] and [p.name for p in out.iterdir()] == ["baseline", "bias"] or \
        sorted(p.name for p in out.iterdir()) == ["baseline", "bias"]
    ev = again["evaluation"]
    assert ev["capture"]["inputs"] == ["input_ids", "token_type_ids", "attention_mask"]
    assert ev["truncation"]["policy"] == "only-last" and ev["truncation"]["examples_truncated"] >= 1
    assert np.isfinite(ev["seconds"])


def test_a_checkpoint_pair_pairs_by_content_and_refuses_other_tokenizers(bert, tmp_path, capsys):
    import routestats as rs

    tuned = save_tiny("bert", tmp_path / "tuned", TEXTS, seed=1)  # the same tokenizer, other weights
    out = tmp_path / "pair"
    code, _, err = run_cli(["--model", bert, "--compare", tuned, "--records", RECORDS, "--out", out, "--limit", "4",
                            "--cap", "20"], capsys)
    assert code == 2 and "--reason is required" in err
    code, _, err = run_cli(["--model", bert, "--compare", tuned, "--reason", "seed 1 vs seed 0 weights", "--records",
                            RECORDS, "--out", out, "--limit", "4", "--cap", "20"], capsys)
    assert code == 0, err
    pair = rs.load_runs(out).pairs()[0]
    assert pair.variant.factors["variant"] == "compare"
    assert pair.variant.manifest["pairing"]["reason"] == "seed 1 vs seed 0 weights"
    assert pair.baseline.manifest["model"]["weights_id"] != pair.variant.manifest["model"]["weights_id"]
    other = save_tiny("bert", tmp_path / "othertok", TEXTS + ["entirely new words zebra quokka"], seed=1)
    code, _, err = run_cli(["--model", bert, "--compare", other, "--reason", "x", "--records", RECORDS, "--out",
                            tmp_path / "p2", "--limit", "4", "--cap", "20"], capsys)
    assert code == 2 and "tokenizers encode record" in err and not (tmp_path / "p2").exists()


class _Payload:  # what a hostile checkpoint would unpickle (never constructed by capture)
    def __reduce__(self):
        return (print, ("unpickled!",))


def test_a_pickled_checkpoint_with_code_is_refused_in_one_line(bert, tmp_path, capsys):
    import shutil

    folder = tmp_path / "pickled"
    shutil.copytree(bert, folder)
    for f in folder.glob("*.safetensors"):
        f.unlink()
    torch.save({"bert.embeddings.word_embeddings.weight": _Payload()}, folder / "pytorch_model.bin")
    code, out, err = run_cli(["--model", folder, "--records", RECORDS, "--out", tmp_path / "out", "--limit", "2"], capsys)
    assert code == 2 and "unpickled!" not in out + err  # refused by the weights-only loader, not run
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("error")]
    assert len(lines) == 1 and "cannot load the model" in lines[0] and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_remote_code_is_never_run(bert, tmp_path, capsys):
    import shutil

    folder = tmp_path / "remote"
    shutil.copytree(bert, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["auto_map"] = {"AutoModel": "evil.EvilModel", "AutoConfig": "evil.EvilConfig"}
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "evil.py").write_text("raise SystemExit('remote code ran')\n")
    code, out, err = run_cli(["--model", folder, "--records", RECORDS, "--out", tmp_path / "out", "--limit", "2"], capsys)
    assert "remote code ran" not in out + err  # trust_remote_code is never set: the model's own class or a refusal
    if code != 0:
        assert code == 2 and "Traceback" not in err


def test_a_capture_that_fails_midway_leaves_the_earlier_runs_in_place(bert, tmp_path, capsys, monkeypatch):
    # was: a capture failing after its writers opened left incomplete runs where complete ones were, and a full
    # disk said "Error writing bytes to file ..." naming no folder
    from routestats.rundir.write import RunWriter

    out = tmp_path / "cap"
    args = ["--model", bert, "--records", RECORDS, "--out", out, "--limit", "3", "--cap", "20", "--bias", "1"]
    assert run_cli(args, capsys)[0] == 0
    before = tree_bytes(out)
    calls = []

    def full_disk(self, *a, **k):  # the second run's manifest cannot be written
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(self, *a, **k)

    real = RunWriter.finalize
    monkeypatch.setattr(RunWriter, "finalize", full_disk)
    code, _, err = run_cli([*args, "--force"], capsys)
    assert code == 2 and len(calls) == 2, err
    assert f"error: {out}: could not write the runs (No space left on device); nothing was changed" in err
    assert tree_bytes(out) == before  # both complete runs, byte for byte; no partial folder left beside them
    fresh = tmp_path / "fresh"
    calls.clear()
    code, _, err = run_cli(["--model", bert, "--records", RECORDS, "--out", fresh, "--limit", "3", "--cap", "20",
                            "--bias", "1"], capsys)
    assert code == 2 and not fresh.exists()  # the folder made for the capture is gone again


@pytest.mark.parametrize("config", ['{"model_type": "bert", "hidden_size": "x"', '{"model_type": "bert", '
                                    '"hidden_size": -5}', "[1, 2]"])
def test_a_broken_config_json_is_one_line(bert, tmp_path, capsys, config):
    # was: a traceback from transformers for each of these
    import shutil

    folder = tmp_path / "broken"
    shutil.copytree(bert, folder)
    (folder / "config.json").write_text(config)
    code, _, err = run_cli(["--model", folder, "--records", RECORDS, "--out", tmp_path / "out", "--limit", "2"], capsys)
    errors = [ln for ln in err.splitlines() if ln.startswith("error")]
    assert code == 2 and len(errors) == 1 and "cannot load the model" in errors[0] and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_force_keeps_a_capture_run_that_holds_a_users_file(bert, tmp_path, capsys):
    # --force replaces an earlier capture only when it holds nothing but that capture's own files
    out = tmp_path / "cap"
    args = ["--model", bert, "--records", RECORDS, "--out", out, "--limit", "3", "--cap", "20"]
    assert run_cli(args, capsys)[0] == 0
    (out / "baseline" / "NOTES.txt").write_text("mine")
    before = tree_bytes(out)
    code, _, err = run_cli([*args, "--force"], capsys)
    assert code == 2 and "holds files no run there wrote (NOTES.txt)" in err, err
    assert tree_bytes(out) == before


def test_a_stored_subset_of_layers_keeps_the_models_layer_numbers(bert, tmp_path, capsys):
    # the expected numbers are the full capture's own rows at layer 1: a subset run must label its one stored
    # layer 1 (not 0) and measure exactly what the full run measures there
    import routestats as rs

    args = ["--records", RECORDS, "--limit", "6", "--cap", "20", "--bias", "2", "--forms", "reductions,matrices"]
    assert run_cli(["--model", bert, "--out", tmp_path / "all", *args], capsys)[0] == 0
    assert run_cli(["--model", bert, "--out", tmp_path / "one", "--layers", "1", *args], capsys)[0] == 0
    one = rs.load_run(tmp_path / "one" / "baseline")
    assert one.capture["layers_stored"] == [1] and one.capture["model_layers"] == 2
    assert {int(b.layer[0]) for b in one.iter_attention()} == {1}
    full = rs.analyse(tmp_path / "all", resamples=200, permutations=200, flow="on")
    part = rs.analyse(tmp_path / "one", resamples=200, permutations=200, flow="on")
    for name in ("layers", "effects"):
        a, b = full.frame(name), part.frame(name)
        assert sorted(set(b["layer"])) == [1]
        want = a[a["layer"] == 1].reset_index(drop=True)
        np.testing.assert_allclose(b["mean_diff" if name == "effects" else "sfm"].to_numpy(),
                                   want["mean_diff" if name == "effects" else "sfm"].to_numpy(), rtol=0, atol=1e-12)
    assert "rollout_effects" in full.tables() and "rollout_effects" not in part.tables()
    text = part.methods + " ".join(str(s.text) for s in part.sections)
    assert "Only layers 1 of its 2 were stored" in text and "Rollout is not computed" in text
    assert "layer 1 of 2 × 4 heads" in part.subtitle and "2 layers × 4 heads" in full.subtitle
    # one stored layer: no highest layer is claimed, the table's runner-up cells are empty
    assert any("One layer in the baseline: layer 1" in c.sentence for c in part.claims if c.holds)
    assert part.frame("highest_layer")["runner_up"].isna().all()


def test_the_kernel_dtype_option_reaches_the_run_and_a_bad_one_is_refused(bert, tmp_path, capsys):
    # issue [fused-capture], [capture-floor]: the default kernel (the model's precision: float32 weights, a float32
    # kernel, held to twice the model's own gap, at least 1e-5) and --kernel-dtype float64 (1e-6) from the command
    # line to the run's record; a dtype the fused path does not have, or a float32 kernel without a fused path, is
    # refused in one line before anything is written
    base = ["--model", bert, "--records", RECORDS, "--limit", "3", "--cap", "24", "--attention", "fused"]
    for name, extra in (("f32", []), ("f64", ["--kernel-dtype", "float64"])):
        code, _, err = run_cli([*base, "--out", tmp_path / name, *extra], capsys)
        assert code == 0, err
    read = lambda name: json.loads((tmp_path / name / "baseline" / "run.json").read_text())[  # noqa: E731
        "evaluation"]["capture"]["attention"]
    att = read("f32")
    own = att["probe"]["model_reductions_max_abs"]
    assert att["path"] == "fused" and att["kernel_dtype"] == "float32"
    assert att["probe"]["reductions_bound"] == pytest.approx(max(2 * own, 1e-5), rel=1e-12)
    att = read("f64")
    assert att["kernel_dtype"] == "float64" and att["probe"]["reductions_bound"] == 1e-6
    for extra, why in ((["--kernel-dtype", "float16"],
                        "--kernel-dtype must be model, float64 or float32, got 'float16'"),
                       (["--kernel-dtype", "float32", "--attention", "eager"],
                        "--attention eager has no fused kernel")):
        code, _, err = run_cli([*base, "--out", tmp_path / "bad", *extra], capsys)
        assert code == 2 and why in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "bad").exists(), err


@pytest.mark.parametrize("shards", [1, 2])
def test_a_capture_command_checks_its_destination_once(bert, tmp_path, capsys, monkeypatch, shards):
    """Issue [honest-gates] 4: the command checked the destination before loading the model and every capture
    function checked it again (three times a sharded command); now the command's check is handed down."""
    import runners.pretrained.command as command
    import runners.pretrained.destination as destination

    calls = []
    real = destination.check_destination

    def counted(*a, **k):
        calls.append(a[0])
        return real(*a, **k)

    monkeypatch.setattr(destination, "check_destination", counted)
    monkeypatch.setattr(command, "check_destination", counted)
    out = tmp_path / "cap"
    args = ["--model", bert, "--records", RECORDS, "--out", out, "--limit", "4", "--cap", "20", "--shards", str(shards)]
    assert run_cli(args, capsys)[0] == 0 and (out / "baseline" / "run.json").exists()
    # once for the runs the command writes; a sharded capture's own shard runs are other folders
    assert [p for p in calls if Path(p) == out] == [out]


@pytest.mark.parametrize("force", [False, True])
def test_a_run_made_at_the_destination_during_a_capture_is_never_replaced(bert, tmp_path, force):
    """The destination is checked once before the work (issue [honest-gates] 4) and again at the swap: a trained run
    that appears at out/baseline while the model runs is refused there in one line, with or without force; it is
    left byte for byte as it was, and the new runs are kept beside ``out``, where the refusal says."""
    from routestats.errors import RoutestatsError
    from runners.pretrained.capture import capture_runs
    from runners.pretrained.load import load_model
    from runners.pretrained.records import read_records
    from runners.pretrained.seam import Condition

    out = tmp_path / "cap"
    trained = out / "baseline"
    rng = np.random.default_rng(0)

    def appear(*_):  # the progress callback: called while the model runs, after the first check
        if not trained.exists():
            write_run(trained, [random_attention(rng, 2, 2, 4)], [[4, 4, 3, 3]], run_id="trained")

    loaded = load_model(bert)
    with pytest.raises(RoutestatsError) as err:
        capture_runs(loaded, read_records(RECORDS, limit=2), out, conditions=[Condition("baseline")], cap=20,
                     force=force, progress=appear)
    said = str(err.value)
    # the refusal is the swap-time check's own words: a folder that exists (no force) or that no capture wrote
    assert ("exists; pass force=True" if not force else "is not a run written by capture") in said, said
    assert "; it appeared or changed during the capture, so nothing under" in said and len(said.splitlines()) == 1
    kept = Path(said.rsplit("the new runs are in ", 1)[1])
    assert json.loads((trained / "run.json").read_text())["run_id"] == "trained"  # the trained run untouched
    assert (kept / "baseline" / "run.json").exists() and kept.parent == tmp_path  # the new run kept beside out
    assert json.loads((kept / "baseline" / "run.json").read_text())["pretrained"] is True
    assert not list(tmp_path.glob(".cap.capture-partial-*"))  # no staging folder left behind


def test_a_refusal_at_the_swap_speaks_the_command_line_and_keeps_the_runs_readable(tmp_path):
    """The swap's check says --force and --out to a command-line capture (the Destination remembers it was checked
    for one), and the folder that keeps the new runs is readable as the user's umask makes folders (mkdtemp's 0700
    would hide them from a shared group)."""
    import os
    import stat

    from routestats.errors import RoutestatsError
    from runners.pretrained.destination import check_destination, staging

    out = tmp_path / "runs"
    dest = check_destination(out, ["baseline"], False, cli=True)
    with pytest.raises(RoutestatsError) as err:
        with staging(dest) as tmp:
            (tmp / "baseline").mkdir()
            (tmp / "baseline" / "run.json").write_text("{}")
            (out / "baseline").mkdir()  # another process made it meanwhile
    said = str(err.value)
    assert said.startswith(f"{out / 'baseline'}: exists; pass --force to replace it") and "force=True" not in said
    kept = Path(said.rsplit("the new runs are in ", 1)[1])
    assert (kept / "baseline" / "run.json").read_text() == "{}" and not any((out / "baseline").iterdir())
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(kept.stat().st_mode) == 0o777 & ~mask
