"""Capture records each family's own attention: tiny random-weight models built from transformers
configs (no download), fourteen types checked in depth (tests/test_any_model.py sweeps every other), at a length beyond the sliding window (cap 24,
window 8).

Every reference here is the model run the way its own docs run it: a second copy loaded from the
same folder with ``attn_implementation="eager"``, called on *everything* its tokenizer returns
(``tokenizer(title, content, truncation="only_second", max_length=cap)`` for encoders,
``tokenizer(title + "\\n" + content, truncation=True, max_length=cap)`` for decoders), with
``output_attentions=True`` and no mask of ours. Checked per family:

(a) the baseline capture equals that forward's attention bitwise (float32);
(b) the bias run equals softmax(own scores + own mask + w * same), recomputed in float64 from the
    query and key each layer hands to its eager attention, and the mask that path received is the
    model's own mask plus w * same exactly; at layer 0 also P * exp(w * same) renormalised, from the
    reference forward alone;
(c) w = 0 through the bias code path reproduces the baseline bitwise;
(d) value norms equal ||v_hj W_O^h|| computed from hooks on the model's own value and output
    projection modules (the output module applied to head h's slice alone, minus its bias);
(e) masked keys carry exactly 0: the causal upper triangle, and keys beyond the window in every
    sliding-window layer, with and without the bias;
plus: head ablation equals the reference forward with that head's input to the output projection
zeroed by a pre-hook; batch sizes 1 and 3 give bitwise the same runs; padded batches agree within
float rounding and store no padding.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

import routestats as rs  # noqa: E402
from runners.pretrained import seam  # noqa: E402
from runners.pretrained.capture import capture_runs, plan_capture  # noqa: E402
from runners.pretrained.records import read_records  # noqa: E402
from runners.pretrained.seam import Condition  # noqa: E402
from runners.pretrained.load import load_model  # noqa: E402
from tests.tiny_models import OUT_MODULE, STYLES, VALUE_MODULE, WINDOW, save_tiny  # noqa: E402

pytestmark = pytest.mark.torch
ROOT = Path(__file__).resolve().parents[1]
CAP = 24
W = 1.0
RECORDS = read_records(ROOT / "data" / "docstrings_dbpedia" / "val.csv", "dbpedia", limit=7)
TEXTS = [(dict(r.fields)["title"], dict(r.fields)["content"]) for r in RECORDS]


def own_encoding(tok, causal: bool, title: str, content: str):
    if causal:
        return tok(title + "\n" + content, truncation=True, max_length=CAP, return_tensors="pt")
    return tok(title, content, truncation="only_second", max_length=CAP, return_tensors="pt")


def own_attention(model, enc) -> np.ndarray:
    with torch.no_grad():
        att = model(**enc, output_attentions=True).attentions
    return torch.stack([a[0] for a in att]).numpy()  # (layers, heads, n, n) float32


def stored(run_path: Path, what: str = "weights") -> dict[int, np.ndarray]:
    out = {}
    for blk in rs.load_run(run_path).iter_attention():
        L, H = len(np.unique(blk.layer)), int(blk.head.max()) + 1  # the stored layers (a hybrid's: some of them)
        a = getattr(blk, what)
        out[blk.example_id] = a.reshape(L, H, *a.shape[1:])
    return out


@pytest.fixture(scope="module", params=sorted(STYLES))
def fam(request, tmp_path_factory):
    name = request.param
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp(name.replace("-", "_"))
    folder = save_tiny(name, tmp / "model", [t for pair in TEXTS for t in pair])
    loaded = load_model(folder)
    conds = [Condition("baseline"), Condition("bias", bias=W), Condition("bias0", bias=0.0),
             Condition("ablate", ablate=((0, 1),))]
    capture_runs(loaded, RECORDS, tmp / "runs", conditions=conds, cap=CAP, forms=("reductions", "matrices"),
                 batch_size=3)
    own = T.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    tok = T.AutoTokenizer.from_pretrained(folder)
    encs = [own_encoding(tok, loaded.causal, a, b) for a, b in TEXTS]
    return SimpleNamespace(name=name, folder=folder, loaded=loaded, runs=tmp / "runs", own=own, tok=tok, encs=encs,
                           tmp=tmp)


def test_a_baseline_is_the_models_own_attention(fam):
    got = stored(fam.runs / "baseline")
    assert any(e["input_ids"].shape[1] > 2 * WINDOW for e in fam.encs)  # beyond the sliding window
    for i, enc in enumerate(fam.encs):
        want = own_attention(fam.own, enc)
        assert got[i].shape == want.shape
        assert np.array_equal(got[i], want), f"{fam.name}: example {i} differs from the model's own attention"
    man = rs.load_run(fam.runs / "baseline").manifest
    assert man["evaluation"]["capture"]["inputs"] == list(fam.tok.model_input_names)  # every tensor it returns
    assert man["model"]["family"] and man["model"]["model_type"] == fam.own.config.model_type


def _recorded_pass(monkeypatch, loaded, cond, encoded):
    """Run one record through the seam, recording what each layer hands to its eager attention."""
    seen = []
    real = seam._eager_of

    def wrap(module):
        fn = real(module)

        def rec(module, query, key, value, attention_mask, **kw):
            seen.append({"q": query.double(), "k": key.double(), "mask": None if attention_mask is None else
                         attention_mask.double(), "scaling": kw.get("scaling"), "softcap": kw.get("softcap")})
            return fn(module, query, key, value, attention_mask, **kw)
        return rec

    monkeypatch.setattr(seam, "_eager_of", wrap)
    got = list(seam.forward_batches(loaded, encoded, cond, batch_size=1))
    monkeypatch.setattr(seam, "_eager_of", real)
    return got, seen


def test_b_bias_is_added_to_the_models_own_scores_and_mask(fam, monkeypatch):
    plan = plan_capture(fam.loaded, RECORDS[:2], fields=None, cap=CAP, special="unnamed", truncation="only-last")
    stored_bias = stored(fam.runs / "bias")
    for k, e in enumerate(plan.encoded):
        _, base_seen = _recorded_pass(monkeypatch, fam.loaded, Condition("baseline"), [e])
        got, seen = _recorded_pass(monkeypatch, fam.loaded, Condition("bias", bias=W), [e])
        g = np.asarray(e.fields)
        same = ((g[:, None] == g[None, :]) & (g[:, None] >= 0)).astype(np.float64)
        assert np.array_equal(got[0].weights, stored_bias[k])  # the run holds what the seam computed
        for layer, (s, b) in enumerate(zip(seen, base_seen)):
            own_mask = np.zeros((len(g), len(g))) if b["mask"] is None else b["mask"][0, 0].numpy()
            np.testing.assert_array_equal(s["mask"][0, 0].numpy(), own_mask + W * same)
            q, kk = s["q"][0], s["k"][0]
            kk = kk.repeat_interleave(q.shape[0] // kk.shape[0], dim=0)
            scores = (q @ kk.transpose(-1, -2)) * (s["scaling"] if s["scaling"] is not None else q.shape[-1] ** -0.5)
            if s["softcap"]:
                scores = torch.tanh(scores / s["softcap"]) * s["softcap"]
            want = torch.softmax(scores + s["mask"][0], dim=-1).numpy()
            np.testing.assert_allclose(got[0].weights[layer], want, atol=2e-6, rtol=0)
    # layer 0 from the reference forward alone: softmax(s + m + w same) = P exp(w same), renormalised
    for k, enc in enumerate(fam.encs[:3]):
        p = own_attention(fam.own, enc)[0].astype(np.float64)
        g = np.asarray(plan_capture(fam.loaded, RECORDS[k:k + 1], fields=None, cap=CAP, special="unnamed",
                                    truncation="only-last").encoded[0].fields)
        same = (g[:, None] == g[None, :]) & (g[:, None] >= 0)
        want = p * np.exp(W * same)
        want /= want.sum(-1, keepdims=True)
        np.testing.assert_allclose(stored_bias[k][0], want, atol=2e-6, rtol=0)
    # the bias moves SFM in every layer (against the baseline)
    sfm = {c: rs.layer_summary(rs.load_run(fam.runs / c)).sort_values("layer")["sfm"].to_numpy()
           for c in ("baseline", "bias")}
    assert (sfm["bias"] > sfm["baseline"]).all()


def test_c_zero_bias_reproduces_the_baseline(fam):
    base, zero = stored(fam.runs / "baseline"), stored(fam.runs / "bias0")
    assert base.keys() == zero.keys()
    for i in base:
        assert np.array_equal(base[i], zero[i])


def _own_values(fam, enc) -> list[torch.Tensor]:
    """Value vectors (n, kv_heads, dh) per layer from hooks on the model's own value modules."""
    path, how = VALUE_MODULE[fam.name]
    cfg = fam.own.config
    H, L = cfg.num_attention_heads, cfg.num_hidden_layers
    D = cfg.hidden_size
    dh = getattr(cfg, "head_dim", None) or D // H
    kv = getattr(cfg, "num_key_value_heads", None) or H
    outs, hooks = [], []
    mods = []
    for i in range(L):
        m = fam.own.get_submodule(path.format(i=i))
        if m not in mods:
            mods.append(m)
            hooks.append(m.register_forward_hook(lambda _m, _a, o: outs.append(o[0].detach())))
    with torch.no_grad():
        fam.own(**enc)
    for h in hooks:
        h.remove()
    vals = []
    for o in outs:
        n = o.shape[0]
        if how == "v":
            v = o.reshape(n, kv, dh)
        elif how == "last-third":
            v = o[:, 2 * D:].reshape(n, H, dh)
        elif how == "neox":
            v = o.reshape(n, H, 3 * dh)[..., 2 * dh:]
        else:  # phi3: q (H*dh) | k (kv*dh) | v (kv*dh)
            v = o[:, H * dh + kv * dh:].reshape(n, kv, dh)
        vals.append(v)
    return vals


def test_d_value_norms_from_the_models_own_modules(fam):
    norms = stored(fam.runs / "baseline", "value_norms")
    cfg = fam.own.config
    H = cfg.num_attention_heads
    for i, enc in enumerate(fam.encs[:3]):
        vals = _own_values(fam, enc)
        for layer, v in enumerate(vals):
            n, kv, dh = v.shape
            out = fam.own.get_submodule(OUT_MODULE[fam.name].format(i=layer))
            z = torch.zeros(H, n, H * dh)
            for h in range(H):
                z[h, :, h * dh:(h + 1) * dh] = v[:, h // (H // kv)]
            with torch.no_grad():
                want = (out(z) - out(torch.zeros(H * dh))).norm(dim=-1).numpy()  # (H, n)
            np.testing.assert_allclose(norms[i][layer], want, rtol=2e-5, atol=1e-7)


def _sliding_layers(cfg) -> list[int]:
    types = getattr(cfg, "layer_types", None)
    if getattr(cfg, "sliding_window", None) is None:
        return []
    if types:
        return [i for i, t in enumerate(types) if t == "sliding_attention"]
    return list(range(cfg.num_hidden_layers))


def test_e_masked_keys_carry_exactly_zero(fam):
    slide = _sliding_layers(fam.own.config) if fam.loaded.causal else []
    if fam.name in ("mistral", "gemma2"):
        assert slide  # the families with a window have sliding layers here
    for cond in ("baseline", "bias"):
        for i, a in stored(fam.runs / cond).items():
            n = a.shape[-1]
            qi, kj = np.indices((n, n))
            if fam.loaded.causal:
                assert np.abs(a[..., kj > qi]).max(initial=0.0) == 0.0
            beyond = qi - kj >= WINDOW
            for layer in slide:
                assert np.abs(a[layer][..., beyond]).max(initial=0.0) == 0.0, f"{cond} layer {layer} example {i}"
                if cond == "baseline" and beyond.any():  # the model's own forward zeroes them too
                    own = own_attention(fam.own, fam.encs[i])[layer]
                    assert np.abs(own[..., beyond]).max() == 0.0
                    assert a[layer][..., ~beyond & (kj <= qi)].min() > 0.0


def test_ablation_zeroes_the_heads_input_to_the_output_projection(fam):
    got = stored(fam.runs / "ablate")
    out = fam.own.get_submodule(OUT_MODULE[fam.name].format(i=0))
    H = fam.own.config.num_attention_heads
    calls = []

    def zero_head_1(_m, args):
        if calls:  # ALBERT's one shared module: layer 0 is its first call
            return None
        calls.append(1)
        x = args[0].clone()
        dh = x.shape[-1] // H
        x[..., dh:2 * dh] = 0
        return (x,)

    for i, enc in enumerate(fam.encs[:3]):
        calls.clear()
        hook = out.register_forward_pre_hook(zero_head_1)
        try:
            want = own_attention(fam.own, enc)
        finally:
            hook.remove()
        assert np.array_equal(got[i], want)
    base = stored(fam.runs / "baseline")
    assert np.array_equal(got[0][0], base[0][0]) and not np.array_equal(got[0][1], base[0][1])


def test_batches_are_bitwise_one_at_a_time_and_padding_is_sliced_off(fam):
    one = fam.tmp / "one"
    capture_runs(fam.loaded, RECORDS, one, conditions=[Condition("baseline")], cap=CAP, forms=("matrices",),
                 batch_size=1)
    padded = fam.tmp / "padded"
    capture_runs(fam.loaded, RECORDS, padded, conditions=[Condition("baseline")], cap=CAP, forms=("matrices",),
                 batch_size=4, padding="longest")
    a, b, c = stored(fam.runs / "baseline"), stored(one / "baseline"), stored(padded / "baseline")
    lengths = {len(x) for x in (e["input_ids"][0] for e in fam.encs)}
    assert len(lengths) > 1  # the padded batches really pad
    for i in a:
        assert np.array_equal(a[i], b[i])
        assert c[i].shape == b[i].shape
        np.testing.assert_allclose(c[i], b[i], atol=1e-6, rtol=0)


def test_device_reductions_equal_the_host_ones(fam):
    """Reductions computed in torch on the device (what a GPU capture stores) equal those the run
    writer computes in numpy from the matrices (routestats.rundir.reductions, the definition)."""
    out = {}
    for on in (True, False):
        out[on] = fam.tmp / f"red-{on}"
        capture_runs(fam.loaded, RECORDS, out[on], conditions=[Condition("baseline"), Condition("bias", bias=W)],
                     cap=CAP, forms=("reductions",), batch_size=3, device_reductions=on)
    for cond in ("baseline", "bias"):
        runs = {on: rs.load_run(out[on] / cond) for on in out}
        assert runs[True].manifest["evaluation"]["capture"]["reductions_on_device"] is True
        host = {b.example_id: b for b in runs[False].iter_reductions()}
        for b in runs[True].iter_reductions():
            h = host[b.example_id]
            for k in ("row_mass", "entropy", "entropy_rownorm", "field_mass", "first_mass"):
                np.testing.assert_allclose(getattr(b, k), getattr(h, k), rtol=1e-12, atol=1e-15)
        a, b = (rs.layer_summary(runs[on]).sort_values("layer") for on in (True, False))
        np.testing.assert_allclose(a["sfm"].to_numpy(), b["sfm"].to_numpy(), rtol=1e-12)
