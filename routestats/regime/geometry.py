"""Geometry of query gating at one operating point (METHODS Part II B.7; the paper's Prop. 1).

For a softmax head the query-gating Jacobian factors as

    J_q = W_VO [sum_i alpha_i (x~_i - mu)(b_i - b_bar)^T] Q_r

with x~_i the normalised inputs at the attended keys, mu their attention-weighted mean, b_i the
(rotated) key vectors and Q_r = P_r W_Q D_r / sqrt(d_h) the query map. So the range of J_q lies
in W_VO U_r, U_r = span{x~_i - mu : i in A_r}, its rank is at most dim U_r <= |A_r| - 1, and J_q
v = 0 whenever Q_r v is orthogonal to the centred keys (without RoPE: W_QK^T v orthogonal to
U_r). Sigmoid heads have no competition term, so Prop. 1 does not apply to them (METHODS B.2);
their residuals against the centred subspace are reported to show by how much they leave it.

Examples
--------
The golden toy of METHODS B.7: two keys at (-1, 0) and (1, 0) with equal weights.

>>> import numpy as np
>>> X = np.array([[-1.0, 0.0], [1.0, 0.0]])
>>> g = query_gating_geometry(X, np.array([0.5, 0.5]), key_vectors=X, W_VO=np.eye(2), query_map=np.eye(2),
...                           J_q=np.diag([1.0, 0.0]), W_QK=np.eye(2))
>>> g.dim_U, round(g.diam, 12), g.kappa, g.bound_paper, g.norm_Jq
(1, 2.0, 0.5, 1.0, 1.0)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy.spatial.distance import pdist

from routestats.errors import RoutestatsError
from routestats.settings import Resampling

__all__ = ["QueryGeometry", "query_gating_geometry", "support_overlap", "overlap_sweep", "geometry_table",
           "routing_decomposition"]


@dataclass(frozen=True)
class QueryGeometry:
    """Query-gating geometry of one head (METHODS B.7).

    ``dim_U`` = rank(Sigma_r) = rank{x~_i - x~_0 : i in A_r}; ``rank_Jq`` the numerical rank of J_q; ``range_residual`` =
    |(I - Pi_{W_VO U_r}) J_q|_F / |J_q|_F; ``null_residual`` = |J_q N|_2 / |J_q|_2 over the
    directions N whose query map is orthogonal to the centred keys; ``bound_paper`` =
    |W_VO|_2 |W_QK|_2 (diam^2 / 2)(1 - kappa) (NaN with RoPE, where keys are not one linear map
    of the inputs); ``bound_cs`` = |W_VO|_2 sqrt(sum alpha |x~ - mu|^2) sqrt(sum alpha |b - b_bar|^2)
    |Q_r|_2, valid for every softmax head. ``prop1_applies`` is False for sigmoid heads, whose
    bounds are NaN and whose residuals measure how far their query gating leaves the centred
    subspaces.
    """

    head_type: str
    n_attended: int
    dim_U: int
    dim_K: int
    rank_Jq: int
    range_residual: float
    null_residual: float
    norm_Jq: float
    diam: float
    kappa: float
    bound_paper: float
    bound_cs: float
    prop1_applies: bool

    @property
    def rank_bound_holds(self) -> bool:
        return self.rank_Jq <= self.dim_U <= max(self.n_attended - 1, 0)

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([{**asdict(self), "rank_bound_holds": self.rank_bound_holds}])


def _rank_basis(A: np.ndarray) -> tuple[int, np.ndarray]:
    """Numerical rank (numpy's default tolerance: s_max * max(m, n) * eps) and an orthonormal column basis."""
    if A.size == 0:
        return 0, np.zeros((A.shape[0], 0))
    U, s, _ = np.linalg.svd(A, full_matrices=False)
    tol = (s[0] if len(s) else 0.0) * max(A.shape) * np.finfo(np.float64).eps
    k = int((s > tol).sum())
    return k, U[:, :k]


def query_gating_geometry(X: np.ndarray, alpha: np.ndarray, *, key_vectors: np.ndarray, W_VO: np.ndarray,
                          query_map: np.ndarray, J_q: np.ndarray, W_QK: np.ndarray | None = None,
                          head_type: str = "softmax", alpha_min: float = 0.0) -> QueryGeometry:
    """Prop. 1 checks and the norm bound for one head (METHODS B.7).

    Parameters
    ----------
    X : (n, d) normalised inputs x~_i at the keys.
    alpha : (n,) attention weights of the query token.
    key_vectors : (n, d_h) rotated keys b_i.
    W_VO : (d, d) W_O^h W_V^g.
    query_map : (d_h, d) P_r W_Q D_r / sqrt(d_h).
    J_q : (d, d) the head's query-gating Jacobian.
    W_QK : (d, d), optional, W_K^T query_map (the input-space bilinear form; only without RoPE).
    alpha_min : keys with alpha <= alpha_min are left out of A_r.
    """
    X, alpha, Kv = (np.asarray(a, dtype=np.float64) for a in (X, alpha, key_vectors))
    J_q = np.asarray(J_q, dtype=np.float64)
    if X.ndim != 2 or alpha.shape != (X.shape[0],) or Kv.shape[0] != X.shape[0]:
        raise RoutestatsError("X (n x d), alpha (n) and key_vectors (n x d_h) must describe the same n keys")
    if not (np.isfinite(alpha).all() and (alpha >= 0).all()):
        raise RoutestatsError("attention weights must be finite and non-negative")
    keep = alpha > alpha_min
    Xa, a, Ka = X[keep], alpha[keep], Kv[keep]
    w = a / a.sum()  # U_r is centred at the attention-weighted mean for every head type
    mu = w @ Xa
    kbar = w @ Ka
    A = np.sqrt(w)[:, None] * (Xa - mu)  # Sigma_r = A^T A
    B = np.sqrt(w)[:, None] * (Ka - kbar)
    # span{x_i - mu} = span{x_i - x_0} over A_r (all weights positive): rank without the weights'
    # dynamic range, which near one-hot attention would otherwise turn into spurious directions
    dim_U, U = _rank_basis((Xa[1:] - Xa[0]).T)
    dim_K, Kb = _rank_basis((Ka[1:] - Ka[0]).T)
    sq = np.linalg.svd(J_q, compute_uv=False)
    norm_Jq = float(sq[0]) if len(sq) else 0.0
    rank_Jq = int((sq > norm_Jq * max(J_q.shape) * np.finfo(np.float64).eps).sum())
    R = _rank_basis(np.asarray(W_VO, dtype=np.float64) @ U)[1]
    fro = np.linalg.norm(J_q)
    range_res = float(np.linalg.norm(J_q - R @ (R.T @ J_q)) / fro) if fro > 0 else 0.0
    # directions v with query_map v orthogonal to the centred keys: null space of Kb^T query_map
    M = Kb.T @ np.asarray(query_map, dtype=np.float64)
    _, s, Vt = np.linalg.svd(M, full_matrices=True) if M.size else (None, np.zeros(0), np.eye(X.shape[1]))
    tol = (s[0] if len(s) else 0.0) * max(M.shape) * np.finfo(np.float64).eps
    N = Vt[int((s > tol).sum()):].T
    null_res = float(np.linalg.norm(J_q @ N, 2) / norm_Jq) if N.shape[1] and norm_Jq > 0 else 0.0
    diam = float(pdist(Xa).max()) if len(Xa) > 1 else 0.0
    kappa = float((w**2).sum())
    vo = float(np.linalg.norm(W_VO, 2))
    softmax = head_type == "softmax"
    bound_paper = (vo * float(np.linalg.norm(W_QK, 2)) * diam**2 / 2 * (1 - kappa)
                   if W_QK is not None and softmax else float("nan"))
    bound_cs = (vo * float(np.sqrt((A**2).sum()) * np.sqrt((B**2).sum())) * float(np.linalg.norm(query_map, 2))
                if softmax else float("nan"))
    return QueryGeometry(head_type, int(keep.sum()), dim_U, dim_K, rank_Jq, range_res, null_res, norm_Jq, diam, kappa,
                         float(bound_paper), bound_cs, softmax)


def support_overlap(key_vectors: np.ndarray, alpha: np.ndarray, query_map: np.ndarray, J_q: np.ndarray,
                    V: np.ndarray) -> pd.DataFrame:
    """Support overlap s(v) = |Pi_{K_r} Q_r v|_2 against the response |J_q v|_2 (Fig. 4b).

    K_r is the span of the attention-centred keys; without RoPE s(v) = 0 exactly when the
    paper's W_QK^T v is orthogonal to U_r. Columns: direction, overlap, response.
    """
    Kv, alpha = np.asarray(key_vectors, dtype=np.float64), np.asarray(alpha, dtype=np.float64)
    keep = alpha > 0
    _, Kb = _rank_basis((Kv[keep][1:] - Kv[keep][0]).T)
    V = np.asarray(V, dtype=np.float64)
    u = np.asarray(query_map) @ V
    return pd.DataFrame({"direction": np.arange(V.shape[1]), "overlap": np.linalg.norm(Kb.T @ u, axis=0),
                         "response": np.linalg.norm(np.asarray(J_q) @ V, axis=0)})


def overlap_sweep(key_vectors: np.ndarray, alpha: np.ndarray, query_map: np.ndarray, J_q: np.ndarray,
                  n: int = 256, seed: int | None = None) -> pd.DataFrame:
    """Support overlap vs response on directions from the query-null space to random (Fig. 4b).

    v = cos(theta) u + sin(theta) w with u a random unit vector in the null space of the query
    map restricted to the centred keys, w a random unit vector and theta evenly spread over
    [0, pi/2], so overlaps run from exactly 0 to typical values. Columns of
    :func:`support_overlap` plus ``theta``.
    """
    seed = Resampling().seed if seed is None else seed  # the one default seed (routestats.settings)
    Kv, alpha = np.asarray(key_vectors, dtype=np.float64), np.asarray(alpha, dtype=np.float64)
    keep = alpha > 0
    _, Kb = _rank_basis((Kv[keep][1:] - Kv[keep][0]).T)
    M = Kb.T @ np.asarray(query_map, dtype=np.float64)
    d = M.shape[1]
    _, sv, Vt = np.linalg.svd(M, full_matrices=True)
    null = Vt[int((sv > (sv[0] if len(sv) else 0) * max(M.shape) * np.finfo(np.float64).eps).sum()):].T
    rng = np.random.default_rng(seed)
    theta = np.linspace(0, np.pi / 2, n)
    w = rng.standard_normal((d, n))
    w /= np.linalg.norm(w, axis=0)
    if null.shape[1]:
        u = null @ rng.standard_normal((null.shape[1], n))
        u /= np.linalg.norm(u, axis=0)
    else:
        u = w
    V = np.cos(theta) * u + np.sin(theta) * w
    V /= np.linalg.norm(V, axis=0)
    return support_overlap(Kv, alpha, query_map, J_q, V).assign(theta=theta)


def geometry_table(heads: dict) -> pd.DataFrame:
    """One row per head from the per-head arrays written with the operators (``J_Q_heads``,
    ``W_VO``, ``query_map``, ``key_vectors``, ``alpha``, ``X_keys``, optional ``W_QK``, ``head_types``)."""
    rows = []
    for h, htype in enumerate(heads["head_types"]):
        g = query_gating_geometry(heads["X_keys"], heads["alpha"][h], key_vectors=heads["key_vectors"][h],
                                  W_VO=heads["W_VO"][h], query_map=heads["query_map"][h], J_q=heads["J_Q_heads"][h],
                                  W_QK=heads["W_QK"][h] if heads.get("W_QK") is not None else None, head_type=str(htype))
        rows.append(g.to_frame().assign(head=h))
    out = pd.concat(rows, ignore_index=True)
    return out[["head"] + [c for c in out.columns if c != "head"]]


def routing_decomposition(heads: dict, V: np.ndarray, names=None) -> pd.DataFrame:
    """Directional routing decomposition per softmax head and direction (METHODS B.4, App. 9.6; M = I).

    Candidates f_i = W_VO x~_i with mixture F = sum alpha_i f_i; a_i = v'(f_i - F) and
    b_i = (grad s_i - g_bar)'v with grad s_i = Q_r' b_i (the score's gradient in the query token).
    Columns: head, direction, diversity D_v = sqrt(sum alpha a^2), sensitivity S_v =
    sqrt(sum alpha b^2), I_gate = sum alpha a b (= v' J_q^h v) and alignment rho = I / (D S),
    |rho| <= 1 (Cauchy-Schwarz).
    """
    V = np.asarray(V, dtype=np.float64)
    if V.ndim == 1:
        V = V[:, None]
    names = list(range(V.shape[1])) if names is None else list(names)
    rows = []
    X = np.asarray(heads["X_keys"], dtype=np.float64)
    for h, htype in enumerate(heads["head_types"]):
        if str(htype) != "softmax":
            continue
        a = np.asarray(heads["alpha"][h], dtype=np.float64)
        F = X - a @ X  # x~_i - mu
        A = (np.asarray(heads["W_VO"][h]) @ F.T).T @ V  # (n, directions): a_i per direction
        Kc = np.asarray(heads["key_vectors"][h]) - a @ np.asarray(heads["key_vectors"][h])
        B = Kc @ (np.asarray(heads["query_map"][h]) @ V)  # b_i per direction
        D = np.sqrt(a @ A**2)
        Sv = np.sqrt(a @ B**2)
        ig = a @ (A * B)
        with np.errstate(divide="ignore", invalid="ignore"):
            rho = np.where(D * Sv > 0, ig / (D * Sv), np.nan)
        rows.append(pd.DataFrame({"head": h, "direction": names, "diversity": D, "sensitivity": Sv, "I_gate": ig,
                                  "alignment": rho}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(
        columns=["head", "direction", "diversity", "sensitivity", "I_gate", "alignment"])
