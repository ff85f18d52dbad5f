"""Inputs of study sections computed from several runs: the length-standardised data-set contrast,
corpus lengths, the evidence forest and the sentences on intervals that disagree."""

from __future__ import annotations

import numpy as np
import pandas as pd

from routestats.errors import RoutestatsError
from routestats.report import fmt_ci
from routestats.rundir.collection import RunCollection
from routestats.settings import AnalysisSettings
from routestats.studies.seeds import reference_rows

__all__ = ["standardisation", "corpus_lengths", "forest_frame", "disagreement", "shared_examples"]


def standardisation(ctx):
    """(exact, sensitivity): the exact-length standardised contrast between the two data sets, at the
    first seed that has a standard SAAB pair on both (computed once per context); (None, None) else."""
    memo = ctx.__dict__
    if "_standardisation" not in memo:
        memo["_standardisation"] = _standardisation(ctx.runs, ctx.deltas, ctx.settings)
    return memo["_standardisation"]


def _standardisation(runs: RunCollection, deltas: pd.DataFrame, settings: AnalysisSettings):
    from routestats.studies.lengths import length_standardised_contrast

    names = sorted(deltas["dataset"].unique())
    if len(names) != 2:
        return None, None
    ref = deltas[reference_rows(deltas)]
    by = {}
    for p in runs.pairs():
        if p.variant.run_id in set(ref["variant_run"]):
            row = ref[ref["variant_run"] == p.variant.run_id].iloc[0]
            by.setdefault(row["seed"], {})[row["dataset"]] = p
    for seed in sorted(by):
        if len(by[seed]) == 2:
            try:
                res = length_standardised_contrast(by[seed][names[0]], by[seed][names[1]], names=tuple(names),
                                                   resampling=settings.resampling, examples=settings.examples)
            except RoutestatsError:
                return None, None
            ex = res.exact.copy()
            ex.insert(0, "seed", seed)
            return ex, res.sensitivity
    return None, None


def corpus_lengths(folder) -> pd.DataFrame | None:
    from pathlib import Path

    from routestats.studies.lengths import length_table

    if folder is None:
        return None
    files = sorted(Path(folder).rglob("lengths.parquet"))
    if not files:
        return None
    frames = []
    for f in files:
        df = pd.read_parquet(f)
        for ds, g in df.groupby("dataset"):
            t = length_table(g[["split", "length"]], cap=int(g["cap"].max()))
            t.insert(0, "dataset", ds)
            frames.append(t)
    return pd.concat(frames, ignore_index=True)


def forest_frame(ctx) -> pd.DataFrame | None:
    """Per layer: each seed's Δ with its bootstrap CI over that seed's examples, then the across-seed
    estimates with their intervals (paired t, two-stage bootstrap, mixed model) -- the evidence hierarchy."""
    ex, s = ctx.ex, ctx.settings
    t = {"across_seeds": ctx.across_seeds, "hierarchical": ctx.hierarchical,
         "variance_components": ctx.variance_components}
    if t["across_seeds"] is None:
        return None
    from routestats.stats.inference import percentile_ci, seeded_bootstrap_means

    ref = ex[reference_rows(ex)]
    rows = []
    for (ds, seed), g in ref.groupby(["dataset", "seed"], sort=True):
        D = g.pivot_table(index="example_id", columns="layer", values="diff").sort_index(axis=1)
        lo, hi = percentile_ci(seeded_bootstrap_means(D.to_numpy(), s.resamples, s.seed), s.confidence)
        for j, layer in enumerate(D.columns):
            rows.append({"dataset": ds, "layer": int(layer), "level": "seed", "label": f"seed {seed}",
                         "estimate": float(D[layer].mean()), "ci_low": float(lo[j]), "ci_high": float(hi[j])})
    for name, key, lo_c, hi_c in (("paired t (seeds)", "across_seeds", "ci_low_t", "ci_high_t"),
                                  ("two-stage bootstrap", "hierarchical", "ci_low", "ci_high"),
                                  ("mixed model", "variance_components", "ci_low", "ci_high")):
        f = t.get(key)
        if f is None:
            continue
        for r in f.itertuples():
            if not np.isfinite(r.mean_delta):  # a fit that did not converge is not shown
                continue
            rows.append({"dataset": r.dataset, "layer": int(r.layer), "level": "across seeds", "label": name,
                         "estimate": float(r.mean_delta), "ci_low": float(getattr(r, lo_c)),
                         "ci_high": float(getattr(r, hi_c))})
    return pd.DataFrame(rows) if rows else None


def disagreement(forest: pd.DataFrame | None, n_seeds: int, confidence: float = 0.95) -> list[str]:
    """Sentences for layers whose across-seed intervals disagree about excluding 0, and why, from the
    intervals' actual widths."""
    from scipy import stats

    if forest is None:
        return []
    out, ratios = [], []
    acr = forest[(forest["level"] == "across seeds") & forest["ci_low"].notna()]
    for (ds, layer), g in acr.groupby(["dataset", "layer"]):
        excl = {r.label: (r.ci_low > 0 or r.ci_high < 0) for r in g.itertuples()}
        if len(set(excl.values())) < 2:
            continue
        say = lambda names: " and ".join(  # noqa: E731
            f"the {n} {fmt_ci(g.loc[g.label == n, 'ci_low'].iloc[0], g.loc[g.label == n, 'ci_high'].iloc[0])}"
            for n in names)
        yes = [k for k, v in excl.items() if v]
        no = [k for k, v in excl.items() if not v]
        out.append(f"Layer {layer}: {say(no)} include{'s' if len(no) == 1 else ''} 0 while {say(yes)} exclude"
                   f"{'s' if len(yes) == 1 else ''} it.")
        width = (g["ci_high"] - g["ci_low"]).set_axis(g["label"])
        if {"paired t (seeds)", "two-stage bootstrap"} <= set(width.index) and width["paired t (seeds)"] > 0:
            ratios.append(width["two-stage bootstrap"] / width["paired t (seeds)"])
    if out:  # the reasons once, from the widths, after the layers they explain
        q = stats.t.ppf(0.5 + confidence / 2, n_seeds - 1)
        why = (f"Why: the paired t interval rests on {n_seeds} per-seed means, with t on {n_seeds - 1} degrees of "
               f"freedom (critical value {q:.2f}, against 1.96 for a normal reference), so it is wide")
        if ratios:
            why += (f"; the two-stage bootstrap interval is {min(ratios):.2f}–{max(ratios):.2f} times as wide, because "
                    f"it resamples only the {n_seeds} observed seeds and so understates between-seed variation")
        out.append(why + f". With {n_seeds} seeds the widest interval is the one to trust.")
    return out


def shared_examples(ex: pd.DataFrame) -> pd.DataFrame | None:
    """Per data set and layer, when every seed of the standard pair was evaluated on the same examples
    (the same example ids in the same data set): the number of examples and seeds, and the mean
    Pearson r of the per-example Δ between pairs of seeds (how strongly the examples' own
    difficulty carries over between seeds); None when the seeds hold different examples.

    >>> ex = pd.DataFrame({"seed": [1, 1, 1, 2, 2, 2], "dataset": "d", "layer": 0, "example_id": [0, 1, 2] * 2,
    ...                    "diff": [0.1, 0.2, 0.3, 0.15, 0.25, 0.2], "variant": "saab", "w_f": 1.0,
    ...                    "bias_layers": "all", "shuffled": False})
    >>> shared_examples(ex)[["n_examples", "n_seeds", "mean_r"]].round(3).values.tolist()
    [[3.0, 2.0, 0.5]]
    """
    ref = ex[reference_rows(ex)]
    rows = []
    keys = ["dataset", *(["depth"] if "depth" in ref else []), "layer"]
    for key, g in ref.groupby(keys, dropna=False):
        ds, layer = key[0], key[-1]
        ids = g.groupby("seed")["example_id"].apply(lambda s: tuple(sorted(s)))
        if len(ids) < 2 or ids.nunique() != 1:
            return None
        wide = g.pivot_table(index="example_id", columns="seed", values="diff")
        r = wide.corr(method="pearson").to_numpy()
        upper = r[np.triu_indices_from(r, k=1)]
        rows.append({"dataset": ds, "layer": int(layer), "n_examples": len(wide), "n_seeds": wide.shape[1],
                     "mean_r": float(np.nanmean(upper)) if np.isfinite(upper).any() else np.nan})
    return pd.DataFrame(rows) if rows else None
