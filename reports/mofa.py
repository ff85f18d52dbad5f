"""Rendering of MoFA reports: table layouts, figures and the HTML section."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from . import figures as F
from .formatting import Column, TableSpec, fmt_num, section_lookups


def mofa_specs(rep) -> dict[str, TableSpec]:
    specs = {}
    mean_cols = tuple(Column(f"PPL {r}", f"mean_{r}", "num", 2) for r in rep.ratios)
    specs["ranking"] = TableSpec(
        "ranking", "Zero-shot perplexity per domain (mean over seeds, exact token pooling), best and worst ratio, and "
                   "spread (max − min over ratios).",
        (Column("Domain", "domain", "text"), *mean_cols, Column("Best", "best", "text"), Column("Worst", "worst", "text"),
         Column("Spread", "spread", "num", 2)))
    specs["per_ratio"] = TableSpec("per_ratio", "Number of domains where each ratio is best and worst.",
                                   (Column("Ratio", "ratio", "text"), Column("Best", "n_best", "int"),
                                    Column("Worst", "n_worst", "int")))
    if len(rep.worst_best):
        specs["worst_best"] = TableSpec(
            "worst_best", f"Worst vs best ratio per domain: paired {rep.settings.test}-test across seeds (unit = seed; "
                          "no multiplicity correction, as in the paper). Δ = worst − best.",
            (Column("Domain", "stratum", "text"), Column("Best", "ratio_a", "text"), Column("Worst", "ratio_b", "text"),
             Column("Seeds", "n_seeds", "int"), Column("Δ PPL", "mean_diff", "num", 2), Column("d_z", "dz", "num", 2),
             Column("p", "p_raw", "p"), Column("min p", "min_attainable_p", "p")))
    if rep.in_domain is not None:
        specs["in_domain"] = TableSpec(
            "in_domain", "In-domain perplexity of each ratio against the all-softmax baseline: paired test across seeds.",
            (Column("Baseline", "ratio_a", "text"), Column("Ratio", "ratio_b", "text"), Column("Seeds", "n_seeds", "int"),
             Column("PPL baseline", "mean_a", "num", 3), Column("PPL ratio", "mean_b", "num", 3),
             Column("Δ", "mean_diff", "num", 3), Column("p", "p_raw", "p")))
    if rep.pca is not None:
        specs["pca"] = TableSpec(
            "pca", f"PC1 of the row-z-scored (sample SD) domain × ratio mean-PPL matrix, columns centred; PC1 explains "
                   f"{100 * rep.pca.explained_ratio[0]:.1f}% of the variance; oriented so the all-sigmoid loading is "
                   "positive (positive score = relatively worse with sigmoid heads = softmax-leaning).",
            (Column("Rank", "rank", "int"), Column("Domain", "domain", "text"), Column("PC1", "pc1", "num", 2),
             Column("Label", "label", "text")))
    if rep.consecutive is not None:
        specs["consecutive"] = TableSpec(
            "consecutive", "Row-normalised head entropy (nats) by head type: paired t-tests across seeds between "
                           "adjacent ratios where the type exists; Δ = later − earlier ratio.",
            (Column("Head type", "head_type", "text"), Column("From", "ratio_a", "text"), Column("To", "ratio_b", "text"),
             Column("H from", "mean_a"), Column("H to", "mean_b"), Column("Δ", "mean_diff"), Column("t", "statistic", "num", 2),
             Column("p", "p_raw", "p")))
    return specs


def mofa_figures(rep, folder: Path, prefix: str = "") -> dict:
    out = {}
    m = rep.ppl.groupby(["domain", "ratio"])["ppl"].mean().unstack("ratio")[rep.ratios]
    z = m.sub(m.mean(axis=1), axis=0).div(m.std(axis=1, ddof=1), axis=0)
    fig, ax = plt.subplots(figsize=(1.2 * len(rep.ratios) + 3, 0.5 * len(m) + 1.5))
    vmax = float(np.nanmax(np.abs(z.to_numpy()))) or 1.0
    F.heat(ax, z.rename(index=F.plain), vmin=-vmax, vmax=vmax, cmap="RdBu_r", cbar=True,
           labels=[[f"{v:.1f}" for v in row] for row in m.to_numpy()])
    ax.set(xlabel="ratio (softmax:sigmoid)", ylabel="", title="Domain × ratio PPL (colour: row z-score)")
    fig.tight_layout()
    out["heatmap"] = F.save(fig, folder, prefix + "mofa-heatmap")
    if rep.pca is not None:
        s = rep.pca.scores.sort_values("pc1")
        fig, ax = plt.subplots(figsize=(7, 0.4 * len(s) + 1.5))
        ax.barh([F.plain(d) for d in s["domain"]], s["pc1"], color=np.where(s["pc1"] > 0, "#4C72B0", "#DD8452"))
        ax.axvline(0, color="0.3", lw=1)
        ax.set(xlabel="PC1 score (> 0: softmax-leaning)", title=f"Domain response PC1 ({100 * rep.pca.explained_ratio[0]:.1f}%)")
        fig.tight_layout()
        out["pca"] = F.save(fig, folder, prefix + "mofa-pca")
    if rep.entropy_layer is not None:
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
        colors = dict(zip(rep.ratios, sns.color_palette("viridis", len(rep.ratios))))
        for ax, htype in zip(axes, ("softmax", "sigmoid")):
            t = rep.entropy_layer[rep.entropy_layer["head_type"] == htype]
            for r, g in t.groupby("ratio"):
                ax.plot(g["layer"], g["entropy"], marker="o", color=colors[r], label=r)
            ax.set(title=f"{htype} heads", xlabel="layer", ylabel="row-normalised entropy (nats)")
            ax.set_xticks(sorted(rep.entropy_layer["layer"].unique()))
            if len(t):
                ax.legend(fontsize=8, title="ratio")
        fig.tight_layout()
        out["entropy"] = F.save(fig, folder, prefix + "mofa-entropy")
    return out


def mofa_section(rep, slug: str, figs: dict) -> dict:
    specs = mofa_specs(rep)
    tables = rep.tables()
    tables["pca"] = rep.pca.scores if rep.pca is not None else None

    table, fig = section_lookups(tables, specs, figs, slug)

    blocks = [{"id": "ranking", "title": "Zero-shot perplexity by domain", "tables": [table("ranking"), table("per_ratio")],
               "figure": fig("heatmap"), "text": ""}]
    for name, title, f in (("worst_best", "Worst vs best ratio", None), ("in_domain", "In-domain comparison", None),
                           ("pca", "PCA of the domain response", "pca"), ("consecutive", "Head entropy by type", "entropy")):
        if name in specs:
            blocks.append({"id": name, "title": title, "tables": [table(name)], "figure": fig(f) if f else None, "text": ""})
    findings = [f"{rep.n_runs} runs: ratios {', '.join(rep.ratios)} × seeds {', '.join(map(str, rep.seeds))}.",
                f"Worst ratio is a pure endpoint (all-softmax or all-sigmoid) in {rep.ranking.attrs.get('pure_endpoint_worst', 0)} "
                f"of {len(rep.ranking)} domains."]
    if len(rep.worst_best):
        wb = rep.worst_best
        findings.append(f"Worst − best significant (p < 0.05, {rep.settings.test}-test) in {(wb['p_raw'] < 0.05).sum()} "
                        f"of {len(wb)} domains.")
    if rep.pca is not None:
        top = rep.pca.scores.iloc[0]
        findings.append(f"PC1 explains {100 * rep.pca.explained_ratio[0]:.1f}%; most softmax-leaning domain: "
                        f"{top['domain']} ({fmt_num(top['pc1'], 2)}).")
    methods = ("PPL per domain pools summed next-token NLL over all blocks (documents concatenated without separator, "
               "cut into fixed blocks, remainder dropped, first token of a block unscored). Ratios at one seed share "
               "initial tensors and data order, so tests pair by seed. Head entropy is computed after row-normalising "
               "attention (natural log), averaged over query positions and blocks, then heads of a type, layers and domains.")
    prov = [("analysis settings", json.dumps(rep.provenance["analysis"]["settings"], sort_keys=True))]
    prov += [(r["run_id"], json.dumps(r, sort_keys=True)) for r in rep.provenance["runs"]]
    return {"slug": slug, "label": rep.title, "subtitle": f"{rep.n_runs} runs · domains {', '.join(rep.ranking['domain'])}",
            "findings": findings, "blocks": blocks, "methods": methods, "provenance_rows": prov,
            "provenance_json": json.dumps(rep.provenance, indent=2, sort_keys=True, default=str)}
