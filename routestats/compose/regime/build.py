"""The regime report: certificate, severity, geometry, regime maps and search over stored operating points."""

from __future__ import annotations

import functools
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from routestats.regime.points import analyse_point, load_operator_points
from routestats.compose.claims import layers_phrase
from routestats.compose.skeleton import build_report, generated_now
from routestats.claim import Check, Claim
from routestats.report import Column, Figure, Report, Section, Table, counted, fmt_sig, point_label, section
from routestats.settings import AnalysisSettings

__all__ = ["build_regime_report", "terminal_tables", "terminal_summary"]

KEY_COLUMNS = (Column("Layer", "layer", "int"), Column("Example", "example", "int"), Column("Token", "token", "int", legend="the query token r whose operators these are"))
MAX_POINTS_LISTED = 6
REGIME_LABELS = ("NC: transport does not shrink the direction (g_T ≥ 0); NS: it shrinks it and gating does not undo "
                 "that (g_T < 0, g_full ≤ 0); switching directions (g_T < 0 < g_full) by what suffices: Q: query "
                 "gating alone, K: key gating alone, E: either, J: only both together")
"""The regime labels of METHODS B.4 in words (the counterfactual table, the counts the terminal prints)."""


def regime_terms(first_point: str) -> tuple[tuple[str, str], ...]:
    """The glossary of a regime report (:attr:`routestats.report.Report.terms` prints the terms its page uses).

    >>> dict(regime_terms("L2 E5 r17"))["L2 E5 r17"]
    'layer 2, example 5, query token r = 17'
    """
    layer, example, token = (part[1:] for part in first_point.split())
    return (
        (first_point, f"layer {layer}, example {example}, query token r = {token}"),
        ("S", "the transport-contractive subspace: directions that value transport alone shrinks (growth g_T < 0)"),
        ("λ_max", "over S, the largest ratio of the growth that query and key gating add to the shrinkage that "
                  "transport applies; above 1, a direction that transport alone shrinks grows once gating acts: a "
                  "certified regime switch"),
        ("d_sw", "how many independent directions of S switch (eigenvalues above 1)"),
        ("τ_cert", "a certified severity: some switching direction loses at least this share of its squared size "
                   "to transport alone"),
        ("τ_max", "the largest such severity (convex dual; ours, not in the paper)"),
        ("Prop. 1", "the paper's result that a softmax head's query gating moves only within the span of the keys "
                    "it attends (rank J_q ≤ dim U_r)"),
        ("max |analytic − autograd|", "the largest gap between the closed-form operators and autograd of the "
                                      "same forward (validation)"),
    )


_FIXED_SPECS = {  # the tables whose columns do not depend on the input
    "agreement": (
        "Analytic vs finite-forward classification of the slice lattice (METHODS B.8.4); directions "
        "within the margin of a sign boundary are flagged and left out of the shares.",
        (*KEY_COLUMNS, Column("Directions", "directions", "int"), Column("Flagged", "flagged", "int", legend="directions within the margin of a sign boundary"),
         Column("Switch agree", "switch_agreement", "num", 4), Column("Mechanism agree", "mechanism_agreement", "num", 4),
         Column("Pearson r", "pearson_r", "num", 6), Column("max |Δg_full|", "max_abs_diff_g_full", "sig", 2, legend="largest analytic − finite-forward gap of g_full"))),
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
         Column("c_q (s)", "c_q", "sig", 3, legend="seconds a direction by quadratic forms"), Column("c_f (s)", "c_f", "sig", 3, legend="seconds a direction by finite forwards"),
         Column("N*", "break_even_directions", "num", 0, legend="directions after which the setup pays off"))),
    "search": (
        "Search quality (METHODS B.10): blind ambient and oracle-in-S random directions vs the spectral "
        "certificate; best τ among switching directions (spectral: τ_cert).",
        (*KEY_COLUMNS, Column("Search", "search", "text"), Column("Directions", "directions", "int"),
         Column("Switching", "switching", "int"), Column("Share", "share", "num", 3), Column("best τ", "best_tau", "num", 4))),
}


def shown_tables(t: dict) -> dict[str, Table]:
    """The regime tables as shown (captions, columns), from the concatenated per-point frames."""
    K = KEY_COLUMNS
    specs = {"summary": (
        "Spectral certificate per operating point (METHODS B.5-B.6): dim S (eigenvalues of G_T below "
        "−tol), λ_max(W) from eigh(R, C), d_sw = #{λ > 1} with its band for ε_W = max |analytic − autograd|, "
        "τ_cert (binary search over nested severity subspaces) and τ_max (convex dual; ours, not in the paper). "
        "Errors: max error = max |analytic − autograd of F|; forward error = max |F(x_r, x_r, x_r) − the model's own "
        "sublayer output|; own J error (pretrained checkpoints) = max |J_T + J_Q + J_K − autograd of the model's own "
        "layer|.",
        (*K, Column("d", "dim", "int", legend="the model's width"), Column("dim S", "dim_S", "int", legend="directions transport alone shrinks"), Column("λ_max", "lambda_max", "sig", legend="above 1: switching is certified"),
         Column("d_sw", "d_sw", "int", legend="switching directions"), Column("band", ("d_sw_low", "d_sw_high"), "range", legend="the d_sw the operators' own error allows"),
         Column("τ_cert", "tau_cert", "num", 4, legend="certified severity"), Column("τ_max", "tau_max_dual", "num", 4, legend="largest severity"),
         Column("max error", "max_error", "sig", 2), Column("forward error", "forward_error", "sig", 2),
         Column("own J error", "own_jacobian_error", "sig", 2))),
        "counterfactual": (
        "Counterfactual growth of the relative-switching direction v_rel and the certified severe "
        "direction v_sev: analytic quadratic forms and finite forwards at two step sizes (METHODS B.8.3).",
        (*K, Column("Direction", "direction", "text"), Column("Method", "method", "text"),
         Column("g_T", "g_T", "sig", 5, legend="growth of the squared size under transport alone"), Column("g_T+Q", "g_TQ", "sig", 5, legend="with query gating"), Column("g_T+K", "g_TK", "sig", 5, legend="with key gating"),
         Column("g_full", "g_full", "sig", 5, legend="with both"), Column("Regime", "regime", "text", legend=REGIME_LABELS)))}
    if "geometry" in t:
        specs["geometry"] = (
            "Query-gating geometry per head (METHODS B.7, Prop. 1): dim U_r, rank J_q (≤ dim U_r for softmax "
            "heads), relative residuals of range ⊆ W_VO U_r and of the null-direction check, |J_q|_2 against "
            "the paper's bound and a Cauchy–Schwarz bound, and the finite-forward routing shift |Δα|/ε for "
            "directions outside vs inside the query support. Sigmoid heads are outside Prop. 1.",
            (*K, Column("Head", "head", "int"), Column("Type", "head_type", "text"), Column("|A_r|", "n_attended", "int", legend="keys the query attends"),
             Column("dim U_r", "dim_U", "int", legend="dimension of their centred span"), Column("rank J_q", "rank_Jq", "int", legend="rank of the head's query-gating Jacobian"),
             Column("range res.", "range_residual", "sig", 2, legend="share of J_q's range outside W_VO U_r"), Column("null res.", "null_residual", "sig", 2, legend="J_q on directions the keys miss"),
             Column("|J_q|", "norm_Jq", "sig", 3), Column("bound", "bound_paper", "sig", 3),
             Column("CS bound", "bound_cs", "sig", 3, legend="Cauchy–Schwarz bound"),
             *((Column("shift null", "routing_null", "sig", 2, legend="routing shift |Δα|/ε outside the query support"), Column("shift active", "routing_active", "sig", 2, legend="inside it"))
               if "routing_null" in t["geometry"] else ())))
    specs.update(_FIXED_SPECS)
    out = {name: Table(name, t[name], caption, cols) for name, (caption, cols) in specs.items() if name in t}
    for name in t:  # every other frame is exported, not shown (figures draw some of them)
        if name not in out and name not in ("lattice", "overlap"):
            out[name] = Table(name, t[name])
    return out


def summary_claims(s: pd.DataFrame) -> list[Claim]:
    """The count of points with a non-empty S and a certified switch, and each point's certificate in words."""
    pts = tuple(point_label(r) for _, r in s.iterrows())
    n, k = len(s), int(s["switches"].sum())
    where = layers_phrase(s["layer"].unique())  # the layers there are: "layers 1 and 3", never "1–3"
    finite = s[np.isfinite(pd.to_numeric(s["lambda_max"], errors="coerce"))]
    # operators whose spectrum is not finite anywhere: nothing to certify, said so; built at any count, its check
    # (not the if below, which only stops the sentences that need a finite λ_max) decides whether it prints
    empty = int((s["dim_S"] == 0).sum())
    undefined = [Claim("certified", f"λ_max is undefined at {'the' if n == 1 else 'every one of the'} "
                      f"{counted(n, 'operating point')} ({where}): the "
                      f"transport-contractive subspace S is empty at {empty} of them, so no switching direction is "
                      "certified; exact for these stored operators.", "headline", "summary", pts, "point",
                      evidence=s.assign(point=list(pts)),
                      requires=(Check("no finite λ_max", "finite_points == 0", on="design"),),
                      design={"finite_points": len(finite)},
                      short=f"No switching is certified: λ_max is undefined (S empty) at {'the' if n == 1 else 'all'} {counted(n, 'operating point')}, "
                            f"{where}.")]
    if finite.empty:
        return undefined
    top = finite.loc[finite["lambda_max"].idxmax()]
    answer = Claim("certified", f"The spectral certificate shows switching (λ_max > 1) at {k} of {counted(n, 'operating point')} "
                   f"({where}); the largest λ_max is {fmt_sig(top['lambda_max'])} at {point_label(top)}"
                   + (f"; at the other {n - k}, λ_max ≤ 1: no switching direction is certified there" if k < n else "")
                   + "; exact for these stored operators, not a sample from a population of inputs.", "headline",
                   "summary", pts, "point", evidence=s.assign(point=list(pts)),
                   requires=(Check("switches counted as λ_max > 1", "switches == (lambda_max > 1)"),),
                   short=f"Switching is certified (λ_max > 1) at {k} of {counted(n, 'operating point')}, {where}.",
                   figure=Figure("answer", "regime_answer", {"summary": s[["layer", "example", "token", "lambda_max",
                                                                           "switches"]]}))
    out = [*undefined, answer, Claim("counts", f"{counted(len(s), 'operating point')}; transport-contractive subspace S non-empty at "
                 f"{(s['dim_S'] > 0).sum()}, switching certified (λ_max > 1) at {int(s['switches'].sum())}.",
                 "finding", "summary", pts, "point", evidence=s,
                 requires=(Check("switches counted as λ_max > 1", "switches == (lambda_max > 1)"),),
                 because=("counted from the summary table's rows",))]
    # every point's sentence is built; the first MAX_POINTS_LISTED print, and the pointer to the table prints
    # where there are more (the checks choose: an `if` on len(out) once counted the two claims above as points,
    # so 6 points listed 5 and withheld the pointer)
    points = [Claim("point", f"{label}: dim S {int(r['dim_S'])} of {int(r['dim'])}, λ_max "
                    f"{fmt_sig(r['lambda_max'])}, d_sw {int(r['d_sw'])}, τ_cert {fmt_sig(r['tau_cert'], 4)} ≤ "
                    f"τ_max {fmt_sig(r['tau_max_dual'], 4)}; max |analytic − autograd| "
                    f"{fmt_sig(r['max_error'], 2)}.", "finding", "summary", (label,), "point",
                    requires=(Check("the point's numbers are defined", "lambda_max == lambda_max and "
                                    "tau_cert == tau_cert and max_error == max_error"),
                              Check(f"among the first {MAX_POINTS_LISTED} points of the summary table",
                                    f"position < {MAX_POINTS_LISTED}", on="design")),
                    evidence=s.iloc[[i]], design={"position": i})
              for i, (label, (_, r)) in enumerate(zip(pts, s.iterrows()))]
    more = Claim("more_points", "… (all points in the summary table)", "finding", "summary",
                 requires=(Check(f"more than {MAX_POINTS_LISTED} points", f"rows > {MAX_POINTS_LISTED}", on="design"),),
                 evidence=s)
    return [*out, *points, more]


def agreement_claims(ag: pd.DataFrame | None) -> list[Claim]:
    """How often analytic and finite-forward lattice labels agree."""
    if ag is None or not len(ag):
        return []
    return [Claim("agreement", f"Slice lattices: analytic and finite-forward labels agree for "
                  f"{100 * ag['mechanism_agreement'].min():.2f}–{100 * ag['mechanism_agreement'].max():.2f}% of "
                  f"unflagged directions; Pearson r of g_full ≥ {ag['pearson_r'].min():.6f}.", "finding", "agreement",
                  requires=(Check("agreement is a share and r a correlation", "mechanism_agreement >= 0 and "
                                  "mechanism_agreement <= 1 and pearson_r >= -1 and pearson_r <= 1"),),
                  evidence=ag)]


def prop1_claims(geo: pd.DataFrame | None) -> list[Claim]:
    """Prop. 1's rank bound and residuals over the softmax heads."""
    if geo is None or not len(geo):
        return []
    soft = geo[geo["head_type"] == "softmax"]
    if not len(soft):
        return []
    return [Claim("prop1", f"Prop. 1 on {counted(len(soft), 'softmax head')}: rank J_q ≤ dim U_r everywhere: "
                  f"{'yes' if soft['rank_bound_holds'].all() else 'NO'}; max range residual "
                  f"{fmt_sig(soft['range_residual'].max(), 2)}, max null residual "
                  f"{fmt_sig(soft['null_residual'].max(), 2)}.", "finding", "geometry", evidence=soft,
                  requires=(Check("the residuals are defined", "range_residual == range_residual and "
                                  "null_residual == null_residual"),))]


CLAIM_ORDER = ("certified", "counts", "point", "more_points", "agreement", "prop1")


@dataclass(frozen=True)
class RegimeContext:
    """What every regime section reads: the per-point tables concatenated over the grid (``t``), their
    shown forms (``tables``) and the frames the figures draw."""

    points: tuple = field(repr=False)
    settings: AnalysisSettings = field(repr=False)
    say: Callable[[str], None] = field(default=lambda label: None, repr=False, compare=False)

    @functools.cached_property
    def t(self) -> dict:
        """Every table of every point, concatenated over the grid (computed once)."""
        per = []
        for pt in self.points:
            self.say(f"regime: layer {pt.layer}, example {pt.example}, token {pt.token}")
            per.append(analyse_point(pt, probes=self.settings.probes, seed=self.settings.resampling.seed))
        names = sorted({k for p in per for k in p})
        return {k: pd.concat([p[k] for p in per if k in p and len(p[k])], ignore_index=True) for k in names
                if any(k in p and len(p[k]) for p in per)}

    @functools.cached_property
    def tables(self) -> dict:
        return shown_tables(self.t)

    def get(self, *names) -> tuple:
        return tuple(self.tables[n] for n in names if n in self.tables)

    def figure(self, name: str, kind: str) -> Figure:
        frames = {k: self.t[k] for k in ("summary", "spectrum", "sweep", "counterfactual", "regimes", "overlap",
                                         "lattice") if k in self.t}
        return Figure(name, kind, frames)


@section("certificate", "Spectral certificate")
def certificate_section(ctx: RegimeContext) -> Section:
    return Section(tables=ctx.get("summary", "spectrum", "sweep"),
                   figures=(ctx.figure("regime-spectrum", "regime_spectrum"),),
                   text="W = C^{-1/2} R C^{-1/2} on the transport-contractive subspace S; eigenvalues above 1 are "
                        "switching directions. The sweep restricts S to directions at least τ0 severe.",
                   claims=tuple(summary_claims(ctx.tables["summary"].frame)))


@section("counterfactual", "Counterfactual growth")
def counterfactual_section(ctx: RegimeContext) -> Section:
    return Section(tables=ctx.get("counterfactual", "mechanisms"),
                   figures=(ctx.figure("regime-counterfactual", "regime_counterfactual"),) if "counterfactual" in ctx.t else (),
                   text=f"Labels record signs only; they are not additive shares. {REGIME_LABELS}.")


@section("geometry", "Geometry of query gating")
def geometry_section(ctx: RegimeContext) -> Section | None:
    if "geometry" not in ctx.t:
        return None
    return Section(tables=ctx.get("geometry", "routing"),
                   figures=(ctx.figure("regime-overlap", "regime_overlap"),) if "overlap" in ctx.t else (),
                   text="Directions whose query map misses the centred keys (overlap 0) leave both the routing and "
                        "J_q v unchanged (Prop. 1).", claims=tuple(prop1_claims(ctx.tables["geometry"].frame)))


@section("shares", "Regime shares and maps")
def shares_section(ctx: RegimeContext) -> Section:
    ag = ctx.tables["agreement"].frame if "agreement" in ctx.tables else None
    return Section(tables=ctx.get("agreement", "regimes", "adjacency"),
                   figures=(ctx.figure("regime-shares", "regime_shares"),) if "regimes" in ctx.t else (),
                   claims=tuple(agreement_claims(ag)))


@section("map", "Regime map")
def map_section(ctx: RegimeContext) -> Section | None:
    if "lattice" not in ctx.t:
        return None
    return Section(tables=(), figures=(ctx.figure("regime-map", "regime_map"),),
                   text="Each dot is a direction v = E w on the unit sphere of the 3-D slice (longitude/latitude of w).")


_SHOWN_ABOVE = {"summary", "spectrum", "sweep", "counterfactual", "mechanisms", "geometry", "routing", "agreement",
                "regimes", "adjacency"}


@section("search", "Search quality and random probes")
def search_section(ctx: RegimeContext) -> Section | None:
    rest = tuple(tb for n, tb in ctx.tables.items() if n not in _SHOWN_ABOVE and n not in ("search", "probes", "cost"))
    if "search" in ctx.t:
        return Section(tables=ctx.get("search", "probes", "cost") + rest)
    return Section("other", "Further tables", rest) if rest else None


REGIME_SECTIONS = (certificate_section, counterfactual_section, geometry_section, shares_section, map_section,
                   search_section)


def build_regime_report(path: str | Path, settings: AnalysisSettings | None = None, progress=None) -> Report:
    """Analyse every selected operating point and concatenate the tables (grid over layers/examples).

    ``settings.layer`` / ``example`` / ``token`` select points (None: all stored), ``settings.probes``
    and ``settings.seed`` drive the random directions.
    """
    s = settings or AnalysisSettings()
    pts = tuple(load_operator_points(path, s.layer, s.example, s.token))
    path = Path(path)
    prov = {"analysis": {"generated": generated_now(),
                         "settings": {"probes": s.probes, "seed": s.seed, "layer": s.layer, "example": s.example,
                                      "token": s.token}},
            "points": [{**pt.key, "file": pt.source, "errors": pt.meta.get("errors"),
                        "checkpoint_sha256": pt.meta.get("checkpoint_sha256")} for pt in pts]}
    ctx = RegimeContext(pts, s, progress or (lambda label: None))
    methods = ("Operators are the value-transport, query-gating and key-gating Jacobians of the residual attention "
               "sublayer at the query token (perturbed token m = r), in float64, checked against autograd of the "
               "pathway-split forward F(x_V, x_Q, x_K) and against finite forwards. Growth G = JᵀJ − I; "
               "S = span of G_T eigenvectors below −tol with tol = 1e-9·max(1, |G_T|); switching certified by the "
               "symmetric-definite eigenproblem R u = λ C u.")
    model_kind = pts[0].meta.get("model_kind")
    return build_report(
        ctx, REGIME_SECTIONS, title=f"regime switching: {path.name}",
        subtitle=f"{counted(len(pts), 'operating point')} · model {model_kind or 'unknown'} · {path}", methods=methods,
        provenance=prov, data={k: ctx.t[k] for k in ("overlap", "lattice") if k in ctx.t},
        facts={"n_points": len(pts), "model_kind": model_kind, "source": str(path)}, claim_order=CLAIM_ORDER,
        glossary=regime_terms(point_label(pts[0].key)) if pts and pts[0].key.get("layer", -1) >= 0 else ())


MAX_TERMINAL_POINTS = 20  # the points the terminal lists without --all: with the answer and terms, one screen


def terminal_tables(rep: Report, every: bool = False) -> list[tuple[str, pd.DataFrame]]:
    """(title, frame) pairs the ``routestats regime`` command prints: the certificate per point (the first
    :data:`MAX_TERMINAL_POINTS` unless ``every``), and with ``every`` the regime counts per direction set (only the
    points and direction sets there are) and the search quality."""
    names = {"layer": "L", "example": "E", "token": "r", "dim_S": "dim S", "lambda_max": "λ_max", "d_sw": "d_sw",
             "tau_cert": "τ_cert", "tau_max_dual": "τ_max"}
    summ = rep.frame("summary")
    shown = summ[[c for c in names if c in summ]].rename(columns=names)
    title = f"regime switching: {Path(rep.facts['source']).name} (L layer, E example, r query token)"
    if not every and len(shown) > MAX_TERMINAL_POINTS:
        title += f" (the first {MAX_TERMINAL_POINTS} of {len(shown)} points; --all lists every one)"
        shown = shown.head(MAX_TERMINAL_POINTS)
    out = [(title, shown)]
    tables = rep.tables()
    if every and "regimes" in tables:
        counts = (tables["regimes"].groupby(["layer", "example", "token", "source", "regime"], sort=False)["count"]
                  .sum().unstack("regime", fill_value=0).astype(int).reset_index())
        out.append((f"regime counts by direction set ({REGIME_LABELS})", counts))
    if every and "search" in tables:
        out.append(("search quality: blind ambient vs oracle in S vs spectral", tables["search"]))
    return out


def terminal_summary(rep: Report, every: bool = False, width: int = 100) -> tuple[list[str], list, list[str]]:
    """What ``routestats regime`` prints, about one screen: the lines above the tables (the answer, then the terms
    its table uses), the tables (:func:`terminal_tables`) and the lines below them (the operators' check against
    autograd, and where the rest is), wrapped to ``width``."""
    tables = terminal_tables(rep, every)
    terms = rep.terms_in(" ".join([rep.answer, *(str(c) for _, df in tables for c in df.columns)]))
    err = rep.frame("summary")["max_error"]
    tail = [f"Operators checked against autograd: max |analytic − autograd| {fmt_sig(err.max(), 2)} over the "
            f"{counted(len(err), 'point')}."]
    if not every:
        tail.append("The regime counts per direction set and the search quality: --all; every table and figure: "
                    "-o DIR.")
    wrap = lambda lines: [w for line in lines if line for w in textwrap.wrap(line, width)]  # noqa: E731
    return wrap([rep.answer, terms and "Terms: " + terms]), tables, wrap(tail)
