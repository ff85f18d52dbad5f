"""Everything a MoFA report shows for a tree of ratios x seeds, as tidy frames.

Examples
--------
>>> MoFASettings().test
't'
"""

from __future__ import annotations

import datetime as _dt
import warnings
from dataclasses import asdict, dataclass

import pandas as pd

from routestats.errors import RoutestatsError
from routestats.rundir.read import RunCollection
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

__all__ = ["MoFASettings", "MoFAReport", "build_mofa_report"]


@dataclass(frozen=True)
class MoFASettings:
    in_domain: str | None = "docstrings"  # the held-out split of the training domain
    test: str = "t"
    holm_family: bool = False


@dataclass(frozen=True)
class MoFAReport:
    title: str
    settings: MoFASettings
    n_runs: int
    seeds: list
    ratios: list
    ppl: pd.DataFrame
    ranking: pd.DataFrame
    per_ratio: pd.DataFrame
    worst_best: pd.DataFrame
    in_domain: pd.DataFrame | None
    pca: PCAResult | None
    entropy_type: pd.DataFrame | None
    consecutive: pd.DataFrame | None
    entropy_layer: pd.DataFrame | None
    provenance: dict

    def tables(self) -> dict[str, pd.DataFrame]:
        named = {"ppl": self.ppl, "ranking": self.ranking, "per_ratio": self.per_ratio, "worst_best": self.worst_best,
                 "in_domain": self.in_domain, "pca": None if self.pca is None else self.pca.scores,
                 "entropy_type": self.entropy_type, "consecutive": self.consecutive,
                 "entropy_layer": self.entropy_layer}
        return {k: v for k, v in named.items() if v is not None}


def build_mofa_report(runs: RunCollection, settings: MoFASettings = MoFASettings(), progress=None) -> MoFAReport:
    """Compute the MoFA tables (A.4) for a run tree whose runs have ``ratio``/``n_sigmoid`` factors."""
    say = progress or (lambda label: None)
    say("perplexity")
    ppl = ppl_table(runs)
    order = ppl.drop_duplicates("ratio").sort_values("n_sigmoid")["ratio"].tolist()
    in_dom = settings.in_domain if settings.in_domain in set(ppl["domain"]) else None
    ranking, per_ratio = domain_ranking(ppl, in_domain=in_dom)
    n_seeds = ppl["seed"].nunique()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the attainable-p caveat is shown in the tables themselves
        wb = worst_vs_best(ppl, test=settings.test, holm_family=settings.holm_family) if n_seeds >= 2 else None
        ind = None
        if in_dom is not None and n_seeds >= 2 and len(order) > 1:
            values = ppl[ppl["domain"] == in_dom].rename(columns={"domain": "stratum"})
            ind = ratio_tests(values, [(in_dom, order[0], r) for r in order[1:]], test=settings.test)
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
    return MoFAReport(
        title=f"MoFA: {len(order)} ratios x {n_seeds} seeds", settings=settings, n_runs=len(runs),
        seeds=sorted(ppl["seed"].unique().tolist()), ratios=order, ppl=ppl, ranking=ranking, per_ratio=per_ratio,
        worst_best=wb if wb is not None else pd.DataFrame(), in_domain=ind, pca=pca, entropy_type=ent_t,
        consecutive=cons, entropy_layer=ent_l,
        provenance={"runs": runs.index.astype(str).to_dict(orient="records"),
                    "analysis": {"generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                                 "settings": asdict(settings)}},
    )
