"""MoFA analyses (METHODS Part II A.4): zero-shot domain perplexity across softmax/sigmoid head
ratios, worst-vs-best tests, in-domain comparison, PCA of the domain response, and head
entropy by head type with consecutive-ratio tests.

Ratios are ordered by their number of sigmoid heads (``n_sigmoid``), so ``12:0`` (all softmax,
the baseline) comes first and ``0:12`` (all sigmoid) last. The unit of inference is the seed:
every ratio at one seed shares its initial tensors and data order.

Examples
--------
>>> import pandas as pd
>>> s = pd.DataFrame({"run_id": ["a", "a"], "domain": ["code", "code"], "sum_nll": [10.0, 20.0], "n_tokens": [10, 10]})
>>> round(float(pooled_perplexity(s)["ppl"].iloc[0]), 4)  # exp(30 / 20)
4.4817
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from routestats.errors import RoutestatsError
from routestats.rundir.collection import RunCollection
from routestats.stats.inference import cohen_dz, holm, signflip_count
from routestats.stats.ttest import paired_t

__all__ = [
    "pooled_perplexity",
    "ppl_table",
    "domain_ranking",
    "ratio_tests",
    "worst_vs_best",
    "PCAResult",
    "pca_domain_response",
    "consecutive_ratio_tests",
]


def pooled_perplexity(scores: pd.DataFrame, by=("run_id", "domain")) -> pd.DataFrame:
    """Exact pooling: PPL = exp(sum of block NLLs / sum of predicted tokens) per group."""
    g = scores.groupby(list(by), sort=False).agg(sum_nll=("sum_nll", "sum"), n_tokens=("n_tokens", "sum"))
    if (g["n_tokens"] <= 0).any():
        raise RoutestatsError("a group has no predicted tokens")
    g["loss"] = g["sum_nll"] / g["n_tokens"]
    g["ppl"] = np.exp(g["loss"])
    return g.reset_index()


def ppl_table(runs: RunCollection, ratio_factor: str = "ratio", sigmoid_factor: str = "n_sigmoid") -> pd.DataFrame:
    """Per seed x ratio x domain perplexity from each run's ``lm_scores.parquet``.

    Columns: seed, ratio, n_sigmoid, domain, sum_nll, n_tokens, loss, ppl.
    """
    frames = []
    for r in runs:
        f = r.factors
        if ratio_factor not in f or sigmoid_factor not in f:
            raise RoutestatsError(f"{r.run_id}: factors {ratio_factor!r} and {sigmoid_factor!r} are required")
        p = pooled_perplexity(r.lm_scores().assign(run_id=r.run_id))
        p.insert(0, "seed", r.seed)
        p.insert(1, "ratio", str(f[ratio_factor]))
        p.insert(2, "n_sigmoid", int(f[sigmoid_factor]))
        frames.append(p.drop(columns=["run_id"]))
    return pd.concat(frames, ignore_index=True)


def _ratio_order(ppl: pd.DataFrame) -> list[str]:
    return ppl.drop_duplicates("ratio").sort_values("n_sigmoid")["ratio"].tolist()


def domain_ranking(ppl: pd.DataFrame, in_domain: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Mean PPL over seeds per ratio and domain, ranks, best/worst, spreads (A.4.1).

    Returns ``(per_domain, per_ratio)``. ``per_domain``: domain, best, worst, spread
    (max - min of the ratio means), worst_is_endpoint (worst ratio is all-softmax or
    all-sigmoid), spread_vs_in_domain_gap (spread / in-domain spread, when ``in_domain`` is
    given), plus one mean and one rank column per ratio. ``per_ratio``: ratio, n_best, n_worst.
    ``attrs["pure_endpoint_worst"]`` counts domains whose worst ratio is an endpoint.
    """
    order = _ratio_order(ppl)
    m = ppl.groupby(["domain", "ratio"])["ppl"].mean().unstack("ratio")[order]
    ranks = m.rank(axis=1, method="min").astype(int)
    out = pd.DataFrame({"domain": m.index, "best": m.idxmin(axis=1).to_numpy(), "worst": m.idxmax(axis=1).to_numpy(),
                        "spread": (m.max(axis=1) - m.min(axis=1)).to_numpy()})
    out["worst_is_endpoint"] = out["worst"].isin([order[0], order[-1]])
    if in_domain is not None:
        if in_domain not in m.index:
            raise RoutestatsError(f"no domain {in_domain!r}")
        gap = float(m.loc[in_domain].max() - m.loc[in_domain].min())
        out["spread_vs_in_domain_gap"] = out["spread"] / gap if gap > 0 else np.nan
    for r in order:
        out[f"mean_{r}"] = m[r].to_numpy()
        out[f"rank_{r}"] = ranks[r].to_numpy()
    per_ratio = pd.DataFrame({"ratio": order, "n_best": [(out["best"] == r).sum() for r in order],
                              "n_worst": [(out["worst"] == r).sum() for r in order]})
    out.attrs["pure_endpoint_worst"] = int(out["worst_is_endpoint"].sum())
    return out, per_ratio


def _exact_signflip(d: np.ndarray) -> float:
    n = len(d)
    if n > 20:
        raise RoutestatsError("exact sign-flip enumeration is limited to 20 pairs")
    bits = ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1).astype(np.uint8)
    return float(signflip_count(d[:, None], bits)[0] / 2**n)


def ratio_tests(values: pd.DataFrame, pairs: list[tuple[str, str, str]], test: str = "t", value: str = "ppl",
                alpha: float = 0.05, holm_family: bool = False) -> pd.DataFrame:
    """Paired tests across seeds of ``value`` between two ratios, one row per (stratum, a, b).

    ``values`` has columns seed, ratio, ``value`` and a stratum column ``stratum``; ``pairs``
    lists (stratum, ratio_a, ratio_b); the difference is b - a. ``test``: ``"t"`` (paired
    t, scipy), ``"wilcoxon"`` (exact two-sided signed-rank, scipy) or ``"signflip"`` (exact
    enumeration). ``min_attainable_p`` is reported, with a warning when it exceeds ``alpha``
    (n = 5 seeds: 0.0625 for both non-parametric tests). ``holm_family`` adds Holm-adjusted p
    over all rows (a sensitivity analysis; raw p is always reported).
    """
    from scipy import stats

    if test not in ("t", "wilcoxon", "signflip"):
        raise RoutestatsError("test must be 't', 'wilcoxon' or 'signflip'")
    rows = []
    for stratum, a, b in pairs:
        s = values[values["stratum"] == stratum]
        w = s.pivot_table(index="seed", columns="ratio", values=value)
        if a not in w.columns or b not in w.columns:
            raise RoutestatsError(f"{stratum}: ratio {a!r} or {b!r} missing")
        pair = w[[a, b]].dropna()
        d = (pair[b] - pair[a]).to_numpy()
        n = len(d)
        if n < 2:
            raise RoutestatsError(f"{stratum}: {n} paired seeds; at least 2 are needed")
        row = {"stratum": stratum, "ratio_a": a, "ratio_b": b, "n_seeds": n, "mean_a": pair[a].mean(),
               "mean_b": pair[b].mean(), "mean_diff": d.mean(), "dz": float(cohen_dz(d)[0]), "test": test}
        if test == "t":
            r = paired_t(d)
            row.update(statistic=float(r.statistic[0]), df=n - 1, p_raw=float(r.p_raw[0]), ci_low=float(r.ci_low[0]),
                       ci_high=float(r.ci_high[0]), min_attainable_p=np.nan)  # no floor for the t-test
        elif test == "wilcoxon":
            res = stats.wilcoxon(pair[b], pair[a], method="exact")
            row.update(statistic=float(res.statistic), df=np.nan, p_raw=float(res.pvalue), ci_low=np.nan,
                       ci_high=np.nan, min_attainable_p=2 / 2**n)
        else:
            row.update(statistic=float(d.mean()), df=np.nan, p_raw=_exact_signflip(d), ci_low=np.nan, ci_high=np.nan,
                       min_attainable_p=2 / 2**n)
        rows.append(row)
    out = pd.DataFrame(rows)
    if (out["min_attainable_p"] > alpha).any():
        warnings.warn(f"with {int(out['n_seeds'].min())} seeds the {test} test cannot reach p < {alpha} "
                      f"(smallest attainable p = {out['min_attainable_p'].max():.4f})", stacklevel=2)
    if holm_family:
        out["p_holm"] = holm(out["p_raw"].to_numpy())
    return out


def worst_vs_best(ppl: pd.DataFrame, test: str = "t", holm_family: bool = False) -> pd.DataFrame:
    """Per domain: paired test across seeds of the worst vs the best ratio (by mean PPL; A.4.2)."""
    per_domain, _ = domain_ranking(ppl)
    values = ppl.rename(columns={"domain": "stratum"})
    pairs = [(r.domain, r.best, r.worst) for r in per_domain.itertuples()]
    return ratio_tests(values, pairs, test=test, holm_family=holm_family)


@dataclass(frozen=True)
class PCAResult:
    """PCA of the row-z-scored domain x ratio mean-PPL matrix (A.4.4)."""

    ratios: list
    explained_ratio: np.ndarray  # per component
    loadings: np.ndarray  # (components, ratios), PC1 oriented
    scores: pd.DataFrame  # domain, pc1, label, rank

    def to_frame(self) -> pd.DataFrame:
        return self.scores


def pca_domain_response(Y: pd.DataFrame, ddof: int = 1, orient_by: str | None = None) -> PCAResult:
    """PCA protocol of METHODS A.4.4 on ``Y`` (rows = domains, columns = ratios in order).

    1. row z-score with sample SD (``ddof=1``); 2. column-centre; 3. SVD; explained ratio
    s_k^2 / sum s^2; 4. PC1 score = centred row . PC1 loading; 5. orientation: the loading on
    ``orient_by`` (default the last column, all-sigmoid) is positive, so a positive score means
    relatively high PPL under sigmoid heads = ``softmax-leaning``; 6. domains ranked by score,
    descending.
    """
    if Y.isna().any().any():
        raise RoutestatsError("the domain x ratio matrix has missing cells")
    X = Y.to_numpy(dtype=np.float64)
    sd = X.std(axis=1, ddof=ddof, keepdims=True)
    if (sd == 0).any():
        raise RoutestatsError("a domain has the same PPL under every ratio; its z-score is undefined")
    Z = (X - X.mean(axis=1, keepdims=True)) / sd
    C = Z - Z.mean(axis=0, keepdims=True)
    _, s, vt = np.linalg.svd(C, full_matrices=False)
    col = list(Y.columns).index(orient_by) if orient_by is not None else len(Y.columns) - 1
    if vt[0, col] < 0:
        vt[0] = -vt[0]
    pc1 = C @ vt[0]
    scores = pd.DataFrame({"domain": list(Y.index), "pc1": pc1})
    scores["label"] = np.where(scores["pc1"] > 0, "softmax-leaning", "sigmoid-leaning")
    scores["rank"] = scores["pc1"].rank(ascending=False, method="first").astype(int)
    return PCAResult(list(Y.columns), s**2 / (s**2).sum(), vt, scores.sort_values("rank").reset_index(drop=True))


def consecutive_ratio_tests(entropy: pd.DataFrame, value: str = "entropy") -> pd.DataFrame:
    """Per head type, paired t-tests across seeds between adjacent ratios where the type exists (A.4.5).

    ``entropy`` has columns seed, ratio, n_sigmoid, head_type and ``value`` (already averaged
    over layers, heads and domains). Delta = later ratio - earlier ratio.
    """
    order = entropy.drop_duplicates("ratio").sort_values("n_sigmoid")["ratio"].tolist()
    frames = []
    for htype, g in entropy.groupby("head_type"):
        have = [r for r in order if r in set(g["ratio"])]
        pairs = [(htype, a, b) for a, b in zip(have[:-1], have[1:])]
        if pairs:
            frames.append(ratio_tests(g.rename(columns={"head_type": "stratum"}), pairs, test="t", value=value))
    return pd.concat(frames, ignore_index=True).rename(columns={"stratum": "head_type"})


def head_entropy(runs: RunCollection, ratio_factor: str = "ratio", sigmoid_factor: str = "n_sigmoid",
                 min_query_pos: int = 0) -> pd.DataFrame:
    """Row-normalised attention entropy (nats) and row mass per seed, ratio, domain, layer, head.

    Uses the per-query reductions (``entropy_rownorm``, ``row_mass``) averaged over the
    evaluated blocks and query positions; the domain of a block is its ``split`` in
    examples.parquet. Query position 0 (entropy 0) is included unless ``min_query_pos`` > 0.
    Columns: seed, ratio, n_sigmoid, domain, layer, head, head_type, entropy, row_mass.
    """
    from routestats.metrics.routing import head_metrics

    frames = []
    for r in runs:
        f = r.factors
        ex = r.examples(["example_id", "split"]).rename(columns={"split": "domain"})
        if min_query_pos:
            rows = []
            for blk in r.iter_reductions():
                e = blk.entropy_rownorm[:, min_query_pos:].mean(axis=1)
                m = blk.row_mass[:, min_query_pos:].mean(axis=1)
                rows.append(pd.DataFrame({"example_id": blk.example_id, "layer": blk.layer, "head": blk.head,
                                          "head_type": blk.head_type, "entropy_rownorm": e, "row_mass": m}))
            h = pd.concat(rows, ignore_index=True)
        else:
            h = head_metrics(r)
        h = h.merge(ex, on="example_id")
        g = h.groupby(["domain", "layer", "head", "head_type"]).agg(entropy=("entropy_rownorm", "mean"),
                                                                   row_mass=("row_mass", "mean")).reset_index()
        g.insert(0, "seed", r.seed)
        g.insert(1, "ratio", str(f[ratio_factor]))
        g.insert(2, "n_sigmoid", int(f[sigmoid_factor]))
        frames.append(g)
    return pd.concat(frames, ignore_index=True)


def entropy_by_type(h: pd.DataFrame) -> pd.DataFrame:
    """H_type[seed, ratio, type]: mean over layers and heads of a type per domain, then over domains."""
    per_domain = h.groupby(["seed", "ratio", "n_sigmoid", "domain", "head_type"])["entropy"].mean().reset_index()
    return per_domain.groupby(["seed", "ratio", "n_sigmoid", "head_type"])["entropy"].mean().reset_index()


def entropy_by_layer(h: pd.DataFrame) -> pd.DataFrame:
    """Per ratio, layer and head type: mean over seeds, domains and heads (descriptive, Fig. 2)."""
    return h.groupby(["ratio", "n_sigmoid", "layer", "head_type"])["entropy"].mean().reset_index()
