"""Fielded records -> exactly what a model's tokenizer produces, with each position's field.

A record's fields are encoded *once, whole*, by the model's own tokenizer, the way its docs
run it: encoders take the first two fields as a sentence pair (``tokenizer(a, b)``: [CLS] a
[SEP] b [SEP] with ``token_type_ids`` for BERT, ``<s> a </s></s> b </s>`` for RoBERTa, ...);
decoders take the fields joined by a newline (``tokenizer(a + "\\n" + b)``: BOS where the
tokenizer adds one). Every tensor the tokenizer returns that the model takes
(``tokenizer.model_input_names``: ``input_ids``, ``token_type_ids``, ``attention_mask``) is
kept. Positions get the index of the field their characters come from (``sequence_ids`` for a
pair, character offsets for a joined text); special tokens and separators are unnamed (-1).

Truncation is a stated policy over the named positions of each field (special tokens and
separators are always kept, as the tokenizer's own truncation keeps them):

* ``only-last`` (default): the last field loses tokens from its end; when the fields before it
  would leave it no token, the record falls back to ``longest-first`` (counted);
* ``longest-first``: fields keep ``min(n_f, t)`` tokens for the largest level ``t`` that fits;
  a token left over goes to the longest field (the later one on a tie).

For a pair both equal the tokenizer's own ``truncation="only_second"`` / ``"longest_first"``
(tested on the packaged BERT tokenizer), so the model sees what its tokenizer gives it.

>>> budgets([3, 10], room=8, policy="only-last")
((3, 5), False)
>>> budgets([9, 10], room=8, policy="only-last")   # the first field alone fills the cap
((4, 4), True)
>>> budgets([5, 10], room=9, policy="longest-first")
((4, 5), False)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from routestats.errors import RoutestatsError

__all__ = ["POLICIES", "SPECIAL_POLICIES", "Encoded", "budgets", "encode_records", "encode_record"]

POLICIES = ("only-last", "longest-first")
SPECIAL_POLICIES = ("unnamed", "attach")
SEPARATOR = "\n"


@dataclass(frozen=True)
class Encoded:
    """One record as the model sees it (after truncation) and the fields of its positions."""

    inputs: dict[str, list[int]]
    fields: list[int]
    words: list[int]
    tokens: list[str]
    prepared: int
    kept: tuple[int, ...]
    cut: tuple[int, ...]
    fallback: bool

    def __len__(self) -> int:
        return len(self.fields)


def budgets(lengths: Sequence[int], room: int, policy: str = "only-last") -> tuple[tuple[int, ...], bool]:
    """Tokens each field keeps when the fields' named tokens must fit ``room``, and whether
    ``only-last`` fell back to ``longest-first`` (see the module docstring)."""
    if policy not in POLICIES:
        raise RoutestatsError(f"--truncation must be one of {', '.join(POLICIES)}, got {policy!r}")
    n = [int(x) for x in lengths]
    if sum(n) <= room:
        return tuple(n), False
    if policy == "only-last":
        last = room - sum(n[:-1])
        if last >= 1:
            return (*n[:-1], last), False
    t = 0
    while sum(min(x, t + 1) for x in n) <= room:
        t += 1
    keep = [min(x, t) for x in n]
    for k in sorted((k for k in range(len(n)) if n[k] > t), key=lambda k: (-n[k], -k))[:room - sum(keep)]:
        keep[k] += 1
    return tuple(keep), policy == "only-last"


def _field_index(full, i: int, texts: Sequence[str], causal: bool) -> tuple[list[int], list]:
    """Field index per position (-1 unnamed) and raw word keys of item ``i`` of a whole encoding."""
    if not causal:
        seq = full.sequence_ids(i)
        words = [None if s is None or w is None else int(s) * 1_000_000 + int(w)
                 for s, w in zip(seq, full.word_ids(i))]
        return [-1 if s is None else int(s) for s in seq], words
    spans, pos = [], 0
    for t in texts:
        spans.append((pos, pos + len(t)))
        pos += len(t) + len(SEPARATOR)
    special = full["special_tokens_mask"][i]
    fidx = []
    for (a, b), sp in zip(full["offset_mapping"][i], special):
        fidx.append(-1 if sp else next((k for k, (s, e) in enumerate(spans) if s <= a < e and b > a), -1))
    return fidx, list(full.word_ids(i))


def _dense_words(words: list) -> list[int]:
    """Word groups numbered 0, 1, ... in order of first appearance; every unnamed position its own group."""
    dense: dict = {}
    return [dense.setdefault(("position", i) if w is None else ("word", w), len(dense)) for i, w in enumerate(words)]


def _whole(tok, batch: Sequence[Sequence[str]], causal: bool):
    """The tokenizer's own encoding of whole records (no truncation), one call for the batch."""
    if causal:
        return tok([SEPARATOR.join(t) for t in batch], return_offsets_mapping=True, return_special_tokens_mask=True,
                   add_special_tokens=True, verbose=False)
    return tok([t[0] for t in batch], [t[1] for t in batch], add_special_tokens=True, verbose=False)


def encode_records(tok, texts: Sequence[Sequence[str]], *, causal: bool, cap: int, input_names: Sequence[str],
                   special: str = "unnamed", truncation: str = "only-last", labels: Sequence[str] | None = None,
                   chunk: int = 256) -> list[Encoded]:
    """Encode records' field texts as the model's tokenizer does (``chunk`` records per tokenizer
    call) and cut each to ``cap`` by the truncation policy; ``labels`` name records in errors."""
    if special not in SPECIAL_POLICIES:
        raise RoutestatsError(f"--special-tokens must be unnamed or attach, got {special!r}")
    if truncation not in POLICIES:
        raise RoutestatsError(f"--truncation must be one of {', '.join(POLICIES)}, got {truncation!r}")
    labels = list(labels) if labels is not None else [str(i) for i in range(len(texts))]
    for t, lab in zip(texts, labels):
        if not causal and len(t) != 2:
            raise RoutestatsError(f"an encoder takes two fields as a sentence pair; record {lab!r} gives {len(t)}")
    out: list[Encoded] = []
    for s in range(0, len(texts), chunk):
        batch = texts[s:s + chunk]
        try:
            full = _whole(tok, batch, causal)
        except Exception:  # a tokenizer's own error, whatever its type: find and name the record
            for t, lab in zip(batch, labels[s:s + chunk]):
                try:
                    _whole(tok, [t], causal)
                except Exception as exc:
                    raise RoutestatsError(f"record {lab!r}: the tokenizer failed "
                                          f"({str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__})") from None
            raise
        for i, (t, lab) in enumerate(zip(batch, labels[s:s + chunk])):
            out.append(_cut(tok, full, i, t, causal=causal, cap=cap, input_names=input_names, special=special,
                            truncation=truncation, label=lab))
    return out


def encode_record(tok, texts: Sequence[str], *, causal: bool, cap: int, input_names: Sequence[str],
                  special: str = "unnamed", truncation: str = "only-last", label: str = "?") -> Encoded:
    """:func:`encode_records` of one record."""
    return encode_records(tok, [texts], causal=causal, cap=cap, input_names=input_names, special=special,
                          truncation=truncation, labels=[label])[0]


def _cut(tok, full, i: int, texts: Sequence[str], *, causal: bool, cap: int, input_names: Sequence[str],
         special: str, truncation: str, label: str) -> Encoded:
    fidx, words = _field_index(full, i, texts, causal)
    n_fields = len(texts)
    positions = [[j for j, f in enumerate(fidx) if f == k] for k in range(n_fields)]
    unnamed = sum(1 for f in fidx if f < 0)
    room = cap - unnamed
    if room < n_fields:
        raise RoutestatsError(f"record {label!r}: its {unnamed} special/separator tokens leave no room for "
                              f"{n_fields} fields within --cap {cap}")
    kept, fallback = budgets([len(p) for p in positions], room, truncation)
    keep = sorted([j for j, f in enumerate(fidx) if f < 0]
                  + [j for k, p in enumerate(positions) for j in p[:kept[k]]])
    names = [n for n in input_names if n in full]
    if "input_ids" not in names:
        raise RoutestatsError(f"the tokenizer returns no input_ids (it returns {', '.join(full.keys())})")
    inputs = {n: [int(full[n][i][j]) for j in keep] for n in names}
    fk = [fidx[j] for j in keep]
    if special == "attach":  # a leading special to the first field, any other to the field before it
        first = next((f for f in fk if f >= 0), 0)
        for j, f in enumerate(fk):
            if f < 0:
                fk[j] = fk[j - 1] if j > 0 else first
    ids = inputs["input_ids"]
    return Encoded(inputs=inputs, fields=fk, words=_dense_words([words[j] for j in keep]),
                   tokens=[str(t) for t in tok.convert_ids_to_tokens(ids)], prepared=len(fidx),
                   kept=kept, cut=tuple(len(p) - k for p, k in zip(positions, kept)), fallback=fallback)
