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

import numpy as np
import pandas as pd

from routestats.errors import RoutestatsError
from routestats.metrics.definitions import metric as _metric
from routestats.metrics.examples import select_examples
from routestats.metrics.passes import head_pass, reduce_attention, resolve_step, trivial_default, with_run_ids
from routestats.rundir.collection import RunPair
from routestats.rundir.read import Run

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
    "metric_values",
]


def _selected(run: Run, step, examples, trivial=None, weighting="attention") -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    p = head_pass(run, step, trivial=trivial, weighting=weighting)
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
    return with_run_ids(head_pass(run, step, form).heads.copy(), run, step)


def runs_by_role(obj) -> list[tuple[str | None, Run]]:
    """(role, run) for a pair's two runs ("baseline", "variant"), or (None, run) for one run."""
    if isinstance(obj, RunPair):
        return [("baseline", obj.baseline), ("variant", obj.variant)]
    if isinstance(obj, Run):
        return [(None, obj)]
    raise TypeError(f"expected a Run or RunPair, got {type(obj).__name__}")


def _per_example(obj, metric: str, step=None, examples=None, trivial=None, weighting="attention") -> pd.DataFrame:
    frames = []
    for role, run in runs_by_role(obj):
        h = _selected(run, step, examples, trivial, weighting)[0]
        # grouped by the two keys that vary (run_id and step are constant within a pass)
        g = with_run_ids(h.groupby(["example_id", "layer"], sort=False)[metric].mean().reset_index(), run, step)
        if role is not None:
            g.insert(1, "role", role)
        frames.append(g)
    return pd.concat(frames, ignore_index=True)


def metric_values(obj, metric: str, step: int | None = None, examples=None, trivial: str | None = None,
                  weighting: str = "attention") -> pd.DataFrame:
    """Per-example, per-layer values (mean over heads) of any registered metric
    (:mod:`routestats.metrics.definitions`); columns as :func:`sfm`, the value in column ``metric``."""
    _metric(metric)
    return _per_example(obj, metric, step, examples, trivial, weighting)


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
    first-key mass, named-renormalised SFM and the mass on learned attention sinks (1 - row mass of
    ``sink`` heads, 0 for others; sfm + cross_mass + unnamed_mass + sink_mass = 1 for softmax and sink
    heads), each the mean over examples of the head mean (METHODS 3.2). Columns: run_id, [role], layer,
    sfm, cross_mass, unnamed_mass, first_mass, sfm_named, sink_mass, n_examples."""
    frames = []
    cols = ["sfm", "row_mass", "unnamed_mass", "first_mass", "sfm_named", "sink_mass"]
    for role, run in runs_by_role(obj):
        h = _selected(run, step, examples, trivial)[0]
        # heads with learned attention sinks: what a row lacks of 1 went to the sinks, outside the sequence
        h = h.assign(sink_mass=np.where(h["head_type"] == "sink", 1.0 - h["row_mass"], 0.0))
        per_ex = h.groupby(["example_id", "layer"], sort=False)[cols].mean()
        t = _layer_means(per_ex, cols, "count")
        t.insert(2, "cross_mass", t["row_mass"] - t["sfm"] - t["unnamed_mass"])
        t = t.drop(columns=["row_mass"])
        if role is not None:
            t.insert(0, "role", role)
        t.insert(0, "run_id", run.run_id)
        frames.append(t)
    return pd.concat(frames, ignore_index=True)


def _layer_means(per_ex: pd.DataFrame, cols: list[str], count: str) -> pd.DataFrame:
    """Per layer: the mean over examples of each of ``cols`` and ``n_examples`` (the ``count`` of non-missing SFM
    values, or the ``size`` of the layer's group). One grouped mean for every column: pandas' named aggregation ran
    one per column, four times the cost of this on a 2 x 64 pair, the same sums."""
    g = per_ex.groupby("layer")
    t = g[cols].mean()
    t["n_examples"] = g["sfm"].count() if count == "count" else g.size()
    return t.reset_index()


def entropy(obj, step: int | None = None, examples=None, trivial: str | None = None) -> pd.DataFrame:
    """Per-example, per-layer attention entropy in nats (mean over heads; METHODS 2.2)."""
    return metric_values(obj, "entropy", step, examples, trivial)


def layer_summary(obj, step: int | None = None, examples=None, trivial: str | None = None) -> pd.DataFrame:
    """Per run x layer: mean SFM and entropy over examples (paper Table 1 layout).

    Columns: run_id, [role], step, layer, sfm, entropy, n_examples, is_max_sfm (the layer
    with the highest SFM within the run).
    """
    frames = []
    for role, run in runs_by_role(obj):
        h = _selected(run, step, examples, trivial)[0]
        per_ex = h.groupby(["example_id", "layer"], sort=False)[["sfm", "entropy"]].mean()
        t = _layer_means(per_ex, ["sfm", "entropy"], "size")
        t["is_max_sfm"] = t["sfm"] == t["sfm"].max()
        t.insert(0, "step", resolve_step(run, step))
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
    g = h.groupby(["layer", "head", "head_type"])
    t = g[["sfm"]].mean()
    t["n_examples"] = g.size()
    return with_run_ids(t.reset_index(), run, step)


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
    step_value = resolve_step(run, step)
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
                             float(mean[si, di]) if has[:, si].any() else np.nan, n_ex_with[si]))
    return pd.DataFrame(rows, columns=["run_id", "step", "layer", "source", "destination", "source_name",
                                       "destination_name", "mass", "n_examples_with_source"])


def _field_counts(field_ids, named) -> np.ndarray:
    """(examples, F) int64: how many positions of each example lie in each named field, from every example's field
    ids at once (one count over the examples' positions laid end to end, not a comparison per example).

    >>> _field_counts([np.array([3, 3, 4, 0]), np.array([4]), np.array([], dtype=int)], np.array([3, 4])).tolist()
    [[2, 1], [0, 1], [0, 0]]
    """
    named = np.asarray(named)
    ids = [np.asarray(g) for g in field_ids]
    E, F = len(ids), len(named)
    if not E or not F:
        return np.zeros((E, F), dtype=np.int64)
    flat = np.concatenate(ids)
    owner = np.repeat(np.arange(E), [len(g) for g in ids])
    order = np.argsort(named, kind="stable")
    pos = np.minimum(np.searchsorted(named[order], flat), F - 1)
    hit = named[order][pos] == flat  # the position's field is named: its column is order[pos]
    return np.bincount(owner[hit] * F + order[pos[hit]], minlength=E * F).reshape(E, F).astype(np.int64, copy=False)


def opportunity(run: Run, trivial: str | None = None) -> pd.DataFrame:
    """Field opportunity O_e per example (METHODS 2.5, 3.1), from the evaluated positions.

    Bidirectional runs: O_e = sum_f n_ef^2 / N_e^2 over named fields f (the mean of the per-query
    O_i). Causal runs: the mean over valid queries of O_i, the share of the query's visible valid
    keys (j <= i) in its own field -- over the non-trivial queries when ``trivial`` is exclude
    (the default for causal runs), NaN for an example without any. Columns: example_id, n_named
    (N_e), opportunity, n_fields_present, defined_adjusted (1 - O_e > 0).

    An example with no named position (N_e = 0) has no opportunity: NaN, ``defined_adjusted`` False (its
    SFM is undefined too, so the adjusted analyses leave it out and count it).
    """
    from routestats.rundir.reductions import query_opportunity

    named = run.field_ids
    ex = run.examples(["example_id", "field_ids"])
    counts = _field_counts(ex["field_ids"], named)
    total = counts.sum(axis=1)
    if run.causal:
        excl = trivial_default(run, trivial) == "exclude"
        o = []
        for g in ex["field_ids"]:
            valid, oi, triv = query_opportunity(np.asarray(g), named, causal=True)
            use = valid & ~triv if excl else valid
            o.append(float(oi[use].mean()) if use.any() else np.nan)
        o = np.asarray(o)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            o = np.where(total > 0, (counts.astype(np.float64) ** 2).sum(axis=1) / np.maximum(total, 1) ** 2, np.nan)
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
    for role, run in runs_by_role(obj):
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
