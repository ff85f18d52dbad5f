"""The SAAB encoder (METHODS 4.1-4.2): pre-LN Transformer with an optional structure-aware bias.

Module construction order is fixed (token, field, position embeddings; per layer LN1, Q, K,
V, O, LN2, FFN1, FFN2; final LN; head), so a baseline and a SAAB model built after the same
seed start from identical tensors: the SAAB path has no parameters.

Two attention paths compute the same function: ``explicit`` (materialises probabilities;
needed for dumps) and ``fused`` (``torch.nn.functional.scaled_dot_product_attention`` with
an additive float mask). Dumps always use the explicit path.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

VARIANTS = ("baseline", "saab")
ATTENTION_IMPLS = ("explicit", "fused")


@dataclass
class EncoderConfig:
    """Model configuration (names follow the reference recipe)."""

    vocab_size: int
    field_vocab_size: int = 6
    max_length: int = 256
    num_labels: int = 5
    d_model: int = 768
    num_layers: int = 4
    num_heads: int = 6
    ff_dim: int = 3072
    dropout: float = 0.2
    scale_embeddings: bool = True
    pad_id: int = 0
    variant: str = "baseline"
    saab_field_weight: float = 1.0
    saab_layer_mask: list[float] | None = None
    saab_shuffle_bias: bool = False
    saab_shuffle_seed: int = 0
    attention_impl: str = "explicit"
    extra: dict = field(default_factory=dict)

    def validate(self) -> "EncoderConfig":
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.attention_impl not in ATTENTION_IMPLS:
            raise ValueError(f"attention_impl must be one of {ATTENTION_IMPLS}")
        for name in ("vocab_size", "field_vocab_size", "max_length", "num_labels", "d_model", "num_layers",
                     "num_heads", "ff_dim"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by num_heads {self.num_heads}")
        if self.saab_layer_mask is not None and len(self.saab_layer_mask) != self.num_layers:
            raise ValueError(f"saab_layer_mask has {len(self.saab_layer_mask)} entries for {self.num_layers} layers")
        return self

    def to_dict(self) -> dict:
        return asdict(self)


def neg_inf(dtype: torch.dtype) -> float:
    """Logit used for masked keys: -1e9 in float32, -1e4 in half precision (METHODS 2)."""
    return -1e4 if dtype in (torch.float16, torch.bfloat16) else -1e9


class Attention(nn.Module):
    def __init__(self, d_model: int, num_heads: int, dropout: float):
        super().__init__()
        self.h = num_heads
        self.dh = d_model // num_heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)
        self.value_norms: torch.Tensor | None = None  # [B, H, S], set by a forward that returns probabilities

    def forward(self, x, key_mask, bias, impl: str, need_probs: bool):
        B, S, D = x.shape
        q = self.q(x).view(B, S, self.h, self.dh).transpose(1, 2)
        k = self.k(x).view(B, S, self.h, self.dh).transpose(1, 2)
        v = self.v(x).view(B, S, self.h, self.dh).transpose(1, 2)
        neg = neg_inf(q.dtype)
        probs = None
        if impl == "explicit" or need_probs:
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.dh)
            if bias is not None:
                scores = scores + bias[:, None].to(scores.dtype)
            scores = scores.masked_fill(~key_mask[:, None, None, :], neg)
            probs = self.drop(torch.softmax(scores, dim=-1))
            out = probs @ v
        else:
            mask = torch.zeros(B, 1, S, S, dtype=q.dtype, device=q.device)
            if bias is not None:
                mask = mask + bias[:, None].to(q.dtype)
            mask = mask.masked_fill(~key_mask[:, None, None, :], neg)
            p = self.drop.p if self.training else 0.0
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        out = out.transpose(1, 2).reshape(B, S, D)
        out = self.o(out) * key_mask[..., None].to(out.dtype)
        self.value_norms = self.transported_norms(v) if need_probs else None
        return out, probs

    def transported_norms(self, v: torch.Tensor) -> torch.Tensor:
        """||f_h(x_j)|| = ||(x_j W_V^h + b_V^h) W_O^h|| per head and key (Kobayashi et al. 2020), [B, H, S].

        W_O^h is the head's slice of the output projection (its columns h*dh:(h+1)*dh); the output
        bias is shared by all heads and left out."""
        w = self.o.weight.view(self.o.weight.shape[0], self.h, self.dh)  # [D_out, H, dh]
        f = torch.einsum("bhsd,ehd->bhse", v, w)
        return f.norm(dim=-1)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.attn = Attention(cfg.d_model, cfg.num_heads, cfg.dropout)
        self.ln2 = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.ff1 = nn.Linear(cfg.d_model, cfg.ff_dim)
        self.ff2 = nn.Linear(cfg.ff_dim, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.ff_drop = nn.Dropout(cfg.dropout)

    def forward(self, h, key_mask, bias, impl, need_probs):
        a, probs = self.attn(self.ln1(h), key_mask, bias, impl, need_probs)
        h = h + self.drop(a)
        f = self.ff2(self.ff_drop(F.gelu(self.ff1(self.ln2(h)))))
        return h + self.drop(f), probs


def shuffle_bias_ids(field_ids: torch.Tensor, attention_mask: torch.Tensor, shuffle_seed: int) -> torch.Tensor:
    """Shuffled-control field ids for the bias (METHODS 4.2), deterministic and padding-independent.

    Per row, the ids at attended positions v_1..v_n are permuted by ``randperm(n)`` from a
    CPU generator seeded with ``(sum_t v_t * t XOR shuffle_seed * 2654435761) & (2**63 - 1)``
    (t = 1..n); rows with n < 2 are unchanged.
    """
    out = field_ids.clone()
    mask = attention_mask.bool()
    for b in range(field_ids.shape[0]):
        pos = torch.nonzero(mask[b], as_tuple=False).flatten()
        n = pos.numel()
        if n < 2:
            continue
        vals = field_ids[b, pos].to("cpu", torch.int64)
        key = int((vals * torch.arange(1, n + 1, dtype=torch.int64)).sum())
        seed = (key ^ (int(shuffle_seed) * 2_654_435_761)) & (2**63 - 1)
        g = torch.Generator(device="cpu")
        g.manual_seed(seed)
        perm = torch.randperm(n, generator=g)
        out[b, pos] = vals[perm].to(out.device, out.dtype)
    return out


class SAABEncoder(nn.Module):
    """Pre-LN encoder with a per-token field-label head; ``variant='saab'`` adds the SAAB bias."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.cfg = cfg.validate()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.field = nn.Embedding(cfg.field_vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_length, cfg.d_model)
        self.layers = nn.ModuleList([EncoderLayer(cfg) for _ in range(cfg.num_layers)])
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.head = nn.Linear(cfg.d_model, cfg.num_labels)
        self.drop = nn.Dropout(cfg.dropout)

    def layer_biases(self, bias_ids: torch.Tensor) -> list[torch.Tensor | None]:
        """Per-layer SAAB bias [B, S, S] (None where a layer gets none), aligned with layers."""
        if self.cfg.variant != "saab":
            return [None] * self.cfg.num_layers
        same = (bias_ids[:, :, None] == bias_ids[:, None, :]).to(torch.float32)
        base = self.cfg.saab_field_weight * same
        mask = self.cfg.saab_layer_mask or [1.0] * self.cfg.num_layers
        return [None if m == 0 else (base if m == 1 else m * base) for m in mask]

    def forward(self, input_ids, field_ids, attention_mask, need_probs: bool = False, impl: str | None = None):
        """Return (logits [B, S, labels], list of per-layer probabilities or Nones)."""
        impl = impl or self.cfg.attention_impl
        B, S = input_ids.shape
        key_mask = attention_mask.bool()
        pos = torch.arange(S, device=input_ids.device)
        h = self.tok(input_ids) + self.field(field_ids) + self.pos(pos)[None]
        if self.cfg.scale_embeddings:
            h = h * math.sqrt(self.cfg.d_model)
        h = self.drop(h)
        bias_ids = field_ids
        if self.cfg.variant == "saab" and self.cfg.saab_shuffle_bias:
            bias_ids = shuffle_bias_ids(field_ids, attention_mask, self.cfg.saab_shuffle_seed)
        biases = self.layer_biases(bias_ids)
        probs = []
        for layer, bias in zip(self.layers, biases):
            h, p = layer(h, key_mask, bias, impl, need_probs)
            probs.append(p)
        return self.head(self.ln_f(h)), probs


def state_hash(model: nn.Module) -> str:
    """SHA-256 over state-dict entries sorted by name: name, dtype string, shape, C-order bytes."""
    h = hashlib.sha256()
    sd = model.state_dict()
    for name in sorted(sd):
        t = sd[name].detach().cpu().contiguous()
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.view(torch.int16).numpy().tobytes())
    return h.hexdigest()


def qkv_grad_norms(model: SAABEncoder) -> list[dict[str, float]]:
    """Per layer Frobenius norms of the Q, K, V weight gradients (weights only), in float32."""
    out = []
    for layer in model.layers:
        row = {}
        for c in ("q", "k", "v"):
            g = getattr(layer.attn, c).weight.grad
            row[c] = 0.0 if g is None else float(g.detach().float().norm())
        out.append(row)
    return out
