"""Pathway Jacobians: closed forms vs autograd of the pathway-split forward, finite forwards,
the model adapters (MoFA GPT, SAAB encoder) and the state-dict layouts (GPT-2, Llama) against
independent re-implementations of those architectures."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from routestats.regime.certify import Operators, certify, directional  # noqa: E402
from runners.training.mofa import GPTConfig, MoFAGPT  # noqa: E402
from runners.regime.adapters import (encoder_point, gpt2_sublayer, llama_sublayer, mofa_point,  # noqa: E402
                                     random_sublayer)
from runners.regime.sublayer import operating_point, rope_matrix  # noqa: E402
from runners.training.train import seed_everything  # noqa: E402

pytestmark = pytest.mark.torch


def _max_err(op):
    return max(op["errors"][k] for k in ("J_T", "J_Q", "J_K", "J_full"))


@pytest.mark.parametrize("n_sigmoid, bias", [(0, "neg_log_t"), (2, "neg_log_t"), (4, "neg_log_n"), (1, "none")])
def test_mofa_closed_forms_match_autograd(n_sigmoid, bias):
    torch.set_num_threads(1)
    seed_everything(5)
    m = MoFAGPT(GPTConfig(n_ctx=12, n_layer=2, n_head=4, d_model=16, n_sigmoid=n_sigmoid, sigmoid_bias=bias))
    ids = torch.randint(0, 256, (12,))
    sub, X, ref = mofa_point(m, ids, layer=1)
    op = operating_point(sub, X, 9, ref(9))
    # METHODS B.8.1-2: analytic vs autograd within 1e-10 (float64); J_T + J_Q + J_K = dF(x,x,x)/dx;
    # the split forward reproduces the model's own sublayer output
    assert _max_err(op) < 1e-10
    assert op["errors"]["forward"] < 1e-12


@pytest.mark.parametrize("kind", ["gpt2", "llama", "encoder", "mofa"])
def test_generic_sublayer_closed_forms(kind):
    sub = random_sublayer(kind, seed=3)
    X = torch.randn(9, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    op = operating_point(sub, X, 6)
    assert _max_err(op) < 1e-10
    ana = op["analytic"]
    # the pathways are not trivially zero, and the per-head query Jacobians sum to J_Q
    assert np.abs(ana["J_Q"]).max() > 1e-3 and np.abs(ana["J_K"]).max() > 1e-4
    np.testing.assert_allclose(ana["J_Q_heads"].sum(0), ana["J_Q"], atol=1e-13)


def test_interleaved_rope_equals_half_rope_on_permuted_weights():
    # GGUF/Meta checkpoints store W_Q, W_K permuted for interleaved RoPE; the same model must result
    sub = random_sublayer("llama", d=16, n_head=4, seed=8)
    dh = sub.dh

    def permute(W, heads):
        return W.reshape(heads, 2, dh // 2, -1).transpose(1, 2).reshape(heads * dh, -1)

    inter = random_sublayer("llama", d=16, n_head=4, seed=8)
    inter.W_Q, inter.W_K, inter.rope_style = permute(sub.W_Q, 4), permute(sub.W_K, 2), "interleaved"
    X = torch.randn(7, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    for r in range(7):
        torch.testing.assert_close(inter.output(X, r), sub.output(X, r), atol=1e-12, rtol=0)
    assert _max_err(operating_point(inter, X, 5)) < 1e-10


def test_rope_is_a_rotation():
    for style in ("half", "interleaved"):
        R = rope_matrix(5, 8, style=style)
        np.testing.assert_allclose(R.T @ R, np.eye(8), atol=1e-12)
        np.testing.assert_allclose(rope_matrix(0, 8, style=style), np.eye(8), atol=0)
    with pytest.raises(ValueError, match="rope style"):
        rope_matrix(1, 8, style="spiral")


def test_finite_forward_growth_matches_operators():
    sub = random_sublayer("mofa", d=16, n_head=4, seed=4)
    X = torch.randn(10, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    ana = operating_point(sub, X, 8)["analytic"]
    ops = Operators(ana["J_T"], ana["J_Q"], ana["J_K"])
    V = np.random.default_rng(0).standard_normal((16, 12))
    V /= np.linalg.norm(V, axis=0)
    t = directional(ops, V)
    for eps, tol in ((1e-4, 1e-2), (1e-6, 1e-4)):
        fd = sub.finite_forward(X, 8, V, eps_rel=eps)
        # forward differences: g^ = g + O(eps |x_r|), METHODS B.8.3 (the residual follows the value path)
        for k in ("g_T", "g_TQ", "g_TK", "g_full"):
            np.testing.assert_allclose(fd[k], t[k], atol=tol, err_msg=k)
    # had the residual not carried the perturbation, g^_T would be |A_T v|^2 - 1 (METHODS B.8.3's bug)
    AT = ana["J_T"] - np.eye(16)
    assert np.abs((np.linalg.norm(AT @ V, axis=0) ** 2 - 1) - t["g_T"]).min() > 0.1
    c = certify(ops)
    assert c.dim_S + c.n_near_zero <= 16


def test_routing_shift_vanishes_outside_the_query_support():
    from routestats.regime.geometry import query_gating_geometry

    sub = random_sublayer("gpt2", d=32, n_head=2, seed=2)
    X = torch.randn(6, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    ana = operating_point(sub, X, 5)["analytic"]
    h = 0
    Kv, a = ana["key_vectors"][h], ana["alpha"][h]
    _, s, Vt = np.linalg.svd((Kv[1:] - Kv[0]) @ ana["query_map"][h])
    null = Vt[int((s > 1e-12 * s[0]).sum()):].T
    active = np.linalg.svd(ana["J_Q_heads"][h])[2][:3].T
    shift_null = sub.routing_shift(X, 5, null[:, :4])[:, h]
    shift_active = sub.routing_shift(X, 5, active)[:, h]
    # Fig. 4c: query perturbations outside the support leave the routing unchanged (to O(eps))
    assert shift_null.max() < 1e-3 * shift_active.min()
    g = query_gating_geometry(ana["X_keys"], a, key_vectors=Kv, W_VO=ana["W_VO"][h], query_map=ana["query_map"][h],
                              J_q=ana["J_Q_heads"][h], W_QK=ana["W_QK"][h])
    # Prop. 1 with 6 keys and d_h = 16: rank J_q = dim U_r = 5 (the bound is attained), range and
    # null checks hold to rounding, and |J_q| is below both bounds
    assert (g.dim_U, g.rank_Jq) == (5, 5)
    assert g.range_residual < 1e-12 and g.null_residual < 1e-12
    assert g.norm_Jq <= g.bound_cs and g.norm_Jq <= g.bound_paper


def test_sigmoid_heads_leave_the_centred_subspace():
    from routestats.regime.geometry import geometry_table

    sub = random_sublayer("mofa", d=32, n_head=2, seed=3)
    X = torch.randn(9, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    geo = geometry_table(operating_point(sub, X, 5)["analytic"]).set_index("head_type")
    # METHODS B.2: Prop. 1 does not hold for sigmoid heads: rank above dim U_r, range outside W_VO U_r
    assert geo.loc["softmax", "range_residual"] < 1e-12
    assert geo.loc["sigmoid", "rank_Jq"] > geo.loc["sigmoid", "dim_U"]
    assert geo.loc["sigmoid", "range_residual"] > 0.1


def _gpt2_state_dict(d=16, n_head=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64) * 0.3  # noqa: E731
    return {"transformer.h.0.ln_1.weight": 1 + r(d), "transformer.h.0.ln_1.bias": r(d),
            "transformer.h.0.attn.c_attn.weight": r(d, 3 * d), "transformer.h.0.attn.c_attn.bias": r(3 * d),
            "transformer.h.0.attn.c_proj.weight": r(d, d), "transformer.h.0.attn.c_proj.bias": r(d)}


def test_gpt2_state_dict_against_an_independent_forward():
    d, H, T = 16, 4, 7
    sd = _gpt2_state_dict(d, H)
    X = torch.randn(T, d, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    p = "transformer.h.0."
    # GPT-2 as written in its own code: Conv1D (x @ W + b), causal scaled dot-product attention
    xn = F.layer_norm(X, (d,), sd[p + "ln_1.weight"], sd[p + "ln_1.bias"], 1e-5)
    q, k, v = (xn @ sd[p + "attn.c_attn.weight"] + sd[p + "attn.c_attn.bias"]).split(d, -1)
    heads = lambda t: t.view(T, H, d // H).transpose(0, 1)  # noqa: E731
    o = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True).transpose(0, 1).reshape(T, d)
    ref = X + o @ sd[p + "attn.c_proj.weight"] + sd[p + "attn.c_proj.bias"]
    sub = gpt2_sublayer(sd, 0, n_head=H)
    for r in range(T):
        torch.testing.assert_close(sub.output(X, r), ref[r], atol=1e-12, rtol=0)
    assert _max_err(operating_point(sub, X, T - 1, ref[T - 1])) < 1e-10
    with pytest.raises(KeyError, match="h.3.attn.c_attn.weight"):
        gpt2_sublayer(sd, 3, n_head=H)


def test_llama_state_dict_against_an_independent_forward():
    d, H, KV, T, theta = 16, 4, 2, 7, 10000.0
    dh = d // H
    g = torch.Generator().manual_seed(9)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64) * 0.3  # noqa: E731
    p = "model.layers.2."
    sd = {p + "input_layernorm.weight": 1 + r(d), p + "self_attn.q_proj.weight": r(H * dh, d),
          p + "self_attn.k_proj.weight": r(KV * dh, d), p + "self_attn.v_proj.weight": r(KV * dh, d),
          p + "self_attn.o_proj.weight": r(d, H * dh), p + "self_attn.q_proj.bias": r(H * dh),
          p + "self_attn.k_proj.bias": r(KV * dh), p + "self_attn.v_proj.bias": r(KV * dh)}  # Qwen-style biases
    X = torch.randn(T, d, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    # Hugging Face Llama: RMSNorm, rotate_half RoPE with cos/sin of [freqs, freqs], repeat_kv for GQA
    xn = X * torch.rsqrt((X * X).mean(-1, keepdim=True) + 1e-5) * sd[p + "input_layernorm.weight"]
    lin = lambda name: xn @ sd[p + f"self_attn.{name}_proj.weight"].T + sd[p + f"self_attn.{name}_proj.bias"]  # noqa: E731
    q, k, v = lin("q").view(T, H, dh).transpose(0, 1), lin("k").view(T, KV, dh).transpose(0, 1), lin("v").view(T, KV, dh).transpose(0, 1)
    inv = 1.0 / theta ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    rot_half = lambda t: torch.cat([-t[..., dh // 2:], t[..., : dh // 2]], -1)  # noqa: E731
    q, k = q * cos + rot_half(q) * sin, k * cos + rot_half(k) * sin
    k, v = k.repeat_interleave(H // KV, 0), v.repeat_interleave(H // KV, 0)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(0, 1).reshape(T, d)
    ref = X + o @ sd[p + "self_attn.o_proj.weight"].T
    sub = llama_sublayer(sd, 2, n_head=H, n_kv_head=KV, rope_theta=theta)
    for t in range(T):
        torch.testing.assert_close(sub.output(X, t), ref[t], atol=1e-12, rtol=0)
    assert _max_err(operating_point(sub, X, T - 1, ref[T - 1])) < 1e-10


@pytest.mark.parametrize("variant, shuffle, mask", [("baseline", False, None), ("saab", False, None),
                                                    ("saab", True, None), ("saab", False, [0.0, 2.0])])
def test_saab_encoder_adapter(variant, shuffle, mask):
    from runners.training.model import EncoderConfig, SAABEncoder

    torch.manual_seed(3)
    cfg = EncoderConfig(vocab_size=50, d_model=16, num_layers=2, num_heads=4, ff_dim=32, max_length=16, dropout=0.0,
                        variant=variant, saab_shuffle_bias=shuffle, saab_layer_mask=mask)
    model = SAABEncoder(cfg).eval()
    ids = torch.randint(1, 50, (9,))
    fids = torch.tensor([4, 4, 4, 5, 5, 5, 5, 5, 5])
    sub, X, ref = encoder_point(model, ids, fids, layer=1)
    assert (sub.score_bias is not None) == (variant == "saab")
    op = operating_point(sub, X, 4, ref(4))
    # bidirectional keys, the SAAB bias as a constant score bias: closed forms still exact
    assert _max_err(op) < 1e-10 and op["errors"]["forward"] < 1e-12
    # the adapter's forward is the encoder's own attention sublayer for every query
    for r in range(9):
        torch.testing.assert_close(sub.output(X, r), ref(r), atol=1e-12, rtol=0)


def test_regime_commands_end_to_end(tmp_path):
    import pandas as pd
    from typer.testing import CliRunner

    import routestats.cli as rcli
    from routestats.errors import RoutestatsError
    import runners.__main__ as rmain
    from runners.training.mofa import MoFATrain, train_mofa_run

    torch.set_num_threads(1)
    text = "The quick brown fox jumps over the lazy dog. " * 20
    run = train_mofa_run(tmp_path / "run", cfg=GPTConfig(n_ctx=16, n_layer=2, n_head=2, d_model=16, n_sigmoid=1),
                         train_text=[text], domains={"prose": [text]}, seed=1, tc=MoFATrain(steps=3, batch_size=2))
    (tmp_path / "prose.txt").write_text(text)
    args = ["regime", str(run), "--layers", "0,1", "--examples", "0,2", "--domain-file", str(tmp_path / "prose.txt"),
            "--lattice", "300", "--threads", "1"]
    res = CliRunner().invoke(rmain.app, args)
    assert res.exit_code == 0, res.output
    assert "4 operating points" in res.output and float(res.output.split("=")[-1]) < 1e-10
    index = json.loads((run / "operators" / "index.json").read_text())
    assert sorted((p["layer"], p["example"]) for p in index["points"]) == [(0, 0), (0, 2), (1, 0), (1, 2)]
    # resumable: a rerun keeps the stored points (same files, nothing recomputed)
    mtimes = {p["file"]: (run / "operators" / p["file"]).stat().st_mtime_ns for p in index["points"]}
    assert CliRunner().invoke(rmain.app, args).exit_code == 0
    assert {f: (run / "operators" / f).stat().st_mtime_ns for f in mtimes} == mtimes
    # other settings never silently replace them (was: the index was rewritten with the new points only)
    res = CliRunner().invoke(rmain.app, [*args[:-4], "--lattice", "200", "--threads", "1"])
    # (python -m runners prints a RoutestatsError in one line, exit 2: runners.commands.one_line_errors)
    assert isinstance(res.exception, RoutestatsError) and "holds 4 operating points built with lattice 200 here " \
        "vs 300 there; --force" in str(res.exception), res.output
    assert json.loads((run / "operators" / "index.json").read_text()) == index

    out = tmp_path / "reg"
    res = CliRunner().invoke(rcli.app, ["regime", str(run), "--layer", "1", "-o", str(out), "--probes", "40"])
    assert res.exit_code == 0, res.output
    summary = pd.read_csv(out / "tables" / "summary.csv")
    assert list(summary["layer"]) == [1, 1] and list(summary["example"]) == [0, 2]
    assert set(pd.read_csv(out / "tables" / "search.csv")["search"]) == {"blind_ambient", "oracle_in_S", "spectral"}
    ag = pd.read_csv(out / "tables" / "agreement.csv")
    assert (ag["directions"] == 300).all() and (ag["pearson_r"] > 0.999).all()
    assert (out / "report.html").is_file() and (out / "figures" / "regime-map.png").is_file()
    cost = pd.read_csv(out / "tables" / "cost.csv")  # METHODS B.10, measured while building the operators
    assert (cost["t_setup"] > 0).all() and (cost["c_f"] > cost["c_q"]).all() and (cost["break_even_directions"] > 0).all()
    # a changed operator file is caught by its hash; a missing selection and a non-operator file are clear errors
    f = run / "operators" / index["points"][0]["file"]
    f.write_bytes(f.read_bytes()[:-1] + b"x")
    res = CliRunner().invoke(rcli.app, ["regime", str(run)])
    assert res.exit_code == 2 and "SHA-256 differs" in res.output
    res = CliRunner().invoke(rcli.app, ["regime", str(run), "--layer", "7"])
    assert res.exit_code == 2 and "no stored operating point" in res.output
    res = CliRunner().invoke(rcli.app, ["regime", str(tmp_path / "prose.txt")])
    assert res.exit_code == 2 and "not an operator file" in res.output
    # --force replaces them with points of the new settings
    res = CliRunner().invoke(rmain.app, ["regime", str(run), "--layers", "0", "--examples", "0", "--domain-file",
                                         str(tmp_path / "prose.txt"), "--lattice", "200", "--threads", "1", "--force"])
    assert res.exit_code == 0, res.output
    index = json.loads((run / "operators" / "index.json").read_text())
    assert index["settings"]["lattice"] == 200 and [(p["layer"], p["example"]) for p in index["points"]] == [(0, 0)]
