"""The proof, at every capture, that a path which never holds the weights computes what the model's own eager
attention computes: :func:`chunk_probe` runs one record through the eager path and through the chunked (or
fused) one and compares every reduction and the model's output. Split from ``seam`` (one job per module)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from runners.pretrained.fielding import Encoded
from runners.pretrained.batches import batch_fields, batch_inputs
from runners.pretrained.seam import Condition, Pass, capture_pass, reduce_rows

__all__ = ["ChunkProbe", "chunk_probe", "kernel_bound", "FUSED_EAGER_ATOL", "KERNEL_ATOL", "OWN_MULTIPLE",
           "OWN_FLOOR"]

FUSED_EAGER_ATOL = 1e-4  # float64 kernel vs the model's float32 weights: float32 rounds a score s by eps32 |s|
KERNEL_ATOL = {"float64": 1e-6}  # a float64 kernel vs the float64 reference: the proof asked for by name
# a float32 kernel (the default for float32 weights) is held to the model's own precision: within OWN_MULTIPLE x the
# gap of the model's own eager float32 attention to the float64 reference, on the same record, and never less than
# OWN_FLOOR (rows whose own gap is 0: one-hot rows, tiny scores), which reports' 3-4 decimals do not see
OWN_MULTIPLE, OWN_FLOOR = 2.0, 1e-5


def kernel_bound(kernel: str, own_gap: float) -> float:
    """The largest gap of the fused reductions to the float64 reference that the probe accepts for ``kernel``:
    1e-6 for a float64 kernel; for a float32 one :data:`OWN_MULTIPLE` x ``own_gap`` (the model's own eager float32
    attention's gap to that reference), at least :data:`OWN_FLOOR`.

    >>> kernel_bound("float64", 8e-6), kernel_bound("float32", 8e-6), kernel_bound("float32", 0.0)
    (1e-06, 1.6e-05, 1e-05)
    """
    return KERNEL_ATOL[kernel] if kernel in KERNEL_ATOL else max(OWN_MULTIPLE * own_gap, OWN_FLOOR)


@dataclass(frozen=True)
class ChunkProbe:
    """How chunked attention compared with the eager path on one record (:func:`chunk_probe`)."""

    ok: bool
    reason: str  # what differed or failed ('' when ok)
    block: int
    output_bitwise: bool = False
    output_rel: float = float("nan")  # max |chunked - eager| / max |eager| of the model's output
    reductions_max: float = float("nan")  # max |chunked - eager| (fused: - the float64 reference) of any reduction
    eager_max: float = float("nan")  # fused: max |fused - eager| of any reduction (the eager weights' float32)
    bound: float = float("nan")  # the bound reductions_max was held to
    own_max: float = float("nan")  # fused: max |eager - the float64 reference|: the model's own precision

    def record(self) -> dict:
        """The manifest's record (a path that failed before comparing has no numbers: null, never NaN)."""
        num = (lambda x: None if x != x else x)  # noqa: E731
        return {"ok": self.ok, "reason": self.reason, "block_rows": self.block, "output_bitwise": self.output_bitwise,
                "output_rel": num(self.output_rel), "reductions_max_abs": num(self.reductions_max),
                **({} if self.bound != self.bound else {"reductions_bound": self.bound}),
                **({} if self.eager_max != self.eager_max else {"eager_reductions_max_abs": self.eager_max}),
                **({} if self.own_max != self.own_max else {"model_reductions_max_abs": self.own_max})}


def _first_tensor(out) -> torch.Tensor:
    for name in ("last_hidden_state", "logits"):
        if getattr(out, name, None) is not None:
            return getattr(out, name)
    return out[0]


def chunk_probe(loaded, record: Encoded, cond: Condition, *, n_fields: int, reduce: str = "float32",
                device="cpu", reductions_atol: float = 1e-6, output_rtol: float = 1e-5,
                fused: bool = False, kernel: str = "float64") -> ChunkProbe:
    """Run ``record`` through the eager path and through :func:`chunked_attention` in blocks of a third
    of its rows (so block edges are crossed) under ``cond``; the chunked path is accepted when every
    per-query reduction agrees within ``reductions_atol`` and the model's output within ``output_rtol``
    of its largest value. Any failure of the chunked path (a model that uses its mask outside the
    attention function, say) is a refusal with its first line, never an error. ``fused``: the proof of the fused
    path (:func:`runners.pretrained.fused.fused_attention`): its reductions within :func:`kernel_bound` (of its
    ``kernel``'s dtype and the model's own eager gap to the same reference) of the chunked arithmetic carried out
    in float64 (``Pass.exact``), within that bound plus the model's own gap (float64 kernel:
    :data:`FUSED_EAGER_ATOL`) of the eager ones, and the model's output within ``output_rtol``."""
    store = {"float16": torch.float16, "float32": torch.float32}[reduce]
    what = "fused" if fused else "chunked"
    n = len(record)
    block = max(1, -(-n // 3))
    ablate = loaded.ablation(cond.ablate)
    outs, reds = [], []
    # eager; then the fused path against the chunked arithmetic carried out in float64 (the model's float32 weights
    # round large scores by up to eps32 x |s|: on SmolLM2 8e-6 of entropy), or the chunked path against eager
    runs = ((0, False, False), (block, False, True), (block, True, False)) if fused else \
        ((0, False, False), (block, False, False))
    for blk, fuse, exact in runs:
        p = Pass(bias_w=cond.bias if cond.name != "baseline" else None, fields=batch_fields([record], device),
                 ablate=ablate, block=blk, causal_check=loaded.causal and not exact, store=store, n_fields=n_fields,
                 fused=fuse, exact=exact, kernel=kernel)
        try:
            with torch.no_grad(), capture_pass(p):
                outs.append(_first_tensor(loaded.model(**batch_inputs(loaded, [record], device))).to(torch.float64))
        except Exception as exc:  # noqa: BLE001 -- any failure of the chunked path means: use the eager one
            line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            return ChunkProbe(False, f"the {what} path failed ({type(exc).__name__}: {line[:160]})", block)
        if blk:
            reds.append({k: torch.stack([r[k] for r in p.reductions], dim=1) for k in p.reductions[0]})
        else:
            att = torch.stack(p.weights, dim=1).to(store)
            reds.append(reduce_rows(att, p.fields[:, None, None, :], n_fields))
    scale = float(outs[0].abs().max()) or 1.0
    rel = float((outs[-1] - outs[0]).abs().max()) / scale
    gap = lambda a, b: max(float((a[k] - b[k]).abs().max()) for k in a)  # noqa: E731
    red, eager_gap = gap(reds[-1], reds[-2]), gap(reds[-1], reds[0])
    own = gap(reds[0], reds[1]) if fused else float("nan")  # the model's own float32 weights vs the float64 reference
    bound = kernel_bound(kernel, own) if fused else reductions_atol
    to_eager = (FUSED_EAGER_ATOL if kernel in KERNEL_ATOL else bound + own) if fused else reductions_atol
    ok = red <= bound and rel <= output_rtol and eager_gap <= to_eager
    reason = "" if ok else (f"the {what} path differs from the eager one (reductions by {eager_gap:.2g}"
                            + (f", from the float64 reference by {red:.2g}" if fused else "")
                            + f", output by {rel:.2g} relative)")
    return ChunkProbe(ok, reason, block, bool(torch.equal(outs[0], outs[-1])), rel, red,
                      eager_gap if fused else float("nan"), bound, own)
