"""Regime operators of transformers checkpoints, built from the transformers modules themselves.

Tiny random-weight models of GPT-2 (Conv1D, biases, LayerNorm), Llama (RMSNorm, RoPE, GQA), Qwen2
(q/k/v biases), Gemma 2 (soft-capping, sandwich norms, query_pre_attn_scalar, sliding window),
Gemma 3 (QK-norm, 1 + gamma norms, local RoPE), Qwen 3 (QK-norm) and Phi-3 (fused qkv_proj), in
float64. At every point three checks, each against something the adapter did not write:

* analytic J_T, J_Q, J_K against autograd of the pathway-split forward F (METHODS B.8: <= 1e-10);
* F(x_r, x_r, x_r) against the residual the model's own layer hands its pre-MLP norm, recorded by a hook;
* J_T + J_Q + J_K against autograd of the model's own layer forward with respect to x_r.

transformers computes RMSNorm (and Gemma's eager softmax) in float32 even in a float64 model, so the
last two are float32-accurate: measured 1e-18 (GPT-2, LayerNorm in float64) to 2e-6 (Gemma 3).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from routestats.errors import RoutestatsError  # noqa: E402
from runners.regime.sublayer import operating_point  # noqa: E402
from runners.regime.pretrained import PretrainedStack  # noqa: E402
from tests.conftest import runners_cli  # noqa: E402

pytestmark = pytest.mark.torch
ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, vocab_size=64)
GQA = dict(num_key_value_heads=2)
CONFIGS = {
    "gpt2": dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=64),
    "llama": dict(SMALL, **GQA),
    "qwen2": dict(SMALL, **GQA),
    "gemma2": dict(SMALL, **GQA, head_dim=8, sliding_window=5, query_pre_attn_scalar=16, attn_logit_softcapping=2.0,
                   layer_types=["sliding_attention", "full_attention"]),
    "gemma3_text": dict(SMALL, **GQA, head_dim=8, sliding_window=5, query_pre_attn_scalar=16,
                        layer_types=["sliding_attention", "full_attention"]),
    "qwen3": dict(SMALL, **GQA, head_dim=8),
    "phi3": dict(SMALL, **GQA, pad_token_id=0, bos_token_id=1, eos_token_id=2),
}
IDS = list(range(3, 15))  # 12 tokens: beyond the 5-token windows


def tiny(kind: str, attn: str = "eager"):
    """A float64 random-weight model whose biases, norms and score scale are far from their initial values."""
    torch.manual_seed(0)
    cfg = T.AutoConfig.for_model(kind, **CONFIGS[kind])
    model = T.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn).to(torch.float64).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.3)
            elif "norm" in name or "ln_" in name:
                p.normal_(0 if "gemma" in kind else 1, 0.3)  # Gemma's norms multiply by 1 + weight
            elif any(k in name for k in ("q_proj", "k_proj", "c_attn", "qkv_proj")):
                p.mul_(8)  # scores of order 1: softmax neither uniform nor saturated, the soft cap bites
    return model


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def points(request):
    kind = request.param
    torch.set_num_threads(1)
    stack = PretrainedStack(tiny(kind), None)
    out = []
    for layer in range(2):
        sub, X, ref, own = stack.point(IDS, layer)
        for r in (len(IDS) - 1, 2):
            out.append((layer, r, sub, operating_point(sub, X, r, ref(r), own=own(r))))
    return kind, out


def test_operators_match_autograd_and_the_models_own_forward(points):
    kind, pts = points
    for layer, r, sub, op in pts:
        e = op["errors"]
        size = max(1.0, float(op["sublayer"].output(op["X"], r).abs().max()))
        # METHODS B.8.1-2: closed forms vs autograd of F, float64
        assert max(e[k] for k in ("J_T", "J_Q", "J_K", "J_full")) < 1e-10, (kind, layer, r, e)
        # the model's own layer (float32 norms inside transformers): measured <= 1e-6 relative
        assert e["forward"] < 1e-6 * size, (kind, layer, r, e)
        assert e["own_jacobian"] < 1e-5, (kind, layer, r, e)
    # the operators are not trivial: query gating is a real part of the attention's Jacobian somewhere
    ratio = max(np.abs(op["analytic"]["J_Q"]).max() / np.abs(op["analytic"]["J_T"] - np.eye(32)).max()
                for *_, op in pts)
    assert ratio > 0.05, (kind, ratio)


def test_what_each_architecture_brings_is_found(points):
    kind, pts = points
    subs = {layer: sub for layer, _, sub, _ in pts}
    if kind == "gpt2":  # Conv1D transposed, LayerNorm with beta, no RoPE, 1/sqrt(8)
        assert subs[0].norm == "layernorm" and subs[0].beta is not None and not subs[0].rope
        assert subs[0].b_Q is not None and subs[0].score_scale == pytest.approx(8 ** -0.5)
    if kind in ("llama", "qwen2", "qwen3", "phi3"):
        assert subs[0].norm == "rmsnorm" and subs[0].rope and subs[0].n_kv_head == 2
    if kind == "qwen2":
        assert subs[0].b_Q is not None and subs[0].b_O is None
    if kind.startswith("gemma"):  # sliding window on layer 0 only, sandwich norm, query_pre_attn_scalar 16
        assert (subs[0].window, subs[1].window) == (5, None)
        assert subs[0].post_gamma is not None and subs[0].score_scale == pytest.approx(0.25)
    if kind == "gemma2":
        assert subs[0].softcap == 2.0
        # the cap bites at the last token: some kappa = 1 - tanh^2 well below 1
        layer, r, sub, op = pts[0]
        kappa = sub.double()._attend(op["X"], r, op["X"][r][None], op["X"][r][None], op["X"][r][None])[4]
        assert float(kappa.min()) < 0.7
    if kind in ("gemma3_text", "qwen3"):
        assert subs[0].q_gamma is not None and subs[0].k_gamma is not None
    for layer, r, sub, op in pts:  # a sliding layer's last query sees exactly its window
        if sub.window:
            assert sub.keys(op["X"], r) == list(range(max(0, r - sub.window + 1), r + 1))


def test_sdpa_and_eager_models_give_the_same_operators():
    # the reference path differs (SDPA float64 softmax vs eager float32 softmax); the operators must not
    ops = []
    for attn in ("eager", "sdpa"):
        stack = PretrainedStack(tiny("llama", attn), None)
        sub, X, ref, own = stack.point(IDS, 1)
        ops.append(operating_point(sub, X, 11, ref(11), own=own(11))["analytic"]["J_Q"])
    # X entering layer 1 comes from layer 0's own forward, whose eager softmax runs in float32: measured 3.5e-9
    assert np.abs(ops[0] - ops[1]).max() < 1e-7


def test_a_layer_the_tensors_do_not_describe_is_refused():
    model = tiny("llama")
    # something the adapter cannot see: a constant added to the attention's output projection
    model.model.layers[1].self_attn.o_proj.register_forward_hook(lambda m, a, y: y + 0.5)
    stack = PretrainedStack(model, None)
    sub, X, ref, own = stack.point(IDS, 1)
    with pytest.raises(RoutestatsError, match="differs from the model's own output by 0.5"):
        operating_point(sub, X, 11, ref(11))
    sub, X, ref, own = stack.point(IDS, 0)  # layer 0 is untouched and still certified
    assert operating_point(sub, X, 11, ref(11))["errors"]["forward"] < 1e-6


def test_parallel_attention_and_mlp_is_refused_in_one_line():
    torch.manual_seed(0)
    cfg = T.AutoConfig.for_model("phi", **SMALL)  # Phi: one norm feeds attention and MLP in parallel
    stack = PretrainedStack(T.AutoModelForCausalLM.from_config(cfg).to(torch.float64).eval(), None)
    with pytest.raises(RoutestatsError, match="^layer 0: 0 norms follow the attention"):
        stack.point(IDS, 0)


def run_cli(args, capsys) -> tuple[int, str]:
    """``python -m runners ARGS`` in-process (its real exit codes); stdout and stderr together."""
    code, out, err = runners_cli(args, capsys)
    return code, out + err


def the_error(text: str) -> str:
    """The one line a refusal prints (beside transformers' loading bar and the machine-load hint)."""
    lines = [ln for ln in text.splitlines() if ln.strip() and "Loading weights" not in ln and not ln.startswith("hint:")]
    assert len(lines) == 1 and lines[0].startswith("error: "), text
    return lines[0]


def test_regime_cli_on_a_transformers_folder(tmp_path, capsys):
    """``python -m runners regime FOLDER`` on saved tiny GPT-2 and Gemma 2 folders, then ``routestats regime``."""
    from typer.testing import CliRunner

    from routestats.cli import app as rs_app
    from tests.tiny_models import save_tiny

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the city council met on tuesday\n\nthe final vote was postponed until next month\n")
    words = prompts.read_text().split()
    for name in ("gpt2", "gemma2"):
        folder = save_tiny(name, tmp_path / name, words)
        out = tmp_path / f"{name}-ops"
        layers = ["--layers", "0,1"] if name == "gpt2" else ["--depths", "7"]  # 7 normalised depths of 2 layers: 0, 1
        code, text = run_cli(["regime", folder, *layers, "--examples", "0,1", "--prompts", prompts,
                              "--out", out, "--lattice", "60", "--threads", "1"], capsys)
        assert code == 0, text
        idx = json.loads((out / "operators" / "index.json").read_text())
        assert idx["model_kind"] == f"transformers:{name}" and idx["n_layers"] == 2 and len(idx["points"]) == 4
        assert sorted({p["layer"] for p in idx["points"]}) == [0, 1]
        for p in idx["points"]:
            assert max(v for k, v in p["errors"].items() if k.startswith("J_")) < 1e-10
            assert p["errors"]["own_jacobian"] < 1e-5
        res = CliRunner().invoke(rs_app, ["regime", str(out), "--out", str(tmp_path / f"{name}-report")])
        assert res.exit_code == 0, res.output
    # the cross-architecture protocol in one command: both checkpoints, 7 normalised depths, OUT/<name>/operators
    both = tmp_path / "both"
    code, text = run_cli(["regime", tmp_path / "gpt2", tmp_path / "gemma2", "--depths", "7", "--prompts", prompts,
                          "--out", both, "--lattice", "30", "--threads", "1"], capsys)
    assert code == 0 and "routestats regime" in text, text
    assert sorted(p.name for p in both.iterdir()) == ["gemma2", "gpt2"]
    res = CliRunner().invoke(rs_app, ["regime", str(both), "-o", str(tmp_path / "both-report")])
    assert res.exit_code == 0 and "across models" in res.output, res.output
    # a folder without --out is refused in one line, nothing written into the model's folder
    code, text = run_cli(["regime", tmp_path / "gpt2", "--layers", "0", "--prompts", prompts], capsys)
    assert code == 2 and "needs --out" in the_error(text)
    assert not (tmp_path / "gpt2" / "operators").exists()
    for bad, needle in ((["--layers", "0", "--depths", "3"], "not both"), (["--layers", "2"], "layer 2 is out of range")):
        code, text = run_cli(["regime", tmp_path / "gpt2", *bad, "--prompts", prompts, "--out", tmp_path / "x"], capsys)
        assert code == 2 and needle in the_error(text)


def test_a_prompts_file_edited_under_the_same_path_makes_other_points(tmp_path, capsys):
    """Issue [same-inputs]: `runners regime` kept example 0's operating point from a prompts file edited under the same
    path (the index held the path, not the content). The index now holds the prompts' SHA-256: the rerun with the
    edited file is refused naming it (--force replaces the points), the same file under another path is kept."""
    from tests.tiny_models import save_tiny

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the city council met on tuesday\n\nthe final vote was postponed\n")
    folder = save_tiny("gpt2", tmp_path / "gpt2", prompts.read_text().split())
    out = tmp_path / "ops"
    args = ["regime", folder, "--layers", "0", "--examples", "0", "--out", out, "--lattice", "20", "--threads", "1"]
    assert run_cli([*args, "--prompts", prompts], capsys)[0] == 0
    before = json.loads((out / "operators" / "index.json").read_text())["points"]
    moved = tmp_path / "elsewhere.txt"
    moved.write_text(prompts.read_text())
    code, text = run_cli([*args, "--prompts", moved], capsys)  # the same content under another path: kept
    assert code == 0 and json.loads((out / "operators" / "index.json").read_text())["points"] == before, text
    prompts.write_text("an entirely different first prompt here\n\nthe final vote was postponed\n")
    code, text = run_cli([*args, "--prompts", prompts], capsys)
    assert code == 2 and "other content of domain_file" in the_error(text), text
    assert run_cli([*args, "--prompts", prompts, "--force"], capsys)[0] == 0
    after = json.loads((out / "operators" / "index.json").read_text())["points"]
    assert after[0]["sha256"] != before[0]["sha256"]  # the point was built again, from the new prompt
