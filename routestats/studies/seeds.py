"""Multi-run SAAB studies: seeds, bias sweeps, placement, shuffled control, depth, data sets.

Every table here is a view of one long frame, :func:`paired_deltas`: for each pair in a run
tree (a variant run and the baseline sharing its init and data order) and each layer, the
baseline SFM, variant SFM and their difference from unrounded per-example values, with the
pair's factors (seed, variant, w_f, bias_layers, shuffled, depth, dataset).

Across-seed inference treats the seed (initialisation) as the unit; the hierarchical
two-stage bootstrap and the mixed model separate example-level from seed-level variance.

Examples
--------
>>> import tempfile
>>> from routestats.rundir.collection import load_runs
>>> from routestats.rundir.synthetic import synthetic_pair
>>> d = tempfile.mkdtemp()
>>> for s in (1, 2, 3):
...     _ = synthetic_pair(f"{d}/seed{s}", seed=s, n_examples=6)
>>> deltas = paired_deltas(load_runs(d))
>>> seed_table(deltas)[["seed", "pattern"]].shape
(3, 2)
"""

from __future__ import annotations


import numpy as np
import pandas as pd

from routestats.studies.effects import paired_differences
from routestats.errors import RoutestatsError
from routestats.settings import PatternRules, Resampling
from routestats.rundir.collection import RunCollection
from routestats.metrics.routing import profile_distance
from routestats.stats.inference import cohen_dz, holm, percentile_ci, signflip_count, signflip_floor
from routestats.stats.spread import sd_lower_bound
from routestats.stats.ttest import paired_t

__all__ = [
    "paired_deltas",
    "example_deltas",
    "PatternRules",
    "REFERENCE_CONDITION",
    "is_reference_pair",
    "reference_rows",
    "seed_table",
    "sweep_table",
    "null_check",
    "NULL_TOLERANCE",
    "placement_table",
    "shuffled_table",
    "depth_table",
    "dataset_table",
    "across_seed_tests",
    "hierarchical_bootstrap",
    "variance_components",
]

FACTORS = ("variant", "w_f", "bias_layers", "shuffled", "depth", "dataset")


def _factor_cols(run) -> dict:
    """The study factors of a variant run; absent ones take the standard condition's level
    (w_f 1, all layers, unshuffled; depth from the model config; data set from the manifest)."""
    f = run.factors
    variant = f.get("variant", "saab")
    return {
        "variant": variant,
        "w_f": float(f.get("w_f", 1.0)),
        "bias_layers": str(f.get("bias_layers", "all")),
        "shuffled": bool(f.get("shuffled", variant == "saab_shuffled")),
        "depth": f.get("depth", (run.manifest.get("model") or {}).get("num_layers",
                                                                       (run.manifest.get("model") or {}).get("n_layers"))),
        "dataset": f.get("dataset", (run.manifest.get("dataset") or {}).get("name", "unknown")),
    }


def example_deltas(runs: RunCollection, step: int | None = None, examples=None) -> pd.DataFrame:
    """Per pair x example x layer differences (variant - baseline) with the pair's factors.

    Columns: baseline_run, variant_run, seed, variant, w_f, bias_layers, shuffled, depth,
    dataset, step, example_id, layer, baseline, variant_sfm, diff.
    """
    frames = []
    for p in runs.pairs():
        d = paired_differences(p, step=step, examples=examples)
        d = d.rename(columns={"variant": "variant_sfm"})
        meta = {"baseline_run": p.baseline.run_id, "variant_run": p.variant.run_id, "seed": p.variant.seed,
                **_factor_cols(p.variant), "step": p.variant.final_step if step is None else int(step)}
        for k, v in reversed(list(meta.items())):
            d.insert(0, k, v)
        frames.append(d)
    if not frames:
        raise RoutestatsError("no baseline/variant pairs in these runs")
    return pd.concat(frames, ignore_index=True)


def paired_deltas(runs: RunCollection, step: int | None = None, examples=None) -> pd.DataFrame:
    """Per pair x layer means: baseline_sfm, variant_sfm, delta (= mean of per-example diffs),
    n_examples, max_abs_diff (largest per-example |diff|, the null check of w_f = 0), plus factors."""
    return summarise_deltas(example_deltas(runs, step, examples))


def summarise_deltas(ex: pd.DataFrame) -> pd.DataFrame:
    """:func:`paired_deltas` from an :func:`example_deltas` frame already in hand."""
    keys = ["baseline_run", "variant_run", "seed", *FACTORS, "step", "layer"]
    g = ex.groupby(keys, dropna=False, sort=False)
    out = g.agg(baseline_sfm=("baseline", "mean"), variant_sfm=("variant_sfm", "mean"), delta=("diff", "mean"),
                n_examples=("diff", "size"), max_abs_diff=("diff", lambda x: float(np.abs(x).max())))
    return out.reset_index()


REFERENCE_CONDITION = {"variant": "saab", "w_f": 1.0, "bias_layers": "all", "shuffled": False}
"""The standard SAAB condition; a factor a run does not record takes the value shown here."""


def is_reference_pair(factors) -> bool:
    """Whether a variant run's factors are the standard SAAB condition (w_f 1, all layers, not shuffled).

    >>> is_reference_pair({"variant": "saab"}), is_reference_pair({"variant": "saab", "w_f": 2})
    (True, False)
    """
    f = {**REFERENCE_CONDITION, **{k: v for k, v in dict(factors).items() if k in REFERENCE_CONDITION}}
    shuffled = f["shuffled"] if isinstance(f["shuffled"], bool) else str(f["shuffled"]).lower() == "true"
    return f["variant"] == "saab" and float(f["w_f"]) == 1.0 and f["bias_layers"] == "all" and not shuffled


def reference_rows(df: pd.DataFrame) -> pd.Series:
    """Rows of a deltas frame in the standard SAAB condition (the vectorised :func:`is_reference_pair`)."""
    return (df["variant"] == "saab") & (df["w_f"].astype(float) == 1.0) & (df["bias_layers"] == "all") & \
        (~df["shuffled"].astype(bool))


def seed_table(deltas: pd.DataFrame, lower: int = -2, upper: int = -1, rules: PatternRules = PatternRules(),
               condition=None, examples: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per-seed SFM of two layers (default penultimate and last) for both models (paper Table 3).

    ``condition`` filters the pairs (default: standard SAAB, w_f 1 on all layers, unshuffled).
    One row per data set, depth and seed. Columns: dataset, depth, seed, lower_layer, upper_layer, baseline_lower, baseline_upper, variant_lower,
    variant_upper, delta_lower, delta_upper, displacement (delta_upper - delta_lower),
    baseline_gap, variant_gap, baseline_gap_se, tie_tolerance, pattern. ``examples`` (an :func:`example_deltas`
    frame) gives each seed's baseline gap its standard error over the seed's examples, ``baseline_gap_se``, and
    the tie tolerance of the pattern rules, ``tie_tolerance`` (:meth:`PatternRules.tie`); without it the fixed
    ``tie_tol``.
    """
    d = deltas[reference_rows(deltas)] if condition is None else deltas[condition(deltas)]
    if d.empty:
        raise RoutestatsError("no pairs of the requested condition")
    rows = []
    for (dataset, depth, seed), g in d.groupby(["dataset", "depth", "seed"], sort=True, dropna=False):
        layers = sorted(g["layer"].unique())
        lo, up = layers[lower], layers[upper]
        a, b = g.set_index("layer").loc[lo], g.set_index("layer").loc[up]
        gap_b = b["baseline_sfm"] - a["baseline_sfm"]
        gap_v = b["variant_sfm"] - a["variant_sfm"]
        se = _gap_se(examples, g, lo, up)
        rows.append({
            "dataset": dataset, "depth": depth, "seed": seed, "lower_layer": lo, "upper_layer": up,
            "baseline_lower": a["baseline_sfm"], "baseline_upper": b["baseline_sfm"],
            "variant_lower": a["variant_sfm"], "variant_upper": b["variant_sfm"],
            "delta_lower": a["delta"], "delta_upper": b["delta"], "displacement": b["delta"] - a["delta"],
            "baseline_gap": gap_b, "variant_gap": gap_v, "baseline_gap_se": se, "tie_tolerance": rules.tie(se),
            "pattern": rules.label(a["delta"], b["delta"], gap_b, gap_v, f"L{up}", gap_se=se),
        })
    return pd.DataFrame(rows)


def _gap_se(examples: pd.DataFrame | None, pairs: pd.DataFrame, lo: int, up: int) -> float:
    """The standard error, over its examples, of one seed's baseline gap SFM_up − SFM_lo (the pair's examples
    present in both layers; NaN without per-example rows or with fewer than two examples)."""
    if examples is None:
        return float("nan")
    e = examples[examples["baseline_run"].isin(pairs["baseline_run"]) & examples["layer"].isin([lo, up])]
    w = e.pivot_table(index="example_id", columns="layer", values="baseline", aggfunc="first").dropna()
    if len(w) < 2 or lo not in w or up not in w:
        return float("nan")
    gap = w[up] - w[lo]
    return float(gap.std(ddof=1) / np.sqrt(len(gap)))


def _wide(d: pd.DataFrame, index: list[str]) -> pd.DataFrame:
    w = d.pivot_table(index=index, columns="layer", values="delta", aggfunc="first")
    w.columns = [f"delta_l{c}" for c in w.columns]
    return w.reset_index()


NULL_TOLERANCE = 1.2e-7
"""Largest per-example |SFM difference| of a w_f = 0 run from its baseline that passes the null check."""


def sweep_table(deltas: pd.DataFrame) -> pd.DataFrame:
    """Bias-strength sweep: per seed x w_f (all layers, unshuffled) the per-layer deltas, and
    the null check at w_f = 0: ``max_abs_diff`` = largest per-example |SFM difference| from the
    explicit baseline over all layers (the paper requires <= 1.2e-7), and ``null_check`` (pass / fail
    against :data:`NULL_TOLERANCE` for w_f = 0 rows, empty for the others)."""
    d = deltas[(deltas["variant"] == "saab") & (deltas["bias_layers"] == "all") & (~deltas["shuffled"].astype(bool))]
    if d.empty:
        raise RoutestatsError("no bias-strength pairs")
    w = _wide(d, ["seed", "w_f"])
    null = d.groupby(["seed", "w_f"])["max_abs_diff"].max().rename("max_abs_diff").reset_index()
    out = w.merge(null, on=["seed", "w_f"]).sort_values(["seed", "w_f"]).reset_index(drop=True)
    # the null check means something only where the bias is off (w_f = 0): pass / fail there, blank elsewhere
    out["null_check"] = [(f"{'pass' if m <= NULL_TOLERANCE else 'FAIL'} (max |Δ| {m:.1e})") if float(wf) == 0.0 else ""
                         for wf, m in zip(out["w_f"], out["max_abs_diff"])]
    return out


def null_check(sweep: pd.DataFrame, tolerance: float = NULL_TOLERANCE) -> dict | None:
    """The w_f = 0 null check of a :func:`sweep_table`: worst |Δ| and whether it is within ``tolerance``.

    None when the sweep holds no w_f = 0 condition (then there is nothing to check).

    >>> null_check(pd.DataFrame({"w_f": [0.0, 1.0], "max_abs_diff": [3e-8, 0.2]}))
    {'max_abs_diff': 3e-08, 'tolerance': 1.2e-07, 'passes': True}
    """
    null = sweep[sweep["w_f"] == 0]
    if null.empty:
        return None
    worst = float(null["max_abs_diff"].max())
    return {"max_abs_diff": worst, "tolerance": tolerance, "passes": worst <= tolerance}


def placement_table(deltas: pd.DataFrame) -> pd.DataFrame:
    """Layer placement: per seed x bias_layers (w_f 1, unshuffled) the per-layer deltas."""
    d = deltas[(deltas["variant"] == "saab") & (deltas["w_f"].astype(float) == 1.0) & (~deltas["shuffled"].astype(bool))]
    if d["bias_layers"].nunique() < 2:
        raise RoutestatsError("no placement variants (need more than one bias_layers level)")
    return _wide(d, ["seed", "bias_layers"]).sort_values(["seed", "bias_layers"]).reset_index(drop=True)


def shuffled_table(deltas: pd.DataFrame) -> pd.DataFrame:
    """Shuffled control: per seed the profile distances SAAB-baseline, shuffled-baseline and
    SAAB-shuffled (Euclidean over layer SFM), and both delta profiles."""
    rows = []
    for seed, g in deltas.groupby("seed"):
        ref = g[reference_rows(g)].sort_values("layer")
        sh = g[(g["variant"] == "saab_shuffled")].sort_values("layer")
        if ref.empty or sh.empty:
            continue
        base = ref["baseline_sfm"].to_numpy()
        rows.append({
            "seed": seed,
            "distance_saab_baseline": profile_distance(ref["variant_sfm"], base),
            "distance_shuffled_baseline": profile_distance(sh["variant_sfm"], base),
            "distance_saab_shuffled": profile_distance(ref["variant_sfm"], sh["variant_sfm"]),
            **{f"delta_saab_l{int(r.layer)}": r.delta for r in ref.itertuples()},
            **{f"delta_shuffled_l{int(r.layer)}": r.delta for r in sh.itertuples()},
        })
    if not rows:
        raise RoutestatsError("no seed has both a SAAB and a shuffled-control pair")
    return pd.DataFrame(rows)


def depth_table(deltas: pd.DataFrame) -> pd.DataFrame:
    """Depth: per depth x seed the last layer's baseline/variant SFM and delta, and the profile
    distance over all layers (standard SAAB condition)."""
    d = deltas[reference_rows(deltas)]
    rows = []
    for (depth, seed), g in d.groupby(["depth", "seed"]):
        g = g.sort_values("layer")
        last = g.iloc[-1]
        rows.append({"depth": depth, "seed": seed, "last_layer": int(last["layer"]),
                     "baseline_last": last["baseline_sfm"], "variant_last": last["variant_sfm"],
                     "delta_last": last["delta"],
                     "profile_distance": profile_distance(g["variant_sfm"], g["baseline_sfm"])})
    return pd.DataFrame(rows)


def dataset_table(deltas: pd.DataFrame) -> pd.DataFrame:
    """Per data set (standard SAAB): mean over seeds of each layer's baseline SFM, variant SFM
    and delta, with the number of seeds (paper Table 8)."""
    d = deltas[reference_rows(deltas)]
    g = d.groupby(["dataset", "layer"]).agg(baseline_sfm=("baseline_sfm", "mean"), variant_sfm=("variant_sfm", "mean"),
                                            delta=("delta", "mean"), n_seeds=("seed", "nunique"))
    return g.reset_index()


# ------------------------------------------------------------------ across seeds
def across_seed_tests(deltas: pd.DataFrame, condition=None, exact_max_seeds: int = 16,
                      resampling: Resampling | None = None) -> pd.DataFrame:
    """Seed-level inference on per-seed deltas, per data set, depth and layer; Holm across layers.

    Unit = seed (initialisation): each seed contributes its mean per-example delta. Reports
    the paired t-test (``scipy.stats.ttest_1samp`` on the deltas) and the two-sided sign-flip p: exact over all
    2^n sign patterns up to ``exact_max_seeds`` seeds, beyond that over the ``resampling``'s permutations of random
    patterns by the plus-one rule (``signflip_draws``: 0 exact, else the draws; a study of 17 or more seeds got no
    across-seed test at all before), with the smallest attainable sign-flip p (2 / 2^n; 1/(P + 1) beyond exact
    enumeration): with few seeds no result can reach 0.05.
    """
    r = Resampling.of(resampling)
    d = deltas[reference_rows(deltas)] if condition is None else deltas[condition(deltas)]
    frames = []
    for (dataset, depth), grp in d.groupby(["dataset", "depth"], dropna=False):
        w = grp.pivot(index="seed", columns="layer", values="delta")
        if w.isna().any().any():
            raise RoutestatsError(f"{dataset}, depth {depth}: every seed needs a delta at every layer")
        x = w.to_numpy()
        n, k = x.shape
        if n < 2:
            continue
        if n <= exact_max_seeds:
            bits = ((np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1).astype(np.uint8)
            p_sf, draws, floor = signflip_count(x, bits) / 2**n, 0, 2 / 2**n
        else:  # random patterns, the plus-one rule (the report's sign-flip test, seed as the unit)
            bits = np.random.default_rng(r.seed).integers(0, 2, size=(r.permutations, n), dtype=np.uint8)
            p_sf = (signflip_count(x, bits) + 1) / (r.permutations + 1)
            draws, floor = r.permutations, signflip_floor(n, r.permutations)[0]
        t = paired_t(x, labels=list(w.columns))
        frames.append(pd.DataFrame({
            "dataset": dataset, "depth": depth,
            "layer": list(w.columns), "n_seeds": n, "mean_delta": x.mean(axis=0), "sd_delta": x.std(axis=0, ddof=1),
            "sd_delta_low": sd_lower_bound(x), "dz": cohen_dz(x), "t": t.statistic, "df": t.df, "p_t": t.p_raw, "p_t_holm": t.p_adj,
            "ci_low_t": t.ci_low, "ci_high_t": t.ci_high,
            "p_signflip_exact": p_sf, "p_signflip_holm": holm(p_sf), "min_attainable_p": floor,
            "signflip_draws": draws,
        }))
    if not frames:
        raise RoutestatsError("across-seed inference needs at least 2 seeds in some data set and depth")
    return pd.concat(frames, ignore_index=True)


def hierarchical_bootstrap(ex_deltas: pd.DataFrame, resamples: int | None = None, seed: int | None = None,
                           confidence: float | None = None, condition=None,
                           resampling: Resampling | None = None) -> pd.DataFrame:
    """Two-stage bootstrap of the across-seed mean delta, per layer.

    Each resample draws seeds with replacement, then, independently for every drawn seed,
    that seed's examples with replacement; the statistic is the mean over drawn seeds of
    the per-seed mean delta. Assumes seeds are exchangeable draws of the initialisation and
    examples exchangeable within a seed; with few seeds the interval is too narrow (the
    seed-level resampling has only n^n distinct outcomes). One block of rows per data set and depth.
    ``resampling`` (and the keyword overrides): resamples, seed, confidence.
    """
    r = Resampling.of(resampling, resamples=resamples, seed=seed, confidence=confidence)
    resamples, seed, confidence = r.resamples, r.seed, r.confidence
    d_all = ex_deltas[reference_rows(ex_deltas)] if condition is None else ex_deltas[condition(ex_deltas)]
    rng = np.random.default_rng(seed)
    rows = []
    for (dataset, depth), d in d_all.groupby(["dataset", "depth"], dropna=False):
        if d["seed"].nunique() >= 2:  # one seed has no between-seed variation to resample
            rows += _two_stage(d, rng, resamples, seed, confidence, dataset, depth)
    if not rows:
        raise RoutestatsError("the two-stage bootstrap needs at least 2 seeds in some data set and depth")
    return pd.DataFrame(rows)


def _two_stage(d, rng, resamples, seed, confidence, dataset, depth) -> list[dict]:
    rows = []
    seeds = sorted(d["seed"].unique())
    layers = sorted(d["layer"].unique())
    per_seed = {s: d[d["seed"] == s].pivot(index="example_id", columns="layer", values="diff")[layers].to_numpy()
                for s in seeds}
    S = len(seeds)
    pick = rng.integers(0, S, size=(resamples, S))
    stats = np.zeros((resamples, len(layers)))
    for j in range(S):
        for si, s in enumerate(seeds):
            rows_b = np.flatnonzero(pick[:, j] == si)
            if rows_b.size == 0:
                continue
            x = per_seed[s]
            idx = rng.integers(0, x.shape[0], size=(rows_b.size, x.shape[0]))
            stats[rows_b] += x[idx].mean(axis=1)
    stats /= S
    lo, hi = percentile_ci(stats, confidence)
    point = np.mean([per_seed[s].mean(axis=0) for s in seeds], axis=0)
    for i, layer in enumerate(layers):
        rows.append({"dataset": dataset, "depth": depth, "layer": layer, "n_seeds": S, "mean_delta": point[i],
                     "ci_low": lo[i], "ci_high": hi[i], "resamples": resamples, "seed": seed,
                     "method": "two-stage bootstrap (seeds, then examples)"})
    return rows


def variance_components(ex_deltas: pd.DataFrame, condition=None, confidence: float | None = None) -> pd.DataFrame:
    """Random-intercept model per layer, diff ~ 1 + (1 | seed), fitted by REML.

    When every seed holds the same number of examples (the usual design: one example set), the REML
    fit has a closed form (the one-way ANOVA estimator, the between-seed variance truncated at 0):
    the mean Δ is the mean of the seed means, its standard error sd(seed means)/sqrt(k), and its
    interval uses t with k - 1 degrees of freedom (the exact small-sample reference of a balanced
    one-way design; a normal 1.96 would be far too narrow with 3 seeds). Otherwise statsmodels'
    MixedLM (REML) is fitted, its convergence recorded (``converged``; a fit that did not converge
    has no estimates: NaN), and its interval also uses t with k - 1 degrees of freedom. Columns:
    dataset, depth, layer, n_seeds, n_examples, mean_delta, se, df, ci_low, ci_high,
    var_between_seeds, var_within_seed, icc, converged, method.
    """
    from scipy import stats

    conf = Resampling().confidence if confidence is None else confidence
    d = ex_deltas[reference_rows(ex_deltas)] if condition is None else ex_deltas[condition(ex_deltas)]
    rows = []
    for (dataset, depth, layer), g in d.groupby(["dataset", "depth", "layer"], dropna=False):
        k = g["seed"].nunique()
        if k < 2:
            continue  # a random seed effect needs at least two seeds
        sizes = g.groupby("seed").size()
        fit = _balanced_reml(g, sizes) if sizes.nunique() == 1 and sizes.iloc[0] >= 2 else _mixedlm(g)
        q = stats.t.ppf(0.5 + conf / 2, k - 1)
        rows.append({"dataset": dataset, "depth": depth, "layer": layer, "n_seeds": k, "n_examples": len(g),
                     **fit, "df": k - 1, "ci_low": fit["mean_delta"] - q * fit["se"],
                     "ci_high": fit["mean_delta"] + q * fit["se"]})
    if not rows:
        raise RoutestatsError("the mixed model needs at least 2 seeds in some data set and depth")
    cols = ["dataset", "depth", "layer", "n_seeds", "n_examples", "mean_delta", "se", "df", "ci_low", "ci_high",
            "var_between_seeds", "var_within_seed", "icc", "converged", "method"]
    return pd.DataFrame(rows)[cols]


def _balanced_reml(g: pd.DataFrame, sizes: pd.Series) -> dict:
    """The closed-form REML fit of a balanced one-way random-intercept model (n examples per seed)."""
    n = int(sizes.iloc[0])
    k = len(sizes)
    means = g.groupby("seed")["diff"].mean()
    msb = n * float(means.var(ddof=1))
    msw = float(g.groupby("seed")["diff"].var(ddof=1).mean())
    between = max(0.0, (msb - msw) / n)
    # with the between-seed variance at its boundary 0, REML pools every example into one variance
    within = msw if between > 0 else float(g["diff"].var(ddof=1))
    return {"mean_delta": float(means.mean()), "se": float(np.sqrt(msb / (n * k))), "var_between_seeds": between,
            "var_within_seed": within, "icc": between / (between + within) if between + within > 0 else np.nan,
            "converged": True, "method": "balanced one-way REML (closed form), t with k − 1 df"}


def _mixedlm(g: pd.DataFrame) -> dict:
    import warnings

    import statsmodels.formula.api as smf

    nan = {"mean_delta": np.nan, "se": np.nan, "var_between_seeds": np.nan, "var_within_seed": np.nan, "icc": np.nan}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fit = smf.mixedlm("diff ~ 1", g, groups=g["seed"]).fit(reml=True)
        except (np.linalg.LinAlgError, ValueError) as exc:
            return {**nan, "converged": False, "method": f"MixedLM REML failed: {exc}"}
    converged = bool(fit.converged) and not any("converge" in str(w.message).lower() for w in caught)
    if not converged:
        return {**nan, "converged": False, "method": "MixedLM REML did not converge: no estimates"}
    between, within = float(fit.cov_re.iloc[0, 0]), float(fit.scale)
    return {"mean_delta": float(fit.fe_params["Intercept"]), "se": float(fit.bse_fe["Intercept"]),
            "var_between_seeds": between, "var_within_seed": within,
            "icc": between / (between + within) if between + within > 0 else np.nan, "converged": True,
            "method": "MixedLM REML (unbalanced), t with k − 1 df"}
