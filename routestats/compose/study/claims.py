"""The claims of the study report, one builder per section, each over the frames that section holds
(seed as the unit), plus the scope claims of the :class:`~routestats.compose.study.context.StudyContext`.
:data:`CLAIM_ORDER` ranks them for the headline and findings."""

from __future__ import annotations

import numpy as np
import pandas as pd

from routestats.compose.claims import (
    ci_text, direction_claim, floor_text, layers_phrase, missed_change_claims, p_after, rows_of, scale_decimals, signed,
    span, span_r,
)
from routestats.claim import Check, Claim
from routestats.report import fmt_num

__all__ = ["CLAIM_ORDER", "across_seed_claims", "pattern_claims", "convergence_claims", "shared_example_claims",
           "null_check_claims", "scope_claims"]

CLAIM_ORDER = ("no_across_seed", "rose", "fell", "mixed", "no_evidence", "same_sign", "signflip_floor", "missed_change",
               "direct_learned", "parts_scope", "counts", "patterns", "seed_layer", "mixed_not_converged",
               "shared_examples", "examples_nested", "null_check")


def across_seed_claims(across: pd.DataFrame, alpha: float, conf: str) -> list[Claim]:
    """The answer across seeds (which layers rose or fell, seed as the unit), its sign pattern, the
    sign-flip floor, and each layer's row in words."""
    k = int(across["n_seeds"].max())
    lead = f"Across {k} seeds (seed as the unit; paired t, Holm over layers)"
    out = [direction_claim(across.rename(columns={"mean_delta": "d"}), lead, est="d", p="p_t_holm", lo="ci_low_t",
                           hi="ci_high_t", alpha=alpha, metric="SFM", table="across_seeds", conf=conf,
                           family=f"Holm over {len(across)} layers", brief=f"across {k} seeds (seed as the unit)")]
    d = across["mean_delta"]
    sig = (across["p_t_holm"] < alpha)
    if len(across):  # printed where its checks hold: one sign in every layer, some layer short of alpha
        out.append(Claim("same_sign", f"Every layer's mean Δ has the same sign ({span(d)}); with {k} seeds, "
                         f"{int(sig.sum())} of {len(across)} layers {'reaches' if int(sig.sum()) == 1 else 'reach'} p_Holm < {alpha:g}.", "headline",
                         "across_seeds", rows_of(across),
                         requires=(Check("one sign", "mean_delta > 0", every="same"),
                                   Check("some layer does not reach alpha", f"not (p_t_holm < {alpha!r})", every="any")),
                         evidence=across))
    floor = float(across["min_attainable_p"].min())
    if across["dataset"].nunique() == 1:  # the sentence names layers: one data set's
        out += missed_change_claims(across, k, alpha, 0.0, table="across_seeds", p="p_t_holm", lo="ci_low_t",
                                    hi="ci_high_t", sd="sd_delta_low", unit="seeds")  # the t-test has no floor
    # built at any floor: its check, not an if beside it, decides whether it prints
    if len(across):
        out.append(Claim("signflip_floor", f"With {k} seeds the exact sign-flip test cannot reach p < {alpha:g} "
                         f"(smallest attainable p = {floor_text(floor, floor)}); the t-test leans on normality of the per-seed "
                         "Δ.", "headline", "across_seeds",
                         requires=(Check("min attainable p > alpha", f"min_attainable_p > {alpha!r}"),),
                         evidence=across))
    for i in range(len(across)):
        r = across.iloc[i]
        where = f"{r['dataset']}, " if across["dataset"].nunique() > 1 else ""
        out.append(Claim("seed_layer", f"{where}Layer {int(r['layer'])}: mean Δ over {int(r['n_seeds'])} seeds "
                         f"{signed(r['mean_delta'])} (SD {fmt_num(r['sd_delta'], scale_decimals(r['sd_delta']))}), "
                         f"per-layer {conf} t interval {ci_text(r['ci_low_t'], r['ci_high_t'])}, paired t p_Holm "
                         f"{p_after(r['p_t_holm'])}, "
                         + ("exact" if r.get("signflip_draws", 0) == 0 else f"{int(r['signflip_draws']):,}-draw")
                         + f" sign-flip p_Holm {p_after(r['p_signflip_holm'])} (smallest "
                         f"attainable {floor_text(r['min_attainable_p'], r['min_attainable_p'])}).", "finding",
                         "across_seeds", (int(r["layer"]),),
                         requires=(Check("the row's numbers are defined", "mean_delta == mean_delta and "
                                         "ci_low_t == ci_low_t and ci_high_t == ci_high_t"),),
                         evidence=across.iloc[[i]]))
    return out


def pattern_claims(seeds: pd.DataFrame) -> list[Claim]:
    """How many seeds carry each pattern label of the seed table."""
    counts = seeds["pattern"].value_counts()
    n = int(counts.sum())
    return [Claim("patterns", "Seed-table patterns (the documented rules of routestats.settings.PatternRules): "
                  + "; ".join(f"“{k}” in {v} of {n} seeds" for k, v in counts.items()) + ".", "finding", "seeds",
                  requires=(Check("every seed has a label", "pattern == pattern"),
                            Check("the counts cover every seed", f"rows == {n}", on="design")), evidence=seeds)]


def convergence_claims(vc: pd.DataFrame) -> list[Claim]:
    """Where the mixed model did not converge (its estimates there are not quoted)."""
    if "converged" not in vc:
        return []
    bad = vc[~vc["converged"].astype(bool)]
    # built whether or not every fit converged: its check, not an if beside it, decides whether it prints
    return [Claim("mixed_not_converged", f"The mixed model did not converge in {layers_phrase(bad['layer'])}: "
                  "its estimates there are not quoted.", "finding", "variance_components", rows_of(bad),
                  requires=(Check("some fit did not converge", "converged == False", every="any"),),
                  evidence=vc.loc[bad.index])]


SHARED_R_ALPHA = 0.05  # the family share of the crossed-seeds correlation finding (Bonferroni over its layers)
SMALL_R = 0.1  # below this, a correlation of the per-example Δ across seeds matters little to the intervals


def shared_r_interval(shared: pd.DataFrame, alpha: float = SHARED_R_ALPHA) -> pd.DataFrame:
    """``shared`` with ``r_low`` and ``r_high``: a Fisher-z interval for each layer's mean Pearson r, at level
    1 - alpha / layers (Bonferroni over the table's rows), with the standard error of one pair of seeds,
    1 / sqrt(n - 3): the mean over pairs of seeds (which share seeds) varies at most that much, so the interval is
    conservative. A sample r whose interval includes 0 is not evidence of correlation.

    >>> t = shared_r_interval(pd.DataFrame({"layer": [0], "n_examples": [40], "mean_r": [0.13]}))
    >>> round(float(t["r_low"].iloc[0]), 3), round(float(t["r_high"].iloc[0]), 3)   # tanh(z +- 1.96 / sqrt(37))
    (-0.189, 0.424)
    """
    from scipy.stats import norm

    q = norm.ppf(1 - alpha / (2 * max(1, len(shared))))
    z = np.arctanh(shared["mean_r"].clip(-0.999999, 0.999999).to_numpy(float))
    se = 1 / np.sqrt(np.maximum(shared["n_examples"].to_numpy(float) - 3, 1))
    return shared.assign(r_low=np.tanh(z - q * se), r_high=np.tanh(z + q * se))


def shared_example_claims(shared: pd.DataFrame) -> list[Claim]:
    """Seeds evaluated on the same examples: crossed factors, and what that does to the example-level intervals.

    Three wordings are built, each gated by its own check on the Fisher-z intervals (:func:`shared_r_interval`):
    the per-example Δ correlates across seeds only where some layer's interval on r excludes 0, hardly correlates
    only where every interval lies below :data:`SMALL_R`, and is otherwise not shown either way. No ``if`` of
    the builder chooses: the checks do, and exactly one of them can hold."""
    t = shared_r_interval(shared)
    r, n_layers = t["mean_r"], len(t)
    how = f"Fisher-z intervals, Bonferroni over the {n_layers} layer{'s' if n_layers > 1 else ''}"
    excluding = t.loc[t["r_low"] > 0, "layer"]
    wordings = (
        (f"; the per-example Δ correlates across seeds (mean Pearson r {span_r(r)} over layers; the {how}, exclude 0 "
         f"in {layers_phrase(excluding) if len(excluding) else 'no layer'}), so those two understate the uncertainty "
         "from the choice of examples", Check("some layer's interval on r excludes 0", "r_low > 0", every="any")),
        (f"; the per-example Δ hardly correlates across seeds (mean Pearson r {span_r(r)} over layers; the {how}, lie "
         f"below {SMALL_R:g}), so this matters little here",
         Check(f"every interval on r lies below {SMALL_R:g}", f"r_high < {SMALL_R!r}")),
        (f"; whether the per-example Δ correlates across seeds is not shown (mean Pearson r {span_r(r)} over layers; "
         f"every one of the {how}, includes 0), so those two may understate the uncertainty from the choice of "
         "examples", Check(f"every interval on r includes 0, one reaching above {SMALL_R:g}",
                           "r_low <= 0 and r_high >= 0", every="all")),
    )
    wide = Check(f"some interval on r reaches {SMALL_R:g}", f"r_high >= {SMALL_R!r}", every="any")
    return [Claim("shared_examples", f"All seeds were evaluated on the same {int(shared['n_examples'].max())} "
                  "examples, so seeds and examples are crossed, while the two-stage bootstrap and the mixed model "
                  "treat each seed's examples as its own" + said + ". The paired t across seeds does not depend on it.",
                  "finding", "shared_examples", rows_of(shared),
                  requires=(Check("r is finite", "mean_r == mean_r", every="any"), check,
                            *((wide,) if i == 2 else ())),
                  because=("every seed holds the same examples: ids and content hashes",), evidence=t)
            for i, (said, check) in enumerate(wordings)]


def null_check_claims(check: dict | None) -> list[Claim]:
    """The w_f = 0 null check of the sweep, when the tree holds that condition."""
    if check is None:
        return []
    return [Claim("null_check", f"Null check w_f = 0 against the baseline: largest |ΔSFM| = "
                  f"{check['max_abs_diff']:.2e} ({'passes' if check['passes'] else 'FAILS'} the "
                  f"{check['tolerance']:.1e} criterion).", "finding", "sweep",
                  requires=(Check("the largest difference is defined", "max_abs_diff == max_abs_diff", on="design"),),
                  because=("a w_f = 0 run exists",), design={"max_abs_diff": float(check["max_abs_diff"])})]


def scope_claims(*, n_runs: int, n_pairs: int, seeds: list, n_ref_seeds: int, has_parts: bool) -> tuple[Claim, ...]:
    """What the study as a whole licenses: whether across-seed inference is possible, what its parts measure."""
    # each is built whatever the study holds; its check, not an if beside it, decides whether it prints
    out = [Claim("no_across_seed", f"{n_pairs} pairs over seeds {', '.join(map(str, seeds))}, but fewer than "
                         "two seeds of the standard SAAB pair: no across-seed inference is possible, so every result "
                         "below is within one initialisation.", "headline",
                         requires=(Check("fewer than 2 seeds", "n_ref_seeds < 2", on="design"),),
                         design={"n_ref_seeds": n_ref_seeds}),
           Claim("parts_scope", "The per-pair parts after this report are within one seed each: they measure "
                 "precision within one model, not variation between initialisations.", "headline",
                 requires=(Check("the report has per-pair parts", "has_parts", on="design"),),
                 design={"has_parts": has_parts})]
    # true of every study report (a tree without runs is refused before any report): a because, not a check
    out.append(Claim("counts", f"{n_runs} runs, seeds {', '.join(map(str, seeds))}.", "finding",
                     because=("counted from the tree's runs",), design={"n_runs": n_runs, "n_seeds": len(seeds)}))
    return tuple(out)
