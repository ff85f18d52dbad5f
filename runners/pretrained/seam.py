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

from runners.pretrained.batches import batch_fields, batch_inputs, length_batches
from runners.pretrained.families import output_weight
from runners.pretrained.fielding import Encoded
from runners.pretrained.fused import fused_attention

__all__ = ["IMPLEMENTATION", "Condition", "Pass", "RowMask", "seam_attention", "seam_mask", "chunked_attention",
           "register_seam", "capture_pass", "transported_norms", "reduce_rows", "Captured",
           "forward_batches", "block_rows", "fused_block_rows"]

IMPLEMENTATION = "routestats"


@dataclass
class Pass:
    """One forward's intervention and what the seam recorded, layer by layer in call order.

    ``bias_w``: the same-field bias w_f (None: no bias path) on query/key pairs whose ``fields``
    (batch, n; -1 unnamed or padding) agree. ``block`` > 0 computes each layer's attention in blocks
    of that many query rows (:func:`chunked_attention`): only per-query reductions over ``n_fields``
    named fields are kept (in ``reductions``), never a layer's n x n weights.
    """

    bias_w: float | None = None
    fields: torch.Tensor | None = None
    ablate: dict[int, tuple[int, ...]] = field(default_factory=dict)
    keep_values: bool = False
    block: int = 0
    fused: bool = False  # with block: each block of rows in one fused call (runners.pretrained.fused), no weights
    kernel: str = "float64"  # fused: the kernel's arithmetic (runners.pretrained.options.KERNEL_DTYPES)
    exact: bool = False  # chunked in float64 throughout: the reference the fused path is proven against
    causal_check: bool = False  # chunked: refuse a weight above the diagonal (a decoder's)
    lengths: tuple[int, ...] = ()  # each record's length in the batch (the rest is padding)
    store: torch.dtype = torch.float32  # the storage dtype the weights are cast to before they are reduced
    n_fields: int = 0
    weights: list = field(default_factory=list)
    values: list = field(default_factory=list)
    modules: list = field(default_factory=list)  # the module that called the seam, per layer in call order
    reductions: list = field(default_factory=list)  # chunked: per layer, (batch, heads, n[, fields]) float64

    @property
    def layers_seen(self) -> int:
        return len(self.reductions) if self.block else len(self.weights)

    def bias_rows(self, q0: int, q1: int) -> torch.Tensor | None:
        """The additive bias of query rows q0..q1 over every key, (batch, 1, rows, n) float32."""
        if self.bias_w is None:
            return None
        g = self.fields
        same = (g[:, q0:q1, None] == g[:, None, :]) & (g[:, q0:q1, None] >= 0)
        return (same.to(torch.float32) * float(self.bias_w))[:, None]


class RowMask:
    """A layer's own eager mask, built a block of query rows at a time (never n x n at once).

    Registered as the mask of the ``"routestats"`` implementation while a chunked pass runs
    (:func:`seam_mask`): it keeps the arguments the model handed its mask builder and calls
    transformers' ``eager_mask`` for rows q0..q1 (the mask functions are index-based, so the rows
    are exactly those of the whole mask; tested).
    """

    def __init__(self, arguments: dict):
        self.arguments = arguments

    def rows(self, q0: int, q1: int) -> torch.Tensor | None:
        from transformers.masking_utils import eager_mask

        a = dict(self.arguments)
        a["q_offset"] = int(a.get("q_offset", 0)) + q0
        a["q_length"] = q1 - q0
        return eager_mask(**a)


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
    layer = p.layers_seen
    if p.block:
        path = fused_attention if p.fused else chunked_attention
        out, weights = path(module, query, key, value, attention_mask, p, **kwargs), None
    else:
        n = query.shape[-2]
        b = p.bias_rows(0, n)
        if b is not None:
            if attention_mask is not None and not torch.is_floating_point(attention_mask):
                raise RoutestatsError(f"{type(module).__name__} passes a boolean mask; the bias needs an additive one")
            b = b.to(device=query.device, dtype=attention_mask.dtype if attention_mask is not None else query.dtype)
            attention_mask = b if attention_mask is None else attention_mask + b
        out, weights = eager(module, query, key, value, attention_mask, **kwargs)
        if weights is None:
            raise RoutestatsError(f"{type(module).__name__}: its eager attention returned no weights")
        p.weights.append(weights.detach())
    heads = p.ablate.get(layer)
    if heads:
        if out.dim() != 4 or out.shape[2] != query.shape[1]:
            raise RoutestatsError(f"{type(module).__name__}: attention output of shape {tuple(out.shape)} is not "
                                  "(batch, positions, heads, head_dim); cannot ablate heads")
        out = out.clone()
        out[:, :, list(heads), :] = 0
    p.modules.append(module)
    if p.keep_values:
        p.values.append(value.detach())
    return out, weights


def chunked_attention(module, query, key, value, mask, p: Pass, **kwargs) -> torch.Tensor:
    """A layer's attention output computed ``p.block`` query rows at a time, with its per-query
    reductions appended to ``p.reductions``; never more than block x n weights per head.

    The arithmetic is that of transformers' eager attention: scores = Q K^T x scaling (the layer's
    own ``scaling``), the layer's soft cap, plus its own mask rows (:class:`RowMask`) plus the bias,
    a float32 softmax cast back to the query's dtype, then weights @ V. Arithmetic a family adds
    beyond this (learned sinks, another scaling order) is found by :func:`chunk_probe`, which falls
    back to the eager path.
    """
    if kwargs.get("dropout") and module.training:
        raise RoutestatsError("chunked attention runs in evaluation mode only")
    b, H, n, d = query.shape
    n_k = key.shape[-2]
    rep = H // key.shape[1]
    k = key[:, :, None].expand(b, key.shape[1], rep, n_k, d).reshape(b, H, n_k, d) if rep > 1 else key
    v = value[:, :, None].expand(b, value.shape[1], rep, n_k, value.shape[-1]).reshape(b, H, n_k, -1) \
        if rep > 1 else value
    scaling = kwargs.get("scaling")
    scaling = d ** -0.5 if scaling is None else scaling
    softcap = kwargs.get("softcap")
    out = query.new_empty(b, H, n, v.shape[-1])
    parts: dict[str, list] = {}
    g = p.fields[:, :n_k][:, None].to(query.device)  # (batch, 1, keys)
    cdt = torch.float64 if p.exact else query.dtype  # exact: the same arithmetic carried out in float64
    qx, k, v = query.to(cdt), k.to(cdt), v.to(cdt)
    for q0 in range(0, n, p.block):
        q1 = min(n, q0 + p.block)
        s = torch.matmul(qx[:, :, q0:q1], k.transpose(2, 3)) * scaling
        if softcap is not None:
            s = torch.tanh(s / softcap) * softcap
        m = mask.rows(q0, q1) if isinstance(mask, RowMask) else (None if mask is None else mask[:, :, q0:q1])
        bias = p.bias_rows(q0, q1)
        if bias is not None:
            bias = bias.to(device=query.device, dtype=m.dtype if m is not None else query.dtype)
            m = bias if m is None else m + bias
        if m is not None:
            s = s + m[:, :, :, :n_k].to(cdt)
        w = torch.nn.functional.softmax(s, dim=-1, dtype=torch.float64 if p.exact else torch.float32).to(cdt)
        out[:, :, q0:q1] = torch.matmul(w, v).to(out.dtype)
        for name, val in reduce_rows(w if p.exact else w.to(p.store), g, p.n_fields).items():
            parts.setdefault(name, []).append(val)
        if p.causal_check:  # each record's own rows and keys (a padded row may have no key left to attend)
            for r, length in enumerate(p.lengths or (n,) * b):
                rows = min(q1, length) - q0  # weights are >= 0: a max of 0 means none above the diagonal
                later = float(w[r, :, :rows, q0 + rows:length].max()) if 0 < rows and q0 + rows < length else 0.0
                if rows > 0 and (later != 0.0 or float(torch.triu(w[r, :, :rows, q0:q0 + rows], 1).max()) != 0.0):
                    raise RoutestatsError("a decoder attended to a later position")
    p.reductions.append({name: torch.cat(v, dim=2) for name, v in parts.items()})
    return out.transpose(1, 2).contiguous()


def register_seam() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(IMPLEMENTATION, seam_attention)
    AttentionMaskInterface.register(IMPLEMENTATION, seam_mask)  # the model builds its own eager masks


def seam_mask(*args, **kwargs):
    """The mask builder of the ``"routestats"`` implementation: transformers' ``eager_mask``, or while a
    chunked pass runs a :class:`RowMask` holding its arguments (built a block of rows at a time)."""
    from transformers.masking_utils import eager_mask

    p = _ACTIVE.get()
    if p is None or not p.block:
        return eager_mask(*args, **kwargs)
    bound = inspect.signature(eager_mask).bind(*args, **kwargs)
    arguments = dict(bound.arguments)
    arguments.update(arguments.pop("kwargs", {}))
    return RowMask(arguments)


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
    # one product gives every named field's mass and the row's (the last column of ones)
    keys = (fields[..., :, None] == torch.arange(n_fields, device=w.device)).to(torch.float64)
    sums = w @ torch.cat([keys, torch.ones_like(keys[..., :1])], dim=-1)
    row_mass = sums[..., -1]
    entropy = -(w * torch.log(w + S.ENTROPY_EPS)).sum(-1)
    safe = torch.where(row_mass > 0, row_mass, torch.ones_like(row_mass))
    # H(w / m) = H(w) / m + ln m: one logarithm per weight instead of two. The 1e-10 inside the logarithms moves it
    # by at most (keys) x 1e-10 x |1/m - 1|; used where that bound is below 1e-9 (softmax rows, whose float32 sums
    # are within ~1e-6 of 1), else the definition itself (rows a learned sink leaves well short of 1)
    if not safe.numel() or w.shape[-1] * S.ENTROPY_EPS * float((1 / safe - 1).abs().max()) <= 1e-9:
        rownorm = entropy / safe + torch.log(safe)
    else:
        p = w / safe[..., None]
        rownorm = -(p * torch.log(p + S.ENTROPY_EPS)).sum(-1)
    return {"row_mass": row_mass,
            "entropy": entropy,
            "entropy_rownorm": rownorm,
            "field_mass": sums[..., :-1],
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
                    n_fields: int = 0, chunk_mb: float = 0.0, fused: bool = False, kernel: str = "float64"):
    """Yield :class:`Captured` per record (in batch order) under ``cond``; padding is sliced off.

    ``loaded`` is a :class:`runners.pretrained.load.Loaded` (the loader imports this module, not the reverse).
    ``reduce="float32"`` (or ``"float16"``: the storage dtype the values are cast to first) reduces
    each record on the device (:func:`reduce_rows` over ``n_fields`` named fields) and yields no
    matrices; the checks of :func:`_checked` run there too. ``chunk_mb`` > 0 (with ``reduce``) computes
    each layer's attention in blocks of query rows sized to that many MB (:func:`block_rows`,
    :func:`chunked_attention`), never n x n; ``fused`` in one fused call per block of rows, in ``kernel``
    arithmetic (:mod:`runners.pretrained.fused`).
    """
    model = loaded.model
    n_heads = loaded.n_heads
    w_out = ([output_weight(model, loaded.family, i) for i in range(len(loaded.layers))] if value_norms else None)
    ablate = loaded.ablation(cond.ablate)  # by the seam's call index (a hybrid's attention layers are fewer)
    store = {"float16": torch.float16, "float32": torch.float32}.get(reduce or "", None)
    if chunk_mb and store is None:
        raise RoutestatsError("chunked attention keeps per-query reductions only (forms: reductions)")
    sinks = loaded.head_type == "sink"
    for idx in length_batches([len(e) for e in encoded], batch_size, padding):
        batch = [encoded[i] for i in idx]
        n_max = max(len(e) for e in batch)
        block = (fused_block_rows(chunk_mb, len(batch), n_max) if fused else
                 block_rows(chunk_mb, len(batch), n_heads, n_max)) if chunk_mb else 0
        p = Pass(bias_w=cond.bias if cond.name != "baseline" else None, fields=batch_fields(batch, device), ablate=ablate,
                 keep_values=value_norms, block=block, causal_check=loaded.causal, store=store or torch.float32,
                 n_fields=n_fields, lengths=tuple(len(e) for e in batch), fused=fused and bool(block),
                 kernel=kernel)
        if getattr(loaded, "observed", ""):  # the model's own eager forward and the weights it returns
            with torch.no_grad():
                out = model(**batch_inputs(loaded, batch, device), output_attentions=True)
            p.weights.extend(a.detach() for a in out.attentions)
        else:
            with torch.no_grad(), capture_pass(p):
                try:
                    model(**batch_inputs(loaded, batch, device))
                except RoutestatsError as exc:
                    raise RoutestatsError(f"records from {idx[0]}: {exc}") from None
        if block:
            yield from _chunked_records(p, idx, batch, reduce, sinks)
            continue
        att = torch.stack(p.weights, dim=1)  # (batch, layers, heads, n, n)
        if store is not None:
            yield from _reduced(att, idx, batch, store, reduce, loaded.causal, n_fields, sinks)
            continue
        norms = (torch.stack([transported_norms(v, w_out[li], n_heads) for li, v in enumerate(p.values)], dim=1)
                 if value_norms else None)
        att_np = att.float().cpu().numpy()
        norms_np = norms.cpu().numpy() if norms is not None else None
        for k, i in enumerate(idx):
            n = len(encoded[i])
            yield Captured(i, att_np[k, :, :, :n, :n], None if norms_np is None else norms_np[k, :, :, :n])


BYTES_PER_WEIGHT = 48  # a block's scores, weights and the float64 copies reduce_rows makes, per weight


def block_rows(budget_mb: float, batch: int, heads: int, n: int) -> int:
    """Query rows per block so that one block's working set (:data:`BYTES_PER_WEIGHT` per weight of
    batch x heads x rows x n) stays within ``budget_mb``; at least 1, at most n.

    >>> block_rows(256, 1, 32, 8192)    # 8k tokens, 32 heads: 21 rows of 8192 keys per block
    21
    >>> block_rows(256, 8, 4, 100)      # short records fit in one block
    100
    """
    per_row = BYTES_PER_WEIGHT * batch * heads * n
    return int(min(n, max(1, budget_mb * 2 ** 20 // per_row)))


FUSED_BYTES_PER_KEY = 64  # a fused block's mask rows: the model's own, the bias and their float64 copies, per key


def fused_block_rows(budget_mb: float, batch: int, n: int) -> int:
    """Query rows per fused block: only the additive mask rows (batch x rows x n, shared by the heads) are
    held, :data:`FUSED_BYTES_PER_KEY` bytes per key; at least 1, at most n.

    >>> fused_block_rows(256, 1, 16384)   # 16k tokens: 256 rows of 16k keys per block
    256
    """
    return int(min(n, max(1, budget_mb * 2 ** 20 // (FUSED_BYTES_PER_KEY * batch * n))))


def _chunked_records(p: Pass, idx, batch, dtype: str, sinks: bool):
    """Each record's reductions from a chunked pass: layers stacked, padded query rows sliced off
    (padded keys carry no weight and no field), row sums checked as :func:`_checked` checks weights."""
    red = {name: torch.stack([r[name] for r in p.reductions], dim=1).cpu().numpy() for name in p.reductions[0]}
    for k, i in enumerate(idx):
        n = len(batch[k])
        one = {name: v[k, :, :, :n] for name, v in red.items()}
        sums = one["row_mass"]
        err = float(np.clip(sums - 1, 0, None).max() if sinks else np.abs(sums - 1).max())
        if not np.isfinite(sums).all() or err > S.ROW_SUM_ATOL[dtype]:
            raise RoutestatsError(f"records from {i}: attention rows sum to 1 within {err:.2g} only")
        yield Captured(i, None, None, one)


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
