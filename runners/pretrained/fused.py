"""Fused capture: every stored reduction of a layer from one fused attention call, never its weights.

Each stored reduction is a linear functional of a softmax row ``p`` (METHODS III, capture):

* the mass on each named field's keys, on key 0 and on all keys is ``p @ [one-hot(field of key) | e_0 | 1]``;
* the entropy is ``H = lse - sum_k p_k s_k`` with ``s_k = scaling q.k_k + m_k + b_k``: ``sum_k p_k k_k`` is
  ``p @ K``, the own mask ``m`` is 0 on every key a query may see (checked block by block: a mask with other
  values refuses the fused path), and the SAAB bias ``b = w [field(k) = field(q)]`` gives ``w SFM_q``;
* the renormalised entropy is ``H / m + ln m`` (m the row mass).

So V is widened by ``[K | one-hot | e_0 | 1]`` and one call of torch's fused CPU kernel
(``aten._scaled_dot_product_flash_attention_for_cpu``, which returns the log-sum-exp beside its output) gives
the layer's own output (the first ``d_v`` columns) and every reduction. Query and key are zero-padded to V's
width (the kernel needs equal head sizes; zeros leave ``q.k`` unchanged). Where the layer's own mask is the plain
causal one or hides nothing (:func:`plain_mask`), the whole layer is one call in the kernel's causal mode or with no
mask, and the SAAB bias rides in that padding (:func:`carry_bias`): no mask rows at all. Otherwise rows are taken in
blocks whose mask rows stay within the memory budget (:class:`runners.pretrained.seam.RowMask`), so memory is
linear in n.

The fused entropy is the exact ``-sum p ln p``; the eager and chunked paths add 1e-10 inside the logarithm,
which lowers their entropy by at most ``n x 1e-10`` nats. Soft-capped scores (Gemma 2) are not linear in K,
and learned attention sinks add a logit outside the keys: both are refused here in one line, and
:func:`runners.pretrained.probe.chunk_probe` (``fused=True``) proves the path on every capture before it is used.
"""

from __future__ import annotations

import math

import torch

from routestats.errors import RoutestatsError

__all__ = ["fused_attention", "fused_rows", "grouped_kernel", "widen", "plain_mask", "carry_bias", "rounded_into",
           "FUSED_DTYPE", "ROUNDING"]

FUSED_DTYPE = torch.float64  # widen's default; a capture passes its kernel's (Pass.kernel): by default the model's
# own precision (runners.pretrained.capture.model_kernel), proven within twice the model's own eager gap to the
# float64 arithmetic (runners.pretrained.probe.kernel_bound); float64 is held to 1e-6 of it


def _kernel(q, k, v, mask, scale, causal: bool = False):
    """(output, lse) of softmax(q k^T scale + mask) v, fused (no weights held); ``causal``: the kernel's own causal
    mode instead of a mask (query i sees keys 0..i)."""
    if q.device.type == "cpu":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, attn_mask=mask,
                                                                         scale=scale)
    s = torch.matmul(q, k.transpose(-1, -2)) * scale  # pragma: no cover - accelerators: FlexAttention next
    if causal:  # pragma: no cover
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    if mask is not None:  # pragma: no cover
        s = s + mask
    lse = torch.logsumexp(s, dim=-1)
    return torch.matmul(torch.softmax(s, dim=-1), v), lse


def widen(k, v, fields_k, n_fields: int, dtype=None):
    """(K zero-padded to V's new width, V widened by [K | one-hot(field of key) | e_0 | 1]) in ``dtype`` (default
    :data:`FUSED_DTYPE`), once a layer: ``k`` (b, H_kv, n, d), ``v`` (b, H_kv, n, d_v) for each key/value head (the
    caller repeats them for grouped query heads), ``fields_k`` (b, n). K is centred over its keys first
    (k - mean k): every score of a query moves by the same scaling q . mean k, which softmax ignores, while lse and
    sum p s shrink by it -- so their difference, the entropy, cancels far less in float32 (the keys of a language
    model share a large common direction)."""
    b, H, n, d = k.shape
    dt = dtype or FUSED_DTYPE
    keys = (fields_k[..., None] == torch.arange(n_fields, device=k.device)).to(dt)  # (b, n, F)
    first = torch.zeros(b, n, 1, dtype=dt, device=k.device)
    first[:, 0] = 1
    extra = torch.cat([keys, first, torch.ones_like(first)], dim=-1)[:, None].expand(b, H, n, n_fields + 2)
    kd = k.to(dt) - k.mean(dim=-2, keepdim=True, dtype=torch.float64).to(dt)
    wide = torch.cat([v.to(dt), kd, extra], dim=-1)
    return torch.nn.functional.pad(kd, (0, wide.shape[-1] - d)), wide


def plain_mask(mask) -> str | None:
    """``"causal"`` where a layer's own mask (a :class:`runners.pretrained.seam.RowMask`) is exactly the causal one:
    transformers' ``causal_mask_function`` over a square, unpadded, unshifted sequence (no window, no padding, no
    cache); ``"none"`` where it hides nothing (no mask, or the bidirectional one over such a sequence); else None.
    In the first two the kernel's own causal mode, or no mask at all, is the model's mask: no mask rows are built.

    >>> plain_mask(None)
    'none'
    >>> plain_mask(torch.zeros(1, 1, 2, 2)) is None  # a tensor's values are not read here: the block path checks them
    True
    """
    if mask is None:
        return "none"
    args = getattr(mask, "arguments", None)
    if not isinstance(args, dict):
        return None
    from transformers.masking_utils import bidirectional_mask_function, causal_mask_function

    pad = args.get("attention_mask")
    plain = ((pad is None or bool(pad.all())) and not args.get("q_offset") and not args.get("kv_offset")
             and args.get("q_length") == args.get("kv_length"))
    kinds = {causal_mask_function: "causal", bidirectional_mask_function: "none"}
    return kinds.get(args.get("mask_function")) if plain else None


def carry_bias(kp, fields_k, d: int, n_fields: int):
    """K's padding (columns ``d`` to ``d + n_fields``, zero after :func:`widen`) set to the one-hot field of each
    key: with the query's own field scaled by ``w / scaling`` in the same columns (:func:`fused_rows`), the scores
    gain ``w [field(q) = field(k)]``, the SAAB bias, exactly as the additive mask would add it -- so the biased pass
    runs in the kernel's causal mode, or with no mask, like the baseline (no mask rows). Unnamed keys (-1) get
    zeros: no bias, as the mask path gives them."""
    kp = kp.clone()
    kp[..., d:d + n_fields] = (fields_k[:, None, :, None] == torch.arange(n_fields, device=kp.device)).to(kp.dtype)
    return kp


def grouped_kernel(qp, kp, wide, add, scaling: float, causal: bool):
    """(output, lse) of :func:`_kernel` for query heads ``qp`` (b, H, rows, w) over ``kp`` / ``wide`` of H heads, or
    of H_kv heads whose H / H_kv query heads are grouped (query head h reads key/value head h // (H / H_kv)). With
    no mask rows each key/value head is served to its group as a stride-0 view (b x H_kv batches of H / H_kv heads):
    the values of repeating it (bitwise on the machine it was first measured on; within float32 rounding on an AVX2
    machine, whose kernel sums a stride-0 head in another order), 5 % less kernel, no copy; mask rows are per batch
    element, so there the heads are repeated."""
    b, H, rows, w = qp.shape
    Hk = kp.shape[1]
    if Hk != H and add is not None:
        kp, wide, Hk = kp.repeat_interleave(H // Hk, dim=1), wide.repeat_interleave(H // Hk, dim=1), H
    if Hk == H:
        return _kernel(qp, kp, wide, add, scaling, causal)
    g = (b * Hk, H // Hk, rows, w)
    out, lse = _kernel(qp.view(g), kp.reshape(b * Hk, 1, *kp.shape[2:]).expand(g[:2] + kp.shape[2:]),
                       wide.reshape(b * Hk, 1, *wide.shape[2:]).expand(g[:2] + wide.shape[2:]), add, scaling, causal)
    return out.reshape(b, H, rows, -1), lse.reshape(b, H, rows)


def fused_rows(q, kp, wide, fields_q, fields_k, mask, bias_w, scaling: float, n_fields: int, dv: int,
               causal: bool = False, carried: bool = False):
    """The output rows and reductions of one block of queries ``q`` (b, H, rows, d) against the layer's widened
    keys and values (:func:`widen`; H heads, or H_kv whose query heads are grouped); ``fields_q`` (b, rows) and ``fields_k`` (b, n) field indices (-1 unnamed);
    ``mask`` (b, 1, rows, n) additive (0 where a key may be seen) or None; ``bias_w`` the SAAB bias or None.
    ``carried``: ``kp`` holds each key's field in its padding (:func:`carry_bias`), and the bias is carried by the
    query's padding instead of a mask.
    Returns ``(output (b, H, rows, dv), {row_mass, entropy, entropy_rownorm, field_mass, first_mass})``, float64.

    >>> _ = torch.manual_seed(0); q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    >>> g = torch.tensor([[0, 0, 1, 1, -1]])
    >>> out, red = fused_rows(q, *widen(k, v, g, 2), g[:, :3], g, None, 1.0, 0.5, 2, 4)
    >>> s = (q @ k.transpose(-1, -2)).double() * 0.5 + (g[:, :3, None] == g[:, None, :]).double()[:, None] * 1.0
    >>> p = torch.softmax(s, -1)
    >>> bool(torch.allclose(red["entropy"], -(p * p.log()).sum(-1), atol=1e-12))
    True
    >>> bool(torch.allclose(out, (p @ v.double()), atol=1e-12))
    True
    >>> kp, wide = widen(k[:, :, :3], v[:, :, :3], g[:, :3], 2)  # the bias carried in Q/K's padding, no mask
    >>> _, red = fused_rows(q, carry_bias(kp, g[:, :3], 4, 2), wide, g[:, :3], g[:, :3], None, 1.0, 0.5, 2, 4, carried=True)
    >>> p = torch.softmax(s[..., :3], -1)
    >>> bool(torch.allclose(red["entropy"], -(p * p.log()).sum(-1), atol=1e-12))
    True
    """
    b, H, rows, d = q.shape
    dt = wide.dtype
    qp = torch.nn.functional.pad(q.to(dt), (0, wide.shape[-1] - d))
    add = None
    if mask is not None:
        # the own mask as it is (0, or a minimum whose exp is exactly 0 in float64: a row with no key to see, a
        # padded query, stays uniform as eager's is); one that adds anything else makes sum p m non-zero
        add = mask.to(dt)
        if bool(((add > -1e30) & (add != 0)).any()):
            raise RoutestatsError("its attention mask adds values other than 0 and -inf to the scores; the fused "
                                  "path needs a mask that only hides keys")
    if bias_w is not None and carried:  # w / scaling x one-hot(field of q): q'.k' scaling = q.k scaling + w [same]
        onehot_q = (fields_q[:, None, :, None] == torch.arange(n_fields, device=q.device)).to(dt)
        qp[..., d:d + n_fields] = onehot_q * (float(bias_w) / scaling)
    elif bias_w is not None:
        same = (fields_q[:, :, None] == fields_k[:, None, :]) & (fields_q[:, :, None] >= 0)
        bias = same[:, None].to(dt) * float(bias_w)
        add = bias if add is None else add + bias  # never in place: mask.to(dt) may be the caller's own mask
    out, lse = grouped_kernel(qp, kp, wide, add, scaling, causal)
    field_mass = out[..., dv + d:dv + d + n_fields]
    first_mass, row_mass = out[..., -2], out[..., -1]
    # q . (p @ K) in the kernel's arithmetic (its own rounding, which the probe bounds), then float64: casting both
    # operands to float64 first cost 6x the product (SmolLM2, 2k tokens: 4.3 vs 0.7 ms a layer)
    mean_score = scaling * torch.einsum("bhnd,bhnd->bhn", qp[..., :d], out[..., dv:dv + d]).to(torch.float64)
    if bias_w is not None:  # sum_k p_k b_k = w x the mass on the query's own field
        fq = fields_q[:, None, :, None].clamp_min(0).expand(b, H, rows, 1)
        own = torch.gather(field_mass, -1, fq)[..., 0] * (fields_q[:, None, :] >= 0)
        mean_score = mean_score + float(bias_w) * own
    top = math.log(kp.shape[-2])
    entropy = rounded_into(lse.to(torch.float64) - mean_score, top)
    field_mass, first_mass, row_mass = (x.to(torch.float64) for x in (field_mass, first_mass, row_mass))
    safe = torch.where(row_mass > 0, row_mass, torch.ones_like(row_mass))
    rownorm = rounded_into(entropy / safe + torch.log(safe), top)
    red = {"row_mass": row_mass, "entropy": entropy, "entropy_rownorm": rownorm,
           "field_mass": field_mass, "first_mass": first_mass}
    return out[..., :dv], red


ROUNDING = 1e-4  # the largest step past [0, ln n] pulled back: ten times float32 rounding seen on SmolLM2 (-6e-6)


def rounded_into(h, top: float):
    """Entropies into [0, ln n] where rounding stepped past a bound by at most :data:`ROUNDING` (a float32 kernel put
    -6e-6 on a one-hot row of SmolLM2; the nearest value inside is nearer the exact one); a larger step is left as
    it is, for the run writer to refuse, never hidden."""
    h = torch.where((h < 0) & (h >= -ROUNDING), torch.zeros_like(h), h)
    return torch.where((h > top) & (h <= top + ROUNDING), torch.full_like(h, top), h)


def fused_attention(module, query, key, value, mask, p, **kwargs) -> torch.Tensor:
    """A layer's attention output from fused calls of ``p.block`` query rows, its reductions appended to
    ``p.reductions`` (the layout :func:`runners.pretrained.seam.chunked_attention` appends): no weight is held."""
    if kwargs.get("dropout") and module.training:
        raise RoutestatsError("fused attention runs in evaluation mode only")
    if kwargs.get("softcap") is not None:
        raise RoutestatsError("its scores are soft-capped (tanh), not linear in K: the fused path does not apply")
    if getattr(module, "sinks", None) is not None:
        raise RoutestatsError("its softmax includes learned sinks, logits outside the keys: the fused path does not "
                              "apply")
    b, H, n, d = query.shape
    n_k = key.shape[-2]
    scaling = kwargs.get("scaling")
    scaling = d ** -0.5 if scaling is None else float(scaling)
    dv = value.shape[-1]
    g = p.fields.to(query.device)
    kp, wide = widen(key, value, g[:, :n_k], p.n_fields, dtype=getattr(torch, p.kernel))  # once a key/value head
    plain = plain_mask(mask) if n == n_k else None
    if plain is not None and p.bias_w is not None:
        kp = carry_bias(kp, g[:, :n_k], d, p.n_fields)
    rep = H // key.shape[1]
    if rep > 1 and plain is None:  # grouped query heads with mask rows: one key/value head a query head
        kp, wide = kp.repeat_interleave(rep, dim=1), wide.repeat_interleave(rep, dim=1)
    if plain is not None:  # (grouped query heads: fused_rows serves each key/value head to its query heads)  # one call, the kernel's own causal skip or no mask; a bias in Q/K's padding: no mask rows
        o, red = fused_rows(query, kp, wide, g[:, :n], g[:, :n_k], None, p.bias_w, scaling, p.n_fields, dv,
                            causal=plain == "causal", carried=True)
        p.reductions.append(red)
        return o.to(query.dtype).transpose(1, 2).contiguous()
    out = query.new_empty(b, H, n, dv)
    parts: dict[str, list] = {}
    for q0 in range(0, n, p.block):
        q1 = min(n, q0 + p.block)
        m = mask.rows(q0, q1) if hasattr(mask, "rows") else (None if mask is None else mask[:, :, q0:q1])
        m = None if m is None else m[..., :n_k]
        o, red = fused_rows(query[:, :, q0:q1], kp, wide, g[:, q0:q1], g[:, :n_k], m, p.bias_w, scaling,
                            p.n_fields, dv)
        out[:, :, q0:q1] = o.to(query.dtype)
        for name, val in red.items():
            parts.setdefault(name, []).append(val)
    p.reductions.append({name: torch.cat(v, dim=2) for name, v in parts.items()})
    return out.transpose(1, 2).contiguous()
