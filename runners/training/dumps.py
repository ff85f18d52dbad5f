"""What training and evaluation share: seeding, the device, the commit, and writing a model's
attention through a run's attention sink (so ``train`` and ``evaluate`` import this, not each other)."""

from __future__ import annotations

import os
import random
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from routestats.errors import RoutestatsError

from runners.training.model import SAABEncoder
from runners.training.msm import collate

__all__ = ["seed_everything", "pick_device", "git_commit", "dump_attention", "cut_example"]


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy, torch CPU and CUDA generators with the run seed (METHODS 4.5)."""
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def pick_device(device: str) -> torch.device:
    """``auto`` = CUDA when available, else CPU; TF32 is switched off explicitly on GPU."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RoutestatsError("--device cuda requested but CUDA is not available")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return torch.device(device)


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def cut_example(e, cap):
    """An encoded example cut to its first ``cap`` positions (ids, fields, tokens and words alike)."""
    return replace(e, input_ids=e.input_ids[:cap], field_ids=e.field_ids[:cap], tokens=e.tokens[:cap],
                   word_ids=e.word_ids[:cap])


@torch.inference_mode()
def dump_attention(model: SAABEncoder, records: Sequence, sink, batch_size: int, device,
                   example_ids: Sequence[int] | None = None, progress=None) -> None:
    """Write every layer and head's attention over each record's valid prefix (eval mode).

    Streams batch by batch: at most one batch of probabilities is held in memory. ``progress(done, total)``
    (records) after each batch."""
    model.eval()
    for s in range(0, len(records), batch_size):
        chunk = records[s : s + batch_size]
        b = {k: v.to(device) for k, v in collate(chunk).items()}
        _, probs = model(b["input_ids"], b["field_ids"], b["attention_mask"], need_probs=True, impl="explicit")
        stacked = torch.stack(probs, dim=1).float().cpu().numpy()  # [B, L, H, S, S]
        norms = None
        if getattr(sink, "value_norms", False):  # [B, L, H, S]: what each head transports from each key
            norms = torch.stack([layer.attn.value_norms for layer in model.layers], dim=1).float().cpu().numpy()
        for i, e in enumerate(chunk):
            n = len(e.input_ids)
            sink.add(s + i if example_ids is None else example_ids[s + i], stacked[i, :, :, :n, :n],
                     value_norms=None if norms is None else norms[i, :, :, :n])
        if progress is not None:
            progress(s + len(chunk), len(records))
