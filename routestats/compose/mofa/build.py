"""The MoFA report for a tree of ratios x seeds: tables, figures and sentences (A.4).

The :class:`MofaContext` computes the perplexity tests, the PCA and the head entropies once
(``cached_property``); each section function shows its tables with the claims that rest on them, and
:func:`build_mofa_report` assembles them through the one build skeleton.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

import pandas as pd

from routestats.errors import RoutestatsError
from routestats.rundir.collection import RunCollection
from routestats.report import floor_text
from routestats.compose.skeleton import build_report, generated_now
from routestats.claim import Check, Claim
from routestats.report import Column, Figure, Report, Section, Table, fmt_num, section
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

__all__ = ["build_mofa_report", "MofaContext", "MOFA_SECTIONS", "CLAIM_ORDER"]

CLAIM_ORDER = ("best_ratio", "counts", "endpoint_worst", "worst_best", "floor", "pca")


def shown_tables(t: dict, ratios: list, pca: PCAResult | None, s: AnalysisSettings) -> dict[str, Table]:
    """The MoFA tables as shown (captions and columns), from the computed frames ``t``."""
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


@dataclass(frozen=True)
class MofaContext:
    """What every MoFA section reads: the perplexity table, the ratio order, the in-domain domain and
    the frames several sections share (computed once)."""

    runs: RunCollection
    settings: AnalysisSettings
    ppl: pd.DataFrame = field(repr=False)
    say: Callable[[str], None] = field(default=lambda label: None, repr=False, compare=False)

    @functools.cached_property
    def order(self) -> list:
        return self.ppl.drop_duplicates("ratio").sort_values("n_sigmoid")["ratio"].tolist()

    @property
    def in_domain(self) -> str | None:
        return self.settings.in_domain if self.settings.in_domain in set(self.ppl["domain"]) else None

    @property
    def n_seeds(self) -> int:
        return int(self.ppl["seed"].nunique())

    @functools.cached_property
    def ranking(self):
        return domain_ranking(self.ppl, in_domain=self.in_domain)

    @functools.cached_property
    def Y(self) -> pd.DataFrame:
        return self.ppl.groupby(["domain", "ratio"])["ppl"].mean().unstack("ratio")[self.order]

    @functools.cached_property
    def pca(self) -> PCAResult | None:
        return pca_domain_response(self.Y) if len(self.Y) >= 2 and len(self.order) >= 2 else None

    @functools.cached_property
    def entropy(self):
        """(by type, by layer) head entropies, or (None, None) when runs hold no attention."""
        if not all(r.attention_steps for r in self.runs):
            return None, None
        self.say("head entropy")
        h = head_entropy(self.runs)
        return entropy_by_type(h), entropy_by_layer(h)

    @functools.cached_property
    def tables(self) -> dict[str, Table]:
        """Every shown MoFA table, computed once (the tests, the PCA and the entropy tests)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the attainable-p caveat is shown in the tables themselves
            wb = worst_vs_best(self.ppl, test=self.settings.test, holm_family=self.settings.holm_family) \
                if self.n_seeds >= 2 else None
            ind = None
            if self.in_domain is not None and self.n_seeds >= 2 and len(self.order) > 1:
                values = self.ppl[self.ppl["domain"] == self.in_domain].rename(columns={"domain": "stratum"})
                ind = ratio_tests(values, [(self.in_domain, self.order[0], r) for r in self.order[1:]],
                                  test=self.settings.test)
        cons = None
        ent_t = self.entropy[0]
        if ent_t is not None and self.n_seeds >= 2:
            try:
                cons = consecutive_ratio_tests(ent_t)
            except RoutestatsError:
                cons = None
        ranking, per_ratio = self.ranking
        t = {"ranking": ranking, "per_ratio": per_ratio, "worst_best": wb if wb is not None else pd.DataFrame(),
             "in_domain": ind, "consecutive": cons}
        try:
            pca = self.pca
        except RoutestatsError:  # its own section says why (pca_section)
            pca = None
        return shown_tables(t, self.order, pca, self.settings)


def endpoint_claim(ranking: pd.DataFrame, n_end: int) -> Claim:
    """How many domains' worst ratio is a pure endpoint (``n_end``, as :func:`routestats.studies.mofa.domain_ranking`
    counts it), checked against the ranking table's own ``worst_is_endpoint`` rows."""
    return Claim("endpoint_worst", f"The worst ratio is a pure endpoint (all-softmax or all-sigmoid) in {n_end} of "
                 f"{len(ranking)} domains.", "finding", "ranking", key="domain", evidence=ranking,
                 requires=(Check("the count is the ranking table's", f"rows == {n_end}", "worst_is_endpoint",
                                 on="design"),))


def pca_claim(scores: pd.DataFrame, explained: float) -> Claim:
    """PC1's share of the domain response and the most softmax-leaning domain (the first row of ``scores``)."""
    top = scores.iloc[0]
    return Claim("pca", f"PC1 explains {100 * explained:.1f}% of the domain response; most softmax-leaning domain: "
                 f"{top['domain']} ({fmt_num(top['pc1'], 2)}).", "finding", "pca", (str(top["domain"]),), "domain",
                 evidence=scores.iloc[:1], requires=(Check("the PC1 score is defined", "pc1 == pc1"),))


def counts_claim(n_runs: int, ratios, seeds) -> Claim:
    """The tree's runs, ratios and seeds: true of every report of its kind (a tree without runs is refused before
    any report), so its reason is a ``because``, not a check."""
    return Claim("counts", f"{n_runs} runs: ratios {', '.join(ratios)} × seeds {', '.join(map(str, seeds))}.",
                 because=("counted from the tree's runs",), design={"n_runs": n_runs})


@section("ranking", "Zero-shot perplexity by domain")
def ranking_section(ctx: MofaContext) -> Section:
    tables = ctx.tables
    Y = ctx.Y
    z = Y.sub(Y.mean(axis=1), axis=0).div(Y.std(axis=1, ddof=1), axis=0)  # row z-scores (colour of the heatmap)
    ranking = tables["ranking"].frame
    claim = endpoint_claim(ranking, int(ctx.ranking[0].attrs.get("pure_endpoint_worst", 0)))
    return Section(tables=(Table("ppl", ctx.ppl), tables["ranking"], tables["per_ratio"]),
                   figures=(Figure("mofa-heatmap", "mofa_heatmap", {"mean_ppl": Y, "zscore": z}),),
                   claims=(best_ratio_claim(tables["per_ratio"].frame, ranking, ctx.ppl, ctx.order, ctx.n_seeds), claim))


def best_ratio_claim(per_ratio: pd.DataFrame, ranking: pd.DataFrame, ppl: pd.DataFrame, order: list,
                     n_seeds: int) -> Claim:
    """The answer: which ratio has the lowest mean perplexity in how many domains (a ranking of means, not a test:
    the worst-vs-best test qualifies it), with the figure of every ratio's perplexity relative to its domain's
    lowest, per seed and mean."""
    d = len(ranking)
    best = per_ratio[per_ratio["n_best"] > 0].sort_values("n_best", ascending=False, kind="stable")
    top = best.iloc[0]
    if int(top["n_best"]) == d:
        short = f"Ratio {top['ratio']} has the lowest mean perplexity in all {d} domains ({n_seeds} seeds)."
    else:
        short = ("No one ratio has the lowest mean perplexity in every domain: "
                 + ", ".join(f"{r['ratio']} in {int(r['n_best'])} of {d}" for _, r in best.iterrows())
                 + f" ({n_seeds} seeds).")
    sentence = (short[:-1] + "; "
                + "; ".join(f"{r['domain']}: lowest {r['best']}, highest {r['worst']}, spread "
                            f"{fmt_num(r['spread'], 1)} PPL" for _, r in ranking.iterrows()) + ".")
    mean = ppl.groupby(["domain", "ratio"])["ppl"].mean()
    lowest = mean.groupby(level="domain").min()
    rel = ppl.assign(relative=ppl["ppl"] / ppl["domain"].map(lowest) - 1)[["domain", "ratio", "seed", "relative"]]
    return Claim("best_ratio", sentence, "headline", "per_ratio", tuple(per_ratio["ratio"]), "ratio",
                 requires=(Check("each domain has one lowest ratio", "n_best == domains", on="design"),),
                 evidence=per_ratio, design={"n_best": int(per_ratio["n_best"].sum()), "domains": d}, short=short,
                 figure=Figure("answer", "mofa_answer", {"relative": rel}, {"order": list(order)}))


def worst_best_claims(wb: pd.DataFrame, alpha: float, test: str) -> list[Claim]:
    """How many domains the worst-vs-best test separates, and its floor when few seeds cannot reach alpha."""
    if not len(wb):
        return []
    p = "p_holm" if "p_holm" in wb else "p_raw"
    floor = wb["min_attainable_p"].max()
    reached = int((wb[p] < alpha).sum())
    out = [Claim("worst_best", f"Worst − best PPL reaches p < {alpha:g} ({test}-test across seeds, "
                 f"{'Holm over domains' if p == 'p_holm' else 'per domain, unadjusted'}) in {int((wb[p] < alpha).sum())} "
                 f"of {len(wb)} domains; worst and best are picked from the same perplexities, so these p-values are "
                 "optimistic.", "headline", "worst_best", tuple(wb["stratum"]), "stratum",
                 requires=(Check("the test can reach alpha", f"not (min_attainable_p > {alpha!r})"),), evidence=wb,
                 short=f"worst − best reaches p < {alpha:g} in {reached} of {len(wb)} domains ({test}-test, "
                       f"{'Holm' if p == 'p_holm' else 'unadjusted'}; optimistic)", qualifier=True)]
    # built whether or not the test can reach alpha: its check, not an if beside it, decides whether it prints
    out.append(Claim("floor", f"With {int(wb['n_seeds'].min())} seeds the {test} test cannot reach p < {alpha:g} "
                     f"(smallest attainable p = {floor_text(floor, floor)}).", "finding", "worst_best",
                     requires=(Check("smallest attainable p > alpha", f"min_attainable_p > {alpha!r}", every="any"),),
                     evidence=wb))
    return out


def _shown(id: str, title: str):
    @section(id, title)
    def build(ctx: MofaContext) -> Section | None:
        tables = ctx.tables
        if id not in tables:
            return None
        claims = worst_best_claims(tables[id].frame, ctx.settings.alpha, ctx.settings.test) if id == "worst_best" else []
        return Section(tables=(tables[id],), claims=tuple(claims))

    return build


@section("pca", "PCA of the domain response")
def pca_section(ctx: MofaContext) -> Section | None:
    ctx.say("PCA")
    if ctx.pca is None:  # a failed fit raises here, and the section says why
        return None
    claim = pca_claim(ctx.tables["pca"].frame, float(ctx.pca.explained_ratio[0]))
    return Section(tables=(ctx.tables["pca"],),
                   figures=(Figure("mofa-pca", "mofa_pca", {"scores": ctx.pca.scores},
                           {"explained": float(ctx.pca.explained_ratio[0])}),), claims=(claim,))


@section("consecutive", "Head entropy by type")
def entropy_section(ctx: MofaContext) -> Section | None:
    tables = ctx.tables
    ent_t, ent_l = ctx.entropy
    if "consecutive" not in tables and ent_l is None:
        return None
    ent = tuple(Table(n, f) for n, f in (("entropy_type", ent_t), ("entropy_layer", ent_l)) if f is not None)
    return Section(tables=((tables["consecutive"],) if "consecutive" in tables else ()) + ent,
                   figures=(Figure("mofa-entropy", "mofa_entropy", {"entropy_layer": ent_l}, {"ratios": ctx.order}),)
                   if ent_l is not None else ())


MOFA_SECTIONS = (ranking_section, _shown("worst_best", "Worst vs best ratio"),
                 _shown("in_domain", "In-domain comparison"), pca_section, entropy_section)


def build_mofa_report(runs: RunCollection, settings: AnalysisSettings | None = None, progress=None) -> Report:
    """Compute the MoFA tables (A.4) for a run tree whose runs have ``ratio``/``n_sigmoid`` factors."""
    s = settings or AnalysisSettings()
    say = progress or (lambda label: None)
    say("perplexity")
    ctx = MofaContext(runs, s, ppl_table(runs), say)
    methods = ("PPL per domain pools summed next-token NLL over all blocks (documents concatenated without separator, "
               "cut into fixed blocks, remainder dropped, first token of a block unscored). Ratios at one seed share "
               "initial tensors and data order, so tests pair by seed. Head entropy is computed after row-normalising "
               "attention (natural log), averaged over query positions and blocks, then heads of a type, layers and "
               "domains.")
    counts = counts_claim(len(runs), ctx.order, sorted(ctx.ppl["seed"].unique()))
    rep = build_report(
        ctx, MOFA_SECTIONS, title=f"MoFA: {len(ctx.order)} ratios x {ctx.n_seeds} seeds",
        subtitle=f"{len(runs)} runs · domains {', '.join(ctx.ranking[0]['domain'])}", methods=methods,
        provenance={"runs": runs.index.astype(str).to_dict(orient="records"),
                    "analysis": {"generated": generated_now(), "settings": asdict(s)}},
        facts={"n_runs": len(runs), "seeds": sorted(ctx.ppl["seed"].unique().tolist()), "ratios": ctx.order},
        scope=(counts,), claim_order=CLAIM_ORDER)
    # after the sections: the provenance lists every file they read
    return replace(rep, provenance={**rep.provenance, "verified_files": runs.verified_files()})
