"""Records for capture, read from six forms (:func:`read_records`): a CSV with a header, the header-less DBpedia
CSV, JSONL, PubMed RCT text, Parquet and Arrow tables, and Hugging Face ``datasets`` folders (``save_to_disk``).

Every form gives :class:`runners.corpora.Record` s (a label and named fields) or one line saying why not: a
header-less CSV whose first row looks like a header, a record over the size limit, a column or key the options
name that is not there, a datasets folder naming files outside itself. Split from ``capture`` (issue
[fused-capture]: capture as a pipeline, records -> encode -> forward -> reductions -> run writer).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
from pathlib import Path
from typing import Sequence

from routestats.errors import RoutestatsError
from routestats.rundir.manifest import read_json

from runners.pretrained.load import first_line

__all__ = ["RECORD_FORMATS", "TABLE_SUFFIXES", "records_format", "read_records", "record_texts"]

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
    from runners.corpora import MAX_RECORD_BYTES

    max_bytes = MAX_RECORD_BYTES if max_bytes is None else int(max_bytes)
    path = Path(path)
    fmt = records_format(path) if fmt is None else fmt
    _check_record_options(path, fmt, label, split)
    with _in_one_line(path):
        recs = _read_format(path, fmt, list(fields) if fields else None, label, split, limit, max_bytes)
    return recs[:limit] if limit else recs


@contextlib.contextmanager
def _in_one_line(path: Path):
    """What reading ``path`` raises, as one line naming the file."""
    from runners.corpora import CorpusFormatError

    try:
        yield
    except UnicodeDecodeError as exc:
        raise RoutestatsError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except RoutestatsError:
        raise
    except CorpusFormatError as exc:  # its words name the file already
        raise RoutestatsError(first_line(exc)) from None
    except (ValueError, OSError) as exc:  # pyarrow's ArrowInvalid is a ValueError, its IO errors OSErrors
        raise RoutestatsError(f"{path}: {first_line(exc)}") from None


def _check_record_options(path: Path, fmt: str, label: str | None, split: str | None) -> None:
    """The format, ``--label`` and ``--split`` fit each other and the path (one line each)."""
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


def _read_format(path: Path, fmt: str, fields: list | None, label, split, limit: int, max_bytes: int) -> list:
    """The records of ``path`` read as ``fmt``."""
    from runners.corpora import dbpedia_records, iter_pubmed, read_dbpedia_csv

    if fmt == "dbpedia":
        _refuse_header(path, fields, max_bytes)
        if fields and not set(fields) <= {"title", "content"}:
            raise RoutestatsError(f"--fields {','.join(fields)}: --format dbpedia reads the columns label,title,"
                                  "content by position, so its fields are title and content; for a CSV whose "
                                  "first row names its columns pass --format csv")
        return dbpedia_records(read_dbpedia_csv(path, max_bytes))
    if fmt == "csv":
        return _csv_records(path, fields, label, limit, max_bytes)
    if fmt == "pubmed":
        return list(iter_pubmed(path, tuple(fields) if fields else ("methods", "results")))
    if fmt == "jsonl":
        return _jsonl_records(path, fields, label, limit, max_bytes)
    return _table_records(path, fields, label, split, limit, max_bytes)


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
       (DBpedia's labels are class numbers: ``ID,Question text,Answer text`` above ``1,...``); or
    4. every cell is a short phrase of names (1-4 of them: what spreadsheets write, ``Question ID,Question
       text,Answer text``), one with a space, and below it a text column's cells hold, at the median, at least
       6 words and three times the first row's (a header above rows of text, whatever the labels).

    A file whose every row is single words, with labels that are not numbers, passes: nothing tells
    such a header from a record.

    >>> _header_like(["id", "question", "answer"], [["1", "What is 2 + 2?", "4"]], ["title", "content"])
    True
    >>> _header_like(["17", "scipy.integrate.romb", "Romberg integration."], [["1", "numpy.isin", "x"]], None)
    False
    >>> _header_like(["cat", "animal", "meow"], [["dog", "animal", "woof"]], ["title", "content"])
    False
    >>> _header_like(["Question ID", "Question text", "Answer text"],
    ...              [["q1", "What is the capital of France?", "Paris is the capital of France."]], None)
    True
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
    if bool(below) and not _WHOLE.match(cells[0]) and all(r and _WHOLE.match(r[0]) for r in below):
        return True
    phrase = lambda c: 1 <= len(c.split()) <= 4 and all(_NAME.match(w) for w in c.split())  # noqa: E731
    if not (below and all(phrase(c) for c in cells) and any(" " in c for c in cells)):
        return False
    words = [sorted(len(r[i].split()) for r in below if i < len(r)) for i in range(len(cells))]
    return any(w and w[len(w) // 2] >= max(6, 3 * len(cells[i].split())) for i, w in enumerate(words))


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
            raise RoutestatsError(f"{path}: no column {f!r} for --fields, whose default is title,content (columns: "
                                  f"{listed}); name the text columns to read, e.g. --fields "
                                  f"{','.join([c for c in columns if c != label and (types is None or is_text(c))][:2])}"
                                  if f in fields else
                                  f"{path}: no column {f!r} (columns: {listed})")
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


def record_texts(records: Sequence, names: Sequence[str]) -> list[list[str]]:
    """Each record's texts of the fields ``names``, in that order; a record without one is refused in one line."""
    texts = []
    for r in records:
        d = dict(r.fields)
        missing = [f for f in names if f not in d]
        if missing:
            raise RoutestatsError(f"record {r.label!r} has no field {missing[0]!r} (fields: {', '.join(d)})")
        texts.append([d[f] for f in names])
    return texts
