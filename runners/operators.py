"""Pathway Jacobians of a residual attention sublayer (METHODS Part II B.2-B.3), for the project's
MoFA GPT (pre-LN LayerNorm, fused QKV with biases, softmax and sigmoid heads, causal).

At an operating point (layer, hidden states X entering the layer, query token r, perturbed
token m = r) the sublayer output y_r = x_r + W_O concat_h(o_r^h) + b_O depends on x_r through
three pathways. ``pathway_split_forward`` feeds the perturbed token separately into the value,
query and key computations (each with its own pre-norm; the residual follows the value path),
so autograd of it gives the ground truth J_T, J_Q, J_K; ``analytic_operators`` gives the closed
forms, which must agree to ~1e-12 in float64.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .mofa import MoFAGPT


def _layernorm_jacobian(ln: torch.nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    """D = diag(gamma)/sigma (I - 11'/d - z z'/d), sigma = sqrt(var_biased + eps), z = (x - mean)/sigma."""
    d = x.shape[-1]
    mu = x.mean()
    sigma = torch.sqrt(((x - mu) ** 2).mean() + ln.eps)
    z = (x - mu) / sigma
    eye = torch.eye(d, dtype=x.dtype)
    return torch.diag(ln.weight) / sigma @ (eye - torch.ones(d, d, dtype=x.dtype) / d - torch.outer(z, z) / d)


def hidden_entering(model: MoFAGPT, ids: torch.Tensor, layer: int) -> torch.Tensor:
    """Residual stream (T x d) entering block ``layer`` for one sequence."""
    with torch.no_grad():
        T = ids.shape[-1]
        x = model.wte(ids[None]) + model.wpe(torch.arange(T))[None]
        for blk in model.blocks[:layer]:
            x, _ = blk(x)
    return x[0]


def _split_heads(model: MoFAGPT, layer: int):
    blk = model.blocks[layer]
    D = model.cfg.d_model
    W = blk.attn.c_attn.weight
    b = blk.attn.c_attn.bias
    return blk, (W[:D], b[:D]), (W[D:2 * D], b[D:2 * D]), (W[2 * D:], b[2 * D:])


def _bias(cfg, T, dtype):
    b = cfg.sigmoid_bias
    if b == "neg_log_t":
        return -torch.log(torch.arange(1, T + 1, dtype=dtype))
    if b == "neg_log_n":
        return torch.full((T,), -math.log(cfg.n_ctx), dtype=dtype)
    return torch.full((T,), 0.0 if b == "none" else float(b), dtype=dtype)


def pathway_split_forward(model: MoFAGPT, X: torch.Tensor, layer: int, r: int):
    """F(x_V, x_Q, x_K): the sublayer output at token r with the perturbed token's vector fed
    separately into the value, query and key paths (all other tokens fixed at X)."""
    blk, (WQ, bQ), (WK, bK), (WV, bV) = _split_heads(model, layer)
    cfg = model.cfg
    H, D = cfg.n_head, cfg.d_model
    dh = D // H
    ln = blk.ln_1
    keys = X[: r + 1]
    n_sfx = H - cfg.n_sigmoid
    sig_bias = _bias(cfg, X.shape[0], X.dtype)[r]

    def F(xV, xQ, xK):
        Xn = ln(keys)
        K = Xn @ WK.T + bK
        V = Xn @ WV.T + bV
        K = torch.cat([K[:r], (ln(xK) @ WK.T + bK)[None]])
        V = torch.cat([V[:r], (ln(xV) @ WV.T + bV)[None]])
        q = ln(xQ) @ WQ.T + bQ
        outs = []
        for h in range(H):
            sl = slice(h * dh, (h + 1) * dh)
            s = K[:, sl] @ q[sl] / math.sqrt(dh)
            a = torch.softmax(s, 0) if h < n_sfx else torch.sigmoid(s + sig_bias)
            outs.append(a @ V[:, sl])
        return xV + blk.attn.c_proj(torch.cat(outs))

    return F


def autograd_operators(model: MoFAGPT, X: torch.Tensor, layer: int, r: int) -> dict[str, np.ndarray]:
    """J_T, J_Q, J_K by autograd of the pathway-split forward, in float64."""
    F = pathway_split_forward(model, X, layer, r)
    x = X[r]
    jac = torch.autograd.functional.jacobian(F, (x, x, x))
    return {"J_T": jac[0].numpy(), "J_Q": jac[1].numpy(), "J_K": jac[2].numpy()}


def analytic_operators(model: MoFAGPT, X: torch.Tensor, layer: int, r: int) -> dict[str, np.ndarray]:
    """Closed forms of METHODS B.2 (softmax heads) and their sigmoid-head versions, summed over heads."""
    blk, (WQ, bQ), (WK, bK), (WV, bV) = _split_heads(model, layer)
    cfg = model.cfg
    H, D = cfg.n_head, cfg.d_model
    dh = D // H
    with torch.no_grad():
        Xn = blk.ln_1(X[: r + 1])
        K, V = Xn @ WK.T + bK, Xn @ WV.T + bV
        q = Xn[r] @ WQ.T + bQ
        Dr = _layernorm_jacobian(blk.ln_1, X[r])
        WO = blk.attn.c_proj.weight
        n_sfx = H - cfg.n_sigmoid
        sig_bias = _bias(cfg, X.shape[0], X.dtype)[r]
        JT = torch.eye(D, dtype=X.dtype)
        JQ = torch.zeros(D, D, dtype=X.dtype)
        JK = torch.zeros(D, D, dtype=X.dtype)
        for h in range(H):
            sl = slice(h * dh, (h + 1) * dh)
            k, v, WOh = K[:, sl], V[:, sl], WO[:, sl]
            s = k @ q[sl] / math.sqrt(dh)
            if h < n_sfx:
                a = torch.softmax(s, 0)
                vbar, kbar = a @ v, a @ k
                cross = ((v - vbar).T * a) @ (k - kbar)  # sum_i a_i (v_i - vbar)(k_i - kbar)'
                key_vec = a[r] * (v[r] - vbar)
            else:
                a = torch.sigmoid(s + sig_bias)
                w = a * (1 - a)
                cross = (v.T * w) @ k  # sum_i a_i (1 - a_i) v_i k_i'
                key_vec = w[r] * v[r]
            JT = JT + a[r] * WOh @ WV[sl] @ Dr
            JQ = JQ + WOh @ cross @ WQ[sl] @ Dr / math.sqrt(dh)
            JK = JK + torch.outer(WOh @ key_vec, q[sl]) @ WK[sl] @ Dr / math.sqrt(dh)
    return {"J_T": JT.numpy(), "J_Q": JQ.numpy(), "J_K": JK.numpy()}


def operating_point(model: MoFAGPT, ids, layer: int, r: int | None = None) -> dict:
    """Operators at (layer, token r) of a sequence, analytic and autograd, with their max abs errors.

    The model is copied to float64; r defaults to the last token. Also checks that the
    pathway-split forward reproduces the model's own sublayer output at r.
    """
    m = MoFAGPT(model.cfg)
    m.load_state_dict(model.state_dict())
    m = m.double().eval()
    ids = torch.as_tensor(ids)
    r = ids.shape[-1] - 1 if r is None else int(r)
    X = hidden_entering(m, ids, layer)
    F = pathway_split_forward(m, X, layer, r)
    with torch.no_grad():
        y_split = F(X[r], X[r], X[r])
        blk = m.blocks[layer]
        a, _ = blk.attn(blk.ln_1(X[None]))
        y_model = (X[None] + a)[0, r]
    auto = autograd_operators(m, X, layer, r)
    ana = analytic_operators(m, X, layer, r)
    errors = {k: float(np.abs(auto[k] - ana[k]).max()) for k in auto}
    errors["forward"] = float((y_split - y_model).abs().max())
    return {"analytic": ana, "autograd": auto, "errors": errors, "layer": layer, "token": r,
            "head_types": m.cfg.head_types()}


def operators_from_run(run_dir, domain_text: str, layer: int, r: int | None = None) -> dict:
    """Operators of a MoFA run's final checkpoint on the first block of ``domain_text``."""
    from pathlib import Path

    from routestats.io import load_run

    from .mofa import GPTConfig, blocks_of, encode

    run = load_run(run_dir)
    ck = [e["path"] for e in run.manifest["files"] if e["path"].startswith("checkpoints/")]
    if not ck:
        raise FileNotFoundError(f"{run_dir}: no checkpoint in the run")
    state = torch.load(Path(run_dir) / sorted(ck)[-1], map_location="cpu", weights_only=False)
    cfg = GPTConfig(**state["config"])
    model = MoFAGPT(cfg)
    model.load_state_dict(state["model"])
    block = blocks_of(encode([domain_text]), cfg.n_ctx)
    if not len(block):
        raise ValueError("the text is shorter than one block")
    return operating_point(model, torch.as_tensor(block[0]), layer, r)
