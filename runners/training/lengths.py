"""Token lengths of every split of a prepared corpus (paper Table 11 input).

Writes ``OUT/lengths.parquet`` with columns dataset, split, length (tokens after the model's
max-length cut) and cap; ``routestats.lengths.length_table`` summarises it and a study report
picks up ``<tree>/lengths/lengths.parquet``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa

from routestats.rundir.atomic import write_table_atomic

from runners.training.data import DataSpec
from runners.training.msm import encode_record
from runners.training.train import prepare


def corpus_lengths(out: Path, data: DataSpec, vocab_size: int, max_length: int) -> pd.DataFrame:
    """Encode train, validation and (if present) test records; write and return their lengths."""
    out = Path(out)
    prep = prepare(data, out, vocab_size, max_length)
    rows = [("train", min(len(e.input_ids), max_length)) for e in prep.train]
    rows += [("val", min(n, max_length)) for n in prep.val_prepared_lengths]
    if data.test is not None and data.test.is_file():
        from runners.training.msm import load_tokenizer

        tok = load_tokenizer(prep.tokenizer_path)
        rows += [("test", min(encode_record(tok, r, data.field_ids, max_length)[1], max_length))
                 for r in data.load_test()]
    df = pd.DataFrame(rows, columns=["split", "length"])
    df.insert(0, "dataset", data.name)
    df["cap"] = max_length
    write_table_atomic(out / "lengths.parquet", pa.Table.from_pandas(df, preserve_index=False))
    return df
