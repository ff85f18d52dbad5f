"""Paired MSM training with attention dumps written through the run-directory contract.

``train_study`` trains a set of conditions (baseline, SAAB, w_f values, placements, shuffled)
from one seed into a run tree: every condition starts from identical initial tensors, sees
the same data order and the same masks, and the pairing evidence (init hash, data-order
hash, first-batch hash) is checked equal across conditions. Each run resumes from its last
checkpoint after a kill and reproduces the uninterrupted run bitwise on CPU.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from routestats.rundir import schema as S
from routestats.rundir.atomic import atomic_path, sha256_file
from routestats.errors import RoutestatsError
from routestats.rundir.write import RunWriter, software_versions
from routestats.rundir.sampling import reservoir_indices

from runners.checkpoints import load_checkpoint
from runners.progress import job_reporter
from runners.training.dumps import cut_example, dump_attention, git_commit, pick_device, seed_everything  # noqa: F401  (re-exported)
from runners.training.data import DataSpec
from runners.training.model import EncoderConfig, SAABEncoder, qkv_grad_norms, state_hash
from runners.training.msm import collate, encode_record, load_tokenizer, lr_at, mask_field_ids, train_tokenizer
from runners.training.presets import Condition, Preset, recipe_of


# ------------------------------------------------------------------ prepared data
@dataclass
class Prepared:
    spec: DataSpec
    tokenizer_path: Path
    tokenizer_sha256: str
    train: list
    val: list
    val_prepared_lengths: list[int]
    max_length: int

    @property
    def dataset_id(self) -> str:
        h = hashlib.sha256()
        for path, digest in sorted(self.spec.files().items()):
            h.update(digest.encode())
        h.update(self.tokenizer_sha256.encode())
        h.update(str(self.max_length).encode())
        return h.hexdigest()


def prepare(spec: DataSpec, out_dir: Path, vocab_size: int, max_length: int) -> Prepared:
    """Train (or reuse) the study's BPE tokenizer on the training split and encode both splits."""
    train_recs, val_recs = spec.load()
    if not train_recs or not val_recs:
        raise RoutestatsError(f"{spec.name}: empty training or validation split")
    tok_path = out_dir / "tokenizer.json"
    if tok_path.is_file():
        tok = load_tokenizer(tok_path)
    else:
        tok = train_tokenizer(train_recs, vocab_size)
        with atomic_path(tok_path) as tmp:
            tok.save(str(tmp))
    fid = spec.field_ids
    train = [encode_record(tok, r, fid, max_length)[0] for r in train_recs]
    val_pairs = [encode_record(tok, r, fid, max_length) for r in val_recs]
    return Prepared(spec, tok_path, sha256_file(tok_path), train, [e for e, _ in val_pairs],
                    [n for _, n in val_pairs], max_length)


def data_order(n_records: int, n_needed: int, seed: int) -> torch.Tensor:
    """Record order of the whole run: fresh ``randperm`` epochs from a generator seeded with ``seed``."""
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    parts, total = [], 0
    while total < n_needed:
        parts.append(torch.randperm(n_records, generator=g))
        total += n_records
    return torch.cat(parts)[:n_needed]


# ------------------------------------------------------------------ one run
def evaluation_indices(n_val: int, n_primary: int, length_sample: int, seed: int) -> tuple[list[int], set, set]:
    """Validation indices to evaluate: the first ``n_primary`` records plus a reservoir sample,
    sorted; returns (indices, primary set, sample set). Fixed before any model output exists."""
    if n_val < max(n_primary, length_sample):
        raise RoutestatsError(
            f"validation split has {n_val} records, fewer than max(primary {n_primary}, sample {length_sample})"
        )
    primary = set(range(n_primary))
    sample = set(reservoir_indices(n_val, length_sample, seed)) if length_sample else set()
    return sorted(primary | sample), primary, sample


def _examples_frame(prep: Prepared, tc, cap: int) -> pd.DataFrame:
    idx, primary, sample = evaluation_indices(len(prep.val), tc.eval_examples, tc.length_sample, tc.sample_seed)
    rows = []
    for i in idx:
        e = prep.val[i]
        k = min(len(e.input_ids), cap)
        rows.append({
            "example_id": i, "split": "val", "source_index": i, "row_id": f"row_{i}", "label": e.label,
            "prepared_length": prep.val_prepared_lengths[i], "cap": cap,
            "field_ids": e.field_ids[:k], "tokens": e.tokens[:k], "word_ids": e.word_ids[:k],
            "is_primary": i in primary, "in_length_sample": i in sample,
        })
    df = pd.DataFrame(rows)
    # prepared_length counts the whole record before the model's own max_length cut
    df["prepared_length"] = np.minimum(df["prepared_length"], prep.max_length)
    return df


@torch.inference_mode()
def evaluate(model, records, spec: DataSpec, p: float, gen, batch_size: int, device) -> tuple[float, float]:
    """MSM loss (mean of batch means) and accuracy (micro over masked positions) on ``records``.

    As in the reference, masking consumes the training masking generator.
    """
    model.eval()
    losses, correct, total = [], 0, 0
    for s in range(0, len(records), batch_size):
        b = {k: v.to(device) for k, v in collate(records[s : s + batch_size]).items()}
        masked, labels = mask_field_ids(b["field_ids"], b["attention_mask"], p, spec.mask_id, gen)
        logits, _ = model(b["input_ids"], masked, b["attention_mask"])
        losses.append(float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)))
        sel = labels != -100
        correct += int((logits.argmax(-1)[sel] == labels[sel]).sum())
        total += int(sel.sum())
    return float(np.mean(losses)), correct / max(total, 1)


def _latest_checkpoint(run_dir: Path) -> Path | None:
    ck = sorted((run_dir / S.CHECKPOINT_DIR).glob("step_*.pt"))
    return ck[-1] if ck else None


@dataclass
class _Training:
    """What one run's training loop carries from step to step (and a checkpoint saves)."""

    model: SAABEncoder
    opt: torch.optim.Optimizer
    mask_gen: torch.Generator
    dev: torch.device
    init_hash: str
    data_order_id: str
    metrics: list
    gradients: list
    first_batch: str | None = None
    dumped: dict | None = None

    def resume(self, ck: dict, path: Path, run_dir: Path) -> tuple[int, float]:
        """Load checkpoint ``ck`` (from ``path``) into the loop; return its step and elapsed seconds."""
        if ck["init_id"] != self.init_hash or ck["data_order_id"] != self.data_order_id:
            raise RoutestatsError(f"{path}: checkpoint belongs to another init or data order; remove {run_dir}")
        self.model.load_state_dict(ck["model"])
        self.opt.load_state_dict(ck["optimizer"])
        torch.set_rng_state(ck["rng_cpu"])
        self.mask_gen.set_state(ck["rng_mask"])
        if self.dev.type == "cuda" and ck.get("rng_cuda") is not None:
            torch.cuda.set_rng_state(ck["rng_cuda"])
        self.metrics, self.gradients, self.first_batch = ck["metrics"], ck["gradients"], ck["first_batch"]
        self.dumped = dict(ck["dumped"])
        return ck["step"], ck["elapsed"]

    def evaluate(self, step: int, lr: float, prep: Prepared, tc, t0: float) -> None:
        """The validation loss and accuracy at ``step``, appended to the metrics."""
        vl, va = evaluate(self.model, prep.val, prep.spec, tc.mask_probability, self.mask_gen, tc.eval_batch_size,
                          self.dev)
        self.metrics.append({"step": step, "phase": "eval", "loss": vl, "accuracy": va, "lr": lr, "grad_norm": None,
                             "examples_per_sec": None, "elapsed_seconds": time.perf_counter() - t0})

    def checkpoint(self, step: int, elapsed: float, config: dict) -> dict:
        return {"step": step, "model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
                "rng_cpu": torch.get_rng_state(), "rng_mask": self.mask_gen.get_state(),
                "rng_cuda": torch.cuda.get_rng_state() if self.dev.type == "cuda" else None,
                "elapsed": elapsed, "metrics": self.metrics, "gradients": self.gradients,
                "first_batch": self.first_batch, "dumped": self.dumped, "init_id": self.init_hash,
                "data_order_id": self.data_order_id, "config": config}

    def step(self, step: int, prep: Prepared, tc, order, t0: float) -> float:
        """One optimizer step (``tc.grad_accum`` micro-batches of the data order); its metrics row appended."""
        model, opt, per_step = self.model, self.opt, tc.microbatch_size * tc.grad_accum
        model.train()
        lr = lr_at(step, tc.learning_rate, tc.lr_schedule, tc.warmup_steps, tc.min_lr_ratio, tc.max_steps)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        losses = []
        tstep = time.perf_counter()
        for r in range(tc.grad_accum):
            pos = (step - 1) * per_step + r * tc.microbatch_size
            idx = order[pos : pos + tc.microbatch_size].tolist()
            b = {k: v.to(self.dev) for k, v in collate([prep.train[i] for i in idx]).items()}
            masked, labels = mask_field_ids(b["field_ids"], b["attention_mask"], tc.mask_probability,
                                            prep.spec.mask_id, self.mask_gen)
            if self.first_batch is None:
                h = hashlib.sha256()
                for t in (b["input_ids"], masked, labels):
                    h.update(t.cpu().numpy().astype("<i8").tobytes())
                self.first_batch = h.hexdigest()
            logits, _ = model(b["input_ids"], masked, b["attention_mask"])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
            (loss / tc.grad_accum).backward()
            losses.append(float(loss.detach()))
        if tc.log_gradients:
            for layer, norms in enumerate(qkv_grad_norms(model)):
                for comp, val in norms.items():
                    self.gradients.append({"step": step, "layer": layer, "component": comp, "norm": val})
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip))
        opt.step()
        dt = time.perf_counter() - tstep
        self.metrics.append({"step": step, "phase": "train", "loss": float(np.mean(losses)), "accuracy": None,
                             "lr": lr, "grad_norm": grad_norm, "examples_per_sec": per_step / dt,
                             "elapsed_seconds": time.perf_counter() - t0})
        return lr


def _start(cfg: EncoderConfig, tc, prep: Prepared, seed: int, dev) -> tuple[_Training, torch.Tensor, str]:
    """A fresh run's model (initialised from ``seed`` on the CPU, before any other torch RNG use), optimizer,
    mask generator and data order, with its identities."""
    seed_everything(seed)
    model = SAABEncoder(cfg)
    init_hash = state_hash(model)
    model.to(dev)
    order = data_order(len(prep.train), tc.max_steps * tc.microbatch_size * tc.grad_accum, seed)
    order_hash = hashlib.sha256(order.numpy().astype("<i8").tobytes()).hexdigest()
    data_order_id = hashlib.sha256(f"{prep.dataset_id}|{order_hash}|mask-seed={seed}".encode()).hexdigest()
    mask_gen = torch.Generator(device=dev)
    mask_gen.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=tc.learning_rate, betas=tc.betas, weight_decay=tc.weight_decay)
    return _Training(model, opt, mask_gen, dev, init_hash, data_order_id, [], [], None, {}), order, order_hash


def _run_identity(prep: Prepared, preset: Preset, condition: Condition, cfg: EncoderConfig, study: str,
                  seed: int) -> tuple[dict, str]:
    """The run's factors and its id, unique across data sets and depths of one study tree."""
    from runners.training.presets import PRESETS

    spec = prep.spec
    factors = {**condition.factors(), "depth": cfg.num_layers, "dataset": spec.name, "preset": preset.name}
    depth_tag = "" if cfg.num_layers == PRESETS[preset.name].model["num_layers"] else f"-L{cfg.num_layers}"
    return factors, f"{study}-{spec.name}-{condition.name}{depth_tag}-seed{seed}"


def _keep_checkpoints(writer: RunWriter, run_dir: Path, keep_checkpoints: str) -> None:
    ckpts = sorted((run_dir / S.CHECKPOINT_DIR).glob("step_*.pt"))
    keep = {"all": ckpts, "last": ckpts[-1:], "none": []}[keep_checkpoints]
    for c in ckpts:
        if c not in keep:
            c.unlink()
    for c in keep:
        writer.add_file(str(c.relative_to(run_dir)))


def _finalize(writer: RunWriter, run: _Training, *, cfg, preset: Preset, prep: Prepared, condition: Condition,
              n_eval: int, cap: int, order_hash: str, seconds: float) -> Path:
    tc, spec, dev = preset.train, prep.spec, run.dev
    return writer.finalize(
        model=cfg.to_dict(),
        training=tc.to_dict(),
        recipe=recipe_of(preset),
        dataset={"name": spec.name, "spec": spec.source, "format": spec.format, "files": spec.files(),
                 "tokenizer_sha256": prep.tokenizer_sha256, "train_records": len(prep.train),
                 "val_records": len(prep.val), "max_length": prep.max_length},
        evaluation={"examples": n_eval, "primary": tc.eval_examples, "length_sample": tc.length_sample,
                    "sample_seed": tc.sample_seed, "cap": cap, "batch_size": tc.eval_batch_size,
                    "selection": "first N validation records + Algorithm R reservoir sample (sorted)",
                    "field_ids": "unmasked"},
        pairing={"init_state_sha256": run.init_hash, "data_order_sha256": order_hash,
                 "first_batch_sha256": run.first_batch},
        device={"device": str(dev), "dtype": "float32",
                "tf32": bool(dev.type == "cuda" and torch.backends.cuda.matmul.allow_tf32),
                "name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
                "torch_threads": torch.get_num_threads()},
        timing={"train_seconds": seconds},
        software=software_versions(("torch", "tokenizers")),
        git_commit=git_commit(),
        condition=condition.name,
    )


def train_run(run_dir: Path, *, prep: Prepared, preset: Preset, condition: Condition, seed: int, study: str,
              device: str = "auto", attention_impl: str = "explicit", keep_checkpoints: str = "last",
              progress: Callable[[str, int, int], None] | None = None, stop_after: int | None = None) -> Path | None:
    """Train one condition into ``run_dir``; resume from its last checkpoint if one exists.

    ``stop_after`` ends the process-side loop after that step without finalising (tests use
    it to simulate a kill). Returns the run path, or None when stopped early.
    """
    tc, spec = preset.train, prep.spec
    cfg = EncoderConfig(
        vocab_size=preset.vocab_size, field_vocab_size=spec.field_vocab_size, max_length=prep.max_length,
        num_labels=spec.num_labels, attention_impl=attention_impl, **preset.model, **condition.model_overrides(),
    )
    if (run_dir / S.MANIFEST).is_file():
        check_same_settings(run_dir, {"training": tc.to_dict(), "model": cfg.to_dict(), "seed": seed})
        return run_dir  # complete, with these settings: nothing to do
    run, order, order_hash = _start(cfg, tc, prep, seed, pick_device(device))
    factors, run_id = _run_identity(prep, preset, condition, cfg, study, seed)
    resume = _latest_checkpoint(run_dir)
    writer = RunWriter(run_dir, run_id=run_id, study=study, factors=factors, seed=seed, init_id=run.init_hash,
                       data_order_id=run.data_order_id, fields=spec.manifest_fields(), resume=resume is not None)
    cap = min(tc.eval_cap, prep.max_length)
    eval_df = _examples_frame(prep, tc, cap)
    writer.write_examples(eval_df)
    eval_ids = eval_df["example_id"].tolist()
    eval_records = [cut_example(prep.val[i], cap) for i in eval_ids]
    start, elapsed0 = 0, 0.0
    if resume is not None:
        start, elapsed0 = run.resume(load_checkpoint(resume), resume, run_dir)
        for step_done, forms in run.dumped.items():
            writer.adopt_attention(step_done, forms, tc.dump_dtype)
    final, t0 = tc.max_steps, time.perf_counter() - elapsed0
    for step in range(start + 1, final + 1):
        lr = run.step(step, prep, tc, order, t0)
        if step in tc.eval_steps or step == final:
            run.evaluate(step, lr, prep, tc, t0)
        if step in tc.checkpoint_steps:
            forms = list(tc.final_forms if step == final else tc.trajectory_forms)
            with writer.attention(step, dtype=tc.dump_dtype, forms=forms, value_norms=True) as sink:
                dump_attention(run.model, eval_records, sink, tc.eval_batch_size, run.dev, eval_ids)
            run.dumped[step] = forms
            ck = run.checkpoint(step, time.perf_counter() - t0, {"model": cfg.to_dict(), "training": tc.to_dict()})
            with atomic_path(run_dir / S.checkpoint_file(step)) as tmp:
                torch.save(ck, tmp)
        if progress is not None:
            progress(run_id, step, final)
        if stop_after is not None and step >= stop_after:
            return None
    writer.write_metrics(pd.DataFrame(run.metrics))
    if tc.log_gradients:
        writer.write_gradients(pd.DataFrame(run.gradients))
    _keep_checkpoints(writer, run_dir, keep_checkpoints)
    return _finalize(writer, run, cfg=cfg, preset=preset, prep=prep, condition=condition, n_eval=len(eval_ids),
                     cap=cap, order_hash=order_hash, seconds=time.perf_counter() - t0)


def check_same_settings(run_dir: Path, wanted: dict) -> None:
    """A complete run is reused only when it was made with ``wanted`` (its manifest's sections of those names);
    otherwise refused in one line naming the first settings that differ (it is never silently kept or replaced)."""
    from routestats.rundir.manifest import read_json

    try:  # a regular file, bounded in size and depth: a link to a 300 MB file was read whole and echoed
        have = read_json(run_dir / S.MANIFEST)
    except (OSError, ValueError, RoutestatsError) as exc:
        raise RoutestatsError(f"{run_dir}: its {S.MANIFEST} cannot be read ({str(exc)[:200]}); remove the folder to "
                              "retrain") from None

    def norm(x):  # tuples as lists; a value quoted in the message at most 80 characters
        return json.loads(json.dumps(x, sort_keys=True, default=str))

    def short(x):
        text = json.dumps(norm(x), sort_keys=True, ensure_ascii=False)
        return text if len(text) <= 80 else text[:77] + "..."
    diffs = []
    for section, want in wanted.items():
        got = have.get(section) if isinstance(have, dict) else None
        if isinstance(want, dict) and isinstance(got, dict):
            diffs += [f"{k} {short(want.get(k))} here vs {short(got.get(k))} there" for k in sorted(set(want) | set(got))
                      if norm(want.get(k)) != norm(got.get(k))]
        elif norm(want) != norm(got):
            diffs.append(f"{section} {short(want)} here vs {short(got)} there")
    if diffs:
        more = f" and {len(diffs) - 2} more" if len(diffs) > 2 else ""
        raise RoutestatsError(f"{run_dir}: a complete run made with other settings ({'; '.join(diffs[:2])}{more}); "
                              "choose another --out, or remove that folder to train it again")


def train_study(
    out: Path,
    *,
    data: DataSpec,
    preset: Preset,
    conditions: Sequence[Condition],
    seed: int,
    study: str = "saab",
    device: str = "auto",
    attention_impl: str = "explicit",
    keep_checkpoints: str = "last",
    progress=None,
    job: tuple[int, int] | None = None,
) -> list[Path]:
    """Train every condition at ``seed`` into ``out/<condition>`` and verify they are an exact pair set.

    A ``bias-off`` condition is not trained: after the others, the ``saab`` run's final weights are
    evaluated with the bias removed (:func:`runners.training.evaluate.evaluate_bias_off`) into ``out/saab-bias-off``.
    ``job`` = (runs before these, runs in the whole job) when this seed is part of a larger job (a sweep); the
    progress lines say "run k of n" and the job's ETA (:func:`runners.progress.job_reporter`).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    max_length = preset.max_length or data.max_length
    trained = [c for c in conditions if not c.bias_off]
    evaluated = [c for c in conditions if c.bias_off]
    if evaluated and not any(c.name == "saab" for c in trained) and not (out / "saab" / S.MANIFEST).is_file():
        raise RoutestatsError("the bias-off condition evaluates the saab run of the same seed; add saab to --conditions")
    prep = prepare(data, out, preset.vocab_size, max_length)
    paths = []
    before, total = job or (0, len(trained))
    for k, c in enumerate(trained, before + 1):
        paths.append(
            train_run(out / c.name, prep=prep, preset=preset, condition=c, seed=seed, study=study, device=device,
                      attention_impl=attention_impl, keep_checkpoints=keep_checkpoints,
                      progress=job_reporter(progress, k, total))
        )
    evaluated_paths = []
    for c in evaluated:
        target = out / c.name
        if not (target / S.MANIFEST).is_file():
            from runners.training.evaluate import evaluate_bias_off

            if progress is None:
                print(f"{c.name}: evaluating {out / 'saab'} with the bias removed", file=sys.stderr, flush=True)
            evaluate_bias_off(out / "saab", target, device=device)
        evaluated_paths.append(target)
    evidence = {}
    for p in paths:
        m = json.loads((p / S.MANIFEST).read_text())
        evidence[p.name] = m["pairing"]
    first = next(iter(evidence.values()))
    for name, ev in evidence.items():
        if ev != first:
            raise RoutestatsError(f"pairing evidence of {name} differs from the first condition: {ev} vs {first}")
    return paths + evaluated_paths
