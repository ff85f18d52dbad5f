"""PyTorch runners: pairing guarantees, MSM rules, schedule, attention paths, resume, dumps."""

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")

import routestats as rs  # noqa: E402
from runners.corpora import Record  # noqa: E402
from runners.training.data import resolve  # noqa: E402
from runners.training.model import EncoderConfig, SAABEncoder, shuffle_bias_ids, state_hash  # noqa: E402
from runners.training.msm import encode_record, lr_at, mask_field_ids, train_tokenizer  # noqa: E402
from runners.training.presets import Condition, get_preset, parse_condition  # noqa: E402
from runners.training.train import data_order, prepare, seed_everything, train_run, train_study  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # avoid the 2-thread contention slowdowns (ENVIRONMENT.md)
    yield
    torch.set_num_threads(old)


def cfg(**kw):
    base = dict(vocab_size=50, field_vocab_size=6, max_length=16, num_labels=5, d_model=16, num_layers=3,
                num_heads=2, ff_dim=32, dropout=0.0)
    return EncoderConfig(**(base | kw))


def batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 50, (3, 10), generator=g)
    fids = torch.tensor([[4, 4, 3, 3, 3, 3, 3, 0, 0, 0], [4, 3, 3, 3, 3, 3, 3, 3, 3, 3], [4, 4, 4, 3, 3, 0, 0, 0, 0, 0]])
    mask = (fids != 0).long()
    ids = ids * mask
    return ids, fids, mask


# ------------------------------------------------------------------ init and pairing
def test_identical_init_across_variants():
    seed_everything(5)
    a = SAABEncoder(cfg(variant="baseline"))
    seed_everything(5)
    b = SAABEncoder(cfg(variant="saab", saab_field_weight=2.0, saab_layer_mask=[0, 0, 1], saab_shuffle_bias=True))
    assert state_hash(a) == state_hash(b)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)
    assert torch.count_nonzero(a.tok.weight[0]) == 0  # padding row initialised to zero


def test_data_order_and_masks_identical_for_same_seed():
    assert torch.equal(data_order(100, 250, 7), data_order(100, 250, 7))
    assert not torch.equal(data_order(100, 250, 7), data_order(100, 250, 8))
    _, fids, mask = batch()
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    m1, l1 = mask_field_ids(fids, mask, 0.15, 5, g1)
    m2, l2 = mask_field_ids(fids, mask, 0.15, 5, g2)
    assert torch.equal(m1, m2) and torch.equal(l1, l2)


# ------------------------------------------------------------------ MSM
def test_msm_quota_example():
    # METHODS 4.3: ids (4,4,4,3,3,3), p = 0.34, seed 7 -> exactly 2 masked, one per field, both set to 5
    fids = torch.tensor([[4, 4, 4, 3, 3, 3]])
    masked, labels = mask_field_ids(fids, torch.ones_like(fids), 0.34, 5, torch.Generator().manual_seed(7))
    sel = labels != -100
    assert int(sel.sum()) == 2
    assert sorted(labels[sel].tolist()) == [3, 4]
    assert masked[sel].tolist() == [5, 5]
    assert torch.equal(masked[~sel], fids[~sel])


@pytest.mark.parametrize("n, p, k", [(30, 0.15, 4), (70, 0.15, 10), (10, 0.15, 2), (3, 0.01, 1)])
def test_msm_bankers_rounding(n, p, k):
    # k = min(n, max(1, round(p n))): round(4.5) = 4, round(10.5) = 10, round(1.5) = 2, floor 1
    fids = torch.full((1, n), 3)
    _, labels = mask_field_ids(fids, torch.ones_like(fids), p, 5, torch.Generator().manual_seed(0))
    assert int((labels != -100).sum()) == k


def test_lr_schedule_values():
    f = lambda s: lr_at(s, 1e-4, "linear_warmup_cosine", 50, 0.1, 500)  # noqa: E731
    # METHODS 4.4 derived values
    assert f(1) == pytest.approx(1e-5, rel=1e-12)
    assert f(50) == pytest.approx(9.82e-5, rel=1e-12)
    assert f(51) == pytest.approx(1e-4, rel=1e-12)
    assert f(100) == pytest.approx(9.739e-5, rel=1e-4)
    assert f(200) == pytest.approx(7.777e-5, rel=1e-4)
    assert f(300) == pytest.approx(4.750e-5, rel=1e-3)
    assert f(500) == pytest.approx(1.0001e-5, rel=1e-4)
    # METHODS test: base 1e-3, warmup 1, min ratio 0.5, 2 steps -> 5e-4 then 1e-3
    assert [lr_at(s, 1e-3, "linear_warmup_cosine", 1, 0.5, 2) for s in (1, 2)] == [5e-4, 1e-3]
    assert lr_at(7, 3e-4, "constant", 50, 0.1, 500) == 3e-4


# ------------------------------------------------------------------ attention paths and bias
def test_fused_and_explicit_attention_agree():
    seed_everything(1)
    m = SAABEncoder(cfg(variant="saab", saab_layer_mask=[1, 0, 2])).eval()
    ids, fids, mask = batch()
    with torch.no_grad():
        a, _ = m(ids, fids, mask, impl="explicit")
        b, _ = m(ids, fids, mask, impl="fused")
    assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)


def test_probabilities_rows_sum_to_one_and_pad_keys_zero():
    seed_everything(1)
    m = SAABEncoder(cfg(variant="saab")).eval()
    ids, fids, mask = batch()
    with torch.no_grad():
        _, probs = m(ids, fids, mask, need_probs=True)
    p = probs[0]
    assert torch.allclose(p.sum(-1), torch.ones_like(p.sum(-1)), atol=1e-6)
    assert float(p[0, :, :, 7:].abs().max()) == 0.0  # padded keys get exactly 0


def test_layer_biases_follow_mask():
    m = SAABEncoder(cfg(variant="saab", saab_field_weight=0.5, saab_layer_mask=[0, 1, 2]))
    _, fids, _ = batch()
    b = m.layer_biases(fids)
    assert b[0] is None and float(b[1].max()) == 0.5 and float(b[2].max()) == 1.0
    assert SAABEncoder(cfg()).layer_biases(fids) == [None, None, None]


def test_shuffle_control_invariants():
    ids, fids, mask = batch()
    a = shuffle_bias_ids(fids, mask, 17)
    assert torch.equal(a, shuffle_bias_ids(fids, mask, 17))  # deterministic (seed 17)
    assert torch.equal(a[mask == 0], fids[mask == 0])  # padding untouched
    for r in range(3):
        v = mask[r].bool()
        assert sorted(a[r, v].tolist()) == sorted(fids[r, v].tolist())  # multiset kept
        same = lambda x: int((x[:, None] == x[None, :]).sum())  # noqa: E731
        assert same(a[r, v]) == same(fids[r, v])  # count of positively biased pairs kept
    # a row padded to 6 or to 8 positions shuffles identically on the valid prefix (seed 23)
    row = torch.tensor([4, 4, 3, 3, 3])
    six = torch.cat([row, torch.zeros(1, dtype=torch.long)])[None]
    eight = torch.cat([row, torch.zeros(3, dtype=torch.long)])[None]
    s6 = shuffle_bias_ids(six, (six != 0).long(), 23)
    s8 = shuffle_bias_ids(eight, (eight != 0).long(), 23)
    assert torch.equal(s6[0, :5], s8[0, :5])


# ------------------------------------------------------------------ tokenizer / records
def test_encode_record_word_groups():
    recs = [Record("1", (("title", "Aerostar jet"), ("content", "Aerostar is a jet, built in 1967.")))]
    tok = train_tokenizer(recs * 3, 60)
    e, n = encode_record(tok, recs[0], {"title": 4, "content": 3}, 256)
    assert e.input_ids[0] == 2 and e.field_ids[0] == 4 and e.tokens[0] == "[FIELD_START]"
    assert n == len(e.input_ids)
    start2 = e.tokens.index("[FIELD_START]", 1)
    assert e.field_ids[start2] == 3
    # start tokens are their own groups; "Aerostar" in title and in content are two groups
    assert e.word_ids[0] not in e.word_ids[1:start2]
    assert len(set(e.word_ids)) == 1 + 2 + 1 + 7  # start, 2 title words, start, 7 content words
    cut, _ = encode_record(tok, recs[0], {"title": 4, "content": 3}, 4)
    assert len(cut.input_ids) == 4 and cut.field_ids == e.field_ids[:4]


# ------------------------------------------------------------------ training end to end (smoke preset)
@pytest.fixture(scope="module")
def smoke_study(tmp_path_factory):
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("study")
    p = get_preset("smoke")
    conds = [parse_condition(c, p.model["num_layers"]) for c in ("baseline", "saab", "wf=0", "shuffled")]
    paths = train_study(out, data=resolve("bundled-dbpedia"), preset=p, conditions=conds, seed=3, device="cpu",
                        keep_checkpoints="all")
    return out, paths


def test_study_runs_validate_and_pair(smoke_study):
    out, paths = smoke_study
    runs = rs.load_runs(out)
    assert len(runs) == 4
    for r in runs:
        r.validate(deep=True)
        assert r.attention_steps == [1, 10, 20]
        assert r.attention_forms(20) == ["matrices", "reductions"] and r.attention_forms(1) == ["reductions"]
    pairs = runs.pairs()
    assert len(pairs) == 3  # baseline paired with saab, w_f 0 and shuffled
    assert len({r.init_id for r in runs}) == 1 and len({r.data_order_id for r in runs}) == 1
    g = runs.get("saab-docstrings-dbpedia-saab-seed3").gradients()
    assert set(g["component"]) == {"q", "k", "v"} and g["step"].max() == 20


def test_wf_zero_reproduces_baseline(smoke_study):
    # the paper's null check: max |delta SFM| <= 1.2e-7 between w_f = 0 and the baseline
    out, _ = smoke_study
    base = rs.load_run(out / "baseline")
    zero = rs.load_run(out / "saab-wf0")
    for step in base.attention_steps:
        a = rs.sfm(base, step)["sfm"].to_numpy()
        b = rs.sfm(zero, step)["sfm"].to_numpy()
        assert np.max(np.abs(a - b)) <= 1.2e-7
    ma, mb = base.metrics(), zero.metrics()
    np.testing.assert_array_equal(ma["loss"], mb["loss"])


def test_resume_after_kill_is_bitwise(smoke_study, tmp_path):
    out, _ = smoke_study
    p = get_preset("smoke")
    prep = prepare(resolve("bundled-dbpedia"), out, p.vocab_size, p.max_length)
    cond = Condition("saab", "saab")
    assert train_run(tmp_path / "saab", prep=prep, preset=p, condition=cond, seed=3, study="saab", device="cpu",
                     stop_after=12) is None  # "killed" after step 12; last checkpoint is step 10
    assert not (tmp_path / "saab" / "run.json").exists()
    with pytest.raises(rs.IncompleteRunError):
        rs.load_run(tmp_path / "saab")
    train_run(tmp_path / "saab", prep=prep, preset=p, condition=cond, seed=3, study="saab", device="cpu")
    resumed, full = rs.load_run(tmp_path / "saab"), rs.load_run(out / "saab")
    cols = ["step", "phase", "loss", "accuracy", "lr", "grad_norm"]
    pd.testing.assert_frame_equal(resumed.metrics()[cols], full.metrics()[cols], check_exact=True)
    pd.testing.assert_frame_equal(resumed.gradients(), full.gradients(), check_exact=True)
    for step in (1, 10, 20):
        a = list(resumed.iter_reductions(step))
        b = list(full.iter_reductions(step))
        assert all(np.array_equal(x.field_mass, y.field_mass) for x, y in zip(a, b))
    for x, y in zip(resumed.iter_attention(20), full.iter_attention(20)):
        assert np.array_equal(x.weights, y.weights)


def test_manifest_records_pairing_and_device(smoke_study):
    out, _ = smoke_study
    m = rs.load_run(out / "saab-shuffled").manifest
    assert m["factors"]["variant"] == "saab_shuffled" and m["factors"]["shuffled"] is True
    assert m["device"]["device"] == "cpu" and m["device"]["tf32"] is False
    assert set(m["pairing"]) == {"init_state_sha256", "data_order_sha256", "first_batch_sha256"}
    assert m["software"]["torch"].startswith("2.")
    assert [f["path"] for f in m["files"] if f["path"].startswith("checkpoints/")] == [
        "checkpoints/step_0001.pt", "checkpoints/step_0010.pt", "checkpoints/step_0020.pt"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_fused_matches_explicit():
    seed_everything(1)
    m = SAABEncoder(cfg(variant="saab")).cuda().eval()
    ids, fids, mask = (t.cuda() for t in batch())
    with torch.no_grad():
        a, _ = m(ids, fids, mask, impl="explicit")
        b, _ = m(ids, fids, mask, impl="fused")
    assert torch.allclose(a, b, atol=1e-4)


def test_evaluation_indices_union_primary_and_reservoir():
    from runners.training.train import evaluation_indices

    # METHODS 3.7: N = 10, k = 5, seed 1001 -> {2, 4, 5, 7, 8}
    idx, primary, sample = evaluation_indices(10, 3, 5, 1001)
    assert sample == {2, 4, 5, 7, 8} and primary == {0, 1, 2}
    assert idx == [0, 1, 2, 4, 5, 7, 8]
    with pytest.raises(rs.RoutestatsError, match="fewer than"):
        evaluation_indices(4, 5, 0, 1)


def test_overhead_benchmark_small(tmp_path):
    from runners.training.overhead import run_overhead

    s = run_overhead(tmp_path, model=dict(d_model=16, num_layers=2, num_heads=2, ff_dim=32, dropout=0.0),
                     lengths=(8, 16), batch_size=2, vocab_size=50, inference_warmup=1, inference_iterations=2,
                     training_warmup=1, training_iterations=1, repeats=2, device="cpu")
    assert len(s) == 8  # 2 variants x 2 modes x 2 lengths
    assert s["trainable_parameters"].nunique() == 1
    saab = s[(s["variant"] == "saab") & (s["mode"] == "inference") & (s["length"] == 16)]
    assert saab["extra_saab_scalar_ops"].item() == 2 * 16 * 16 * (2 + 2 * 2)  # B L^2 (2 + layers heads)
    assert (s["forward_flops"] > 0).all()
    assert (tmp_path / "overhead_summary.parquet").is_file() and (tmp_path / "overhead.json").is_file()


def test_sweep_is_resumable(tmp_path):
    import json

    from runners.training.sweep import run_sweep

    p = get_preset("smoke", max_steps=4, checkpoint_steps=[2, 4])
    conds = [parse_condition(c, p.model["num_layers"]) for c in ("baseline", "saab")]
    res = run_sweep(tmp_path, seeds=[1, 2], conditions=conds, preset=p, data=resolve("bundled-dbpedia"), device="cpu")
    assert len(res.complete) == 4 and not res.failed
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["runs"] == ["seed1/baseline", "seed1/saab", "seed2/baseline", "seed2/saab"]
    kept = (tmp_path / "seed1" / "baseline" / "run.json").stat().st_mtime_ns
    (tmp_path / "seed2" / "saab" / "run.json").unlink()  # as if killed before finishing
    res2 = run_sweep(tmp_path, seeds=[1, 2], conditions=conds, preset=p, data=resolve("bundled-dbpedia"), device="cpu")
    assert [x.name for x in res2.complete] == ["saab"] and len(res2.skipped) == 3
    assert (tmp_path / "seed1" / "baseline" / "run.json").stat().st_mtime_ns == kept
    assert len(rs.load_runs(tmp_path)) == 4
    # 4 steps of the smoke recipe's 20 (its preset): the manifest records the recipe, and the report's first
    # screen says the runs stopped short of it
    man = json.loads((tmp_path / "seed1" / "saab" / "run.json").read_text())
    assert man["recipe"] == {"preset": "smoke", "max_steps": 20} and man["training"]["max_steps"] == 4
    rep = rs.analyse(tmp_path, resamples=99, permutations=99, flow="off")
    assert "after 4 of the smoke recipe's 20 training steps" in rep.answer
    assert "4 of 4 runs stopped after 4 training steps, short of the smoke preset's 20-step recipe" in \
        " ".join(rep.headline)


def pair_folder(study: Path, to: Path) -> Path:
    """A folder with just the baseline and SAAB runs of the smoke study (the tokenizer beside them)."""
    import shutil

    to.mkdir()
    for name in ("baseline", "saab"):
        shutil.copytree(study / name, to / name)
    shutil.copy(study / "tokenizer.json", to / "tokenizer.json")
    return to


def test_untouched_test_evaluation(smoke_study, tmp_path):
    import json

    from runners.training.evaluate import evaluate_split
    from routestats.rundir.sampling import reservoir_indices

    pair_dir = pair_folder(smoke_study[0], tmp_path / "pair")
    evaluate_split(pair_dir, tmp_path / "test", sample_size=6, sample_seed=1001, device="cpu")
    man = json.loads((tmp_path / "test" / "test_manifest.json").read_text())
    n_test = len(resolve("bundled-dbpedia").load_test())
    assert man["indices"] == reservoir_indices(n_test, 6, 1001) and man["records"] == n_test
    assert set(man["checkpoints"]) == {"saab-docstrings-dbpedia-baseline-seed3", "saab-docstrings-dbpedia-saab-seed3"}
    runs = rs.load_runs(tmp_path / "test")
    (p,) = runs.pairs()
    assert p.baseline.factors["split"] == "test" and p.baseline.manifest["parent_run_id"] == "saab-docstrings-dbpedia-baseline-seed3"
    ex = p.baseline.examples()
    assert ex["example_id"].tolist() == man["indices"] and ex["in_test_sample"].all()
    t = rs.paired_effects(p, examples="test_sample", mode="numpy", resamples=50, permutations=50)
    assert t["n"].unique().tolist() == [6]
    # every copy names the run whose weights it evaluates
    assert p.baseline.manifest["source_run"] == "saab-docstrings-dbpedia-baseline-seed3"
    assert p.variant.manifest["source_run"] == "saab-docstrings-dbpedia-saab-seed3"
    # issue [first-hour]: another sample into the same --out was a silent redraw after results were seen
    before = (tmp_path / "test" / "test_manifest.json").read_bytes()
    for other in (dict(sample_size=5, sample_seed=1001), dict(sample_size=6, sample_seed=7)):
        with pytest.raises(rs.RoutestatsError, match="records another test sample .6 records, seed 1001.*--force"):
            evaluate_split(pair_dir, tmp_path / "test", device="cpu", **other)
        assert (tmp_path / "test" / "test_manifest.json").read_bytes() == before
    evaluate_split(pair_dir, tmp_path / "test", sample_size=6, sample_seed=1001, device="cpu")  # the same: in place
    evaluate_split(pair_dir, tmp_path / "test", sample_size=5, sample_seed=1001, device="cpu", force=True)
    import hashlib

    assert json.loads((tmp_path / "test" / "test_manifest.json").read_text())["replaces"] == \
        hashlib.sha256(before).hexdigest()


def test_the_confirmation_step_reports_the_pair_and_its_decomposition(smoke_study, tmp_path):
    # the README's order: a pair, its bias-off evaluation beside it, then `evaluate PAIR --out OUT --sample-size N`
    from runners.training.evaluate import evaluate_bias_off, evaluate_split

    pair_dir = pair_folder(smoke_study[0], tmp_path / "pair")
    evaluate_bias_off(pair_dir / "saab")
    said = []
    evaluate_split(pair_dir, tmp_path / "test", sample_size=12, sample_seed=1001, device="cpu", progress=said.append)
    # by default the pair alone: the folder reports as the pair, with its effects table and its scope said
    assert sorted(r.run_id for r in rs.load_runs(tmp_path / "test")) == [
        "saab-docstrings-dbpedia-baseline-seed3-test", "saab-docstrings-dbpedia-saab-seed3-test"]
    assert any("not evaluated: saab-docstrings-dbpedia-saab-seed3-bias-off" in m for m in said)
    # a line for every phase: the split read, the records encoded, each run's examples (at the end at least)
    assert said[0].startswith("reading the held-out split") and said[1] == "encoding 12 test records"
    assert "  saab-docstrings-dbpedia-saab-seed3: 12/12 examples" in said
    rep = rs.analyse(tmp_path / "test", resamples=199, permutations=999, flow="off")
    assert rep.table("effects").frame["n"].unique().tolist() == [12]
    scope = [c for c in rep.claims if c.kind == "test_sample"]
    assert scope and scope[0].holds and scope[0].sentence.startswith(
        "Evaluated on an untouched test sample of 12 examples of the held-out split's")
    assert "on an untouched test sample of 12, drawn before any model output was seen" in rep.answer
    # with --include-bias-off the bias-off copy is the decomposition of the variant's copy
    evaluate_split(pair_dir, tmp_path / "test-all", sample_size=12, sample_seed=1001, device="cpu",
                   include_bias_off=True)
    runs = {r.run_id: r for r in rs.load_runs(tmp_path / "test-all")}
    off = runs["saab-docstrings-dbpedia-saab-seed3-bias-off-test"]
    assert off.manifest["source_run"] == "saab-docstrings-dbpedia-saab-seed3-test"
    rep = rs.analyse(tmp_path / "test-all", resamples=199, permutations=999, flow="off")
    dec = rep.table("decomposition").frame
    # total = direct + learned per layer (the decomposition's identity on the test sample)
    w = dec.pivot_table(index="layer", columns="component", values="mean_diff")
    assert (w["total"] - w["direct"] - w["learned"]).abs().max() < 1e-12


@pytest.mark.slow  # over ~10 s on 2 cores (CI still runs it)
def test_sweep_through_submitit_local_resumes(tmp_path):
    pytest.importorskip("submitit")
    from runners.launch import SubmititLauncher
    from runners.training.sweep import run_sweep

    p = get_preset("smoke", max_steps=4, checkpoint_steps=[2, 4])
    conds = [parse_condition(c, p.model["num_layers"]) for c in ("baseline", "saab", "shuffled")]
    launcher = SubmititLauncher(tmp_path / "submitit", "local", timeout_min=10)
    res = run_sweep(tmp_path, seeds=[1, 2], conditions=conds, preset=p, data=resolve("bundled-dbpedia"),
                    device="cpu", launcher=launcher, threads=1)
    assert not res.failed and len(res.complete) == 6
    (tmp_path / "seed2" / "saab-shuffled" / "run.json").unlink()  # an interrupted job left this run incomplete
    res2 = run_sweep(tmp_path, seeds=[1, 2], conditions=conds, preset=p, data=resolve("bundled-dbpedia"),
                     device="cpu", launcher=launcher, threads=1)
    assert [str(x.relative_to(tmp_path)) for x in res2.complete] == ["seed2/saab-shuffled"]
    assert len(res2.skipped) == 5
    runs = rs.load_runs(tmp_path)
    assert len(runs) == 6 and len(runs.pairs()) == 4


def test_launcher_reports_failures(tmp_path):
    from runners.launch import Job, SequentialLauncher

    def boom():
        raise ValueError("no such data")

    (r,) = SequentialLauncher(tmp_path).run([Job("bad", boom)])
    assert not r.ok and r.error == "ValueError: no such data" and Path(r.log).read_text().count("Traceback") == 1


def test_corpus_lengths_feed_the_length_table(tmp_path):
    from routestats.studies.lengths import length_table
    from runners.training.lengths import corpus_lengths

    spec = resolve("bundled-pubmed")
    df = corpus_lengths(tmp_path, spec, vocab_size=300, max_length=32)
    assert set(df["split"]) == {"train", "val", "test"}
    assert df["length"].max() <= 32 and (df["cap"] == 32).all()
    assert len(df[df.split == "val"]) == len(spec.load()[1])
    t = length_table(df[["split", "length"]], cap=32)
    assert t.set_index("split").loc["val", "saturation_count"] == int((df[df.split == "val"]["length"] == 32).sum())


def test_planted_checkpoint_is_refused_and_never_runs(tmp_path):
    # a pickle whose unpickling would run a shell command (what a hostile run directory could hold)
    import pickle

    from runners.checkpoints import load_checkpoint

    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            import os
            return (os.system, (f"touch {marker}",))

    bad = tmp_path / "step_0010.pt"
    torch.save({"model": Evil()}, bad)
    with pytest.raises(rs.RoutestatsError, match="refused: the checkpoint holds objects other than tensors"):
        load_checkpoint(bad)
    assert not marker.exists()
    legacy = tmp_path / "legacy.pt"
    legacy.write_bytes(pickle.dumps(Evil()))
    with pytest.raises(rs.RoutestatsError, match="refused|not a readable checkpoint"):
        load_checkpoint(legacy)
    assert not marker.exists()


def test_training_prints_progress_when_stderr_is_a_file(tmp_path):
    # nohup / SLURM / `> log`: no terminal, so plain lines with rate and ETA instead of a silent bar
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "runners", "saab", "--preset", "smoke", "--seed", "3", "--out",
                          str(tmp_path / "r"), "--threads", "1"], capture_output=True, text=True,
                         env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [ln for ln in res.stderr.splitlines() if "/s, ETA" in ln]
    assert len(lines) >= 4 and any("saab" in ln for ln in lines) and any("baseline" in ln for ln in lines)
    # the pair is one job of two runs: each line says which, and the first run's job ETA covers the second run too
    assert any("run 1 of 2: " in ln and "baseline" in ln for ln in lines), lines
    assert any("run 2 of 2: " in ln and "saab" in ln for ln in lines), lines
    first = [ln for ln in lines if "run 1 of 2: " in ln and "job ETA" in ln]
    assert first and all(float(re.search(r"job ETA (\d+) s", ln).group(1)) >= float(re.search(r", ETA (\d+) s", ln)
                                                                                          .group(1)) for ln in first)


def test_a_job_eta_is_this_runs_rate_times_what_is_left_of_the_job(monkeypatch, capsys):
    """Run 1 of 2, 10 steps each: 5 steps in the first 10 s is 0.5 steps/s, so 10 s are left of this run and
    10 + 10 / 0.5 = 30 s of the job (arithmetic written out; the rate counts within this run only)."""
    from runners import progress as P

    now = [100.0]
    monkeypatch.setattr(P.time, "monotonic", lambda: now[0])
    report = P._plain().job(1, 2)
    report("baseline", 0, 10)
    now[0] += 10
    report("baseline", 5, 10)
    err = capsys.readouterr().err.splitlines()
    assert err[0].endswith("run 1 of 2: baseline: 0/10")
    assert err[1].endswith("run 1 of 2: baseline: 5/10 (0.50/s, ETA 10 s; job ETA 30 s)"), err


def test_missing_torch_is_one_line(tmp_path):
    import subprocess
    import sys

    code = ("import sys, runpy; sys.modules['torch'] = None; sys.argv = ['runners', 'saab', '--preset', 'smoke', "
            f"'--out', {str(tmp_path / 'x')!r}]; runpy.run_module('runners', run_name='__main__')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == ["error: this command needs torch, which is not installed: "
                                               "pip install -e '.[train]'"]


CAPTURE = ["capture", "--model", "m", "--records", str(Path(__file__).parents[1] / "data" / "docstrings_dbpedia" /
                                                         "val.csv"), "--out", "o", "--limit", "2"]


@pytest.mark.parametrize("command, missing, extra", [
    (CAPTURE, "torch", "capture"),  # .[capture] brings torch
    (CAPTURE, "transformers", "capture"),
    (["init-probe", "--seeds", "1", "--out", "o"], "torch", "train"),
], ids=["capture-torch", "capture-transformers", "init-probe-torch"])
def test_missing_module_names_the_extra_of_the_command(tmp_path, command, missing, extra):
    # was: capture without torch sent you to .[train] first, then (torch there, transformers not) to .[capture]
    import subprocess
    import sys

    code = (f"import sys, runpy; sys.modules[{missing!r}] = None; sys.argv = ['runners', *{command!r}]; "
            "runpy.run_module('runners', run_name='__main__')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines()[-1] == (f"error: this command needs {missing}, which is not installed: "
                                                   f"pip install -e '.[{extra}]'")


def test_dump_attention_reports_each_batch():
    # the hook long evaluations report through (a line per batch instead of minutes of silence)
    from types import SimpleNamespace

    from runners.training.dumps import dump_attention
    from runners.training.msm import Encoded

    model = SAABEncoder(EncoderConfig(vocab_size=20, d_model=16, num_layers=1, num_heads=2, ff_dim=32, dropout=0.0))
    n = [2, 3, 2, 3, 2]  # tokens per record
    recs = [Encoded(input_ids=[1, 2, 3][:k], field_ids=[3, 4, 4][:k], tokens=["a", "b", "c"][:k],
                    word_ids=[0, 1, 2][:k], label="x") for k in n]
    added, seen = [], []
    sink = SimpleNamespace(add=lambda ex, a, value_norms=None: added.append((ex, a.shape)))
    dump_attention(model, recs, sink, 2, "cpu", progress=lambda done, total: seen.append((done, total)))
    assert seen == [(2, 5), (4, 5), (5, 5)] and [ex for ex, _ in added] == [0, 1, 2, 3, 4]
    assert added[1][1] == (1, 2, 3, 3)


def test_bias_off_evaluation_of_a_wf0_run_equals_the_baseline(smoke_study, tmp_path):
    from runners.training.evaluate import evaluate_bias_off

    out, _ = smoke_study
    torch.set_num_threads(1)
    off = rs.load_run(evaluate_bias_off(out / "saab-wf0", tmp_path / "wf0-off"))
    base = rs.load_run(out / "baseline")
    step = base.final_step
    assert off.factors["eval_bias"] == "off" and off.factors["variant"] == "saab_bias_off"
    assert off.manifest["source_run"] == rs.load_run(out / "saab-wf0").run_id
    assert (off.init_id, off.data_order_id) == (base.init_id, base.data_order_id)
    for a, b in zip(off.iter_attention(step), base.iter_attention(step)):
        np.testing.assert_array_equal(a.weights, b.weights)  # bitwise: trained with w_f = 0, evaluated without bias
    # the SAAB run without its bias differs from the SAAB run with it (the bias acts at inference)
    on = rs.load_run(out / "saab")
    saab_off = rs.load_run(evaluate_bias_off(out / "saab", tmp_path / "saab-off"))
    a = next(iter(on.iter_attention(step))).weights
    b = next(iter(saab_off.iter_attention(step))).weights
    assert not np.array_equal(a, b)


def _baseline_and_saab(study: Path, tree: Path) -> Path:
    """A copy of the smoke study's baseline and SAAB runs (with the tokenizer) to add evaluations to."""
    import shutil

    for name in ("baseline", "saab"):
        shutil.copytree(study / name, tree / name)
    shutil.copy(study / "tokenizer.json", tree / "tokenizer.json")
    torch.set_num_threads(1)
    return tree


def test_bias_off_is_a_sweep_condition(smoke_study, tmp_path):
    # `--conditions ...,bias-off`: trained runs are skipped (complete), the saab run is evaluated without its
    # bias into saab-bias-off, bitwise what `runners evaluate --bias off` writes
    from runners.training.evaluate import evaluate_bias_off

    out, _ = smoke_study
    tree = _baseline_and_saab(out, tmp_path / "seed3")
    p = get_preset("smoke")
    conds = [parse_condition(c, p.model["num_layers"]) for c in ("baseline", "saab", "bias-off")]
    paths = train_study(tree, data=resolve("bundled-dbpedia"), preset=p, conditions=conds, seed=3, device="cpu")
    assert [q.name for q in paths] == ["baseline", "saab", "saab-bias-off"]
    off = rs.load_run(tree / "saab-bias-off")
    assert off.factors["eval_bias"] == "off" and off.manifest["source_run"] == rs.load_run(tree / "saab").run_id
    direct = rs.load_run(evaluate_bias_off(out / "saab", tmp_path / "direct"))
    step = off.final_step
    for a, b in zip(off.iter_attention(step), direct.iter_attention(step)):
        np.testing.assert_array_equal(a.weights, b.weights)
    # without a saab run to evaluate, one clear error
    with pytest.raises(rs.RoutestatsError, match="add saab"):
        train_study(tmp_path / "empty", data=resolve("bundled-dbpedia"), preset=p, conditions=conds[2:], seed=3,
                    device="cpu")


def test_decomposition_total_is_direct_plus_learned(smoke_study, tmp_path):
    from routestats.studies.decomposition import decomposition
    from runners.training.evaluate import evaluate_bias_off

    out, _ = smoke_study
    tree = _baseline_and_saab(out, tmp_path / "tree")
    evaluate_bias_off(tree / "saab")
    runs = rs.load_runs(tree)
    d = decomposition(runs, rs.AnalysisSettings(resamples=200, permutations=200))
    w = d.pivot_table(index="layer", columns="component", values="mean_diff")
    np.testing.assert_allclose(w["total"], w["direct"] + w["learned"], atol=1e-12)  # exact identity per example
    # the tree's report shows it
    rep = rs.analyse(tree, resamples=100, permutations=100)
    assert "decomposition" in rep.tables()


def test_thread_default_and_hint_on_a_busy_machine(monkeypatch, capsys):
    from runners import threads

    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (1.6, 1.0, 1.0))  # one core busy
    before = torch.get_num_threads()
    try:
        assert threads.set_threads(None) == 1 and torch.get_num_threads() == 1  # default: the free core
        assert capsys.readouterr().err == ""
        assert threads.set_threads(2) == 2  # the user's count, with one line saying what it costs
        assert capsys.readouterr().err == ("hint: 1-min load 1.6 on 2 cores; if another job is still running, 2 "
                                           "threads compete with it and can run many times slower: --threads 1\n")
        monkeypatch.setattr(threads.os, "getloadavg", lambda: (0.1, 0.1, 0.1))
        assert threads.set_threads(2) == 2 and capsys.readouterr().err == ""
    finally:
        torch.set_num_threads(before)


# ------------------------------------------------------------------ writers that never destroy (issue 32)
def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file()}


def test_a_complete_run_with_other_settings_is_refused_not_kept(smoke_study):
    # was: re-running a finished folder with another --max-steps printed "run complete" for the old runs
    from routestats.errors import RoutestatsError

    out, _ = smoke_study
    p = get_preset("smoke")
    data = resolve("bundled-dbpedia")
    prep = prepare(data, out, p.vocab_size, p.max_length or data.max_length)
    cond = parse_condition("baseline", p.model["num_layers"])
    same = train_run(out / "baseline", prep=prep, preset=p, condition=cond, seed=3, study="saab", device="cpu")
    assert same == out / "baseline"  # the same settings: reused as it is
    from dataclasses import replace

    other = replace(p, train=replace(p.train, max_steps=p.train.max_steps + 1))
    before = _tree(out / "baseline")
    with pytest.raises(RoutestatsError, match=r"a complete run made with other settings \(max_steps "
                                              rf"{p.train.max_steps + 1} here vs {p.train.max_steps} there"):
        train_run(out / "baseline", prep=prep, preset=other, condition=cond, seed=3, study="saab", device="cpu")
    assert _tree(out / "baseline") == before


def test_bias_off_and_demo_never_replace_a_folder_with_other_files(smoke_study, tmp_path):
    from routestats.errors import RoutestatsError
    from runners.commands import demo
    from runners.training.evaluate import evaluate_bias_off

    out, _ = smoke_study
    target = tmp_path / "saab-off"
    evaluate_bias_off(out / "saab", target)
    (target / "NOTES.txt").write_text("mine")
    before = _tree(target)
    with pytest.raises(RoutestatsError, match=r"holds files no run there wrote \(NOTES.txt\)"):
        evaluate_bias_off(out / "saab", target)
    assert _tree(target) == before
    (target / "NOTES.txt").unlink()
    evaluate_bias_off(out / "saab", target)  # only its own files: replaced
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("mine")
    with pytest.raises(RoutestatsError, match="holds files no run there wrote"):
        demo(out=mine, threads=1, echo=print)  # was: shutil.rmtree(out) before training
    assert (mine / "thesis.tex").read_text() == "mine"


def test_ctrl_c_of_training_says_what_is_kept_and_how_to_go_on(tmp_path):
    """Issue [same-inputs]: Ctrl-C of `python -m runners saab` exited 130 with no word (typer turns a KeyboardInterrupt
    leaving a command into a silent exit). Interrupted mid-training, it now ends in one line: what is kept, and the
    command to run again; the checkpoints written so far are there."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "pair"
    cmd = [sys.executable, "-m", "runners", "saab", "--preset", "tiny", "--seed", "3", "--out", str(out), "--threads", "1"]
    def as_at_a_terminal():  # the child's SIGINT at its default, unblocked, as a terminal's foreground job has it,
        # whatever the test runner inherited: a suite started in the background of a non-interactive shell ignores
        # SIGINT (POSIX), its children too, and the command trained on through the signal (exit 0, or past 120 s)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, preexec_fn=as_at_a_terminal)
    seen = ""
    deadline = time.monotonic() + 240
    while "run 1 of 2" not in seen and time.monotonic() < deadline:  # training has begun
        line = proc.stdout.readline()
        if not line:  # the command ended before training began (its last words say why): not waited out
            break
        seen += line
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    lines = (seen + rest).strip().splitlines()
    assert proc.returncode == 130, (proc.returncode, lines[-8:])
    assert lines[-1].startswith("interrupted: each run resumes from its last checkpoint and complete runs are skipped; "
                                "to go on, run again: python -m runners saab --preset tiny --seed 3 --out "), lines[-3:]
    assert list((out / "baseline" / "checkpoints").glob("step_*.pt"))
