"""Routing metrics from recorded attention, as tidy DataFrames (METHODS Part I section 2).

One pass over a run's attention (either storage form) gives the per example x layer x head
table that every other metric aggregates: same-field mass (SFM), entropy, row mass, and
field-to-field mass. Equal weight per example, per head and per valid query.

Columns of the frames returned here
-----------------------------------
run_id, step, example_id, layer, head, head_type
    identify the unit;
sfm, entropy, entropy_rownorm, row_mass
    per-unit means over the example's valid queries;
n_valid
    number of valid (named-field) positions of the example.

Examples
--------
>>> import tempfile
>>> from routestats.rundir.read import load_run
>>> from routestats.rundir.synthetic import synthetic_pair
>>> b, v = synthetic_pair(tempfile.mkdtemp(), seed=0, n_examples=4)
>>> s = sfm(load_run(b))
>>> list(s.columns)
['run_id', 'step', 'example_id', 'layer', 'sfm']
>>> bool(s["sfm"].between(0, 1).all())
True
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from routestats.rundir import schema as S
from routestats.errors import RoutestatsError
from routestats.rundir.blocks import release_unused_memory
from routestats.rundir.read import Run
from routestats.rundir.verify import cache_dir
from routestats.rundir.collection import RunPair
from routestats.rundir.reductions import reduce_queries, summarise_batch, summarise_queries

__all__ = [
    "head_metrics",
    "sfm",
    "layer_summary",
    "head_sfm",
    "field_to_field",
    "opportunity",
    "adjusted_sfm",
    "unnamed_mass",
    "mass_split",
    "trivial_default",
    "reduce_attention",
    "profile_distance",
    "layer_gap",
    "word_attention",
]


@dataclass(frozen=True)
class _Pass:
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


CACHE_VERSION = "2"  # bump when the reduction or summary definitions change
WEIGHTINGS = ("attention", "norm", "rollout")


def _cache_key(run: Run, step: int, form: str, trivial: str = "include", weighting: str = "attention") -> str:
    """Key of a derived table: the verified SHA-256 of its input files (never the manifest's claim
    alone: :meth:`Run.verify` hashes what is on disk), plus versions."""
    parts = [CACHE_VERSION, run.run_id, str(step), form, run.verify(S.EXAMPLES),
             run.verify(S.attention_file(step, form)), json.dumps(run.manifest["fields"], sort_keys=True),
             f"causal={run.causal}", f"trivial={trivial}"]
    if weighting != "attention":
        parts.append(f"weighting={weighting}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def norm_weighted(weights: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """Norm-weighted attention (METHODS III 3.5): A_ij nu_j / sum_k A_ik nu_k per row, for weights
    (rows, n, n) and transported-vector norms (rows, n); a row with no weighted mass stays 0.

    >>> norm_weighted(np.array([[[0.5, 0.5], [1.0, 0.0]]]), np.array([[1.0, 3.0]])).tolist()
    [[[0.25, 0.75], [1.0, 0.0]]]
    """
    num = np.asarray(weights, dtype=np.float64) * np.asarray(norms, dtype=np.float64)[:, None, :]
    den = num.sum(axis=-1, keepdims=True)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


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


def _weighted_blocks(run: Run, step: int, weighting: str):
    """Matrices blocks with the attention replaced by its norm-weighted form or its rollout."""
    from routestats.rundir.blocks import ExampleAttention

    for blk in run.iter_attention(step):
        if weighting == "norm":
            if blk.value_norms is None:
                raise RoutestatsError(f"{run.run_id}: no value norms stored at step {step} (norm-weighted attention "
                                      "needs matrices written with value_norms, run schema 1.1)")
            yield ExampleAttention(blk.example_id, blk.layer, blk.head, blk.head_type,
                                   norm_weighted(blk.weights, blk.value_norms))
        else:
            layers = np.unique(blk.layer)
            yield ExampleAttention(blk.example_id, layers, np.zeros(len(layers), dtype=np.int64),
                                   np.full(len(layers), "softmax", dtype=object), rollout(blk.weights, len(layers)))


def _cache_load(path: Path) -> _Pass | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            heads = pd.DataFrame({k[2:]: z[k] for k in z.files if k.startswith("h_") and k not in ("h_run_id", "h_step")})
            return _Pass(heads, z["f2f"], z["has_source"])
    except (OSError, KeyError, ValueError):
        return None


def _cache_save(path: Path, p: _Pass) -> None:
    import io as _io

    from routestats.rundir.atomic import write_bytes_atomic

    buf = _io.BytesIO()
    arrays = {f"h_{c}": (p.heads[c].to_numpy().astype(str) if p.heads[c].dtype == object or str(p.heads[c].dtype) in
                         ("str", "string") else p.heads[c].to_numpy()) for c in p.heads.columns}
    np.savez(buf, f2f=p.f2f, has_source=p.has_source, **arrays)
    try:
        write_bytes_atomic(path, buf.getvalue())
    except OSError:  # a read-only or full cache never breaks an analysis
        pass


def trivial_default(run: Run, trivial: str | None = None) -> str:
    """The trivial-query rule of METHODS 3.1: ``exclude`` for causal runs, ``include`` otherwise."""
    if trivial is None:
        return "exclude" if run.causal else "include"
    if trivial not in ("include", "exclude"):
        raise RoutestatsError(f"trivial_queries must be include or exclude, got {trivial!r}")
    return trivial


def _step(run: Run, step: int | None) -> int:
    return run.final_step if step is None else int(step)


# columns the pass's frame stores narrower than the int64 its callers get (2 x 70,000 pair: 47 MB less at
# the report's peak); layer stays int64, the key of every grouping
_NARROW = {"head": np.int16, "n_valid": np.int32, "n_trivial": np.int32}


def _with_ids(frame: pd.DataFrame, run: Run, step: int | None) -> pd.DataFrame:
    """``frame`` with the run_id and step columns first (the pass's frame does not store them), and its
    narrow integer columns as int64."""
    for c in _NARROW:
        if c in frame.columns:
            frame[c] = frame[c].astype(np.int64)
    frame.insert(0, "step", _step(run, step))
    frame.insert(0, "run_id", run.run_id)
    return frame


def _pass(run: Run, step: int | None = None, form: str | None = None, trivial: str | None = None,
          weighting: str = "attention") -> _Pass:
    """Reduce a run's attention at one step once; cached on the run object and on disk
    (keyed by the input files' SHA-256, see :func:`cache_dir`).

    ``weighting``: ``attention`` (the weights), ``norm`` (norm-weighted attention) or ``rollout``
    (one "head" per layer: the rolled-out attention); the last two need full matrices."""
    if weighting not in WEIGHTINGS:
        raise RoutestatsError(f"weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}")
    step = _step(run, step)
    if weighting != "attention":
        if S.FORM_MATRICES not in run.attention_forms(step):
            raise RoutestatsError(f"{run.run_id}: {weighting} attention needs full matrices, and step {step} stores "
                                  f"{', '.join(run.attention_forms(step)) or 'none'}")
        form = S.FORM_MATRICES
    form = _choose_form(run, step, form)
    trivial = trivial_default(run, trivial)
    cache = run.__dict__.setdefault("_metric_cache", {})
    key = (step, form, trivial, weighting)
    if key in cache:
        return cache[key]
    folder = cache_dir()
    disk = (folder / f"{_cache_key(run, step, form, trivial, weighting)}.npz") if folder is not None else None
    if disk is not None and disk.is_file():
        hit = _cache_load(disk)
        if hit is not None:
            cache[key] = hit
            return hit
    named = run.field_ids
    ex = run.examples(["example_id", "field_ids"])
    fields_by_ex = dict(zip(ex["example_id"].tolist(), ex["field_ids"]))
    if weighting == "attention" and form == S.FORM_REDUCTIONS:
        cols, f2f, has = _summaries_batched(run, step, fields_by_ex, named, trivial)
    else:
        cols, f2f, has = _summaries_per_example(run, step, form, weighting, fields_by_ex, named, trivial)
    heads = pd.DataFrame(cols, copy=False)  # the columns are fresh arrays: no second copy of them
    del cols
    heads["layer"] = heads["layer"].astype(np.int64)
    for c, narrow in _NARROW.items():  # int64 again wherever a caller is given rows (_with_ids)
        heads[c] = heads[c].astype(narrow)  # lazy under copy-on-write: no copy when already narrow
    # run_id and step are the same on every row: kept out of the frame (37 MB a run at 70,000 examples)
    # and put back by _with_ids where a caller is given rows
    release_unused_memory()  # the pass's freed batches, before the tables allocate their own
    out = _Pass(heads, f2f, has)
    cache[key] = out
    if disk is not None:
        _cache_save(disk, out)
    return out


_SUMMARIES = ("sfm", "entropy", "entropy_rownorm", "row_mass", "unnamed_mass", "first_mass", "sfm_named")
_HEAD_TYPE_ORDER = tuple(sorted(S.HEAD_TYPES))  # sorted: head types as codes by searchsorted


def _summaries_batched(run: Run, step: int, fields_by_ex, named, trivial):
    """Summaries of every example from stored reductions, one vectorised pass per batch of examples
    of equal length; rows come back in the file's example order (bitwise what the per-example pass gives).

    Each batch's summaries are written straight to their places (``position``: the example's place in
    the file) in arrays made once for every example ``examples.parquet`` lists, so no second copy of a
    run's summaries is ever alive (a 2 x 70,000 pair's pass peaked with both)."""
    n_max = len(fields_by_ex)  # the reader refuses examples the table does not list
    out: dict | None = None
    seen = 0
    for b in run.iter_reduction_batches(step):
        g = np.stack([np.asarray(fields_by_ex[e]) for e in b.example_id.tolist()])
        sm = summarise_batch(b.reductions, g, named, run.causal, trivial)
        pos = b.position
        if out is None:
            rows, F = len(b.layer), sm["has_source"].shape[-1]
            layer, head = b.layer, b.head
            out = {k: np.empty((n_max, rows)) for k in _SUMMARIES}
            out["f2f"] = np.empty((n_max, rows, F, F))
            out["has_source"] = np.empty((n_max, F), dtype=bool)
            out["example_id"] = np.empty(n_max, dtype=np.int64)
            out["n_valid"] = np.empty(n_max, dtype=_NARROW["n_valid"])
            out["n_trivial"] = np.empty(n_max, dtype=_NARROW["n_trivial"])
            out["head_type"] = np.empty((n_max, rows), dtype=np.int8)  # index into HEAD_TYPES (the reader checked)
        if pos.size and int(pos.max()) >= n_max:
            raise RoutestatsError(f"{run.run_id}: the attention file at step {step} holds more examples than "
                                  f"{S.EXAMPLES} lists ({n_max})")
        for k in (*_SUMMARIES, "f2f", "has_source", "n_valid", "n_trivial"):
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
    for k in _SUMMARIES:
        cols[k] = out.pop(k)[:n_ex].reshape(-1)
    for k in ("n_valid", "n_trivial"):
        cols[k] = np.repeat(out.pop(k)[:n_ex], rows)
    f2f = out.pop("f2f")[:n_ex]
    f2f = f2f.reshape((n_ex * rows,) + f2f.shape[2:])
    has = np.repeat(out.pop("has_source")[:n_ex], rows, axis=0)
    return cols, f2f, has


def _summaries_per_example(run: Run, step: int, form: str, weighting: str, fields_by_ex, named, trivial):
    """Summaries of every example, one example at a time (matrices, or weighted attention)."""
    cols = {k: [] for k in ("example_id", "layer", "head", "head_type", *_SUMMARIES, "n_valid", "n_trivial")}
    f2f, has = [], []
    if weighting != "attention":
        blocks = _weighted_blocks(run, step, weighting)
    else:
        blocks = run.iter_reductions(step) if form == S.FORM_REDUCTIONS else run.iter_attention(step)
    for blk in blocks:
        g = np.asarray(fields_by_ex[blk.example_id])
        if form == S.FORM_REDUCTIONS:
            red = {k: getattr(blk, k) for k in ("row_mass", "entropy", "entropy_rownorm", "field_mass", "first_mass")}
        else:
            red = reduce_queries(blk.weights, g, named)
        summ = summarise_queries(red, g, named, run.causal, trivial)
        r = len(blk.layer)
        cols["example_id"].append(np.full(r, blk.example_id, dtype=np.int64))
        cols["layer"].append(blk.layer)
        cols["head"].append(blk.head)
        cols["head_type"].append(blk.head_type)
        for k in _SUMMARIES:
            cols[k].append(summ[k])
        cols["n_valid"].append(np.full(r, summ["n_valid"], dtype=_NARROW["n_valid"]))
        cols["n_trivial"].append(np.full(r, summ["n_trivial"], dtype=_NARROW["n_trivial"]))
        f2f.append(summ["f2f"])
        has.append(np.broadcast_to(summ["has_source"], (r, len(named))))
    if not f2f:
        raise RoutestatsError(f"{run.run_id}: no attention rows at step {step}")
    return ({k: np.concatenate(v) for k, v in cols.items()}, np.concatenate(f2f), np.concatenate(has))


EXAMPLE_SETS = {"primary": "is_primary", "length_sample": "in_length_sample", "test_sample": "in_test_sample"}


def example_protocol(run: Run) -> dict[str, str]:
    """The example set of each analysis family under the paper's protocol (METHODS 3.7).

    When the run's examples are the union of the primary examples and a length sample (neither
    covering every example), the paired tables use ``primary`` and the length analyses
    ``length_sample``; otherwise both use ``all``. Returns ``{"paired": ..., "lengths": ...}``.
    """
    ex = run.examples(["is_primary", "in_length_sample"])
    primary, sample = ex["is_primary"].to_numpy(bool), ex["in_length_sample"].to_numpy(bool)
    union = primary.any() and sample.any() and not primary.all() and not sample.all()
    return {"paired": "primary", "lengths": "length_sample"} if union else {"paired": "all", "lengths": "all"}


def resolve_example_sets(settings, run: Run):
    """``settings`` with ``examples`` and ``length_examples`` made concrete for ``run``
    (``protocol`` replaced by :func:`example_protocol`'s choice)."""
    proto = example_protocol(run)
    return type(settings).of(settings,
                             examples=proto["paired"] if settings.examples == "protocol" else settings.examples,
                             length_examples=proto["lengths"] if settings.length_examples == "protocol"
                             else settings.length_examples)


def select_examples(run: Run, examples=None) -> np.ndarray | None:
    """Example ids selected by ``examples``: None or "all" (every example), "primary",
    "length_sample", "test_sample" (the flags in examples.parquet), "protocol" (the paired-table
    set of :func:`example_protocol`), or a sequence of ids."""
    if isinstance(examples, str) and examples == "protocol":
        examples = example_protocol(run)["paired"]
    if examples is None or (isinstance(examples, str) and examples == "all"):
        return None
    ex = run.examples(["example_id", *EXAMPLE_SETS.values()])
    if isinstance(examples, str):
        if examples not in EXAMPLE_SETS:
            raise RoutestatsError(f"examples must be all, {', '.join(EXAMPLE_SETS)} or a list of ids, got {examples!r}")
        ids = ex.loc[ex[EXAMPLE_SETS[examples]], "example_id"].to_numpy()
    else:
        ids = np.asarray(list(examples), dtype=np.int64)
        unknown = np.setdiff1d(ids, ex["example_id"].to_numpy())
        if unknown.size:
            raise RoutestatsError(f"{run.run_id}: unknown example ids {unknown[:5].tolist()}")
    if ids.size == 0:
        raise RoutestatsError(f"{run.run_id}: no example selected by {examples!r}")
    return ids


def _selected(run: Run, step, examples, trivial=None, weighting="attention") -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    p = _pass(run, step, trivial=trivial, weighting=weighting)
    ids = select_examples(run, examples)
    if ids is None:
        return p.heads, p.f2f, p.has_source
    keep = np.isin(p.heads["example_id"].to_numpy(), ids)
    return p.heads[keep], p.f2f[keep], p.has_source[keep]


def head_metrics(run: Run, step: int | None = None, form: str | None = None) -> pd.DataFrame:
    """Per example x layer x head metrics (columns in the module docstring).

    ``form`` picks the storage form to read (default: reductions when stored, else
    matrices); both give identical numbers.
    """
    return _with_ids(_pass(run, step, form).heads.copy(), run, step)


def _runs(obj) -> list[tuple[str | None, Run]]:
    if isinstance(obj, RunPair):
        return [("baseline", obj.baseline), ("variant", obj.variant)]
    if isinstance(obj, Run):
        return [(None, obj)]
    raise TypeError(f"expected a Run or RunPair, got {type(obj).__name__}")


def _per_example(obj, metric: str, step=None, examples=None, trivial=None, weighting="attention") -> pd.DataFrame:
    frames = []
    for role, run in _runs(obj):
        h = _selected(run, step, examples, trivial, weighting)[0]
        # grouped by the two keys that vary (run_id and step are constant within a pass)
        g = _with_ids(h.groupby(["example_id", "layer"], sort=False)[metric].mean().reset_index(), run, step)
        if role is not None:
            g.insert(1, "role", role)
        frames.append(g)
    return pd.concat(frames, ignore_index=True)


def sfm(obj, step: int | None = None, examples=None, trivial: str | None = None, keys: str = "all",
        weighting: str = "attention") -> pd.DataFrame:
    """Per-example, per-layer same-field mass (mean over heads; METHODS 2.1, 3.1-3.2).

    For a :class:`~routestats.rundir.collection.RunPair` both runs are stacked with a ``role`` column
    (``baseline`` / ``variant``). ``examples`` selects a subset (see :func:`select_examples`).
    ``trivial`` (include / exclude; default: exclude for causal runs) says whether queries whose
    every visible key lies in their own field count; ``keys="named"`` renormalises each query's
    SFM over the named keys (SFM / (1 - unnamed mass)); the column is ``sfm`` either way.
    ``weighting="norm"`` is the SFM of norm-weighted attention and ``"rollout"`` that of the
    rolled-out attention (METHODS III 3.5-3.6; full matrices needed).
    """
    if keys not in ("all", "named"):
        raise RoutestatsError(f"keys must be all or named, got {keys!r}")
    out = _per_example(obj, "sfm" if keys == "all" else "sfm_named", step, examples, trivial, weighting)
    return out.rename(columns={"sfm_named": "sfm"})


def unnamed_mass(obj, step: int | None = None, examples=None, trivial: str | None = None) -> pd.DataFrame:
    """Per-example, per-layer attention on keys outside the named fields, and on the first key
    (METHODS 3.2): columns as :func:`sfm` with ``unnamed_mass`` and ``first_mass``."""
    a = _per_example(obj, "unnamed_mass", step, examples, trivial)
    b = _per_example(obj, "first_mass", step, examples, trivial)
    a["first_mass"] = b["first_mass"].to_numpy()
    return a


def mass_split(obj, step: int | None = None, examples=None, trivial: str | None = None) -> pd.DataFrame:
    """Per run x layer: same-field (sfm), other-named-field (cross_mass) and unnamed-key mass,
    first-key mass and named-renormalised SFM, each the mean over examples of the head mean
    (METHODS 3.2). Columns: run_id, [role], layer, sfm, cross_mass, unnamed_mass, first_mass,
    sfm_named, n_examples."""
    frames = []
    cols = ["sfm", "row_mass", "unnamed_mass", "first_mass", "sfm_named"]
    for role, run in _runs(obj):
        h = _selected(run, step, examples, trivial)[0]
        per_ex = h.groupby(["example_id", "layer"], sort=False)[cols].mean()
        t = per_ex.groupby("layer").agg(**{c: (c, "mean") for c in cols}, n_examples=("sfm", "count")).reset_index()
        t.insert(2, "cross_mass", t["row_mass"] - t["sfm"] - t["unnamed_mass"])
        t = t.drop(columns=["row_mass"])
        if role is not None:
            t.insert(0, "role", role)
        t.insert(0, "run_id", run.run_id)
        frames.append(t)
    return pd.concat(frames, ignore_index=True)


def entropy(obj, step: int | None = None, examples=None, trivial: str | None = None) -> pd.DataFrame:
    """Per-example, per-layer attention entropy in nats (mean over heads; METHODS 2.2)."""
    return _per_example(obj, "entropy", step, examples, trivial)


def layer_summary(obj, step: int | None = None, examples=None, trivial: str | None = None) -> pd.DataFrame:
    """Per run x layer: mean SFM and entropy over examples (paper Table 1 layout).

    Columns: run_id, [role], step, layer, sfm, entropy, n_examples, is_max_sfm (the layer
    with the highest SFM within the run).
    """
    frames = []
    for role, run in _runs(obj):
        h = _selected(run, step, examples, trivial)[0]
        per_ex = h.groupby(["example_id", "layer"], sort=False)[["sfm", "entropy"]].mean()
        t = per_ex.groupby("layer").agg(sfm=("sfm", "mean"), entropy=("entropy", "mean"), n_examples=("sfm", "size"))
        t = t.reset_index()
        t["is_max_sfm"] = t["sfm"] == t["sfm"].max()
        t.insert(0, "step", _step(run, step))
        if role is not None:
            t.insert(0, "role", role)
        t.insert(0, "run_id", run.run_id)
        frames.append(t)
    return pd.concat(frames, ignore_index=True)


def head_sfm(run: Run, step: int | None = None, examples=None, trivial: str | None = None) -> pd.DataFrame:
    """Per layer x head SFM averaged over examples only (METHODS 2.6).

    Columns: run_id, step, layer, head, head_type, sfm, n_examples. The layer SFM is the
    mean of its heads' values.
    """
    h = _selected(run, step, examples, trivial)[0]
    t = h.groupby(["layer", "head", "head_type"]).agg(sfm=("sfm", "mean"), n_examples=("sfm", "size"))
    return _with_ids(t.reset_index(), run, step)


def field_to_field(run: Run, step: int | None = None, missing: str = "zero", examples=None,
                   trivial: str | None = None, weighting: str = "attention") -> pd.DataFrame:
    """Field-to-field attention mass per layer (METHODS 2.3); row = source, column = destination.

    Parameters
    ----------
    missing : {"zero", "exclude"}
        How an example lacking the source field counts. ``"zero"`` reproduces the
        reference: it contributes 0 and still counts in the denominator (examples x heads).
        ``"exclude"`` averages only over examples that have the source field, so rows sum
        to 1 whenever all valid keys are named.

    Returns
    -------
    DataFrame
        run_id, step, layer, source, destination, source_name, destination_name, mass,
        n_examples_with_source.
    """
    if missing not in ("zero", "exclude"):
        raise RoutestatsError("missing must be 'zero' or 'exclude'")
    heads, f2f, has_source = _selected(run, step, examples, trivial, weighting)
    names = run.named_fields
    ids = list(names)
    layers = heads["layer"].to_numpy()
    ex = heads["example_id"].to_numpy()
    step_value = _step(run, step)
    rows = []
    for layer in np.unique(layers):
        sel = layers == layer
        vals = f2f[sel]  # (rows, F, F), 0 where source absent
        has = has_source[sel]  # (rows, F)
        n_ex_with = [len(np.unique(ex[sel][has[:, s]])) for s in range(len(ids))]
        if missing == "zero":
            mean = vals.mean(axis=0)
        else:
            cnt = has.sum(axis=0)
            mean = vals.sum(axis=0) / np.maximum(cnt, 1)[:, None]
        for si, s in enumerate(ids):
            for di, d in enumerate(ids):
                rows.append((run.run_id, step_value, int(layer), s, d, names[s], names[d],
                             float(mean[si, di]) if has[:, si].any() else 0.0, n_ex_with[si]))
    return pd.DataFrame(rows, columns=["run_id", "step", "layer", "source", "destination", "source_name",
                                       "destination_name", "mass", "n_examples_with_source"])


def opportunity(run: Run, trivial: str | None = None) -> pd.DataFrame:
    """Field opportunity O_e per example (METHODS 2.5, 3.1), from the evaluated positions.

    Bidirectional runs: O_e = sum_f n_ef^2 / N_e^2 over named fields f (the mean of the per-query
    O_i). Causal runs: the mean over valid queries of O_i, the share of the query's visible valid
    keys (j <= i) in its own field -- over the non-trivial queries when ``trivial`` is exclude
    (the default for causal runs), NaN for an example without any. Columns: example_id, n_named
    (N_e), opportunity, n_fields_present, defined_adjusted (1 - O_e > 0).

    Raises when an example has no named position (N_e = 0).
    """
    from routestats.rundir.reductions import query_opportunity

    named = run.field_ids
    ex = run.examples(["example_id", "field_ids"])
    counts = np.stack([(np.asarray(g)[:, None] == named[None, :]).sum(axis=0) for g in ex["field_ids"]])
    total = counts.sum(axis=1)
    if (total == 0).any():
        bad = ex["example_id"].to_numpy()[total == 0][0]
        raise RoutestatsError(f"{run.run_id}: example_id {bad} has no named-field position; O_e is undefined")
    if run.causal:
        excl = trivial_default(run, trivial) == "exclude"
        o = []
        for g in ex["field_ids"]:
            valid, oi, triv = query_opportunity(np.asarray(g), named, causal=True)
            use = valid & ~triv if excl else valid
            o.append(float(oi[use].mean()) if use.any() else np.nan)
        o = np.asarray(o)
    else:
        o = (counts.astype(np.float64) ** 2).sum(axis=1) / total.astype(np.float64) ** 2
    return pd.DataFrame(
        {
            "example_id": ex["example_id"].to_numpy(),
            "n_named": total,
            "opportunity": o,
            "n_fields_present": (counts > 0).sum(axis=1),
            "defined_adjusted": np.nan_to_num(1.0 - o, nan=0.0) > 0,
        }
    )


def adjust(sfm_value, opportunity_value):
    """Opportunity-adjusted SFM (SFM - O)/(1 - O); NaN where 1 - O <= 0 (METHODS 2.5).

    >>> adjust(0.6, 0.6), adjust(1.0, 0.6), adjust(1.0, 1.0)
    (0.0, 1.0, nan)
    """
    s = np.asarray(sfm_value, dtype=np.float64)
    o = np.asarray(opportunity_value, dtype=np.float64)
    den = 1.0 - o
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(den > 0, (s - o) / np.where(den > 0, den, 1.0), np.nan)
    return float(out) if out.ndim == 0 else out


def adjusted_sfm(obj, step: int | None = None, examples=None, trivial: str | None = None,
                 keys: str = "all") -> pd.DataFrame:
    """Per-example, per-layer raw and opportunity-adjusted SFM.

    Columns: run_id, [role], step, example_id, layer, sfm, opportunity, sfm_adj (NaN when
    only one named field is visible, O_e = 1). ``trivial`` and ``keys`` as in :func:`sfm`.
    """
    s = sfm(obj, step, examples, trivial, keys)
    frames = []
    for role, run in _runs(obj):
        o = opportunity(run, trivial)[["example_id", "opportunity"]]
        part = s[s["run_id"] == run.run_id] if role is None else s[s["role"] == role]
        part = part.merge(o, on="example_id", how="left", validate="many_to_one")
        part["sfm_adj"] = adjust(part["sfm"].to_numpy(), part["opportunity"].to_numpy())
        frames.append(part)
    return pd.concat(frames, ignore_index=True)


def profile_distance(a, b) -> float:
    """Euclidean norm of the difference between two layer-SFM profiles (METHODS 2.7).

    >>> round(profile_distance([0.750, 0.884, 0.904, 0.899], [0.814, 0.860, 0.820, 0.949]), 4)
    0.1193
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise RoutestatsError(f"profiles differ in length ({a.shape} vs {b.shape})")
    return float(np.linalg.norm(a - b))


def layer_gap(profile, upper: int = -1, lower: int = -2) -> float:
    """SFM[upper] - SFM[lower] of one layer profile (default last minus penultimate).

    >>> round(layer_gap([0.75, 0.88, 0.90, 0.899]), 3)
    -0.001
    """
    p = np.asarray(profile, dtype=np.float64)
    return float(p[upper] - p[lower])


def word_attention(matrix, word_ids) -> tuple[np.ndarray, np.ndarray]:
    """Word-level attention from a piece-level matrix (METHODS 2.9).

    W[u][v] = (1/|u|) sum_{i in u} sum_{j in v} A[i][j]: average over query pieces, sum over
    key pieces, so rows of W still sum to 1. Groups are ordered by first appearance.

    Returns
    -------
    (W, groups)
        The (U, U) matrix and the group id of each row/column.

    >>> A = [[.5, .5, 0], [.2, .2, .6], [0, 1, 0]]
    >>> W, g = word_attention(A, [0, 0, 1])
    >>> W.round(2).tolist(), g.tolist()
    ([[0.7, 0.3], [1.0, 0.0]], [0, 1])
    """
    A = np.asarray(matrix, dtype=np.float64)
    w = np.asarray(word_ids)
    if A.ndim != 2 or A.shape[0] != A.shape[1] or A.shape[0] != len(w):
        raise RoutestatsError(f"matrix of shape {A.shape} does not match {len(w)} word ids")
    groups, first = np.unique(w, return_index=True)
    groups = groups[np.argsort(first)]
    onehot = (w[:, None] == groups[None, :]).astype(np.float64)  # (n, U)
    sums = onehot.T @ A @ onehot  # sum over query pieces and key pieces
    return sums / onehot.sum(axis=0)[:, None], groups


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
    _pass(run, step, trivial=trivial)


def _warm_one(args) -> int:
    from routestats.rundir.read import load_run

    path, steps = args
    run = load_run(path)
    for s in steps or run.attention_steps:
        _pass(run, s)
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
