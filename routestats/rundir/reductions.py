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

from routestats.rundir.schema import ENTROPY_EPS


def _entropy(p: np.ndarray) -> np.ndarray:
    """-sum p ln(p + eps) over the last axis, with one temporary (bitwise equal to the naive form)."""
    t = p + ENTROPY_EPS
    np.log(t, out=t)
    t *= p
    return -t.sum(axis=-1)


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
    O_i over valid queries is sum_f n_f^2 / N^2 (METHODS 2.5).

    >>> v, o, t = query_opportunity(np.array([4, 4, 3, 3]), np.array([3, 4]), causal=True)
    >>> o.tolist(), t.tolist()  # query 2 sees keys {4, 4, 3}: 1/3 of them in its field
    ([1.0, 1.0, 0.3333333333333333, 0.5], [True, True, False, False])
    >>> round(float(query_opportunity(np.array([4, 4, 3]), np.array([3, 4]))[1].mean()), 12)  # (2**2 + 1**2) / 3**2
    0.555555555556
    """
    g = np.asarray(field_ids)
    named = np.asarray(named)
    src = g[:, None] == named[None, :]  # (n, F)
    valid = src.any(axis=1)
    counts = np.cumsum(src, axis=0) if causal else np.broadcast_to(src.sum(axis=0), src.shape)
    total = counts.sum(axis=1)
    own = (counts * src).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        o = np.where(valid & (total > 0), own / np.maximum(total, 1), np.nan)
    trivial = valid & (o == 1.0)
    return valid, o, trivial


def summarise_queries(red: dict, field_ids: np.ndarray, named: np.ndarray, causal: bool = False,
                      trivial: str = "include") -> dict:
    """Per-(layer, head) summaries of one example from its per-query reductions.

    Averages run over valid queries (named-field positions), with the denominator clamped
    to 1 as in METHODS 2.1 (an example without valid queries scores 0, not NaN). With
    ``trivial="exclude"`` (METHODS 3.1) the queries whose every visible valid key lies in their
    own field are left out (``causal`` says which keys are visible); an example without any
    other query then has ``n_valid`` 0 and NaN summaries.

    Returns
    -------
    dict
        ``sfm``, ``entropy``, ``entropy_rownorm``, ``row_mass``, ``unnamed_mass`` (row mass off
        the named fields), ``first_mass`` (mass on key 0; NaN when the reductions lack it),
        ``sfm_named`` (SFM / (1 - unnamed mass) over queries with unnamed mass < 1) (each shape
        (rows,)), ``n_valid`` and ``n_trivial`` (int), ``f2f`` (rows, F, F): mean over valid
        source-field queries of the mass on each destination field, 0 where the source is
        absent, and ``has_source`` (F,).
    """
    if trivial not in ("include", "exclude"):
        raise ValueError(f"trivial must be include or exclude, got {trivial!r}")
    g = np.asarray(field_ids)
    named = np.asarray(named)
    src = g[:, None] == named[None, :]  # (n, F): query position i belongs to named field f
    valid, _, is_trivial = query_opportunity(g, named, causal)
    n_trivial = int(is_trivial.sum())
    if trivial == "exclude":
        valid = valid & ~is_trivial
        src = src & valid[:, None]
    n_valid = int(valid.sum())
    nq = max(1, n_valid)
    fm = red["field_mass"]
    idx = np.where(valid, src.argmax(axis=1), 0)
    own = fm[:, np.arange(len(g)), idx]  # mass of each query on its own field
    vf = valid.astype(np.float64)
    counts = src.sum(axis=0)
    f2f = np.einsum("rnd,ns->rsd", fm, src.astype(np.float64)) / np.maximum(counts, 1)[None, :, None]
    unnamed = red["row_mass"] - fm.sum(axis=-1)
    first = red.get("first_mass")
    named_ok = valid[None, :] & (unnamed < 1.0 - 1e-12)
    with np.errstate(invalid="ignore", divide="ignore"):
        own_named = np.where(named_ok, own / np.where(named_ok, 1.0 - unnamed, 1.0), 0.0)
        sfm_named = own_named.sum(axis=-1) / named_ok.sum(axis=-1)
    out = {
        "sfm": (own * vf).sum(axis=-1) / nq,
        "entropy": (red["entropy"] * vf).sum(axis=-1) / nq,
        "entropy_rownorm": (red["entropy_rownorm"] * vf).sum(axis=-1) / nq,
        "row_mass": (red["row_mass"] * vf).sum(axis=-1) / nq,
        "unnamed_mass": (unnamed * vf).sum(axis=-1) / nq,
        "first_mass": (first * vf).sum(axis=-1) / nq if first is not None else np.full(len(unnamed), np.nan),
        "sfm_named": sfm_named,
        "n_valid": n_valid,
        "n_trivial": n_trivial,
        "f2f": f2f,
        "has_source": counts > 0,
    }
    if n_valid == 0 and trivial == "exclude":  # nothing left to average: undefined, not 0
        for k in ("sfm", "entropy", "entropy_rownorm", "row_mass", "unnamed_mass", "first_mass"):
            out[k] = np.full(len(unnamed), np.nan)
    return out
