"""Masked structure modelling (METHODS 4.3-4.4, 5): tokenisation, masking, schedule, batches."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from runners.corpora import Record

SPECIAL_TOKENS = ("<PAD>", "<UNK>", "[FIELD_START]")
PAD_ID, FIELD_START_ID = 0, 2  # <UNK> is id 1: the tokenizer maps unknown pieces there itself


# ------------------------------------------------------------------ tokenizer
def train_tokenizer(records: Sequence[Record], vocab_size: int):
    """BPE with the reference settings: Whitespace pre-tokenizer, no normaliser, min frequency 1,
    special tokens <PAD>, <UNK>, [FIELD_START] (ids 0, 1, 2); trained on the field texts in order."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<UNK>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=list(SPECIAL_TOKENS),
                                  show_progress=False)
    texts = [text for r in records for _, text in r.fields]
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok


def load_tokenizer(path: str | Path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


@dataclass(frozen=True)
class Encoded:
    """One prepared record: ids, field ids, piece strings and word groups (before any cap)."""

    input_ids: list[int]
    field_ids: list[int]
    tokens: list[str]
    word_ids: list[int]
    label: str


_WORD = re.compile(r"\S+")


def encode_record(tok, record: Record, field_ids: dict[str, int], max_length: int) -> Encoded:
    """Concatenate per field one [FIELD_START] (carrying the field id) and the field's pieces.

    Word groups: the field-start token is its own group; pieces map to the whitespace-delimited
    word of the field text containing their first character (tokenizer offsets), so the same
    word in two fields forms two groups. The concatenation is cut to ``max_length``.
    """
    ids, fids, toks, words = [], [], [], []
    group = 0
    for name, text in record.fields:
        fid = field_ids[name]
        ids.append(FIELD_START_ID)
        fids.append(fid)
        toks.append("[FIELD_START]")
        words.append(group)
        group += 1
        spans = [m.span() for m in _WORD.finditer(text)]
        enc = tok.encode(text, add_special_tokens=False)
        w = 0
        first_group = group
        for piece_id, piece, (start, _end) in zip(enc.ids, enc.tokens, enc.offsets):
            while w + 1 < len(spans) and start >= spans[w + 1][0]:
                w += 1
            ids.append(piece_id)
            fids.append(fid)
            toks.append(piece)
            words.append(first_group + w)
        group = first_group + len(spans)
    n = min(len(ids), max_length)
    return Encoded(ids[:n], fids[:n], toks[:n], words[:n], record.label), len(ids)


# ------------------------------------------------------------------ masking
def mask_field_ids(field_ids: torch.Tensor, attention_mask: torch.Tensor, probability: float, mask_id: int,
                   generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """MSM masking per micro-batch and per field (METHODS 4.3).

    For each field id present at attended positions, ascending: positions in row-major order,
    k = min(n, max(1, round(p * n))) with Python (banker's) rounding, chosen by ``randperm``
    from ``generator``. Returns (masked ids, labels with -100 except at chosen positions).
    """
    eligible = attention_mask.bool()
    labels = torch.full_like(field_ids, -100)
    masked = field_ids.clone()
    flat_ids = field_ids[eligible]
    flat_pos = torch.nonzero(eligible, as_tuple=False)  # row-major (example, position)
    device = generator.device if generator is not None else field_ids.device
    for f in sorted(set(flat_ids.tolist())):
        pos = flat_pos[flat_ids == f]
        n = pos.shape[0]
        k = min(n, max(1, round(probability * n)))
        perm = torch.randperm(n, generator=generator, device=device).to(pos.device)
        chosen = pos[perm[:k]]
        labels[chosen[:, 0], chosen[:, 1]] = f
        masked[chosen[:, 0], chosen[:, 1]] = mask_id
    if not (labels != -100).any():
        raise ValueError("MSM masking selected no position (empty batch)")
    return masked, labels


# ------------------------------------------------------------------ schedule
def lr_at(step: int, base: float, schedule: str, warmup: int, min_ratio: float, max_steps: int) -> float:
    """Learning rate at 1-based optimizer ``step`` (METHODS 4.4).

    >>> [round(lr_at(s, 1e-4, "linear_warmup_cosine", 50, 0.1, 500), 10) for s in (1, 50, 51, 500)]
    [1e-05, 9.82e-05, 0.0001, 1.00011e-05]
    """
    if schedule == "constant":
        return base
    if schedule != "linear_warmup_cosine":
        raise ValueError(f"unknown schedule {schedule!r}")
    t = step - 1
    if t < warmup:
        return base * (min_ratio + (1 - min_ratio) * t / warmup)
    progress = min(1.0, max(0.0, (t - warmup) / max(max_steps - warmup, 1)))
    return base * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


# ------------------------------------------------------------------ batches
def collate(encoded: Sequence[Encoded], pad_id: int = PAD_ID) -> dict[str, torch.Tensor]:
    """Pad a list of records to the longest one (ids 0, field 0, attention mask 0)."""
    S = max(len(e.input_ids) for e in encoded)
    B = len(encoded)
    ids = torch.full((B, S), pad_id, dtype=torch.long)
    fids = torch.zeros((B, S), dtype=torch.long)
    mask = torch.zeros((B, S), dtype=torch.long)
    for i, e in enumerate(encoded):
        n = len(e.input_ids)
        ids[i, :n] = torch.tensor(e.input_ids)
        fids[i, :n] = torch.tensor(e.field_ids)
        mask[i, :n] = 1
    return {"input_ids": ids, "field_ids": fids, "attention_mask": mask}
