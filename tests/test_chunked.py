"""Chunked attention (issue [long-context]): per-query reductions computed in blocks of query rows, never a
layer's n x n weights, equal to the eager path's.

The eager path is the model's own eager attention bitwise (tests/test_families.py, tests/test_any_model.py);
its reductions here are computed by routestats' numpy ``reduce_queries`` from the stored weights, the chunked
ones by the seam's torch ``reduce_rows`` block by block -- two implementations over two computations of the
weights. The masks are transformers' own: a block's rows of :class:`RowMask` are compared with the rows of the
whole mask transformers builds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

import routestats as rs  # noqa: E402
from runners.pretrained.capture import capture_runs  # noqa: E402
from runners.pretrained.records import read_records  # noqa: E402
from runners.pretrained.seam import Condition  # noqa: E402
from runners.pretrained.load import load_model  # noqa: E402
from runners.pretrained.seam import RowMask, block_rows  # noqa: E402
from tests.tiny_models import STYLES, WINDOW, save_tiny  # noqa: E402

pytestmark = pytest.mark.torch
ROOT = Path(__file__).resolve().parents[1]
RECORDS = read_records(ROOT / "data" / "docstrings_dbpedia" / "val.csv", "dbpedia", limit=8)
TEXTS = [t for r in RECORDS for t in dict(r.fields).values()]
W = 1.0


def reductions(path: Path) -> dict[int, dict]:
    run = rs.load_run(path)
    return {b.example_id: {k: np.asarray(getattr(b, k), dtype=np.float64) for k in
                           ("row_mass", "entropy", "entropy_rownorm", "first_mass", "field_mass")}
            for b in run.iter_reductions()}


def test_a_blocks_rows_are_the_rows_of_transformers_whole_mask():
    from transformers.masking_utils import eager_mask, sliding_window_causal_mask_function

    pad = torch.tensor([[1] * 11, [1] * 7 + [0] * 4]).bool()  # one record padded
    args = dict(batch_size=2, q_length=11, kv_length=11, mask_function=sliding_window_causal_mask_function(3),
                attention_mask=pad, dtype=torch.float32)
    whole = eager_mask(**args)
    for q0, q1 in ((0, 4), (4, 8), (8, 11), (5, 6)):
        assert torch.equal(RowMask(args).rows(q0, q1), whole[:, :, q0:q1])


def test_block_rows_keep_a_block_within_its_budget():
    # 48 bytes per weight: 256 MB / (48 * 8 * 4 * 2048) = 85.3 -> 85 rows (hand arithmetic)
    assert block_rows(256, 8, 4, 2048) == 85
    assert block_rows(0.001, 8, 4, 2048) == 1 and block_rows(1e6, 1, 1, 10) == 10


def against_eager(loaded, tmp: Path, attention: str, budget_bytes, **options) -> tuple[float, list[dict]]:
    """Capture RECORDS at caps 6 and 40 (inside and beyond every window), batches of 1 and 8 (padded to the
    longest), baseline and bias, with ``attention`` under ``budget_bytes(batch, cap)``; return the largest
    difference of any reduction from the eager capture's (routestats' numpy reduce_queries over the model's own
    weights) and each run's ``evaluation.capture.attention`` record. ``options``: more capture options."""
    conds = [Condition("baseline"), Condition("bias", bias=W)]
    worst, evs = 0.0, []
    for cap in (6, 40):
        kw = dict(conditions=conds, cap=cap, forms=("reductions",), device_reductions=False)
        eager = tmp / f"eager{cap}"
        capture_runs(loaded, RECORDS, eager, batch_size=1, attention="eager", **kw)
        kw.update(options)
        for batch, padding in ((1, "none"), (8, "longest")):
            out = tmp / f"{attention}{cap}-{batch}"
            capture_runs(loaded, RECORDS, out, batch_size=batch, padding=padding, attention=attention,
                         attention_mb=budget_bytes(batch, cap) / 2 ** 20, **kw)
            for c in conds:
                evs.append(json.loads((out / c.name / "run.json").read_text())["evaluation"]["capture"]["attention"])
                a, b = reductions(eager / c.name), reductions(out / c.name)
                assert a.keys() == b.keys()
                worst = max([worst] + [float(np.abs(a[ex][k] - b[ex][k]).max()) for ex in a for k in a[ex]])
    return worst, evs


@pytest.mark.parametrize("family", sorted(STYLES))
def test_chunked_reductions_equal_eager_ones(family, tmp_path):
    # every tiny family of tests/tiny_models.py: sliding windows of 8 (mistral; gemma2 layer 0, with a soft cap),
    # records cut at 6 tokens (inside every window) and at 40 (beyond it), batches of 1 and 8 (padded to the
    # longest), baseline and bias; blocks of 1-3 rows so that every block edge is crossed
    assert 6 < WINDOW < 40  # the caps fall on either side of every window
    loaded = load_model(save_tiny(family, tmp_path / "model", TEXTS))
    worst, evs = against_eager(loaded, tmp_path, "chunked", lambda batch, cap: 3 * 48 * batch * loaded.n_heads * cap)
    assert all(ev["path"] == "chunked" and ev["probe"]["ok"] for ev in evs), evs  # >= 3 rows a block
    assert worst <= 1e-6, (family, worst)


def test_attention_options_are_refused_in_one_line(tmp_path, capsys):
    from tests.conftest import runners_cli

    folder = save_tiny("llama", tmp_path / "model", TEXTS)
    base = ["capture", "--threads", "1", "--model", folder, "--records", ROOT / "data" / "docstrings_dbpedia" /
            "val.csv", "--limit", "2", "--out", tmp_path / "out"]
    for extra, says in ((["--attention", "fast"], "--attention must be one of auto, chunked, eager"),
                        (["--attention-mb", "0"], "--attention-mb must be a positive number"),
                        (["--attention", "chunked", "--forms", "matrices"], "keeps per-query reductions only")):
        code, _, err = runners_cli([*base, *extra], capsys)
        assert code == 2 and says in err and "Traceback" not in err, err
        assert not (tmp_path / "out").exists()
    code, out, err = runners_cli([*base, "--attention", "chunked"], capsys)
    assert code == 0, err
    assert "MB per record; chunked attention)" in out  # what each record cost on disk, and how it was computed


def test_a_model_the_chunked_path_does_not_reproduce_falls_back_to_eager(tmp_path, capsys):
    # GPT-OSS adds learned sinks to each softmax: the chunked path leaves them out, the probe sees the difference;
    # auto then captures with eager attention and says so, chunked is refused
    from runners.pretrained.load import prepare_model
    from tests.tiny_models import tokenizer, words_of

    tok, ids = tokenizer(words_of(TEXTS), "plain")
    cfg = T.GptOssConfig(vocab_size=len(tok) + 4, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=8, intermediate_size=32, num_local_experts=4,
                         num_experts_per_tok=2, max_position_embeddings=64, pad_token_id=ids["pad"])
    torch.manual_seed(0)
    loaded = prepare_model(T.AutoModel.from_config(cfg, attn_implementation="eager").eval(), tok)
    got = capture_runs(loaded, RECORDS[:2], tmp_path / "auto", cap=24, attention="auto", attention_mb=1e-4)
    ev = json.loads((got[0] / "run.json").read_text())["evaluation"]["capture"]["attention"]
    assert ev["path"] == "eager" and not ev["probe"]["ok"] and "differs from the eager one" in ev["probe"]["reason"]
    assert "eager attention" in capsys.readouterr().err
    with pytest.raises(rs.RoutestatsError, match="--attention chunked: the chunked path differs"):
        capture_runs(loaded, RECORDS[:2], tmp_path / "chunked", cap=24, attention="chunked")


LONG = r"""
import json, resource, sys, torch, transformers as T
from pathlib import Path
from runners.corpora import Record
from runners.pretrained.capture import capture_runs
from runners.pretrained.seam import Condition
from runners.pretrained.load import prepare_model
from tests.tiny_models import tokenizer
n, mode, out = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
torch.set_num_threads(1)
words = [f"w{i}" for i in range(50)]
tok, ids = tokenizer(words, "plain")
cfg = T.LlamaConfig(vocab_size=len(tok) + 4, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=64, max_position_embeddings=n + 8,
                    pad_token_id=ids["pad"], bos_token_id=ids["bos"], eos_token_id=ids["eos"])
torch.manual_seed(0)
loaded = prepare_model(T.AutoModel.from_config(cfg, attn_implementation="eager").eval(), tok)
text = " ".join(words[i % 50] for i in range(n))
rec = Record("0", (("title", text[: len(text) // 4]), ("content", text[len(text) // 4:])))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
capture_runs(loaded, [rec], out, cap=n, attention=mode, attention_mb=16, conditions=[Condition("baseline")])
print(json.dumps({"before_kb": before, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def test_a_long_record_is_captured_without_its_n_by_n_weights(tmp_path):
    # 3072 tokens, 2 layers x 4 heads: the eager weights alone are 2 * 4 * 3072^2 * 4 B = 302 MB (and the eager
    # reductions copy them again); chunked blocks of 16 MB never hold them, so the capture's peak RSS rises by
    # well under that
    n = 3072

    def peak(mode: str) -> float:
        out = subprocess.run([sys.executable, "-c", LONG, str(n), mode, str(tmp_path / mode)], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
        got = json.loads(out.strip().splitlines()[-1])
        return (got["peak_kb"] - got["before_kb"]) / 1024

    chunked, eager = peak("chunked"), peak("eager")
    assert chunked < 120 < 300 < eager, (chunked, eager)
    a, b = reductions(tmp_path / "eager" / "baseline"), reductions(tmp_path / "chunked" / "baseline")
    assert max(float(np.abs(a[0][k] - b[0][k]).max()) for k in a[0]) <= 1e-6


@pytest.mark.parametrize("family, padding, rows_built", [("llama", "none", False), ("bert", "none", False),
                                                      ("llama", "longest", True), ("mistral", "none", True)])
def test_the_biased_pass_builds_mask_rows_only_where_the_mask_is_not_plain(family, padding, rows_built, tmp_path,
                                                                           monkeypatch):
    """Issue [capture-floor]: the SAAB bias rides in Q/K's padding wherever the layer's own mask is the plain causal
    one (llama, unpadded) or hides nothing (bert, unpadded): the biased pass then runs in the kernel's causal mode, or
    with no mask, and asks transformers for no mask rows at all. Padded batches and sliding windows (mistral, 40
    tokens past its window of 8) keep the block path with mask rows. The reductions equal the eager capture's
    (routestats' numpy reduce_queries over the model's own weights with the bias in its mask) within 1e-6."""
    from runners.pretrained import fused

    built = []  # for each fused call: whether it was handed mask rows, or must build the bias's (not carried)
    real = fused.fused_rows
    monkeypatch.setattr(fused, "fused_rows", lambda *a, **k: built.append(
        a[5] is not None or a[6] is not None and not k.get("carried")) or real(*a, **k))
    loaded = load_model(save_tiny(family, tmp_path / "model", TEXTS))
    conds = [Condition("bias", bias=W)]
    kw = dict(conditions=conds, cap=40, forms=("reductions",), device_reductions=False, batch_size=4, padding=padding)
    capture_runs(loaded, RECORDS, tmp_path / "eager", attention="eager", **kw)
    built.clear()
    capture_runs(loaded, RECORDS, tmp_path / "fused", attention="fused", attention_mb=0.01, kernel_dtype="float64",
                 **kw)
    ev = json.loads((tmp_path / "fused" / "bias" / "run.json").read_text())["evaluation"]["capture"]["attention"]
    assert ev["path"] == "fused"
    assert built and any(built) == rows_built, built  # the probe's fused pass and the capture's, every layer
    a, b = reductions(tmp_path / "eager" / "bias"), reductions(tmp_path / "fused" / "bias")
    assert max(float(np.abs(a[ex][k] - b[ex][k]).max()) for ex in a for k in a[ex]) <= 1e-6


def test_a_weight_above_the_diagonal_is_refused_in_every_block():
    # no mask: every query sees later keys, which the decoder check must refuse in some block; with the causal
    # mask (transformers' own, additive) the same call passes and its rows match a whole-matrix softmax
    from transformers.masking_utils import causal_mask_function, eager_mask

    from runners.pretrained.seam import Pass, chunked_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 4) for _ in range(3))
    p = Pass(fields=torch.tensor([[0, 0, 1, 1, -1]]), block=2, causal_check=True, n_fields=2, lengths=(5,))
    with pytest.raises(rs.RoutestatsError, match="attended to a later position"):
        chunked_attention(torch.nn.Module(), q, k, v, None, p)
    mask = eager_mask(batch_size=1, q_length=5, kv_length=5, mask_function=causal_mask_function)
    p = Pass(fields=torch.tensor([[0, 0, 1, 1, -1]]), block=2, causal_check=True, n_fields=2, lengths=(5,))
    out = chunked_attention(torch.nn.Module(), q, k, v, mask, p)
    w = torch.softmax(q @ k.transpose(2, 3) * 0.5 + mask, -1)  # scaling 4 ** -0.5, as eager attention's default
    torch.testing.assert_close(out, (w @ v).transpose(1, 2), rtol=0, atol=1e-6)
    torch.testing.assert_close(p.reductions[0]["row_mass"], torch.ones(1, 2, 5, dtype=torch.float64), rtol=0, atol=1e-6)


def test_the_long_context_benchmark_runs():
    # benchmarks/bench_capture.py --lengths, at one short length: every mode runs in its own process and the table
    # has its row (a refactor that breaks the benchmark fails here, not in the next measurement)
    from benchmarks.bench_capture import long_context, long_table

    rows = long_context([128], "tiny", 1, 128)
    assert [r["mode"] for r in rows] == ["bare-sdpa", "bare-eager", "capture-fused", "capture-fused64",
                                         "capture-chunked", "capture-eager"]
    assert all(r["seconds"] > 0 and r["peak_mb"] > 0 for r in rows)
    assert long_table(rows).splitlines()[2].startswith("| 128 |")


def test_the_per_forward_benchmark_runs():
    # benchmarks/bench_capture.py --per-forward at one short length on the tiny decoder: every mode runs in its own
    # process and the table has a row per capture with its ratio to the bare forward (a number: at 64 tokens the
    # marginal seconds are milliseconds, of either sign by noise)
    from benchmarks.bench_capture import PER_FORWARD, per_forward, per_forward_table

    rows = per_forward([64], "tiny", repeats=1)
    assert [r["mode"] for r in rows] == list(PER_FORWARD) and [r["forwards"] for r in rows] == [1, 1, 2, 1, 2]
    lines = per_forward_table(rows).splitlines()[2:]
    assert len(lines) == 4 and all(np.isfinite(float(line.split("|")[-2])) for line in lines), lines


@pytest.mark.parametrize("family", sorted(STYLES))
def test_fused_reductions_equal_eager_ones_or_fall_back(family, tmp_path):
    """Issue [fused-capture]: one fused attention call per block of rows (the layer's output from V's first
    columns, every reduction from V widened by [K | one-hot fields | e_0 | 1] and the kernel's log-sum-exp) gives
    the eager path's reductions within 1e-6 on every tiny family with ``--kernel-dtype float64``: encoders and
    decoders, sliding windows on both sides of the cap, padded batches, baseline and bias (unpadded causal and
    unmasked ones with the bias in Q/K's padding, the others with mask rows). The expected values are routestats'
    numpy reduce_queries over the model's own eager weights (another implementation over another computation).
    Gemma 2's soft-capped scores are not linear in K: auto says so and takes the chunked path."""
    loaded = load_model(save_tiny(family, tmp_path / "model", TEXTS))
    worst, evs = against_eager(loaded, tmp_path, "auto", lambda batch, cap: 3 * 64 * batch * cap,  # >= 3 fused rows
                               kernel_dtype="float64")
    paths, ev = {e["path"] for e in evs}, evs[-1]
    if family == "gemma2":
        assert "chunked" in paths and "fused" not in paths and "soft-capped" in ev["fused_probe"]["reason"], ev
        with pytest.raises(rs.RoutestatsError, match="--attention fused: the fused path failed .*soft-capped"):
            capture_runs(loaded, RECORDS[:2], tmp_path / "forced", cap=40, attention="fused", attention_mb=0.01)
    else:
        # cap 6 keeps auto's eager path (its weights fit the budget); cap 40 is fused
        assert paths == {"eager", "fused"} and ev["probe"]["ok"] and ev["kernel_dtype"] == "float64", ev
    assert worst <= 1e-6, (family, worst)


@pytest.mark.parametrize("family", sorted(set(STYLES) - {"gemma2"}))
def test_the_default_kernel_equals_eager_within_the_bound_its_run_records(family, tmp_path):
    """Issue [capture-floor]: by default the fused kernel runs at the model's own precision (float32 weights: a
    float32 kernel) and is accepted within twice the model's own eager gap to the float64 arithmetic, at least 1e-5.
    The run records the kernel, both gaps and the bound; the bound asserted here is recomputed from the recorded
    own gap by the rule written out (not read from the code). Expected values: routestats' numpy reduce_queries over
    the model's own eager weights, every tiny family fused (Gemma 2 is soft-capped), batches of 1 and 8 padded,
    caps 6 and 40, baseline and bias. A reduction's gap to eager is at most the fused path's gap to the reference
    plus eager's own: the probe measures both on its record, and the captured records keep within their sum."""
    loaded = load_model(save_tiny(family, tmp_path / "model", TEXTS))
    worst, evs = against_eager(loaded, tmp_path, "fused", lambda batch, cap: 3 * 64 * batch * cap)
    for ev in evs:
        probe = ev["probe"]
        own = probe["model_reductions_max_abs"]
        assert ev["kernel_dtype"] == "float32" and probe["ok"], ev
        assert probe["reductions_bound"] == pytest.approx(max(2 * own, 1e-5), rel=1e-12)
        assert probe["reductions_max_abs"] <= probe["reductions_bound"]
        assert probe["eager_reductions_max_abs"] <= probe["reductions_bound"] + own
    allowed = max(e["probe"]["reductions_bound"] + e["probe"]["model_reductions_max_abs"] for e in evs)
    assert worst <= allowed, (family, worst, allowed)
    assert worst > 0  # float32 arithmetic: not bitwise the eager float32 one (a test of the float64 kernel would be)


def test_a_float32_kernel_its_probe_rejects_falls_back_or_is_refused(tmp_path, monkeypatch, capsys):
    # the probe's bound made unreachable: auto says why and takes the chunked path (recorded); --attention fused
    # is refused in one line; a float32 kernel without a fused path, or another dtype, is refused before any work
    import runners.pretrained.probe as probe
    from runners.pretrained.options import CaptureOptions

    monkeypatch.setattr(probe, "OWN_MULTIPLE", 0.0)  # the bound the probe holds a float32 kernel to: 1e-15
    monkeypatch.setattr(probe, "OWN_FLOOR", 1e-15)
    loaded = load_model(save_tiny("llama", tmp_path / "model", TEXTS))
    kw = dict(cap=40, attention_mb=0.01, kernel_dtype="float32")
    capture_runs(loaded, RECORDS[:3], tmp_path / "auto", **kw)
    ev = json.loads((tmp_path / "auto" / "baseline" / "run.json").read_text())["evaluation"]["capture"]["attention"]
    assert ev["path"] == "chunked" and not ev["fused_probe"]["ok"] and ev["fused_probe"]["reductions_bound"] == 1e-15
    assert "not fused (the fused path differs from the eager one" in capsys.readouterr().err
    with pytest.raises(rs.RoutestatsError, match="--attention fused: the fused path differs .* float64 reference"):
        capture_runs(loaded, RECORDS[:3], tmp_path / "forced", attention="fused", **kw)
    with pytest.raises(rs.RoutestatsError, match="--kernel-dtype float32 sets the fused path's arithmetic; "
                                                 "--attention chunked has no fused kernel"):
        CaptureOptions(attention="chunked", kernel_dtype="float32")
    with pytest.raises(rs.RoutestatsError, match="--kernel-dtype must be model, float64 or float32, got 'float16'"):
        CaptureOptions(kernel_dtype="float16")


def test_a_float32_kernel_keeps_entropies_within_zero_and_ln_n():
    # near one-hot rows (scores in the hundreds, as SmolLM2's layer 18 has): float32's rounding of lse - sum p s
    # is about eps32 x |s| ~ 1e-5, either side of the exact 0; the kernel's entropies stay in [0, ln n] (the
    # reader refuses below -1e-6) and within 1e-4 of the float64 kernel's (its stated bound)
    from runners.pretrained.fused import fused_rows, widen

    g = torch.manual_seed(3)
    q, k, v = (torch.randn(1, 4, 64, 16, generator=g) * 4 for _ in range(3))  # scores of sd 64
    fields = torch.randint(0, 2, (1, 64), generator=g)
    got = {}
    for dt in (torch.float32, torch.float64):
        _, red = fused_rows(q, *widen(k, v, fields, 2, dtype=dt), fields, fields, None, None, 1.0, 2, 16)
        got[dt] = red
    e32, e64 = got[torch.float32]["entropy"], got[torch.float64]["entropy"]
    assert float(e64.min()) < 1e-6  # some rows are one-hot to float64 precision: their exact entropy is ~0
    assert float(e32.min()) >= 0 and float(e32.max()) <= float(np.log(64))
    assert float((e32 - e64).abs().max()) <= 1e-4
    assert float(got[torch.float32]["entropy_rownorm"].min()) >= 0


def test_only_a_rounding_sized_step_past_the_entropy_bounds_is_pulled_back():
    # the clamp must never hide a wrong entropy: -6e-6 (float32 rounding on a one-hot row) becomes 0 and
    # ln n + 5e-5 becomes ln n, but -0.5 and ln n + 0.3 stay, for the run writer to refuse (hand-picked values)
    from runners.pretrained.fused import rounded_into

    top = float(np.log(64))
    got = rounded_into(torch.tensor([-6e-6, -0.5, 0.7, top + 5e-5, top + 0.3], dtype=torch.float64), top)
    assert got.tolist() == [0.0, -0.5, 0.7, top, top + 0.3]


@pytest.mark.parametrize("bias", [None, 0.7])
def test_grouped_query_heads_share_their_key_value_head_without_a_copy(bias):
    # issue [capture-floor]: with no mask rows, each key/value head is served to its query heads as a stride-0 view.
    # Expected: (1) the reductions of the same call with the heads repeated, as the block path repeats them: bitwise
    # where the kernel takes one path for both layouts (the machine this was written on), within float32 rounding
    # where it sums a stride-0 head in another order (an AVX2 machine: 1.2e-7 on outputs, 6.6e-7 on entropies near
    # 3, measured);
    # (2) within float32 rounding of a brute-force float64 softmax over keys repeated the way transformers'
    # repeat_kv repeats them (query head h reads key/value head h // 3), which a grouping by h % 3 would miss
    from runners.pretrained.fused import carry_bias, fused_rows, widen

    g = torch.manual_seed(5)
    b, H, Hk, n, d = 2, 6, 2, 33, 8
    q, k, v = torch.randn(b, H, n, d, generator=g), torch.randn(b, Hk, n, d, generator=g), torch.randn(b, Hk, n, d,
                                                                                                      generator=g)
    fields = torch.randint(-1, 3, (b, n), generator=g)
    kp, wide = widen(k, v, fields, 3, dtype=torch.float32)
    kp = kp if bias is None else carry_bias(kp, fields, d, 3)
    o, red = fused_rows(q, kp, wide, fields, fields, None, bias, 0.3, 3, d, causal=True, carried=True)
    o_rep, red_rep = fused_rows(q, kp.repeat_interleave(3, 1), wide.repeat_interleave(3, 1), fields, fields, None,
                                bias, 0.3, 3, d, causal=True, carried=True)
    assert torch.allclose(o, o_rep, rtol=1e-6, atol=1e-7)
    assert all(torch.allclose(red[x], red_rep[x], rtol=1e-6, atol=1e-7) for x in red)
    kk, vv = (x.double().repeat_interleave(3, 1) for x in (k, v))
    s = q.double() @ kk.transpose(-1, -2) * 0.3
    if bias is not None:
        s = s + bias * ((fields[:, :, None] == fields[:, None, :]) & (fields[:, :, None] >= 0)).double()[:, None]
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    p = torch.softmax(s, -1)
    assert float((o.double() - p @ vv).abs().max()) < 1e-5
    ent = -(p * torch.where(p > 0, p.log(), torch.zeros_like(p))).sum(-1)
    assert float((red["entropy"] - ent).abs().max()) < 1e-5
    onehot = (fields[:, None, None, :] == torch.arange(3)[:, None]).double()  # (b, 1, F, n)
    assert float((red["field_mass"] - torch.einsum("bhqk,bfk->bhqf", p, onehot[:, 0])).abs().max()) < 1e-5


def test_the_bias_never_writes_into_the_callers_mask():
    # a float32 mask is its own kernel-dtype copy (mask.to(float32) is the same tensor): adding the bias in place
    # changed the model's mask rows for every later layer (expected: the mask unchanged, all zeros)
    from runners.pretrained.fused import fused_rows, widen

    g = torch.manual_seed(6)
    q, k, v = (torch.randn(1, 2, 9, 4, generator=g) for _ in range(3))
    fields = torch.tensor([[0, 0, 1, 1, 1, 0, -1, 1, 0]])
    mask = torch.zeros(1, 1, 9, 9)
    fused_rows(q, *widen(k, v, fields, 2, dtype=torch.float32), fields, fields, mask, 1.0, 0.5, 2, 4)
    assert torch.equal(mask, torch.zeros(1, 1, 9, 9))


def test_a_batch_holds_at_most_its_records_and_tokens():
    # issue [capture-floor]: at most batch_size records and BATCH_TOKENS tokens a batch (a longer record alone);
    # every record once; without padding, one length a batch (brute-force checks over drawn lengths)
    from runners.pretrained.batches import BATCH_TOKENS, length_batches

    rng = np.random.default_rng(7)
    for _ in range(200):
        lengths = rng.choice([5, 64, 1000, 2048, 3000, 4096, 9000], size=rng.integers(1, 30)).tolist()
        size, padding = int(rng.integers(1, 9)), str(rng.choice(["none", "longest"]))
        batches = length_batches(lengths, size, padding)
        assert sorted(i for bt in batches for i in bt) == list(range(len(lengths)))
        for bt in batches:
            longest = max(lengths[i] for i in bt)
            assert len(bt) <= size and (len(bt) == 1 or len(bt) * longest <= BATCH_TOKENS)
            assert padding == "longest" or len({lengths[i] for i in bt}) == 1
        # and none is split needlessly: a batch of one length is full unless the next record of it starts another
        if padding == "none":
            for n in set(lengths):
                per = min(size, max(1, BATCH_TOKENS // n))
                assert sum(1 for bt in batches if lengths[bt[0]] == n) == -(-lengths.count(n) // per)
