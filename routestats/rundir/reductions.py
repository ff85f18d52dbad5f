"""Per-query reductions of attention: the one place attention matrices are reduced.

Both storage forms go through here: a writer that stores reductions computes them with
:func:`reduce_queries` from exactly the values it stores, and the metrics compute them the
same way from stored matrices, so the two forms agree bit for bit (METHODS 2.1-2.3).

Examples
--------
The METHODS 2.1 test matrix (field ids 4, 4, 3, 3) has same-field mass 0.8:

>>> import numpy as np
>>> A = np.array([[.6, .2, .1, .1], [.3, .5, .1, .1], [.1, .1, .5, .3], [.1, .1, .2, .6]])
>>> r = reduce_queries(A[None], np.array([4, 4, 3, 3]), np.array([3, 4]))
>>> summary = summarise_queries(r, np.array([4, 4, 3, 3]), np.array([3, 4]))
>>> round(float(summary["sfm"][0]), 12)
0.8
"""

from __future__ import annotations

import numpy as np

from routestats.rundir.schema import ENTROPY_EPS, REDUCTION_COLUMNS  # noqa: F401  (the doctests use it)


def _entropy(p: np.ndarray) -> np.ndarray:
    """-sum p ln(p + eps) over the last axis, with one temporary (bitwise equal to the naive form)."""
    t = p + ENTROPY_EPS
    np.log(t, out=t)
    t *= p
    return -t.sum(axis=-1)


def field_total(fm: np.ndarray) -> np.ndarray:
    """The sum over the last (field) axis of ``fm``, field by field from the first: numpy's reduction over a
    last axis of a few values takes about 25 times as long. Every check and summary of a query's named mass
    adds it this way, so they agree with each other bit for bit.

    >>> field_total(np.array([[0.25, 0.5], [1.0, 0.0]])).tolist()
    [0.75, 1.0]
    """
    if not fm.shape[-1]:
        return np.zeros(fm.shape[:-1])
    out = fm[..., 0].astype(np.float64, copy=True)
    for j in range(1, fm.shape[-1]):
        out += fm[..., j]
    return out


def reduce_queries(weights: np.ndarray, field_ids: np.ndarray, named: np.ndarray) -> dict:
    """Reduce attention rows of one example to per-query quantities (float64).

    Parameters
    ----------
    weights : ndarray, shape (rows, n, n)
        Attention over the example's evaluated positions (query x key), any float dtype.
    field_ids : ndarray, shape (n,)
        Field id of each position.
    named : ndarray, shape (F,)
        Named field ids, ascending.

    Returns
    -------
    dict
        ``row_mass`` (rows, n): sum over all keys; ``entropy`` (rows, n): -sum p ln(p + 1e-10)
        over all keys; ``entropy_rownorm`` (rows, n): the same after dividing the row by its
        mass (0 for an all-zero row); ``field_mass`` (rows, n, F): mass on valid keys of
        each named field (valid = named field; stored positions are non-padding);
        ``first_mass`` (rows, n): mass on key 0 (the attention-sink diagnostic, METHODS 3.2).
    """
    w = np.asarray(weights, dtype=np.float64)
    g = np.asarray(field_ids)
    onehot = (g[:, None] == np.asarray(named)[None, :]).astype(np.float64)
    row_mass = w.sum(axis=-1)
    safe = np.where(row_mass > 0, row_mass, 1.0)
    return {
        "row_mass": row_mass,
        "entropy": _entropy(w),
        "entropy_rownorm": _entropy(w / safe[..., None]),
        "field_mass": w @ onehot,
        "first_mass": w[..., 0].copy(),
    }


def query_opportunity(field_ids: np.ndarray, named: np.ndarray, causal: bool = False):
    """Per query: valid (a named position), O_i and trivial (O_i = 1) -- METHODS 3.1.

    The keys visible to query i are the valid keys (bidirectional) or the valid keys j <= i
    (causal); O_i is the share of them in i's own field. For a bidirectional example the mean of
    O_i over valid queries is sum_f n_f^2 / N^2 (METHODS 2.5). ``field_ids`` may carry leading
    batch axes (examples of one length): shape (..., n).

    >>> v, o, t = query_opportunity(np.array([4, 4, 3, 3]), np.array([3, 4]), causal=True)
    >>> o.tolist(), t.tolist()  # query 2 sees keys {4, 4, 3}: 1/3 of them in its field
    ([1.0, 1.0, 0.3333333333333333, 0.5], [True, True, False, False])
    >>> round(float(query_opportunity(np.array([4, 4, 3]), np.array([3, 4]))[1].mean()), 12)  # (2**2 + 1**2) / 3**2
    0.555555555556
    """
    g = np.asarray(field_ids)
    named = np.asarray(named)
    src = g[..., :, None] == named  # (..., n, F)
    valid = src.any(axis=-1)
    counts = np.cumsum(src, axis=-2) if causal else np.broadcast_to(src.sum(axis=-2, keepdims=True), src.shape)
    total = counts.sum(axis=-1)
    own = (counts * src).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        o = np.where(valid & (total > 0), own / np.maximum(total, 1), np.nan)
    trivial = valid & (o == 1.0)
    return valid, o, trivial


SUMMARIES = ("sfm", "entropy", "entropy_rownorm", "row_mass", "unnamed_mass", "first_mass", "sfm_named")


def summarise_batch(red: dict, field_ids: np.ndarray, named: np.ndarray, causal: bool = False,
                    trivial: str = "include", extra: dict | None = None, sink_rows: np.ndarray | None = None) -> dict:
    """:func:`summarise_queries` for a batch of E examples of one length n, in one vectorised pass.

    ``red`` holds arrays of shape (E, rows, n[, F]) and ``field_ids`` has shape (E, n). Every sum
    runs over the same axis with the same length as for one example, so each example's summaries
    are bitwise those of :func:`summarise_queries` on it alone.

    ``extra`` maps further metric names to ``per_query(red, field_ids, named, causal) -> (E, rows, n)``
    (the registry of :mod:`routestats.metrics.definitions`), averaged over the same queries.
    ``sink_rows`` (rows,) or (E, rows) marks heads with learned attention sinks: their named-renormalised SFM
    divides by the named mass S + C = 1 - U - sink mass, not by 1 - U.

    Returns
    -------
    dict
        The summaries of :data:`SUMMARIES` and of ``extra``, each (E, rows); ``n_valid`` and
        ``n_trivial`` (E,); ``f2f`` (E, rows, F, F); ``has_source`` (E, F).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> A = rng.dirichlet(np.ones(5), size=(3, 2, 5))  # 3 examples x 2 heads x 5 queries
    >>> g = np.array([[1, 1, 2, 2, 0], [2, 1, 1, 0, 0], [1, 2, 1, 2, 1]])
    >>> named = np.array([1, 2])
    >>> batch = summarise_batch({k: np.stack([reduce_queries(a, gi, named)[k] for a, gi in zip(A, g)])
    ...                          for k in REDUCTION_COLUMNS},
    ...                         g, named)
    >>> alone = summarise_queries(reduce_queries(A[1], g[1], named), g[1], named)
    >>> bool(np.array_equal(batch["sfm"][1], alone["sfm"])), bool(np.array_equal(batch["f2f"][1], alone["f2f"]))
    (True, True)
    """
    if trivial not in ("include", "exclude"):
        raise ValueError(f"trivial must be include or exclude, got {trivial!r}")
    g = np.asarray(field_ids)
    named = np.asarray(named)
    src, valid, n_trivial = _queries(g, named, causal, trivial)
    n_valid = valid.sum(axis=-1)
    nq = np.maximum(1, n_valid)[:, None]
    fm = red["field_mass"]
    own, f2f, counts = _own_and_f2f(fm, src, valid)
    vf = valid.astype(np.float64)[:, None, :]
    unnamed = red["row_mass"] - field_total(fm)
    first = red.get("first_mass")
    sfm_named = _sfm_named(own, fm, unnamed, valid, sink_rows)
    per_query = {"sfm": own, "entropy": red["entropy"], "entropy_rownorm": red["entropy_rownorm"],
                 "row_mass": red["row_mass"], "unnamed_mass": unnamed, "first_mass": first}
    out = {k: (v * vf).sum(axis=-1) / nq if v is not None else np.full(unnamed.shape[:2], np.nan)
           for k, v in per_query.items()}
    out.update(sfm_named=sfm_named, n_valid=n_valid, n_trivial=n_trivial, f2f=f2f, has_source=counts > 0)
    out.update(_extra_summaries(extra or {}, red, g, named, causal, vf, nq))
    if (n_valid == 0).any():  # nothing to average (no named query, or every one trivial): undefined, not 0
        empty = (n_valid == 0)[:, None]
        for k in (*per_query, *(extra or {})):
            out[k] = np.where(empty, np.nan, out[k])
    return out


def _sfm_named(own, fm, unnamed, valid, sink_rows) -> np.ndarray:
    """SFM renormalised to the named keys' mass, S + C = 1 - U (minus the sink mass where heads have learned
    sinks), averaged over the valid queries whose named mass is above 0: (E, rows)."""
    named_mass = 1.0 - unnamed
    if sink_rows is not None and np.any(sink_rows):  # S + C = 1 - U - sink mass: the mass on named keys
        sink = np.asarray(sink_rows, dtype=bool)
        named_mass = np.where(sink.reshape(-1, sink.shape[-1])[:, :, None], field_total(fm), named_mass)
    named_ok = valid[:, None, :] & (named_mass > 1e-12)
    with np.errstate(invalid="ignore", divide="ignore"):
        own_named = np.where(named_ok, own / np.where(named_ok, named_mass, 1.0), 0.0)
        return own_named.sum(axis=-1) / named_ok.sum(axis=-1)


def _own_and_f2f(fm, src, valid):
    """Each query's mass on its own field (E, rows, n), the field-to-field sums (E, rows, F, F) and the
    source-field query counts (E, F)."""
    idx = np.where(valid, src.argmax(axis=-1), 0)  # (E, n)
    # mass of each query on its own field, laid out (E, n, rows) in memory as the per-example fancy index
    # fm[:, arange(n), idx] lays it out: the sums over queries then accumulate in query order
    fmt = fm.transpose(0, 2, 1, 3)
    if 0 < fm.shape[-1] <= 4:  # a few fields: chosen field by field, a third of take_along_axis's time (the same values)
        own = fmt[..., 0].copy()
        for f in range(1, fm.shape[-1]):
            np.copyto(own, fmt[..., f], where=(idx == f)[:, :, None])
        own = own.transpose(0, 2, 1)
    else:
        own = np.take_along_axis(fmt, idx[:, :, None, None], axis=-1)[..., 0].transpose(0, 2, 1)
    counts = src.sum(axis=-2)  # (E, F)
    # sum over each source field's queries, in query order, of their mass on every field: (F x n) @ (n x F)
    # per (example, row); the 0/1 weights make every product exact (a tenth of einsum's time, the same bits)
    f2f = np.matmul(src.transpose(0, 2, 1).astype(np.float64)[:, None], fm) / np.maximum(counts, 1)[:, None, :, None]
    return own, f2f, counts


def _queries(g, named, causal: bool, trivial: str):
    """(query position i in named field f (E, n, F), the averaged queries (E, n), trivial counts (E,))."""
    src = g[..., :, None] == named
    valid, _, is_trivial = query_opportunity(g, named, causal)
    if trivial == "exclude":
        valid = valid & ~is_trivial
        src = src & valid[..., None]
    return src, valid, is_trivial.sum(axis=-1)


def _extra_summaries(extra: dict, red, g, named, causal, vf, nq) -> dict:
    """Registered metrics' per-query values averaged over the same queries as SFM."""
    out = {}
    for name, per_query in extra.items():
        v = np.asarray(per_query(red, g, named, causal), dtype=np.float64)
        if v.shape != red["row_mass"].shape:
            raise ValueError(f"metric {name!r} gave shape {v.shape}, expected {red['row_mass'].shape} (examples, "
                             "rows, queries)")
        out[name] = (v * vf).sum(axis=-1) / nq
    return out


def summarise_queries(red: dict, field_ids: np.ndarray, named: np.ndarray, causal: bool = False,
                      trivial: str = "include", extra: dict | None = None, sink_rows: np.ndarray | None = None) -> dict:
    """Per-(layer, head) summaries of one example from its per-query reductions.

    Averages run over valid queries (named-field positions), with the denominator clamped
    to 1 as in METHODS 2.1 (an example without valid queries scores 0, not NaN). With
    ``trivial="exclude"`` (METHODS 3.1) the queries whose every visible valid key lies in their
    own field are left out (``causal`` says which keys are visible); an example without any
    other query then has ``n_valid`` 0 and NaN summaries. This is :func:`summarise_batch` on a
    batch of one.

    Returns
    -------
    dict
        ``sfm``, ``entropy``, ``entropy_rownorm``, ``row_mass``, ``unnamed_mass`` (row mass off
        the named fields), ``first_mass`` (mass on key 0; NaN when the reductions lack it),
        ``sfm_named`` (SFM / (1 - unnamed mass) over queries with unnamed mass < 1; SFM / the named mass
        for ``sink_rows``, heads with learned attention sinks) (each shape
        (rows,)), ``n_valid`` and ``n_trivial`` (int), ``f2f`` (rows, F, F): mean over valid
        source-field queries of the mass on each destination field, 0 where the source is
        absent, and ``has_source`` (F,).
    """
    one = summarise_batch({k: v[None] for k, v in red.items() if v is not None},
                          np.asarray(field_ids)[None], named, causal, trivial, extra, sink_rows)
    out = {k: v[0] for k, v in one.items()}
    out["n_valid"], out["n_trivial"] = int(out["n_valid"]), int(out["n_trivial"])
    return out
