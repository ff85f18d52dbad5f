"""Data sets for the MSM runners: the bundled corpora and local DBpedia / PubMed files.

A :class:`DataSpec` names the files, the field order and the field-id vocabulary (METHODS 1.1).
Nothing is downloaded: every loader reads local files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from routestats.rundir.atomic import sha256_file

from runners.corpora import dbpedia_records, iter_pubmed, read_dbpedia_csv, split_rows

DATA_DIR = Path(__file__).resolve().parents[2] / "data"

DBPEDIA_FIELD_IDS = {"content": 3, "title": 4}
PUBMED_FIELD_IDS = {"methods": 3, "results": 4, "conclusions": 5}


@dataclass(frozen=True)
class DataSpec:
    """Where a fielded corpus lives and how its fields map to ids."""

    name: str
    format: str  # "dbpedia" or "pubmed"
    train: Path
    val: Path | None
    fields: tuple[str, ...]  # field order within a record
    field_ids: dict = field(default_factory=dict)  # name -> id (> 2)
    max_length: int = 256
    validation_size: int | None = None  # DBpedia without val.csv: RandomState(42) split; default
    # 70,000 (the reference) for files over 140,000 rows, else 10 %
    test: Path | None = None  # held-out split, touched only by `python -m runners evaluate`
    source: str = ""  # the spec string this was resolved from (recorded in manifests)

    @property
    def mask_id(self) -> int:
        return max(self.field_ids.values()) + 1

    @property
    def field_vocab_size(self) -> int:
        return self.mask_id + 1

    @property
    def num_labels(self) -> int:
        return self.mask_id

    def manifest_fields(self) -> dict:
        return {"named": {str(v): k for k, v in self.field_ids.items()}, "mask_id": self.mask_id,
                "vocab_size": self.field_vocab_size}

    def files(self) -> dict[str, str]:
        """SHA-256 of the data files, keyed ``<folder>/<file>`` (no machine-specific prefix)."""
        paths = [self.train] + ([self.val] if self.val is not None else [])
        return {f"{p.parent.name}/{p.name}": sha256_file(p) for p in paths}

    def load_test(self):
        """Records of the held-out test split, in file order."""
        if self.test is None or not self.test.is_file():
            raise FileNotFoundError(f"{self.name}: no test split file")
        if self.format == "dbpedia":
            return dbpedia_records(read_dbpedia_csv(self.test))
        return list(iter_pubmed(self.test, self.fields))

    def load(self):
        """(train records, validation records) in file order."""
        if self.format == "dbpedia":
            train_rows = read_dbpedia_csv(self.train)
            if self.val is None:
                n = len(train_rows)
                size = self.validation_size or (70_000 if n > 140_000 else max(1, n // 10))
                val_rows, train_rows = split_rows(train_rows, size, 42)
            else:
                val_rows = read_dbpedia_csv(self.val)
            return dbpedia_records(train_rows), dbpedia_records(val_rows)
        if self.format == "pubmed":
            return list(iter_pubmed(self.train, self.fields)), list(iter_pubmed(self.val, self.fields))
        raise ValueError(f"unknown data format {self.format!r}")


def resolve(spec: str, max_length: int | None = None) -> DataSpec:
    """A data spec from a short name or ``format:path``.

    ``bundled-dbpedia`` / ``bundled-pubmed``: the docstring corpora in ``data/``.
    ``dbpedia:DIR``: ``DIR/train.csv`` and ``DIR/val.csv`` (or a seed-42 split of train.csv).
    ``pubmed:DIR``: ``DIR/train.txt`` and ``DIR/dev.txt`` (methods/results/conclusions).
    """
    if spec == "bundled-dbpedia":
        d = DATA_DIR / "docstrings_dbpedia"
        s = DataSpec("docstrings-dbpedia", "dbpedia", d / "train.csv", d / "val.csv", ("title", "content"),
                     DBPEDIA_FIELD_IDS, 256, test=d / "test.csv", source=spec)
    elif spec == "bundled-pubmed":
        d = DATA_DIR / "docstrings_pubmed"
        s = DataSpec("docstrings-pubmed", "pubmed", d / "train.txt", d / "dev.txt",
                     ("summary", "parameters", "returns"), {"summary": 3, "parameters": 4, "returns": 5}, 512,
                     test=d / "test.txt", source=spec)
    elif spec.startswith("dbpedia:"):
        d = Path(spec.split(":", 1)[1])
        val = d / "val.csv"
        s = DataSpec("dbpedia", "dbpedia", d / "train.csv", val if val.is_file() else None, ("title", "content"),
                     DBPEDIA_FIELD_IDS, 256, test=d / "test.csv", source=spec)
    elif spec.startswith("pubmed:"):
        d = Path(spec.split(":", 1)[1])
        s = DataSpec("pubmed-rct", "pubmed", d / "train.txt", d / "dev.txt", ("methods", "results", "conclusions"),
                     PUBMED_FIELD_IDS, 512, test=d / "test.txt", source=spec)
    else:
        raise ValueError(f"unknown data {spec!r}: use bundled-dbpedia, bundled-pubmed, dbpedia:DIR or pubmed:DIR")
    for p in (s.train, s.val):
        if p is not None and not p.is_file():
            raise FileNotFoundError(f"{p}: data file not found")
    if max_length is not None:
        from dataclasses import replace

        s = replace(s, max_length=max_length)
    return s
