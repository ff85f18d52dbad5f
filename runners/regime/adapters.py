"""Attention sublayers and operating points of the project's own models (the MoFA GPT, the SAAB encoder),
of plain GPT-2 and Llama/Qwen state dicts, and random ones shaped like each, as
:class:`~runners.regime.sublayer.Sublayer` (pretrained transformers checkpoints: :mod:`runners.regime.pretrained`)."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

from runners.regime.sublayer import Sublayer
from runners.training.mofa import MoFAGPT, sigmoid_bias_vector

__all__ = ["hidden_entering", "mofa_sublayer", "mofa_point", "encoder_point", "gpt2_sublayer", "llama_sublayer",
           "random_sublayer"]


def hidden_entering(model: MoFAGPT, ids: torch.Tensor, layer: int) -> torch.Tensor:
    """Residual stream (T x d) entering block ``layer`` of the MoFA GPT for one sequence."""
    with torch.no_grad():
        T = ids.shape[-1]
        x = model.wte(ids[None]) + model.wpe(torch.arange(T))[None]
        for blk in model.blocks[:layer]:
            x, _ = blk(x)
    return x[0]


def mofa_sublayer(model: MoFAGPT, layer: int) -> Sublayer:
    """The MoFA GPT's attention sublayer ``layer`` as a generic :class:`Sublayer` (float64)."""
    blk = model.blocks[layer]
    cfg = model.cfg
    D = cfg.d_model
    W, b = blk.attn.c_attn.weight.detach().double(), blk.attn.c_attn.bias.detach().double()
    sb = sigmoid_bias_vector(cfg, cfg.n_ctx, torch.float64)
    return Sublayer(norm="layernorm", gamma=blk.ln_1.weight.detach().double(), beta=blk.ln_1.bias.detach().double(),
                    eps=blk.ln_1.eps, W_Q=W[:D], W_K=W[D:2 * D], W_V=W[2 * D:], b_Q=b[:D], b_K=b[D:2 * D],
                    b_V=b[2 * D:], W_O=blk.attn.c_proj.weight.detach().double(),
                    b_O=blk.attn.c_proj.bias.detach().double(), n_head=cfg.n_head, n_kv_head=cfg.n_head,
                    causal=True, head_types=cfg.head_types(), sigmoid_bias=sb)


def mofa_point(model: MoFAGPT, ids, layer: int) -> tuple[Sublayer, torch.Tensor, Callable[[int], torch.Tensor]]:
    """(sublayer, hidden states entering ``layer``, r -> the model's own sublayer output at r), float64."""
    m = MoFAGPT(model.cfg)
    m.load_state_dict(model.state_dict())
    m = m.double().eval()
    X = hidden_entering(m, torch.as_tensor(ids), layer)
    blk = m.blocks[layer]
    with torch.no_grad():
        a, _ = blk.attn(blk.ln_1(X[None]))
        Y = (X[None] + a)[0]
    return mofa_sublayer(m, layer), X, lambda r: Y[r]


def encoder_point(model, input_ids, field_ids, layer: int) -> tuple[Sublayer, torch.Tensor, Callable[[int], torch.Tensor]]:
    """The SAAB encoder's attention sublayer ``layer`` on one unpadded example, float64.

    The layer's SAAB bias (shuffled ids for the shuffled control, placement multiplier
    included) becomes the sublayer's constant ``score_bias``; attention is bidirectional.
    Returns (sublayer, hidden states entering the layer, r -> the model's own output at r).
    """
    from runners.training.model import SAABEncoder, shuffle_bias_ids

    m = SAABEncoder(model.cfg)
    m.load_state_dict(model.state_dict())
    m = m.double().eval()
    ids = torch.as_tensor(input_ids, dtype=torch.long)[None]
    fids = torch.as_tensor(field_ids, dtype=torch.long)[None]
    mask = torch.ones_like(ids)
    cfg = m.cfg
    with torch.no_grad():
        h = m.tok(ids) + m.field(fids) + m.pos(torch.arange(ids.shape[1]))[None]
        if cfg.scale_embeddings:
            h = h * math.sqrt(cfg.d_model)
        bias_ids = shuffle_bias_ids(fids, mask, cfg.saab_shuffle_seed) if cfg.variant == "saab" and cfg.saab_shuffle_bias else fids
        biases = m.layer_biases(bias_ids)
        for lyr, bias in zip(m.layers[:layer], biases):
            h, _ = lyr(h, mask.bool(), bias, "explicit", False)
        lyr = m.layers[layer]
        a, _ = lyr.attn(lyr.ln1(h), mask.bool(), biases[layer], "explicit", False)
        Y = (h + a)[0]
    at = lyr.attn
    sub = Sublayer(norm="layernorm", gamma=lyr.ln1.weight.detach(), beta=lyr.ln1.bias.detach(), eps=lyr.ln1.eps,
                   W_Q=at.q.weight.detach(), W_K=at.k.weight.detach(), W_V=at.v.weight.detach(), W_O=at.o.weight.detach(),
                   b_Q=at.q.bias.detach(), b_K=at.k.bias.detach(), b_V=at.v.bias.detach(), b_O=at.o.bias.detach(),
                   n_head=at.h, n_kv_head=at.h, causal=False,
                   score_bias=None if biases[layer] is None else biases[layer][0].double())
    return sub, h[0], lambda r: Y[r]


def _find_prefix(state_dict: dict, suffix: str) -> str:
    hits = [k[: -len(suffix)] for k in state_dict if k.endswith(suffix)]
    if len(hits) != 1:
        raise KeyError(f"expected one state-dict key ending in {suffix!r}, found {len(hits)}")
    return hits[0]


def _t(x) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x).detach().double()


def gpt2_sublayer(state_dict: dict, layer: int, n_head: int, eps: float = 1e-5) -> Sublayer:
    """Attention sublayer ``layer`` of a GPT-2 state dict (``h.L.ln_1``, ``h.L.attn.c_attn``/``c_proj``).

    GPT-2 stores Conv1D weights as [in, out], so they are transposed here; any key prefix
    (``transformer.``) is accepted.
    """
    p = _find_prefix(state_dict, f"h.{layer}.attn.c_attn.weight") + f"h.{layer}."
    W = _t(state_dict[p + "attn.c_attn.weight"]).T
    b = _t(state_dict[p + "attn.c_attn.bias"])
    d = W.shape[1]
    if W.shape[0] != 3 * d:
        raise ValueError(f"c_attn.weight has shape {tuple(W.shape[::-1])}; expected [d, 3d] (Conv1D layout)")
    return Sublayer(norm="layernorm", gamma=_t(state_dict[p + "ln_1.weight"]), beta=_t(state_dict[p + "ln_1.bias"]), eps=eps,
                    W_Q=W[:d], W_K=W[d:2 * d], W_V=W[2 * d:], b_Q=b[:d], b_K=b[d:2 * d], b_V=b[2 * d:],
                    W_O=_t(state_dict[p + "attn.c_proj.weight"]).T, b_O=_t(state_dict[p + "attn.c_proj.bias"]),
                    n_head=n_head, n_kv_head=n_head, causal=True)


def llama_sublayer(state_dict: dict, layer: int, n_head: int, n_kv_head: int, rope_theta: float = 10000.0,
                   eps: float = 1e-5, rope_style: str = "half") -> Sublayer:
    """Attention sublayer ``layer`` of a Llama/Qwen-style state dict (``layers.L.input_layernorm``,
    ``self_attn.{q,k,v,o}_proj``; [out, in] weights; q/k/v biases when present, as in Qwen)."""
    p = _find_prefix(state_dict, f"layers.{layer}.self_attn.q_proj.weight") + f"layers.{layer}."
    get = lambda k: _t(state_dict[p + k]) if p + k in state_dict else None  # noqa: E731
    return Sublayer(norm="rmsnorm", gamma=get("input_layernorm.weight"), eps=eps,
                    W_Q=get("self_attn.q_proj.weight"), W_K=get("self_attn.k_proj.weight"),
                    W_V=get("self_attn.v_proj.weight"), W_O=get("self_attn.o_proj.weight"),
                    b_Q=get("self_attn.q_proj.bias"), b_K=get("self_attn.k_proj.bias"), b_V=get("self_attn.v_proj.bias"),
                    b_O=get("self_attn.o_proj.bias"), n_head=n_head, n_kv_head=n_kv_head, rope_theta=rope_theta,
                    rope_style=rope_style, causal=True)


def random_sublayer(kind: str, d: int = 16, n_head: int = 4, seed: int = 0) -> Sublayer:
    """Random float64 sublayers shaped like GPT-2 (``gpt2``), Llama/Qwen (``llama``: RMSNorm, RoPE,
    GQA 4:2, no biases), a pre-LN bidirectional encoder with an additive score bias
    (``encoder``, SAAB-like) or a MoFA model (``mofa``)."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64) * 0.3  # noqa: E731
    dh = d // n_head
    kv = 2 if kind == "llama" else n_head
    bias = kind in ("gpt2", "encoder", "mofa")
    same = (torch.arange(64)[:, None] // 5 == torch.arange(64)[None] // 5).double()
    return Sublayer(
        norm="rmsnorm" if kind == "llama" else "layernorm", gamma=1 + r(d), beta=r(d) if kind != "llama" else None,
        W_Q=r(n_head * dh, d), W_K=r(kv * dh, d), W_V=r(kv * dh, d), W_O=r(d, n_head * dh), n_head=n_head, n_kv_head=kv,
        b_Q=r(n_head * dh) if bias else None, b_K=r(kv * dh) if bias else None, b_V=r(kv * dh) if bias else None,
        b_O=r(d) if bias else None, rope_theta=10000.0 if kind == "llama" else None, causal=kind != "encoder",
        score_bias=same if kind == "encoder" else None,
        head_types=["softmax"] * (n_head // 2) + ["sigmoid"] * (n_head - n_head // 2) if kind == "mofa" else [],
        sigmoid_bias=-torch.log(torch.arange(1, 65, dtype=torch.float64)) if kind == "mofa" else None,
    )
