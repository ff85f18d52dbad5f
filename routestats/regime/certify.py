"""Spectral certification of gating-induced regime switching (METHODS Part II B.1, B.4-B.6).

Works on numpy operators only: the pathway Jacobians J_T (value transport), J_Q (query
gating) and J_K (key gating) of a residual attention sublayer at one operating point, each
d x d and each already containing the residual identity where METHODS B.3 puts it
(``J_T = I + A_T``; the gating Jacobians are the attention parts ``A_Q``, ``A_K``).

Growth of a map J under metric M: G(J) = J^T M J - M (symmetrised in float64); directional
growth g(v) = v^T G v. Switching at v: transport contracts (g_T(v) < 0) but the full map
does not (g_full(v) > 0).

Examples
--------
The 2-D example of the paper: J = diag(2, 1/2) has G = diag(3, -3/4).

>>> import numpy as np
>>> growth(np.diag([2.0, 0.5])).diagonal().tolist()
[3.0, -0.75]
>>> classify(g_T=-0.2, g_TQ=0.5, g_TK=-0.1, g_full=0.4)
'Q'
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import linalg, optimize

from routestats.errors import RoutestatsError
from routestats.settings import Resampling

__all__ = ["growth", "Operators", "classify", "directional", "Certificate", "certify", "severity_certificate",
           "severity_sweep", "tau_max_dual", "analyse", "probe_basis", "probe_sweep", "mechanism_composition",
           "search_quality"]


def growth(J: np.ndarray, M: np.ndarray | None = None) -> np.ndarray:
    """G^M(J) = J^T M J - M, symmetrised: (G + G^T) / 2, in float64."""
    J = np.asarray(J, dtype=np.float64)
    M = np.eye(J.shape[1]) if M is None else np.asarray(M, dtype=np.float64)
    G = J.T @ M @ J - M
    return (G + G.T) / 2


@dataclass(frozen=True)
class Operators:
    """Pathway Jacobians at one operating point and their growth operators (METHODS B.3)."""

    J_T: np.ndarray
    J_Q: np.ndarray
    J_K: np.ndarray
    M: np.ndarray | None = None

    def __post_init__(self):
        d = self.J_T.shape
        if len(d) != 2 or d[0] != d[1] or self.J_Q.shape != d or self.J_K.shape != d:
            raise RoutestatsError("J_T, J_Q and J_K must be square matrices of one size")
        for name in ("J_T", "J_Q", "J_K"):
            if not np.isfinite(getattr(self, name)).all():
                raise RoutestatsError(f"{name} holds NaN or infinity")

    @property
    def G_T(self):
        return growth(self.J_T, self.M)

    @property
    def G_TQ(self):
        return growth(self.J_T + self.J_Q, self.M)

    @property
    def G_TK(self):
        return growth(self.J_T + self.J_K, self.M)

    @property
    def G_full(self):
        return growth(self.J_T + self.J_Q + self.J_K, self.M)

    @property
    def dG(self):
        return self.G_full - self.G_T


def classify(g_T: float, g_TQ: float, g_TK: float, g_full: float, margin: float = 0.0) -> str:
    """Regime label of one direction from the signs of its four growth values (METHODS B.4).

    NC (transport non-contractive), NS (contraction without switching), and for switching
    directions Q (query gating alone suffices), K (key gating alone), E (either), J (both
    needed). ``ambiguous`` when a deciding value lies within ``margin`` of 0.
    """
    vals = (g_T, g_full) if g_T >= 0 or g_full <= 0 else (g_T, g_full, g_TQ, g_TK)
    if margin > 0 and any(abs(v) < margin for v in vals):
        return "ambiguous"
    if g_T >= 0:
        return "NC"
    if g_full <= 0:
        return "NS"
    q, k = g_TQ > 0, g_TK > 0
    return "E" if q and k else "Q" if q else "K" if k else "J"


def directional(ops: Operators, V: np.ndarray) -> pd.DataFrame:
    """Growth values, relative strength, severity, query-key interaction and regime per column of V.

    Columns: g_T, g_TQ, g_TK, g_full, Gamma (= v'dG v / -g_T, NaN unless g_T < 0),
    tau (= -g_T / |v|_M^2), qk_interaction (= g_full - g_TQ - g_TK + g_T = 2<J_Q v, J_K v>_M), regime.
    """
    V = np.asarray(V, dtype=np.float64)
    if V.ndim == 1:
        V = V[:, None]
    q = lambda G: (V * (G @ V)).sum(axis=0)  # noqa: E731  (v'Gv per column through one BLAS product)
    gT, gTQ, gTK, gF = q(ops.G_T), q(ops.G_TQ), q(ops.G_TK), q(ops.G_full)
    norm = (V * V).sum(axis=0) if ops.M is None else q(ops.M)
    with np.errstate(divide="ignore", invalid="ignore"):
        gamma = np.where(gT < 0, (gF - gT) / -gT, np.nan)
    return pd.DataFrame({"g_T": gT, "g_TQ": gTQ, "g_TK": gTK, "g_full": gF, "Gamma": gamma, "tau": -gT / norm,
                         "qk_interaction": gF - gTQ - gTK + gT,
                         "regime": [classify(*x) for x in zip(gT, gTQ, gTK, gF)]})


@dataclass(frozen=True)
class Certificate:
    """Spectral certificate on the transport-contractive subspace S (METHODS B.5)."""

    tol: float
    n_near_zero: int
    dim_S: int
    P: np.ndarray  # d x k basis of S (G_T eigenvectors with eigenvalue < -tol)
    eigenvalues: np.ndarray  # of W = C^{-1/2} R C^{-1/2}, descending
    U: np.ndarray  # generalised eigenvectors (k x k), columns aligned with eigenvalues
    C: np.ndarray
    R: np.ndarray

    @property
    def lambda_max(self) -> float:
        return float(self.eigenvalues[0]) if len(self.eigenvalues) else float("nan")

    @property
    def switches(self) -> bool:
        return bool(len(self.eigenvalues)) and self.lambda_max > 1

    @property
    def d_sw(self) -> int:
        return int((self.eigenvalues > 1).sum())

    @property
    def v_sw(self) -> np.ndarray:
        """The direction of maximal relative switching strength (= v_rel)."""
        return self.P @ self.U[:, 0]

    @property
    def V_sw(self) -> np.ndarray:
        """Basis (d x d_sw) of the certified switching subspace."""
        return self.P @ self.U[:, : self.d_sw]

    def d_sw_band(self, eps_W: float) -> tuple[int, int]:
        """Robustness band for d_sw when |W_hat - W|_2 <= eps_W."""
        return int((self.eigenvalues > 1 + eps_W).sum()), int((self.eigenvalues > 1 - eps_W).sum())

    def no_switch_sufficient(self) -> bool:
        """Cheap sufficient check that nothing switches: lambda_max(R) <= lambda_min(C)."""
        return bool(np.linalg.eigvalsh(self.R)[-1] <= np.linalg.eigvalsh(self.C)[0])


def certify(ops: Operators, tol: float | None = None, P: np.ndarray | None = None) -> Certificate:
    """Build C = -P'G_T P, R = P'dG P on S and solve R u = lambda C u (symmetric-definite, LAPACK sygv).

    S defaults to the span of G_T's eigenvectors with eigenvalue < -tol, tol =
    1e-9 max(1, |G_T|_2) (exact zeros appear as +-1e-17 and would make C singular). A user
    basis P is restricted to its own negative part of P'G_T P.
    """
    G_T = ops.G_T
    lam, Uf = np.linalg.eigh(G_T)
    tol = 1e-9 * max(1.0, float(np.abs(lam).max())) if tol is None else float(tol)
    near_zero = int((np.abs(lam) <= tol).sum())
    if P is None:
        P = Uf[:, lam < -tol]
    else:
        P = np.asarray(P, dtype=np.float64)
        Q, _ = np.linalg.qr(P)
        w, E = np.linalg.eigh(Q.T @ G_T @ Q)
        P = Q @ E[:, w < -tol]
    k = P.shape[1]
    if k == 0:
        return Certificate(tol, near_zero, 0, P, np.zeros(0), np.zeros((0, 0)), np.zeros((0, 0)), np.zeros((0, 0)))
    C = -(P.T @ G_T @ P)
    R = P.T @ ops.dG @ P
    C, R = (C + C.T) / 2, (R + R.T) / 2
    ev, U = linalg.eigh(R, C)
    order = np.argsort(ev)[::-1]
    return Certificate(tol, near_zero, k, P, ev[order], U[:, order], C, R)


def _lambda_max(R: np.ndarray, C: np.ndarray) -> tuple[float, np.ndarray]:
    ev, U = linalg.eigh(R, C)
    return float(ev[-1]), U[:, -1]


def _severity_basis(ops: Operators, cert: Certificate) -> tuple[np.ndarray, np.ndarray]:
    """Severity eigenpairs C q = eta B q (B = P'MP), sorted by eta descending, B-orthonormal q's."""
    M = np.eye(cert.P.shape[0]) if ops.M is None else ops.M
    B = cert.P.T @ M @ cert.P
    eta, Qm = linalg.eigh(cert.C, (B + B.T) / 2)
    order = np.argsort(eta)[::-1]
    return eta[order], Qm[:, order]


def _lambda_on(cert: Certificate, Qm: np.ndarray, j: int) -> tuple[float, np.ndarray]:
    Qj = Qm[:, :j]
    return _lambda_max(Qj.T @ cert.R @ Qj, Qj.T @ cert.C @ Qj)


def severity_certificate(ops: Operators, cert: Certificate) -> dict:
    """tau_cert: the largest severity level tau0 whose nested subspace S_tau0 still switches (METHODS B.6).

    Severity eigenpairs C q = eta B q (B = P'MP) sorted by eta descending; Q_j = span(q_1..q_j).
    lambda_max(R|Q_j, C|Q_j) is non-decreasing in j, so j* = min{j : lambda_max > 1} is found by
    binary search and tau_cert = eta_(j*). Returns tau_cert, j_star, eta, v_sev and the number of
    eigensolves; tau_cert = 0 when nothing switches.
    """
    if cert.dim_S == 0 or not cert.switches:
        return {"tau_cert": 0.0, "j_star": None, "eta": np.zeros(0), "v_sev": None, "solves": 0}
    eta, Qm = _severity_basis(ops, cert)
    solves = 0

    def switches(j):
        nonlocal solves
        solves += 1
        return _lambda_on(cert, Qm, j)

    lo, hi = 1, len(eta)  # predicate true at hi (the whole S switches)
    while lo < hi:
        mid = (lo + hi) // 2
        if switches(mid)[0] > 1:
            hi = mid
        else:
            lo = mid + 1
    lam, u = switches(lo)
    v_sev = cert.P @ Qm[:, :lo] @ u
    return {"tau_cert": float(eta[lo - 1]), "j_star": lo, "eta": eta, "v_sev": v_sev, "lambda_at_j_star": lam,
            "solves": solves}


def severity_sweep(ops: Operators, cert: Certificate, points: int = 60, tau_cert: float | None = None) -> pd.DataFrame:
    """lambda_max(W_tau0) on a grid of severity levels tau0 (the plot of Fig. 13b; METHODS B.6 step 4).

    Columns: tau0, dim (of S_tau0), lambda_max (NaN where S_tau0 is empty). The grid runs from
    the smallest to the largest severity eigenvalue and includes every eta where lambda_max
    crosses 1, so the plot reaches tau_cert (computed unless given).
    """
    if cert.dim_S == 0:
        return pd.DataFrame(columns=["tau0", "dim", "lambda_max"])
    eta, Qm = _severity_basis(ops, cert)
    if tau_cert is None:
        tau_cert = severity_certificate(ops, cert)["tau_cert"]
    grid = np.unique(np.concatenate([np.linspace(eta[-1], eta[0], points), [tau_cert]]))
    rows = []
    for t in grid[grid > 0]:
        j = int((eta >= t - 1e-15).sum())
        rows.append({"tau0": float(t), "dim": j, "lambda_max": _lambda_on(cert, Qm, j)[0] if j else np.nan})
    return pd.DataFrame(rows)


def tau_max_dual(cert: Certificate) -> float:
    """Exact tau_max = max u'Cu over u'Bu = 1 with u'(R - C)u >= 0, by Lagrangian duality (ours, not in the paper).

    tau_max = min over mu >= 0 of lambda_max(C + mu (R - C)) in the B = I metric of an
    orthonormal P (valid for k >= 3, where the joint numerical range is convex). NaN when S is
    empty; 0 when nothing switches.
    """
    if cert.dim_S == 0:
        return float("nan")
    if not cert.switches:
        return 0.0
    A = cert.R - cert.C

    def f(mu):
        return float(np.linalg.eigvalsh(cert.C + mu * A)[-1])

    hi = 1.0
    while f(hi * 2) < f(hi) and hi < 1e8:
        hi *= 2
    res = optimize.minimize_scalar(f, bounds=(0.0, hi * 2), method="bounded", options={"xatol": 1e-12})
    return min(f(0.0), float(res.fun))


def analyse(ops: Operators, probes: int = 200, seed: int | None = None, cert: Certificate | None = None,
            sev: dict | None = None) -> dict[str, pd.DataFrame]:
    """Spectral summary and direction table of one operating point (tidy frames, METHODS D.2).

    Directions: v_rel (max relative strength), v_sev (certified severe direction), ``probes``
    random directions inside S and ``probes`` random ambient directions. ``cert`` and ``sev``
    (results of :func:`certify` and :func:`severity_certificate`) are reused when given.
    """
    seed = Resampling().seed if seed is None else seed  # the one default seed (routestats.settings)
    c = certify(ops) if cert is None else cert
    sev = severity_certificate(ops, c) if sev is None else sev
    summary = pd.DataFrame([{"dim": ops.J_T.shape[0], "tol": c.tol, "n_near_zero": c.n_near_zero, "dim_S": c.dim_S,
                             "lambda_max": c.lambda_max, "d_sw": c.d_sw, "switches": c.switches,
                             "tau_cert": sev["tau_cert"], "j_star": sev["j_star"],
                             "tau_max_dual": tau_max_dual(c) if c.dim_S >= 3 else np.nan,
                             "no_switch_sufficient": c.no_switch_sufficient() if c.dim_S else True}])
    rng = np.random.default_rng(seed)
    blocks, sources = [], []
    if c.dim_S:
        blocks.append(c.v_sw[:, None])
        sources.append("v_rel")
        if sev["v_sev"] is not None:
            blocks.append(sev["v_sev"][:, None])
            sources.append("v_sev")
        blocks.append(c.P @ rng.standard_normal((c.dim_S, probes)))
        sources += ["random_S"] * probes
    blocks.append(rng.standard_normal((ops.J_T.shape[0], probes)))
    sources += ["random_ambient"] * probes
    V = np.concatenate(blocks, axis=1)
    V = V / np.linalg.norm(V, axis=0, keepdims=True)
    d = directional(ops, V)
    d.insert(0, "source", sources)
    out = {"summary": summary, "directions": d}
    if c.dim_S:
        out["mechanisms"] = mechanism_composition(ops, c, n=max(probes, 1), seed=seed + 1)
        out["search"] = search_quality(ops, c, n_ambient=max(probes, 1), n_S=max(probes, 1), seed=seed + 2,
                                       tau_cert=sev["tau_cert"])
    return out


def probe_basis(d: int, p: int, seed: int | None = None, total: int | None = None) -> np.ndarray:
    """Orthonormal random probe (d x p): QR of a Gaussian matrix from ``seed`` (METHODS B.9).

    With ``total`` the probe is the first p columns of one d x total orthonormal matrix, so
    probes of growing size are nested.
    """
    seed = Resampling().seed if seed is None else seed  # the one default seed (routestats.settings)
    n = max(p, total or p)
    if n > d:
        raise RoutestatsError(f"a probe of {n} columns does not fit in {d} dimensions")
    Q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, n)))
    return Q[:, :p]


def probe_sweep(ops: Operators, sizes=(32, 64, 128, 256), seed: int | None = None) -> pd.DataFrame:
    """Projected certificates on nested random probes (METHODS B.9).

    Probes are the first p columns of one orthonormal d x max(sizes) matrix from ``seed``
    (sizes above d are left out). Columns: probe, dim_S_proj, lambda_max, d_sw,
    normalised_d_sw (= d_sw / dim S_proj).
    """
    seed = Resampling().seed if seed is None else seed  # the one default seed (routestats.settings)
    d = ops.J_T.shape[0]
    sizes = [int(p) for p in sizes if p <= d]
    if not sizes:
        return pd.DataFrame(columns=["probe", "dim_S_proj", "lambda_max", "d_sw", "normalised_d_sw"])
    full = probe_basis(d, max(sizes), seed=seed)
    rows = []
    for p in sizes:
        c = certify(ops, P=full[:, :p])
        rows.append({"probe": p, "dim_S_proj": c.dim_S, "lambda_max": c.lambda_max, "d_sw": c.d_sw,
                     "normalised_d_sw": c.d_sw / c.dim_S if c.dim_S else np.nan})
    return pd.DataFrame(rows)


def _random_in(P: np.ndarray, n: int, rng) -> np.ndarray:
    V = P @ rng.standard_normal((P.shape[1], n))
    return V / np.linalg.norm(V, axis=0, keepdims=True)


def mechanism_composition(ops: Operators, cert: Certificate, n: int = 4096, seed: int | None = None) -> pd.DataFrame:
    """Shares of the Q/K/E/J mechanisms among switching random unit directions of S (B.9).

    Columns: regime, count, share_of_switching, share_of_all. Labels record signs, not additive shares.
    """
    seed = Resampling().seed if seed is None else seed  # the one default seed (routestats.settings)
    if cert.dim_S == 0:
        raise RoutestatsError("the transport-contractive subspace is empty")
    t = directional(ops, _random_in(cert.P, n, np.random.default_rng(seed)))
    counts = t["regime"].value_counts()
    sw = int(counts.reindex(["Q", "K", "E", "J"]).fillna(0).sum())
    rows = [{"regime": k, "count": int(counts.get(k, 0)),
             "share_of_switching": (counts.get(k, 0) / sw) if sw and k in "QKEJ" else np.nan,
             "share_of_all": counts.get(k, 0) / n} for k in ("NC", "NS", "Q", "K", "E", "J")]
    return pd.DataFrame(rows)


def search_quality(ops: Operators, cert: Certificate, n_ambient: int = 8192, n_S: int = 4096, seed: int | None = None,
                   tau_cert: float | None = None) -> pd.DataFrame:
    """Blind ambient search vs oracle search inside S vs the spectral certificate (B.10).

    Columns: search, directions, switching, share, best_tau (largest severity among switching directions).
    """
    seed = Resampling().seed if seed is None else seed  # the one default seed (routestats.settings)
    rng = np.random.default_rng(seed)
    rows = []
    for name, V in (("blind_ambient", _random_in(np.eye(ops.J_T.shape[0]), n_ambient, rng)),
                    ("oracle_in_S", _random_in(cert.P, n_S, rng) if cert.dim_S else None)):
        if V is None:
            continue
        t = directional(ops, V)
        sw = (t["g_T"] < 0) & (t["g_full"] > 0)
        rows.append({"search": name, "directions": V.shape[1], "switching": int(sw.sum()), "share": float(sw.mean()),
                     "best_tau": float(t.loc[sw, "tau"].max()) if sw.any() else np.nan})
    if tau_cert is None:
        tau_cert = severity_certificate(ops, cert)["tau_cert"]
    rows.append({"search": "spectral", "directions": cert.dim_S, "switching": cert.d_sw,
                 "share": cert.d_sw / cert.dim_S if cert.dim_S else np.nan, "best_tau": tau_cert})
    return pd.DataFrame(rows)
