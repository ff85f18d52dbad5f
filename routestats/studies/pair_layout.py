"""The layout of the one-pair report: its shown tables (columns, captions), the findings lines and
the methods paragraph, all generated from the frames :mod:`routestats.studies.pair_report` computes."""

from __future__ import annotations

from routestats.report import Column, Table, fmt_ci, fmt_num, fmt_p, pct
from routestats.settings import AnalysisSettings

__all__ = ["pair_tables", "pair_findings", "pair_methods"]


def _outside(rep: dict) -> float:
    """The largest mean share of a layer's attention on keys outside the named fields."""
    m = rep.get("masses")
    return float(m["unnamed_mass"].max()) if m is not None and len(m) else 0.0


def pair_tables(rep: dict, s: AnalysisSettings) -> dict[str, Table]:
    """The shown tables of a pair report (frames in ``rep``)."""
    conf = pct(s.confidence)
    b, v = "baseline", "variant"
    subject = f"{rep['variant_id']} vs {rep['baseline_id']}"
    def T(name, caption, columns, frame=None, **kw):
        return Table(name, rep[name] if frame is None else frame, caption, columns, subject=subject, **kw)

    out = {
        "performance": T(
            "performance", "Task performance (masked structure modelling).",
            (Column("Model", "role", "text"), Column("Run", "run_id", "text"), Column("Steps", "steps", "int"),
             Column("Final train loss", "final_train_loss", "num", 4), Column("Eval loss", "eval_loss", "num", 4),
             Column("Eval accuracy", "eval_accuracy", "num", 4))),
        "layers": T(
            "layers", "Same-field attention mass (SFM) and entropy (nats) per layer "
                      f"{'of the pretrained model as evaluated' if rep['pretrained'] else 'at step ' + str(rep['step'])}, "
                      f"mean over {rep['n_examples']} examples; the highest SFM of each model in bold.",
            (Column("Model", "role", "text"), Column("Layer", "layer", "int"), Column("SFM", "sfm"),
             Column("Entropy", "entropy"), Column("Examples", "n_examples", "int")),
            bold_max=("sfm",), group_by="role"),
        "effects": T(
            "effects", f"Paired SFM effects (variant − baseline) per layer: mean difference, {conf} percentile "
                       f"bootstrap CI ({s.resamples:,} resamples), d_z, and two-sided sign-flip p "
                       f"({s.permutations:,} draws) Holm-adjusted over layers.",
            (Column("Layer", "layer", "int"), Column(f"SFM {b}", "baseline_mean"), Column(f"SFM {v}", "variant_mean"),
             Column("Δ", "mean_diff"), Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("d_z", "dz", "num", 2),
             Column("p (raw)", "p_raw", "p", floor="raw"), Column("p (Holm)", "p_holm", "p", floor="holm"),
             Column("n", "n", "int"))),
        "entropy_effects": T(
            "entropy_effects", "Paired entropy effects (nats; variant − baseline), same procedures as the SFM table.",
            (Column("Layer", "layer", "int"), Column(f"Entropy {b}", "baseline_mean"),
             Column(f"Entropy {v}", "variant_mean"), Column("Δ", "mean_diff"),
             Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("d_z", "dz", "num", 2),
             Column("p (Holm)", "p_holm", "p"))),
        "adjusted": None if rep["adjusted"] is None else T(
            "adjusted", "Opportunity-adjusted SFM, (SFM − O_e)/(1 − O_e): 0 = uniform over valid keys, 1 = only "
                        "same-field keys. Examples with one visible field (O_e = 1) are excluded from every layer."
                        + (" Attention on keys outside the named fields counts in neither SFM nor O_e, so values "
                           "below 0 (even below −1) mean much of it sits there; keys=named renormalises SFM over "
                           "the named keys." if _outside(rep) > 0.01 else ""),
            (Column("Layer", "layer", "int"), Column("n", "n", "int"), Column("Excluded", "excluded", "int"),
             Column("Mean O_e", "mean_opportunity"), Column(f"Adj. {b}", "baseline_mean"),
             Column(f"Adj. {v}", "variant_mean"), Column("Δ adj.", "mean_diff"),
             Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("p (Holm)", "p_holm", "p"))),
    }
    flow_cols = (Column("Layer", "layer", "int"), Column(f"SFM {b}", "baseline_mean"),
                 Column(f"SFM {v}", "variant_mean"), Column("Δ", "mean_diff"),
                 Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("d_z", "dz", "num", 2),
                 Column("p (Holm)", "p_holm", "p", floor="holm"), Column("n", "n", "int"))
    if rep.get("norm_effects") is not None:
        out["norm_effects"] = T(
            "norm_effects", "Norm-weighted SFM (attention weighted by the norm of each key's transported vector, "
                            "rows renormalised): paired effects with the procedures of the SFM table.", flow_cols)
    if rep.get("rollout_effects") is not None:
        out["rollout_effects"] = T(
            "rollout_effects", "Rollout SFM (head-mean attention mixed with the identity, rows renormalised, "
                               "multiplied up to each layer): paired effects with the procedures of the SFM table. "
                               "Descriptive: equal residual and attention contributions are assumed.", flow_cols)
    if rep["profile_shape"] is not None:
        out["profile_shape"] = T(
            "profile_shape", f"Does the change differ between layers? H0: the same shift in every layer. Sign-flip test on "
                             f"each example's centred Δ profile (T = Σ_l mean(c_l)², one sign per example; "
                             f"{'exact over all sign vectors' if bool(rep['profile_shape']['exact'].iloc[0]) else f'{s.permutations:,} draws'}) "
                             "and Hotelling's T² on the successive layer differences (F test; needs n > layers − 1).",
            (Column("Test", "test", "text"), Column("Statistic", "statistic", "sig", 4), Column("df1", "df1", "int"),
             Column("df2", "df2", "int"), Column("p", "p", "p"), Column("n", "n", "int")))
        out["layer_contrasts"] = T(
            "layer_contrasts", f"Pairwise layer contrasts of the paired SFM change, Δ_b − Δ_a per example: mean, "
                               f"{conf} percentile bootstrap CI ({s.resamples:,} resamples), d_z and sign-flip p, Holm "
                               "over all contrasts.",
            (Column("Contrast", "contrast", "text"), Column("Mean", "mean_diff"),
             Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("d_z", "dz", "num", 2),
             Column("p (raw)", "p_raw", "p"), Column("p (Holm)", "p_holm", "p"), Column("n", "n", "int")))
        out["profile_distance"] = T(
            "profile_distance", f"Profile distance ‖(Δ_1, …, Δ_L)‖₂ between the two layer-SFM profiles with a {conf} "
                                f"percentile bootstrap CI over examples ({s.resamples:,} resamples).",
            (Column("Distance", "profile_distance", "num", 4), Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"),
             Column("n", "n", "int"), Column("Layers", "layers", "int")), frame=rep["profile_distance_ci"])
    if rep["init_vs_final"] is not None:
        f = rep["init_vs_final"]
        out["init_vs_final"] = T(
            "init_vs_final", f"What was there at the start: Δ SFM at step {int(f['step_init'].iloc[0])} (the earliest "
                             f"stored step) and at step {int(f['step_final'].iloc[0])}, on the same examples; the change "
                             f"Δ_final − Δ_init per example with its {conf} bootstrap CI and sign-flip p (Holm over layers).",
            (Column("Layer", "layer", "int"), Column("Δ init", "delta_init"), Column("Δ final", "delta_final"),
             Column("Share at init", "share_at_init", "num", 2), Column("Change", "mean_diff"),
             Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("p (Holm)", "p_holm", "p")))
    out["masses"] = T(
        "masses", "Where each query's attention goes, per layer (mean over valid queries, heads and examples): "
                  "same-field (S), other named fields (C) and keys outside the named fields (U: special tokens, "
                  "separators, unnamed positions; S + C + U = 1 for softmax heads), the first key's mass (the "
                  "attention-sink diagnostic) and SFM renormalised over the named keys, S / (1 − U).",
        (Column("Model", "role", "text"), Column("Layer", "layer", "int"), Column("S", "sfm"),
         Column("C", "cross_mass"), Column("U", "unnamed_mass"), Column("First key", "first_mass"),
         Column("SFM named", "sfm_named"), Column("Examples", "n_examples", "int")))
    if rep["lengths"] is not None:
        out["lengths"] = T(
            "lengths", "Evaluated token lengths (paper Table 11 layout): mean, population SD, linear-interpolation "
                       "quantiles and saturation at the evaluation cap.",
            (Column("Split", "split", "text"), Column("n", "n", "int"), Column("Mean", "mean", "num", 1),
             Column("SD", "sd_population", "num", 1), Column("Median", "median", "num", 1), Column("IQR", "iqr", "num", 1),
             Column("P90", "p90", "num", 1), Column("P95", "p95", "num", 1), Column("Cap", "cap", "int"),
             Column("Saturated", "saturation_count", "int"), Column("Rate", "saturation_rate", "num", 3)))
        out["length_association"] = T(
            "length_association", f"Length association (paper Table 12A): Spearman ρ between evaluated length and the "
                                  f"per-example Δ SFM, percentile bootstrap CI ({s.length_resamples:,} "
                                  "resamples), Holm over layers.",
            (Column("Layer", "layer", "int"), Column("n", "n", "int"), Column("ρ", "rho"),
             Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("p (raw)", "p_raw", "p"),
             Column("p (Holm)", "p_adj", "p")))
        la = rep["length_adjusted"]
        ref = la["reference_length"].iloc[0]
        out["length_adjusted"] = T(
            "length_adjusted", f"Length-adjusted Δ SFM: the raw mean change next to the change at the median length "
                               f"({ref:g} tokens) and its change per 10 tokens, from a per-layer least-squares line "
                               f"of the per-example Δ on length ({rep['n_length_examples']} examples, {conf} percentile "
                               f"bootstrap, {s.resamples:,} resamples). Descriptive, within one model: it removes "
                               "the linear part of the length association only.",
            (Column("Layer", "layer", "int"), Column("n", "n", "int"), Column("Raw Δ", "delta"),
             Column(f"Δ at {ref:g} tokens", "delta_at_reference"), Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"),
             Column("Δ per 10 tokens", "slope_per_10"),
             Column(f"{conf} CI ", ("slope_ci_low", "slope_ci_high"), "ci")))
        out["length_bins"] = T(
            "length_bins", "Equal-count length quartile bins (by rank of length, then source index): mean and median "
                           "Δ SFM per layer; 'At cap' counts examples cut at the evaluation cap (a bin made only of "
                           "them is saturated: its true lengths are unknown).",
            (Column("Bin", "bin", "int"), Column("Layer", "layer", "int"), Column("n", "count", "int"),
             Column("Lengths", ("min_length", "max_length"), "range"), Column("At cap", "at_cap", "int"),
             Column("Mean Δ", "mean_delta"), Column("Median Δ", "median_delta")))
    g = rep["gradients"]
    if g is not None:
        lo, up = int(g["lower_layer"].iloc[0]), int(g["upper_layer"].iloc[0])
        out["gradients"] = T(
            "gradients", f"Q/K/V weight-gradient norm ratio L{up}/L{lo} (after accumulation, before clipping): "
                         f"mean and SD of the per-step ratios over the last {s.gradient_window} steps "
                         "ending at each checkpoint.",
            (Column("Model", "role", "text"), Column("Step", "checkpoint_step", "int"),
             Column("Window", ("window_start_step", "window_end_step"), "range"), Column("Steps", "n_steps", "int"),
             Column("Mean ratio", "mean_ratio"), Column("SD", "sd_ratio"),
             Column(f"Norm L{lo}", "mean_lower_norm", "num", 4), Column(f"Norm L{up}", "mean_upper_norm", "num", 4)))
    return out


def pair_findings(rep: dict, s: AnalysisSettings) -> list[str]:
    """Plain-language lines quoting the finished tables (numbers formatted as in the tables)."""
    out = []
    conf = f"{100 * s.confidence:.0f}%"
    for r in rep["effects"].sort_values("layer").itertuples():
        sign = "+" if r.mean_diff >= 0 else "−"
        out.append(
            f"Layer {r.layer}: SFM {fmt_num(r.baseline_mean)} → {fmt_num(r.variant_mean)}, "
            f"Δ = {sign}{fmt_num(abs(r.mean_diff))}, {conf} CI {fmt_ci(r.ci_low, r.ci_high)}, "
            f"d_z = {fmt_num(r.dz, 2)}, p_Holm {'' if fmt_p(r.p_holm).startswith('<') else '= '}{fmt_p(r.p_holm)}"
        )
    lay = rep["layers"]
    for role in ("baseline", "variant"):
        t = lay[(lay["role"] == role) & lay["is_max_sfm"]]
        if len(t):
            out.append(f"Highest SFM in the {role}: layer {int(t['layer'].iloc[0])} ({fmt_num(t['sfm'].iloc[0])}).")
    out.append(f"Profile distance between the two layer profiles: {fmt_num(rep['profile_distance'], 4)}.")
    adj = rep["adjusted"]
    if adj is not None:
        out.append(f"Opportunity-adjusted analysis: {int(adj['n'].iloc[0])} examples, {int(adj['excluded'].iloc[0])} "
                   f"excluded (one visible field), mean O_e {fmt_num(adj['mean_opportunity'].iloc[0])}.")
    return out


_SETS = {"all": "every evaluated example", "primary": "the primary examples", "length_sample": "the length sample",
         "test_sample": "the untouched test sample"}


def _protocol_sentence(rep: dict, s: AnalysisSettings) -> str:
    """Which examples each family of tables uses (METHODS 3.7 protocol)."""
    paired = f"The paired tables use {_SETS[s.examples]} ({rep['n_examples']})"
    if rep.get("length_adjusted") is None:
        return paired + "."
    if s.length_examples == s.examples:
        return paired + ", as do the length analyses."
    return paired + f"; the length analyses use {_SETS[s.length_examples]} ({rep['n_length_examples']})."


def capture_sentences(base: dict | None, variant: dict | None, n_examples: int) -> str:
    """What a reader of a paper needs to know about how a pretrained model's attention was captured."""
    if not base:
        return ""
    out = []
    model = base["class"] or "the model"
    fam = f" ({base['family']} family, model type {base['model_type']})" if base["family"] and base["model_type"] else ""
    if base["path"] == "attention-interface":
        out.append(f"Attention was captured from {model}{fam} through transformers' AttentionInterface: each "
                   "layer's own eager attention computed the weights, with the masks the model builds itself "
                   "(causal, sliding-window and padding, where it has them), and the intervention was added to "
                   "that mask.")
    elif base["path"]:
        out.append(f"Attention was captured from {model}{fam} ({base['path']}).")
    if base["inputs"]:
        out.append(f"The model received everything its tokenizer returns ({', '.join(base['inputs'])}).")
    if base["special_tokens"]:
        out.append("Special tokens and separators " + ("belong to no field (field 0): they are no field's keys, so "
                                                       "their attention counts as unnamed mass."
                                                       if base["special_tokens"] == "unnamed" else
                                                       "were attached to their neighbouring field."))
    if base["truncation"] and base["cap"] is not None and base["examples_truncated"] is not None:
        cut = ", ".join(f"{k} {v:,}" for k, v in base["tokens_cut"].items())
        rule = ("the last field is cut first" if base["truncation"] == "only-last" else
                "tokens are removed from the longest field first")
        fb = (f"; {base['fallbacks']} fell back to longest-first because the first field alone filled the cap"
              if base["fallbacks"] else "")
        out.append(f"Records were cut to the {base['cap']}-token cap ({rule}): {base['examples_truncated']} of "
                   f"{n_examples} examples were truncated (tokens cut: {cut}){fb}.")
    q = base["quantisation"]
    if q and q.get("file_type"):
        out.append(f"The weights are {q.get('format', '').upper()} {q['file_type']} (quantised), dequantised to "
                   f"{q.get('dequantised_to') or 'float32'} for the forward passes.")
    elif base["dtype"]:
        out.append(f"The forward passes ran in {base['dtype']}.")
    if variant and variant.get("pairing_reason"):
        out.append(f"The variant is a second checkpoint of the same architecture and tokenizer, on the same "
                   f"records ({variant['pairing_reason']}).")
    return " " + " ".join(out)


def pair_methods(rep: dict, s: AnalysisSettings) -> str:
    """A methods paragraph generated from the report's actual settings."""
    names = ", ".join(rep["field_names"].values())
    mode = {"shared": "one generator whose bootstrap indices and sign patterns are shared across layers",
            "numpy": "the reference implementation's per-layer NumPy procedure",
            "python-random": "the reference implementation's per-layer Python random procedure"}[s.mode]
    when = ("from the pretrained model as it is and under the intervention (no training; the intervention acts at "
            "inference time)" if rep["pretrained"] else f"at training step {rep['step']}")
    causal = (f" The models attend causally: a query sees only earlier keys, the opportunity O_i counts visible keys, "
              f"and queries whose visible named keys all lie in their own field (SFM 1 whatever the model does) "
              f"are {'excluded' if rep['trivial'] == 'exclude' else 'included'}." if rep["causal"] else
              (" Trivial queries (all visible keys in their own field) are excluded." if rep["trivial"] == "exclude"
               else ""))
    keys = " SFM is renormalised over the named keys, S / (1 − U)." if s.keys == "named" else ""
    return (
        f"Attention was recorded {when}, {rep['n_layers']} layers × {rep['n_heads']} heads. "
        f"{_protocol_sentence(rep, s)} "
        f"Same-field attention mass (SFM) is the attention a valid query places on valid keys of its own field "
        f"(named fields: {names}), averaged over valid queries, then heads, then examples, without renormalisation; "
        f"entropy is −Σ p ln(p + 1e-10) over all keys, averaged the same way. Paired differences (variant − baseline, "
        f"per example) are summarised by their mean with a {100 * s.confidence:.0f}% percentile bootstrap "
        f"confidence interval ({s.resamples:,} resamples) and tested with a two-sided sign-flip permutation test on "
        f"the absolute mean ({s.permutations:,} random sign patterns, p = (count + 1)/(P + 1)); p-values are "
        f"Holm-adjusted across the {rep['n_layers']} layers, and d_z = mean/SD (ddof 1). Random procedures use seed "
        f"{s.seed} ({mode}). Opportunity-adjusted SFM is (SFM − O_e)/(1 − O_e) with O_e = Σ_f n_f²/N², "
        f"excluding examples with a single visible field. Field-to-field means count examples lacking the source "
        f"field as {'zero' if s.missing_fields == 'zero' else 'missing'}."
        + (f" Gradient ratios are means of per-step ratios over up to {s.gradient_window} steps ending at each "
           "checkpoint." if rep.get("gradients") is not None else "") + f"{causal}{keys}"
        + capture_sentences(rep.get("capture"), rep.get("capture_variant"), rep["n_examples"])
    )
