"""Regime maps on a spherical slice and analytic vs finite-forward agreement (METHODS B.8.4-5).

A slice is an orthonormal E (d x 3); the unit sphere of R^3 is sampled with a Fibonacci lattice
and each lattice point w gives the direction v = E w. Directions are classified from the growth
operators (:func:`routestats.regime.directional`) and, by the runners, from finite forwards of
the sublayer; :func:`agreement` compares the two. :func:`adjacency` turns a labelled lattice into
area shares and the pairs of regimes that touch (k nearest neighbours on the sphere).

Examples
--------
>>> import numpy as np
>>> W = fibonacci_sphere(500)
>>> W.shape, bool(np.allclose(np.linalg.norm(W, axis=1), 1))
((500, 3), True)
>>> bool(np.abs(W.mean(axis=0)).max() < 0.01)
True
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats
from scipy.spatial import cKDTree

from routestats.errors import RoutestatsError
from routestats.regime.certify import Operators, classify, directional
from routestats.settings import Resampling

__all__ = ["fibonacci_sphere", "slice_basis", "regime_map", "adjacency", "agreement", "SWITCHING"]

SWITCHING = ("Q", "K", "E", "J")


def fibonacci_sphere(n: int) -> np.ndarray:
    """n nearly uniform points on the unit sphere S^2 (golden-angle spiral), (n, 3)."""
    if n < 1:
        raise RoutestatsError("a lattice needs at least one point")
    i = np.arange(n) + 0.5
    z = 1 - 2 * i / n
    theta = np.pi * (1 + np.sqrt(5.0)) * np.arange(n)
    rho = np.sqrt(1 - z * z)
    return np.column_stack([rho * np.cos(theta), rho * np.sin(theta), z])


def slice_basis(*directions: np.ndarray | None, d: int, seed: int | None = None) -> np.ndarray:
    """Orthonormal E (d x 3) spanned by the given directions (e.g. v_rel, v_sev) in order,
    completed with seeded random directions when they are fewer than three or dependent."""
    seed = Resampling().seed if seed is None else seed  # the one default seed (routestats.settings)
    rng = np.random.default_rng(seed)
    cols = [np.asarray(v, dtype=np.float64) for v in directions if v is not None]
    basis: list[np.ndarray] = []
    for v in cols + [rng.standard_normal(d) for _ in range(6)]:
        for b in basis:
            v = v - (b @ v) * b
        n = np.linalg.norm(v)
        if n > 1e-8:
            basis.append(v / n)
        if len(basis) == 3:
            return np.column_stack(basis)
    raise RoutestatsError(f"cannot build a 3-D slice in {d} dimensions")


def regime_map(ops: Operators, E: np.ndarray, n: int = 2000, margin: float = 0.0) -> pd.DataFrame:
    """Analytic regime of every Fibonacci-lattice direction v = E w (METHODS B.8.5).

    Columns: point, w1, w2, w3, lon, lat (degrees, for plotting), the growth columns of
    :func:`routestats.regime.directional`, and ``regime`` (``ambiguous`` within ``margin``).
    """
    W = fibonacci_sphere(n)
    t = directional(ops, E @ W.T)
    if margin > 0:
        t["regime"] = [classify(*x, margin=margin) for x in t[["g_T", "g_TQ", "g_TK", "g_full"]].to_numpy()]
    lon = np.degrees(np.arctan2(W[:, 1], W[:, 0]))
    lat = np.degrees(np.arcsin(np.clip(W[:, 2], -1, 1)))
    head = pd.DataFrame({"point": np.arange(n), "w1": W[:, 0], "w2": W[:, 1], "w3": W[:, 2], "lon": lon, "lat": lat})
    return pd.concat([head, t], axis=1)


def adjacency(W: np.ndarray, labels, k: int = 6) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Area shares and adjacency of regimes on a lattice (METHODS B.8.5).

    Returns (shares: regime, points, share) and (edges: regime_a, regime_b, neighbour_pairs)
    where an edge counts unordered k-nearest-neighbour pairs of points with different labels.
    """
    W = np.asarray(W, dtype=np.float64)
    labels = np.asarray(labels)
    if len(W) != len(labels):
        raise RoutestatsError("one label per lattice point is needed")
    vc = pd.Series(labels).value_counts()
    shares = pd.DataFrame({"regime": vc.index, "points": vc.to_numpy(), "share": vc.to_numpy() / len(labels)})
    k = min(k, len(W) - 1)
    if k < 1:
        return shares, pd.DataFrame(columns=["regime_a", "regime_b", "neighbour_pairs"])
    _, idx = cKDTree(W).query(W, k=k + 1)
    i = np.repeat(np.arange(len(W)), k)
    j = idx[:, 1:].ravel()
    pairs = {(min(a, b), max(a, b)) for a, b in zip(i, j)}
    la = np.array([labels[a] for a, b in pairs])
    lb = np.array([labels[b] for a, b in pairs])
    diff = la != lb
    ab = np.sort(np.column_stack([la[diff], lb[diff]]).astype(str), axis=1)
    edges = (pd.DataFrame(ab, columns=["regime_a", "regime_b"]).value_counts().rename("neighbour_pairs").reset_index()
             if len(ab) else pd.DataFrame(columns=["regime_a", "regime_b", "neighbour_pairs"]))
    return shares, edges


def agreement(analytic: pd.DataFrame, finite: pd.DataFrame, margin: float = 0.0) -> pd.DataFrame:
    """Analytic vs finite-forward classification of the same directions (METHODS B.8.4).

    Both frames carry g_T, g_TQ, g_TK, g_full per direction, in the same order. Directions
    with an analytic deciding value within ``margin`` of zero are flagged and left out of the
    label comparisons. One row: directions, flagged, switch_agreement and mechanism_agreement
    (shares of identical switch/no-switch and full labels), label_disagreements (count),
    pearson_r of g_full, and the max abs difference of g_full.
    """
    cols = ["g_T", "g_TQ", "g_TK", "g_full"]
    a, f = analytic[cols].to_numpy(np.float64), finite[cols].to_numpy(np.float64)
    if a.shape != f.shape:
        raise RoutestatsError(f"analytic ({a.shape[0]}) and finite-forward ({f.shape[0]}) directions differ in number")
    la = np.array([classify(*x) for x in a])
    lf = np.array([classify(*x) for x in f])
    flagged = np.array([classify(*x, margin=margin) == "ambiguous" for x in a]) if margin > 0 else np.zeros(len(a), bool)
    keep = ~flagged
    sw = lambda lab: np.isin(lab, SWITCHING)  # noqa: E731
    r = stats.pearsonr(a[:, 3], f[:, 3]).statistic if len(a) > 2 and np.ptp(a[:, 3]) > 0 else np.nan
    return pd.DataFrame([{
        "directions": len(a), "flagged": int(flagged.sum()),
        "switch_agreement": float((sw(la[keep]) == sw(lf[keep])).mean()) if keep.any() else np.nan,
        "mechanism_agreement": float((la[keep] == lf[keep]).mean()) if keep.any() else np.nan,
        "label_disagreements": int((la[keep] != lf[keep]).sum()),
        "pearson_r": float(r), "max_abs_diff_g_full": float(np.abs(a[:, 3] - f[:, 3]).max()) if len(a) else np.nan,
    }])
