"""MoFA: GPT-style decoders whose heads mix softmax and sigmoid attention (METHODS Part II A.1-A.3).

Heads ``0 .. H_sfx-1`` are softmax heads, the rest sigmoid heads (contiguous tail, the same in
every layer, no extra parameters). Sigmoid weights are sigma(s_ij - log t_i) over the causal
window (``sigmoid_bias="neg_log_t"``, t_i = i + 1), or a constant -log(n_ctx) (``"neg_log_n"``),
0 (``"none"``) or a given float. Tokenisation is byte-level (UTF-8 bytes, vocabulary 256), so
it needs no training and is identical for every run.

Because the partition adds no parameters, every ratio built after ``seed_everything(seed)``
starts from bit-identical tensors, and the data order depends on the seed only.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F

from routestats.rundir import schema as S
from routestats.rundir.write import RunWriter, software_versions

from runners.training.model import state_hash
from runners.training.dumps import pick_device, seed_everything
from runners.training.msm import lr_at

TEXT_FIELDS = {"named": {"3": "text"}, "mask_id": 4, "vocab_size": 5}


@dataclass
class GPTConfig:
    vocab_size: int = 256
    n_ctx: int = 64
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    n_sigmoid: int = 0
    sigmoid_bias: str | float = "neg_log_t"
    dropout: float = 0.0

    def head_types(self) -> list[str]:
        return ["softmax"] * (self.n_head - self.n_sigmoid) + ["sigmoid"] * self.n_sigmoid

    def validate(self) -> "GPTConfig":
        if self.d_model % self.n_head or not 0 <= self.n_sigmoid <= self.n_head:
            raise ValueError("d_model must divide by n_head and 0 <= n_sigmoid <= n_head")
        return self


def sigmoid_bias_vector(cfg: GPTConfig, T: int, dtype=torch.float32, device=None) -> torch.Tensor:
    """Per-query-position additive bias of the sigmoid heads (length T)."""
    b = cfg.sigmoid_bias
    if b == "neg_log_t":
        return -torch.log(torch.arange(1, T + 1, device=device, dtype=dtype))
    if b == "neg_log_n":
        return torch.full((T,), -math.log(cfg.n_ctx), device=device, dtype=dtype)
    return torch.full((T,), 0.0 if b == "none" else float(b), device=device, dtype=dtype)


class MoFAAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, need_probs: bool = False):
        B, T, D = x.shape
        H = self.cfg.n_head
        q, k, v = self.c_attn(x).split(D, dim=2)
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D // H)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        n_sfx = H - self.cfg.n_sigmoid
        a = torch.empty_like(s)
        if n_sfx:
            a[:, :n_sfx] = torch.softmax(s[:, :n_sfx].masked_fill(~causal, float("-inf")), dim=-1)
        if self.cfg.n_sigmoid:
            bias = sigmoid_bias_vector(self.cfg, T, s.dtype, x.device)[:, None]
            a[:, n_sfx:] = torch.sigmoid(s[:, n_sfx:] + bias).masked_fill(~causal, 0.0)
        y = (self.drop(a) @ v).transpose(1, 2).reshape(B, T, D)
        return self.c_proj(y), (a if need_probs else None)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.attn = MoFAAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(), nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x, need_probs=False):
        a, p = self.attn(self.ln_1(x), need_probs)
        x = x + a
        return x + self.mlp(self.ln_2(x)), p


class MoFAGPT(nn.Module):
    """Pre-LN GPT with tied input/output embeddings and the MoFA head partition."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg.validate()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.n_ctx, cfg.d_model)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.d_model)

    def forward(self, idx, need_probs: bool = False):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))[None]
        probs = []
        for blk in self.blocks:
            x, p = blk(x, need_probs)
            probs.append(p)
        return self.ln_f(x) @ self.wte.weight.T, probs


SEPARATORS = {"none": "", "newline": "\n"}


def encode(texts: Sequence[str], separator: str = "none") -> np.ndarray:
    """Byte-level token ids of the concatenated documents (``separator``: none or newline)."""
    return np.frombuffer(SEPARATORS[separator].join(texts).encode("utf-8"), dtype=np.uint8).astype(np.int64)


def blocks_of(ids: np.ndarray, n_ctx: int) -> np.ndarray:
    """Chunk token ids into blocks of ``n_ctx`` tokens; the remainder is dropped."""
    n = len(ids) // n_ctx
    return ids[: n * n_ctx].reshape(n, n_ctx)


def domain_blocks(docs: Sequence[str], n_ctx: int, concat_scope: str = "global", separator: str = "none") -> np.ndarray:
    """Evaluation blocks of a domain (METHODS A.3): ``concat_scope`` ``global`` concatenates all
    documents before chunking; ``per_batch:N`` concatenates and drops the remainder per group of
    N documents, as the Hugging Face group-texts recipe does per map batch."""
    if concat_scope == "global":
        return blocks_of(encode(docs, separator), n_ctx)
    if concat_scope.startswith("per_batch:"):
        size = int(concat_scope.split(":", 1)[1])
        parts = [blocks_of(encode(docs[i:i + size], separator), n_ctx) for i in range(0, len(docs), size)]
        parts = [p for p in parts if len(p)]
        return np.concatenate(parts) if parts else np.zeros((0, n_ctx), dtype=np.int64)
    raise ValueError(f"concat_scope must be 'global' or 'per_batch:N', got {concat_scope!r}")


@dataclass(frozen=True)
class MoFATrain:
    steps: int = 300
    batch_size: int = 16
    lr: float = 1e-3
    warmup: int = 30
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    betas: tuple = (0.9, 0.95)
    grad_clip: float = 1.0
    entropy_blocks: int = 4  # per domain, for the head-entropy dumps
    concat_scope: str = "global"  # or "per_batch:1000"
    separator: str = "none"  # or "newline" between documents


@torch.inference_mode()
def score_domain(model: MoFAGPT, blocks: np.ndarray, device, batch_size: int = 32) -> tuple[np.ndarray, int]:
    """Summed next-token NLL per block (first token unscored) and tokens scored per block."""
    model.eval()
    out = []
    for s in range(0, len(blocks), batch_size):
        x = torch.as_tensor(blocks[s : s + batch_size], device=device)
        logits, _ = model(x)
        nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="none")
        out.append(nll.view(x.shape[0], -1).sum(1).double().cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0), blocks.shape[1] - 1


def train_mofa_run(out: Path, *, cfg: GPTConfig, train_text: Sequence[str], domains: dict[str, Sequence[str]],
                   seed: int, tc: MoFATrain = MoFATrain(), device: str = "cpu", study: str = "mofa",
                   progress=None) -> Path:
    """Train one ratio at one seed, then score every domain and dump head attention reductions.

    A complete run already at ``out`` is kept when it was made with these settings and refused in one line naming
    what differs otherwise (:func:`runners.training.train.check_same_settings`): never silently kept or replaced.
    """
    out = Path(out)
    inputs = domain_identity(domains, train_text)
    if (out / S.MANIFEST).is_file():
        from runners.training.train import check_same_settings

        # the domain texts by content: a domain file edited under the same name makes other scores
        check_same_settings(out, {"model": asdict(cfg), "training": {**asdict(tc), "betas": list(tc.betas)},
                                  "seed": seed, "inputs": inputs})
        return out
    dev = pick_device(device)
    seed_everything(seed)
    model = MoFAGPT(cfg)  # identical tensors for every ratio: the partition has no parameters
    init = state_hash(model)
    model.to(dev)
    data = blocks_of(encode(train_text, tc.separator), cfg.n_ctx)
    g = torch.Generator(device="cpu").manual_seed(seed)  # data order depends on the seed only
    order = torch.randint(0, len(data), (tc.steps, tc.batch_size), generator=g).numpy()
    order_id = hashlib.sha256(order.astype("<i8").tobytes() + hashlib.sha256(data.tobytes()).digest()).hexdigest()
    name = f"{out.parent.name}/{out.name}"  # seed<S>/ratio-<softmax>-<sigmoid>
    metrics = _train_steps(model, data, order, tc, dev, lambda step: progress and progress(name, step, tc.steps))
    ratio = f"{cfg.n_head - cfg.n_sigmoid}:{cfg.n_sigmoid}"
    w = RunWriter(out, run_id=f"{study}-{ratio.replace(':', '-')}-seed{seed}", study=study,
                  factors={"ratio": ratio, "n_sigmoid": cfg.n_sigmoid, "sigmoid_bias": str(cfg.sigmoid_bias)},
                  seed=seed, init_id=init, data_order_id=order_id, fields=TEXT_FIELDS, overwrite=True)
    scored = getattr(progress, "note", progress)  # a phase of its own: not in the job's training ETA
    scores, ex_rows, ent_blocks = _score_domains(
        model, domains, cfg, tc, dev, lambda done: scored and scored(f"{name} domains scored", done, len(domains)))
    w.write_examples(pd.DataFrame(ex_rows))
    model.eval()
    with w.attention(tc.steps, dtype="float32", forms=(S.FORM_REDUCTIONS,)) as sink, torch.inference_mode():
        for eid, ids in ent_blocks:
            _, probs = model(torch.as_tensor(ids[None], device=dev), need_probs=True)
            sink.add(eid, torch.stack([p[0] for p in probs]).float().cpu().numpy(), head_types=cfg.head_types())
    w.write_lm_scores(pd.concat(scores, ignore_index=True))
    w.write_metrics(pd.DataFrame(metrics))
    from routestats.rundir.atomic import atomic_path

    ck = S.checkpoint_file(tc.steps)
    with atomic_path(out / ck) as tmp:  # final weights, for operator analyses (METHODS Part II B)
        torch.save({"step": tc.steps, "model": model.state_dict(), "config": asdict(cfg)}, tmp)
    w.add_file(ck)
    return w.finalize(model=asdict(cfg), training={**asdict(tc), "betas": list(tc.betas)},
                      dataset={"train_tokens": int(data.size), "domains": {d: len(v) for d, v in domains.items()},
                               "tokenizer": "utf-8 bytes"},
                      software=software_versions(("torch",)), inputs=inputs)


def domain_identity(domains: dict, train_text) -> dict:
    """SHA-256 of each domain's documents and of the training text, as read (the content a run's scores rest on,
    whatever files or names they came from): what a rerun must match to keep a complete run."""
    digest = lambda docs: hashlib.sha256(json.dumps(list(docs), ensure_ascii=False).encode()).hexdigest()  # noqa: E731
    return {"domains": {d: digest(v) for d, v in sorted(domains.items())}, "train_text": digest(train_text)}


def _train_steps(model, data, order, tc: MoFATrain, dev, on_step) -> list[dict]:
    """The training loop (AdamW, warm-up + cosine, clipping); one metrics row per step."""
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, betas=tc.betas, weight_decay=tc.weight_decay)
    metrics, t0 = [], time.perf_counter()
    for step in range(1, tc.steps + 1):
        model.train()
        lr = lr_at(step, tc.lr, "linear_warmup_cosine", tc.warmup, tc.min_lr_ratio, tc.steps)
        for grp in opt.param_groups:
            grp["lr"] = lr
        x = torch.as_tensor(data[order[step - 1]], device=dev)
        logits, _ = model(x)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = float(torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip))
        opt.step()
        metrics.append({"step": step, "phase": "train", "loss": float(loss.detach()), "lr": lr, "grad_norm": gn,
                        "elapsed_seconds": time.perf_counter() - t0})
        on_step(step)
    return metrics


def _score_domains(model, domains: dict, cfg: GPTConfig, tc: MoFATrain, dev, on_domain=lambda done: None):
    """(lm score frames, example rows, (example id, block) of the entropy dumps) over every domain;
    ``on_domain(k)`` hears of each domain scored (the scoring takes as long as a short training)."""
    scores, ex_rows, ent_blocks = [], [], []
    on_domain(0)
    for k, (dom, docs) in enumerate(domains.items(), 1):
        blk = domain_blocks(docs, cfg.n_ctx, tc.concat_scope, tc.separator)
        nll, n_tok = score_domain(model, blk, dev)
        scores.append(pd.DataFrame({"domain": dom, "example_id": np.arange(len(blk)), "sum_nll": nll, "n_tokens": n_tok}))
        for b in range(min(tc.entropy_blocks, len(blk))):
            eid = len(ex_rows)
            ex_rows.append({"example_id": eid, "split": dom, "source_index": b, "label": dom,
                            "prepared_length": cfg.n_ctx, "cap": cfg.n_ctx, "field_ids": [3] * cfg.n_ctx})
            ent_blocks.append((eid, blk[b]))
        on_domain(k)
    return scores, ex_rows, ent_blocks
