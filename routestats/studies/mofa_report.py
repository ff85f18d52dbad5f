"""The MoFA report for a tree of ratios x seeds: tables, figures and sentences (A.4)."""

from __future__ import annotations

import datetime as _dt
import warnings
from dataclasses import asdict

import pandas as pd

from routestats.errors import RoutestatsError
from routestats.rundir.collection import RunCollection
from routestats.report import Column, Figure, Report, Section, Table, fmt_num
from routestats.settings import AnalysisSettings
from routestats.studies.mofa import (
    PCAResult,
    consecutive_ratio_tests,
    domain_ranking,
    entropy_by_layer,
    entropy_by_type,
    head_entropy,
    pca_domain_response,
    ppl_table,
    ratio_tests,
    worst_vs_best,
)

__all__ = ["build_mofa_report"]


def _tables(t: dict, ratios: list, pca: PCAResult | None, s: AnalysisSettings) -> dict[str, Table]:
    out = {}
    mean_cols = tuple(Column(f"PPL {r}", f"mean_{r}", "num", 2) for r in ratios)
    out["ranking"] = Table(
        "ranking", t["ranking"], "Zero-shot perplexity per domain (mean over seeds, exact token pooling), best and "
                                 "worst ratio, and spread (max − min over ratios).",
        (Column("Domain", "domain", "text"), *mean_cols, Column("Best", "best", "text"), Column("Worst", "worst", "text"),
         Column("Spread", "spread", "num", 2)))
    out["per_ratio"] = Table("per_ratio", t["per_ratio"], "Number of domains where each ratio is best and worst.",
                             (Column("Ratio", "ratio", "text"), Column("Best", "n_best", "int"),
                              Column("Worst", "n_worst", "int")))
    if len(t["worst_best"]):
        out["worst_best"] = Table(
            "worst_best", t["worst_best"], f"Worst vs best ratio per domain: paired {s.test}-test across seeds (unit = "
                                           "seed; no multiplicity correction, as in the paper). Δ = worst − best.",
            (Column("Domain", "stratum", "text"), Column("Best", "ratio_a", "text"), Column("Worst", "ratio_b", "text"),
             Column("Seeds", "n_seeds", "int"), Column("Δ PPL", "mean_diff", "num", 2), Column("d_z", "dz", "num", 2),
             Column("p", "p_raw", "p"), Column("min p", "min_attainable_p", "p")))
    else:
        out["worst_best"] = Table("worst_best", t["worst_best"])
    if t["in_domain"] is not None:
        out["in_domain"] = Table(
            "in_domain", t["in_domain"], "In-domain perplexity of each ratio against the all-softmax baseline: paired "
                                         "test across seeds.",
            (Column("Baseline", "ratio_a", "text"), Column("Ratio", "ratio_b", "text"), Column("Seeds", "n_seeds", "int"),
             Column("PPL baseline", "mean_a", "num", 3), Column("PPL ratio", "mean_b", "num", 3),
             Column("Δ", "mean_diff", "num", 3), Column("p", "p_raw", "p")))
    if pca is not None:
        out["pca"] = Table(
            "pca", pca.scores, f"PC1 of the row-z-scored (sample SD) domain × ratio mean-PPL matrix, columns centred; "
                               f"PC1 explains {100 * pca.explained_ratio[0]:.1f}% of the variance; oriented so the "
                               "all-sigmoid loading is positive (positive score = relatively worse with sigmoid heads = "
                               "softmax-leaning).",
            (Column("Rank", "rank", "int"), Column("Domain", "domain", "text"), Column("PC1", "pc1", "num", 2),
             Column("Label", "label", "text")))
    if t["consecutive"] is not None:
        out["consecutive"] = Table(
            "consecutive", t["consecutive"], "Row-normalised head entropy (nats) by head type: paired t-tests across "
                                             "seeds between adjacent ratios where the type exists; Δ = later − earlier "
                                             "ratio.",
            (Column("Head type", "head_type", "text"), Column("From", "ratio_a", "text"), Column("To", "ratio_b", "text"),
             Column("H from", "mean_a"), Column("H to", "mean_b"), Column("Δ", "mean_diff"),
             Column("t", "statistic", "num", 2), Column("p", "p_raw", "p")))
    return out


def build_mofa_report(runs: RunCollection, settings: AnalysisSettings | None = None, progress=None) -> Report:
    """Compute the MoFA tables (A.4) for a run tree whose runs have ``ratio``/``n_sigmoid`` factors."""
    s = settings or AnalysisSettings()
    say = progress or (lambda label: None)
    say("perplexity")
    ppl = ppl_table(runs)
    order = ppl.drop_duplicates("ratio").sort_values("n_sigmoid")["ratio"].tolist()
    in_dom = s.in_domain if s.in_domain in set(ppl["domain"]) else None
    ranking, per_ratio = domain_ranking(ppl, in_domain=in_dom)
    n_seeds = ppl["seed"].nunique()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the attainable-p caveat is shown in the tables themselves
        wb = worst_vs_best(ppl, test=s.test, holm_family=s.holm_family) if n_seeds >= 2 else None
        ind = None
        if in_dom is not None and n_seeds >= 2 and len(order) > 1:
            values = ppl[ppl["domain"] == in_dom].rename(columns={"domain": "stratum"})
            ind = ratio_tests(values, [(in_dom, order[0], r) for r in order[1:]], test=s.test)
    say("PCA")
    Y = ppl.groupby(["domain", "ratio"])["ppl"].mean().unstack("ratio")[order]
    try:
        pca = pca_domain_response(Y) if len(Y) >= 2 and len(order) >= 2 else None
    except RoutestatsError:
        pca = None
    ent_t = cons = ent_l = None
    if all(r.attention_steps for r in runs):
        say("head entropy")
        h = head_entropy(runs)
        ent_t = entropy_by_type(h)
        ent_l = entropy_by_layer(h)
        if n_seeds >= 2:
            try:
                cons = consecutive_ratio_tests(ent_t)
            except RoutestatsError:
                cons = None
    wb = wb if wb is not None else pd.DataFrame()
    t = {"ranking": ranking, "per_ratio": per_ratio, "worst_best": wb, "in_domain": ind, "consecutive": cons}
    tables = _tables(t, order, pca, s)
    z = Y.sub(Y.mean(axis=1), axis=0).div(Y.std(axis=1, ddof=1), axis=0)  # row z-scores (colour of the heatmap)
    sections = [Section("ranking", "Zero-shot perplexity by domain", (Table("ppl", ppl), tables["ranking"], tables["per_ratio"]),
                        (Figure("mofa-heatmap", "mofa_heatmap", {"mean_ppl": Y, "zscore": z}),))]
    if "worst_best" in tables:
        sections.append(Section("worst_best", "Worst vs best ratio", (tables["worst_best"],)))
    if "in_domain" in tables:
        sections.append(Section("in_domain", "In-domain comparison", (tables["in_domain"],)))
    if "pca" in tables:
        sections.append(Section("pca", "PCA of the domain response", (tables["pca"],),
                                (Figure("mofa-pca", "mofa_pca", {"scores": pca.scores},
                                        {"explained": float(pca.explained_ratio[0])}),)))
    ent_tables = tuple(Table(n, f) for n, f in (("entropy_type", ent_t), ("entropy_layer", ent_l)) if f is not None)
    if "consecutive" in tables or ent_l is not None:
        sections.append(Section("consecutive", "Head entropy by type",
                                ((tables["consecutive"],) if "consecutive" in tables else ()) + ent_tables,
                                (Figure("mofa-entropy", "mofa_entropy", {"entropy_layer": ent_l}, {"ratios": order}),)
                                if ent_l is not None else ()))
    findings = [f"{len(runs)} runs: ratios {', '.join(order)} × seeds {', '.join(map(str, sorted(ppl['seed'].unique())))}.",
                f"Worst ratio is a pure endpoint (all-softmax or all-sigmoid) in {ranking.attrs.get('pure_endpoint_worst', 0)} "
                f"of {len(ranking)} domains."]
    if len(wb):
        findings.append(f"Worst − best significant (p < 0.05, {s.test}-test) in {int((wb['p_raw'] < 0.05).sum())} "
                        f"of {len(wb)} domains.")
    if pca is not None:
        top = pca.scores.iloc[0]
        findings.append(f"PC1 explains {100 * pca.explained_ratio[0]:.1f}%; most softmax-leaning domain: "
                        f"{top['domain']} ({fmt_num(top['pc1'], 2)}).")
    methods = ("PPL per domain pools summed next-token NLL over all blocks (documents concatenated without separator, "
               "cut into fixed blocks, remainder dropped, first token of a block unscored). Ratios at one seed share "
               "initial tensors and data order, so tests pair by seed. Head entropy is computed after row-normalising "
               "attention (natural log), averaged over query positions and blocks, then heads of a type, layers and "
               "domains.")
    return Report(
        title=f"MoFA: {len(order)} ratios x {n_seeds} seeds",
        subtitle=f"{len(runs)} runs · domains {', '.join(ranking['domain'])}",
        sections=tuple(sections), findings=tuple(findings), methods=methods,
        provenance={"runs": runs.index.astype(str).to_dict(orient="records"),
                    "verified_files": runs.verified_files(),
                    "analysis": {"generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                                 "settings": asdict(s)}},
        facts={"n_runs": len(runs), "seeds": sorted(ppl["seed"].unique().tolist()), "ratios": order},
    )
