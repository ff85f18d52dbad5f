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
        each named field (valid = named field; stored positions are non-padding).
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
    }


def summarise_queries(red: dict, field_ids: np.ndarray, named: np.ndarray) -> dict:
    """Per-(layer, head) summaries of one example from its per-query reductions.

    Averages run over valid queries (named-field positions), with the denominator clamped
    to 1 as in METHODS 2.1 (an example without valid queries scores 0, not NaN).

    Returns
    -------
    dict
        ``sfm``, ``entropy``, ``entropy_rownorm``, ``row_mass`` (each shape (rows,)),
        ``n_valid`` (int), ``f2f`` (rows, F, F): mean over valid source-field queries of the
        mass on each destination field, 0 where the source is absent, and ``has_source`` (F,).
    """
    g = np.asarray(field_ids)
    named = np.asarray(named)
    src = g[:, None] == named[None, :]  # (n, F): query position i belongs to named field f
    valid = src.any(axis=1)
    n_valid = int(valid.sum())
    nq = max(1, n_valid)
    fm = red["field_mass"]
    idx = np.where(valid, src.argmax(axis=1), 0)
    own = fm[:, np.arange(len(g)), idx]  # mass of each query on its own field
    vf = valid.astype(np.float64)
    counts = src.sum(axis=0)
    f2f = np.einsum("rnd,ns->rsd", fm, src.astype(np.float64)) / np.maximum(counts, 1)[None, :, None]
    return {
        "sfm": (own * vf).sum(axis=-1) / nq,
        "entropy": (red["entropy"] * vf).sum(axis=-1) / nq,
        "entropy_rownorm": (red["entropy_rownorm"] * vf).sum(axis=-1) / nq,
        "row_mass": (red["row_mass"] * vf).sum(axis=-1) / nq,
        "n_valid": n_valid,
        "f2f": f2f,
        "has_source": counts > 0,
    }
