"""SAAB vs baseline training-step and inference latency, explicit vs fused attention, in one run.

Uses ``runners.training.overhead.run_overhead`` (the Table 13 machinery) with the tiny model on CPU (or
``--device cuda`` with the paper model on a GPU) and prints the SAAB / baseline ratios per
length for both attention paths. Run: ``python benchmarks/bench_training.py [--device cuda]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch

from runners.training.overhead import run_overhead
from runners.training.presets import get_preset


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    gpu = args.device.startswith("cuda")
    preset = get_preset("paper" if gpu else "tiny")
    lengths = (64, 128, 256) if gpu else (32, 64)
    print(f"load average: {os.getloadavg()[0]:.2f}; device {args.device}; torch threads {args.threads}")
    print("| attention | mode | length | baseline ms | SAAB ms | SAAB / baseline |")
    print("|---|---|---|---|---|---|")
    for impl in ("explicit", "fused"):
        with tempfile.TemporaryDirectory() as tmp:
            s = run_overhead(tmp, model=preset.model, lengths=lengths, batch_size=4 if gpu else 16,
                             vocab_size=preset.vocab_size, device=args.device, attention_impl=impl,
                             repeats=3, inference_iterations=10, training_iterations=3)
        for (mode, length), g in s.groupby(["mode", "length"]):
            b = g[g["variant"] == "baseline"]["mean_latency_ms"].item()
            v = g[g["variant"] == "saab"]["mean_latency_ms"].item()
            print(f"| {impl} | {mode} | {length} | {b:.2f} | {v:.2f} | {v / b:.3f} |")


if __name__ == "__main__":
    main()
