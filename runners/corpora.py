"""Readers and writers for the published corpus formats (pure Python, no torch).

* DBpedia CSV: ``label,title,content`` rows, header optional (METHODS 5.1).
* PubMed 200k RCT text: ``###<pmid>`` lines, then ``LABEL<TAB>sentence`` lines (METHODS 5.2).

The bundled docstring corpora in ``data/`` use exactly these formats, so the same readers
serve the real data and the bundled data.

Examples
--------
>>> rows = [(str(i), f"t{i}", f"c{i}") for i in range(12)]
>>> val, train = split_rows(rows, validation_size=3, seed=42)
>>> [r[1] for r in val]
['t10', 't9', 't0']
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

PUBMED_FIELDS = ("methods", "results", "conclusions")


class CorpusFormatError(ValueError):
    """A corpus file does not follow its published format."""


@dataclass(frozen=True)
class Record:
    """One fielded record: an id/label and the text of each field, in field order."""

    label: str
    fields: tuple[tuple[str, str], ...]  # (field name, text)


MAX_RECORD_BYTES = 8 << 20  # the largest record (a CSV field, a JSONL line) read by default: 8 MB


def read_csv_rows(path: str | Path, max_bytes: int = MAX_RECORD_BYTES,
                  first: int | None = None) -> list[tuple[int, list[str]]]:
    """The non-blank rows of a CSV file as ``(row number, values)``, values as written (not stripped).

    Row numbers count from 1 and count blank rows (a row whose values are all blank is skipped);
    ``first`` stops after that many non-blank rows. A field over ``max_bytes``, or text that is not
    CSV, is a :class:`CorpusFormatError` naming its line, raised before the field is held whole.
    """
    path = Path(path)
    out: list[tuple[int, list[str]]] = []
    old = csv.field_size_limit()
    csv.field_size_limit(max_bytes)
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:  # a spreadsheet's byte-order mark is not text
            reader = csv.reader(fh)
            for i, row in enumerate(reader):
                if first is not None and len(out) >= first:
                    break
                if row and any(v.strip() for v in row):
                    out.append((i + 1, row))
            return out
    except UnicodeDecodeError as exc:
        raise CorpusFormatError(f"{path}: not UTF-8 text (byte {exc.start} of a block; a binary file?)") from None
    except csv.Error as exc:
        if "field larger than field limit" in str(exc):
            raise CorpusFormatError(f"{path}: a field near line {reader.line_num} is over the {max_bytes / 2 ** 20:.3g} MB "
                                    "record limit (--max-record-mb)") from None
        raise CorpusFormatError(f"{path}: not CSV near line {reader.line_num} ({exc})") from None
    finally:
        csv.field_size_limit(old)


def read_dbpedia_csv(path: str | Path, max_bytes: int = MAX_RECORD_BYTES) -> list[tuple[str, str, str]]:
    """Read a DBpedia CSV into (label, title, content) tuples.

    Blank rows are skipped, all three values stripped; a header is recognised when the
    first three values equal label/title/content (case-insensitive); any row with other
    than three columns, or a field over ``max_bytes``, is an error naming its line
    (:func:`read_csv_rows`).
    """
    path = Path(path)
    out = []
    for n, row in read_csv_rows(path, max_bytes):
        if len(row) != 3:
            raise CorpusFormatError(f"{path}: row {n} has {len(row)} columns, expected 3 (label,title,content)")
        vals = tuple(v.strip() for v in row)
        if not out and n == 1 and [v.lower() for v in vals] == ["label", "title", "content"]:
            continue
        out.append(vals)
    return out


def write_dbpedia_csv(rows: Sequence[tuple[str, str, str]]) -> bytes:
    """Serialise (label, title, content) rows the way the dbpedia_csv distribution does."""
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for r in rows:
        w.writerow(r)
    return buf.getvalue().encode("utf-8")


def split_rows(rows: Sequence, validation_size: int, seed: int = 42):
    """Split rows as the reference ``split_dbpedia.py`` does.

    ``perm = numpy.random.RandomState(seed).permutation(N)``; validation = rows
    ``perm[:validation_size]`` in that order, training = the rest in that order.
    """
    n = len(rows)
    if not 0 < validation_size < n:
        raise ValueError(f"validation_size must be in 1..{n - 1}, got {validation_size}")
    if not 0 <= seed <= 2**32 - 1:
        raise ValueError("seed must be within 0..2**32-1")
    perm = np.random.RandomState(seed).permutation(n)
    return [rows[i] for i in perm[:validation_size]], [rows[i] for i in perm[validation_size:]]


def dbpedia_records(rows: Sequence[tuple[str, str, str]]) -> list[Record]:
    """DBpedia rows as records with fields (title, content) in that order."""
    return [Record(label=r[0], fields=(("title", r[1]), ("content", r[2]))) for r in rows]


def iter_pubmed(path: str | Path, fields: Sequence[str] = PUBMED_FIELDS) -> Iterator[Record]:
    """Yield PubMed-format abstracts that have every one of ``fields``.

    Lines are stripped, blank lines ignored; labels are lower-cased; sentences of a field
    are joined with single spaces in file order; other labels (BACKGROUND, OBJECTIVE, ...)
    are dropped. ``label`` of the record is the PMID.
    """
    path = Path(path)
    wanted = tuple(f.lower() for f in fields)
    pmid: str | None = None
    parts: dict[str, list[str]] = {}

    def done():
        if pmid is not None and all(parts.get(f) for f in wanted):
            return Record(label=pmid, fields=tuple((f, " ".join(parts[f])) for f in wanted))
        return None

    with open(path, encoding="utf-8-sig") as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.strip()
            if not line:
                continue
            if line.startswith("###"):
                rec = done()
                if rec:
                    yield rec
                pmid, parts = line[3:].strip(), {}
                continue
            if pmid is None:
                raise CorpusFormatError(f"{path}: line {lineno} comes before any ###<id> line")
            label, sep, sentence = line.partition("\t")
            if not sep:
                raise CorpusFormatError(f"{path}: line {lineno} has no TAB between label and sentence")
            label = label.strip().lower()
            sentence = sentence.strip()
            if label in wanted and sentence:
                parts.setdefault(label, []).append(sentence)
    rec = done()
    if rec:
        yield rec


def write_pubmed(abstracts: Sequence[tuple[str, Sequence[tuple[str, str]]]]) -> bytes:
    """Serialise (pmid, [(LABEL, sentence), ...]) abstracts in the PubMed 200k RCT format."""
    out = []
    for pmid, lines in abstracts:
        out.append(f"###{pmid}")
        for label, sentence in lines:
            if "\t" in label or "\n" in sentence or "\t" in sentence:
                raise ValueError("labels and sentences may not hold TAB or newline")
            out.append(f"{label}\t{sentence}")
        out.append("")
    return ("\n".join(out) + "\n").encode("utf-8")
