"""Load and validate run directories and run trees (the contract is in :mod:`routestats.schema`).

Reads are lazy and selective: the manifest is read on :func:`load_run`; examples, metrics and
gradients on first use; attention is streamed one example at a time, one Parquet row group
at a time, validated as it goes.

Examples
--------
>>> import tempfile
>>> from routestats.rundir.synthetic import synthetic_pair
>>> base, var = synthetic_pair(tempfile.mkdtemp(), seed=0, n_examples=4)
>>> run = load_run(base)
>>> run.factors["variant"], run.attention_steps
('baseline', [100])
>>> p = pair(run, load_run(var))
>>> p.variant.factors["variant"]
'saab'
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from routestats.rundir import schema as S
from routestats.rundir.atomic import sha256_file
from routestats.errors import IncompleteRunError, PairingError, RunFormatError, SchemaVersionError

__all__ = [
    "Run",
    "RunCollection",
    "RunPair",
    "ExampleAttention",
    "ExampleReductions",
    "load_run",
    "load_runs",
    "pair",
]


# ---------------------------------------------------------------- per-example blocks
@dataclass(frozen=True)
class ExampleAttention:
    """All stored attention matrices of one example (form ``matrices``).

    ``weights`` has shape (rows, n, n), one row per (layer, head) sorted by layer then head.
    """

    example_id: int
    layer: np.ndarray
    head: np.ndarray
    head_type: np.ndarray
    weights: np.ndarray


@dataclass(frozen=True)
class ExampleReductions:
    """Per-query reductions of one example (form ``reductions``); arrays are (rows, n[, F])."""

    example_id: int
    layer: np.ndarray
    head: np.ndarray
    head_type: np.ndarray
    row_mass: np.ndarray
    entropy: np.ndarray
    entropy_rownorm: np.ndarray
    field_mass: np.ndarray


# ---------------------------------------------------------------- manifest checks
def _read_manifest(path: Path) -> dict:
    mpath = path / S.MANIFEST
    if not path.is_dir():
        raise RunFormatError(f"{path}: not a directory")
    if not mpath.is_file():
        raise IncompleteRunError(
            f"{path}: no {S.MANIFEST}; the run is incomplete (still being written or killed)"
        )
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RunFormatError(f"{mpath}: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise RunFormatError(f"{mpath}: expected a JSON object")
    version = manifest.get("schema_version")
    if version not in S.SUPPORTED_SCHEMA_VERSIONS:
        raise SchemaVersionError(
            f"{mpath}: schema_version {version!r} is not supported "
            f"(this routestats reads {', '.join(S.SUPPORTED_SCHEMA_VERSIONS)})"
        )
    for key, typ in S.MANIFEST_REQUIRED.items():
        if key not in manifest:
            raise RunFormatError(f"{mpath}: missing key {key!r}")
        if not isinstance(manifest[key], typ):
            raise RunFormatError(
                f"{mpath}: key {key!r} must be {typ.__name__}, got {type(manifest[key]).__name__}"
            )
    if "seed" not in manifest or not (manifest["seed"] is None or isinstance(manifest["seed"], int)):
        raise RunFormatError(f"{mpath}: key 'seed' must be an integer or null")
    fields = manifest["fields"]
    named = fields.get("named")
    if not isinstance(named, dict) or not named:
        raise RunFormatError(f"{mpath}: fields.named must be a non-empty object id -> name")
    try:
        ids = [int(k) for k in named]
    except ValueError:
        raise RunFormatError(f"{mpath}: fields.named keys must be integer ids, got {list(named)}") from None
    vocab = fields.get("vocab_size")
    if not isinstance(vocab, int) or vocab <= max(ids):
        raise RunFormatError(
            f"{mpath}: fields.vocab_size must be an integer > every named id ({max(ids)}), got {vocab!r}"
        )
    if min(ids) < 0:
        raise RunFormatError(f"{mpath}: fields.named has a negative id {min(ids)}")
    att = manifest["attention"]
    steps = att.get("steps", {})
    if not isinstance(steps, dict):
        raise RunFormatError(f"{mpath}: attention.steps must map step -> list of forms")
    for st, forms in steps.items():
        if not str(st).isdigit() or not isinstance(forms, list) or any(f not in S.ATTENTION_FORMS for f in forms):
            raise RunFormatError(f"{mpath}: attention.steps[{st!r}] = {forms!r} is not a list of {S.ATTENTION_FORMS}")
    if steps and att.get("dtype") not in S.ATTENTION_DTYPES:
        raise RunFormatError(f"{mpath}: attention.dtype {att.get('dtype')!r} is not one of {S.ATTENTION_DTYPES}")
    for entry in manifest["files"]:
        if not isinstance(entry, dict) or "path" not in entry or "sha256" not in entry:
            raise RunFormatError(f"{mpath}: every files entry needs 'path' and 'sha256'")
        if not (path / entry["path"]).is_file():
            raise RunFormatError(f"{mpath}: lists {entry['path']} but that file is missing")
    return manifest


def _check_schema(fname: str, actual: pa.Schema, expected: pa.Schema, required=None) -> None:
    required = expected.names if required is None else required
    for f in expected:
        if f.name not in actual.names:
            if f.name in required:
                raise RunFormatError(f"{fname}: missing column {f.name!r}")
            continue
        got = actual.field(f.name).type
        if not got.equals(f.type):
            raise RunFormatError(f"{fname}: column {f.name!r} has type {got}, expected {f.type}")


# ---------------------------------------------------------------- the Run
@dataclass(frozen=True, eq=False)
class Run:
    """One trained model state: a validated manifest plus lazy accessors.

    Use :func:`load_run` to make one.
    """

    path: Path
    manifest: dict = field(repr=False)

    def __repr__(self) -> str:
        return f"Run({self.run_id!r}, path={str(self.path)!r})"

    # -- identity --------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self.manifest["run_id"]

    @property
    def study(self) -> str:
        return self.manifest["study"]

    @property
    def seed(self) -> int | None:
        return self.manifest["seed"]

    @property
    def factors(self) -> dict:
        return dict(self.manifest["factors"])

    @property
    def init_id(self) -> str:
        return self.manifest["init_id"]

    @property
    def data_order_id(self) -> str:
        return self.manifest["data_order_id"]

    @property
    def named_fields(self) -> dict[int, str]:
        """Named analysis fields, id -> name, ascending id."""
        named = self.manifest["fields"]["named"]
        return {int(k): named[k] for k in sorted(named, key=int)}

    @property
    def field_ids(self) -> np.ndarray:
        return S.named_field_ids(self.manifest["fields"])

    def attention_forms(self, step: int | None = None) -> list[str]:
        """Storage forms held at ``step`` (default: the final step)."""
        steps = self.manifest["attention"].get("steps", {})
        if not steps:
            return []
        step = self.final_step if step is None else int(step)
        return list(steps.get(str(step), []))

    @property
    def attention_steps(self) -> list[int]:
        return sorted(int(s) for s in self.manifest["attention"].get("steps", {}))

    @property
    def final_step(self) -> int:
        steps = self.attention_steps
        if not steps:
            raise RunFormatError(f"{self.path}: the run holds no attention")
        return steps[-1]

    def _file(self, rel: str) -> Path:
        return self.path / rel

    def has(self, rel: str) -> bool:
        """Whether the run lists the file ``rel`` in its manifest."""
        return any(e["path"] == rel for e in self.manifest["files"])

    # -- tables ----------------------------------------------------------
    @functools.cached_property
    def _examples(self) -> pd.DataFrame:
        fname = self._file(S.EXAMPLES)
        if not fname.is_file():
            raise RunFormatError(f"{self.path}: missing {S.EXAMPLES}")
        table = pq.read_table(fname)
        _check_schema(str(fname), table.schema, S.EXAMPLES_SCHEMA)
        df = table.to_pandas()
        _validate_examples(df, str(fname), self.manifest["fields"]["vocab_size"])
        return df

    def examples(self, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The evaluated examples (see :data:`routestats.schema.EXAMPLES_SCHEMA`).

        Returns a copy, indexed 0..n-1 in stored order.
        """
        df = self._examples
        return (df if columns is None else df[list(columns)]).copy()

    def _table(self, name: str) -> pd.DataFrame:
        fname = self._file(name)
        if not fname.is_file():
            raise RunFormatError(f"{self.path}: this run has no {name}")
        table = pq.read_table(fname)
        _check_schema(str(fname), table.schema, S.TABLE_SCHEMAS[name])
        return table.to_pandas()

    def metrics(self) -> pd.DataFrame:
        """Per-step training/evaluation metrics (``metrics.parquet``)."""
        return self._table(S.METRICS)

    def gradients(self) -> pd.DataFrame:
        """Per-step x layer Q/K/V weight-gradient norms (``gradients.parquet``)."""
        return self._table(S.GRADIENTS)

    def lm_scores(self) -> pd.DataFrame:
        """Per-block language-model scores (``lm_scores.parquet``)."""
        return self._table(S.LM_SCORES)

    # -- attention -------------------------------------------------------
    def attention_path(self, step: int | None = None, form: str = S.FORM_MATRICES) -> Path:
        step = self.final_step if step is None else int(step)
        if step not in self.attention_steps:
            raise RunFormatError(
                f"{self.path}: no attention at step {step}; stored steps: {self.attention_steps}"
            )
        if form not in self.attention_forms(step):
            raise RunFormatError(
                f"{self.path}: attention form {form!r} not stored at step {step} (has {self.attention_forms(step)})"
            )
        p = self._file(S.attention_file(step, form))
        if not p.is_file():
            raise RunFormatError(f"{self.path}: missing {S.attention_file(step, form)}")
        return p

    def iter_attention(
        self,
        step: int | None = None,
        examples: Sequence[int] | None = None,
        layers: Sequence[int] | None = None,
    ) -> Iterator[ExampleAttention]:
        """Stream full attention matrices one example at a time (row group by row group).

        Every block is validated: finite, non-negative, ``n`` equal to the example's
        evaluated length, softmax rows summing to 1 within
        :data:`routestats.schema.ROW_SUM_ATOL` for the stored dtype.
        """
        path = self.attention_path(step, S.FORM_MATRICES)
        dtype = self.manifest["attention"]["dtype"]
        pf = pq.ParquetFile(path)
        _check_schema(str(path), pf.schema_arrow, S.attention_matrices_schema(dtype))
        lengths = self._lengths()
        for block in _iter_blocks(pf, examples, layers):
            ex, rows = block
            yield _matrices_block(str(path), ex, rows, lengths, dtype)

    def iter_reductions(
        self,
        step: int | None = None,
        examples: Sequence[int] | None = None,
        layers: Sequence[int] | None = None,
    ) -> Iterator[ExampleReductions]:
        """Stream per-query reductions one example at a time (form ``reductions``)."""
        path = self.attention_path(step, S.FORM_REDUCTIONS)
        pf = pq.ParquetFile(path)
        _check_schema(str(path), pf.schema_arrow, S.REDUCTIONS_SCHEMA)
        lengths = self._lengths()
        n_fields = len(self.field_ids)
        for ex, rows in _iter_blocks(pf, examples, layers):
            yield _reductions_block(str(path), ex, rows, lengths, n_fields)

    def _lengths(self) -> dict[int, int]:
        df = self._examples
        return dict(zip(df["example_id"].tolist(), df["length"].tolist()))

    # -- validation ------------------------------------------------------
    def validate(self, deep: bool = True) -> list[str]:
        """Check the whole run against the contract; return the list of checks passed.

        ``deep`` also verifies every file's SHA-256 against the manifest and every example's
        content hash. Raises :class:`~routestats.errors.RunFormatError` at the first failure.
        """
        done = ["manifest"]
        if deep:
            for entry in self.manifest["files"]:
                got = sha256_file(self._file(entry["path"]))
                if got != entry["sha256"]:
                    raise RunFormatError(
                        f"{self._file(entry['path'])}: SHA-256 {got[:12]}... differs from run.json "
                        f"({entry['sha256'][:12]}...); the file changed after the run was written"
                    )
            done.append(f"file hashes ({len(self.manifest['files'])} files)")
        df = self._examples
        done.append(f"examples ({len(df)} rows)")
        if deep:
            for row in df.itertuples(index=False):
                if S.content_hash(row.tokens, row.field_ids) != row.content_sha256:
                    raise RunFormatError(
                        f"{self._file(S.EXAMPLES)}: column 'content_sha256' of example_id "
                        f"{row.example_id} does not match its tokens and field_ids"
                    )
            done.append("content hashes")
        ids = set(df["example_id"].tolist())
        for step in self.attention_steps:
            for form in self.attention_forms(step):
                it = self.iter_attention(step) if form == S.FORM_MATRICES else self.iter_reductions(step)
                seen = {blk.example_id for blk in it}
                if seen != ids:
                    missing = sorted(ids - seen)[:5]
                    extra = sorted(seen - ids)[:5]
                    raise RunFormatError(
                        f"{self._file(S.attention_file(step, form))}: example ids differ from "
                        f"{S.EXAMPLES} (missing {missing}, unknown {extra})"
                    )
                done.append(f"attention step {step} {form}")
        for name in (S.METRICS, S.GRADIENTS, S.LM_SCORES):
            if self.has(name):
                self._table(name)
                done.append(name)
        return done


def _validate_examples(df: pd.DataFrame, fname: str, vocab_size: int) -> None:
    if df["example_id"].duplicated().any():
        dup = df.loc[df["example_id"].duplicated(), "example_id"].iloc[0]
        raise RunFormatError(f"{fname}: column 'example_id' repeats value {dup}")
    expect = np.minimum(df["prepared_length"].to_numpy(), df["cap"].to_numpy())
    bad = np.flatnonzero(df["length"].to_numpy() != expect)
    if bad.size:
        r = df.iloc[bad[0]]
        raise RunFormatError(
            f"{fname}: column 'length' of example_id {r.example_id} is {r.length}, "
            f"expected min(prepared_length, cap) = {expect[bad[0]]}"
        )
    length = df["length"].to_numpy()
    for col in ("field_ids", "tokens", "word_ids"):
        lens = df[col].map(lambda v: -1 if v is None else len(v)).to_numpy()
        # tokens and word_ids are optional (null); field_ids never is
        wrong = lens != length if col == "field_ids" else (lens != length) & (lens != -1)
        bad = np.flatnonzero(wrong)
        if bad.size:
            r = df.iloc[bad[0]]
            raise RunFormatError(
                f"{fname}: column {col!r} of example_id {r.example_id} has {lens[bad[0]]} "
                f"entries, expected length = {r.length}"
            )
    if len(df):
        flat = np.concatenate([np.asarray(v, dtype=np.int64) for v in df["field_ids"]] or [np.empty(0, np.int64)])
        if flat.size and (flat.min() < 0 or flat.max() >= vocab_size):
            off = flat[(flat < 0) | (flat >= vocab_size)][0]
            owner = next(
                r.example_id for r in df.itertuples(index=False) if off in np.asarray(r.field_ids)
            )
            raise RunFormatError(
                f"{fname}: column 'field_ids' of example_id {owner} holds {off}, outside the field "
                f"vocabulary [0, {vocab_size})"
            )


# ---------------------------------------------------------------- streaming helpers
class _Columns:
    """One row group's columns as numpy, each converted once (list columns as values + offsets)."""

    def __init__(self, table: pa.Table):
        self.table = table
        self._plain: dict = {}
        self._lists: dict = {}

    def plain(self, name: str) -> np.ndarray:
        if name not in self._plain:
            self._plain[name] = self.table[name].combine_chunks().to_numpy(zero_copy_only=False)
        return self._plain[name]

    def lists(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        if name not in self._lists:
            arr = self.table[name].combine_chunks()
            self._lists[name] = (arr.values.to_numpy(zero_copy_only=False), arr.offsets.to_numpy())
        return self._lists[name]


class _Rows:
    """Rows [s, e) of a :class:`_Columns`: one example's rows, as numpy views."""

    def __init__(self, cols: _Columns, s: int, e: int):
        self.cols, self.s, self.e = cols, s, e

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols.plain(name)[self.s : self.e]

    def list_values(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(values, offsets) with offsets[i]..offsets[i+1] the values of row i (absolute into values)."""
        values, offsets = self.cols.lists(name)
        return values, offsets[self.s : self.e + 1]


def _iter_blocks(pf: pq.ParquetFile, examples, layers):
    """Yield (example_id, :class:`_Rows` of its rows), streaming row group by row group."""
    want_ex = None if examples is None else set(int(e) for e in examples)
    want_layers = None if layers is None else np.asarray(sorted(set(int(x) for x in layers)))
    carry: pa.Table | None = None
    for rg in range(pf.num_row_groups):
        t = pf.read_row_group(rg)
        if want_ex is not None:
            mask = pa.compute.is_in(t["example_id"], pa.array(sorted(want_ex), pa.int64()))
            t = t.filter(mask)
        if want_layers is not None:
            mask = pa.compute.is_in(t["layer"], pa.array(want_layers, pa.int16()))
            t = t.filter(mask)
        if carry is not None:
            t = pa.concat_tables([carry, t])
            carry = None
        if t.num_rows == 0:
            continue
        ex = t["example_id"].to_numpy()
        # example ids in first-appearance order; the last one may continue in the next group
        change = np.flatnonzero(np.diff(ex)) + 1
        starts = np.concatenate([[0], change])
        ends = np.concatenate([change, [len(ex)]])
        last = rg == pf.num_row_groups - 1
        cols = _Columns(t)
        for s, e in zip(starts, ends):
            if e == len(ex) and not last:
                carry = t.slice(s, e - s)
                break
            yield int(ex[s]), _Rows(cols, int(s), int(e))
    if carry is not None and carry.num_rows:
        yield int(carry["example_id"][0].as_py()), _Rows(_Columns(carry), 0, carry.num_rows)


def _sorted_rows(rows: _Rows):
    layer = rows["layer"].astype(np.int64)
    head = rows["head"].astype(np.int64)
    order = np.lexsort((head, layer))
    key = layer[order] * 100000 + head[order]
    return layer, head, order, key


def _matrices_block(fname, ex, rows, lengths, dtype) -> ExampleAttention:
    if ex not in lengths:
        raise RunFormatError(f"{fname}: example_id {ex} is not in {S.EXAMPLES}")
    layer, head, order, key = _sorted_rows(rows)
    if np.any(np.diff(key) == 0):
        raise RunFormatError(f"{fname}: example_id {ex} has a repeated (layer, head) row")
    ns = rows["n"]
    n = lengths[ex]
    if np.any(ns != n):
        raise RunFormatError(
            f"{fname}: column 'n' of example_id {ex} is {int(ns[ns != n][0])}, but the example's "
            f"evaluated length is {n}"
        )
    values, offsets = rows.list_values("weights")
    sizes = np.diff(offsets)
    if np.any(sizes != n * n):
        i = int(np.flatnonzero(sizes != n * n)[0])
        raise RunFormatError(
            f"{fname}: column 'weights' of example_id {ex}, layer {layer[i]}, head {head[i]} has "
            f"{sizes[i]} values, expected n*n = {n * n}"
        )
    w = values[offsets[0] : offsets[-1]].reshape(len(ns), n, n)
    if not np.array_equal(order, np.arange(len(order))):
        w = w[order]
    layer, head = layer[order], head[order]
    head_type = rows["head_type"][order]
    _check_probabilities(fname, ex, layer, head, head_type, w, dtype)
    return ExampleAttention(ex, layer, head, head_type, w)


def _check_probabilities(fname, ex, layer, head, head_type, w, dtype) -> None:
    finite = np.isfinite(w)
    if not finite.all():
        i = np.argwhere(~finite)[0]
        raise RunFormatError(
            f"{fname}: column 'weights' of example_id {ex}, layer {layer[i[0]]}, head {head[i[0]]} "
            f"holds {w[tuple(i)]} at query {i[1]}, key {i[2]}"
        )
    neg = w < 0
    if neg.any():
        i = np.argwhere(neg)[0]
        raise RunFormatError(
            f"{fname}: column 'weights' of example_id {ex}, layer {layer[i[0]]}, head {head[i[0]]} "
            f"holds negative attention {float(w[tuple(i)])} at query {i[1]}, key {i[2]}"
        )
    soft = head_type == "softmax"
    if soft.any():
        sums = w[soft].sum(axis=-1, dtype=np.float64)
        err = np.abs(sums - 1.0)
        tol = S.ROW_SUM_ATOL[dtype]
        if err.size and err.max() > tol:
            r, q = np.unravel_index(int(err.argmax()), err.shape)
            rr = np.flatnonzero(soft)[r]
            raise RunFormatError(
                f"{fname}: softmax row of example_id {ex}, layer {layer[rr]}, head {head[rr]}, "
                f"query {q} sums to {sums[r, q]:.6g}; rows must sum to 1 within {tol:g} for {dtype}"
            )


def _reductions_block(fname, ex, rows, lengths, n_fields) -> ExampleReductions:
    if ex not in lengths:
        raise RunFormatError(f"{fname}: example_id {ex} is not in {S.EXAMPLES}")
    layer, head, order, key = _sorted_rows(rows)
    if np.any(np.diff(key) == 0):
        raise RunFormatError(f"{fname}: example_id {ex} has a repeated (layer, head) row")
    n = lengths[ex]
    ns = rows["n"]
    if np.any(ns != n):
        raise RunFormatError(
            f"{fname}: column 'n' of example_id {ex} is {int(ns[ns != n][0])}, but the example's "
            f"evaluated length is {n}"
        )
    out = {}
    for col, width in (("row_mass", 1), ("entropy", 1), ("entropy_rownorm", 1), ("field_mass", n_fields)):
        values, offsets = rows.list_values(col)
        if np.any(np.diff(offsets) != n * width):
            raise RunFormatError(
                f"{fname}: column {col!r} of example_id {ex} has the wrong number of values "
                f"(expected {n * width} per row)"
            )
        arr = values[offsets[0] : offsets[-1]].reshape((len(ns), n) + ((width,) if col == "field_mass" else ()))
        # masses are non-negative; entropies can be ~ -1e-10 (the epsilon inside the log) on one-hot rows
        if not np.isfinite(arr).all() or (col in ("row_mass", "field_mass") and (arr < 0).any()):
            raise RunFormatError(f"{fname}: column {col!r} of example_id {ex} holds a non-finite or negative value")
        out[col] = arr[order]
    head_type = rows["head_type"][order]
    return ExampleReductions(ex, layer[order], head[order], head_type, **out)


# ---------------------------------------------------------------- loading
def load_run(path: str | os.PathLike) -> Run:
    """Load one run directory (manifest checked now, tables read lazily).

    Raises
    ------
    IncompleteRunError
        The directory has no ``run.json``.
    SchemaVersionError
        The manifest's schema version is not supported.
    RunFormatError
        Any other breach of the contract.
    """
    p = Path(path)
    return Run(p, _read_manifest(p))


@dataclass(frozen=True)
class RunPair:
    """A baseline and a variant run verified to share init, data order and examples."""

    baseline: Run
    variant: Run

    @property
    def seed(self) -> int | None:
        return self.baseline.seed

    def swapped(self) -> "RunPair":
        """The same pair with roles exchanged (signs of every delta flip)."""
        return RunPair(self.variant, self.baseline)


def pair(baseline: Run, variant: Run) -> RunPair:
    """Pair two runs after checking they were trained and evaluated as an exact pair.

    Refuses runs whose ``init_id`` or ``data_order_id`` differ, whose named fields differ,
    or whose evaluated examples differ (ids, order or content hashes); the message says which.
    """
    a, b = baseline, variant
    for key in ("init_id", "data_order_id"):
        va, vb = getattr(a, key), getattr(b, key)
        if va != vb:
            raise PairingError(
                f"cannot pair {a.run_id} with {b.run_id}: {key} differs ({va[:16]} vs {vb[:16]})"
            )
    if a.named_fields != b.named_fields:
        raise PairingError(
            f"cannot pair {a.run_id} with {b.run_id}: named fields differ ({a.named_fields} vs {b.named_fields})"
        )
    ea = a.examples(["example_id", "content_sha256"])
    eb = b.examples(["example_id", "content_sha256"])
    if len(ea) != len(eb):
        raise PairingError(
            f"cannot pair {a.run_id} with {b.run_id}: evaluated example counts differ ({len(ea)} vs {len(eb)})"
        )
    ids_a, ids_b = ea["example_id"].to_numpy(), eb["example_id"].to_numpy()
    if not np.array_equal(ids_a, ids_b):
        i = int(np.flatnonzero(ids_a != ids_b)[0])
        raise PairingError(
            f"cannot pair {a.run_id} with {b.run_id}: evaluated examples differ in id or order "
            f"(position {i}: example_id {ids_a[i]} vs {ids_b[i]})"
        )
    ha, hb = ea["content_sha256"].to_numpy(), eb["content_sha256"].to_numpy()
    if not np.array_equal(ha, hb):
        i = int(np.flatnonzero(ha != hb)[0])
        raise PairingError(
            f"cannot pair {a.run_id} with {b.run_id}: example_id {ids_a[i]} has different content "
            f"(hash {ha[i][:12]} vs {hb[i][:12]})"
        )
    return RunPair(a, b)


@dataclass(frozen=True)
class RunCollection:
    """Runs found under a tree, with a tidy index built from their manifests.

    ``index`` columns: run_id, path, study, seed, init_id, data_order_id, then one column
    per factor (missing levels are NA).
    """

    runs: tuple[Run, ...]
    index: pd.DataFrame

    def __len__(self) -> int:
        return len(self.runs)

    def __iter__(self):
        return iter(self.runs)

    def get(self, run_id: str) -> Run:
        for r in self.runs:
            if r.run_id == run_id:
                return r
        raise KeyError(run_id)

    def select(self, **levels) -> "RunCollection":
        """Runs whose factors (or seed/study) equal the given levels.

        >>> import tempfile
        >>> from routestats.rundir.synthetic import synthetic_pair
        >>> d = tempfile.mkdtemp()
        >>> _ = synthetic_pair(d, seed=1, n_examples=2)
        >>> len(load_runs(d).select(variant="saab"))
        1
        """
        mask = np.ones(len(self.index), dtype=bool)
        for k, v in levels.items():
            if k not in self.index.columns:
                raise KeyError(f"no factor {k!r}; known: {list(self.index.columns)}")
            mask &= (self.index[k] == v).fillna(False).to_numpy(dtype=bool)
        keep = np.flatnonzero(mask)
        return RunCollection(tuple(self.runs[i] for i in keep), self.index.iloc[keep].reset_index(drop=True))

    def pairs(self, factor: str = "variant", baseline: str = "baseline") -> list[RunPair]:
        """Pair every non-baseline run with the baseline run sharing its init and data order."""
        if factor not in self.index.columns:
            raise PairingError(f"no factor {factor!r} in these runs; known: {list(self.index.columns)}")
        out = []
        base = {}
        for r in self.runs:
            if r.factors.get(factor) == baseline:
                key = (r.init_id, r.data_order_id)
                if key in base:
                    raise PairingError(
                        f"two baseline runs share init and data order: {base[key].run_id}, {r.run_id}"
                    )
                base[key] = r
        for r in self.runs:
            if r.factors.get(factor) == baseline:
                continue
            b = base.get((r.init_id, r.data_order_id))
            if b is None:
                raise PairingError(f"run {r.run_id} has no {factor}={baseline} run with the same init and data order")
            out.append(pair(b, r))
        return out


def load_runs(tree: str | os.PathLike, on_incomplete: str = "raise") -> RunCollection:
    """Find every run under ``tree`` (any depth) and index them by their manifests.

    Grouping comes from manifests only, never from directory names. A directory that holds
    run files but no ``run.json`` is incomplete: ``on_incomplete="raise"`` (default) stops
    with their list, ``"skip"`` leaves them out.
    """
    root = Path(tree)
    if not root.is_dir():
        raise RunFormatError(f"{root}: not a directory")
    if on_incomplete not in ("raise", "skip"):
        raise ValueError("on_incomplete must be 'raise' or 'skip'")
    runs, incomplete = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        if S.MANIFEST in filenames:
            runs.append(load_run(dirpath))
            dirnames[:] = []  # a run's own subfolders hold no runs
        elif S.EXAMPLES in filenames or S.ATTENTION_DIR in dirnames:
            incomplete.append(dirpath)
            dirnames[:] = []
    if incomplete and on_incomplete == "raise":
        raise IncompleteRunError(
            f"{len(incomplete)} incomplete run(s) without {S.MANIFEST} under {root}: "
            + ", ".join(incomplete[:5])
            + (" ..." if len(incomplete) > 5 else "")
            + " (pass on_incomplete='skip' to leave them out)"
        )
    if not runs:
        raise RunFormatError(f"{root}: no runs found (no {S.MANIFEST} below it)")
    ids = [r.run_id for r in runs]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise RunFormatError(f"{root}: run_id repeated across directories: {sorted(dup)}")
    rows = []
    for r in runs:
        row = {
            "run_id": r.run_id,
            "path": str(r.path),
            "study": r.study,
            "seed": r.seed,
            "init_id": r.init_id,
            "data_order_id": r.data_order_id,
        }
        for k, v in r.factors.items():
            if k in row:
                raise RunFormatError(f"{r.path}: factor name {k!r} clashes with an index column")
            row[k] = v
        rows.append(row)
    index = pd.DataFrame(rows)
    index["seed"] = index["seed"].astype("Int64")
    return RunCollection(tuple(runs), index)


def describe(obj: "Run | RunCollection") -> tuple[str, pd.DataFrame]:
    """(title, frame): one row per run with its id, study, seed, factors, examples, steps and forms."""
    runs = [obj] if isinstance(obj, Run) else list(obj)
    rows = []
    for r in runs:
        rows.append({"run_id": r.run_id, "study": r.study, "seed": r.seed, **{k: str(v) for k, v in r.factors.items()},
                     "examples": len(r.examples(["example_id"])), "steps": ",".join(map(str, r.attention_steps)),
                     "final forms": ",".join(r.attention_forms()) if r.attention_steps else "",
                     "init": r.init_id[:10]})
    return f"{len(runs)} run(s)", pd.DataFrame(rows)
