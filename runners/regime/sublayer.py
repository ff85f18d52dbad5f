"""Pathway Jacobians of a residual attention sublayer (METHODS Part II B.2-B.3).

A :class:`Sublayer` describes a pre-norm attention sublayer by its tensors (LayerNorm or
RMSNorm, biases, RoPE, GQA, causal or bidirectional, softmax and sigmoid heads), so one
implementation serves GPT-2-like, Llama/Qwen-like, encoder and MoFA models (the adapters are in
:mod:`runners.regime.adapters` and :mod:`runners.regime.pretrained`). At an operating point (hidden states X entering the layer, query
token r, perturbed token m = r), ``Sublayer.output(X, r, xV, xQ, xK)`` is the pathway-split
forward F: the perturbed token's vector feeds the value, query and key computations separately
(each through its own pre-norm; the residual follows the value path). Autograd of F gives the
ground truth J_T, J_Q, J_K; ``Sublayer.analytic`` gives the closed forms, which agree to ~1e-15
in float64 (tests require < 1e-10).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from routestats.errors import RoutestatsError



ROPE_STYLES = ("half", "interleaved")


def rope_matrix(pos: int, dh: int, theta: float = 10000.0, dtype=torch.float64, style: str = "half") -> torch.Tensor:
    """RoPE at position ``pos`` as a dh x dh rotation.

    ``style="half"`` rotates pairs (j, j + dh/2) (Hugging Face Llama/Qwen layout);
    ``"interleaved"`` rotates pairs (2j, 2j + 1) (Meta / GGUF layout). Frequency of pair j:
    theta^(-2j/dh) in both.
    """
    if style not in ROPE_STYLES:
        raise ValueError(f"rope style must be one of {ROPE_STYLES}, got {style!r}")
    half = dh // 2
    inv = theta ** (-torch.arange(half, dtype=dtype) / half)
    ang = pos * inv
    c, s = torch.cos(ang), torch.sin(ang)
    Rm = torch.zeros(dh, dh, dtype=dtype)
    idx = torch.arange(half)
    i, j = (idx, idx + half) if style == "half" else (2 * idx, 2 * idx + 1)
    Rm[i, i] = c
    Rm[j, j] = c
    Rm[i, j] = -s
    Rm[j, i] = s
    return Rm


def rope_table_matrix(cos: torch.Tensor, sin: torch.Tensor, dh: int) -> torch.Tensor:
    """The rotation ``q -> q cos + rotate_half(q) sin`` of one position as a dh x dh matrix.

    ``cos``/``sin`` are one row of a model's own RoPE tables (transformers' half layout, pairs
    (j, j + rd/2)); a row narrower than dh (partial rotary) leaves the remaining dimensions alone.

    >>> c, s = torch.tensor([0.0, 0.0], dtype=torch.float64), torch.tensor([1.0, 1.0], dtype=torch.float64)
    >>> rope_table_matrix(c, s, 2) @ torch.tensor([1.0, 2.0], dtype=torch.float64)
    tensor([-2.,  1.], dtype=torch.float64)
    """
    rd = cos.shape[-1]
    half = rd // 2
    Rm = torch.eye(dh, dtype=cos.dtype)
    idx = torch.arange(half)
    Rm[idx, idx] = cos[:half]
    Rm[idx + half, idx + half] = cos[half:rd]
    Rm[idx, idx + half] = -sin[:half]
    Rm[idx + half, idx] = sin[half:rd]
    return Rm


def rms_norm(x, gamma, eps):
    """RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * gamma."""
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gamma


def rms_jacobian(x, gamma, eps):
    """d rms_norm(x) / dx = diag(gamma)/rms (I - x x^T / (d rms^2)) (METHODS B.3)."""
    d = x.shape[-1]
    rms = torch.sqrt((x * x).mean() + eps)
    return torch.diag(gamma) / rms @ (torch.eye(d, dtype=x.dtype) - torch.outer(x, x) / (d * rms**2))


@dataclass
class Sublayer:
    """A pre-norm residual attention sublayer described by its tensors (state-dict level).

    ``norm`` is ``"layernorm"`` or ``"rmsnorm"`` with weight ``gamma`` (and ``beta`` for
    LayerNorm); W_Q (H*dh x d), W_K and W_V (H_kv*dh x d: GQA when H_kv < H), W_O (d x H*dh),
    optional biases; ``rope_theta`` switches RoPE on (``rope_style`` half or interleaved);
    ``causal`` False gives bidirectional attention over all positions (encoders);
    ``score_bias`` (n x n, [query, key]) is a constant additive score bias such as the SAAB
    bias; ``head_types`` softmax/sigmoid per head with ``sigmoid_bias`` per query position.
    The METHODS B.2-B.3 extensions: a score ``scale``, logit ``softcap``, a sliding ``window``, a
    sandwich ``post_gamma`` norm, per-head QK-norm (``q_gamma``, ``k_gamma``) and the model's
    own RoPE tables (``rope_cos``/``rope_sin``, which carry any RoPE scaling and partial rotary
    widths). Covers GPT-2-like, Llama/Qwen-like (RMSNorm, RoPE, GQA), Gemma 2/3, pre-LN encoders
    (SAAB) and MoFA models.
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
    rope_style: str = "half"
    causal: bool = True
    score_bias: torch.Tensor | None = None
    head_types: list = field(default_factory=list)
    sigmoid_bias: torch.Tensor | None = None  # per query position
    scale: float | None = None  # score scale; default 1/sqrt(dh) (Gemma: query_pre_attn_scalar^-1/2)
    softcap: float | None = None  # s = c tanh(s_raw / c) (Gemma 2)
    window: int | None = None  # sliding window: query r sees keys i with r - i < window
    post_gamma: torch.Tensor | None = None  # sandwich norm on the attention output (Gemma 2/3), kind ``norm``
    post_beta: torch.Tensor | None = None
    post_eps: float = 1e-5
    q_gamma: torch.Tensor | None = None  # per-head RMSNorm of queries before RoPE (QK-norm: Gemma 3, Qwen 3)
    k_gamma: torch.Tensor | None = None
    qk_eps: float = 1e-6
    rope_cos: torch.Tensor | None = None  # the model's own RoPE tables (positions x rotary dims, half layout)
    rope_sin: torch.Tensor | None = None

    def __post_init__(self):
        if self.norm not in ("layernorm", "rmsnorm"):
            raise ValueError(f"norm must be layernorm or rmsnorm, got {self.norm!r}")
        if self.n_head % self.n_kv_head:
            raise ValueError(f"{self.n_head} query heads do not split into {self.n_kv_head} key/value groups")
        if self.head_types and len(self.head_types) != self.n_head:
            raise ValueError(f"{len(self.head_types)} head types for {self.n_head} heads")
        if "sigmoid" in self.head_types and self.sigmoid_bias is None:
            raise ValueError("sigmoid heads need sigmoid_bias (one value per query position)")

    def double(self) -> "Sublayer":
        """A float64 copy (validation runs in float64)."""
        kw = {k: (v.detach().double() if isinstance(v, torch.Tensor) else v) for k, v in self.__dict__.items()}
        return Sublayer(**kw)

    def normalise(self, x):
        return self._norm(x, self.gamma, self.beta, self.eps)

    def _norm(self, x, gamma, beta, eps):
        if self.norm == "layernorm":
            mu = x.mean(-1, keepdim=True)
            var = ((x - mu) ** 2).mean(-1, keepdim=True)
            return (x - mu) / torch.sqrt(var + eps) * gamma + (0 if beta is None else beta)
        return rms_norm(x, gamma, eps)

    def norm_jacobian(self, x, gamma=None, eps=None):
        """D_r = dN(x)/dx (METHODS B.3); ``gamma``/``eps`` default to the pre-norm's."""
        gamma = self.gamma if gamma is None else gamma
        eps = self.eps if eps is None else eps
        d = x.shape[-1]
        eye = torch.eye(d, dtype=x.dtype)
        if self.norm == "layernorm":
            mu = x.mean()
            sigma = torch.sqrt(((x - mu) ** 2).mean() + eps)
            z = (x - mu) / sigma
            return torch.diag(gamma) / sigma @ (eye - torch.ones(d, d, dtype=x.dtype) / d - torch.outer(z, z) / d)
        return rms_jacobian(x, gamma, eps)

    def post(self, o):
        """The sandwich norm on the attention output (identity without one)."""
        return o if self.post_gamma is None else self._norm(o, self.post_gamma, self.post_beta, self.post_eps)

    @property
    def score_scale(self) -> float:
        return 1 / math.sqrt(self.dh) if self.scale is None else float(self.scale)

    @property
    def dh(self):
        return self.W_Q.shape[0] // self.n_head

    def _types(self):
        return self.head_types or ["softmax"] * self.n_head

    def _rot(self, pos):
        if self.rope_cos is not None:
            return rope_table_matrix(self.rope_cos[pos], self.rope_sin[pos], self.dh)
        if not self.rope_theta:
            return torch.eye(self.dh, dtype=self.W_Q.dtype)
        return rope_matrix(pos, self.dh, self.rope_theta, self.W_Q.dtype, self.rope_style)

    @property
    def rope(self) -> bool:
        return bool(self.rope_theta) or self.rope_cos is not None

    def _lin(self, W, b, x):
        return x @ W.T + (0 if b is None else b)

    def keys(self, X, r) -> list[int]:
        """Key positions seen by query r: all tokens (bidirectional) or 0..r (causal), within the window."""
        lo = 0 if not self.window else max(0, r - self.window + 1)
        hi = r + 1 if self.causal else (X.shape[0] if not self.window else min(X.shape[0], r + self.window))
        return list(range(lo, hi))

    def _attend(self, X, r, xV, xQ, xK):
        """Weights (B, H, n), per-head values and rotated keys (B, n, H, dh), rotated queries (B, H, dh) and the
        soft-capping slope kappa = ds/ds_raw (B, H, n; ones without a cap)."""
        keys = self.keys(X, r)
        ir = keys.index(r)
        B = max(len(xV), len(xQ), len(xK))
        n, H, kv, dh = len(keys), self.n_head, self.n_kv_head, self.dh
        Xn = self.normalise(X[keys])
        K = self._lin(self.W_K, self.b_K, Xn).expand(B, -1, -1).clone()
        V = self._lin(self.W_V, self.b_V, Xn).expand(B, -1, -1).clone()
        K[:, ir] = self._lin(self.W_K, self.b_K, self.normalise(xK)).expand(B, -1)
        V[:, ir] = self._lin(self.W_V, self.b_V, self.normalise(xV)).expand(B, -1)
        q = self._lin(self.W_Q, self.b_Q, self.normalise(xQ)).expand(B, -1).reshape(B, H, dh)
        K = K.view(B, n, kv, dh)
        if self.k_gamma is not None:
            K = rms_norm(K, self.k_gamma, self.qk_eps)
        if self.q_gamma is not None:
            q = rms_norm(q, self.q_gamma, self.qk_eps)
        group = torch.arange(H) // (H // kv)
        rot = torch.stack([self._rot(i) for i in keys])
        Kh = torch.einsum("nij,bngj->bngi", rot, K)[:, :, group]
        Vh = V.view(B, n, kv, dh)[:, :, group]
        qh = torch.einsum("ij,bhj->bhi", self._rot(r), q)
        s = torch.einsum("bhi,bnhi->bhn", qh, Kh) * self.score_scale
        kappa = torch.ones_like(s)
        if self.softcap:
            t = torch.tanh(s / self.softcap)
            s, kappa = self.softcap * t, 1 - t * t
        if self.score_bias is not None:
            s = s + self.score_bias[r, keys]
        a = torch.softmax(s, -1)
        sig = torch.tensor([t == "sigmoid" for t in self._types()])
        if sig.any():
            a = torch.where(sig[None, :, None], torch.sigmoid(s + self.sigmoid_bias[r]), a)
        return a, Vh, Kh, qh, kappa

    def _batch(self, X, r, t):
        t = X[r] if t is None else t
        return t[None] if t.dim() == 1 else t

    def output(self, X, r, xV=None, xQ=None, xK=None):
        """Pathway-split forward F(xV, xQ, xK) at query r (METHODS B.3).

        Each of xV/xQ/xK replaces token r's vector in one pathway; each is (d,) or a batch (B, d).
        """
        single = all(t is None or t.dim() == 1 for t in (xV, xQ, xK))
        xV, xQ, xK = (self._batch(X, r, t) for t in (xV, xQ, xK))
        a, Vh = self._attend(X, r, xV, xQ, xK)[:2]
        o = torch.einsum("bhn,bnhi->bhi", a, Vh).reshape(a.shape[0], -1)
        y = xV + self.post(self._lin(self.W_O, self.b_O, o))
        return y[0] if single else y

    def weights(self, X, r, xQ=None, xK=None):
        """Attention weights of query r, (H, n) or (B, H, n) for batched xQ / xK."""
        single = all(t is None or t.dim() == 1 for t in (xQ, xK))
        xQ, xK = self._batch(X, r, xQ), self._batch(X, r, xK)
        a = self._attend(X, r, X[r][None], xQ, xK)[0]
        return a[0] if single else a

    def autograd(self, X, r):
        """Ground truth: Jacobians of F with respect to each pathway at x_r."""
        jac = torch.autograd.functional.jacobian(lambda a, b, c: self.output(X, r, a, b, c), (X[r], X[r], X[r]),
                                                 vectorize=True)
        return {"J_T": jac[0].numpy(), "J_Q": jac[1].numpy(), "J_K": jac[2].numpy()}

    def analytic(self, X, r, per_head: bool = False):
        """Closed forms of METHODS B.2-B.3 with RoPE (P_r), GQA groups, score biases, sigmoid heads, QK-norm
        (its Jacobians D_Q, D_K), soft-capping (kappa) and the sandwich norm (its Jacobian E_r).

        With ``per_head`` also returns, per head, what the query-gating geometry (B.7) needs:
        ``J_Q_heads`` (H, d, d), ``W_VO`` (H, d, d) = E_r W_O^h W_V^g, ``query_map`` (H, dh, d) =
        scale P_r D_Q W_Q^h D_r, rotated ``key_vectors`` (H, n, dh) (times kappa under a soft cap, the keys
        the scores respond with), weights ``alpha`` (H, n), normalised inputs ``X_keys`` (n, d) and, where
        the scores are one bilinear form of the inputs (no RoPE, QK-norm or cap), ``W_QK`` (H, d, d).
        """
        with torch.no_grad():
            keys = self.keys(X, r)
            ir = keys.index(r)
            x = X[r][None]
            A, Vh, Kh, Q, kappa = (t[0] for t in self._attend(X, r, x, x, x))
            Dr = self.norm_jacobian(X[r])
            d, dh, group = X.shape[1], self.dh, self.n_head // self.n_kv_head
            AT, AQ, AK = (torch.zeros(d, d, dtype=X.dtype) for _ in range(3))
            Pr = self._rot(r)
            scale = self.score_scale
            xn = self.normalise(X[r])
            uq = self._lin(self.W_Q, self.b_Q, xn).view(self.n_head, dh)
            uk = self._lin(self.W_K, self.b_K, xn).view(self.n_kv_head, dh)
            eye = torch.eye(dh, dtype=X.dtype)
            o = self._lin(self.W_O, self.b_O, torch.einsum("hn,nhi->hi", A, Vh).reshape(-1))
            E = torch.eye(d, dtype=X.dtype) if self.post_gamma is None else self.norm_jacobian(o, self.post_gamma,
                                                                                                  self.post_eps)
            heads = {"J_Q_heads": [], "W_VO": [], "query_map": [], "W_QK": []}
            for h, t in enumerate(self._types()):
                g = h // group
                WQh, WKg, WVg = self.W_Q[h * dh:(h + 1) * dh], self.W_K[g * dh:(g + 1) * dh], self.W_V[g * dh:(g + 1) * dh]
                WOh = self.W_O[:, h * dh:(h + 1) * dh]
                a, v, kh, qh, c = A[h], Vh[:, h], Kh[:, h], Q[h], kappa[h]
                DQ = eye if self.q_gamma is None else rms_jacobian(uq[h], self.q_gamma, self.qk_eps)
                DK = eye if self.k_gamma is None else rms_jacobian(uk[g], self.k_gamma, self.qk_eps)
                w = a if t == "softmax" else a * (1 - a)
                v_c = v - a @ v if t == "softmax" else v  # only one side of the cross-covariance needs centring
                cross = (v_c.T * w) @ (c[:, None] * kh)
                key_vec = w[ir] * c[ir] * v_c[ir]
                qmap = Pr @ DQ @ WQh @ Dr * scale
                JQh = WOh @ cross @ qmap
                AT = AT + a[ir] * WOh @ WVg @ Dr
                AQ = AQ + JQh
                AK = AK + torch.outer(WOh @ key_vec, qh) @ Pr @ DK @ WKg @ Dr * scale
                if per_head:
                    heads["J_Q_heads"].append(E @ JQh)
                    heads["W_VO"].append(E @ WOh @ WVg)
                    heads["query_map"].append(qmap)
                    heads["W_QK"].append(WKg.T @ qmap)
            JT = torch.eye(d, dtype=X.dtype) + E @ AT
        out = {"J_T": JT.numpy(), "J_Q": (E @ AQ).numpy(), "J_K": (E @ AK).numpy()}
        if per_head:
            bilinear = not (self.rope or self.q_gamma is not None or self.k_gamma is not None or self.softcap)
            out.update({k: torch.stack(v).numpy() for k, v in heads.items() if bilinear or k != "W_QK"})
            out["key_vectors"] = (kappa[:, :, None] * Kh.permute(1, 0, 2)).numpy()
            out["alpha"] = A.numpy()
            out["X_keys"] = self.normalise(X[keys]).detach().numpy()
            out["head_types"] = list(self._types())
        return out

    def finite_forward(self, X, r, V: np.ndarray, eps_rel: float = 1e-4, chunk: int = 256) -> dict[str, np.ndarray]:
        """Finite-forward growth g^ = (|dY|^2 - |eps v|^2) / eps^2 of each counterfactual (METHODS B.8.3).

        V holds unit directions as columns (d x N); eps = eps_rel |x_r|. T-only perturbs the value
        path (which carries the residual), T+Q and T+K add one gating path, full perturbs all three.
        """
        x = X[r]
        eps = eps_rel * float(x.norm())
        Vt = torch.as_tensor(np.asarray(V, dtype=np.float64).T, dtype=X.dtype)
        out = {k: [] for k in ("g_T", "g_TQ", "g_TK", "g_full")}
        with torch.no_grad():
            y0 = self.output(X, r)
            for i in range(0, len(Vt), chunk):
                vb = Vt[i:i + chunk]
                xp = x + eps * vb
                base = eps**2 * (vb * vb).sum(-1)
                for k, kw in (("g_T", {"xV": xp}), ("g_TQ", {"xV": xp, "xQ": xp}), ("g_TK", {"xV": xp, "xK": xp}),
                              ("g_full", {"xV": xp, "xQ": xp, "xK": xp})):
                    dy = self.output(X, r, **kw) - y0
                    out[k].append((((dy * dy).sum(-1) - base) / eps**2).numpy())
        return {k: np.concatenate(v) for k, v in out.items()} | {"eps": eps}

    def routing_shift(self, X, r, V: np.ndarray, eps_rel: float = 1e-4) -> np.ndarray:
        """|alpha_r(x_Q + eps v) - alpha_r(x_Q)|_2 / eps per head (keys fixed), (N, H) (METHODS B.7, Fig. 4c)."""
        x = X[r]
        eps = eps_rel * float(x.norm())
        Vt = torch.as_tensor(np.asarray(V, dtype=np.float64).T, dtype=X.dtype)
        with torch.no_grad():
            a0 = self.weights(X, r)
            a = self.weights(X, r, xQ=x + eps * Vt)
        return ((a - a0).norm(dim=-1) / eps).numpy()


FORWARD_TOLERANCE = 1e-5
"""max |F(x_r, x_r, x_r) - own output at r| / max(1, max |own output at r|) an operating point must meet. transformers
computes some norms and softmaxes in float32 even in a float64 model (Gemma's RMSNorm, eager softmax), so a
pretrained model's own output is float32-accurate there; an architecture misread by an adapter is off by O(1)."""


def operating_point(sub: Sublayer, X: torch.Tensor, r: int, reference: torch.Tensor | None = None,
                    per_head: bool = True, own: Callable | None = None) -> dict:
    """Analytic and autograd operators at query r, with their max abs errors (METHODS B.8.1-2).

    ``reference`` is the model's own sublayer output at r; ``errors['forward']`` is its max abs
    difference from the pathway-split forward F(x_r, x_r, x_r), refused in one line above
    :data:`FORWARD_TOLERANCE` relative to the output's size. ``own`` (x_r -> the model's own output
    at r, differentiable) adds ``errors['own_jacobian']``: max |autograd of the model's own forward -
    (J_T + J_Q + J_K)|, the check of the sum that shares no code with the pathway-split forward.
    """
    X = X.detach().double()
    sub = sub.double()
    errors = {}
    if reference is not None:
        with torch.no_grad():
            ref = reference.double()
            errors["forward"] = float((sub.output(X, r) - ref).abs().max())
        size = max(1.0, float(ref.abs().max()))
        if errors["forward"] > FORWARD_TOLERANCE * size:
            raise RoutestatsError(f"token {r}: the sublayer rebuilt from the model's tensors differs from the model's own "
                                  f"output by {errors['forward']:.3g} (|y| up to {size:.3g}); regime cannot certify "
                                  "this architecture")
    ana = sub.analytic(X, r, per_head=per_head)
    auto = sub.autograd(X, r)
    errors.update({k: float(np.abs(auto[k] - ana[k]).max()) for k in auto})
    total = ana["J_T"] + ana["J_Q"] + ana["J_K"]
    full = torch.autograd.functional.jacobian(lambda x: sub.output(X, r, x, x, x), X[r], vectorize=True).numpy()
    errors["J_full"] = float(np.abs(full - total).max())
    if own is not None:
        theirs = torch.autograd.functional.jacobian(own, X[r].clone()).detach().double().numpy()
        errors["own_jacobian"] = float(np.abs(theirs - total).max())
    return {"analytic": ana, "autograd": auto, "errors": errors, "token": r, "sublayer": sub, "X": X}
