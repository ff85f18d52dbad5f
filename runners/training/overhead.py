"""Compute overhead of SAAB vs baseline (paper Table 13; METHODS 3.9 and 6.3).

For each sequence length: trainable parameters, forward FLOPs from the PyTorch profiler,
inference latency / throughput / peak memory, and full training-step latency (forward,
backward, AdamW step). Inputs per length: ids uniform in [2, vocab) from a CPU generator
seeded ``seed + length``, first half field 4 / second half field 3, all-ones mask, random
labels, plain cross-entropy over all positions. Each (variant, mode) gets a fresh model
built after ``seed_everything(seed)`` with max_length = max(lengths); trainable counts must
match. The extra SAAB scalar-operation count is B * L^2 * (2 + layers * heads).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from routestats.rundir.atomic import write_json_atomic, write_table_atomic
from routestats.rundir.write import software_versions

from runners.training.model import EncoderConfig, SAABEncoder
from runners.training.dumps import pick_device, seed_everything


def _inputs(length: int, batch: int, vocab: int, labels: int, seed: int, device):
    g = torch.Generator(device="cpu").manual_seed(seed + length)
    ids = torch.randint(2, vocab, (batch, length), generator=g)
    fids = torch.full((batch, length), 3, dtype=torch.long)
    fids[:, : length // 2] = 4
    mask = torch.ones(batch, length, dtype=torch.long)
    y = torch.randint(0, labels, (batch, length), generator=g)
    return [t.to(device) for t in (ids, fids, mask, y)]


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peak_mb(device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 1e6 if device.type == "cuda" else None


def run_overhead(
    out: Path,
    *,
    model: dict,
    lengths: Sequence[int] = (64, 128, 256),
    batch_size: int = 4,
    vocab_size: int = 30_000,
    field_vocab_size: int = 6,
    num_labels: int = 5,
    inference_warmup: int = 5,
    inference_iterations: int = 20,
    training_warmup: int = 2,
    training_iterations: int = 5,
    repeats: int = 5,
    seed: int = 2026,
    device: str = "auto",
    allow_tf32: bool = False,
    attention_impl: str = "explicit",
) -> pd.DataFrame:
    """Measure, write ``overhead_raw.parquet``, ``overhead_summary.parquet`` and ``overhead.json``; return the summary."""
    dev = pick_device(device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
        torch.backends.cudnn.allow_tf32 = allow_tf32
    max_len = max(lengths)
    raw, static = [], []
    params = {}
    for variant in ("baseline", "saab"):
        for mode in ("inference", "training"):
            seed_everything(seed)
            cfg = EncoderConfig(vocab_size=vocab_size, field_vocab_size=field_vocab_size, max_length=max_len,
                                num_labels=num_labels, variant=variant, attention_impl=attention_impl, **model)
            m = SAABEncoder(cfg).to(dev)
            params[variant] = sum(p.numel() for p in m.parameters() if p.requires_grad)
            opt = torch.optim.AdamW(m.parameters(), lr=1e-4) if mode == "training" else None
            for L in lengths:
                step = _step_fn(m, opt, mode, _inputs(L, batch_size, vocab_size, num_labels, seed, dev), num_labels)
                if mode == "inference":
                    static.append(_static_row(step, dev, variant, L, batch_size, cfg))
                warm, iters = (inference_warmup, inference_iterations) if mode == "inference" else \
                    (training_warmup, training_iterations)
                raw += [{"variant": variant, "mode": mode, "length": L, **row}
                        for row in _timed(step, dev, warm, iters, repeats)]
    if params["baseline"] != params["saab"]:
        raise RuntimeError(f"trainable parameter counts differ: {params}")
    raw_df = pd.DataFrame(raw)
    summary = _summary(raw_df, static, params, batch_size)
    _write(Path(out), raw_df, summary, dev, {
        "model": model, "lengths": list(lengths), "batch_size": batch_size, "vocab_size": vocab_size,
        "inference_warmup": inference_warmup, "inference_iterations": inference_iterations,
        "training_warmup": training_warmup, "training_iterations": training_iterations, "repeats": repeats,
        "seed": seed, "device": str(dev), "allow_tf32": allow_tf32, "attention_impl": attention_impl,
        "torch_threads": torch.get_num_threads()})
    return summary


def _step_fn(m, opt, mode: str, inputs, num_labels: int):
    """One timed step: a forward (inference mode), or forward, backward and AdamW (training)."""
    ids, fids, mask, y = inputs
    if mode == "inference":
        m.eval()

        def step():
            with torch.inference_mode():
                m(ids, fids, mask)
        return step
    m.train()

    def step():
        opt.zero_grad(set_to_none=True)
        logits, _ = m(ids, fids, mask)
        F.cross_entropy(logits.reshape(-1, num_labels), y.reshape(-1)).backward()
        opt.step()
    return step


def _static_row(step, dev, variant: str, L: int, batch_size: int, cfg) -> dict:
    """Forward FLOPs from the profiler, and the extra scalar operations of the SAAB bias."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts, with_flops=True) as prof:
        step()
    flops = sum(e.flops for e in prof.key_averages() if e.flops)
    return {"variant": variant, "length": L, "forward_flops": float(flops),
            "extra_saab_scalar_ops": float(batch_size * L * L * (2 + cfg.num_layers * cfg.num_heads))
            if variant == "saab" else 0.0}


def _timed(step, dev, warm: int, iters: int, repeats: int) -> list[dict]:
    for _ in range(warm):
        step()
    rows = []
    for r in range(repeats):
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        _sync(dev)
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        _sync(dev)
        rows.append({"repeat": r, "latency_ms": (time.perf_counter() - t0) * 1000 / iters, "peak_mb": _peak_mb(dev)})
    return rows


def _summary(raw_df: pd.DataFrame, static: list, params: dict, batch_size: int) -> pd.DataFrame:
    g = raw_df.groupby(["variant", "mode", "length"])
    summary = g["latency_ms"].agg(mean_latency_ms="mean", sd_latency_ms=lambda x: float(np.std(x, ddof=1)) if len(x) > 1 else 0.0,
                                  median_latency_ms="median").reset_index()
    summary["throughput_per_s"] = batch_size * 1000 / summary["mean_latency_ms"]
    summary["peak_mb"] = g["peak_mb"].max().to_numpy()
    summary = summary.merge(pd.DataFrame(static), on=["variant", "length"], how="left")
    summary["trainable_parameters"] = summary["variant"].map(params)
    base = summary[summary.variant == "baseline"].set_index(["mode", "length"])
    summary["latency_change_pct"] = [
        100 * (r.mean_latency_ms / base.loc[(r.mode, r.length), "mean_latency_ms"] - 1) for r in summary.itertuples()
    ]
    return summary


def _write(out: Path, raw_df: pd.DataFrame, summary: pd.DataFrame, dev, settings: dict) -> None:
    import pyarrow as pa

    write_table_atomic(out / "overhead_raw.parquet", pa.Table.from_pandas(raw_df, preserve_index=False))
    write_table_atomic(out / "overhead_summary.parquet", pa.Table.from_pandas(summary, preserve_index=False))
    write_json_atomic(out / "overhead.json", {
        "settings": settings, "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "software": software_versions(("torch",)), "summary": json.loads(summary.to_json(orient="records"))})
