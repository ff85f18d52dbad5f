"""Pathway Jacobians of a residual attention sublayer (METHODS Part II B.2-B.3).

A :class:`Sublayer` describes a pre-norm attention sublayer by its tensors (LayerNorm or
RMSNorm, biases, RoPE, GQA, causal or bidirectional, softmax and sigmoid heads), so one
implementation serves GPT-2-like, Llama/Qwen-like, encoder and MoFA models; ``mofa_sublayer``
adapts the project's MoFA GPT. At an operating point (hidden states X entering the layer, query
token r, perturbed token m = r), ``Sublayer.output(X, r, xV, xQ, xK)`` is the pathway-split
forward F: the perturbed token's vector feeds the value, query and key computations separately
(each through its own pre-norm; the residual follows the value path). Autograd of F gives the
ground truth J_T, J_Q, J_K; ``Sublayer.analytic`` gives the closed forms, which agree to ~1e-15
in float64 (tests require < 1e-10).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from .mofa import MoFAGPT, sigmoid_bias_vector



def hidden_entering(model: MoFAGPT, ids: torch.Tensor, layer: int) -> torch.Tensor:
    """Residual stream (T x d) entering block ``layer`` for one sequence."""
    with torch.no_grad():
        T = ids.shape[-1]
        x = model.wte(ids[None]) + model.wpe(torch.arange(T))[None]
        for blk in model.blocks[:layer]:
            x, _ = blk(x)
    return x[0]


def mofa_sublayer(model: MoFAGPT, layer: int) -> "Sublayer":
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
    sub = mofa_sublayer(m, layer)
    with torch.no_grad():
        y_split = sub.output(X, r)
        blk = m.blocks[layer]
        a, _ = blk.attn(blk.ln_1(X[None]))
        y_model = (X[None] + a)[0, r]
    auto = sub.autograd(X, r)
    ana = sub.analytic(X, r)
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


# --------------------------------------------------------------------------- generic sublayer adapter


def rope_matrix(pos: int, dh: int, theta: float = 10000.0, dtype=torch.float64) -> torch.Tensor:
    """Rotate-half RoPE as a dh x dh matrix at position ``pos`` (pairs (j, j + dh/2))."""
    half = dh // 2
    inv = theta ** (-torch.arange(half, dtype=dtype) / half)
    ang = pos * inv
    c, s = torch.cos(ang), torch.sin(ang)
    Rm = torch.zeros(dh, dh, dtype=dtype)
    idx = torch.arange(half)
    Rm[idx, idx] = c
    Rm[idx + half, idx + half] = c
    Rm[idx, idx + half] = -s
    Rm[idx + half, idx] = s
    return Rm


@dataclass
class Sublayer:
    """A pre-norm residual attention sublayer described by its tensors (state-dict level).

    ``norm`` is ``"layernorm"`` or ``"rmsnorm"`` with weight ``gamma`` (and ``beta`` for
    LayerNorm); W_Q (H*dh x d), W_K and W_V (H_kv*dh x d: GQA when H_kv < H), W_O (d x H*dh),
    optional biases; ``rope_theta`` switches RoPE on; ``causal`` False gives bidirectional
    attention over all positions (encoders); ``head_types`` softmax/sigmoid per head with
    ``sigmoid_bias`` per query position. Covers GPT-2-like, Llama/Qwen-like (RMSNorm, RoPE,
    GQA, no biases), pre-LN encoders and MoFA models.
    """

    norm: str
    gamma: torch.Tensor
    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    W_O: torch.Tensor
    n_head: int
    n_kv_head: int
    beta: torch.Tensor | None = None
    b_Q: torch.Tensor | None = None
    b_K: torch.Tensor | None = None
    b_V: torch.Tensor | None = None
    b_O: torch.Tensor | None = None
    eps: float = 1e-5
    rope_theta: float | None = None
    causal: bool = True
    head_types: list = field(default_factory=list)
    sigmoid_bias: torch.Tensor | None = None  # per query position

    def normalise(self, x):
        if self.norm == "layernorm":
            mu = x.mean(-1, keepdim=True)
            var = ((x - mu) ** 2).mean(-1, keepdim=True)
            return (x - mu) / torch.sqrt(var + self.eps) * self.gamma + (0 if self.beta is None else self.beta)
        rms = torch.sqrt((x * x).mean(-1, keepdim=True) + self.eps)
        return x / rms * self.gamma

    def norm_jacobian(self, x):
        d = x.shape[-1]
        eye = torch.eye(d, dtype=x.dtype)
        if self.norm == "layernorm":
            mu = x.mean()
            sigma = torch.sqrt(((x - mu) ** 2).mean() + self.eps)
            z = (x - mu) / sigma
            return torch.diag(self.gamma) / sigma @ (eye - torch.ones(d, d, dtype=x.dtype) / d - torch.outer(z, z) / d)
        rms = torch.sqrt((x * x).mean() + self.eps)
        return torch.diag(self.gamma) / rms @ (eye - torch.outer(x, x) / (d * rms**2))

    @property
    def dh(self):
        return self.W_Q.shape[0] // self.n_head

    def _types(self):
        return self.head_types or ["softmax"] * self.n_head

    def _rot(self, pos):
        return rope_matrix(pos, self.dh) if self.rope_theta else torch.eye(self.dh, dtype=self.W_Q.dtype)

    def _lin(self, W, b, x):
        return x @ W.T + (0 if b is None else b)

    def output(self, X, r, xV=None, xQ=None, xK=None):
        """Sublayer output at r; xV/xQ/xK replace token r's vector in one pathway each."""
        n = X.shape[0]
        keys = range(n) if not self.causal else range(r + 1)
        keys = list(keys)
        xV = X[r] if xV is None else xV
        xQ = X[r] if xQ is None else xQ
        xK = X[r] if xK is None else xK
        Xn = self.normalise(X[keys])
        K = self._lin(self.W_K, self.b_K, Xn)
        V = self._lin(self.W_V, self.b_V, Xn)
        ir = keys.index(r)
        K = torch.cat([K[:ir], self._lin(self.W_K, self.b_K, self.normalise(xK))[None], K[ir + 1:]])
        V = torch.cat([V[:ir], self._lin(self.W_V, self.b_V, self.normalise(xV))[None], V[ir + 1:]])
        q = self._lin(self.W_Q, self.b_Q, self.normalise(xQ))
        dh, group = self.dh, self.n_head // self.n_kv_head
        outs = []
        for h, t in enumerate(self._types()):
            g = h // group
            qh = self._rot(r) @ q[h * dh:(h + 1) * dh]
            kh = torch.stack([self._rot(i) @ K[j, g * dh:(g + 1) * dh] for j, i in enumerate(keys)])
            s = kh @ qh / math.sqrt(dh)
            a = torch.softmax(s, 0) if t == "softmax" else torch.sigmoid(s + self.sigmoid_bias[r])
            outs.append(a @ V[:, g * dh:(g + 1) * dh])
        return xV + self._lin(self.W_O, self.b_O, torch.cat(outs))

    def autograd(self, X, r):
        jac = torch.autograd.functional.jacobian(lambda a, b, c: self.output(X, r, a, b, c), (X[r], X[r], X[r]))
        return {"J_T": jac[0].numpy(), "J_Q": jac[1].numpy(), "J_K": jac[2].numpy()}

    def analytic(self, X, r):
        """Closed forms of METHODS B.2 with RoPE (P_r), GQA groups and sigmoid heads."""
        with torch.no_grad():
            n = X.shape[0]
            keys = list(range(n)) if not self.causal else list(range(r + 1))
            ir = keys.index(r)
            Xn = self.normalise(X[keys])
            K, V = self._lin(self.W_K, self.b_K, Xn), self._lin(self.W_V, self.b_V, Xn)
            q = self._lin(self.W_Q, self.b_Q, Xn[ir])
            Dr = self.norm_jacobian(X[r])
            d, dh, group = X.shape[1], self.dh, self.n_head // self.n_kv_head
            JT, JQ, JK = torch.eye(d, dtype=X.dtype), torch.zeros(d, d, dtype=X.dtype), torch.zeros(d, d, dtype=X.dtype)
            Pr = self._rot(r)
            for h, t in enumerate(self._types()):
                g = h // group
                WQh, WKg, WVg = self.W_Q[h * dh:(h + 1) * dh], self.W_K[g * dh:(g + 1) * dh], self.W_V[g * dh:(g + 1) * dh]
                WOh = self.W_O[:, h * dh:(h + 1) * dh]
                qh = Pr @ q[h * dh:(h + 1) * dh]
                kh = torch.stack([self._rot(i) @ K[j, g * dh:(g + 1) * dh] for j, i in enumerate(keys)])
                v = V[:, g * dh:(g + 1) * dh]
                s = kh @ qh / math.sqrt(dh)
                if t == "softmax":
                    a = torch.softmax(s, 0)
                    vbar, kbar = a @ v, a @ kh
                    cross = ((v - vbar).T * a) @ (kh - kbar)
                    key_vec = a[ir] * (v[ir] - vbar)
                else:
                    a = torch.sigmoid(s + self.sigmoid_bias[r])
                    w = a * (1 - a)
                    cross = (v.T * w) @ kh
                    key_vec = w[ir] * v[ir]
                JT = JT + a[ir] * WOh @ WVg @ Dr
                JQ = JQ + WOh @ cross @ Pr @ WQh @ Dr / math.sqrt(dh)
                JK = JK + torch.outer(WOh @ key_vec, qh) @ Pr @ WKg @ Dr / math.sqrt(dh)
        return {"J_T": JT.numpy(), "J_Q": JQ.numpy(), "J_K": JK.numpy()}


def random_sublayer(kind: str, d: int = 16, n_head: int = 4, seed: int = 0) -> Sublayer:
    """Random float64 sublayers shaped like GPT-2 (``gpt2``), Llama/Qwen (``llama``: RMSNorm, RoPE,
    GQA 4:2, no biases), a pre-LN bidirectional encoder (``encoder``) or a MoFA model (``mofa``)."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64) * 0.3  # noqa: E731
    dh = d // n_head
    kv = 2 if kind == "llama" else n_head
    bias = kind in ("gpt2", "encoder", "mofa")
    return Sublayer(
        norm="rmsnorm" if kind == "llama" else "layernorm", gamma=1 + r(d), beta=r(d) if kind != "llama" else None,
        W_Q=r(n_head * dh, d), W_K=r(kv * dh, d), W_V=r(kv * dh, d), W_O=r(d, n_head * dh), n_head=n_head, n_kv_head=kv,
        b_Q=r(n_head * dh) if bias else None, b_K=r(kv * dh) if bias else None, b_V=r(kv * dh) if bias else None,
        b_O=r(d) if bias else None, rope_theta=10000.0 if kind == "llama" else None, causal=kind != "encoder",
        head_types=["softmax"] * (n_head // 2) + ["sigmoid"] * (n_head - n_head // 2) if kind == "mofa" else [],
        sigmoid_bias=-torch.log(torch.arange(1, 65, dtype=torch.float64)) if kind == "mofa" else None,
    )
