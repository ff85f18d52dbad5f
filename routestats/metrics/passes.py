"""The reduction pass: one pass over a run's attention at one step gives the per example x layer x
head frame every routing table aggregates (every registered metric of
:mod:`routestats.metrics.definitions`, valid and trivial query counts, field-to-field mass), from
either storage form, cached on the run object and on disk (keyed by the verified input files and
the code that computes it). Norm-weighted attention and rollout (METHODS III 3.5-3.6) feed the same
pass from full matrices.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from routestats.errors import RoutestatsError
from routestats.metrics.definitions import extra_definitions
from routestats.rundir import schema as S
from routestats.rundir.memory import release_unused_memory
from routestats.rundir.read import Run
from routestats.rundir.reductions import SUMMARIES, reduce_queries, summarise_batch, summarise_queries
from routestats.rundir.verify import cache_dir

__all__ = ["WEIGHTINGS", "norm_weighted", "rollout", "trivial_default", "reduce_attention", "warm_cache",
           "code_version", "HeadPass", "head_pass", "resolve_step", "with_run_ids"]


@dataclass(frozen=True)
class HeadPass:
    """One reduction pass over a run's attention at one step: per example x layer x head metrics
    (``heads``), field-to-field masses aligned with its rows, and which source fields each row has."""

    heads: pd.DataFrame
    f2f: np.ndarray  # (rows, F, F) aligned with heads
    has_source: np.ndarray  # (rows, F)


def _choose_form(run: Run, step: int, form: str | None) -> str:
    forms = run.attention_forms(step)
    if form is not None:
        if form not in forms:
            raise RoutestatsError(f"{run.run_id}: attention form {form!r} is not stored at step {step} (has {forms})")
        return form
    if not forms:
        raise RoutestatsError(f"{run.run_id}: no attention stored at step {step} (steps: {run.attention_steps})")
    return S.FORM_REDUCTIONS if S.FORM_REDUCTIONS in forms else S.FORM_MATRICES


WEIGHTINGS = ("attention", "norm", "rollout")


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """SHA-256 of the code that defines a cached table: this module, the reductions, the contract
    (the schema and its version) and the checks every value read passes (blocks, reduction batches):
    a stricter check never serves a table computed under a looser one. Any edit to them gives new
    keys, so nothing is bumped by hand."""
    from routestats.rundir import blocks, reduction_batches, reductions

    h = hashlib.sha256()
    for mod in (sys.modules[__name__], reductions, S, blocks, reduction_batches):
        h.update(Path(mod.__file__).read_bytes())
    h.update(S.SCHEMA_VERSION.encode())
    return h.hexdigest()


def _metrics_version() -> str:
    """The registered metrics that are not built in, by name and code (they are columns of the table)."""
    import inspect

    out = []
    for name, fn in sorted(extra_definitions().items()):
        try:
            code = inspect.getsource(fn)
        except (OSError, TypeError):  # defined where no source is kept: never cached on disk
            return ""
        out.append(f"{name}:{hashlib.sha256(code.encode()).hexdigest()}")
    return ",".join(out)


def _cache_key(run: Run, step: int, form: str, trivial: str = "include", weighting: str = "attention") -> str | None:
    """Key of a derived table: the verified SHA-256 of its input files (never the manifest's claim
    alone: :meth:`Run.verify` hashes what is on disk), the code that computes it
    (:func:`code_version`) and the registered metrics; None when a metric's code is unknown."""
    extra = _metrics_version()
    if extra == "" and extra_definitions():
        return None
    parts = [code_version(), extra, run.run_id, str(step), form, run.verify(S.EXAMPLES),
             run.verify(S.attention_file(step, form)), json.dumps(run.manifest["fields"], sort_keys=True),
             f"causal={run.causal}", f"trivial={trivial}"]
    if weighting != "attention":
        parts.append(f"weighting={weighting}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def norm_weighted(weights: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """Norm-weighted attention (METHODS III 3.5): A_ij nu_j / sum_k A_ik nu_k per row, for weights
    (rows, n, n) and transported-vector norms (rows, n). A row with no weighted mass (every key it
    attends to transports a zero vector: a pruned head) has no norm-weighted attention: NaN, so that
    its head is left out of the means (and counted), never averaged in as 0.

    >>> norm_weighted(np.array([[[0.5, 0.5], [1.0, 0.0]]]), np.array([[1.0, 3.0]])).tolist()
    [[[0.25, 0.75], [1.0, 0.0]]]
    >>> norm_weighted(np.array([[[0.5, 0.5]]]), np.array([[0.0, 0.0]])).tolist()
    [[[nan, nan]]]
    """
    num = np.asarray(weights, dtype=np.float64) * np.asarray(norms, dtype=np.float64)[:, None, :]
    den = num.sum(axis=-1, keepdims=True)
    return np.divide(num, den, out=np.full_like(num, np.nan), where=den > 0)


def rollout(weights: np.ndarray, n_layers: int) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020; METHODS III 3.6) of one example's weights
    (layers * heads, n, n), rows sorted by layer then head: R_l = (mean over heads + I) / 2 with rows
    renormalised, P_0 = R_0, P_l = R_l P_(l-1). Returns (layers, n, n).

    >>> P = rollout(np.tile(np.eye(3), (2, 1, 1)), 2)   # identity attention rolls out to the identity
    >>> bool(np.allclose(P, np.eye(3)))
    True
    """
    w = np.asarray(weights, dtype=np.float64)
    n = w.shape[-1]
    mean = w.reshape(n_layers, -1, n, n).mean(axis=1)
    r = 0.5 * mean + 0.5 * np.eye(n)
    r = r / r.sum(axis=-1, keepdims=True)
    out = np.empty_like(r)
    for layer in range(n_layers):
        out[layer] = r[layer] if layer == 0 else r[layer] @ out[layer - 1]
    return out


def _weighted(run: Run, step: int, blk, weighting: str):
    """One matrices block with its attention replaced by its norm-weighted form or its rollout."""
    from routestats.rundir.blocks import ExampleAttention

    if weighting == "norm":
        if blk.value_norms is None:
            raise RoutestatsError(f"{run.run_id}: no value norms stored at step {step} (norm-weighted attention "
                                  "needs matrices written with value_norms, run schema 1.1)")
        return ExampleAttention(blk.example_id, blk.layer, blk.head, blk.head_type,
                                norm_weighted(blk.weights, blk.value_norms))
    layers = np.unique(blk.layer)
    if not np.array_equal(layers, np.arange(len(layers))):
        raise RoutestatsError(f"{run.run_id}: rollout multiplies every layer from layer 0 up, but this run "
                              f"stores layers {layers.tolist()} only")
    return ExampleAttention(blk.example_id, layers, np.zeros(len(layers), dtype=np.int64),
                            np.full(len(layers), "softmax", dtype=object), rollout(blk.weights, len(layers)))


def _cache_load(path: Path) -> HeadPass | None:
    """The cached pass at ``path``, only when its seal matches (an edited or planted entry is recomputed)."""
    import io as _io

    from routestats.rundir.verify import sealed

    try:
        data = path.read_bytes()
        if not sealed(path.name, data, Path(f"{path}.seal").read_text().strip()):
            return None
        with np.load(_io.BytesIO(data), allow_pickle=False) as z:
            heads = pd.DataFrame({k[2:]: z[k] for k in z.files if k.startswith("h_") and k not in ("h_run_id", "h_step")})
            return HeadPass(heads, z["f2f"], z["has_source"])
    except (OSError, KeyError, ValueError):
        return None


def _cache_save(path: Path, p: HeadPass) -> None:
    import io as _io

    from routestats.rundir.atomic import write_bytes_atomic

    buf = _io.BytesIO()
    arrays = {f"h_{c}": (p.heads[c].to_numpy().astype(str) if p.heads[c].dtype == object or str(p.heads[c].dtype) in
                         ("str", "string") else p.heads[c].to_numpy()) for c in p.heads.columns}
    np.savez(buf, f2f=p.f2f, has_source=p.has_source, **arrays)
    from routestats.rundir.verify import seal

    tag = seal(path.name, buf.getvalue())
    if tag is None:
        return
    try:
        write_bytes_atomic(Path(f"{path}.seal"), tag.encode())
        write_bytes_atomic(path, buf.getvalue())
    except OSError:  # a read-only or full cache never breaks an analysis
        pass


def resolve_step(run: Run, step: int | None) -> int:
    """``step``, or the run's final step when None."""
    return run.final_step if step is None else int(step)


# columns the pass's frame stores narrower than the int64 its callers get (2 x 70,000 pair: 47 MB less at
# the report's peak); layer stays int64, the key of every grouping
_NARROW = {"head": np.int16, "n_valid": np.int32, "n_trivial": np.int32}


def with_run_ids(frame: pd.DataFrame, run: Run, step: int | None) -> pd.DataFrame:
    """``frame`` with the run_id and step columns first (the pass's frame does not store them), and its
    narrow integer columns as int64."""
    for c in _NARROW:
        if c in frame.columns:
            frame[c] = frame[c].astype(np.int64)
    frame.insert(0, "step", resolve_step(run, step))
    frame.insert(0, "run_id", run.run_id)
    return frame


def head_pass(run: Run, step: int | None = None, form: str | None = None, trivial: str | None = None,
          weighting: str = "attention") -> HeadPass:
    """Reduce a run's attention at one step once; cached on the run object and on disk
    (keyed by the input files' SHA-256, see :func:`cache_dir`).

    ``weighting``: ``attention`` (the weights), ``norm`` (norm-weighted attention) or ``rollout``
    (one "head" per layer: the rolled-out attention); the last two need full matrices."""
    if weighting not in WEIGHTINGS:
        raise RoutestatsError(f"weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}")
    step = resolve_step(run, step)
    if weighting != "attention":
        if S.FORM_MATRICES not in run.attention_forms(step):
            raise RoutestatsError(f"{run.run_id}: {weighting} attention needs full matrices, and step {step} stores "
                                  f"{', '.join(run.attention_forms(step)) or 'none'}")
        form = S.FORM_MATRICES
    form = _choose_form(run, step, form)
    trivial = trivial_default(run, trivial)
    cache = run.__dict__.setdefault("_metric_cache", {})
    key = lambda w: (step, form, trivial, w, tuple(extra_definitions().items()))  # noqa: E731
    # the flow weightings read the same matrices: one read gives both, where neither cache holds the other
    wanted = (weighting, *(w for w in FLOW if weighting in FLOW and w != weighting))
    for w in wanted:
        if key(w) not in cache and (hit := _disk(run, step, form, trivial, w, None)) is not None:
            cache[key(w)] = hit
    if key(weighting) in cache:
        return cache[key(weighting)]
    also = tuple(w for w in wanted[1:] if key(w) not in cache)
    named = run.field_ids
    ex = run.examples(["example_id", "field_ids"])
    fields_by_ex = dict(zip(ex["example_id"].tolist(), ex["field_ids"]))
    if weighting == "attention" and form == S.FORM_REDUCTIONS:
        summaries = {weighting: _summaries_batched(run, step, fields_by_ex, named, trivial)}
    else:
        summaries = _summaries_per_example(run, step, form, (weighting, *also), fields_by_ex, named, trivial)
    for w in list(summaries):
        cache[key(w)] = _as_pass(*summaries.pop(w))
        _disk(run, step, form, trivial, w, cache[key(w)])
    release_unused_memory()  # the pass's freed batches, before the tables allocate their own
    return cache[key(weighting)]


FLOW = ("norm", "rollout")  # the weightings computed from full matrices


def _as_pass(cols: dict, f2f: np.ndarray, has: np.ndarray) -> HeadPass:
    heads = pd.DataFrame(cols, copy=False)  # the columns are fresh arrays: no second copy of them
    del cols
    heads["layer"] = heads["layer"].astype(np.int64)
    for c, narrow in _NARROW.items():  # int64 again wherever a caller is given rows (with_run_ids)
        heads[c] = heads[c].astype(narrow)  # lazy under copy-on-write: no copy when already narrow
    # run_id and step are the same on every row: kept out of the frame (37 MB a run at 70,000 examples)
    # and put back by with_run_ids where a caller is given rows
    return HeadPass(heads, f2f, has)


def _disk(run: Run, step: int, form: str, trivial: str, weighting: str, save: HeadPass | None) -> HeadPass | None:
    """The on-disk cache of a pass (:func:`cache_dir`; None when it is off): ``save`` None reads the entry (None
    when missing or unsealed), else writes ``save``."""
    folder = cache_dir()
    key_disk = _cache_key(run, step, form, trivial, weighting) if folder is not None else None
    if key_disk is None:
        return None
    disk = folder / f"{key_disk}.npz"
    if save is not None:
        _cache_save(disk, save)
        return save
    return _cache_load(disk) if disk.is_file() else None


_HEAD_TYPE_ORDER = tuple(sorted(S.HEAD_TYPES))  # sorted: head types as codes by searchsorted


def _summaries_batched(run: Run, step: int, fields_by_ex, named, trivial):
    """Summaries of every example from stored reductions, one vectorised pass per batch of examples
    of equal length; rows come back in the file's example order (bitwise what the per-example pass gives).

    Each batch's summaries are written straight to their places (``position``: the example's place in
    the file) in arrays made once for every example ``examples.parquet`` lists, so no second copy of a
    run's summaries is ever alive (a 2 x 70,000 pair's pass peaked with both)."""
    n_max = len(fields_by_ex)  # the reader refuses examples the table does not list
    extra = extra_definitions()
    names = (*SUMMARIES, *extra)
    out: dict | None = None
    seen = 0
    for b in run.iter_reduction_batches(step):
        g = np.stack([np.asarray(fields_by_ex[e]) for e in b.example_id.tolist()])
        sm = summarise_batch(b.reductions, g, named, run.causal, trivial, extra, np.asarray(b.head_type) == "sink")
        pos = b.position
        if out is None:
            rows, F = len(b.layer), sm["has_source"].shape[-1]
            layer, head = b.layer, b.head
            out = {k: np.empty((n_max, rows)) for k in names}
            out["f2f"] = np.empty((n_max, rows, F, F))
            out["has_source"] = np.empty((n_max, F), dtype=bool)
            out["example_id"] = np.empty(n_max, dtype=np.int64)
            out["n_valid"] = np.empty(n_max, dtype=_NARROW["n_valid"])
            out["n_trivial"] = np.empty(n_max, dtype=_NARROW["n_trivial"])
            out["head_type"] = np.empty((n_max, rows), dtype=np.int8)  # index into HEAD_TYPES (the reader checked)
        if pos.size and int(pos.max()) >= n_max:
            raise RoutestatsError(f"{run.run_id}: the attention file at step {step} holds more examples than "
                                  f"{S.EXAMPLES} lists ({n_max})")
        for k in (*names, "f2f", "has_source", "n_valid", "n_trivial"):
            out[k][pos] = sm.pop(k)
        out["example_id"][pos] = b.example_id
        out["head_type"][pos] = np.searchsorted(_HEAD_TYPE_ORDER, b.head_type)
        seen += len(pos)
        del sm, b, g  # the batch's reductions and summaries, before the next batch is read
    if out is None:
        raise RoutestatsError(f"{run.run_id}: no attention rows at step {step}")
    n_ex = seen  # positions 0 .. seen - 1, each written once
    rows = len(layer)
    cols = {
        "example_id": np.repeat(out.pop("example_id")[:n_ex], rows),
        "layer": np.tile(layer, n_ex),
        "head": np.tile(head, n_ex),
        "head_type": np.asarray(_HEAD_TYPE_ORDER, dtype=object)[out.pop("head_type")[:n_ex].reshape(-1)],
    }
    for k in names:
        cols[k] = out.pop(k)[:n_ex].reshape(-1)
    for k in ("n_valid", "n_trivial"):
        cols[k] = np.repeat(out.pop(k)[:n_ex], rows)
    f2f = out.pop("f2f")[:n_ex]
    f2f = f2f.reshape((n_ex * rows,) + f2f.shape[2:])
    has = np.repeat(out.pop("has_source")[:n_ex], rows, axis=0)
    return cols, f2f, has


def _summaries_per_example(run: Run, step: int, form: str, weightings: tuple, fields_by_ex, named, trivial) -> dict:
    """Summaries of every example, one example at a time (matrices, or weighted attention), for each of
    ``weightings`` from one read of the file: {weighting: (columns, f2f, has_source)}. The first weighting's
    errors are raised; a later one that a block cannot give (no value norms, layers missing) is dropped."""
    extra = extra_definitions()
    names = (*SUMMARIES, *extra)
    acc = {w: ({k: [] for k in ("example_id", "layer", "head", "head_type", *names, "n_valid", "n_trivial")}, [], [])
           for w in weightings}
    blocks = run.iter_reductions(step) if form == S.FORM_REDUCTIONS else run.iter_attention(step)
    for raw in blocks:
        g = np.asarray(fields_by_ex[raw.example_id])
        for w in list(acc):
            try:
                blk = raw if w == "attention" else _weighted(run, step, raw, w)
            except RoutestatsError:
                if w == weightings[0]:
                    raise
                del acc[w]  # a companion this run cannot give: the asked weighting goes on alone
                continue
            if form == S.FORM_REDUCTIONS:
                red = {k: getattr(blk, k) for k in S.REDUCTION_COLUMNS}
            else:
                red = reduce_queries(blk.weights, g, named)
            _append(acc[w], blk, summarise_queries(red, g, named, run.causal, trivial, extra,
                                                   np.asarray(blk.head_type) == "sink"), names, len(named))
    if not acc[weightings[0]][1]:
        raise RoutestatsError(f"{run.run_id}: no attention rows at step {step}")
    return {w: ({k: np.concatenate(v) for k, v in cols.items()}, np.concatenate(f2f), np.concatenate(has))
            for w, (cols, f2f, has) in acc.items()}


def _append(acc, blk, summ: dict, names, n_named: int) -> None:
    """One block's summaries onto a weighting's columns (``acc``: columns, f2f, has_source)."""
    cols, f2f, has = acc
    r = len(blk.layer)
    cols["example_id"].append(np.full(r, blk.example_id, dtype=np.int64))
    cols["layer"].append(blk.layer)
    cols["head"].append(blk.head)
    cols["head_type"].append(blk.head_type)
    for k in names:
        cols[k].append(summ[k])
    cols["n_valid"].append(np.full(r, summ["n_valid"], dtype=_NARROW["n_valid"]))
    cols["n_trivial"].append(np.full(r, summ["n_trivial"], dtype=_NARROW["n_trivial"]))
    f2f.append(summ["f2f"])
    has.append(np.broadcast_to(summ["has_source"], (r, n_named)))


def reduce_attention(run: Run, step: int | None = None, trivial: str | None = None) -> None:
    """Reduce a run's attention at one step -- the one pass over its attention file that every metric
    of that step reads -- unless it is cached already. Calling it first is optional; it lets a caller
    show progress run by run before a table that needs several runs (the pass is most of the time
    of a large report).

    >>> from routestats.rundir.synthetic import demo_run_dir
    >>> from routestats.rundir.read import load_run
    >>> run = load_run(demo_run_dir() / "baseline")
    >>> reduce_attention(run)
    >>> len(run.__dict__["_metric_cache"])   # what the metrics of that step read from now on
    1
    """
    head_pass(run, step, trivial=trivial)


def _warm_one(args) -> int:
    from routestats.rundir.read import load_run

    path, steps = args
    run = load_run(path)
    for s in steps or run.attention_steps:
        head_pass(run, s)
    return len(steps or run.attention_steps)


def warm_cache(runs, workers: int = 2, steps=None) -> int:
    """Compute the per-example tables of many runs in a process pool, one run per task.

    The results land in the on-disk cache (:func:`cache_dir`), so the analysis that follows
    reads small cached tables instead of attention. A no-op returning 0 when the cache is
    off or ``workers`` < 2. Returns the number of (run, step) tables computed or found.
    """
    from concurrent.futures import ProcessPoolExecutor

    runs = list(runs)
    if cache_dir() is None or workers < 2 or len(runs) < 2:
        return 0
    jobs = [(str(r.path), list(steps) if steps else None) for r in runs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return sum(pool.map(_warm_one, jobs))


def trivial_default(run: Run, trivial: str | None = None) -> str:
    """The trivial-query rule of METHODS 3.1: ``exclude`` for causal runs, ``include`` otherwise."""
    if trivial is None:
        return "exclude" if run.causal else "include"
    if trivial not in ("include", "exclude"):
        raise RoutestatsError(f"trivial_queries must be include or exclude, got {trivial!r}")
    return trivial
