"""Length analyses (METHODS 3.4-3.6, 3.9): data-set length tables, length association of the
paired SFM change, equal-count length bins, common length range, and exact-length
standardisation of a contrast between two data sets (or any two run pairs).

Examples
--------
>>> import pandas as pd
>>> t = length_table(pd.DataFrame({"split": ["val"] * 4, "length": [10, 20, 30, 256]}), cap=256)
>>> t[["split", "n", "mean", "median", "saturation_count"]].values.tolist()
[['val', 4, 79.0, 25.0, 1]]
>>> equal_count_bins([1, 2, 3, 4, 5, 6, 7, 8], [0, 1, 2, 3, 4, 5, 6, 7]).tolist()
[1, 1, 2, 2, 3, 3, 4, 4]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from routestats.studies.effects import paired_differences
from routestats.errors import RoutestatsError
from routestats.rundir.collection import RunPair
from routestats.settings import Resampling
from routestats.stats.draws import bootstrap_count_chunks
from routestats.stats.inference import percentile_ci
from routestats.stats.spearman import spearman_ci

__all__ = [
    "length_table",
    "length_association",
    "censoring",
    "at_cap",
    "equal_count_bins",
    "length_bins",
    "length_adjusted_effects",
    "linear_length_fit",
    "common_length_range",
    "StandardisedContrast",
    "length_standardised_contrast",
]


def length_table(lengths: pd.DataFrame, cap: int) -> pd.DataFrame:
    """Per split: n, mean, population SD, quantiles (linear, position (n-1)p), IQR, min, max,
    saturation count and rate (length == cap). ``exact_truncation_rate`` is NA: lengths before
    truncation are not stored (METHODS 3.9).

    ``lengths`` has columns ``split`` and ``length``; lengths must be integers in 1..cap.
    """
    if not {"split", "length"} <= set(lengths.columns):
        raise RoutestatsError("lengths need columns 'split' and 'length'")
    x = lengths["length"].to_numpy()
    if (x <= 0).any() or (x > cap).any():
        bad = x[(x <= 0) | (x > cap)][0]
        raise RoutestatsError(f"length {bad} is outside 1..{cap}")
    rows = []
    for split, g in lengths.groupby("split", sort=False):
        v = g["length"].to_numpy(dtype=np.float64)
        q = np.quantile(v, [0.25, 0.5, 0.75, 0.90, 0.95])
        sat = int((v == cap).sum())
        rows.append({"split": split, "n": len(v), "mean": v.mean(), "sd_population": v.std(ddof=0), "p25": q[0],
                     "median": q[1], "p75": q[2], "iqr": q[2] - q[0], "p90": q[3], "p95": q[4], "min": v.min(),
                     "max": v.max(), "cap": cap, "saturation_count": sat, "saturation_rate": sat / len(v),
                     "exact_truncation_rate": pd.NA})
    return pd.DataFrame(rows)


def _wide_diffs(p: RunPair, step=None, examples=None, capped: str = "include") -> tuple[pd.DataFrame, list[int]]:
    """Per example: the paired difference of every layer, the evaluated length and whether the example
    was cut at the cap (``capped``: its true length is unknown, longer than evaluated). With
    ``capped="exclude"`` the cut examples are left out; ``attrs["n_capped"]`` counts them either way."""
    if capped not in ("include", "exclude"):
        raise RoutestatsError(f"capped must be include or exclude, got {capped!r}")
    d = paired_differences(p, step=step, examples=examples)
    w = d.pivot(index="example_id", columns="layer", values="diff")
    ex = p.baseline.examples(["example_id", "length", "source_index", "prepared_length", "cap"]).set_index("example_id")
    w = w.join(ex, how="left").reset_index()
    w["capped"] = at_cap(w["length"].to_numpy(), w["prepared_length"].to_numpy(), w["cap"].to_numpy())
    n_capped = int(w["capped"].sum())
    if capped == "exclude":
        w = w[~w["capped"]].reset_index(drop=True)
    w.attrs["n_capped"] = n_capped
    layers = sorted(d["layer"].unique())
    return w, layers


def censoring(p: RunPair, examples=None) -> dict:
    """How many of the selected examples were cut at the evaluation cap (their true length is unknown):
    ``{"n": examples, "n_capped": cut, "cap": the cap}``."""
    from routestats.metrics.examples import select_examples

    ex = p.baseline.examples(["example_id", "length", "prepared_length", "cap"])
    ids = select_examples(p.baseline, examples)
    if ids is not None:
        ex = ex[ex["example_id"].isin(ids)]
    return {"n": len(ex), "n_capped": int(at_cap(ex["length"], ex["prepared_length"], ex["cap"]).sum()),
            "cap": int(ex["cap"].max())}


def at_cap(length, prepared_length, cap) -> np.ndarray:
    """Examples whose evaluated length is censored: cut at the cap, or as long as the cap (a prepared
    record longer than the preset's maximum is stored at that maximum, so reaching the cap does not
    tell a cut record from one of exactly that length; both have a true length of at least the cap).

    >>> at_cap([20, 64, 64], [20, 64, 90], [64, 64, 64]).tolist()
    [False, True, True]
    """
    length, prepared, cap = (np.asarray(x) for x in (length, prepared_length, cap))
    return (length >= cap) | (prepared > cap)


def length_association(p: RunPair, resamples: int | None = None, seed: int | None = None, step=None, examples=None,
                       resampling: Resampling | None = None, capped: str = "include") -> pd.DataFrame:
    """Per layer Spearman rho between evaluated length and the per-example SFM change (METHODS 3.4).

    rho from ``scipy.stats.spearmanr``; p by permutation of the lengths against the changes
    (:func:`~routestats.stats.spearman.spearman_permutation_p`, the resampling's sign-flip draw count; ``p_t``
    keeps the t approximation the SAAB paper's Table 12A uses, which rejects a true null too often with few
    examples and tied lengths); percentile bootstrap CI with the reference stream (``default_rng(seed + 17)``);
    Holm over layers. Columns: layer, n, rho, p_raw, p_adj, ci_low, ci_high, resamples_kept, resamples, seed,
    p_t, permutations, n_capped (examples cut at the cap: left out with ``capped="exclude"``, whose lengths are
    censored), capped.
    """
    r = Resampling.of(resampling, length_resamples=resamples, seed=seed)
    resamples, seed = r.length_resamples, r.seed
    w, layers = _wide_diffs(p, step, examples, capped)
    if len(w) < 3 or w["length"].nunique() < 2:
        raise RoutestatsError(f"{len(w)} examples below the cap ({w.attrs['n_capped']} were cut at it): too few for a "
                              "length association")
    res = spearman_ci(w["length"].to_numpy(dtype=float), w[layers].to_numpy(), resamples=resamples, seed=seed,
                      labels=layers, permutations=r.permutations)
    return res.to_frame().rename(columns={"label": "layer"}).assign(n_capped=w.attrs["n_capped"], capped=capped)


def equal_count_bins(lengths, source_index, n_bins: int = 4) -> np.ndarray:
    """Equal-count bins by rank: sort by (length, source_index); the row at rank r of n gets
    bin min(n_bins, floor(n_bins * r / n) + 1) (METHODS 3.5)."""
    x = np.asarray(lengths)
    order = np.lexsort((np.asarray(source_index), x))
    rank = np.empty(len(x), dtype=np.int64)
    rank[order] = np.arange(len(x))
    return np.minimum(n_bins, (n_bins * rank) // len(x) + 1)


def length_bins(p: RunPair, n_bins: int = 4, step=None, examples=None) -> pd.DataFrame:
    """Per equal-count length bin and layer: count, min/max length, mean and median change, the
    number of examples cut at the evaluation cap (``at_cap``) and ``saturated`` (every example of the
    bin is at the cap: its lengths say nothing about the true length).

    ``attrs["cut_points"]`` records numpy quantile cut points (descriptive only)."""
    w, layers = _wide_diffs(p, step, examples)
    w["bin"] = equal_count_bins(w["length"], w["source_index"], n_bins)
    cap = int(p.baseline.examples(["cap"])["cap"].max())
    rows = []
    for (b, g) in w.groupby("bin"):
        at_cap = int((g["length"] >= cap).sum())
        for layer in layers:
            rows.append({"bin": int(b), "layer": layer, "count": len(g), "min_length": int(g["length"].min()),
                         "max_length": int(g["length"].max()), "mean_delta": g[layer].mean(),
                         "median_delta": g[layer].median(), "at_cap": at_cap,
                         "saturated": bool(at_cap == len(g))})
    out = pd.DataFrame(rows)
    out.attrs["cut_points"] = np.quantile(w["length"], np.arange(1, n_bins) / n_bins).tolist()
    return out


def linear_length_fit(x, D, reference: float, resamples: int | None = None, seed: int | None = None,
                      confidence: float | None = None, resampling: Resampling | None = None) -> pd.DataFrame:
    """Per column of ``D`` (examples x layers) the least-squares line d = a + b (x - reference),
    with percentile bootstrap intervals (resampling examples with the shared mode's draws,
    :func:`routestats.stats.draws.bootstrap_count_chunks`: the same resamples as the paired
    tables of these examples, for every column). Returns one row per column: ``delta`` (the raw mean),
    ``delta_at_reference`` (a), ``ci_low``/``ci_high``, ``slope_per_10`` (10 b) and its interval;
    resamples whose lengths are all equal (no slope) are dropped and counted in ``resamples_kept``.

    >>> f = linear_length_fit([10, 20, 30, 40], [[1.0], [2.0], [3.0], [4.0]], reference=25.0, resamples=50)
    >>> f[["delta", "delta_at_reference", "slope_per_10"]].round(12).values.tolist()
    [[2.5, 2.5, 1.0]]
    """
    r = Resampling.of(resampling, resamples=resamples, seed=seed, confidence=confidence)
    resamples, seed, confidence = r.resamples, r.seed, r.confidence
    x = np.asarray(x, dtype=float)
    D = np.asarray(D, dtype=float).reshape(len(x), -1)
    n = len(x)
    if n < 3 or np.ptp(x) == 0:
        raise RoutestatsError("a length fit needs at least 3 examples of different lengths")

    xc = x - x.mean()  # centred once: the weighted sums below stay well conditioned
    sxx = (xc * xc).sum()
    b = (xc @ D) / sxx
    a = D.mean(axis=0) + b * (reference - x.mean())
    xd = xc[:, None] * D
    boot_a, boot_b = [], []
    for cnt in bootstrap_count_chunks(n, resamples, seed):  # resample r weights example i by its count
        w = cnt.astype(np.float64)
        mx = (w @ xc) / n
        md = (w @ D) / n
        with np.errstate(divide="ignore", invalid="ignore"):
            vb = (w @ (xc * xc)) / n - mx * mx
            bb = ((w @ xd) / n - mx[:, None] * md) / vb[:, None]
        bb[vb <= 1e-12 * max(sxx / n, 1e-300)] = np.nan  # every drawn example of one length: no slope
        boot_b.append(bb)
        boot_a.append(md + bb * (reference - x.mean() - mx)[:, None])
    boot_a, boot_b = np.concatenate(boot_a), np.concatenate(boot_b)
    keep = np.isfinite(boot_b).all(axis=1)
    a_lo, a_hi = percentile_ci(boot_a[keep], confidence)
    b_lo, b_hi = percentile_ci(boot_b[keep], confidence)
    return pd.DataFrame({"delta": D.mean(axis=0), "delta_at_reference": a, "ci_low": a_lo, "ci_high": a_hi,
                         "slope_per_10": 10 * b, "slope_ci_low": 10 * b_lo, "slope_ci_high": 10 * b_hi,
                         "resamples_kept": int(keep.sum()), "resamples": resamples, "seed": seed})


def length_adjusted_effects(p: RunPair, resamples: int | None = None, seed: int | None = None,
                            confidence: float | None = None, step=None, examples=None, reference: float | None = None,
                            resampling: Resampling | None = None, capped: str = "include") -> pd.DataFrame:
    """The paired SFM change at a reference length (default: the median evaluated length), next to
    the raw mean, and how it changes per 10 tokens, from a per-layer least-squares line of the
    per-example change on length (:func:`linear_length_fit`). Descriptive and within one model: it
    removes the linear part of the length association, not confounding by what length stands for.

    Columns: layer, n, reference_length, delta, delta_at_reference, ci_low, ci_high, slope_per_10,
    slope_ci_low, slope_ci_high, resamples_kept, resamples, seed.
    """
    r = Resampling.of(resampling, resamples=resamples, seed=seed, confidence=confidence)
    resamples, seed, confidence = r.resamples, r.seed, r.confidence
    w, layers = _wide_diffs(p, step, examples, capped)
    x = w["length"].to_numpy(dtype=float)
    if len(x) < 3 or np.unique(x).size < 2:
        raise RoutestatsError(f"{len(x)} examples below the cap ({w.attrs['n_capped']} were cut at it): too few for "
                              "a length-adjusted estimate")
    ref = float(np.median(x)) if reference is None else float(reference)
    out = linear_length_fit(x, w[layers].to_numpy(), ref, resamples=resamples, seed=seed, confidence=confidence)
    out.insert(0, "reference_length", ref)
    out.insert(0, "n", len(x))
    out.insert(0, "layer", layers)
    return out.assign(n_capped=w.attrs["n_capped"], capped=capped)


def common_length_range(pairs: dict, step=None, examples=None) -> pd.DataFrame:
    """Common support of several pairs' lengths (lower = max of minima, upper = min of maxima)
    and each pair's mean change per layer inside it. Columns: name, layer, lower, upper, n, mean_delta."""
    wides = {name: _wide_diffs(p, step, examples) for name, p in pairs.items()}
    lower = max(w["length"].min() for w, _ in wides.values())
    upper = min(w["length"].max() for w, _ in wides.values())
    if lower > upper:
        raise RoutestatsError(f"the length ranges do not overlap (lower {lower} > upper {upper})")
    rows = []
    for name, (w, layers) in wides.items():
        inside = w[(w["length"] >= lower) & (w["length"] <= upper)]
        for layer in layers:
            rows.append({"name": name, "layer": layer, "lower": int(lower), "upper": int(upper), "n": len(inside),
                         "mean_delta": inside[layer].mean()})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class StandardisedContrast:
    """Exact-length standardisation of B - A (METHODS 3.6)."""

    names: tuple[str, str]
    exact: pd.DataFrame  # per layer: standardised deltas, contrast, CI
    sensitivity: pd.DataFrame  # per band width and layer: point estimates
    lower: int
    upper: int
    shared_strata: int
    overlap_target_mass: int
    standardised_length: dict
    resamples: int
    seed: int
    mode: str

    def to_frame(self) -> pd.DataFrame:
        return self.exact


def _strata(x, lower, w):
    return np.floor((x - lower) / w).astype(np.int64)


def length_standardised_contrast(a: RunPair, b: RunPair, names=("A", "B"), band_widths=(1, 2, 5, 10),
                                 resamples: int | None = None, seed: int | None = None, mode: str = "vectorised",
                                 confidence: float | None = None, examples=None, step=None,
                                 resampling: Resampling | None = None) -> StandardisedContrast:
    """Standardise each pair's per-layer change over shared lengths and contrast them (B - A).

    Support = [max of minima, min of maxima]; strata = floor((length - lower) / w); shared
    strata get weight w_k = min(n_A,k, n_B,k); W = sum of weights (the overlap target mass).
    Standardised delta = sum_k w_k mean(delta | k) / W. The contrast's CI (exact lengths,
    w = 1 only) is a stratified bootstrap with the weights held fixed: ``mode="reference"``
    draws resample by resample, stratum by stratum (A then B), as the reference script does;
    ``mode="vectorised"`` draws stratum by stratum for all resamples at once (same
    distribution, different stream, much faster). Band widths after the first are point
    estimates only. Errors when the lengths share no stratum.
    """
    r = Resampling.of(resampling, resamples=resamples, seed=seed, confidence=confidence)
    resamples, seed, confidence = r.resamples, r.seed, r.confidence
    if band_widths[0] != 1:
        raise RoutestatsError("the first band width must be 1 (exact lengths)")
    if mode not in ("vectorised", "reference"):
        raise RoutestatsError("mode must be 'vectorised' or 'reference'")
    wa, wb, layers, lower, upper = _common_support(a, b, names, step, examples)
    sens, exact = [], None
    for w in band_widths:
        ka, kb = _strata(wa["length"].to_numpy(), lower, w), _strata(wb["length"].to_numpy(), lower, w)
        shared = np.intersect1d(ka, kb)
        if shared.size == 0:
            raise RoutestatsError(f"no shared length stratum at band width {w}")
        na = np.array([(ka == k).sum() for k in shared])
        nb = np.array([(kb == k).sum() for k in shared])
        wk = np.minimum(na, nb)
        W = wk.sum()
        xa, xb = wa[layers].to_numpy(), wb[layers].to_numpy()
        ma = np.stack([xa[ka == k].mean(axis=0) for k in shared])
        mb = np.stack([xb[kb == k].mean(axis=0) for k in shared])
        sa, sb = (wk[:, None] * ma).sum(0) / W, (wk[:, None] * mb).sum(0) / W
        for i, layer in enumerate(layers):
            sens.append({"band_width": w, "layer": layer, "shared_strata": len(shared), "overlap_target_mass": int(W),
                         f"standardised_delta_{names[0]}": sa[i], f"standardised_delta_{names[1]}": sb[i],
                         "contrast": sb[i] - sa[i]})
        if w == 1:
            len_a = (wk * np.array([wa["length"].to_numpy()[ka == k].mean() for k in shared])).sum() / W
            len_b = (wk * np.array([wb["length"].to_numpy()[kb == k].mean() for k in shared])).sum() / W
            groups_a = [xa[ka == k] for k in shared]
            groups_b = [xb[kb == k] for k in shared]
            boot = _stratified_bootstrap(groups_a, groups_b, wk, resamples, seed, mode)
            lo, hi = percentile_ci(boot, confidence)
            exact = pd.DataFrame({"layer": layers, f"standardised_delta_{names[0]}": sa,
                                  f"standardised_delta_{names[1]}": sb, "contrast": sb - sa, "ci_low": lo, "ci_high": hi,
                                  "shared_strata": len(shared), "overlap_target_mass": int(W)})
            info = (len(shared), int(W), {names[0]: float(len_a), names[1]: float(len_b)})
    return StandardisedContrast(tuple(names), exact, pd.DataFrame(sens), lower, upper, info[0], info[1], info[2],
                                int(resamples), int(seed), mode)


def _common_support(a: RunPair, b: RunPair, names, step, examples):
    """Both pairs' per-example differences restricted to the shared length range [lower, upper]."""
    wa, layers = _wide_diffs(a, step, examples)
    wb, layers_b = _wide_diffs(b, step, examples)
    if layers != layers_b:
        raise RoutestatsError(f"the pairs have different layers ({layers} vs {layers_b})")
    lower = int(max(wa["length"].min(), wb["length"].min()))
    upper = int(min(wa["length"].max(), wb["length"].max()))
    if lower > upper:
        raise RoutestatsError(f"no length overlap between {names[0]} and {names[1]} (lower {lower} > upper {upper})")
    inside = lambda w: w[(w["length"] >= lower) & (w["length"] <= upper)]  # noqa: E731
    return inside(wa), inside(wb), layers, lower, upper


def _stratified_bootstrap(groups_a, groups_b, wk, resamples, seed, mode) -> np.ndarray:
    """Bootstrap replicates (resamples x layers) of sum_k w_k (mean_B* - mean_A*) / W."""
    rng = np.random.default_rng(seed)
    W = wk.sum()
    L = groups_a[0].shape[1]
    if mode == "reference":
        out = np.empty((resamples, L))
        for r in range(resamples):
            acc = np.zeros(L)
            for ga, gb, w in zip(groups_a, groups_b, wk):
                ia = rng.integers(0, len(ga), size=len(ga))
                ib = rng.integers(0, len(gb), size=len(gb))
                acc += w * (gb[ib].mean(axis=0) - ga[ia].mean(axis=0))
            out[r] = acc / W
        return out
    out = np.zeros((resamples, L))
    for ga, gb, w in zip(groups_a, groups_b, wk):
        ia = rng.integers(0, len(ga), size=(resamples, len(ga)))
        ib = rng.integers(0, len(gb), size=(resamples, len(gb)))
        out += w * (gb[ib].mean(axis=1) - ga[ia].mean(axis=1))
    return out / W
