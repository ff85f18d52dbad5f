"""Initialisation probes (METHODS 3.8): model-side quantities at initialisation, per seed.

For each seed the baseline and SAAB models are built exactly as training builds them; their
state hashes must be equal (the SAAB pathway has no parameters). Written under ``OUT``:

* ``state_hashes.parquet`` -- seed, variant, sha256;
* ``init_summaries.parquet`` -- per seed the five baseline initial-state summaries;
* ``layer_norms.parquet`` -- per seed and layer the joint Q/K/V, output-projection and FFN weight norms;
* ``initial_loss.parquet`` -- seed, variant, mask_seed, block, loss: dropout-free MSM loss on
  fixed probe blocks, masked with a fresh CPU generator per (mask seed, block);
* ``one_update.parquet`` -- seed, variant, gradient and AdamW update ratios (last / penultimate
  layer) after one update on block 0 under the first mask seed;
* ``probe.json`` -- settings and provenance.

Correlations with the displacement score live in :mod:`routestats.initprobe`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd
import pyarrow as pa
import torch
import torch.nn.functional as F

from routestats.rundir.atomic import write_json_atomic, write_table_atomic
from routestats.errors import RoutestatsError
from routestats.rundir.write import software_versions

from runners.training.data import DataSpec
from runners.training.model import EncoderConfig, SAABEncoder, state_hash
from runners.training.msm import collate, mask_field_ids
from runners.training.presets import Preset
from runners.training.dumps import cut_example, seed_everything
from runners.training.train import prepare


def _joint(*ws) -> float:
    return math.sqrt(sum(float(w.detach().double().pow(2).sum()) for w in ws))


def _layer_norms(model: SAABEncoder) -> list[dict]:
    out = []
    for i, layer in enumerate(model.layers):
        a = layer.attn
        out.append({"layer": i, "qkv_norm": _joint(a.q.weight, a.k.weight, a.v.weight), "out_proj_norm": _joint(a.o.weight),
                    "ffn_norm": _joint(layer.ff1.weight, layer.ff2.weight)})
    return out


def _initial_pair(seed: int, data: DataSpec, preset: Preset, max_length: int, hashes: list, say) -> dict:
    """The baseline and SAAB models as initialised from ``seed`` (their state hashes appended to ``hashes``);
    refused in one line when the two initial states differ."""
    say(f"seed {seed}: initial states", 0, 2)
    models = {}
    for variant in ("baseline", "saab"):
        cfg = EncoderConfig(vocab_size=preset.vocab_size, field_vocab_size=data.field_vocab_size, max_length=max_length,
                            num_labels=data.num_labels, variant=variant, saab_field_weight=1.0, **preset.model)
        seed_everything(seed)
        models[variant] = SAABEncoder(cfg)
        hashes.append({"seed": seed, "variant": variant, "sha256": state_hash(models[variant])})
        say(f"seed {seed}: initial states", len(models), 2)
    if hashes[-1]["sha256"] != hashes[-2]["sha256"]:
        raise RoutestatsError(f"seed {seed}: baseline and SAAB initial states differ")
    return models


def run_init_probe(out: Path, *, data: DataSpec, preset: Preset, seeds: Sequence[int],
                   mask_seeds: Sequence[int] = (101, 202, 303, 404, 505), examples: int = 256, blocks: int = 4,
                   one_update: bool = True, lr_factor: float = 0.1,
                   progress: Callable[[str, int, int], None] | None = None) -> dict:
    """Compute every probe quantity; returns the frames written (by file stem).

    ``progress(task, done, total)`` (:func:`runners.progress.progress_bars`) hears of each phase as it starts
    and of every step of it: the data, and per seed the initial states, each forward of the initial losses
    and each one-update probe."""
    out = Path(out)
    if examples % blocks:
        raise RoutestatsError(f"{examples} probe examples do not split into {blocks} equal blocks")
    say = progress or (lambda task, done, total: None)
    max_length = preset.max_length or data.max_length
    say("data: tokenizer and encoding", 0, 1)
    prep = prepare(data, out, preset.vocab_size, max_length)
    say("data: tokenizer and encoding", 1, 1)
    if len(prep.val) < examples:
        raise RoutestatsError(f"validation split has {len(prep.val)} records, fewer than {examples} probe examples")
    per = examples // blocks
    cap = min(preset.train.eval_cap, max_length)
    block_batches = [collate([cut_example(e, cap) for e in prep.val[b * per:(b + 1) * per]]) for b in range(blocks)]
    masked = {}
    for m in mask_seeds:  # the same masked batches for every seed and both variants
        for b, batch in enumerate(block_batches):
            g = torch.Generator(device="cpu").manual_seed(m)
            masked[m, b] = mask_field_ids(batch["field_ids"], batch["attention_mask"], preset.train.mask_probability,
                                          data.mask_id, g)
    hashes, summaries, norms, losses, updates = [], [], [], [], []
    for s in seeds:
        models = _initial_pair(s, data, preset, max_length, hashes, say)
        ln = _layer_norms(models["baseline"])
        summaries.append(_init_summary(s, models["baseline"], data, ln))
        norms += [{"seed": s, **r} for r in ln]
        task, total = f"seed {s}: initial losses", len(models) * len(masked)
        say(task, 0, total)
        for k, (variant, model) in enumerate(models.items()):
            step = lambda i, k=k: say(task, k * len(masked) + i, total)  # noqa: E731
            losses += [{"seed": s, "variant": variant, **r}
                       for r in _initial_losses(model, masked, block_batches, step)]
        if one_update:
            say(f"seed {s}: one-update probe", 0, 2)
            for k, v in enumerate(("baseline", "saab")):
                updates.append({"seed": s, "variant": v, **_one_update(s, models[v].cfg, preset, lr_factor,
                                                                        masked[mask_seeds[0], 0], block_batches[0])})
                say(f"seed {s}: one-update probe", k + 1, 2)
    frames = {"state_hashes": pd.DataFrame(hashes), "init_summaries": pd.DataFrame(summaries),
              "layer_norms": pd.DataFrame(norms), "initial_loss": pd.DataFrame(losses)}
    if one_update:
        frames["one_update"] = pd.DataFrame(updates)
    for name, df in frames.items():
        write_table_atomic(out / f"{name}.parquet", pa.Table.from_pandas(df, preserve_index=False))
    write_json_atomic(out / "probe.json", {
        "seeds": list(seeds), "mask_seeds": list(mask_seeds), "examples": examples, "blocks": blocks,
        "block_size": per, "cap": cap, "preset": preset.name, "model": preset.model, "data": data.source or data.name,
        "one_update": one_update, "one_update_lr": preset.train.learning_rate * lr_factor,
        "tokenizer_sha256": prep.tokenizer_sha256, "software": software_versions(("torch", "tokenizers")),
    })
    return frames


def _init_summary(s: int, base, data: DataSpec, ln: list) -> dict:
    """The five initial-state summaries of the baseline model of seed ``s`` (METHODS 3.8 step 2)."""
    E = base.field.weight.detach().double()
    ids = data.field_ids
    title, content = ids.get("title", min(ids.values()) + 1), ids.get("content", min(ids.values()))
    last, pen = ln[-1], ln[-2]
    return {"seed": s, "field_embedding_distance": float((E[title] - E[content]).norm()),
            "mask_embedding_offset": float((E[data.mask_id] - (E[title] + E[content]) / 2).norm()),
            "qkv_norm_ratio": last["qkv_norm"] / pen["qkv_norm"],
            "out_proj_norm_ratio": last["out_proj_norm"] / pen["out_proj_norm"],
            "ffn_norm_ratio": last["ffn_norm"] / pen["ffn_norm"]}


def _initial_losses(model, masked: dict, block_batches: list, step=None) -> list[dict]:
    """Dropout-free MSM loss of every (mask seed, block); ``step(i)`` after the i-th."""
    model.eval()
    out = []
    with torch.inference_mode():
        for (m, b), (mids, labels) in masked.items():
            batch = block_batches[b]
            logits, _ = model(batch["input_ids"], mids, batch["attention_mask"])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
            out.append({"mask_seed": m, "block": b, "loss": float(loss)})
            if step is not None:
                step(len(out))
    return out


def _one_update(s: int, cfg, preset: Preset, lr_factor: float, masked_batch, batch) -> dict:
    """Gradient and AdamW-update ratios (last / penultimate layer) of one training step from the initial state."""
    seed_everything(s)
    model = SAABEncoder(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=preset.train.learning_rate * lr_factor,
                            weight_decay=preset.train.weight_decay, betas=preset.train.betas)
    before = [[getattr(layer.attn, c).weight.detach().clone() for c in "qkv"] for layer in model.layers]
    mids, labels = masked_batch
    logits, _ = model(batch["input_ids"], mids, batch["attention_mask"])
    F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100).backward()
    grads = [_joint(*(getattr(layer.attn, c).weight.grad for c in "qkv")) for layer in model.layers]
    torch.nn.utils.clip_grad_norm_(model.parameters(), preset.train.grad_clip)
    opt.step()
    upd = [_joint(*(getattr(layer.attn, c).weight - w0 for c, w0 in zip("qkv", before[i])))
           for i, layer in enumerate(model.layers)]
    return {"grad_ratio": grads[-1] / grads[-2], "update_ratio": upd[-1] / upd[-2]}
