"""The pair report's length section: the evaluated lengths (SAAB paper Table 11), the association of the
per-example change with length (Table 12A), the length-adjusted change and equal-count length bins, with the
examples cut at the evaluation cap said how they were treated."""

from __future__ import annotations

from routestats.compose.pair.claims import censoring_claims, length_claims
from routestats.compose.pair.context import PairContext
from routestats.compose.pair.inputs import running_mean
from routestats.report import Column, Section, Table, pct, section
from routestats.studies.effects import paired_differences
from routestats.studies.lengths import length_adjusted_effects, length_association, length_bins, length_table

__all__ = ["length_tables", "lengths_section"]


def _censored(frame) -> str:
    """What a length table did with the examples cut at the cap."""
    k = int(frame["n_capped"].iloc[0])
    if not k:
        return "no example reached the cap"
    if frame["capped"].iloc[0] == "exclude":
        return f"the {k} examples at the cap are left out (their true lengths are unknown: at least the cap)"
    return f"the {k} examples at the cap are included at the cap length (censored)"


def length_tables(ctx: PairContext, f: dict) -> tuple[Table, ...]:
    """The four shown length tables (SAAB paper Tables 11 and 12A, the length-adjusted Δ, the bins)."""
    s, conf = ctx.settings, pct(ctx.settings.confidence)
    ref = f["length_adjusted"]["reference_length"].iloc[0]
    return (
        ctx.table("lengths", f["lengths"], "Evaluated token lengths (as in the SAAB paper's Table 11): mean, population SD, "
                  "linear-interpolation quantiles and saturation at the evaluation cap.",
                  (Column("Split", "split", "text"), Column("n", "n", "int"), Column("Mean", "mean", "num", 1),
                   Column("SD", "sd_population", "num", 1), Column("Median", "median", "num", 1),
                   Column("IQR", "iqr", "num", 1), Column("P90", "p90", "num", 1), Column("P95", "p95", "num", 1),
                   Column("Cap", "cap", "int"), Column("Saturated", "saturation_count", "int"),
                   Column("Rate", "saturation_rate", "num", 3))),
        ctx.table("length_association", f["length_association"], f"Length association (as in the SAAB paper's Table 12A): Spearman ρ "
                  f"between evaluated length and the per-example Δ SFM, per-layer percentile bootstrap CI "
                  f"({s.length_resamples:,} resamples), p the larger of a permutation p ({s.permutations:,} pairings of "
                  f"the lengths) and the p of Δ's least-squares slope on length with an HC2 standard error on "
                  f"Satterthwaite's df from each third of the lengths' own spread (Welch's test where length takes "
                  f"two values; it holds where Δ's spread, not its mean, changes with length; the CSV's "
                  f"p_permutation and p_robust; p is 1 where ρ and the slope differ in sign; the paper's t "
                  f"approximation is p_t), Holm over layers; "
                  f"{_censored(f['length_association'])}. "
                  "An association within one model, not an effect of length.",
                  (Column("Layer", "layer", "int"), Column("n", "n", "int"), Column("ρ", "rho"),
                   Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("p (raw)", "p_raw", "p"),
                   Column("p (Holm)", "p_adj", "p"))),
        ctx.table("length_adjusted", f["length_adjusted"], f"Length-adjusted Δ SFM: the raw mean change next to the "
                  f"change at the median length ({ref:g} tokens) and its change per 10 tokens, from a per-layer "
                  f"least-squares line of the per-example Δ on length ({int(f['length_adjusted']['n'].iloc[0])} "
                  f"examples; {_censored(f['length_adjusted'])}; {conf} percentile bootstrap, {s.resamples:,} "
                  "resamples). Descriptive, within one model: it removes the linear part of the length association "
                  "only.",
                  (Column("Layer", "layer", "int"), Column("n", "n", "int"), Column("Raw Δ", "delta"),
                   Column(f"Δ at {ref:g} tokens", "delta_at_reference"),
                   Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("Δ per 10 tokens", "slope_per_10"),
                   Column(f"{conf} CI ", ("slope_ci_low", "slope_ci_high"), "ci"))),
        ctx.table("length_bins", f["length_bins"], "Equal-count length quartile bins (by rank of length, then source "
                  "index): mean and median Δ SFM per layer; 'At cap' counts examples cut at the evaluation cap (a bin "
                  "made only of them is saturated: its true lengths are unknown).",
                  (Column("Bin", "bin", "int"), Column("Layer", "layer", "int"), Column("n", "count", "int"),
                   Column("Lengths", ("min_length", "max_length"), "range"), Column("At cap", "at_cap", "int"),
                   Column("Mean Δ", "mean_delta"), Column("Median Δ", "median_delta"))))


@section("lengths", "Lengths")
def lengths_section(ctx: PairContext) -> Section | None:
    p, s = ctx.pair, ctx.settings
    ex, c, _ = ctx.length_inputs
    if ex["length"].nunique() < 3 or len(ex) < 8:
        if not c["n_capped"]:
            return None
        return Section(skipped=f"Not computed: {len(ex)} examples with {ex['length'].nunique()} "
                       "distinct lengths are too few for the length analyses (they need 8 examples and 3 lengths).",
                       claims=tuple(censoring_claims(c, left_out=False, table="")))
    ctx.say("length analyses")
    kw = dict(step=ctx.step, examples=s.length_examples)
    if s.capped_examples == "exclude" and c["n"] - c["n_capped"] < 8:
        return Section(skipped=(
            f"Not computed: {c['n_capped']} of {c['n']} examples reached the {c['cap']}-token cap, so their true "
            f"lengths are unknown; the {c['n'] - c['n_capped']} examples below the cap are too few for the length "
            "analyses (capped_examples=include would use every example, those at the cap at the cap length)."),
            claims=tuple(censoring_claims(c, left_out=False, table="")))
    frames = {"lengths": length_table(ex[["split", "length"]], cap=int(ex["cap"].max())),
              "length_association": length_association(p, resampling=s.resampling, capped=s.capped_examples, **kw),
              "length_adjusted": length_adjusted_effects(p, resampling=s.resampling, capped=s.capped_examples, **kw),
              "length_bins": length_bins(p, **kw)}
    per_ex = paired_differences(p, trivial=s.trivial_queries, **kw)[["example_id", "layer", "diff"]]
    per_ex = running_mean(per_ex.merge(ex[["example_id", "length"]], on="example_id"))
    assoc = frames["length_association"]
    left_out = bool(len(assoc)) and assoc["capped"].iloc[0] == "exclude"
    return Section(tables=length_tables(ctx, frames),
                   figures=(ctx.figure("lengths", "lengths", examples=per_ex),),
                   claims=tuple(censoring_claims(c, left_out)
                                + length_claims(assoc, frames["length_adjusted"], ctx.family_alpha,
                                                len(ctx.headline_families), frames["length_bins"])))
