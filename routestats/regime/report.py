"""Regime-switching analysis of stored operators: one point or a grid over layers and examples.

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
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from routestats.rundir import schema as S
from routestats.rundir.atomic import sha256_file
from routestats.rundir.manifest import read_json
from routestats.rundir.verify import run_file
from routestats.errors import RoutestatsError, RunFormatError
from routestats.regime.certify import (Operators, analyse, certify, classify, directional, probe_sweep, severity_certificate,
                     severity_sweep)
from routestats.regime.geometry import geometry_table, overlap_sweep, routing_decomposition
from routestats.regime.maps import adjacency, agreement, regime_map
from routestats.report import (
    Claim, Column, Figure, Report, Section, Table, fmt_sig, guarded, point_label, section, with_claims,
)
from routestats.settings import Resampling, AnalysisSettings

__all__ = ["OperatorPoint", "load_operator_points", "analyse_point", "build_regime_report"]

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
            raise RunFormatError(f"{f}: SHA-256 differs from {idx_path}; the file changed after it was written")
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


KEY_COLUMNS = (Column("Layer", "layer", "int"), Column("Example", "example", "int"), Column("Token", "token", "int"))
MAX_POINTS_LISTED = 6


_FIXED_SPECS = {  # the tables whose columns do not depend on the input
    "agreement": (
        "Analytic vs finite-forward classification of the slice lattice (METHODS B.8.4); directions "
        "within the margin of a sign boundary are flagged and left out of the shares.",
        (*KEY_COLUMNS, Column("Directions", "directions", "int"), Column("Flagged", "flagged", "int"),
         Column("Switch agree", "switch_agreement", "num", 4), Column("Mechanism agree", "mechanism_agreement", "num", 4),
         Column("Pearson r", "pearson_r", "num", 6), Column("max |Δg_full|", "max_abs_diff_g_full", "sig", 2))),
    "probes": (
        "Random-probe projected analysis (METHODS B.9): nested orthonormal probes (first p columns of one "
        "seeded matrix); S_proj = negative eigenspace of Πᵀ G_T Π; normalised d_sw = d_sw / dim S_proj.",
        (*KEY_COLUMNS, Column("Probe p", "probe", "int"), Column("dim S_proj", "dim_S_proj", "int"),
         Column("λ_max", "lambda_max", "sig"), Column("d_sw", "d_sw", "int"),
         Column("normalised d_sw", "normalised_d_sw", "num", 3))),
    "routing": (
        "Directional routing decomposition per softmax head (METHODS B.4, App. 9.6): diversity D_v, "
        "routing sensitivity S_v, I_gate = Σ α a b = vᵀ J_q^h v and alignment ρ = I_gate / (D_v S_v).",
        (*KEY_COLUMNS, Column("Direction", "direction", "text"), Column("Head", "head", "int"),
         Column("D_v", "diversity", "sig", 3), Column("S_v", "sensitivity", "sig", 3),
         Column("I_gate", "I_gate", "sig", 3), Column("ρ", "alignment", "num", 3))),
    "cost": (
        "Amortised cost on the machine that built the operators (METHODS B.10; hardware-dependent, "
        "reported, not asserted): setup = closed forms + eigendecompositions; per direction, 4 quadratic "
        "forms (c_q) vs finite forwards (c_f); break-even number of directions N* = setup / (c_f − c_q).",
        (*KEY_COLUMNS, Column("Task", "task", "text"), Column("setup (s)", "t_setup", "sig", 3),
         Column("c_q (s)", "c_q", "sig", 3), Column("c_f (s)", "c_f", "sig", 3),
         Column("N*", "break_even_directions", "num", 0))),
    "search": (
        "Search quality (METHODS B.10): blind ambient and oracle-in-S random directions vs the spectral "
        "certificate; best τ among switching directions (spectral: τ_cert).",
        (*KEY_COLUMNS, Column("Search", "search", "text"), Column("Directions", "directions", "int"),
         Column("Switching", "switching", "int"), Column("Share", "share", "num", 3), Column("best τ", "best_tau", "num", 4))),
}


def _tables(t: dict) -> dict[str, Table]:
    K = KEY_COLUMNS
    specs = {"summary": (
        "Spectral certificate per operating point (METHODS B.5-B.6): dim S (eigenvalues of G_T below "
        "−tol), λ_max(W) from eigh(R, C), d_sw = #{λ > 1} with its band for ε_W = max |analytic − autograd|, "
        "τ_cert (binary search over nested severity subspaces) and τ_max (convex dual; ours, not in the paper).",
        (*K, Column("d", "dim", "int"), Column("dim S", "dim_S", "int"), Column("λ_max", "lambda_max", "sig"),
         Column("d_sw", "d_sw", "int"), Column("band", ("d_sw_low", "d_sw_high"), "range"),
         Column("τ_cert", "tau_cert", "num", 4), Column("τ_max", "tau_max_dual", "num", 4),
         Column("max error", "max_error", "sig", 2), Column("forward error", "forward_error", "sig", 2))),
        "counterfactual": (
        "Counterfactual growth of the relative-switching direction v_rel and the certified severe "
        "direction v_sev: analytic quadratic forms and finite forwards at two step sizes (METHODS B.8.3).",
        (*K, Column("Direction", "direction", "text"), Column("Method", "method", "text"),
         Column("g_T", "g_T", "sig", 5), Column("g_T+Q", "g_TQ", "sig", 5), Column("g_T+K", "g_TK", "sig", 5),
         Column("g_full", "g_full", "sig", 5), Column("Regime", "regime", "text")))}
    if "geometry" in t:
        specs["geometry"] = (
            "Query-gating geometry per head (METHODS B.7, Prop. 1): dim U_r, rank J_q (≤ dim U_r for softmax "
            "heads), relative residuals of range ⊆ W_VO U_r and of the null-direction check, |J_q|_2 against "
            "the paper's bound and a Cauchy–Schwarz bound, and the finite-forward routing shift |Δα|/ε for "
            "directions outside vs inside the query support. Sigmoid heads are outside Prop. 1.",
            (*K, Column("Head", "head", "int"), Column("Type", "head_type", "text"), Column("|A_r|", "n_attended", "int"),
             Column("dim U_r", "dim_U", "int"), Column("rank J_q", "rank_Jq", "int"),
             Column("range res.", "range_residual", "sig", 2), Column("null res.", "null_residual", "sig", 2),
             Column("|J_q|", "norm_Jq", "sig", 3), Column("bound", "bound_paper", "sig", 3),
             Column("CS bound", "bound_cs", "sig", 3),
             *((Column("shift null", "routing_null", "sig", 2), Column("shift active", "routing_active", "sig", 2))
               if "routing_null" in t["geometry"] else ())))
    specs.update(_FIXED_SPECS)
    out = {name: Table(name, t[name], caption, cols) for name, (caption, cols) in specs.items() if name in t}
    for name in t:  # every other frame is exported, not shown (figures draw some of them)
        if name not in out and name not in ("lattice", "overlap"):
            out[name] = Table(name, t[name])
    return out


def _findings(t: dict) -> list[Claim]:
    s = t["summary"]
    pts = tuple(point_label(r) for _, r in s.iterrows())
    out = [Claim("counts", f"{len(s)} operating point(s); transport-contractive subspace S non-empty at "
                 f"{(s['dim_S'] > 0).sum()}, switching certified (λ_max > 1) at {int(s['switches'].sum())}.",
                 "finding", "summary", pts, "point")]
    for (_, r), label in zip(s.iterrows(), pts):
        if len(out) > MAX_POINTS_LISTED:
            out.append(Claim("more_points", "… (all points in the summary table)", "finding", "summary"))
            break
        out.append(Claim("point", f"{label}: dim S {int(r['dim_S'])} of {int(r['dim'])}, λ_max "
                         f"{fmt_sig(r['lambda_max'])}, d_sw {int(r['d_sw'])}, τ_cert {fmt_sig(r['tau_cert'], 4)} ≤ "
                         f"τ_max {fmt_sig(r['tau_max_dual'], 4)}; max |analytic − autograd| "
                         f"{fmt_sig(r['max_error'], 2)}.", "finding", "summary", (label,), "point"))
    ag = t.get("agreement")
    if ag is not None and len(ag):
        out.append(Claim("agreement", f"Slice lattices: analytic and finite-forward labels agree for "
                         f"{100 * ag['mechanism_agreement'].min():.2f}–{100 * ag['mechanism_agreement'].max():.2f}% of "
                         f"unflagged directions; Pearson r of g_full ≥ {ag['pearson_r'].min():.6f}.", "finding",
                         "agreement"))
    geo = t.get("geometry")
    if geo is not None and len(geo):
        soft = geo[geo["head_type"] == "softmax"]
        if len(soft):
            out.append(Claim("prop1", f"Prop. 1 on {len(soft)} softmax head(s): rank J_q ≤ dim U_r everywhere: "
                             f"{'yes' if soft['rank_bound_holds'].all() else 'NO'}; max range residual "
                             f"{fmt_sig(soft['range_residual'].max(), 2)}, max null residual "
                             f"{fmt_sig(soft['null_residual'].max(), 2)}.", "finding", "geometry"))
    return out


@dataclass(frozen=True)
class RegimeContext:
    """What every regime section reads: the per-point tables concatenated over the grid (``t``), their
    shown forms (``tables``) and the frames the figures draw."""

    t: dict = field(repr=False)
    tables: dict = field(repr=False)

    def get(self, *names) -> tuple:
        return tuple(self.tables[n] for n in names if n in self.tables)

    def figure(self, name: str, kind: str) -> Figure:
        frames = {k: self.t[k] for k in ("summary", "spectrum", "sweep", "counterfactual", "regimes", "overlap",
                                         "lattice") if k in self.t}
        return Figure(name, kind, frames)


@section("certificate", "Spectral certificate")
def certificate_section(ctx: RegimeContext) -> Section:
    return Section("certificate", "Spectral certificate", ctx.get("summary", "spectrum", "sweep"),
                   (ctx.figure("regime-spectrum", "regime_spectrum"),),
                   text="W = C^{-1/2} R C^{-1/2} on the transport-contractive subspace S; eigenvalues above 1 are "
                        "switching directions. The sweep restricts S to directions at least τ0 severe.")


@section("counterfactual", "Counterfactual growth")
def counterfactual_section(ctx: RegimeContext) -> Section:
    return Section("counterfactual", "Counterfactual growth", ctx.get("counterfactual", "mechanisms"),
                   (ctx.figure("regime-counterfactual", "regime_counterfactual"),) if "counterfactual" in ctx.t else (),
                   text="Labels record signs only (NC, NS, Q, K, E, J); they are not additive shares.")


@section("geometry", "Geometry of query gating")
def geometry_section(ctx: RegimeContext) -> Section | None:
    if "geometry" not in ctx.t:
        return None
    return Section("geometry", "Geometry of query gating", ctx.get("geometry", "routing"),
                   (ctx.figure("regime-overlap", "regime_overlap"),) if "overlap" in ctx.t else (),
                   text="Directions whose query map misses the centred keys (overlap 0) leave both the routing and "
                        "J_q v unchanged (Prop. 1).")


@section("shares", "Regime shares and maps")
def shares_section(ctx: RegimeContext) -> Section:
    return Section("shares", "Regime shares and maps", ctx.get("agreement", "regimes", "adjacency"),
                   (ctx.figure("regime-shares", "regime_shares"),) if "regimes" in ctx.t else ())


@section("map", "Regime map")
def map_section(ctx: RegimeContext) -> Section | None:
    if "lattice" not in ctx.t:
        return None
    return Section("map", "Regime map", (), (ctx.figure("regime-map", "regime_map"),),
                   text="Each dot is a direction v = E w on the unit sphere of the 3-D slice (longitude/latitude of w).")


_SHOWN_ABOVE = {"summary", "spectrum", "sweep", "counterfactual", "mechanisms", "geometry", "routing", "agreement",
                "regimes", "adjacency"}


@section("search", "Search quality and random probes")
def search_section(ctx: RegimeContext) -> Section | None:
    rest = tuple(tb for n, tb in ctx.tables.items() if n not in _SHOWN_ABOVE and n not in ("search", "probes", "cost"))
    if "search" in ctx.t:
        return Section("search", "Search quality and random probes", ctx.get("search", "probes", "cost") + rest)
    return Section("other", "Further tables", rest) if rest else None


REGIME_SECTIONS = (certificate_section, counterfactual_section, geometry_section, shares_section, map_section,
                   search_section)


def build_regime_report(path: str | Path, settings: AnalysisSettings | None = None, progress=None) -> Report:
    """Analyse every selected operating point and concatenate the tables (grid over layers/examples).

    ``settings.layer`` / ``example`` / ``token`` select points (None: all stored), ``settings.probes``
    and ``settings.seed`` drive the random directions.
    """
    s = settings or AnalysisSettings()
    pts = load_operator_points(path, s.layer, s.example, s.token)
    per = []
    for pt in pts:
        if progress:
            progress(f"regime: layer {pt.layer}, example {pt.example}, token {pt.token}")
        per.append(analyse_point(pt, probes=s.probes, seed=s.resampling.seed))
    names = sorted({k for p in per for k in p})
    t = {k: pd.concat([p[k] for p in per if k in p and len(p[k])], ignore_index=True) for k in names
         if any(k in p and len(p[k]) for p in per)}
    path = Path(path)
    prov = {"analysis": {"generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                         "settings": {"probes": s.probes, "seed": s.seed, "layer": s.layer, "example": s.example,
                                      "token": s.token}},
            "points": [{**pt.key, "file": pt.source, "errors": pt.meta.get("errors"),
                        "checkpoint_sha256": pt.meta.get("checkpoint_sha256")} for pt in pts]}
    ctx = RegimeContext(t, _tables(t))
    sections = tuple(sec for fn in REGIME_SECTIONS if (sec := guarded(fn, ctx)) is not None)
    methods = ("Operators are the value-transport, query-gating and key-gating Jacobians of the residual attention "
               "sublayer at the query token (perturbed token m = r), in float64, checked against autograd of the "
               "pathway-split forward F(x_V, x_Q, x_K) and against finite forwards. Growth G = JᵀJ − I; "
               "S = span of G_T eigenvectors below −tol with tol = 1e-9·max(1, |G_T|); switching certified by the "
               "symmetric-definite eigenproblem R u = λ C u.")
    model_kind = pts[0].meta.get("model_kind")
    draft = Report(title=f"regime switching: {path.name}",
                   subtitle=f"{len(pts)} operating point(s) · model {model_kind or 'unknown'} · {path}",
                   sections=sections, methods=methods, provenance=prov,
                   data={k: t[k] for k in ("overlap", "lattice") if k in t},
                   facts={"n_points": len(pts), "model_kind": model_kind, "source": str(path)})
    return with_claims(draft, _findings({k: draft.frame(k) for k in ("summary", "agreement", "geometry")
                                         if k in draft.tables()}))


def terminal_tables(rep: Report) -> list[tuple[str, pd.DataFrame]]:
    """(title, frame) pairs the ``routestats regime`` command prints: summary, regime counts, search quality."""
    cols = ["layer", "example", "token", "dim_S", "lambda_max", "d_sw", "tau_cert", "tau_max_dual", "max_error"]
    summ = rep.frame("summary")
    out = [(f"regime switching: {Path(rep.facts['source']).name}", summ[[c for c in cols if c in summ]])]
    tables = rep.tables()
    if "regimes" in tables:
        counts = (tables["regimes"].pivot_table(index=["layer", "example", "token", "source"], columns="regime",
                                                values="count", sort=False, dropna=False, aggfunc="sum")
                  .fillna(0).astype(int).reset_index())
        out.append(("regime counts by direction set", counts))
    if "search" in tables:
        out.append(("search quality: blind ambient vs oracle in S vs spectral", tables["search"]))
    return out
