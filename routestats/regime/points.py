"""Regime-switching analysis of stored operators, point by point (the report is :mod:`routestats.compose.regime`).

Operators come from ``python -m runners regime`` (``RUN/operators/index.json`` plus one ``.npz``
per operating point) or from a single ``.npz`` holding at least J_T, J_Q and J_K. Everything
here is numpy/scipy: the certificate, severity, geometry, regime maps and agreement of
:mod:`routestats.regime.certify`, :mod:`routestats.regime.geometry` and :mod:`routestats.regime.maps`.

Tidy tables of the regime :class:`routestats.report.Report` (each keyed by layer, example, token):

``summary``       dim, tol, dim_S, lambda_max, d_sw (and its band), tau_cert, tau_max_dual, errors
``spectrum``      rank, eigenvalue of W (descending)
``sweep``         tau0, dim, lambda_max (severity sweep)
``counterfactual`` direction (v_rel, v_sev), method (analytic / finite eps), g_T, g_TQ, g_TK, g_full, regime
``geometry``      per head: Prop. 1 checks and the norm bound (B.7) and the routing check
``regimes``       regime shares among random directions in S and on the slice lattice
``agreement``     analytic vs finite-forward lattice labels (B.8.4)
``adjacency``     regime pairs that touch on the lattice (B.8.5)
``search``        blind ambient vs oracle-in-S vs spectral (B.10)
``probes``        projected certificates on nested random probes of 32/64/128/256 columns (B.9)
``routing``       per softmax head, for v_rel and v_sev: diversity, sensitivity, I_gate, alignment (B.4)
``overlap``       per softmax head, 256 directions from query-null to random: overlap s(v) and response |J_q v| (B.7)
``cost``          setup time, per-direction cost of quadratic forms vs finite forwards, break-even N* (B.10)
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from routestats.rundir import schema as S
from routestats.rundir.atomic import sha256_file
from routestats.rundir.manifest import read_json
from routestats.rundir.verify import run_file
from routestats.errors import IntegrityError, RoutestatsError, RunFormatError
from routestats.regime.certify import (Operators, analyse, certify, classify, directional, probe_sweep, severity_certificate,
                     severity_sweep)
from routestats.regime.geometry import geometry_table, overlap_sweep, routing_decomposition
from routestats.regime.maps import adjacency, agreement, regime_map
from routestats.settings import Resampling

__all__ = ["OperatorPoint", "load_operator_points", "analyse_point", "KEYS"]

KEYS = ["layer", "example", "token"]


@dataclass(frozen=True)
class OperatorPoint:
    """The stored operators of one operating point (arrays as written by the runners).

    A bare ``.npz`` without metadata has layer, example and token -1 (unknown).
    """

    layer: int
    example: int
    token: int
    source: str
    arrays: dict = field(repr=False)
    meta: dict = field(default_factory=dict, repr=False)

    @property
    def operators(self) -> Operators:
        return Operators(self.arrays["J_T"], self.arrays["J_Q"], self.arrays["J_K"])

    @property
    def key(self) -> dict:
        return {"layer": self.layer, "example": self.example, "token": self.token}


def _read_npz(path: Path) -> tuple[dict, dict]:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files if k != "meta"}
            meta = json.loads(str(z["meta"])) if "meta" in z.files else {}
    except (ValueError, OSError, EOFError, KeyError, json.JSONDecodeError, zipfile.BadZipFile) as exc:
        raise RoutestatsError(f"{path}: not an operator file with {', '.join(S.OPERATOR_ARRAYS)} ({exc})") from None
    missing = [k for k in S.OPERATOR_ARRAYS if k not in arrays]
    if missing:
        raise RoutestatsError(f"{path}: not an operator file with {', '.join(S.OPERATOR_ARRAYS)} (missing {missing})")
    return arrays, meta


def load_operator_points(path: str | Path, layer: int | None = None, example: int | None = None,
                         token: int | None = None) -> list[OperatorPoint]:
    """Operator points of a run directory (``operators/index.json``, hashes verified) or one ``.npz``.

    ``layer``, ``example`` and ``token`` select points; an empty selection is an error.
    """
    path = Path(path)
    if path.is_file():
        arrays, meta = _read_npz(path)
        key = [meta.get(k) for k in KEYS]
        return [OperatorPoint(*[-1 if v is None else int(v) for v in key], str(path), arrays, meta)]
    idx_path = path / S.OPERATOR_DIR / S.OPERATOR_INDEX
    if not idx_path.is_file():
        raise RoutestatsError(f"{path}: no {S.OPERATOR_DIR}/{S.OPERATOR_INDEX}; build operators with "
                              f"`python -m runners regime {path} --layers ...`")
    index = read_json(idx_path)
    if not isinstance(index, dict) or not isinstance(index.get("points", []), list) or \
            not all(isinstance(p, dict) and {"layer", "example", "token", "file", "sha256"} <= set(p)
                    for p in index.get("points", [])):
        raise RunFormatError(f"{idx_path}: expected {{'points': [{{layer, example, token, file, sha256}}, ...]}}")
    pts = [p for p in index.get("points", [])
           if (layer is None or p["layer"] == layer) and (example is None or p["example"] == example)
           and (token is None or p["token"] == token)]
    if not pts:
        have = sorted({(p["layer"], p["example"], p["token"]) for p in index.get("points", [])})
        raise RoutestatsError(f"{path}: no stored operating point matches layer={layer}, example={example}, "
                              f"token={token}; stored (layer, example, token): {have}")
    out = []
    for p in sorted(pts, key=lambda p: (p["layer"], p["example"], p["token"])):
        f = run_file(path / S.OPERATOR_DIR, p["file"])  # a relative path inside the folder, nothing else
        if not f.is_file():
            raise RunFormatError(f"{f}: listed in {idx_path} but missing")
        if sha256_file(f) != p["sha256"]:
            raise IntegrityError(f"{f}: SHA-256 differs from {idx_path}; the file changed after it was written")
        arrays, meta = _read_npz(f)
        out.append(OperatorPoint(p["layer"], p["example"], p["token"], str(f), arrays,
                                 {**meta, "model_kind": index.get("model_kind"), "checkpoint_sha256": index.get("checkpoint_sha256")}))
    return out


def _label_rows(t: pd.DataFrame, source: str) -> list[dict]:
    vc = t["regime"].value_counts()
    return [{"source": source, "regime": k, "count": int(vc.get(k, 0)), "share": float(vc.get(k, 0) / len(t))}
            for k in ("NC", "NS", "Q", "K", "E", "J", "ambiguous") if k in vc.index or k != "ambiguous"]


def analyse_point(pt: OperatorPoint, probes: int = 512, seed: int | None = None, margin: float = 0.0) -> dict[str, pd.DataFrame]:
    """Every table of one operating point (see the module docstring), each keyed by layer/example/token.

    Lattice directions whose analytic deciding growth lies within max(``margin``, 1e-6 max(1,
    max |g|)) of zero are flagged and left out of the agreement shares (METHODS B.8.4).
    """
    seed = Resampling().seed if seed is None else seed  # the one default seed (routestats.settings)
    ops = pt.operators
    cert = certify(ops)
    sev = severity_certificate(ops, cert)
    base = analyse(ops, probes=probes, seed=seed, cert=cert, sev=sev)
    A = pt.arrays
    errors = pt.meta.get("errors", {})
    eps_W = max([v for k, v in errors.items() if k.startswith("J_")] or [0.0])
    summary = base["summary"].copy()
    lo, hi = cert.d_sw_band(eps_W) if cert.dim_S else (0, 0)
    summary = summary.assign(d_sw_low=lo, d_sw_high=hi, eps_W=eps_W, n_keys=pt.meta.get("n_keys"),
                             max_error=eps_W, forward_error=errors.get("forward", np.nan),
                             own_jacobian_error=errors.get("own_jacobian", np.nan),
                             seconds=(pt.meta.get("seconds") or {}).get("total", np.nan))
    out = {"summary": summary,
           "spectrum": pd.DataFrame({"rank": np.arange(1, len(cert.eigenvalues) + 1), "eigenvalue": cert.eigenvalues}),
           "sweep": severity_sweep(ops, cert, tau_cert=sev["tau_cert"])}
    named = ({"v_rel": cert.v_sw, **({"v_sev": sev["v_sev"]} if sev["v_sev"] is not None else {})}
             if cert.dim_S else {})
    out["counterfactual"] = _counterfactual(ops, named, pt)
    out["probes"] = probe_sweep(ops, seed=seed)
    if "J_Q_heads" in A:
        out.update(_gating_tables(A, named, seed))
    reg = _label_rows(base["directions"][base["directions"]["source"] == "random_S"], "random in S") if cert.dim_S else []
    reg += _label_rows(base["directions"][base["directions"]["source"] == "random_ambient"], "random ambient")
    if "slice_E" in A and "lattice_W" in A:
        reg += _slice_tables(ops, pt, margin, out)
    out["regimes"] = pd.DataFrame(reg)
    if pt.meta.get("cost"):
        out["cost"] = _cost_table(pt.meta["cost"])
    out.update({k: base[k] for k in ("search", "mechanisms") if k in base})
    return {k: v.assign(**pt.key)[[*KEYS, *[c for c in v.columns if c not in KEYS]]] for k, v in out.items()}


def _counterfactual(ops, named: dict, pt: OperatorPoint) -> pd.DataFrame:
    """The named directions' growths: analytic, and from the stored finite forwards."""
    rows = []
    for name, v in named.items():
        t = directional(ops, v / np.linalg.norm(v)).iloc[0]
        rows.append({"direction": name, "method": "analytic", **t[["g_T", "g_TQ", "g_TK", "g_full", "tau", "Gamma",
                                                                   "qk_interaction", "regime"]].to_dict()})
    A = pt.arrays
    if "named_fd" in A:
        for e_rel, block in zip(pt.meta.get("named_eps_rel", [None] * len(A["named_fd"])), A["named_fd"]):
            for name, g in zip(A["named_names"], block):
                rows.append({"direction": str(name), "method": f"finite (eps {e_rel:g}·|x_r|)", "g_T": g[0],
                             "g_TQ": g[1], "g_TK": g[2], "g_full": g[3], "regime": classify(*g)})
    return pd.DataFrame(rows)


def _gating_tables(A: dict, named: dict, seed: int) -> dict:
    """Routing decomposition, support overlap and the query-gating geometry of the stored heads."""
    out = {}
    if named:
        out["routing"] = routing_decomposition(A, np.column_stack([v / np.linalg.norm(v) for v in named.values()]),
                                               names=list(named))
    out["overlap"] = pd.concat(
        [overlap_sweep(A["key_vectors"][h], A["alpha"][h], A["query_map"][h], A["J_Q_heads"][h], seed=seed + h)
         .assign(head=h) for h, t in enumerate(A["head_types"]) if str(t) == "softmax"] or [pd.DataFrame()],
        ignore_index=True)
    geo = geometry_table(A)
    if "routing_check" in A:
        geo["routing_null"] = A["routing_check"][:, 0]
        geo["routing_active"] = A["routing_check"][:, 1]
    out["geometry"] = geo
    return out


def _slice_tables(ops, pt: OperatorPoint, margin: float, out: dict) -> list[dict]:
    """The regime map of the stored slice lattice (checked to be the Fibonacci lattice), its finite-forward
    agreement and adjacency (into ``out``); returns the slice's regime rows."""
    A = pt.arrays
    W = A["lattice_W"]
    lm = regime_map(ops, A["slice_E"], n=len(W))
    if not np.allclose(lm[["w1", "w2", "w3"]].to_numpy(), W, atol=1e-12):
        raise RoutestatsError(f"{pt.source}: the stored lattice is not the Fibonacci lattice of {len(W)} points")
    reg = _label_rows(lm, "slice (analytic)")
    if "lattice_fd" in A:
        fd = pd.DataFrame(A["lattice_fd"], columns=["g_T", "g_TQ", "g_TK", "g_full"])
        m = max(margin, 1e-6 * max(1.0, float(np.abs(lm[["g_T", "g_TQ", "g_TK", "g_full"]].to_numpy()).max())))
        out["agreement"] = agreement(lm, fd, margin=m).assign(margin=m)
        lm["regime_fd"] = [classify(*x) for x in fd.to_numpy()]
        reg += _label_rows(lm.assign(regime=lm["regime_fd"]), "slice (finite forward)")
    _, edges = adjacency(W, lm["regime"].to_numpy())
    out["adjacency"] = edges
    out["lattice"] = lm
    return reg


def _cost_table(cost: dict) -> pd.DataFrame:
    rows = []
    for task, cf in (("switch detection (2 forwards)", cost["c_f_switch"]),
                     ("mechanism classification (4 forwards)", cost["c_f_mechanism"])):
        rows.append({"task": task, "t_setup": cost["t_setup"], "c_q": cost["c_q"], "c_f": cf,
                     "break_even_directions": cost["t_setup"] / (cf - cost["c_q"]) if cf > cost["c_q"] else np.inf})
    return pd.DataFrame(rows)
