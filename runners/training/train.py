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


def train_run(
    run_dir: Path,
    *,
    prep: Prepared,
    preset: Preset,
    condition: Condition,
    seed: int,
    study: str,
    device: str = "auto",
    attention_impl: str = "explicit",
    keep_checkpoints: str = "last",
    progress: Callable[[str, int, int], None] | None = None,
    stop_after: int | None = None,
) -> Path | None:
    """Train one condition into ``run_dir``; resume from its last checkpoint if one exists.

    ``stop_after`` ends the process-side loop after that step without finalising (tests use
    it to simulate a kill). Returns the run path, or None when stopped early.
    """
    tc = preset.train
    spec = prep.spec
    cfg = EncoderConfig(
        vocab_size=preset.vocab_size, field_vocab_size=spec.field_vocab_size, max_length=prep.max_length,
        num_labels=spec.num_labels, attention_impl=attention_impl, **preset.model, **condition.model_overrides(),
    )
    if (run_dir / S.MANIFEST).is_file():
        check_same_settings(run_dir, {"training": tc.to_dict(), "model": cfg.to_dict(), "seed": seed})
        return run_dir  # complete, with these settings: nothing to do
    dev = pick_device(device)
    seed_everything(seed)
    model = SAABEncoder(cfg)  # on CPU, before any other torch RNG use
    init_hash = state_hash(model)
    model.to(dev)
    per_step = tc.microbatch_size * tc.grad_accum
    order = data_order(len(prep.train), tc.max_steps * per_step, seed)
    order_hash = hashlib.sha256(order.numpy().astype("<i8").tobytes()).hexdigest()
    data_order_id = hashlib.sha256(f"{prep.dataset_id}|{order_hash}|mask-seed={seed}".encode()).hexdigest()
    mask_gen = torch.Generator(device=dev)
    mask_gen.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=tc.learning_rate, betas=tc.betas, weight_decay=tc.weight_decay)
    factors = {**condition.factors(), "depth": cfg.num_layers, "dataset": spec.name, "preset": preset.name}
    # unique across data sets and depths of one study tree
    from runners.training.presets import PRESETS

    depth_tag = "" if cfg.num_layers == PRESETS[preset.name].model["num_layers"] else f"-L{cfg.num_layers}"
    run_id = f"{study}-{spec.name}-{condition.name}{depth_tag}-seed{seed}"
    resume = _latest_checkpoint(run_dir)
    writer = RunWriter(run_dir, run_id=run_id, study=study, factors=factors, seed=seed, init_id=init_hash,
                       data_order_id=data_order_id, fields=spec.manifest_fields(), resume=resume is not None)
    cap = min(tc.eval_cap, prep.max_length)
    eval_df = _examples_frame(prep, tc, cap)
    writer.write_examples(eval_df)
    eval_ids = eval_df["example_id"].tolist()
    eval_records = [cut_example(prep.val[i], cap) for i in eval_ids]
    metrics_rows, grad_rows, first_batch = [], [], None
    start, elapsed0 = 0, 0.0
    if resume is not None:
        ck = load_checkpoint(resume)
        if ck["init_id"] != init_hash or ck["data_order_id"] != data_order_id:
            raise RoutestatsError(f"{resume}: checkpoint belongs to another init or data order; remove {run_dir}")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        torch.set_rng_state(ck["rng_cpu"])
        mask_gen.set_state(ck["rng_mask"])
        if dev.type == "cuda" and ck.get("rng_cuda") is not None:
            torch.cuda.set_rng_state(ck["rng_cuda"])
        start, elapsed0 = ck["step"], ck["elapsed"]
        metrics_rows, grad_rows, first_batch = ck["metrics"], ck["gradients"], ck["first_batch"]
        for step_done, forms in ck["dumped"].items():
            writer.adopt_attention(step_done, forms, tc.dump_dtype)
    dumped = {} if resume is None else dict(ck["dumped"])
    final = tc.max_steps
    t0 = time.perf_counter() - elapsed0
    for step in range(start + 1, final + 1):
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
            b = {k: v.to(dev) for k, v in collate([prep.train[i] for i in idx]).items()}
            masked, labels = mask_field_ids(b["field_ids"], b["attention_mask"], tc.mask_probability, spec.mask_id, mask_gen)
            if first_batch is None:
                h = hashlib.sha256()
                for t in (b["input_ids"], masked, labels):
                    h.update(t.cpu().numpy().astype("<i8").tobytes())
                first_batch = h.hexdigest()
            logits, _ = model(b["input_ids"], masked, b["attention_mask"])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
            (loss / tc.grad_accum).backward()
            losses.append(float(loss.detach()))
        if tc.log_gradients:
            for layer, norms in enumerate(qkv_grad_norms(model)):
                for comp, val in norms.items():
                    grad_rows.append({"step": step, "layer": layer, "component": comp, "norm": val})
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip))
        opt.step()
        dt = time.perf_counter() - tstep
        metrics_rows.append({"step": step, "phase": "train", "loss": float(np.mean(losses)), "accuracy": None,
                             "lr": lr, "grad_norm": grad_norm, "examples_per_sec": per_step / dt,
                             "elapsed_seconds": time.perf_counter() - t0})
        if step in tc.eval_steps or step == final:
            vl, va = evaluate(model, prep.val, spec, tc.mask_probability, mask_gen, tc.eval_batch_size, dev)
            metrics_rows.append({"step": step, "phase": "eval", "loss": vl, "accuracy": va, "lr": lr,
                                 "grad_norm": None, "examples_per_sec": None,
                                 "elapsed_seconds": time.perf_counter() - t0})
        if step in tc.checkpoint_steps:
            forms = list(tc.final_forms if step == final else tc.trajectory_forms)
            with writer.attention(step, dtype=tc.dump_dtype, forms=forms, value_norms=True) as sink:
                dump_attention(model, eval_records, sink, tc.eval_batch_size, dev, eval_ids)
            dumped[step] = forms
            ck = {
                "step": step, "model": model.state_dict(), "optimizer": opt.state_dict(),
                "rng_cpu": torch.get_rng_state(), "rng_mask": mask_gen.get_state(),
                "rng_cuda": torch.cuda.get_rng_state() if dev.type == "cuda" else None,
                "elapsed": time.perf_counter() - t0, "metrics": metrics_rows, "gradients": grad_rows,
                "first_batch": first_batch, "dumped": dumped, "init_id": init_hash, "data_order_id": data_order_id,
                "config": {"model": cfg.to_dict(), "training": tc.to_dict()},
            }
            with atomic_path(run_dir / S.checkpoint_file(step)) as tmp:
                torch.save(ck, tmp)
        if progress is not None:
            progress(run_id, step, final)
        if stop_after is not None and step >= stop_after:
            return None
    writer.write_metrics(pd.DataFrame(metrics_rows))
    if tc.log_gradients:
        writer.write_gradients(pd.DataFrame(grad_rows))
    ckpts = sorted((run_dir / S.CHECKPOINT_DIR).glob("step_*.pt"))
    keep = {"all": ckpts, "last": ckpts[-1:], "none": []}[keep_checkpoints]
    for c in ckpts:
        if c not in keep:
            c.unlink()
    for c in keep:
        writer.add_file(str(c.relative_to(run_dir)))
    return writer.finalize(
        model=cfg.to_dict(),
        training=tc.to_dict(),
        recipe=recipe_of(preset),
        dataset={"name": spec.name, "spec": spec.source, "format": spec.format, "files": spec.files(),
                 "tokenizer_sha256": prep.tokenizer_sha256, "train_records": len(prep.train),
                 "val_records": len(prep.val), "max_length": prep.max_length},
        evaluation={"examples": len(eval_ids), "primary": tc.eval_examples, "length_sample": tc.length_sample,
                    "sample_seed": tc.sample_seed, "cap": cap, "batch_size": tc.eval_batch_size,
                    "selection": "first N validation records + Algorithm R reservoir sample (sorted)",
                    "field_ids": "unmasked"},
        pairing={"init_state_sha256": init_hash, "data_order_sha256": order_hash, "first_batch_sha256": first_batch},
        device={"device": str(dev), "dtype": "float32",
                "tf32": bool(dev.type == "cuda" and torch.backends.cuda.matmul.allow_tf32),
                "name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
                "torch_threads": torch.get_num_threads()},
        timing={"train_seconds": time.perf_counter() - t0},
        software=software_versions(("torch", "tokenizers")),
        git_commit=git_commit(),
        condition=condition.name,
    )


def check_same_settings(run_dir: Path, wanted: dict) -> None:
    """A complete run is reused only when it was made with ``wanted`` (its manifest's sections of those names);
    otherwise refused in one line naming the first settings that differ (it is never silently kept or replaced)."""
    try:
        have = json.loads((run_dir / S.MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RoutestatsError(f"{run_dir}: its {S.MANIFEST} cannot be read ({exc}); remove the folder to retrain") from None
    norm = lambda x: json.loads(json.dumps(x, sort_keys=True, default=str))  # noqa: E731  (tuples as lists)
    diffs = []
    for section, want in wanted.items():
        got = have.get(section) if isinstance(have, dict) else None
        if isinstance(want, dict) and isinstance(got, dict):
            diffs += [f"{k} {norm(want.get(k))} here vs {norm(got.get(k))} there" for k in sorted(set(want) | set(got))
                      if norm(want.get(k)) != norm(got.get(k))]
        elif norm(want) != norm(got):
            diffs.append(f"{section} {norm(want)} here vs {norm(got)} there")
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
) -> list[Path]:
    """Train every condition at ``seed`` into ``out/<condition>`` and verify they are an exact pair set.

    A ``bias-off`` condition is not trained: after the others, the ``saab`` run's final weights are
    evaluated with the bias removed (:func:`runners.training.evaluate.evaluate_bias_off`) into ``out/saab-bias-off``.
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
    for c in trained:
        paths.append(
            train_run(out / c.name, prep=prep, preset=preset, condition=c, seed=seed, study=study, device=device,
                      attention_impl=attention_impl, keep_checkpoints=keep_checkpoints, progress=progress)
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
