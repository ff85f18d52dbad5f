"""Write run directories that honour the contract (used by the runners and by adapters).

Every file goes through :mod:`routestats.atomic`; ``run.json`` is written last, with the
SHA-256 of every file, so a run killed half-way has no manifest and reads as incomplete.

Examples
--------
>>> import tempfile, numpy as np, pandas as pd
>>> from routestats.rundir.read import load_run
>>> w = RunWriter(tempfile.mkdtemp() + "/run", run_id="demo", study="doc", factors={"variant": "baseline"},
...               seed=0, init_id="i", data_order_id="d",
...               fields={"named": {"3": "content", "4": "title"}, "mask_id": 5, "vocab_size": 6})
>>> w.write_examples(pd.DataFrame({"example_id": [0], "split": ["val"], "source_index": [0],
...     "prepared_length": [2], "cap": [256], "field_ids": [[4, 3]], "tokens": [["A", "b"]]}))
>>> with w.attention(step=1, dtype="float32") as sink:
...     sink.add(0, np.full((1, 2, 2, 2), 0.5))
>>> run = load_run(w.finalize())
>>> next(run.iter_attention()).weights.shape
(2, 2, 2)
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from routestats.rundir import schema as S
from routestats.rundir.atomic import atomic_path, sha256_file, sha256_parts, write_json_atomic, write_table_atomic
from routestats.errors import RoutestatsError, RunFormatError
from routestats.rundir.blocks import check_reductions, check_probabilities
from routestats.rundir.reductions import reduce_queries
from routestats.rundir.examples import validate_examples
from routestats.rundir.ownership import unlisted_files, written_by_runs
from routestats.rundir.replace import describe_paths, prune_empty

__all__ = ["RunWriter", "file_entry", "software_versions"]


def file_entry(run: Path, rel: str) -> dict:
    """The manifest's ``files`` entry of ``run/rel``: its SHA-256 and size, and for a file larger than
    :data:`routestats.rundir.schema.VERIFY_PART_BYTES` the SHA-256 of each piece (hashed in the same pass).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = (d / "a.bin").write_bytes(b"x" * 10)
    >>> sorted(file_entry(d, "a.bin"))
    ['bytes', 'path', 'sha256']
    """
    path = run / rel
    size = os.path.getsize(path)
    if size <= S.VERIFY_PART_BYTES:
        return {"path": rel, "sha256": sha256_file(path), "bytes": size}
    whole, parts = sha256_parts(path, S.VERIFY_PART_BYTES)
    return {"path": rel, "sha256": whole, "bytes": size, "parts": {"bytes": S.VERIFY_PART_BYTES, "sha256": parts}}


def software_versions(extra: Iterable[str] = ()) -> dict:
    """Versions of Python and the analysis stack (plus any ``extra`` importable names)."""
    import importlib.metadata as md

    out = {"python": platform.python_version(), "platform": platform.platform()}
    for name in ("routestats", "numpy", "pandas", "pyarrow", "scipy", *extra):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


class AttentionSink:
    """Streams one step's attention into Parquet, one row group per ``group_size`` examples -- or fewer, once the
    buffered examples hold :attr:`GROUP_BYTES` (long records: the host holds about one group, never the step)."""

    GROUP_BYTES = 64 * 2 ** 20

    def __init__(self, writer: "RunWriter", step: int, dtype: str, forms: Sequence[str], group_size: int,
                 value_norms: bool = False, layers: Sequence[int] | None = None):
        self._w = writer
        self.layers = None if layers is None else np.asarray(layers, dtype=np.int64)
        if self.layers is not None and (self.layers.ndim != 1 or not len(self.layers) or (self.layers < 0).any()
                                        or (self.layers > np.iinfo(np.int16).max).any()
                                        or (np.diff(self.layers) <= 0).any()):
            raise RoutestatsError(f"layers must be increasing layer numbers >= 0, got {list(layers)}")
        self.value_norms = bool(value_norms)
        self.step = int(step)
        self.dtype = dtype
        self.forms = tuple(forms)
        self.group_size = int(group_size)
        self._np_dtype = np.float16 if dtype == "float16" else np.float32
        self._stack = contextlib.ExitStack()
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._buf: dict[str, list] = {f: [] for f in self.forms}
        self._pending = 0
        self._bytes = 0  # buffered, for GROUP_BYTES
        self._seen: set[int] = set()
        self._grid: tuple[int, int] | None = None
        for form in self.forms:
            schema = (S.attention_matrices_schema(dtype, self.value_norms) if form == S.FORM_MATRICES
                      else S.REDUCTIONS_SCHEMA)
            tmp = self._stack.enter_context(atomic_path(writer.path / S.attention_file(step, form)))
            self._writers[form] = self._stack.enter_context(
                pq.ParquetWriter(tmp, schema, **S.PARQUET_OPTIONS, use_byte_stream_split=S.float_list_columns(schema))
            )

    def add(self, example_id: int, weights: np.ndarray, head_types: Sequence[str] | None = None,
            value_norms: np.ndarray | None = None) -> None:
        """Add one example's attention, shape (layers, heads, n, n) over its evaluated positions.

        ``head_types`` gives each head's type (length ``heads``; default all ``softmax``).
        ``value_norms`` (layers, heads, n): per key the norm of the vector each head transports,
        required when the sink was opened with ``value_norms=True`` (and refused otherwise).
        Values are cast to the storage dtype before anything is derived from them.
        """
        ex = self._new_example(example_id)
        w = np.asarray(weights)
        g = self._w._field_ids[ex]
        n = len(g)
        if w.ndim != 4 or w.shape[2:] != (n, n):
            raise RoutestatsError(
                f"attention of example_id {ex} has shape {w.shape}, expected (layers, heads, {n}, {n})"
            )
        n_layers, n_heads = w.shape[:2]
        layer, head, htype = self._rows(ex, n_layers, n_heads, head_types)
        stored = w.astype(self._np_dtype).reshape(n_layers * n_heads, n, n)
        try:  # the reader's checks, applied to exactly what will be stored
            check_probabilities(f"attention of example_id {ex}", ex, layer, head, htype.astype(str), stored, self.dtype)
        except RunFormatError as exc:
            raise RoutestatsError(str(exc)) from None
        base = self._base(ex, layer, head, htype, n)
        norms = self._norms(ex, value_norms, (n_layers, n_heads, n))
        if S.FORM_MATRICES in self.forms:
            row = {**base, "weights": stored.reshape(len(layer), n * n)}
            if norms is not None:
                row["value_norms"] = norms
            self._buf[S.FORM_MATRICES].append(row)
        if S.FORM_REDUCTIONS in self.forms:
            red = reduce_queries(stored, g, self._w._named)
            red["field_mass"] = red["field_mass"].reshape(len(layer), -1)
            self._buf[S.FORM_REDUCTIONS].append({**base, **red})
        self._added(ex)

    def _new_example(self, example_id) -> int:
        ex = int(example_id)
        if ex not in self._w._field_ids:
            raise RoutestatsError(f"example_id {ex} was not written to {S.EXAMPLES} first")
        if ex in self._seen:
            raise RoutestatsError(f"example_id {ex} added twice at step {self.step}")
        return ex

    def _rows(self, ex: int, n_layers: int, n_heads: int, head_types):
        """(layer, head, head type) of the example's rows, after checking its grid and head types."""
        types = ["softmax"] * n_heads if head_types is None else list(head_types)
        if len(types) != n_heads or any(t not in S.HEAD_TYPES for t in types):
            raise RoutestatsError(f"head_types must list {n_heads} entries from {S.HEAD_TYPES}, got {types}")
        if self._grid is not None and self._grid != (n_layers, n_heads):
            raise RoutestatsError(f"attention of example_id {ex} has {n_layers} layers x {n_heads} heads, but earlier "
                                  f"examples have {self._grid[0]} x {self._grid[1]}")
        if self.layers is not None and len(self.layers) != n_layers:
            raise RoutestatsError(f"attention of example_id {ex} has {n_layers} layers, but the sink was opened for "
                                  f"layers {self.layers.tolist()}")
        self._grid = (n_layers, n_heads)
        labels = np.arange(n_layers) if self.layers is None else self.layers
        return (np.repeat(labels.astype(np.int16), n_heads),
                np.tile(np.arange(n_heads, dtype=np.int16), n_layers),
                np.tile(np.asarray(types, dtype=object), n_layers))

    @staticmethod
    def _base(ex: int, layer, head, htype, n: int) -> dict:
        return {"example_id": np.full(len(layer), ex, dtype=np.int64), "layer": layer, "head": head,
                "head_type": htype, "n": np.full(len(layer), n, dtype=np.int32)}

    def _norms(self, ex: int, value_norms, shape) -> np.ndarray | None:
        """The checked value norms as (rows, n) float32, or None (required iff the sink stores them)."""
        if (value_norms is not None) != self.value_norms:
            raise RoutestatsError(f"example_id {ex}: value_norms {'missing' if self.value_norms else 'given'}, but the "
                                  f"sink was opened with value_norms={self.value_norms}")
        if value_norms is None:
            return None
        norms = np.asarray(value_norms, dtype=np.float32)
        if norms.shape != shape:
            raise RoutestatsError(f"value_norms of example_id {ex} has shape {norms.shape}, expected {shape}")
        if not np.isfinite(norms).all() or (norms < 0).any():
            raise RoutestatsError(f"value_norms of example_id {ex} holds a non-finite or negative value")
        return norms.reshape(shape[0] * shape[1], shape[2])

    def _added(self, ex: int) -> None:
        self._seen.add(ex)
        self._pending += 1
        self._bytes += sum(getattr(v, "nbytes", 0) for rows in self._buf.values() if rows for v in rows[-1].values())
        if self._pending >= self.group_size or self._bytes >= self.GROUP_BYTES:
            self.flush()

    def add_reduced(self, example_id: int, reductions: dict, head_types: Sequence[str] | None = None) -> None:
        """Add one example's per-query reductions computed elsewhere (e.g. on a GPU, from the values
        cast to the storage dtype): ``row_mass``, ``entropy``, ``entropy_rownorm``, ``first_mass``
        of shape (layers, heads, n) and ``field_mass`` (layers, heads, n, F), float64. Only for a sink
        that stores reductions alone; the values are checked as the reader checks stored ones."""
        if self.forms != (S.FORM_REDUCTIONS,):
            raise RoutestatsError("add_reduced is for a sink that stores reductions only")
        ex = self._new_example(example_id)
        n, F = len(self._w._field_ids[ex]), len(self._w._named)
        fm = np.asarray(reductions["field_mass"], dtype=np.float64)
        if fm.ndim != 4 or fm.shape[2:] != (n, F):
            raise RoutestatsError(f"field_mass of example_id {ex} has shape {fm.shape}, expected (layers, heads, {n}, {F})")
        n_layers, n_heads = fm.shape[:2]
        layer, head, htype = self._rows(ex, n_layers, n_heads, head_types)
        rows = n_layers * n_heads
        red = {"field_mass": fm.reshape(rows, n * F)}
        for k in (c for c in S.REDUCTION_COLUMNS if c != "field_mass"):
            v = np.asarray(reductions[k], dtype=np.float64)
            if v.shape != (n_layers, n_heads, n):
                raise RoutestatsError(f"{k} of example_id {ex} has shape {v.shape}, expected ({n_layers}, {n_heads}, {n})")
            red[k] = v.reshape(rows, n)
        try:  # the reader's checks of stored reductions, applied to exactly what will be stored
            check_reductions(f"reductions of example_id {ex}", ex, layer, head, htype.astype(str),
                              {**red, "field_mass": fm.reshape(rows, n, F)}, n, self.dtype)
        except RunFormatError as exc:
            raise RoutestatsError(str(exc)) from None
        self._buf[S.FORM_REDUCTIONS].append({**self._base(ex, layer, head, htype, n), **red})
        self._added(ex)

    def flush(self) -> None:
        """Write buffered examples as one row group per form."""
        if not self._pending:
            return
        for form, rows in self._buf.items():
            schema = self._writers[form].schema
            cols = {}
            for f in schema:
                if pa.types.is_list(f.type):
                    # one row per (layer, head); list length varies between examples
                    parts = [r[f.name].reshape(len(r[f.name]), -1) for r in rows]
                    sizes = np.concatenate([np.full(len(p), p.shape[1], dtype=np.int64) for p in parts])
                    offsets = np.concatenate([[0], np.cumsum(sizes)])
                    if offsets[-1] > np.iinfo(np.int32).max:  # a list column's offsets are int32
                        raise RoutestatsError(f"{f.name}: one example holds {offsets[-1]:,} values, more than a "
                                              "row group's list column can (2^31 - 1); store the reductions form")
                    offsets = offsets.astype(np.int32)
                    flat = np.concatenate([p.ravel() for p in parts])
                    cols[f.name] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, f.type.value_type))
                else:
                    cols[f.name] = pa.array(np.concatenate([r[f.name] for r in rows]), f.type)
            self._writers[form].write_table(pa.table(cols, schema=schema))
            self._buf[form] = []
        self._pending = self._bytes = 0

    def close(self, ok: bool = True) -> None:
        if ok:
            self.flush()
            for w in self._writers.values():
                w.close()
            self._stack.close()
            missing = set(self._w._field_ids) - self._seen
            if missing:
                raise RoutestatsError(
                    f"attention at step {self.step} lacks {len(missing)} example(s) of {S.EXAMPLES}, "
                    f"e.g. {sorted(missing)[:5]}"
                )
            self._w._steps[self.step] = sorted(set(self._w._steps.get(self.step, [])) | set(self.forms))
            self._w._dtype = self.dtype
        else:
            for w in self._writers.values():
                with contextlib.suppress(Exception):
                    w.close()
            self._stack.__exit__(RuntimeError, RuntimeError("aborted"), None)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close(ok=True)
        else:
            self.close(ok=False)
        return False


class RunWriter:
    """Write one run directory through the contract.

    Parameters
    ----------
    path : path-like
        The run directory. An existing complete run is refused unless ``overwrite``; an
        incomplete one (no ``run.json``) is cleared first.
    run_id, study, factors, seed, init_id, data_order_id, fields
        Required manifest entries (see :data:`routestats.rundir.schema.MANIFEST_REQUIRED`).
    overwrite : bool
        Replace an existing complete run (its ``run.json`` is removed first, so a crash while
        rewriting leaves an incomplete run, never a stale manifest).
    resume : bool
        Keep the files of an incomplete run (a training resumed after a kill); re-list
        earlier attention steps with :meth:`adopt_attention`.
    causal : bool
        The model attends causally (a decoder): recorded as ``attention.causal``; the reader
        then checks that no query attends to a later position.
    """

    def __init__(self, path, *, run_id, study, factors, seed, init_id, data_order_id, fields, overwrite=False,
                 resume=False, causal=False):
        self.path = Path(path)
        manifest_path = self.path / S.MANIFEST
        if manifest_path.exists():
            if not overwrite:
                raise RunFormatError(f"{self.path}: a complete run exists here (pass overwrite=True to replace it)")
            foreign = unlisted_files(self.path)
            if foreign:
                raise RunFormatError(f"{self.path}: holds files its run did not write ({describe_paths(foreign)}); "
                                     "a run is replaced only when it holds nothing else: move them")
            from routestats.rundir.replace import remove_written

            remove_written(self.path, written_by_runs(self.path))  # the manifest's files, while unchanged
            self.path.mkdir(parents=True, exist_ok=True)
        if self.path.exists() and not resume:  # an incomplete run of ours: only the files at the run layout's paths
            for rel in (S.EXAMPLES, S.METRICS, S.GRADIENTS, S.LM_SCORES):
                with contextlib.suppress(FileNotFoundError):
                    (self.path / rel).unlink()
            for f in sorted((self.path / S.ATTENTION_DIR).glob("step=*/*.parquet")):
                if f.name in {S.attention_file(0, form).rsplit("/", 1)[-1] for form in S.ATTENTION_FORMS}:
                    f.unlink()
            if (self.path / S.ATTENTION_DIR).is_dir():
                prune_empty(self.path / S.ATTENTION_DIR)
        self.path.mkdir(parents=True, exist_ok=True)
        named = {str(int(k)): str(v) for k, v in fields["named"].items()}
        self.fields = {**fields, "named": named}
        self._named = S.named_field_ids(self.fields)
        self.manifest = {
            "schema_version": S.SCHEMA_VERSION,
            "run_id": str(run_id),
            "study": str(study),
            "factors": dict(factors),
            "seed": None if seed is None else int(seed),
            "init_id": str(init_id),
            "data_order_id": str(data_order_id),
            "fields": self.fields,
        }
        self._files: list[str] = []
        self._field_ids: dict[int, np.ndarray] = {}
        self._steps: dict[int, list[str]] = {}
        self._dtype: str | None = None
        self._causal = bool(causal)

    def _register(self, rel: str) -> None:
        if rel not in self._files:
            self._files.append(rel)

    def write_examples(self, examples: pd.DataFrame) -> None:
        """Write ``examples.parquet``.

        Required columns: example_id, split, source_index, prepared_length, cap, field_ids
        (the evaluated positions). Optional: row_id, label, tokens, word_ids, is_primary,
        in_length_sample, in_test_sample (default False), length (computed as
        min(prepared_length, cap) and checked if given), content_sha256 (computed).
        """
        df = examples.copy().reset_index(drop=True)
        for col in ("example_id", "split", "source_index", "prepared_length", "cap", "field_ids"):
            if col not in df.columns:
                raise RoutestatsError(f"examples need a column {col!r}")
        expect = np.minimum(df["prepared_length"].to_numpy(), df["cap"].to_numpy())
        if "length" in df.columns and not np.array_equal(df["length"].to_numpy(), expect):
            raise RoutestatsError("examples: 'length' must equal min(prepared_length, cap)")
        df["length"] = expect
        for col in ("row_id", "label"):
            if col not in df.columns:
                df[col] = None
        for col in ("tokens", "word_ids"):
            if col not in df.columns:
                df[col] = None
        for col in ("is_primary", "in_length_sample", "in_test_sample"):
            if col not in df.columns:
                df[col] = False
        df["field_ids"] = [np.asarray(v, dtype=np.int16) for v in df["field_ids"]]
        if "content_sha256" not in df.columns:
            df["content_sha256"] = [S.content_hash(t, f) for t, f in zip(df["tokens"], df["field_ids"])]
        table = pa.Table.from_pandas(df[S.EXAMPLES_SCHEMA.names], schema=S.EXAMPLES_SCHEMA, preserve_index=False)
        # validate through the reader's rules before anything lands on disk
        validate_examples(table.combine_chunks(), S.EXAMPLES, self.fields["vocab_size"])
        write_table_atomic(self.path / S.EXAMPLES, table)
        self._field_ids = {int(e): np.asarray(f, dtype=np.int64) for e, f in zip(df["example_id"], df["field_ids"])}
        self._register(S.EXAMPLES)

    def attention(self, step: int, dtype: str = "float16", forms=(S.FORM_MATRICES,), group_size: int = 8,
                  value_norms: bool = False, layers: Sequence[int] | None = None) -> AttentionSink:
        """Open a streaming sink for one step's attention (use as a context manager); ``value_norms``
        adds the per-key transported-vector norms to the matrices (schema 1.1). ``layers`` names the
        model's layer number of each stored layer when a subset is stored (default 0, 1, ...)."""
        if not self._field_ids:
            raise RoutestatsError("write the examples before the attention")
        if self._dtype is not None and dtype != self._dtype:
            raise RoutestatsError(f"all steps of a run share one dtype ({self._dtype})")
        if dtype not in S.ATTENTION_DTYPES:
            raise RoutestatsError(f"attention dtype must be one of {S.ATTENTION_DTYPES}")
        for f in forms:
            self._register(S.attention_file(step, f))
        return AttentionSink(self, step, dtype, forms, group_size, value_norms and S.FORM_MATRICES in forms, layers)

    def adopt_attention(self, step: int, forms: Sequence[str], dtype: str) -> None:
        """List attention files already on disk (written before a resume) in the manifest."""
        if self._dtype is not None and dtype != self._dtype:
            raise RoutestatsError(f"all steps of a run share one dtype ({self._dtype})")
        for f in forms:
            rel = S.attention_file(step, f)
            if not (self.path / rel).is_file():
                raise RoutestatsError(f"{self.path / rel}: cannot adopt a missing attention file")
            self._register(rel)
        self._steps[int(step)] = sorted(set(self._steps.get(int(step), [])) | set(forms))
        self._dtype = dtype

    def _write_frame(self, rel: str, df: pd.DataFrame) -> None:
        schema = S.TABLE_SCHEMAS[rel]
        missing = [f.name for f in schema if f.name not in df.columns and not f.nullable]
        if missing:
            raise RoutestatsError(f"{rel}: missing columns {missing}")
        df = df.copy()
        for f in schema:
            if f.name not in df.columns:
                df[f.name] = None
        table = pa.Table.from_pandas(df[schema.names], schema=schema, preserve_index=False)
        write_table_atomic(self.path / rel, table)
        self._register(rel)

    def write_metrics(self, df: pd.DataFrame) -> None:
        """Write ``metrics.parquet`` (see :data:`routestats.rundir.schema.METRICS_SCHEMA`)."""
        self._write_frame(S.METRICS, df)

    def write_gradients(self, df: pd.DataFrame) -> None:
        """Write ``gradients.parquet`` (see :data:`routestats.rundir.schema.GRADIENTS_SCHEMA`)."""
        self._write_frame(S.GRADIENTS, df)

    def write_lm_scores(self, df: pd.DataFrame) -> None:
        """Write ``lm_scores.parquet`` (see :data:`routestats.rundir.schema.LM_SCORES_SCHEMA`)."""
        self._write_frame(S.LM_SCORES, df)

    def add_file(self, rel: str) -> None:
        """List a file written by the caller (e.g. a checkpoint) in the manifest."""
        if not (self.path / rel).is_file():
            raise RoutestatsError(f"{self.path / rel}: no such file")
        self._register(rel)

    def finalize(self, **extra) -> Path:
        """Hash every file and write ``run.json`` last; return the run path.

        ``extra`` adds optional manifest keys (model, training, dataset, evaluation,
        software, git_commit, pairing, notes).
        """
        if S.EXAMPLES not in self._files:
            raise RoutestatsError("a run needs examples.parquet")
        files = [file_entry(self.path, rel) for rel in self._files]
        manifest = {
            **self.manifest,
            "attention": {
                "dtype": self._dtype,
                "steps": {str(k): v for k, v in sorted(self._steps.items())},
                "causal": self._causal,
            },
            "files": files,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "software": software_versions(),
        }
        manifest.update(extra)
        write_json_atomic(self.path / S.MANIFEST, manifest)
        return self.path
