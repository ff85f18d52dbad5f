"""Load and validate one run directory (the contract is in :mod:`routestats.rundir.schema`).

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
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from routestats.rundir import schema as S
from routestats.rundir.blocks import (
    ExampleAttention, ExampleReductions, ExampleRows, check_grid, decoding, iter_block_groups, iter_blocks, matrices_block,
    parquet_file, read_table, reductions_block,
)
from routestats.rundir.verify import run_file, verified_sha256
from routestats.errors import IncompleteRunError, IntegrityError, RunFormatError, SchemaVersionError  # noqa: F401
from routestats.rundir.manifest import check_schema, read_manifest
from routestats.rundir.examples import validate_examples
from routestats.rundir.reduction_batches import GroupReductions, ReductionBatch, batch_by_length, reductions_group

__all__ = ["Run", "ExampleAttention", "ExampleReductions", "load_run", "is_bias_off"]


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
    def causal(self) -> bool:
        """Whether the model attends causally (``attention.causal``; default false)."""
        return bool(self.manifest["attention"].get("causal", False))

    @property
    def pretrained(self) -> bool:
        """A pretrained model evaluated as it is (``pretrained: true``), not a run the runners trained."""
        return bool(self.manifest.get("pretrained", False))

    @property
    def capture(self) -> dict | None:
        """How a pretrained model's attention was captured (``python -m runners capture``), read
        defensively from the manifest (entries of the wrong type are left out): model class, family,
        model type, dtype, quantisation, capture path, tokenizer inputs, special-token policy, cap,
        truncation policy and counts, the model's layer count and the layers stored (None: all), a hybrid's
        layers without an attention matrix (``no_attention_matrix``: linear attention or state-space layers),
        and for a checkpoint pair its reason. None for other runs."""
        m, ev = self.manifest, self.manifest.get("evaluation")
        if not self.pretrained or not isinstance(ev, dict):
            return None
        model = m.get("model") if isinstance(m.get("model"), dict) else {}
        cap = ev.get("capture") if isinstance(ev.get("capture"), dict) else {}
        trunc = ev.get("truncation") if isinstance(ev.get("truncation"), dict) else {}
        quant = model.get("quantisation") if isinstance(model.get("quantisation"), dict) else None
        pairing = m.get("pairing") if isinstance(m.get("pairing"), dict) else {}
        text = lambda v: v if isinstance(v, str) else None  # noqa: E731
        count = lambda v: v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None  # noqa: E731
        cut = trunc.get("tokens_cut") if isinstance(trunc.get("tokens_cut"), dict) else {}
        return {
            "class": text(model.get("class")), "family": text(model.get("family")),
            "model_type": text(model.get("model_type")), "dtype": text(model.get("dtype")),
            "quantisation": None if quant is None else {k: text(quant.get(k)) for k in ("format", "file_type",
                                                                                         "dequantised_to")},
            "path": text(cap.get("path")), "inputs": [x for x in cap.get("inputs", []) if isinstance(x, str)]
            if isinstance(cap.get("inputs"), list) else [],
            "special_tokens": text(ev.get("special_tokens")), "cap": count(ev.get("cap")),
            "truncation": text(trunc.get("policy")), "examples_truncated": count(trunc.get("examples_truncated")),
            "fallbacks": count(trunc.get("fallback_longest_first")),
            "tokens_cut": {str(k): v for k, v in cut.items() if count(v) is not None},
            "pairing_reason": text(pairing.get("reason")) if pairing.get("kind") == "checkpoints" else None,
            **stored_layers(count(model.get("layers")), cap.get("layers_stored")),
            "no_attention_matrix": [x for x in cap["no_attention_matrix"] if count(x) is not None]
            if isinstance(cap.get("no_attention_matrix"), list) else [],
        }

    @property
    def attention_steps(self) -> list[int]:
        return sorted(int(s) for s in self.manifest["attention"].get("steps", {}))

    @property
    def final_step(self) -> int:
        steps = self.attention_steps
        if not steps:
            raise RunFormatError(f"{self.path}: the run holds no attention")
        return steps[-1]

    def has(self, rel: str) -> bool:
        """Whether the run lists the file ``rel`` in its manifest."""
        return any(e["path"] == rel for e in self.manifest["files"])

    # -- verification ----------------------------------------------------
    def verify(self, rel: str) -> str:
        """SHA-256 of the run's file ``rel``, checked against ``run.json``; remembered for provenance.

        A file the manifest does not list is refused: nothing is read that the manifest does not describe.
        """
        done = self.__dict__.setdefault("_verified", {})
        # checked at every open, not once: a stat confirms an unchanged file (its stamp), and a file
        # replaced since (rewritten, renamed over) is hashed again and refused
        want = {e["path"]: e["sha256"] for e in self.manifest["files"]}.get(rel)
        if want is None:
            raise RunFormatError(f"{self.path}: {rel} is not listed in {S.MANIFEST}, so it cannot be verified")
        p = run_file(self.path, rel)
        if not p.is_file():
            raise RunFormatError(f"{self.path}: missing {rel}")
        got = verified_sha256(p)
        if got != want:
            raise IntegrityError(
                f"{p}: SHA-256 {got[:12]}... differs from run.json ({want[:12]}...); the file changed after the "
                "run was written"
            )
        done[rel] = got
        return got

    def verified_files(self) -> dict[str, str]:
        """path -> SHA-256 of every file verified so far (what an analysis actually read)."""
        return dict(self.__dict__.get("_verified", {}))

    def _file(self, rel: str) -> Path:
        """The path of a listed file, verified against the manifest before it is opened."""
        self.verify(rel)
        return self.path / rel

    # -- tables ----------------------------------------------------------
    @functools.cached_property
    def _examples_table(self) -> pa.Table:
        """examples.parquet as validated Arrow (one chunk per column): 18 MB for 70,000 examples without
        tokens, where a pandas frame holds one numpy array per row and list column; columns are
        converted when :meth:`examples` asks for them."""
        if not self.has(S.EXAMPLES):
            raise RunFormatError(f"{self.path}: missing {S.EXAMPLES}")
        fname = self._file(S.EXAMPLES)
        with decoding(fname):
            table = read_table(fname)
            check_schema(str(fname), table.schema, S.EXAMPLES_SCHEMA)
            # the file's pandas metadata is untrusted text that to_pandas would parse (a corrupt one ended in a
            # JSONDecodeError): the schema, checked above, is all a frame needs
            table = table.combine_chunks().replace_schema_metadata(None)
            validate_examples(table, str(fname), self.manifest["fields"]["vocab_size"])
        return table

    def examples(self, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The evaluated examples (see :data:`routestats.rundir.schema.EXAMPLES_SCHEMA`).

        Returns a new frame (only the ``columns`` asked for), indexed 0..n-1 in stored order.
        """
        t = self._examples_table
        return (t if columns is None else t.select(list(columns))).to_pandas()

    def _table(self, name: str) -> pd.DataFrame:
        if not self.has(name):
            raise RunFormatError(f"{self.path}: this run has no {name}")
        fname = self._file(name)
        with decoding(fname):
            table = read_table(fname)
            check_schema(str(fname), table.schema, S.TABLE_SCHEMAS[name])
            df = table.to_pandas()
        if "step" in df.columns and len(df):
            steps = df["step"].to_numpy()
            if (steps < 0).any():
                raise RunFormatError(f"{fname}: column 'step' holds a negative step {int(steps.min())}")
            by = df.groupby("phase")["step"] if "phase" in df.columns else [(None, df["step"])]
            for phase, st in by:
                if (st.diff().dropna() < 0).any():
                    raise RunFormatError(f"{fname}: column 'step' is not in increasing order"
                                         + (f" within phase {phase!r}" if phase is not None else ""))
        return df

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
    def attention_file(self, step: int | None = None, form: str = S.FORM_MATRICES) -> str:
        """The run-relative path of the attention file of ``form`` at ``step`` (default: the last), not yet
        opened: refused unless the manifest lists it."""
        step = self.final_step if step is None else int(step)
        if step not in self.attention_steps:
            raise RunFormatError(
                f"{self.path}: no attention at step {step}; stored steps: {self.attention_steps}"
            )
        if form not in self.attention_forms(step):
            raise RunFormatError(
                f"{self.path}: attention form {form!r} not stored at step {step} (has {self.attention_forms(step)})"
            )
        rel = S.attention_file(step, form)
        if not self.has(rel):
            raise RunFormatError(f"{self.path}: {rel} is not listed in {S.MANIFEST}")
        return rel

    def attention_path(self, step: int | None = None, form: str = S.FORM_MATRICES) -> Path:
        """The attention file of ``form`` at ``step``, verified whole against the manifest."""
        return self._file(self.attention_file(step, form))

    def iter_attention(
        self,
        step: int | None = None,
        examples: Sequence[int] | None = None,
        layers: Sequence[int] | None = None,
    ) -> Iterator[ExampleAttention]:
        """Stream full attention matrices one example at a time (row group by row group).

        Every block is validated: finite, non-negative, ``n`` equal to the example's
        evaluated length, softmax rows summing to 1 within
        :data:`routestats.rundir.schema.ROW_SUM_ATOL` for the stored dtype. A few ``examples`` of a file
        whose manifest entry lists ``parts`` are read through :meth:`verified_pieces`: only the pieces read
        are hashed.
        """
        rel = self.attention_file(step, S.FORM_MATRICES)
        path = self.path / rel
        dtype = self.manifest["attention"]["dtype"]
        source = self.verified_pieces(rel) if examples is not None else None
        try:
            pf = parquet_file(source if source is not None else self._file(rel))
            check_schema(str(path), pf.schema_arrow, S.attention_matrices_schema(dtype, value_norms=True),
                          S.MATRICES_REQUIRED)
            lengths = self._lengths()
            yield from _stream(path, iter_blocks(pf, examples, layers, str(path)),
                               lambda ex, rows: matrices_block(str(path), ex, rows, lengths, dtype, self.causal))
        except RunFormatError:
            if source is not None and source.failure is not None:  # Arrow wraps what its reads raised
                raise source.failure from None
            raise
        finally:
            if source is not None:
                source.close()

    def verified_pieces(self, rel: str):
        """A read-only file object over the run's file ``rel`` that verifies each piece it reads against the
        manifest's ``parts`` (:class:`routestats.rundir.parts.PartVerifiedFile`); None when the entry lists no
        parts (a small file, or a run written before parts were listed) or the file was verified whole already.
        The pieces verified are remembered for provenance (:meth:`partly_verified`)."""
        from routestats.rundir.parts import PartVerifiedFile

        entry = next((e for e in self.manifest["files"] if e["path"] == rel), None)
        if entry is None or "parts" not in entry or rel in self.__dict__.get("_verified", {}):
            return None
        p = run_file(self.path, rel)
        if not p.is_file():
            raise RunFormatError(f"{self.path}: missing {rel}")
        parts = entry["parts"]
        seen = self.__dict__.setdefault("_pieces", {}).setdefault(rel, set())
        try:
            f = PartVerifiedFile(p, entry["bytes"], parts["bytes"], parts["sha256"])
        except OSError as exc:  # unreadable (permissions, a folder swapped in): refused, as a whole read is
            raise RunFormatError(f"{p}: cannot be read ({exc.strerror or exc})") from None
        f.verified = seen  # shared: every reader of the file adds the pieces it verified
        return f

    def partly_verified(self) -> dict[str, dict]:
        """path -> ``{"sha256": the file's digest in run.json, "pieces": [indices verified], "of": pieces}`` of
        every file read in part (its pieces checked as they were read) and not verified whole."""
        whole = self.__dict__.get("_verified", {})
        entries = {e["path"]: e for e in self.manifest["files"]}
        return {rel: {"sha256": entries[rel]["sha256"], "pieces": sorted(seen),
                      "of": len(entries[rel]["parts"]["sha256"])}
                for rel, seen in self.__dict__.get("_pieces", {}).items() if seen and rel not in whole}

    def iter_reductions(
        self,
        step: int | None = None,
        examples: Sequence[int] | None = None,
        layers: Sequence[int] | None = None,
    ) -> Iterator[ExampleReductions]:
        """Stream per-query reductions one example at a time (form ``reductions``)."""
        for item in self._reduction_items(step, examples, layers):
            if isinstance(item, GroupReductions):
                yield from item
            else:
                yield item

    def _reduction_items(self, step, examples, layers) -> Iterator[ExampleReductions | GroupReductions]:
        """The validated reductions in the file's order: a row group's examples together where the whole-group
        checks pass (:func:`~routestats.rundir.reduction_batches.reductions_group`), else one example at a time."""
        path = self.attention_path(step, S.FORM_REDUCTIONS)
        pf = parquet_file(path)
        check_schema(str(path), pf.schema_arrow, S.REDUCTIONS_SCHEMA, S.REDUCTIONS_REQUIRED)
        lengths = self._lengths()
        n_fields = len(self.field_ids)
        dtype = self.manifest["attention"].get("dtype", "float64")
        fname = str(path)
        groups = iter_block_groups(pf, examples, layers, fname)
        grid = None
        while True:
            with decoding(path):
                try:
                    cols, segs = next(groups)
                except StopIteration:
                    return
                if grid is None:  # the file's first example sets the grid every later one must hold
                    ex, s, e = segs[0]
                    first = reductions_block(fname, ex, ExampleRows(cols, s, e), lengths, n_fields, dtype)
                    grid = check_grid(fname, first, grid)
                    segs = segs[1:]
                else:
                    first = None
                # one vectorised check of the whole chunk; the per-example path when it finds anything
                blocks = reductions_group(fname, cols, segs, lengths, n_fields, dtype, grid) if segs else []
            if first is not None:
                yield first
            if blocks is not None:
                if len(blocks):
                    yield blocks
                continue
            for ex, s, e in segs:
                with decoding(path):
                    blk = reductions_block(fname, ex, ExampleRows(cols, s, e), lengths, n_fields, dtype)
                    grid = check_grid(fname, blk, grid)
                yield blk

    def iter_reduction_batches(self, step: int | None = None, examples: Sequence[int] | None = None,
                               budget_mb: float = 32) -> Iterator[ReductionBatch]:
        """The validated reductions of :meth:`iter_reductions`, stacked into batches of examples of
        one length (:class:`~routestats.rundir.blocks.ReductionBatch`; ``position`` gives each
        example's place in the file), holding at most about ``budget_mb`` of examples at a time."""
        yield from batch_by_length(self._reduction_items(step, examples, None), int(budget_mb * (1 << 20)))

    def _lengths(self) -> dict[int, int]:
        t = self._examples_table
        return dict(zip(t["example_id"].to_pylist(), t["length"].to_pylist()))

    # -- validation ------------------------------------------------------
    def validate(self, deep: bool = True) -> list[str]:
        """Check the whole run against the contract; return the list of checks passed.

        ``deep`` also verifies every file's SHA-256 against the manifest, every example's content hash and,
        where a step stores both forms, that its reductions are those of its matrices
        (:func:`routestats.rundir.validation.validate_run`). Raises :class:`~routestats.errors.RunFormatError`
        at the first failure.
        """
        from routestats.rundir.validation import validate_run

        return validate_run(self, deep)


def is_bias_off(run) -> bool:
    """A bias-off evaluation of a trained SAAB run (``eval_bias: off`` with its ``source_run``: the run whose
    weights it evaluates with the bias removed)."""
    return run.factors.get("eval_bias") == "off" and bool(run.manifest.get("source_run"))


def stored_layers(model_layers: int | None, stored) -> dict:
    """``model_layers``, ``layers_stored`` and ``layers_renumbered``: runs written before rows kept the model's
    layer numbers recorded the stored count as ``model.layers`` and numbered the stored layers 0..k-1; such a run
    is recognised by a stored layer at or beyond its recorded layer count.

    >>> stored_layers(2, [1])["layers_renumbered"], stored_layers(1, [1])["layers_renumbered"]
    (False, True)
    """
    stored = [x for x in stored if isinstance(x, int) and not isinstance(x, bool) and x >= 0] \
        if isinstance(stored, list) else None
    renumbered = bool(stored) and model_layers is not None and max(stored) >= model_layers
    return {"model_layers": model_layers, "layers_stored": stored or None, "layers_renumbered": renumbered}


def _stream(path, blocks, build):
    """Per-example blocks of one attention file: decoded, validated and checked for one complete grid."""
    grid = None
    while True:
        with decoding(path):
            try:
                ex, rows = next(blocks)
            except StopIteration:
                return
            blk = build(ex, rows)
            grid = check_grid(str(path), blk, grid)
        yield blk


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
    return Run(p, read_manifest(p))

