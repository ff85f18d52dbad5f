"""The word-level attention map of a pair report (METHODS 2.9): the example, chosen before any model
output is seen, and its attention grouped into words for both runs, every layer and head."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from routestats.errors import RoutestatsError, RunFormatError
from routestats.metrics.examples import select_examples
from routestats.metrics.routing import word_attention
from routestats.rundir import schema as S
from routestats.rundir.collection import RunPair
from routestats.rundir.read import Run
from routestats.settings import AnalysisSettings

__all__ = ["WordMap", "select_token_map_example", "choose_word_example", "word_window", "word_label", "word_map"]


@dataclass(frozen=True)
class WordMap:
    """Word-level attention of one example: labels and (role, layer) -> matrix."""

    example_id: int
    words: list[str]
    word_fields: list[str]
    layers: tuple[int, ...]
    matrices: dict = field(repr=False)  # (role, layer) -> ndarray (U, U); role in baseline/variant/difference
    selection_rule: str = ""
    head_matrices: dict = field(default_factory=dict, repr=False)  # (role, layer, head) -> (U, U), every layer

    def explorer_frames(self) -> dict[str, pd.DataFrame]:
        """The interactive explorer's data: ``words`` (index, word, field) and ``attention`` (role,
        layer, head, query_index, key_index, weight) for baseline and variant, every layer and head."""
        words = pd.DataFrame({"index": range(len(self.words)), "word": self.words, "field": self.word_fields})
        keys = sorted(self.head_matrices)
        U = len(self.words)
        q, k = np.meshgrid(np.arange(U), np.arange(U), indexing="ij")
        att = pd.DataFrame({
            "role": np.repeat([r for r, _, _ in keys], U * U),
            "layer": np.repeat([layer for _, layer, _ in keys], U * U).astype(np.int64),
            "head": np.repeat([h for _, _, h in keys], U * U).astype(np.int64),
            "query_index": np.tile(q.ravel(), len(keys)), "key_index": np.tile(k.ravel(), len(keys)),
            "weight": np.concatenate([self.head_matrices[key].ravel() for key in keys]) if keys else [],
        })
        return {"words": words, "attention": att}

    def to_frame(self) -> pd.DataFrame:
        """One row per map, query word and key word (maps in their order, then queries, then keys): example_id,
        role, layer, query_index, query_word, key_index, key_word, weight."""
        columns = ["example_id", "role", "layer", "query_index", "query_word", "key_index", "key_word", "weight"]
        U, maps = len(self.words), list(self.matrices.items())
        if not U or not maps:
            return pd.DataFrame([], columns=columns)
        q, k = np.repeat(np.arange(U), U), np.tile(np.arange(U), U)
        words = np.asarray(self.words, dtype=object)
        return pd.DataFrame({
            "example_id": np.full(U * U * len(maps), self.example_id, dtype=np.int64),
            "role": np.repeat([role for (role, _), _ in maps], U * U).tolist(),
            "layer": np.repeat(np.asarray([layer for (_, layer), _ in maps], dtype=np.int64), U * U),
            "query_index": np.tile(q, len(maps)), "query_word": np.tile(words[q], len(maps)).tolist(),
            "key_index": np.tile(k, len(maps)), "key_word": np.tile(words[k], len(maps)).tolist(),
            "weight": np.concatenate([np.asarray(m[:U, :U], dtype=np.float64).ravel() for _, m in maps]),
        }, columns=columns)


def select_token_map_example(run: Run, min_length: int = 20, max_length: int = 30,
                             min_tokens_per_field: int = 4, examples=None) -> int | None:
    """The example for the word-level figure, chosen without any model output (METHODS 6.3).

    The lowest ``source_index`` among the evaluated examples whose token count lies in
    [min_length, max_length] and whose every named field has at least
    ``min_tokens_per_field`` tokens (field-start tokens count). The project's own runs name
    every token; in runs captured from other models unnamed tokens (special tokens,
    separators) are allowed (the map shows them greyed). None when no example qualifies.
    """
    ex = run.examples(["example_id", "source_index", "field_ids"])
    ids = select_examples(run, examples)
    if ids is not None:
        ex = ex[ex["example_id"].isin(ids)]
    named = run.field_ids
    for row in ex.sort_values("source_index").itertuples(index=False):
        g = np.asarray(row.field_ids)
        if not min_length <= len(g) <= max_length or not np.isin(g, named).any():
            continue
        if all((g == f).sum() >= min_tokens_per_field for f in named):
            return int(row.example_id)
    return None


def word_label(pieces) -> str:
    """A word from its tokenizer pieces, markers stripped (WordPiece ``##``, BPE ``Ġ``/``Ċ``, SentencePiece ``▁``).

    >>> word_label(["nu", "##mp", "##y"]), word_label(["Ġevenly"]), word_label(["[CLS]"])
    ('numpy', 'evenly', '[CLS]')
    """
    out = "".join(p[2:] if p.startswith("##") else p for p in pieces)
    out = out.replace("Ġ", " ").replace("▁", " ").replace("Ċ", "⏎").strip()
    return out or "".join(pieces)


def _median_example(run: Run, min_tokens_per_field: int, examples=None) -> int | None:
    """The fallback example at any cap: among the examples with ``min_tokens_per_field`` tokens in every named
    field, the one of median length (the lower median; lowest ``source_index`` among equal lengths)."""
    ex = run.examples(["example_id", "source_index", "field_ids"])
    ids = select_examples(run, examples)
    if ids is not None:
        ex = ex[ex["example_id"].isin(ids)]
    named = run.field_ids
    ok = [(len(g), int(si), int(e)) for e, si, g in zip(ex["example_id"], ex["source_index"], ex["field_ids"])
          if all((np.asarray(g) == f).sum() >= min_tokens_per_field for f in named)]
    if not ok:
        return None
    ok.sort()
    return ok[(len(ok) - 1) // 2][2]


def choose_word_example(run: Run, settings: AnalysisSettings) -> tuple[int | None, str]:
    """(example id, the rule that chose it), from lengths and field ids alone (no attention is looked at):
    ``settings.word_example`` when given; else the reference rule (:func:`select_token_map_example`); else,
    when no example is that short (a real model at a cap of 64 or more), the median-length example."""
    s = settings
    if s.word_example is not None:
        have = set(run.examples(["example_id"])["example_id"].tolist())
        if s.word_example not in have:
            raise RoutestatsError(f"--word-example {s.word_example}: no such evaluated example "
                                  f"(example ids {min(have)}-{max(have)})")
        return int(s.word_example), "chosen by the user (--word-example)"
    ex_id = select_token_map_example(run, s.token_map_min_length, s.token_map_max_length,
                                     s.token_map_min_tokens_per_field, s.examples)
    if ex_id is not None:
        return ex_id, (f"lowest source_index with {s.token_map_min_length}-{s.token_map_max_length} valid tokens, "
                       f">= {s.token_map_min_tokens_per_field} tokens in every named field; chosen before looking at "
                       "any attention")
    ex_id = _median_example(run, s.token_map_min_tokens_per_field, s.examples)
    return ex_id, (f"no example has {s.token_map_min_length}-{s.token_map_max_length} tokens, so the example of "
                   f"median length with >= {s.token_map_min_tokens_per_field} tokens in every named field (lowest "
                   "source_index among equal lengths); chosen before looking at any attention")


def word_window(word_fields: list[str], most: int) -> tuple[int, int]:
    """[start, end) of at most ``most`` words around the first boundary between two named fields (half
    before, half after; shifted to stay inside the example), so that a long example stays readable and
    still shows both sides of a field boundary.

    >>> word_window(["unnamed"] + ["title"] * 5 + ["content"] * 50, 8)
    (2, 10)
    >>> word_window(["title"] * 3, 8)
    (0, 3)
    """
    n = len(word_fields)
    if n <= most:
        return 0, n
    named = [i for i, f in enumerate(word_fields) if f != "unnamed"]
    cut = next((j for i, j in zip(named, named[1:]) if word_fields[i] != word_fields[j]), n // 2)
    start = min(max(0, cut - most // 2), n - most)
    return start, start + most


def word_map(p: RunPair, settings: AnalysisSettings, step: int, layers_stored: Sequence[int]) -> WordMap | None:
    """The pair's word map at ``step`` (None when no example qualifies or no matrices are stored); a long
    example is shown as a window of ``settings.token_map_max_words`` words (:func:`word_window`).
    ``layers_stored``: the runs' layer numbers; the map shows ``settings.token_map_layers`` (each one
    stored, else refused) or the last two stored."""
    ex_id, rule = choose_word_example(p.baseline, settings)
    if ex_id is None:
        return None
    if S.FORM_MATRICES not in p.baseline.attention_forms(step) or S.FORM_MATRICES not in p.variant.attention_forms(step):
        return None
    cols = ["example_id", "length", "tokens", "word_ids", "field_ids"]  # converted from Arrow: only what is used
    row = p.baseline.examples(cols).set_index("example_id").loc[ex_id]
    word_ids = np.asarray(row["word_ids"]) if row["word_ids"] is not None else np.arange(row["length"])
    tokens = list(row["tokens"]) if row["tokens"] is not None else [str(i) for i in range(row["length"])]
    g = np.asarray(row["field_ids"])
    names = p.baseline.named_fields
    groups = list(dict.fromkeys(word_ids.tolist()))  # word_attention's order: first appearance
    words, wfields = [], []
    for gid in groups:
        pos = np.flatnonzero(word_ids == gid)
        pieces = [tokens[i] for i in pos]
        fname = names.get(int(g[pos[0]]), "unnamed")
        words.append(f"[{fname}]" if pieces == ["[FIELD_START]"] else word_label(pieces))
        wfields.append(fname)
    a, b = word_window(wfields, settings.token_map_max_words)
    if (a, b) != (0, len(words)):
        rule += (f"; {len(words)} words, shown as words {a + 1}-{b} around the first field boundary (attention to "
                 "words outside the window is not drawn, so rows sum to less than 1)")
    stored = sorted(int(x) for x in layers_stored)
    layers = settings.token_map_layers or tuple(stored[-2:])
    missing = [x for x in layers if x not in stored]
    if missing:
        raise RoutestatsError(f"token_map_layers {list(layers)}: layer {missing[0]} is not stored (the runs store "
                              f"layers {', '.join(map(str, stored))})")
    mats, per_head = {}, {}
    for role, run in (("baseline", p.baseline), ("variant", p.variant)):
        blks = list(run.iter_attention(step, examples=[ex_id]))
        if len(blks) != 1:  # (row-group statistics that lie about the example ids they hold end here)
            raise RunFormatError(f"{run.run_id}: the matrices at step {step} hold no rows of example {ex_id}")
        (blk,) = blks
        for layer in layers:
            A = blk.weights[blk.layer == layer].astype(np.float64).mean(axis=0)  # plain mean over heads
            mats[(role, layer)] = word_attention(A, word_ids)[0][a:b, a:b]
        for r in range(len(blk.layer)):  # every layer and head, for the interactive explorer
            per_head[(role, int(blk.layer[r]), int(blk.head[r]))] = word_attention(
                blk.weights[r].astype(np.float64), word_ids)[0][a:b, a:b]
    for layer in layers:
        mats[("difference", layer)] = mats[("variant", layer)] - mats[("baseline", layer)]
    return WordMap(ex_id, words[a:b], wfields[a:b], tuple(layers), mats, rule, per_head)
