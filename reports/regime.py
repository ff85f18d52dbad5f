"""Rendering of regime-switching reports: table layouts, figures and the HTML section."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from . import figures as F
from .formatting import Column, TableSpec, fmt_sig, section_lookups

REGIMES = ("NC", "NS", "Q", "K", "E", "J", "ambiguous")
COLORS = dict(zip(REGIMES, ("#BBBBBB", "#4C72B0", "#DD8452", "#55A868", "#8172B3", "#C44E52", "#000000")))
KEY = (Column("Layer", "layer", "int"), Column("Example", "example", "int"), Column("Token", "token", "int"))
MAX_PANELS = 6


def _point(r) -> str:
    return f"L{int(r['layer'])} E{int(r['example'])} r{int(r['token'])}" if int(r.get("layer", -1)) >= 0 else "operator file"


def _at(df, k):
    return df[(df["layer"] == k[0]) & (df["example"] == k[1]) & (df["token"] == k[2])]


def regime_specs(rep) -> dict[str, TableSpec]:
    t = rep.tables()
    specs = {"summary": TableSpec(
        "summary", "Spectral certificate per operating point (METHODS B.5-B.6): dim S (eigenvalues of G_T below "
                   "−tol), λ_max(W) from eigh(R, C), d_sw = #{λ > 1} with its band for ε_W = max |analytic − autograd|, "
                   "τ_cert (binary search over nested severity subspaces) and τ_max (convex dual; ours, not in the paper).",
        (*KEY, Column("d", "dim", "int"), Column("dim S", "dim_S", "int"), Column("λ_max", "lambda_max", "sig"),
         Column("d_sw", "d_sw", "int"), Column("band", ("d_sw_low", "d_sw_high"), "range"),
         Column("τ_cert", "tau_cert", "num", 4), Column("τ_max", "tau_max_dual", "num", 4),
         Column("max error", "max_error", "sig", 2), Column("forward error", "forward_error", "sig", 2)))}
    specs["counterfactual"] = TableSpec(
        "counterfactual", "Counterfactual growth of the relative-switching direction v_rel and the certified severe "
                          "direction v_sev: analytic quadratic forms and finite forwards at two step sizes (METHODS B.8.3).",
        (*KEY, Column("Direction", "direction", "text"), Column("Method", "method", "text"),
         Column("g_T", "g_T", "sig", 5), Column("g_T+Q", "g_TQ", "sig", 5), Column("g_T+K", "g_TK", "sig", 5),
         Column("g_full", "g_full", "sig", 5), Column("Regime", "regime", "text")))
    if "geometry" in t:
        specs["geometry"] = TableSpec(
            "geometry", "Query-gating geometry per head (METHODS B.7, Prop. 1): dim U_r, rank J_q (≤ dim U_r for softmax "
                        "heads), relative residuals of range ⊆ W_VO U_r and of the null-direction check, |J_q|_2 against "
                        "the paper's bound and a Cauchy–Schwarz bound, and the finite-forward routing shift |Δα|/ε for "
                        "directions outside vs inside the query support. Sigmoid heads are outside Prop. 1.",
            (*KEY, Column("Head", "head", "int"), Column("Type", "head_type", "text"), Column("|A_r|", "n_attended", "int"),
             Column("dim U_r", "dim_U", "int"), Column("rank J_q", "rank_Jq", "int"),
             Column("range res.", "range_residual", "sig", 2), Column("null res.", "null_residual", "sig", 2),
             Column("|J_q|", "norm_Jq", "sig", 3), Column("bound", "bound_paper", "sig", 3),
             Column("CS bound", "bound_cs", "sig", 3),
             *((Column("shift null", "routing_null", "sig", 2), Column("shift active", "routing_active", "sig", 2))
               if "routing_null" in t["geometry"] else ())))
    if "agreement" in t:
        specs["agreement"] = TableSpec(
            "agreement", "Analytic vs finite-forward classification of the slice lattice (METHODS B.8.4); directions "
                         "within the margin of a sign boundary are flagged and left out of the shares.",
            (*KEY, Column("Directions", "directions", "int"), Column("Flagged", "flagged", "int"),
             Column("Switch agree", "switch_agreement", "num", 4), Column("Mechanism agree", "mechanism_agreement", "num", 4),
             Column("Pearson r", "pearson_r", "num", 6), Column("max |Δg_full|", "max_abs_diff_g_full", "sig", 2)))
    if "probes" in t:
        specs["probes"] = TableSpec(
            "probes", "Random-probe projected analysis (METHODS B.9): nested orthonormal probes (first p columns of one "
                      "seeded matrix); S_proj = negative eigenspace of Πᵀ G_T Π; normalised d_sw = d_sw / dim S_proj.",
            (*KEY, Column("Probe p", "probe", "int"), Column("dim S_proj", "dim_S_proj", "int"),
             Column("λ_max", "lambda_max", "sig"), Column("d_sw", "d_sw", "int"),
             Column("normalised d_sw", "normalised_d_sw", "num", 3)))
    if "routing" in t:
        specs["routing"] = TableSpec(
            "routing", "Directional routing decomposition per softmax head (METHODS B.4, App. 9.6): diversity D_v, "
                       "routing sensitivity S_v, I_gate = Σ α a b = vᵀ J_q^h v and alignment ρ = I_gate / (D_v S_v).",
            (*KEY, Column("Direction", "direction", "text"), Column("Head", "head", "int"),
             Column("D_v", "diversity", "sig", 3), Column("S_v", "sensitivity", "sig", 3),
             Column("I_gate", "I_gate", "sig", 3), Column("ρ", "alignment", "num", 3)))
    if "cost" in t:
        specs["cost"] = TableSpec(
            "cost", "Amortised cost on the machine that built the operators (METHODS B.10; hardware-dependent, "
                    "reported, not asserted): setup = closed forms + eigendecompositions; per direction, 4 quadratic "
                    "forms (c_q) vs finite forwards (c_f); break-even number of directions N* = setup / (c_f − c_q).",
            (*KEY, Column("Task", "task", "text"), Column("setup (s)", "t_setup", "sig", 3),
             Column("c_q (s)", "c_q", "sig", 3), Column("c_f (s)", "c_f", "sig", 3),
             Column("N*", "break_even_directions", "num", 0)))
    if "search" in t:
        specs["search"] = TableSpec(
            "search", "Search quality (METHODS B.10): blind ambient and oracle-in-S random directions vs the spectral "
                      "certificate; best τ among switching directions (spectral: τ_cert).",
            (*KEY, Column("Search", "search", "text"), Column("Directions", "directions", "int"),
             Column("Switching", "switching", "int"), Column("Share", "share", "num", 3), Column("best τ", "best_tau", "num", 4)))
    return specs


def _panels(keys):
    n = min(len(keys), MAX_PANELS)
    cols = min(n, 3)
    rows = int(np.ceil(n / cols))
    return n, rows, cols


def regime_figures(rep, folder: Path, prefix: str = "") -> dict:
    t = rep.frames
    out = {}
    summ = t["summary"].reset_index(drop=True)
    keys = [tuple(int(x) for x in r[["layer", "example", "token"]]) for _, r in summ.iterrows()]
    labels = [_point(r) for _, r in summ.iterrows()]
    pal = sns.color_palette("viridis", max(len(keys), 2))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4))
    for i, (k, lab) in enumerate(zip(keys, labels)):
        sp = _at(t["spectrum"], k) if "spectrum" in t else None
        if sp is not None and len(sp):
            a1.plot(sp["rank"], sp["eigenvalue"], marker=".", ms=3, color=pal[i], label=lab)
        sw = _at(t["sweep"], k) if "sweep" in t else None
        if sw is not None and len(sw):
            a2.plot(sw["tau0"], sw["lambda_max"], color=pal[i], label=lab)
            tc = summ.loc[i, "tau_cert"]
            if tc > 0:
                a2.axvline(tc, color=pal[i], ls="--", lw=1)
            tm = summ.loc[i, "tau_max_dual"]
            if np.isfinite(tm) and tm > 0:
                a2.axvline(tm, color=pal[i], ls=":", lw=1)
    for ax in (a1, a2):
        ax.axhline(1, color="0.2", lw=1)
        ax.set_yscale("symlog", linthresh=1)
    a1.set(xlabel="rank i", ylabel="λ_i(W)", title="Spectrum of W on S (λ > 1: switching)")
    a2.set(xlabel="severity level τ0", ylabel="λ_max(W_τ0)",
           title="Severity sweep (dashed: τ_cert, dotted: τ_max)")
    if len(keys) <= 8:
        a1.legend(fontsize=8)
    fig.tight_layout()
    out["spectrum"] = F.save(fig, folder, prefix + "regime-spectrum")

    cf = t.get("counterfactual")
    if cf is not None and len(cf):
        n, rows, cols = _panels(keys)
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
        names = ["g_T", "g_TQ", "g_TK", "g_full"]
        ticks = ["T", "T+Q", "T+K", "full"]
        for ax, k, lab in zip(axes.ravel(), keys[:n], labels[:n]):
            c = _at(cf, k)
            ana = c[c["method"] == "analytic"]
            for j, (_, r) in enumerate(ana.iterrows()):
                x = np.arange(4) + (j - 0.5) * 0.38
                ax.bar(x, r[names].astype(float), width=0.36, label=f"{r['direction']} ({r['regime']})",
                       color=("#4C72B0", "#C44E52")[j % 2])
                fdr = c[(c["direction"] == r["direction"]) & (c["method"] != "analytic")]
                if len(fdr):
                    ax.scatter(x, fdr.iloc[-1][names].astype(float), color="black", marker="x", s=18, zorder=3)
            ax.axhline(0, color="0.2", lw=1)
            ax.set_yscale("symlog", linthresh=1e-3)
            ax.set_xticks(range(4), ticks)
            ax.set(title=lab, ylabel="directional growth g")
            ax.legend(fontsize=7)
        for ax in axes.ravel()[n:]:
            ax.axis("off")
        fig.suptitle("Counterfactual growth (bars: analytic; ×: finite forward)", fontsize=11)
        fig.tight_layout()
        out["counterfactual"] = F.save(fig, folder, prefix + "regime-counterfactual")

    reg = t.get("regimes")
    if reg is not None and len(reg):
        wide = (reg.assign(point=[_point(r) + " · " + r["source"] for _, r in reg.iterrows()])
                .pivot_table(index="point", columns="regime", values="share", sort=False).fillna(0.0))
        wide = wide[[c for c in REGIMES if c in wide.columns]]
        fig, ax = plt.subplots(figsize=(9, 0.32 * len(wide) + 1.6))
        left = np.zeros(len(wide))
        for c in wide.columns:
            ax.barh(range(len(wide)), wide[c], left=left, color=COLORS[c], label=c)
            left += wide[c].to_numpy()
        ax.set_yticks(range(len(wide)), [F.plain(i) for i in wide.index], fontsize=8)
        ax.invert_yaxis()
        ax.set(xlabel="share of directions", xlim=(0, 1), title="Regime shares by direction set")
        ax.legend(ncol=len(wide.columns), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(wide) < 6 else -0.1))
        fig.tight_layout()
        out["shares"] = F.save(fig, folder, prefix + "regime-shares")

    ov = t.get("overlap")
    if ov is not None and len(ov):
        k = keys[0]
        m = _at(ov, k)
        fig, ax = plt.subplots(figsize=(6.2, 4.2))
        heads = sorted(m["head"].unique())
        hp = sns.color_palette("tab10", max(len(heads), 1))
        for i, h in enumerate(heads):
            g = m[m["head"] == h]
            ax.scatter(g["overlap"], g["response"], s=8, alpha=0.6, color=hp[i % 10], label=f"head {h}")
        ax.set(xlabel="support overlap s(v) = |Π_K Q_r v|", ylabel="response |J_q v|",
               title=f"Query gating: overlap vs response, {labels[0]}")
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        out["overlap"] = F.save(fig, folder, prefix + "regime-overlap")

    lat = t.get("lattice")
    if lat is not None and len(lat):
        n, rows, cols = _panels(keys)
        fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 2.9 * rows + 0.6), squeeze=False)
        for ax, k, lab in zip(axes.ravel(), keys[:n], labels[:n]):
            m = _at(lat, k)
            for c in REGIMES:
                s = m[m["regime"] == c]
                if len(s):
                    ax.scatter(s["lon"], s["lat"], s=5, color=COLORS[c], label=f"{c} ({100 * len(s) / len(m):.0f}%)")
            ax.set(xlim=(-180, 180), ylim=(-90, 90), xlabel="longitude (°)", ylabel="latitude (°)", title=lab)
            ax.legend(fontsize=7, markerscale=2, loc="lower left")
        for ax in axes.ravel()[n:]:
            ax.axis("off")
        fig.suptitle("Regime map on the slice span(v_rel, v_sev, random): Fibonacci lattice, analytic labels", fontsize=11)
        fig.tight_layout()
        out["map"] = F.save(fig, folder, prefix + "regime-map")
    return out


def findings(rep) -> list[str]:
    s = rep.frames["summary"]
    out = [f"{len(s)} operating point(s); transport-contractive subspace S non-empty at {(s['dim_S'] > 0).sum()}, "
           f"switching certified (λ_max > 1) at {int(s['switches'].sum())}."]
    for _, r in s.iterrows():
        out.append(f"{_point(r)}: dim S {int(r['dim_S'])} of {int(r['dim'])}, λ_max {fmt_sig(r['lambda_max'])}, "
                   f"d_sw {int(r['d_sw'])}, τ_cert {fmt_sig(r['tau_cert'], 4)} ≤ τ_max {fmt_sig(r['tau_max_dual'], 4)}; "
                   f"max |analytic − autograd| {fmt_sig(r['max_error'], 2)}.")
        if len(out) > MAX_PANELS + 1:
            out.append("… (all points in the summary table)")
            break
    ag = rep.frames.get("agreement")
    if ag is not None and len(ag):
        out.append(f"Slice lattices: analytic and finite-forward labels agree for "
                   f"{100 * ag['mechanism_agreement'].min():.2f}–{100 * ag['mechanism_agreement'].max():.2f}% of unflagged "
                   f"directions; Pearson r of g_full ≥ {ag['pearson_r'].min():.6f}.")
    geo = rep.frames.get("geometry")
    if geo is not None and len(geo):
        soft = geo[geo["head_type"] == "softmax"]
        if len(soft):
            out.append(f"Prop. 1 on {len(soft)} softmax head(s): rank J_q ≤ dim U_r everywhere: "
                       f"{'yes' if soft['rank_bound_holds'].all() else 'NO'}; max range residual "
                       f"{fmt_sig(soft['range_residual'].max(), 2)}, max null residual {fmt_sig(soft['null_residual'].max(), 2)}.")
    return out


def regime_section(rep, slug: str, figs: dict) -> dict:
    specs = regime_specs(rep)
    tables = rep.tables()

    table, fig = section_lookups(tables, specs, figs, slug)

    blocks = [{"id": "certificate", "title": "Spectral certificate", "tables": [table("summary")], "figure": fig("spectrum"),
               "text": "W = C^{-1/2} R C^{-1/2} on the transport-contractive subspace S; eigenvalues above 1 are switching "
                       "directions. The sweep restricts S to directions at least τ0 severe."},
              {"id": "counterfactual", "title": "Counterfactual growth", "tables": [table("counterfactual")],
               "figure": fig("counterfactual"), "text": "Labels record signs only (NC, NS, Q, K, E, J); they are not "
                                                       "additive shares."}]
    if "geometry" in specs:
        blocks.append({"id": "geometry", "title": "Geometry of query gating",
                       "tables": [table("geometry")] + ([table("routing")] if "routing" in specs else []),
                       "figure": fig("overlap"),
                       "text": "Directions whose query map misses the centred keys (overlap 0) leave both the routing "
                               "and J_q v unchanged (Prop. 1)."})
    blocks.append({"id": "shares", "title": "Regime shares and maps",
                   "tables": [table("agreement")] if "agreement" in specs else [], "figure": fig("shares"), "text": ""})
    if fig("map"):
        blocks.append({"id": "map", "title": "Regime map", "tables": [], "figure": fig("map"),
                       "text": "Each dot is a direction v = E w on the unit sphere of the 3-D slice (longitude/latitude "
                               "of w)."})
    if "search" in specs:
        blocks.append({"id": "search", "title": "Search quality and random probes",
                       "tables": [table("search")] + [table(n) for n in ("probes", "cost") if n in specs],
                       "figure": None, "text": ""})
    methods = ("Operators are the value-transport, query-gating and key-gating Jacobians of the residual attention "
               "sublayer at the query token (perturbed token m = r), in float64, checked against autograd of the "
               "pathway-split forward F(x_V, x_Q, x_K) and against finite forwards. Growth G = JᵀJ − I; "
               "S = span of G_T eigenvectors below −tol with tol = 1e-9·max(1, |G_T|); switching certified by the "
               "symmetric-definite eigenproblem R u = λ C u.")
    prov = [("analysis settings", json.dumps(rep.provenance["analysis"]["settings"], sort_keys=True))]
    prov += [(_point(p) if p["layer"] >= 0 else p["file"], json.dumps(p, sort_keys=True, default=str))
             for p in rep.provenance["points"]]
    return {"slug": slug, "label": rep.title,
            "subtitle": f"{rep.n_points} operating point(s) · model {rep.model_kind or 'unknown'} · {rep.source}",
            "findings": findings(rep), "blocks": blocks, "methods": methods, "provenance_rows": prov,
            "provenance_json": json.dumps(rep.provenance, indent=2, sort_keys=True, default=str)}
