"""The row rules of ``examples.parquet``, checked on its Arrow columns by the reader and by the writer."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from routestats.errors import RunFormatError

__all__ = ["validate_examples"]


def validate_examples(table: pa.Table, fname: str, vocab_size: int) -> None:
    """The row rules of examples.parquet, on the Arrow columns (no per-row objects): unique ids,
    length = min(prepared_length, cap), one field id (and token and word id, when stored) per
    position, field ids inside the vocabulary. The first offending row is named."""
    import pyarrow.compute as pc

    ids = table["example_id"].to_numpy()
    if len(ids) and len(np.unique(ids)) < len(ids):
        first = np.zeros(len(ids), dtype=bool)
        first[np.unique(ids, return_index=True)[1]] = True
        raise RunFormatError(f"{fname}: column 'example_id' repeats value {ids[np.flatnonzero(~first)[0]]}")
    length = table["length"].to_numpy()
    expect = np.minimum(table["prepared_length"].to_numpy(), table["cap"].to_numpy())
    bad = np.flatnonzero(length != expect)
    if bad.size:
        i = bad[0]
        raise RunFormatError(f"{fname}: column 'length' of example_id {ids[i]} is {length[i]}, "
                             f"expected min(prepared_length, cap) = {expect[i]}")
    for col in ("field_ids", "tokens", "word_ids"):
        lens = pc.fill_null(pc.list_value_length(table[col]), -1).to_numpy()
        # tokens and word_ids are optional (null); field_ids never is
        wrong = lens != length if col == "field_ids" else (lens != length) & (lens != -1)
        bad = np.flatnonzero(wrong)
        if bad.size:
            i = bad[0]
            raise RunFormatError(f"{fname}: column {col!r} of example_id {ids[i]} has {lens[i]} entries, "
                                 f"expected length = {length[i]}")
    fields = table["field_ids"].combine_chunks()
    flat = pc.list_flatten(fields).to_numpy(zero_copy_only=False).astype(np.int64)
    if flat.size and (flat.min() < 0 or flat.max() >= vocab_size):
        at = int(np.flatnonzero((flat < 0) | (flat >= vocab_size))[0])
        owner = ids[pc.list_parent_indices(fields).to_numpy()[at]]
        raise RunFormatError(f"{fname}: column 'field_ids' of example_id {owner} holds {flat[at]}, outside the field "
                             f"vocabulary [0, {vocab_size})")
