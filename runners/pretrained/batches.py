"""Records into batches for a capture's forwards: which records share a batch (:func:`length_batches`), and the
batch's input tensors and field indices (:func:`batch_inputs`, :func:`batch_fields`)."""

from __future__ import annotations

import inspect
from typing import Sequence

import torch

from routestats.errors import RoutestatsError

from runners.pretrained.fielding import Encoded

__all__ = ["BATCH_TOKENS", "length_batches", "batch_inputs", "batch_fields"]

BATCH_TOKENS = 4096  # the most tokens a batch of records holds (one record may hold more)


def length_batches(lengths: Sequence[int], batch_size: int, padding: str = "none",
                   tokens: int = BATCH_TOKENS) -> list[list[int]]:
    """Record indices in batches: ``none`` groups records of one length (no padding at all, so
    every record's attention is bitwise what it is alone); ``longest`` sorts by length and pads
    to each batch's longest. A batch holds at most ``batch_size`` records and ``tokens`` tokens
    (padding included; a longer record is a batch of its own): batching long records buys no
    throughput, since each matrix product is already large, and costs page faults and cache misses
    on activations past glibc's largest heap block (32 MB) -- a 4,096-token record of SmolLM2's layer shape
    captured in batches of three took 16 % more CPU than alone (``benchmarks/bench_capture.py --per-forward``).

    >>> length_batches([3, 5, 3, 3, 5], 2)
    [[0, 2], [3], [1, 4]]
    >>> length_batches([3, 5, 4], 2, "longest")
    [[0, 2], [1]]
    >>> length_batches([3000, 3000, 1000, 1000, 1000, 1000, 1000], 8)  # at most 4,096 tokens a batch
    [[2, 3, 4, 5], [6], [0], [1]]
    """
    if batch_size < 1:
        raise RoutestatsError(f"--batch-size must be at least 1, got {batch_size}")
    if padding not in ("none", "longest"):
        raise RoutestatsError(f"--padding must be none or longest, got {padding!r}")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    out: list[list[int]] = []
    for i in order:
        if (out and len(out[-1]) < batch_size and (len(out[-1]) + 1) * lengths[i] <= tokens
                and (padding == "longest" or lengths[out[-1][0]] == lengths[i])):
            out[-1].append(i)
        else:
            out.append([i])
    return out


def batch_inputs(loaded, batch: Sequence[Encoded], device) -> dict[str, torch.Tensor]:
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


def batch_fields(batch: Sequence[Encoded], device) -> torch.Tensor:
    """Each position's named-field index (batch, n): -1 for unnamed positions and padding."""
    n = max(len(e) for e in batch)
    g = torch.full((len(batch), n), -1, dtype=torch.long)
    for i, e in enumerate(batch):
        g[i, :len(e)] = torch.tensor(e.fields)
    return g.to(device)
