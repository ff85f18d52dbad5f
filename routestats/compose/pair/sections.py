"""The sections of the pair report: one function ``(ctx) -> Section | None`` each, over one
:class:`~routestats.compose.pair.context.PairContext` (None: the input holds nothing for it).

:func:`pair_sections` lists the report, in order; a paired section per registered metric
(:func:`routestats.metrics.definitions.paired_metrics`) sits after the SFM effects. A new section
is a function here and an entry in that list (see docs/architecture.md).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from routestats.errors import RoutestatsError
from routestats.metrics.definitions import RoutingMetric, paired_metrics
from routestats.metrics.passes import head_pass
from routestats.metrics.routing import field_to_field, head_sfm, mass_split
from routestats.compose.claims import direct_learned_claim, layers_phrase, profile_claims
from routestats.compose.pair.claims import (
    adjusted_claims, distance_claims, early_claims, effects_claims, shape_claims, learned_sink_claims, sink_claims,
    unnamed_claims,
)
from routestats.compose.pair.lengths import lengths_section
from routestats.report import Column, Section, Table, pct
from routestats.rundir import schema as S
from routestats.stats.profile import layer_contrasts, profile_distance_ci, profile_shape
from routestats.studies.effects import highest_layers
from routestats.report import section
from routestats.compose.pair.context import PairContext
from routestats.compose.pair.inputs import curves, performance, size_on_disk
from routestats.studies.training import gradient_checkpoint_summary, gradient_ratios, trajectory
from routestats.studies.word_map import word_map

__all__ = ["pair_sections", "effects_columns", "register_section", "unregister_section"]


def effects_columns(ctx: PairContext, label: str, raw_p: bool = True) -> tuple[Column, ...]:
    conf = pct(ctx.settings.confidence)
    return (Column("Layer", "layer", "int"), Column(f"{label} baseline", "baseline_mean"),
            Column(f"{label} variant", "variant_mean"), Column("Δ", "mean_diff"),
            Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("d_z", "dz", "num", 2),
            *((Column("p (raw)", "p_raw", "p", floor="p_floor"),) if raw_p else ()),
            Column("p (Holm)", "p_holm", "p", floor="p_holm_floor"), Column("n", "n", "int"))


def _procedure(ctx: PairContext) -> str:
    s = ctx.settings
    return (f"mean difference, {pct(s.confidence)} percentile bootstrap CI ({s.resamples:,} resamples; per layer, not "
            f"adjusted for multiplicity), d_z, and two-sided sign-flip p ({s.permutations:,} draws) Holm-adjusted over "
            "layers")


@section("performance", "Task performance")
def performance_section(ctx: PairContext) -> Section:
    if ctx.pretrained:
        return Section(skipped="Pretrained models evaluated as they are: this "
                       "analysis trained nothing, so there is no training loss or task accuracy to show.")
    t = ctx.table("performance", performance(ctx.pair), "Task performance (masked structure modelling).",
                  (Column("Model", "role", "text"), Column("Run", "run_id", "text"), Column("Steps", "steps", "int"),
                   Column("Final train loss", "final_train_loss", "num", 4), Column("Eval loss", "eval_loss", "num", 4),
                   Column("Eval accuracy", "eval_accuracy", "num", 4)))
    c = curves(ctx.pair)
    return Section(tables=(t,),
                   figures=(ctx.figure("training", "training_curves", curves=c),) if c is not None else ())


@section("profile", "Layer profile")
def profile_section(ctx: PairContext) -> Section:
    when = "of the pretrained model as evaluated" if ctx.pretrained else f"at step {ctx.step}"
    t = ctx.table("layers", ctx.layers, f"Same-field attention mass (SFM) and entropy (nats) per layer {when}, mean "
                  f"over {ctx.n_examples} examples; the highest SFM of each model in bold.",
                  (Column("Model", "role", "text"), Column("Layer", "layer", "int"), Column("SFM", "sfm"),
                   Column("Entropy", "entropy"), Column("Examples", "n_examples", "int")),
                  bold_max=("sfm",), group_by="role")
    conf = pct(ctx.settings.confidence)
    top = highest_layers(ctx.layers, ctx.diffs, ctx.settings.resampling)
    h = ctx.table("highest_layer", top, f"Is the highest-SFM layer of each model above every other layer? The "
                  f"mean per-example difference from its runner-up with a paired {conf} percentile bootstrap CI "
                  f"({ctx.settings.resamples:,} resamples), and the largest two-sided sign-flip p of its differences "
                  "from each other layer, Bonferroni over those layers (the top is chosen by the data, so the "
                  "runner-up's interval alone would overstate the gap).",
                  (Column("Model", "role", "text"), Column("Top layer", "layer", "int"), Column("SFM", "sfm"),
                   Column("Runner-up", "runner_up", "int"), Column("Runner-up SFM", "runner_up_sfm"),
                   Column("Difference", "difference"), Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"),
                   Column("p (Bonferroni)", "p_adj", "p"), Column("n", "n", "int")))
    return Section(tables=(t, h),
                   figures=(ctx.figure("profile", "profile", layers=ctx.layers, effects=ctx.effects()),),
                   claims=tuple(profile_claims(top, ctx.settings.alpha, conf)))


@section("effects", "Paired SFM effects")
def effects_section(ctx: PairContext) -> Section:
    t = ctx.table("effects", ctx.effects(), f"Paired SFM effects (variant − baseline) per layer: {_procedure(ctx)}.",
                  effects_columns(ctx, "SFM"))
    pairs = ctx.diffs[["example_id", "layer", "baseline", "variant", "diff"]]
    return Section(tables=(t,),
                   figures=(ctx.figure("paired_examples", "paired_dots", pairs=pairs),),
                   text="Each line is one example: its SFM in the baseline (left) and the variant (right); black: the "
                        "layer means.",
                   claims=tuple(effects_claims(t.frame, n_examples=ctx.n_examples, pretrained=ctx.pretrained,
                                               alpha=ctx.family_alpha, confidence=ctx.settings.confidence,
                                               permutations=ctx.settings.permutations,
                                               families=len(ctx.headline_families))))


def metric_section(m: RoutingMetric):
    """The paired section of a registered metric other than SFM (table ``<name>_effects``)."""
    title = f"Paired {m.label} effects"

    @section(m.name, title)
    def build(ctx: PairContext) -> Section:
        label = m.label[:1].upper() + m.label[1:]
        conf = pct(ctx.settings.confidence)
        what = "" if m.name == "entropy" else f"; {m.label}: {m.description}"  # entropy's is in the methods
        caption = (f"Paired {m.label} effects ({m.unit + '; ' if m.unit else ''}variant − baseline{what}), same "
                   "procedures as the SFM table.")
        t = ctx.table(m.table, ctx.effects(m.name), caption,
                      (Column("Layer", "layer", "int"), Column(f"{label} baseline", "baseline_mean"),
                       Column(f"{label} variant", "variant_mean"), Column("Δ", "mean_diff"),
                       Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("d_z", "dz", "num", 2),
                       Column("p (Holm)", "p_holm", "p")))
        return Section(tables=(t,))

    return build


@section("adjusted", "Opportunity-adjusted SFM")
def adjusted_section(ctx: PairContext) -> Section:
    conf = pct(ctx.settings.confidence)
    outside = float(mass_split(ctx.pair, ctx.step, ctx.settings.examples, ctx.settings.trivial_queries)
                    ["unnamed_mass"].max())
    t = ctx.table("adjusted", ctx.effects(adjusted=True),
                  "Opportunity-adjusted SFM, (SFM − O_e)/(1 − O_e): 0 = uniform over valid keys, 1 = only same-field "
                  "keys. Examples with one visible field (O_e = 1) are excluded from every layer."
                  + (" Attention on keys outside the named fields counts in neither SFM nor O_e, so values below 0 "
                     "(even below −1) mean much of it sits there; keys=named renormalises SFM over the named keys."
                     if outside > 0.01 else ""),
                  (Column("Layer", "layer", "int"), Column("n", "n", "int"), Column("Excluded", "excluded", "int"),
                   Column("Mean O_e", "mean_opportunity"), Column("Adj. baseline", "baseline_mean"),
                   Column("Adj. variant", "variant_mean"), Column("Δ adj.", "mean_diff"),
                   Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("p (Holm)", "p_holm", "p")))
    return Section(tables=(t,), claims=tuple(adjusted_claims(t.frame, int(ctx.effects()["excluded"].max()))))


@section("fields", "Field-to-field attention")
def fields_section(ctx: PairContext) -> Section:
    s = ctx.settings
    ctx.say("field-to-field")
    f2f = ctx.per_role(field_to_field, ctx.step, s.missing_fields, s.examples, s.trivial_queries)
    f2f = ctx.with_difference(f2f, ["layer", "source", "destination", "source_name", "destination_name"], "mass")
    return Section(tables=(Table("field_to_field", f2f),),
                   figures=(ctx.figure("field_to_field", "field_heatmaps", field_to_field=f2f),),
                   text="Mean attention mass from queries of the source field (rows) to keys of the destination field "
                        "(columns), per layer; the difference panel is variant − baseline." + _unmeasured(f2f))


def _unmeasured(f2f) -> str:
    """The caption's note on source fields with no counted query (every one trivial and excluded)."""
    gone = f2f[f2f["mass"].isna()] if "mass" in f2f else f2f.iloc[:0]
    if not len(gone):
        return ""
    names = ", ".join(dict.fromkeys(map(str, gone["source_name"])))
    return (f" Queries of {names} are excluded where every key they can see lies in their own field (trivial "
            "queries, SFM 1 whatever the model does): those rows are not measured, shown as – (hatched in the "
            "figure), not 0.")


@section("masses", "Mass outside the named fields")
def masses_section(ctx: PairContext) -> Section:
    ctx.say("mass outside the named fields")
    m = mass_split(ctx.pair, ctx.step, ctx.settings.examples, ctx.settings.trivial_queries)
    um = m["unnamed_mass"].to_numpy(dtype=float)
    outside = float(np.nanmax(um)) if np.isfinite(um).any() else float("nan")  # undefined: never "U = 0"
    claims = tuple(unnamed_claims(m) + sink_claims(m, ctx.first_key_fields, ctx.n_examples) + learned_sink_claims(m))
    sinks = "sink_mass" in m and float(np.nanmax(m["sink_mass"].to_numpy(), initial=0.0)) > 0
    if outside <= 0.01 and not ctx.pretrained:
        return Section(tables=(Table("masses", m),),
                       skipped="All attention lies on named keys (U = 0 in every layer), so SFM over all keys and "
                               "over the named keys are the same.", claims=claims)
    t = ctx.table("masses", m, "Where each query's attention goes, per layer (mean over valid queries, heads and "
                  "examples): same-field (S), other named fields (C) and keys outside the named fields (U: special "
                  "tokens, separators, unnamed positions; S + C + U = 1 for softmax heads"
                  + ("; with learned attention sinks, S + C + U + Sink = 1, Sink being the mass the sinks take, outside "
                     "the sequence" if sinks else "") + "), the first key's mass (the attention-sink diagnostic) and SFM "
                  "renormalised over the named keys, S / (1 − U).",
                  (Column("Model", "role", "text"), Column("Layer", "layer", "int"), Column("S", "sfm"),
                   Column("C", "cross_mass"), Column("U", "unnamed_mass"),
                   *((Column("Sink", "sink_mass"),) if sinks else ()), Column("First key", "first_mass"),
                   Column("SFM named", "sfm_named"), Column("Examples", "n_examples", "int")))
    return Section(tables=(t,), figures=(ctx.figure("masses", "mass_split", masses=m),),
                   text=(f"Up to {100 * outside:.0f}% of a layer's attention lies on keys outside the named fields "
                         "(special tokens, separators, the first token); SFM counts none of it as same-field."
                         if outside == outside else "The mass outside the named fields is undefined in every layer "
                         "(no measured query)."),
                   claims=claims)


@section("shape", "Does the change differ across layers?")
def shape_section(ctx: PairContext) -> Section | None:
    s, D = ctx.settings, ctx.D
    if D.shape[1] < 2 or D.shape[0] < 2:
        return None
    ctx.say("profile shape")
    conf = pct(s.confidence)
    shape = profile_shape(D.to_numpy(), resampling=s.resampling)
    contrasts = layer_contrasts(D.to_numpy(), list(D.columns), resampling=s.resampling)
    distance = profile_distance_ci(D.to_numpy(), resampling=s.resampling)
    draws = "exact over all sign vectors" if bool(shape["exact"].iloc[0]) else f"{s.permutations:,} draws"
    return Section(tables=(
        ctx.table("profile_shape", shape, f"Does the change differ between layers? H0: the same shift in every layer. "
                  f"Sign-flip test on each example's centred Δ profile (T = Σ_l mean(c_l)², one sign per example; "
                  f"{draws}) and Hotelling's T² on the successive layer differences (F test; needs n > layers − 1).",
                  (Column("Test", "test", "text"), Column("Statistic", "statistic", "sig", 4),
                   Column("df1", "df1", "int"), Column("df2", "df2", "int"), Column("p", "p", "p"),
                   Column("n", "n", "int"))),
        ctx.table("layer_contrasts", contrasts, f"Pairwise layer contrasts of the paired SFM change, Δ_b − Δ_a per "
                  f"example: mean, per-contrast {conf} percentile bootstrap CI ({s.resamples:,} resamples), d_z and sign-flip p, Holm "
                  "over all contrasts.",
                  (Column("Contrast", "contrast", "text"), Column("Mean", "mean_diff"),
                   Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("d_z", "dz", "num", 2),
                   Column("p (raw)", "p_raw", "p"), Column("p (Holm)", "p_holm", "p"), Column("n", "n", "int")),
                  **_contrast_page(contrasts)),
        ctx.table("profile_distance", distance, f"Profile distance ‖(Δ_1, …, Δ_L)‖₂ between the two layer-SFM profiles "
                  f"with a {conf} percentile bootstrap CI over examples ({s.resamples:,} resamples).",
                  (Column("Distance", "profile_distance", "num", 4), Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"),
                   Column("n", "n", "int"), Column("Layers", "layers", "int")))),
        claims=tuple(shape_claims(shape, contrasts, ctx.family_alpha, conf) + distance_claims(distance, conf)))


PAGE_CONTRASTS = 15  # more pairwise contrasts than this: the page shows the adjacent ones and the largest
LARGEST_CONTRASTS = 10


def _contrast_page(contrasts: pd.DataFrame) -> dict:
    """Which contrasts the page shows when there are many (L(L − 1)/2: 435 at 30 layers): every adjacent
    pair of layers and the :data:`LARGEST_CONTRASTS` largest |mean|; CSV and LaTeX keep all of them.

    >>> c = pd.DataFrame({"layer_a": [0, 0, 1], "layer_b": [1, 2, 2], "mean_diff": [0.1, -0.5, 0.2]})
    >>> _contrast_page(c)
    {}
    """
    if len(contrasts) <= PAGE_CONTRASTS:
        return {}
    adjacent = set(np.flatnonzero((contrasts["layer_b"] - contrasts["layer_a"]).to_numpy() == 1).tolist())
    largest = contrasts["mean_diff"].abs().to_numpy()
    order = [i for i in np.argsort(-largest, kind="stable").tolist() if i not in adjacent][:LARGEST_CONTRASTS]
    rows = tuple(sorted(adjacent | set(order)))
    return {"page_rows": rows,
            "page_note": f"The page shows the {len(adjacent)} contrasts of adjacent layers and the {len(order)} largest "
                         f"|mean| of the others: {len(rows)} of {len(contrasts)}; tables/layer_contrasts.csv and .tex "
                         "hold all of them (Holm runs over all)."}


FLOW_TITLE = "Routing beyond the weights: norm-weighted and rollout SFM"


@section("flow", FLOW_TITLE)
def flow_section(ctx: PairContext) -> Section:
    s, step, p = ctx.settings, ctx.step, ctx.pair
    have = all(S.FORM_MATRICES in r.attention_forms(step) for r in (p.baseline, p.variant))
    mb = sum(size_on_disk(r.path / S.attention_file(step, S.FORM_MATRICES)) for r in (p.baseline, p.variant)) / 1e6 \
        if have else 0.0
    if s.flow == "off":
        return Section(skipped="Not computed (flow = off).")
    if not have:
        return Section(skipped=f"Rollout and norm-weighted attention need full attention matrices; "
                       f"step {step} stores per-query reductions only.")
    if s.flow == "auto" and mb > s.flow_max_mb:
        return Section(skipped=f"Not computed: the two runs' attention matrices at step {step} are "
                       f"{mb:,.0f} MB, read whole for these measures (more than flow_max_mb = {s.flow_max_mb}); pass "
                       "--flow on.")
    ctx.say("rollout and norm-weighted attention")
    stored = sorted(set(int(x) for x in ctx.layers["layer"]))
    whole = stored == list(range(len(stored)))  # rollout multiplies every layer from layer 0 up
    measures, note = {"weights": ctx.effects(), **({"rollout": ctx.effects(weighting="rollout")} if whole else {})}, ""
    if not whole:
        none = (ctx.pair.baseline.capture or {}).get("no_attention_matrix")
        note = " Rollout is not computed: it multiplies every layer from layer 0 up, and " + (
            f"{layers_phrase(none)} of this hybrid have no attention matrix." if none else
            f"these runs store layers {', '.join(map(str, stored))} only.")
    try:
        measures["norm-weighted"] = ctx.effects(weighting="norm")
    except RoutestatsError as exc:
        if "value norms" not in str(exc):
            raise
        note += (" Norm-weighted attention needs the transported-vector norms, which these runs do not store (runs "
                "written before schema 1.1 or by a writer without value_norms).")
    cols = effects_columns(ctx, "SFM", raw_p=False)
    tables = ([ctx.table("norm_effects", measures["norm-weighted"], "Norm-weighted SFM (attention weighted by the norm "
                         "of each key's transported vector, rows renormalised): paired effects with the procedures of "
                         "the SFM table." + _undefined_norms(ctx) + _left_out_layers(ctx, measures["norm-weighted"]),
                         cols)] if "norm-weighted" in measures else []) + \
        ([ctx.table("rollout_effects", measures["rollout"], "Rollout SFM (head-mean attention mixed with the identity, "
                    "rows renormalised, multiplied up to each layer): paired effects with the procedures of the SFM "
                    "table. Descriptive: equal residual and attention contributions are assumed.", cols)]
         if "rollout" in measures else [])
    frame = pd.concat([f.assign(measure=m) for m, f in measures.items()], ignore_index=True)
    text = ("Norm-weighted attention weighs each key by the norm of what the head transports from it, ‖α_ij f(x_j)‖ "
            "(Kobayashi et al., 2020); rollout multiplies head-averaged attention, mixed half-and-half with the "
            "residual identity, across layers (Abnar & Zuidema, 2020). Rollout is a descriptive flow measure: it "
            "assumes the residual and attention paths contribute equally and ignores the MLPs.") + note
    return Section(tables=tuple(tables), figures=(ctx.figure("flow", "flow_measures", effects=frame),), text=text)


def _left_out_layers(ctx: PairContext, table: pd.DataFrame) -> str:
    """The caption's note on layers a norm-weighted table leaves out (every head pruned in a run)."""
    gone = sorted(set(int(x) for x in ctx.layers["layer"]) - set(int(x) for x in table["layer"]))
    if not gone:
        return ""
    which = f"layer {gone[0]} is" if len(gone) == 1 else f"layers {', '.join(map(str, gone))} are"
    return (f" {which[0].upper() + which[1:]} left out: in one run every head of it transports nothing (all value "
            "norms 0), so it has no norm-weighted attention.")


def _undefined_norms(ctx: PairContext) -> str:
    """The caption's count of heads whose transported vectors are all zero (a pruned head): they have no
    norm-weighted attention and are left out of the head means, never counted as 0."""
    out = []
    for role, run in (("baseline", ctx.pair.baseline), ("variant", ctx.pair.variant)):
        h = head_pass(run, ctx.step, trivial=ctx.settings.trivial_queries, weighting="norm").heads
        bad = h[h["sfm"].isna()]
        if len(bad):
            heads = bad[["layer", "head"]].drop_duplicates()
            out.append(f"{role}: {len(heads)} head(s), {len(bad)} example × head rows, e.g. layer "
                       f"{int(heads['layer'].iloc[0])} head {int(heads['head'].iloc[0])}")
    return (" Heads whose transported vectors are all zero (pruned heads) have no norm-weighted attention and are "
            "left out of the means, not counted as 0 (" + "; ".join(out) + ").") if out else ""


@section("init_vs_final", "Learned vs mechanical: the difference at the start of training")
def init_vs_final_section(ctx: PairContext) -> Section | None:
    if ctx.early is None:
        return None
    a = ctx.family_alpha
    decided = lambda end: (ctx.early[f"p_holm_{end}"] < a) & ((ctx.early[f"ci_low_{end}"] > 0)  # noqa: E731
                                                              | (ctx.early[f"ci_high_{end}"] < 0))
    # a share of the final Δ only where Δ is distinguishable from 0 at both ends: elsewhere it is a ratio of noise
    both = decided("init") & decided("final")
    f = ctx.early.assign(**{c: ctx.early[c].where(both) for c in ("share_at_init", "share_ci_low", "share_ci_high")})
    conf = pct(ctx.settings.confidence)
    t = ctx.table("init_vs_final", f, f"What was there at the start: Δ SFM at step {int(f['step_init'].iloc[0])} (the "
                  f"earliest stored step) and at step {int(f['step_final'].iloc[0])}, on the same examples; the change "
                  f"Δ_final − Δ_init per example with its per-layer {conf} bootstrap CI and sign-flip p (Holm over layers); "
                  f"the share at init is Δ init / Δ final where Δ is distinguishable from 0 at both steps (p_Holm < "
                  f"{a:.3g}, the α share of this headline family, and its interval excluding 0), else empty, with "
                  f"its {conf} percentile bootstrap interval (the paired tables' resamples of these examples).",
                  (Column("Layer", "layer", "int"), Column("Δ init", "delta_init"), Column("Δ final", "delta_final"),
                   Column("Share at init", "share_at_init", "num", 2),
                   Column(f"{conf} CI (share)", ("share_ci_low", "share_ci_high"), "ci"), Column("Change", "mean_diff"),
                   Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("p (Holm)", "p_holm", "p")))
    return Section(tables=(t,),
                   claims=tuple(early_claims(f, a, ctx.bias_off_runs)))


@section("heads", "Head-level SFM")
def heads_section(ctx: PairContext) -> Section:
    ctx.say("head-level SFM")
    hs = ctx.per_role(head_sfm, ctx.step, ctx.settings.examples, ctx.settings.trivial_queries)
    hs = ctx.with_difference(hs, ["layer", "head"], "sfm")
    return Section(tables=(Table("head_sfm", hs),), figures=(ctx.figure("head_sfm", "head_heatmaps", head_sfm=hs),),
                   text="SFM of each head averaged over examples; a layer's SFM is the mean of its heads.")


@section("trajectories", "Trajectories over training")
def trajectories_section(ctx: PairContext) -> Section | None:
    if len(ctx.common_steps) <= 1:
        return None
    ctx.say("trajectories")
    traj = trajectory(ctx.pair, "sfm")[["role", "step", "layer", "value", "n_examples"]].rename(columns={"value": "sfm"})
    return Section(tables=(Table("trajectory", traj),),
                   figures=(ctx.figure("trajectories", "trajectories", trajectory=traj),),
                   text="Layer SFM at every stored checkpoint step.")


@section("gradients", "Gradient-norm ratio")
def gradients_section(ctx: PairContext) -> Section | None:
    p, s = ctx.pair, ctx.settings
    if not (p.baseline.has(S.GRADIENTS) and p.variant.has(S.GRADIENTS)) or ctx.n_layers < 2:
        return None
    ctx.say("gradient ratios")
    steps = ctx.per_role(gradient_ratios, window=s.gradient_window)
    parts = [c.assign(role=role)[["role", *c.columns]] for role, run in ctx.runs
             if len(c := gradient_checkpoint_summary(run, ctx.common_steps or None, s.gradient_window))]
    g = pd.concat(parts, ignore_index=True) if parts else None
    tables = ()
    if g is not None:
        lo, up = int(g["lower_layer"].iloc[0]), int(g["upper_layer"].iloc[0])
        tables = (ctx.table("gradients", g, f"Q/K/V weight-gradient norm ratio L{up}/L{lo} (after accumulation, "
                            f"before clipping): mean and SD of the per-step ratios over the last {s.gradient_window} "
                            "steps ending at each checkpoint.",
                            (Column("Model", "role", "text"), Column("Step", "checkpoint_step", "int"),
                             Column("Window", ("window_start_step", "window_end_step"), "range"),
                             Column("Steps", "n_steps", "int"), Column("Mean ratio", "mean_ratio"),
                             Column("SD", "sd_ratio"), Column(f"Norm L{lo}", "mean_lower_norm", "num", 4),
                             Column(f"Norm L{up}", "mean_upper_norm", "num", 4))),)
    return Section(tables=tables,
                   figures=(ctx.figure("gradients", "gradient_ratios", steps=steps),))


@section("words", "Word-level attention")
def words_section(ctx: PairContext) -> Section:
    ctx.say("word-level map")
    wm = word_map(ctx.pair, ctx.settings, ctx.step, ctx.layers["layer"].unique())
    if wm is None:
        return Section(skipped="No evaluated example meets the selection rule (or no full matrices are stored at this "
                               "step), so no word-level map is shown.")
    from routestats.report import Figure

    return Section("words", f"Word-level attention, example {wm.example_id}", (Table("word_map", wm.to_frame()),),
                   (Figure("explorer", "attention_explorer", wm.explorer_frames(),
                           {"example_id": wm.example_id, "labels": ctx.labels}),
                    ctx.figure("word_map", "word_map", word_map=wm)),
                   text="Attention grouped into words (average over query pieces, sum over key pieces). Explorer "
                        "(HTML only): click a word to see where it attends, per layer and head or their mean, in the "
                        "baseline, the variant or their difference; fields are underlined in colour. The static map "
                        f"below shows the head mean of layers {', '.join(map(str, wm.layers))}; white/black lines mark "
                        f"field boundaries. Example selection: {wm.selection_rule}.")


@section("decomposition", "Learned vs mechanical: the bias on and off on the same weights")
def decomposition_section(ctx: PairContext) -> Section | None:
    """total = direct + learned, when the input holds the variant's bias-off evaluation (METHODS 3.4b)."""
    from routestats.studies.decomposition import decompose, decomposition_table

    if ctx.bias_off is None:
        return None
    if isinstance(ctx.bias_off, str):  # bias-off runs beside the pair that are not its one evaluation: why
        raise RoutestatsError(ctx.bias_off)
    ctx.say("learned vs mechanical (bias off)")
    t = decompose(ctx.pair.baseline, ctx.pair.variant, ctx.bias_off, ctx.settings, step=ctx.step)
    return Section(tables=(decomposition_table(t, pct(ctx.settings.confidence)),),
                   claims=(direct_learned_claim(t, ctx.bias_off_runs),))


EXTRA_SECTIONS: dict = {}  # id -> section function, added after the built-in sections (register_section)


def register_section(fn) -> None:
    """Add a section function (named with :func:`routestats.report.section`) to every pair report, after the
    built-in ones; its claims rank after the built-in kinds. A clashing id is refused."""
    sid = getattr(fn, "section_id", None)
    if sid is None:
        raise RoutestatsError("a section function is named with @section(id, title)")
    if sid in EXTRA_SECTIONS or sid in {f.section_id for f in pair_sections()}:
        raise RoutestatsError(f"a pair-report section {sid!r} exists already")
    EXTRA_SECTIONS[sid] = fn


def unregister_section(sid: str) -> None:
    """Remove a section added with :func:`register_section`."""
    EXTRA_SECTIONS.pop(sid, None)


def pair_sections() -> tuple:
    """The pair report's section functions, in order (a paired section per registered metric after SFM's,
    sections added with :func:`register_section` last)."""
    metrics = tuple(metric_section(m) for m in paired_metrics() if m.name != "sfm")
    return (performance_section, profile_section, effects_section, *metrics, adjusted_section, fields_section,
            masses_section, shape_section, flow_section, init_vs_final_section, decomposition_section, heads_section,
            trajectories_section, gradients_section, lengths_section, words_section, *EXTRA_SECTIONS.values())

