"""The capture seam: transformers' ``AttentionInterface`` carrying an intervention into each layer.

transformers 5 routes every supported family's attention through one registry: a layer hands
its query, key, value and *its own* mask (causal, sliding window, padding, already combined)
and its scaling / soft-capping arguments to the function registered under the model's
``attn_implementation``. :func:`seam_attention` is registered as ``"routestats"`` (its masks are
the eager ones): it adds the intervention to the layer's own additive mask, calls the model's
own ``eager_attention_forward`` (so the arithmetic stays the model's), zeroes ablated heads'
outputs before the output projection, and records each layer's weights and value vectors.

:func:`forward_batches` runs the records in batches of one length (no padding, so every
record's attention is bitwise what it is alone) or right-padded to each batch's longest
(padding sliced off; within float rounding of batch size 1), and yields each record's
attention and value norms.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import sys
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from routestats.errors import RoutestatsError
from routestats.rundir import schema as S

from runners.pretrained.families import output_weight
from runners.pretrained.fielding import Encoded

__all__ = ["IMPLEMENTATION", "Condition", "Pass", "seam_attention", "register_seam", "capture_pass",
           "length_batches", "transported_norms", "reduce_rows", "Captured", "forward_batches"]

IMPLEMENTATION = "routestats"


@dataclass
class Pass:
    """One forward's intervention and what the seam recorded, layer by layer in call order."""

    bias: torch.Tensor | None = None  # (batch, 1, n, n) additive
    ablate: dict[int, tuple[int, ...]] = field(default_factory=dict)
    keep_values: bool = False
    weights: list = field(default_factory=list)
    values: list = field(default_factory=list)
    modules: list = field(default_factory=list)  # the module that called the seam, per layer in call order


_ACTIVE: contextvars.ContextVar[Pass | None] = contextvars.ContextVar("routestats_capture_pass", default=None)
_EAGER: dict[type, Callable] = {}


def _eager_of(module) -> Callable:
    """The model's own eager attention: ``eager_attention_forward`` of the module's modeling file."""
    cls = type(module)
    if cls not in _EAGER:
        fn = getattr(sys.modules.get(cls.__module__), "eager_attention_forward", None)
        if fn is None:
            raise RoutestatsError(f"{cls.__name__}: its modeling file has no eager_attention_forward to delegate to")
        _EAGER[cls] = fn
    return _EAGER[cls]


def seam_attention(module, query, key, value, attention_mask, **kwargs):
    """The function registered in transformers' ``AttentionInterface`` as ``"routestats"``.

    Outside a capture pass it is the model's eager attention. Inside one, it adds the pass's
    bias to this layer's own additive mask (or uses it as the mask where the model passes none),
    calls the model's eager attention, zeroes ablated heads' outputs (before the output
    projection) and records the weights (and the value vectors, for norms).
    """
    eager = _eager_of(module)
    p = _ACTIVE.get()
    if p is None:
        return eager(module, query, key, value, attention_mask, **kwargs)
    layer = len(p.weights)
    if p.bias is not None:
        if attention_mask is not None and not torch.is_floating_point(attention_mask):
            raise RoutestatsError(f"{type(module).__name__} passes a boolean mask; the bias needs an additive one")
        dtype = attention_mask.dtype if attention_mask is not None else query.dtype
        b = p.bias.to(device=query.device, dtype=dtype)
        attention_mask = b if attention_mask is None else attention_mask + b
    out, weights = eager(module, query, key, value, attention_mask, **kwargs)
    if weights is None:
        raise RoutestatsError(f"{type(module).__name__}: its eager attention returned no weights")
    heads = p.ablate.get(layer)
    if heads:
        if out.dim() != 4 or out.shape[2] != weights.shape[1]:
            raise RoutestatsError(f"{type(module).__name__}: attention output of shape {tuple(out.shape)} is not "
                                  "(batch, positions, heads, head_dim); cannot ablate heads")
        out = out.clone()
        out[:, :, list(heads), :] = 0
    p.weights.append(weights.detach())
    p.modules.append(module)
    if p.keep_values:
        p.values.append(value.detach())
    return out, weights


def register_seam() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(IMPLEMENTATION, seam_attention)
    AttentionMaskInterface.register(IMPLEMENTATION, eager_mask)  # the model builds its own eager masks


@contextlib.contextmanager
def capture_pass(p: Pass):
    token = _ACTIVE.set(p)
    try:
        yield p
    finally:
        _ACTIVE.reset(token)


@dataclass(frozen=True)
class Condition:
    """One intervention on the same weights: a same-field bias ``w_f`` and/or ablated heads."""

    name: str = "baseline"
    bias: float = 0.0
    ablate: tuple[tuple[int, int], ...] = ()

    @property
    def factors(self) -> dict:
        return {"variant": self.name, "w_f": float(self.bias),
                "ablate": ",".join(f"{a}.{b}" for a, b in self.ablate) or "none"}


def length_batches(lengths: Sequence[int], batch_size: int, padding: str = "none") -> list[list[int]]:
    """Record indices in batches: ``none`` groups records of one length (no padding at all, so
    every record's attention is bitwise what it is alone); ``longest`` sorts by length and pads
    to each batch's longest.

    >>> length_batches([3, 5, 3, 3, 5], 2)
    [[0, 2], [3], [1, 4]]
    >>> length_batches([3, 5, 4], 2, "longest")
    [[0, 2], [1]]
    """
    if batch_size < 1:
        raise RoutestatsError(f"--batch-size must be at least 1, got {batch_size}")
    if padding not in ("none", "longest"):
        raise RoutestatsError(f"--padding must be none or longest, got {padding!r}")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    out: list[list[int]] = []
    for i in order:
        if out and len(out[-1]) < batch_size and (padding == "longest" or lengths[out[-1][0]] == lengths[i]):
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _batch_inputs(loaded, batch: Sequence[Encoded], device) -> dict[str, torch.Tensor]:
    """Right-padded input tensors of a batch (padding never shifts a real token's position)."""
    n = max(len(e) for e in batch)
    pad_id = loaded.tokenizer.pad_token_id or 0
    out = {}
    for name in batch[0].inputs:
        fill = pad_id if name == "input_ids" else 0
        rows = [e.inputs[name] + [fill] * (n - len(e)) for e in batch]
        out[name] = torch.tensor(rows, dtype=torch.long, device=device)
    if "attention_mask" not in out and "attention_mask" in inspect.signature(loaded.model.forward).parameters:
        out["attention_mask"] = torch.tensor([[1] * len(e) + [0] * (n - len(e)) for e in batch], device=device)
    return out


def _bias(batch: Sequence[Encoded], w: float, device) -> torch.Tensor | None:
    """w on every query/key pair of positions in the same named field, (batch, 1, n, n)."""
    if not w:
        return None if w is None else torch.zeros(1, device=device)  # w_f = 0 still goes through the bias path
    n = max(len(e) for e in batch)
    g = torch.full((len(batch), n), -1, dtype=torch.long)
    for i, e in enumerate(batch):
        g[i, :len(e)] = torch.tensor(e.fields)
    same = (g[:, :, None] == g[:, None, :]) & (g[:, :, None] >= 0)
    return (same.to(torch.float32) * float(w))[:, None].to(device)


def transported_norms(values: torch.Tensor, w_out: torch.Tensor, n_heads: int) -> torch.Tensor:
    """||v_hj W_O^h|| per head and key (METHODS III 3.5), float32, from one layer's value vectors
    (batch, kv_heads, n, dh) and its output projection weight (D, heads * dh); grouped-query heads
    share their key/value head. Computed in float64 through each head's Gram matrix.

    >>> v = torch.tensor([[[[1.0], [1.0]], [[0.0], [3.0]]]])   # (batch 1, 2 value heads, 2 keys, dh 1)
    >>> transported_norms(v, 2 * torch.eye(2), 2)[0].tolist()   # head h reads value head h, scaled by 2
    [[2.0, 2.0], [0.0, 6.0]]
    """
    b, n_kv, n, dh = values.shape
    w = w_out.to(torch.float64).reshape(w_out.shape[0], n_heads, dh)  # [D, H, dh]
    gram = torch.einsum("ehd,ehf->hdf", w, w)  # [H, dh, dh]
    v = values.to(torch.float64)[:, torch.arange(n_heads, device=values.device) // (n_heads // n_kv)]
    sq = torch.einsum("bhnd,hdf,bhnf->bhn", v, gram, v)
    return sq.clamp_min(0).sqrt().to(torch.float32)


def reduce_rows(w: torch.Tensor, fields: torch.Tensor, n_fields: int) -> dict[str, torch.Tensor]:
    """Per-query reductions (float64) of attention rows ``w`` (..., n, n) whose positions have the
    field index ``fields`` (..., n) (-1 unnamed): the on-device twin of
    :func:`routestats.rundir.reductions.reduce_queries` (row mass, entropy over all keys, entropy of
    the renormalised row, mass on each named field's keys, mass on key 0), equal to it within
    float64 rounding (tested), so that only per-query summaries leave the device.

    >>> w = torch.tensor([[[.6, .2, .1, .1], [.3, .5, .1, .1], [.1, .1, .5, .3], [.1, .1, .2, .6]]])
    >>> r = reduce_rows(w, torch.tensor([1, 1, 0, 0]), 2)
    >>> [round(x, 6) for x in r["field_mass"][0, 0].tolist()]   # query 0: 0.2 on field 0, 0.8 on field 1
    [0.2, 0.8]
    """
    w = w.to(torch.float64)
    onehot = (fields[..., :, None] == torch.arange(n_fields, device=w.device)).to(torch.float64)
    row_mass = w.sum(-1)
    safe = torch.where(row_mass > 0, row_mass, torch.ones_like(row_mass))
    p = w / safe[..., None]
    return {"row_mass": row_mass,
            "entropy": -(w * torch.log(w + S.ENTROPY_EPS)).sum(-1),
            "entropy_rownorm": -(p * torch.log(p + S.ENTROPY_EPS)).sum(-1),
            "field_mass": w @ onehot,
            "first_mass": w[..., 0].clone()}


def _checked(att: torch.Tensor, causal: bool, dtype: str, first: int, sinks: bool = False) -> None:
    """Finite rows summing to 1 (at most 1 with attention sinks; within the storage dtype's tolerance); zero
    upper triangle when causal."""
    if not bool(torch.isfinite(att).all()):
        raise RoutestatsError(f"records from {first}: the model returned non-finite attention")
    sums = att.to(torch.float64).sum(-1)
    err = float((sums - 1).clamp_min(0).max() if sinks else (sums - 1).abs().max())
    if err > S.ROW_SUM_ATOL[dtype]:
        raise RoutestatsError(f"records from {first}: attention rows sum to 1 within {err:.2g} only"
                              + (" (at most 1 with attention sinks)" if sinks else ""))
    if causal:
        n = att.shape[-1]
        upper = torch.triu(torch.ones(n, n, dtype=torch.bool, device=att.device), 1)
        if bool(upper.any()) and float(att[..., upper].abs().max()) != 0.0:
            raise RoutestatsError(f"records from {first}: a decoder attended to a later position")


@dataclass(frozen=True)
class Captured:
    """One record's attention (layers, heads, n, n) and value norms (layers, heads, n) -- or, when
    reduced on the device, its per-query reductions (layers, heads, n[, fields]) only."""

    index: int
    weights: np.ndarray | None
    norms: np.ndarray | None
    reductions: dict | None = None


def forward_batches(loaded, encoded: Sequence[Encoded], cond: Condition, *, batch_size: int = 8,
                    padding: str = "none", value_norms: bool = False, device="cpu", reduce: str | None = None,
                    n_fields: int = 0):
    """Yield :class:`Captured` per record (in batch order) under ``cond``; padding is sliced off.

    ``loaded`` is a :class:`runners.pretrained.load.Loaded` (the loader imports this module, not the reverse).
    ``reduce="float32"`` (or ``"float16"``: the storage dtype the values are cast to first) reduces
    each record on the device (:func:`reduce_rows` over ``n_fields`` named fields) and yields no
    matrices; the checks of :func:`_checked` run there too.
    """
    model = loaded.model
    n_heads = loaded.n_heads
    w_out = ([output_weight(model, loaded.family, li) for li in range(loaded.n_layers)] if value_norms else None)
    ablate: dict[int, tuple[int, ...]] = {}
    for li, h in cond.ablate:
        ablate[li] = tuple(sorted(set(ablate.get(li, ())) | {h}))
    store = {"float16": torch.float16, "float32": torch.float32}.get(reduce or "", None)
    for idx in length_batches([len(e) for e in encoded], batch_size, padding):
        batch = [encoded[i] for i in idx]
        p = Pass(bias=_bias(batch, cond.bias if cond.name != "baseline" else None, device), ablate=ablate,
                 keep_values=value_norms)
        with torch.no_grad(), capture_pass(p):
            model(**_batch_inputs(loaded, batch, device))
        att = torch.stack(p.weights, dim=1)  # (batch, layers, heads, n, n)
        if store is not None:
            yield from _reduced(att, idx, batch, store, reduce, loaded.causal, n_fields, loaded.head_type == "sink")
            continue
        norms = (torch.stack([transported_norms(v, w_out[li], n_heads) for li, v in enumerate(p.values)], dim=1)
                 if value_norms else None)
        att_np = att.float().cpu().numpy()
        norms_np = norms.cpu().numpy() if norms is not None else None
        for k, i in enumerate(idx):
            n = len(encoded[i])
            yield Captured(i, att_np[k, :, :, :n, :n], None if norms_np is None else norms_np[k, :, :, :n])


def _reduced(att, idx, batch, store, dtype: str, causal: bool, n_fields: int, sinks: bool = False):
    """Reductions of a batch on its device: the whole batch at once when it has one length
    (bitwise as one record at a time), else record by record after slicing off the padding."""
    n_max = att.shape[-1]
    groups = [(list(range(len(idx))), n_max)] if all(len(e) == n_max for e in batch) else \
        [([k], len(e)) for k, e in enumerate(batch)]
    for ks, n in groups:
        a = att[ks][..., :n, :n].to(store)
        _checked(a, causal, dtype, idx[ks[0]], sinks)
        g = torch.tensor([batch[k].fields for k in ks], device=a.device)[:, None, None, :]
        red = {k: v.cpu().numpy() for k, v in reduce_rows(a, g, n_fields).items()}
        for j, k in enumerate(ks):
            yield Captured(idx[k], None, None, {name: v[j] for name, v in red.items()})
