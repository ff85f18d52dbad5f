"""Paired effects of a run pair per layer: metrics -> differences -> the inference engine.

This composes :mod:`routestats.metrics` and :mod:`routestats.stats` into the paper's
Table 2 / 9 / 10 layouts. Differences are always variant minus baseline, from unrounded
per-example values.

Columns of :func:`paired_effects`
---------------------------------
metric, layer, n, excluded, baseline_mean, variant_mean, mean_diff, median_diff, sd_diff, sd_diff_low (a one-sided
97.5 % lower bound on the SD: :func:`routestats.stats.spread.sd_lower_bound`),
ci_low, ci_high, dz, p_raw, p_holm, mean_opportunity and mean_opportunity_analysed (adjusted only), resamples,
permutations, seed, mode, confidence, baseline_run, variant_run, step.

Examples
--------
>>> import tempfile
>>> from routestats.rundir.read import load_run
>>> from routestats.rundir.collection import pair
>>> from routestats.rundir.synthetic import synthetic_pair
>>> b, v = synthetic_pair(tempfile.mkdtemp(), seed=0, n_examples=12)
>>> t = paired_effects(pair(load_run(b), load_run(v)), resamples=500, permutations=500)
>>> t[["layer", "n"]].values.tolist()
[[0, 12], [1, 12], [2, 12], [3, 12]]
>>> bool((t["mean_diff"] > 0).iloc[3])
True
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from routestats.errors import RoutestatsError
from routestats.metrics.definitions import metric as registered_metric
from routestats.metrics.routing import adjusted_sfm, metric_values, sfm
from routestats.rundir.collection import RunPair
from routestats.settings import Resampling
from routestats.stats.inference import paired_inference, paired_inferences

__all__ = ["paired_differences", "paired_effects", "effects_family", "highest_layers", "highest_layer_families"]


def paired_differences(p: RunPair, metric: str = "sfm", adjusted: bool = False, step: int | None = None,
                       examples=None, trivial: str | None = None, keys: str = "all",
                       weighting: str = "attention") -> pd.DataFrame:
    """Per example x layer values of both runs and their difference (variant - baseline).

    Columns: example_id, layer, baseline, variant, diff, and for ``adjusted=True`` also
    opportunity. With ``adjusted=True`` examples whose adjusted value is undefined
    (O_e = 1, one visible field) are dropped from every layer; ``attrs["excluded"]``
    holds their count. A layer undefined for every example of a run (all its heads pruned, under
    norm weighting) is left out, the others kept; ``attrs["left_out_layers"]`` lists it. ``trivial``, ``keys`` and ``weighting`` (attention, norm, rollout): see
    :func:`routestats.metrics.routing.sfm`.
    """
    if not isinstance(p, RunPair):
        raise TypeError("paired_differences needs a RunPair (use routestats.pair(baseline, variant))")
    # computed once per pair and arguments (the report's sections ask for the same frame several times); each
    # caller gets its own copy
    key = (metric, bool(adjusted), step, examples if examples is None or isinstance(examples, str)
           else tuple(int(e) for e in examples), trivial, keys, weighting)
    memo = p.__dict__.setdefault("_paired_differences", {})
    if key not in memo:
        memo[key] = _paired_differences(p, metric, adjusted, step, examples, trivial, keys, weighting)
    return memo[key].copy()


def _paired_differences(p: RunPair, metric, adjusted, step, examples, trivial, keys, weighting) -> pd.DataFrame:
    registered_metric(metric)  # any metric of the registry (routestats.metrics.definitions)
    if adjusted and metric != "sfm":
        raise RoutestatsError("opportunity adjustment applies to SFM only")
    if weighting != "attention" and (metric != "sfm" or adjusted):
        raise RoutestatsError("norm-weighted and rollout attention are analysed as raw SFM only")
    if adjusted:
        long = adjusted_sfm(p, step, examples, trivial, keys)
        value = "sfm_adj"
    elif metric == "sfm":
        long, value = sfm(p, step, examples, trivial, keys, weighting), metric
    else:
        long, value = metric_values(p, metric, step, examples, trivial), metric
    _check_same_layers(p, long)
    wide = _wide_by_layer(long, value)
    if adjusted:  # each example's opportunity, as the baseline's rows give it (a left join: NaN where it has none)
        opp = long[long["role"] == "baseline"][["example_id", "opportunity"]].drop_duplicates("example_id")
        wide["opportunity"] = opp.set_index("example_id")["opportunity"].reindex(wide["example_id"]).to_numpy()
    # a layer undefined for every example of a run (every head pruned: no norm-weighted attention) is left out
    b_all = wide["baseline"].isna().groupby(wide["layer"], sort=True).all()
    v_all = wide["variant"].isna().groupby(wide["layer"], sort=True).all()
    left_out = [int(x) for x in b_all.index[(b_all | v_all).to_numpy()]] if len(wide) else []
    if left_out and len(left_out) < wide["layer"].nunique():
        wide = wide[~wide["layer"].isin(left_out)]
    else:
        left_out = []
    # an example undefined in any layer (O_e = 1, or no non-trivial query) leaves every layer
    bad = set(wide.loc[wide["baseline"].isna() | wide["variant"].isna(), "example_id"])
    excluded = len(bad)
    wide = wide[~wide["example_id"].isin(bad)].reset_index(drop=True)
    wide["diff"] = wide["variant"] - wide["baseline"]
    wide.attrs["excluded"] = excluded  # keep attrs small: pandas deep-copies them on every operation
    wide.attrs["left_out_layers"] = left_out
    return wide


def _wide_by_layer(long: pd.DataFrame, value: str) -> pd.DataFrame:
    """Both runs' values side by side: one row per layer x example (every example of either run in every layer,
    NaN where a run has none), sorted by layer then example; columns example_id, layer, baseline, variant.
    What ``pivot_table(index=["example_id", "layer"], columns="role", dropna=False)`` gives, sorted, without its
    grouping (a third of a 2 x 64 pair's paired differences): ``long`` holds one value per run, example and layer.
    """
    ex, ly = np.unique(long["example_id"].to_numpy()), np.unique(long["layer"].to_numpy())
    col = long[value].to_numpy()
    dtype = col.dtype if col.dtype.kind == "f" else np.float64  # pivot_table's mean of one value: that value
    cell = np.searchsorted(ly, long["layer"].to_numpy()) * len(ex) + np.searchsorted(ex, long["example_id"].to_numpy())
    role = long["role"].to_numpy()
    out = {"example_id": np.tile(ex, len(ly)), "layer": np.repeat(ly, len(ex))}
    for r in ("baseline", "variant"):
        mine = role == r
        if np.unique(cell[mine]).size != int(mine.sum()):
            raise RoutestatsError(f"the {r} holds two values for one example and layer; a run's table has one")
        out[r] = np.full(len(ly) * len(ex), np.nan, dtype=dtype)
        out[r][cell[mine]] = col[mine]
    return pd.DataFrame(out)


def _check_same_layers(p: RunPair, long: pd.DataFrame) -> None:
    """Both runs hold the same layers (a pair of one architecture, both stored whole or with one --layers)."""
    have = {role: sorted(set(long.loc[long["role"] == role, "layer"].tolist())) for role in ("baseline", "variant")}
    if have["baseline"] != have["variant"]:
        only = sorted(set(have["baseline"]) ^ set(have["variant"]))
        where = "baseline" if only[0] in have["baseline"] else "variant"
        span = lambda ls: f"{len(ls)} layer(s), {ls[0]}-{ls[-1]}" if ls else "no layers"  # noqa: E731
        raise RoutestatsError(
            f"cannot compare {p.variant.run_id} with {p.baseline.run_id}: layer {only[0]} is stored in the {where} "
            f"only (baseline: {span(have['baseline'])}; variant: {span(have['variant'])}); a pair needs the same "
            "layers in both runs")


def paired_effects(
    p: RunPair,
    metric: str = "sfm",
    adjusted: bool = False,
    step: int | None = None,
    resamples: int | None = None,
    permutations: int | None = None,
    seed: int | None = None,
    mode: str | None = None,
    confidence: float | None = None,
    examples=None,
    trivial: str | None = None,
    keys: str = "all",
    weighting: str = "attention",
    resampling: Resampling | None = None,
) -> pd.DataFrame:
    """Per-layer paired effects with bootstrap CI, sign-flip p, Holm over layers and d_z.

    Parameters
    ----------
    p : RunPair
        Baseline and variant (see :func:`routestats.pair`).
    metric : str
        A registered metric (:mod:`routestats.metrics.definitions`): ``sfm``, ``entropy``, ...
    adjusted : bool
        Opportunity-adjusted SFM (METHODS 2.5): examples with O_e = 1 are excluded from
        all layers and counted in ``excluded``; ``mean_opportunity`` averages O_e over all
        examples, excluded ones included, as the reference reports it; ``mean_opportunity_analysed`` over
        exactly the examples analysed.
    resampling, resamples, permutations, seed, mode, confidence
        The random procedures as one :class:`~routestats.settings.Resampling` (default: its
        defaults) and keyword overrides; passed to :func:`routestats.stats.paired_inference`.
    examples : None, "all", "primary", "length_sample", "test_sample" or a list of ids
        The examples analysed (see :func:`routestats.metrics.select_examples`).
    weighting : {"attention", "norm", "rollout"}
        SFM of the attention weights, of norm-weighted attention (``norm_effects``) or of the
        rolled-out attention (``rollout_effects``; METHODS III 3.5-3.6); the last two need matrices.
    """
    diffs = paired_differences(p, metric, adjusted, step, examples, trivial, keys, weighting)
    if diffs.empty:
        raise RoutestatsError(_why_no_differences(diffs, metric, adjusted))
    d, layers = effects_family(diffs)
    res = paired_inference(d, resampling=resampling, resamples=resamples, permutations=permutations, seed=seed,
                           mode=mode, confidence=confidence, labels=layers)
    out = res.to_frame().rename(columns={"label": "layer", "p_adj": "p_holm", "p_adj_floor": "p_holm_floor"})
    means = diffs.groupby("layer")[["baseline", "variant"]].mean()
    out.insert(0, "metric", metric + ("_adj" if adjusted else "") + ("" if weighting == "attention" else f"_{weighting}"))
    out.insert(3, "excluded", diffs.attrs["excluded"])
    out.insert(4, "baseline_mean", means.loc[layers, "baseline"].to_numpy())
    out.insert(5, "variant_mean", means.loc[layers, "variant"].to_numpy())
    if adjusted:
        out["mean_opportunity"] = _mean_opportunity(p, examples)
        out["mean_opportunity_analysed"] = _mean_opportunity(p, sorted(int(x) for x in diffs["example_id"].unique()))
    out["baseline_run"] = p.baseline.run_id
    out["variant_run"] = p.variant.run_id
    out["step"] = p.baseline.final_step if step is None else int(step)
    return out.drop(columns=["adj_method", "method"])


def _why_no_differences(diffs: pd.DataFrame, metric: str, adjusted: bool) -> str:
    """The one line that says why a selection gives no paired differences."""
    if adjusted:
        return (f"every one of the {diffs.attrs.get('excluded', 0)} examples has a single visible field (O_e = 1), "
                "so the opportunity-adjusted SFM is undefined")
    if diffs.attrs.get("excluded", 0):
        return (f"no paired differences: {metric} is undefined in every one of the {diffs.attrs['excluded']} examples "
                "selected (no non-trivial query in a named field in some layer: are their fields empty?)")
    return "no paired differences: the selection holds no examples"


def effects_family(diffs: pd.DataFrame) -> tuple[np.ndarray, list]:
    """The (examples x layers) matrix of a :func:`paired_differences` frame's differences, one Holm family, and
    its layers (ascending): what :func:`paired_effects` tests.

    >>> f = pd.DataFrame({"example_id": [0, 1, 0, 1], "layer": [0, 0, 1, 1], "diff": [0.1, 0.2, 0.3, 0.4]})
    >>> d, layers = effects_family(f)
    >>> d.tolist(), [int(x) for x in layers]
    ([[0.1, 0.3], [0.2, 0.4]], [0, 1])
    """
    layers = sorted(diffs["layer"].unique())
    if diffs.groupby("layer").size().nunique() != 1:
        raise RoutestatsError("layers hold different example counts; cannot form one paired family")
    return np.column_stack([diffs.loc[diffs["layer"] == layer, "diff"].to_numpy() for layer in layers]), layers


def _mean_opportunity(p: RunPair, examples) -> float:
    """Mean O_e over every selected example, excluded ones included (as the reference reports it); examples
    without a named position have no O_e and are not in the mean."""
    from routestats.metrics.examples import select_examples
    from routestats.metrics.routing import opportunity

    o = opportunity(p.baseline)
    ids = select_examples(p.baseline, examples)
    if ids is not None:
        o = o[o["example_id"].isin(ids)]
    return float(o["opportunity"].mean(skipna=True))


def highest_layers(layers: pd.DataFrame, per_example: pd.DataFrame | None,
                   resampling: Resampling | None = None) -> pd.DataFrame:
    """The highest-SFM layer of each model and whether it is distinguishable as the highest.

    The top layer is chosen by the data, so comparing it with its runner-up alone overstates the gap (among
    equal layers the sample's top is above the next by construction). It is the highest only when it is
    above *every* other layer: each per-example difference top − other has a two-sided sign-flip p, and
    ``p_adj`` is the largest of them times the number of other layers (Bonferroni), so that among tied
    layers a top is declared with probability at most alpha. The runner-up (the next by mean) is shown with
    the paired percentile interval of its difference.

    ``layers``: role, layer, sfm (the layer-profile table); ``per_example``: example_id, layer, baseline,
    variant (per-example SFM). Columns: role, layer, sfm, layers (how many the model has), runner_up, runner_up_sfm, difference (mean over
    examples of top − runner-up), ci_low, ci_high, p_adj, others, n; the runner-up columns are empty
    without per-example values or with one layer.

    >>> lay = pd.DataFrame({"role": ["variant"] * 3, "layer": [0, 1, 2], "sfm": [0.5, 0.9, 0.6]})
    >>> ex = pd.DataFrame({"example_id": [0, 1, 2, 3] * 3, "layer": [0] * 4 + [1] * 4 + [2] * 4,
    ...                    "variant": [0.5] * 4 + [0.9, 0.8, 1.0, 0.9] + [0.6, 0.5, 0.7, 0.6]})
    >>> highest_layers(lay, ex, Resampling(resamples=200, permutations=10))[["role", "layer", "runner_up", "difference"]]
          role  layer  runner_up  difference
    0  variant      1          2         0.3
    """
    rows, tests = _highest_tests(layers, per_example)
    # the models' tests in one pass over their shared draws (each bitwise its own call)
    results = paired_inferences([d for _, _, d, _ in tests], resampling=resampling,
                                labels=[others for *_, others in tests]) if tests else []
    for (row, t, d, others), res in zip(tests, results):
        res = res.to_frame().set_index("label")
        b = others[0]
        row.update(runner_up=b, runner_up_sfm=float(t["sfm"].iloc[1]), difference=float(res.loc[b, "mean_diff"]),
                   ci_low=float(res.loc[b, "ci_low"]), ci_high=float(res.loc[b, "ci_high"]),
                   p_adj=min(1.0, float(res["p_raw"].max()) * len(others)),
                   above_all=bool((res["mean_diff"] > 0).all()), others=len(others), n=len(d))
    # the columns are there (empty) when no model has a runner-up: one layer, or no per-example values
    return pd.DataFrame(rows).reindex(columns=list(dict.fromkeys(
        ["role", "layer", "sfm", "layers", "runner_up", "runner_up_sfm", "difference", "ci_low", "ci_high", "p_adj",
         "above_all", "others", "n", *(k for r in rows for k in r)])))


def _highest_tests(layers: pd.DataFrame, per_example: pd.DataFrame | None) -> tuple[list, list]:
    """Each model's row of :func:`highest_layers` and its test: (row, the model's layers by SFM, the differences
    top − every other layer (examples x others), the other layers)."""
    rows, tests = [], []
    for role, t in layers.groupby("role", sort=False):
        t = t.sort_values("sfm", ascending=False, kind="stable")
        a = int(t["layer"].iloc[0])
        row = {"role": role, "layer": a, "sfm": float(t["sfm"].iloc[0]), "layers": len(t)}
        rows.append(row)
        if per_example is not None and len(t) > 1 and role in per_example:
            w = per_example.pivot(index="example_id", columns="layer", values=role).dropna()
            others = [int(x) for x in t["layer"].iloc[1:]]
            if not w.empty and {a, *others} <= set(w.columns):  # else no example defines every layer: no test
                tests.append((row, t, w[[a]].to_numpy() - w[others].to_numpy(), others))
    return rows, tests


def highest_layer_families(layers: pd.DataFrame, per_example: pd.DataFrame | None) -> list[np.ndarray]:
    """The difference families :func:`highest_layers` tests (one a model: top − every other layer), in its order.

    >>> lay = pd.DataFrame({"role": ["variant"] * 2, "layer": [0, 1], "sfm": [0.5, 0.9]})
    >>> ex = pd.DataFrame({"example_id": [0, 1, 0, 1], "layer": [0, 0, 1, 1], "variant": [0.5, 0.4, 0.9, 0.8]})
    >>> [f.round(12).tolist() for f in highest_layer_families(lay, ex)]
    [[[0.4], [0.4]]]
    """
    return [d for _, _, d, _ in _highest_tests(layers, per_example)[1]]
