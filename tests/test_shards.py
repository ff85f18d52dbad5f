"""Sharded capture (issue [long-context]): records split into shards, each captured as a job, merged into one run
per condition that reports exactly as the unsharded capture; a rerun skips finished shards.

The expected tables are the unsharded capture's own (the same model, records and options, one process)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import routestats as rs  # noqa: E402
from runners.launch import SequentialLauncher  # noqa: E402
from runners.pretrained.capture import capture_runs  # noqa: E402
from runners.pretrained.records import read_records  # noqa: E402
from runners.pretrained.seam import Condition  # noqa: E402
from runners.pretrained.load import load_model  # noqa: E402
from runners.pretrained.shards import capture_in_shards  # noqa: E402
from tests.tiny_models import save_tiny  # noqa: E402

pytestmark = pytest.mark.torch
ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "data" / "docstrings_dbpedia" / "val.csv"
RECORDS = read_records(CSV, "dbpedia", limit=10)
TEXTS = [t for r in RECORDS for t in dict(r.fields).values()]
CONDS = [Condition("baseline"), Condition("bias", bias=1.0)]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return save_tiny("llama", tmp_path_factory.mktemp("llama") / "model", TEXTS)


def tables(out: Path) -> dict:
    rep = rs.analyse(out, resamples=200, permutations=200)
    return {name: frame.reset_index(drop=True) for name, frame in rep.tables().items()}


def assert_same_tables(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].equals(b[name]), name


class FailingOnce(SequentialLauncher):
    """Runs the jobs here, but the job named ``fail`` dies (as a killed shard would)."""

    def __init__(self, fail: str):
        super().__init__()
        self.fail = fail

    def run(self, jobs):
        from runners.launch import Job

        def killed(**_):
            raise RuntimeError("killed")

        return super().run([Job(j.name, killed, j.kwargs) if j.name == self.fail else j for j in jobs])


@pytest.mark.parametrize("forms", [("reductions",), ("reductions", "matrices")])
def test_three_shards_report_as_one_capture_and_a_killed_shard_is_all_a_rerun_repeats(llama, tmp_path, forms):
    kw = dict(conditions=CONDS, cap=24, forms=forms, batch_size=4)
    capture_runs(load_model(llama), RECORDS, tmp_path / "whole", **kw)
    said = []
    with pytest.raises(rs.RoutestatsError, match="1 of 3 shards failed, shard-1: RuntimeError: killed; rerun the same command"):
        capture_in_shards(llama, RECORDS, tmp_path / "sharded", shards=3, launcher=FailingOnce("shard-1"),
                          echo=said.append, **kw)
    work = tmp_path / ".sharded.capture-shards"
    assert sorted(p.name for p in work.iterdir()) == ["shard-0", "shard-2", "shards.json"]
    assert not (tmp_path / "sharded").exists()  # nothing under --out until every shard is in
    capture_in_shards(llama, RECORDS, tmp_path / "sharded", shards=3, echo=said.append, **kw)
    assert said == ["shards: 1 captured, 2 already complete; merging"]
    assert not work.exists()
    assert_same_tables(tables(tmp_path / "whole"), tables(tmp_path / "sharded"))
    merged = rs.load_run(tmp_path / "sharded" / "bias")
    whole = rs.load_run(tmp_path / "whole" / "bias")
    assert merged.data_order_id == whole.data_order_id and merged.init_id == whole.init_id
    assert merged.manifest["evaluation"]["capture"]["attention"]["shards"] == 3
    assert merged.validate(deep=True)


def test_a_folder_of_another_commands_shards_is_refused(llama, tmp_path):
    kw = dict(conditions=CONDS[:1], cap=24)
    with pytest.raises(rs.RoutestatsError, match="killed"):
        capture_in_shards(llama, RECORDS, tmp_path / "out", shards=2, launcher=FailingOnce("shard-1"), **kw)
    with pytest.raises(rs.RoutestatsError, match="holds the shards of another capture"):
        capture_in_shards(llama, RECORDS, tmp_path / "out", shards=2, conditions=CONDS[:1], cap=20)
    with pytest.raises(rs.RoutestatsError, match="--shards must be between 1 and the 10 records, got 11"):
        capture_in_shards(llama, RECORDS, tmp_path / "other", shards=11, **kw)


def test_submitit_local_shards_from_the_command_line(llama, tmp_path, capsys):
    pytest.importorskip("submitit")
    from tests.conftest import runners_cli

    args = ["capture", "--threads", "1", "--model", llama, "--records", CSV, "--limit", "10", "--cap", "24",
            "--bias", "1"]
    assert runners_cli([*args, "--out", tmp_path / "whole"], capsys)[0] == 0
    code, out, err = runners_cli([*args, "--out", tmp_path / "sharded", "--shards", "3", "--launcher",
                                  "submitit-local", "--timeout-min", "10"], capsys)
    assert code == 0, err
    assert "shards: 3 captured, 0 already complete; merging" in err and "MB per record" in out
    assert_same_tables(tables(tmp_path / "whole"), tables(tmp_path / "sharded"))
    assert not (tmp_path / ".sharded.capture-shards").exists()


def test_swapped_or_foreign_shard_folders_are_recaptured_never_merged(llama, tmp_path):
    """Issue [no-escape]: swapped shard folders were merged (examples held other records' attention), and a
    shard of a --bias 3 command merged into a --bias 1 capture, whose run then said 1.0. Each shard now proves
    its slice and options (shard.json), and the merge checks the runs' own records and conditions."""
    import json
    import shutil

    kw = dict(conditions=CONDS, cap=24)
    capture_runs(load_model(llama), RECORDS, tmp_path / "whole", **kw)
    with pytest.raises(rs.RoutestatsError, match="killed"):
        capture_in_shards(llama, RECORDS, tmp_path / "out", shards=3, launcher=FailingOnce("shard-2"), **kw)
    work = tmp_path / ".out.capture-shards"
    (work / "shard-0").rename(work / "tmp")
    (work / "shard-1").rename(work / "shard-0")
    (work / "tmp").rename(work / "shard-1")  # swapped: 4 and 3 records, each in the other's place
    said = []
    capture_in_shards(llama, RECORDS, tmp_path / "out", shards=3, echo=said.append, **kw)
    assert said == ["shards: 3 captured, 0 already complete; merging"]  # both swapped shards recaptured
    assert_same_tables(tables(tmp_path / "whole"), tables(tmp_path / "out"))

    # a shard of another command (--bias 3) copied in, with this command's shard.json forged beside it
    strong = [CONDS[0], Condition("bias", bias=3.0)]
    with pytest.raises(rs.RoutestatsError, match="killed"):
        capture_in_shards(llama, RECORDS, tmp_path / "other", shards=3, launcher=FailingOnce("shard-2"),
                          conditions=strong, cap=24)
    with pytest.raises(rs.RoutestatsError, match="killed"):
        capture_in_shards(llama, RECORDS, tmp_path / "again", shards=3, launcher=FailingOnce("shard-2"), **kw)
    mine, theirs = tmp_path / ".again.capture-shards", tmp_path / ".other.capture-shards"
    forged = json.loads((mine / "shard-1" / "shard.json").read_text())
    shutil.rmtree(mine / "shard-1")
    shutil.copytree(theirs / "shard-1", mine / "shard-1")
    (mine / "shard-1" / "shard.json").write_text(json.dumps(forged))
    with pytest.raises(rs.RoutestatsError, match=r"shard-1: its bias run holds other records or options than this "
                                                 r"capture's records 4-6 .*removed, rerun") as e:
        capture_in_shards(llama, RECORDS, tmp_path / "again", shards=3, **kw)
    assert "\n" not in str(e.value) and not (tmp_path / "again").exists()
    capture_in_shards(llama, RECORDS, tmp_path / "again", shards=3, **kw)  # the rerun recaptures it
    assert rs.load_run(tmp_path / "again" / "bias").manifest["evaluation"]["bias"] == 1.0
    assert_same_tables(tables(tmp_path / "whole"), tables(tmp_path / "again"))


def test_a_fifo_or_link_as_the_shards_identity_is_refused_not_waited_on(llama, tmp_path):
    """Issue [no-escape]: a FIFO shards.json hung capture (read whole before any check)."""
    import os
    import signal

    work = tmp_path / ".out.capture-shards"
    work.mkdir()
    os.mkfifo(work / "shards.json")
    old = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(AssertionError("hung on the FIFO")))
    signal.alarm(20)
    try:
        with pytest.raises(rs.RoutestatsError, match="holds the shards of another capture"):
            capture_in_shards(llama, RECORDS, tmp_path / "out", shards=2, conditions=CONDS[:1], cap=24)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    (work / "shards.json").unlink()
    (work / "shards.json").symlink_to("/dev/zero")
    with pytest.raises(rs.RoutestatsError, match="holds the shards of another capture"):
        capture_in_shards(llama, RECORDS, tmp_path / "out", shards=2, conditions=CONDS[:1], cap=24)


def test_a_shard_is_kept_only_if_the_same_model_made_it(llama, tmp_path):
    """Issue [same-inputs]: a shard proved its records and options, not the model. (1) Weights replaced in the
    --model folder between a killed sharded capture and its rerun: the old weights' shard was merged; now the rerun
    is refused, naming the model's content. (2) A shard another model of the same architecture made (same records,
    options and tokenizer), planted in this capture's work folder: was merged silently; now recaptured, so the
    merged runs equal one capture by this model alone."""
    import shutil

    kw = dict(conditions=CONDS[:1], cap=24)
    other = save_tiny("llama", tmp_path / "other", TEXTS, seed=1)  # same architecture and tokenizer, other weights
    model = tmp_path / "model"
    shutil.copytree(llama, model)
    with pytest.raises(rs.RoutestatsError, match="killed"):
        capture_in_shards(model, RECORDS, tmp_path / "out", shards=2, launcher=FailingOnce("shard-1"), **kw)
    shutil.copy(other / "model.safetensors", model / "model.safetensors")  # new weights, same path
    with pytest.raises(rs.RoutestatsError, match=r"another capture \(the model's content \(weights, config or "
                                                 r"tokenizer files\) differ\)"):
        capture_in_shards(model, RECORDS, tmp_path / "out", shards=2, **kw)
    # (2): the other model's finished shard-0 swapped into a fresh capture of `llama`
    with pytest.raises(rs.RoutestatsError, match="killed"):
        capture_in_shards(other, RECORDS, tmp_path / "b", shards=2, launcher=FailingOnce("shard-1"), **kw)
    with pytest.raises(rs.RoutestatsError, match="killed"):
        capture_in_shards(llama, RECORDS, tmp_path / "a", shards=2, launcher=FailingOnce("shard-1"), **kw)
    shutil.rmtree(tmp_path / ".a.capture-shards" / "shard-0")
    shutil.copytree(tmp_path / ".b.capture-shards" / "shard-0", tmp_path / ".a.capture-shards" / "shard-0")
    said = []
    capture_in_shards(llama, RECORDS, tmp_path / "a", shards=2, echo=said.append, **kw)
    assert said == ["shards: 2 captured, 0 already complete; merging"]  # the planted shard was not kept
    capture_runs(load_model(llama), RECORDS, tmp_path / "whole", **kw)
    assert_same_tables(tables(tmp_path / "whole"), tables(tmp_path / "a"))
