"""The sentence templates of the pair and study sections (METHODS 3.7) on constructed tables, one test
per branch. Every expected sentence is written out from the constructed frames by hand: the
numbers in it are the cells put into the frame, formatted as the tables format them.

Each section builds its claims from its own frames; :func:`pair` and :func:`study` here call the
section builders on constructed frames, as the sections do, and rank them as the reports do."""

from dataclasses import replace

import numpy as np
import pandas as pd

from routestats.compose.claims import direct_learned_claim, direction_claim, profile_claims
from routestats.compose.pair import claims as P
from routestats.claim import evaluate
from routestats.compose.study import claims as St



def printed_early(claims):
    """The early-share wording its checks print: both are built (issue [honest-gates]), exactly one holds."""
    early = [c for c in claims if c.kind == "early_share"]
    assert len(early) == 2 and sum(c.holds for c in early) == 1, [c.checks for c in early]
    return next(c for c in early if c.holds)

def effects(d, p, lo, hi):
    n = len(d)
    return pd.DataFrame({"layer": range(n), "mean_diff": d, "p_holm": p, "ci_low": lo, "ci_high": hi,
                         "baseline_mean": [0.5] * n, "variant_mean": [0.5 + x for x in d], "dz": [1.0] * n})


def report(**frames) -> dict:
    """The frames the sections would hold, with the layer profile every pair report has."""
    frames.setdefault("layers", pd.DataFrame({"role": ["baseline", "variant"], "layer": [0, 0], "sfm": [0.5, 0.6],
                                              "is_max_sfm": [True, True]}))
    return frames


def ranked(claims, order):
    rank = {k: i for i, k in enumerate(order)}
    return sorted(claims, key=lambda c: rank.get(c.kind, len(rank)))


def pair(t, n_examples=32, alpha=0.05, rho=0.5, conf="95%", pretrained=False, within_study=False, permutations=9999,
         censored=None, has_bias_off=False, first_key_fields=None):
    """The claims each pair section makes of its frames ``t``, in the report's rank order."""
    eff = t["effects"]
    if "p_holm_floor" not in eff:  # as paired_inference writes it: k layers x max(1/(P + 1), 2/2^n), at most 1
        eff = eff.assign(p_holm_floor=min(1.0, len(eff) * max(1 / (permutations + 1), 2 / 2 ** n_examples)))
    out = P.effects_claims(eff, n_examples=n_examples, pretrained=pretrained, alpha=alpha, confidence=0.95,
                           permutations=permutations)
    out += P.shape_claims(t.get("profile_shape"), t.get("layer_contrasts"), alpha, conf)
    out += P.unnamed_claims(t.get("masses")) + P.sink_claims(t.get("masses"), first_key_fields or {}, n_examples)
    out += P.early_claims(t.get("init_vs_final"), alpha, int(has_bias_off))
    if "decomposition" in t:
        out.append(direct_learned_claim(t["decomposition"], int(has_bias_off)))
    out.append(P.scope_claim(pretrained, within_study, n_examples))
    assoc = t.get("length_association")
    out += P.censoring_claims(censored, assoc is not None and assoc["capped"].iloc[0] == "exclude")
    out += P.length_claims(assoc, t.get("length_adjusted"), alpha, bins=t.get("length_bins"))
    out += profile_claims(t["highest_layer"]) if "highest_layer" in t else []
    return ranked(out, P.CLAIM_ORDER)


def printed(claims, where="headline"):
    return [c.sentence for c in claims if c.where == where and c.holds]


def test_rise_in_every_layer_quotes_the_largest_holm_p():
    h = printed(pair(report(effects=effects([0.1, 0.12, 0.05], [0.001, 0.002, 0.01], [0.05, 0.06, 0.01],
                                            [0.15, 0.18, 0.09]))))
    assert h[0] == "Within one initialisation (32 examples), SFM rose in all 3 layers (Δ +0.050 to +0.120, p_Holm ≤ 0.010)."
    assert "not the effect of the architecture across initialisations; that needs several seeds" in h[-1]


def test_per_layer_interval_excluding_zero_is_never_called_no_change():
    # layer 1: Holm p 0.2 but its per-layer interval [0.01, 0.06] excludes 0 (the study layer 1)
    h = printed(pair(report(effects=effects([0.2, 0.03, 0.002], [0.0004, 0.2, 0.7], [0.1, 0.01, -0.01],
                                            [0.3, 0.06, 0.014]))))
    assert h[0] == ("Within one initialisation (32 examples), SFM rose in layer 0 (Δ +0.200, p_Holm < 0.001); in "
                    "layer 1 the per-layer 95% interval [0.010, 0.060] excludes 0 but p_Holm = 0.200 (Holm over 3 "
                    "layers); in layer 2 the 95% interval [−0.010, 0.014] includes 0.")
    assert "no detectable change" not in " ".join(h) and "no change" not in " ".join(h)


def test_no_layer_reaches_alpha_names_the_widest_interval():
    h = printed(pair(report(effects=effects([0.01, -0.01], [0.4, 0.6], [-0.02, -0.05], [0.04, 0.03]))))
    assert h[0] == ("Within one initialisation (32 examples), no layer's SFM change reaches p_Holm < 0.05; in layers "
                    "0 and 1 the 95% intervals include 0 (the widest [−0.050, 0.030], layer 1).")


def test_opposite_signs_and_the_permutation_floor():
    # 4 layers, 199 permutations: the Holm floor is 4/200 = 0.02, reached by layers 0-2
    c = pair(report(effects=effects([0.1, -0.08, 0.09, 0.0], [0.02, 0.02, 0.02, 0.8], [0.05, -0.1, 0.04, -0.01],
                                    [0.15, -0.05, 0.12, 0.01])), permutations=199)
    assert c[0].kind == "mixed"
    assert c[0].sentence == ("Within one initialisation (32 examples), SFM rose in layers 0 and 2 (Δ +0.090 to +0.100, "
                             "p_Holm ≤ 0.020, the smallest attainable); SFM fell in layer 1 (Δ −0.080, p_Holm = "
                             "0.020, the smallest attainable); in layer 3 the 95% interval [−0.010, 0.010] includes 0.")


def test_a_significant_p_with_an_interval_on_the_other_side_is_not_a_rise():
    # p < alpha but the interval includes 0: the decision rule needs both, so the layer is described by its interval
    t = pd.DataFrame({"layer": [0], "d": [0.05], "p": [0.01], "lo": [-0.01], "hi": [0.1]})
    c = direction_claim(t, "Lead", est="d", p="p", lo="lo", hi="hi", alpha=0.05, metric="SFM", table="effects",
                        conf="95%")
    assert c.kind == "no_evidence"
    assert c.sentence == "Lead, no layer's SFM change reaches p_Holm < 0.05; in layer 0 the 95% interval [−0.010, 0.100] includes 0."


def test_shape_early_share_and_length_sentences():
    eff = effects([0.1, 0.02], [0.001, 0.01], [0.05, 0.01], [0.15, 0.03])
    shape = pd.DataFrame({"test": ["sign-flip (centred profile)", "Hotelling T2"], "p": [0.0004, 0.001]})
    contrasts = pd.DataFrame({"contrast": ["L1 − L0"], "mean_diff": [-0.08], "ci_low": [-0.09], "ci_high": [-0.07]})
    init = pd.DataFrame({"layer": [0, 1], "step_init": [1, 1], "share_at_init": [0.9, 1.2],
                         # layer 1's share interval lies above 100%: called beyond; layer 0's reaches into 0-100%
                         "share_ci_low": [0.7, 1.05], "share_ci_high": [1.1, 1.4], "mean_diff": [0.01, -0.02],
                         "ci_low": [-0.01, -0.03], "ci_high": [0.03, -0.01], "p_holm": [0.2, 0.001],
                         "delta_init": [0.09, 0.12], "delta_final": [0.1, 0.1],
                         # Δ distinguishable from 0 at both steps in both layers: their shares are stated
                         "p_holm_init": 0.001, "ci_low_init": [0.05, 0.08], "ci_high_init": [0.13, 0.16],
                         "p_holm_final": 0.001, "ci_low_final": 0.05, "ci_high_final": 0.15})
    assoc = pd.DataFrame({"layer": [0, 1], "n": [20, 20], "rho": [-0.7, -0.2], "ci_low": [-0.8, -0.4],
                          "ci_high": [-0.6, 0.1], "p_adj": [0.002, 0.4], "capped": ["exclude"] * 2,
                          "n_capped": [12, 12]})
    adj = pd.DataFrame({"layer": [0, 1], "reference_length": [48.0, 48.0], "delta_at_reference": [0.05, 0.3],
                        "slope_per_10": [-0.012, 0.5]})
    # layer 0's mean Δ is positive in every length quartile (shortest to longest: 0.08, 0.06, 0.05, 0.03)
    bins = pd.DataFrame({"bin": [0, 1, 2, 3], "layer": 0, "mean_delta": [0.08, 0.06, 0.05, 0.03]})
    c = pair(report(effects=eff, profile_shape=shape, layer_contrasts=contrasts, init_vs_final=init,
                    length_association=assoc, length_adjusted=adj, length_bins=bins),
             censored={"n_capped": 12, "n": 32, "cap": 64})
    h = printed(c)
    assert h[1] == "The change differs across layers (profile-shape sign-flip p < 0.001)."
    # the contrast is a claim of its own, citing the contrasts table
    assert h[2] == "The largest layer contrast is L1 − L0 = −0.080 (per-contrast 95% interval [−0.090, −0.070])."
    # the early share as numbers (90%, 120%), the later change by its own decision rule, no mechanism named
    assert h[3] == ("At step 1, the earliest stored step, the difference was 90% to 120% of its final size in every "
                    "layer (per-layer intervals from 70% to 140%); beyond 0–100% in layer 1, whose interval excludes "
                    "that range: there the early difference is larger than, or opposite to, the final one; from then "
                    "to the end it shrank in layer 1 in size (p_Holm < 0.05).")
    assert h[-2] == ("In 1 of 2 layers the per-example Δ is associated with evaluated length (Spearman ρ −0.70 in "
                     "layer 0; p_Holm < 0.05 over 2 layers, per-layer interval excluding 0, on 20 examples below the "
                     "cap; 12 at the cap are left out), so the mean Δ depends on this sample's lengths; an "
                     "association, not an effect of length.")
    # the size at the median length from the length-adjusted table: Δ +0.050 falling 0.012 per 10 tokens
    assert h[-1] == ("At the median length of those examples (48 tokens) Δ is +0.050 in layer 0, changing by −0.012 "
                     "per 10 tokens: |Δ| is smaller in longer examples in layer 0.")
    f = printed(c, "finding")
    assert f[0].startswith("Whether an early difference is what the bias does to near-initial weights or what "
                           "training learned is not shown by this design")
    assert f[1] == ("12 of 32 examples (38%) reached the 64-token cap, so their true lengths are unknown (at least "
                    "the cap); the length analyses leave them out.")
    uniform = pd.DataFrame({"test": ["sign-flip (centred profile)"], "p": [0.31]})
    assert printed(pair(report(effects=eff, profile_shape=uniform)))[1] == (
        "The data do not show that the change differs across layers (profile-shape sign-flip p = 0.310; a uniform "
        "shift is not ruled out).")


def test_a_length_association_of_both_signs_is_a_dependence_said_as_such():
    # was: "changes sign across layers, so no length dependence is claimed" hid a planted dependence
    eff = effects([0.1, 0.02, 0.0], [0.001, 0.01, 0.5], [0.05, 0.01, -0.1], [0.15, 0.03, 0.1])
    assoc = pd.DataFrame({"layer": [0, 1, 2], "n": [20] * 3, "rho": [-0.7, 0.6, 0.55], "ci_low": [-0.8, 0.3, 0.2],
                          "ci_high": [-0.6, 0.8, 0.8], "p_adj": [0.001, 0.01, 0.2], "capped": ["exclude"] * 3,
                          "n_capped": [0] * 3})
    c = [x for x in pair(report(effects=eff, length_association=assoc)) if x.kind == "depends_on_length"]
    # layers 0 and 1 reach p_Holm < 0.05 with intervals excluding 0; layer 2's interval excludes 0 but p_Holm 0.2
    assert c[0].sentence.startswith("In 2 of 3 layers the per-example Δ is associated with evaluated length (Spearman "
                                    "ρ 0.60 in layer 1 and ρ −0.70 in layer 0; of both signs; p_Holm < 0.05 over 3 "
                                    "layers") and c[0].rows == (0, 1) and c[0].holds


def test_a_length_association_not_claimed_is_said_with_the_layer_closest_to_the_threshold():
    """A length table with small raw p but none past Holm at the family's share printed no sentence at all, while the
    length-adjusted slopes beside it excluded 0 (the bundled demo). It says it is not claimed, and why."""
    assoc = pd.DataFrame({"layer": [0, 1, 2], "n": 15, "rho": [0.52, -0.61, 0.3], "ci_low": [0.1, -0.85, -0.2],
                          "ci_high": [0.8, -0.2, 0.7], "p_adj": [0.039, 0.0145, 0.4], "capped": "exclude",
                          "n_capped": 0})
    out = P.length_claims(assoc, None, 0.0125, families=4)
    dep, no = out
    assert not dep.holds and no.holds and no.rows == (1,)
    # written out from the frame: layer 1 has the smallest p_Holm, 0.0145, printed as fmt_p does (0.015: 3 decimals,
    # on the same side of 0.0125 as the value), ρ -0.61
    assert no.sentence == ("No length association is claimed: no layer's Spearman ρ of Δ with evaluated length reaches "
                           "p_Holm < 0.0125 (3 layers; α 0.05 shared by 4 headline families) with its interval "
                           "excluding 0; the closest is layer 1, ρ −0.61 with p_Holm = 0.015, on 15 examples.")
    # with examples at the cap left out, it says so (as the association's own sentence does)
    capped = P.length_claims(assoc.assign(n_capped=17), None, 0.0125, families=4)[1]
    assert capped.sentence.endswith("on 15 examples below the cap (17 at the cap left out).")
    # on the builder's input: layer 1 past the threshold is claimed, and the not-claimed sentence is withheld
    dep, no = P.length_claims(assoc.assign(p_adj=[0.039, 0.001, 0.4]), None, 0.0125, families=4)
    assert dep.holds and not no.holds
    # and below 8 examples neither is said
    assert not P.length_claims(assoc.assign(n=6), None, 0.0125, families=4)[1].holds


def test_pretrained_and_within_study_scope():
    eff = effects([0.1], [0.001], [0.05], [0.15])
    pre = printed(pair(report(effects=eff), pretrained=True))
    assert pre[0].startswith("On this pretrained checkpoint (32 examples, the intervention applied at inference only)")
    assert "for this one checkpoint and data set" in pre[1] and "initialisations" not in " ".join(pre)
    within = printed(pair(report(effects=eff), within_study=True))
    assert within[-1].endswith("the study's across-seed results above are that evidence.")


def across(d, p, lo, hi):
    return pd.DataFrame({"dataset": "d", "layer": range(len(d)), "n_seeds": 3, "mean_delta": d, "sd_delta": 0.01,
                         "p_t_holm": p, "ci_low_t": lo, "ci_high_t": hi, "p_signflip_holm": 1.0,
                         "min_attainable_p": 0.25})


def study(t, n_pairs=6, seeds=(42, 99, 1001), alpha=0.05, conf="95%", has_parts=False):
    """The claims each study section makes of its frames ``t``, in the report's rank order."""
    seeds = list(seeds)
    out = St.across_seed_claims(t["across_seeds"], alpha, conf) if "across_seeds" in t else []
    if "decomposition" in t:
        out.append(direct_learned_claim(t["decomposition"], 1))
    out += list(St.scope_claims(n_runs=2 * n_pairs, n_pairs=n_pairs, seeds=seeds,
                                n_ref_seeds=len(seeds) if "across_seeds" in t else 1, has_parts=has_parts))
    if "variance_components" in t:
        out += St.convergence_claims(t["variance_components"])
    if "shared_examples" in t:
        out += St.shared_example_claims(t["shared_examples"])
    return ranked(out, St.CLAIM_ORDER)


def test_study_leads_with_the_across_seed_result():
    # the issue's demo study: layer 1's t interval [0.018, 0.171] excludes 0 while its Holm p is 0.102
    a = across([0.116, 0.094, 0.121], [0.012, 0.102, 0.107], [0.089, 0.018, -0.005], [0.144, 0.171, 0.247])
    h = printed(study(report(across_seeds=a)))
    assert h[0] == ("Across 3 seeds (seed as the unit; paired t, Holm over layers), SFM rose in layer 0 (Δ +0.116, "
                    "p_Holm = 0.012); in layer 1 the per-layer 95% interval [0.018, 0.171] excludes 0 but p_Holm = "
                    "0.102 (Holm over 3 layers); in layer 2 the 95% interval [−0.005, 0.247] includes 0.")
    assert h[1] == "Every layer's mean Δ has the same sign (+0.094 to +0.121); with 3 seeds, 1 of 3 layers reaches p_Holm < 0.05."
    assert h[2] == ("With 3 seeds the exact sign-flip test cannot reach p < 0.05 (smallest attainable p = 0.250); "
                    "the t-test leans on normality of the per-seed Δ.")
    assert not any("per-pair" in x for x in h)  # no parts, no sentence about them
    assert "within one seed each" in printed(study(report(across_seeds=a), has_parts=True))[-1]
    mixed = printed(study(report(across_seeds=a.assign(mean_delta=[0.12, -0.05, 0.01]))))
    assert not any("same sign" in x for x in mixed)
    single = printed(study(report(), seeds=[1]))
    assert "no across-seed inference is possible" in single[0]


def test_shared_examples_and_non_converged_mixed_model():
    a = across([0.1, 0.05], [0.01, 0.2], [0.05, -0.01], [0.15, 0.11])
    shared = pd.DataFrame({"dataset": "d", "layer": [0, 1], "n_examples": 32, "n_seeds": 3, "mean_r": [0.46, 0.91]})
    vc = pd.DataFrame({"layer": [0, 1], "converged": [False, True]})
    f = printed(study(report(across_seeds=a, shared_examples=shared, variance_components=vc)), "finding")
    assert f[-1] == ("All seeds were evaluated on the same 32 examples, so seeds and examples are crossed, while the "
                    "two-stage bootstrap and the mixed model treat each seed's examples as its own; the per-example Δ "
                    "correlates across seeds (mean Pearson r 0.46 to 0.91 over layers; the Fisher-z intervals, "
                    "Bonferroni over the 2 layers, exclude 0 in layers 0 and 1), so those two understate the "
                    "uncertainty from the choice of examples. The paired t across seeds does not depend on it.")
    assert f[-2] == "The mixed model did not converge in layer 0: its estimates there are not quoted."


def test_a_sample_r_whose_interval_includes_0_is_not_called_correlated():
    # issue [true-words-2]: crossed seeds with zero planted correlation were said to correlate ("mean Pearson r
    # -0.20 to 0.13 over layers") in about two thirds of null studies: any r above 0.1 fired the rule. With 40
    # examples a Fisher-z interval, Bonferroni over 2 layers, is z +- 2.24 / sqrt(37): both include 0
    shared = pd.DataFrame({"dataset": "d", "layer": [0, 1], "n_examples": 40, "n_seeds": 3, "mean_r": [-0.2, 0.13]})
    (said,) = printed(St.shared_example_claims(shared), "finding")  # the checks let exactly one wording print
    assert "correlates across seeds (" not in said and "is not shown" in said
    # under the null, over 2,000 simulated crossed studies (3 seeds, 40 examples, 4 layers) the correlation
    # sentence fires at most at its 5% share (the Bonferroni interval over layers)
    rng = np.random.default_rng(7)
    fired = 0
    for _ in range(2000):
        r = []
        for _layer in range(4):
            d = rng.standard_normal((40, 3))
            c_ = np.corrcoef(d.T)[np.triu_indices(3, 1)]
            r.append(c_.mean())
        t = pd.DataFrame({"layer": range(4), "n_examples": 40, "n_seeds": 3, "mean_r": r})
        fired += any("correlates across seeds (" in x for x in printed(St.shared_example_claims(t), "finding"))
    assert fired / 2000 <= 0.05, fired


def test_unnamed_shift_quotes_raw_and_named_key_changes():
    eff = effects([0.1, 0.02], [0.001, 0.01], [0.05, 0.01], [0.15, 0.03])
    # layer 1: unnamed mass falls by 0.08 (0.30 -> 0.22); raw SFM +0.05, named-key SFM -0.02
    masses = pd.DataFrame({"role": ["baseline"] * 2 + ["variant"] * 2, "layer": [0, 1, 0, 1],
                           "unnamed_mass": [0.10, 0.30, 0.105, 0.22], "sfm": [0.5, 0.40, 0.52, 0.45],
                           "sfm_named": [0.55, 0.60, 0.56, 0.58]})
    c = [x for x in pair(report(effects=eff, masses=masses)) if x.kind == "unnamed_shift"]
    # the accounting: 0.08 left the unnamed keys; at the baseline's named-key SFM 0.60 that is 0.08 x 0.60 = +0.048,
    # 96% of the raw +0.050 (by hand from the frame above)
    assert c[0].sentence == ("Part of the raw SFM change is attention moving to or from keys outside the named fields "
                             "(special tokens, separators, the first token): in layer 1 raw SFM changed by +0.050 "
                             "while SFM over the named keys changed by −0.020, and the mass on unnamed keys by −0.080; "
                             "at the baseline's named-key SFM (0.600) that mass alone comes to about +0.048, 96% of "
                             "the raw change.")
    # mass entering the unnamed keys while raw SFM rises: no share is claimed
    into = masses.assign(unnamed_mass=[0.10, 0.30, 0.105, 0.38])
    c = [x for x in pair(report(effects=eff, masses=into)) if x.kind == "unnamed_shift"]
    assert c[0].sentence.endswith("and the mass on unnamed keys by +0.080.")
    still = masses.assign(unnamed_mass=[0.1, 0.3, 0.105, 0.305])  # |change| <= 0.01 everywhere: not said
    (quiet,) = [x for x in pair(report(effects=eff, masses=still)) if x.kind == "unnamed_shift"]
    assert not quiet.holds  # built, and withheld by its own check (the builder no longer restates it)


def test_an_attention_sink_on_a_named_first_token_is_said():
    eff = effects([0.1, 0.02], [0.001, 0.01], [0.05, 0.01], [0.15, 0.03])
    masses = pd.DataFrame({"role": ["baseline"] * 2 + ["variant"] * 2, "layer": [0, 1, 0, 1],
                           "unnamed_mass": [0.0] * 4, "sfm": [0.5, 0.4, 0.52, 0.45], "sfm_named": [0.5, 0.4, 0.52, 0.45],
                           "first_mass": [0.10, 0.78, 0.09, 0.74]})
    rep = report(effects=eff, masses=masses)
    c = [x for x in pair(rep, first_key_fields={"title": 30, "content": 2}) if x.kind == "first_key_sink"]
    # 0.78: the largest first-key mass (baseline, layer 1); title: the first position of 30 of 32 examples
    assert c[0].sentence == ("The first token takes up to 78% of a layer's attention (layer 1, baseline; an attention "
                             "sink). It is a token of the title field in 30 of 32 examples, so for every query outside "
                             "the title field that mass counts as cross-field; the first-key column of the mass table "
                             "shows it per layer.") and c[0].rows == (1,)
    # named in 10 of 32: built, and not said (its own check withholds it)
    assert not any(x.kind == "first_key_sink" and x.holds for x in pair(rep, first_key_fields={"title": 10}))
    (rare,) = [x for x in pair(rep, first_key_fields={"title": 10}) if x.kind == "first_key_sink"]
    assert [c.name for c in rare.requires if not evaluate(c, rare.evidence, rare.design)] == [
        "the first token is named in most examples"]


def test_thirty_layers_quote_the_extremes_and_point_at_the_table():
    d = [0.05 + 0.001 * k for k in range(30)]
    d[7] = 0.2  # the largest
    d[20] = -0.01  # the smallest
    eff = effects(d, [0.001] * 30, [x - 0.01 for x in d], [x + 0.01 for x in d])
    f = printed(pair(report(effects=eff)), "finding")
    layer_lines = [x for x in f if x.startswith("Layer ")]
    assert [x.split(":")[0] for x in layer_lines] == ["Layer 7", "Layer 20"]
    assert "Per layer, for all 30 layers: the effects table; below, the layers with the largest and the smallest Δ." in f
    assert len([x for x in printed(pair(report(effects=eff.head(12))), "finding") if x.startswith("Layer ")]) == 12


def test_direct_and_learned_parts_only_with_a_bias_off_run():
    a = across([0.1, 0.05], [0.01, 0.2], [0.05, -0.01], [0.15, 0.11])
    decomp = pd.DataFrame({"seed": 1, "component": ["total"] * 2 + ["direct"] * 2 + ["learned"] * 2,
                           "layer": [0, 1] * 3, "mean_diff": [0.1, 0.05, 0.08, 0.01, 0.02, 0.04]})
    h = printed(study(report(across_seeds=a, decomposition=decomp)))
    assert ("With the bias switched off on the trained weights, the total Δ (+0.050 to +0.100 across layers) splits "
            "into a direct part, what the bias does to those weights (+0.010 to +0.080), and a learned part, what "
            "training changed (+0.020 to +0.040).") in h
    assert not any("direct part" in x for x in printed(study(report(across_seeds=a))))


def test_a_fall_that_deepened_grew_in_size_and_a_sign_change_is_a_reversal():
    # was: a fall from -0.066 to -0.227 was said to have "shrank" (read off the signed change, not the size)
    init = pd.DataFrame({"layer": [0, 1], "step_init": [1, 1], "delta_init": [-0.066, 0.05], "delta_final": [-0.227, -0.1],
                         "share_at_init": [0.29, -0.5], "share_ci_low": [0.1, -0.9], "share_ci_high": [0.45, -0.2],
                         "mean_diff": [-0.161, -0.15], "ci_low": [-0.2, -0.2],
                         "ci_high": [-0.12, -0.1], "p_holm": [0.001, 0.002],
                         # both ends distinguishable from 0 in both layers (layer 1: +0.05, then -0.1)
                         "p_holm_init": 0.001, "ci_low_init": [-0.09, 0.02], "ci_high_init": [-0.04, 0.08],
                         "p_holm_final": 0.001, "ci_low_final": [-0.3, -0.15], "ci_high_final": [-0.15, -0.05]})
    early = printed_early(P.early_claims(init, 0.05, 0))
    assert early.sentence.endswith("from then to the end it grew in layer 0 and reversed in layer 1 in size "
                                   "(p_Holm < 0.05).") and early.holds


def test_an_early_share_needs_a_difference_at_both_steps_and_a_reversal_a_sign_at_the_first():
    """Issue [true-words-2] 2: ratios of noise were stated as shares ("-65396%"), and a layer that went from exactly
    0 to +0.082 was said to have reversed. Layer 0: Δ 0 at the first step (interval [-0.01, 0.01]) and +0.082 at
    the end; layer 1: Δ indistinguishable from 0 at both steps. Neither gets a share; layer 0 grew."""
    init = pd.DataFrame({"layer": [0, 1], "step_init": 10, "delta_init": [-1e-6, 1e-5], "delta_final": [0.082, -1e-8],
                         "share_at_init": [np.nan, np.nan], "share_ci_low": np.nan, "share_ci_high": np.nan,
                         "mean_diff": [0.082, 0.0], "ci_low": [0.06, -0.01],
                         "ci_high": [0.1, 0.01], "p_holm": [0.001, 0.9], "p_holm_init": [0.9, 0.8],
                         "ci_low_init": [-0.01, -0.01], "ci_high_init": [0.01, 0.01], "p_holm_final": [0.001, 0.9],
                         "ci_low_final": [0.06, -0.01], "ci_high_final": [0.1, 0.01]})
    early = printed_early(P.early_claims(init, 0.0125, 0))
    assert early.holds and "reversed" not in early.sentence and "%" not in early.sentence
    assert early.sentence == ("At step 10, the earliest stored step, Δ is distinguishable from 0 at both that step and "
                              "the end (p_Holm < 0.0125) in no layer, so no share of the final difference is stated; "
                              "from then to the end it grew in layer 0 in size (p_Holm < 0.0125).")
    # mutations the checks catch: a share stated where the first step's Δ is noise, a reversal from a 0 start
    forged = early.evidence.assign(share_at_init=[-65396.0, np.nan])
    assert not replace(early, evidence=forged).holds
    # each layer's word is the verdict whose check holds: layer 0 grew; "reversed" from a 0 start (its first Δ not
    # told from 0, p_Holm 0.9) is withheld by its check, and so would be a reversal forged into its row
    said = {(v.rows[0], v.sentence.split(": ")[1]): v for v in early.verdicts}
    assert said[0, "grew"].holds and not said[0, "reversed"].holds and said[1, "none"].holds
    assert not replace(said[0, "grew"], evidence=said[0, "grew"].evidence.assign(delta_final=-1e-7)).holds


def test_a_share_outside_0_to_100_is_called_so_only_where_its_interval_excludes_that_range():
    """Issue [true-words-3] 1: "ranged from 100% to 100% ... (outside 0–100% in layer 0 ...)" where the planted share is
    100 % and the table's 100.3 % is noise; "outside" said of a layer planted the same at both steps. A share is
    stated with its interval, and beyond 0–100 % only where the interval excludes it; the checks read the rows."""
    base = dict(step_init=5, mean_diff=0.0, ci_low=-0.01, ci_high=0.01, p_holm=0.9, delta_init=0.1, delta_final=0.1,
                p_holm_init=0.001, ci_low_init=0.05, ci_high_init=0.15, p_holm_final=0.001, ci_low_final=0.05,
                ci_high_final=0.15)
    init = pd.DataFrame([{**base, "layer": 0, "share_at_init": 1.003, "share_ci_low": 0.97, "share_ci_high": 1.04},
                         {**base, "layer": 1, "share_at_init": -1.5, "share_ci_low": -2.1, "share_ci_high": -0.9}])
    early = printed_early(P.early_claims(init, 0.0125, 0))
    assert early.holds
    assert "beyond 0–100% in layer 1, whose interval excludes that range" in early.sentence
    assert "layer 0," not in early.sentence.split("beyond")[1]  # 100.3 % within its noise is not called beyond
    # the gates read the rows: layer 1's verdict "beyond" withheld where its interval reaches into 0-100 % (the
    # builder then does not call it beyond), and layer 0 called beyond where its interval leaves the range
    said = {(v.rows[0], v.sentence.split(": ")[1]): v for v in early.verdicts}
    assert said[1, "beyond 0–100%"].holds and said[0, "not beyond"].holds
    assert not replace(said[1, "beyond 0–100%"], evidence=said[1, "beyond 0–100%"].evidence.assign(share_ci_high=0.2)).holds
    moved = printed_early(P.early_claims(init.assign(share_ci_high=[1.04, 0.2]), 0.0125, 0))
    assert "beyond 0–100%" not in moved.sentence
    moved = printed_early(P.early_claims(init.assign(share_ci_low=[1.01, -2.1]), 0.0125, 0))
    assert "beyond 0–100% in layers 0 and 1, whose interval excludes that range" in moved.sentence
    assert not replace(early, evidence=early.evidence.assign(share_ci_low=np.nan)).holds  # a share without interval


def test_a_length_association_whose_sign_turns_is_said_as_a_turn_not_as_a_smaller_size():
    """Issue [true-words-3] 2: "|Δ| is smaller in longer examples in layers 1 and 2" where layer 1's Δ goes from
    +0.087 to -0.093 across the length bins: |Δ| hid the sign. |Δ| is said only where Δ keeps one sign in every
    bin; a turn is said as a turn; the checks read the bins' signs in the claim's rows."""
    assoc = pd.DataFrame({"layer": [1, 2], "n": 40, "rho": [-0.6, -0.5], "ci_low": [-0.8, -0.7], "ci_high": [-0.4, -0.3],
                          "p_adj": [0.001, 0.002], "capped": "exclude", "n_capped": 0})
    adj = pd.DataFrame({"layer": [1, 2], "reference_length": 30.0, "delta_at_reference": [0.01, 0.05],
                        "slope_per_10": [-0.04, -0.01]})
    bins = pd.DataFrame({"bin": [0, 1, 2, 3] * 2, "layer": [1] * 4 + [2] * 4,
                         "mean_delta": [0.087, 0.03, -0.02, -0.093, 0.08, 0.06, 0.05, 0.03]})
    la = P.length_claims(assoc, adj, 0.05, bins=bins)[1]
    assert la.holds
    assert la.sentence.endswith(": in layer 1 Δ turns from + to − as examples grow (length bins from shortest to "
                                "longest); |Δ| is smaller in longer examples in layer 2."), la.sentence
    # each layer's words are the verdict whose check holds of its row; a turn said of a layer of one sign, or |Δ| of
    # a layer that turns, is withheld by its check
    said = {(v.rows[0], v.sentence.split(": ")[1]): v for v in la.verdicts}
    assert [k for k, v in said.items() if v.holds] == [(1, "turns"), (2, "smaller")]
    assert not replace(said[1, "turns"], evidence=said[1, "turns"].evidence.assign(one_sign=True)).holds
    assert not replace(said[2, "smaller"], evidence=said[2, "smaller"].evidence.assign(one_sign=False)).holds
    # on the builder's input: layer 1's bins of one sign, its Δ +0.01 and slope -0.04: |Δ| smaller, no turn
    one = P.length_claims(assoc, adj, 0.05, bins=bins.assign(mean_delta=bins["mean_delta"].abs()))[1]
    assert one.sentence.endswith(": |Δ| is smaller in longer examples in layers 1 and 2."), one.sentence


def test_the_length_adjusted_sentence_never_prints_without_the_association_it_follows():
    """With 6 examples the association's claim is withheld (it needs 8), but its follow-up "At the median length of
    those examples Δ is ..." printed alone, naming a dependence no printed sentence had found; it is withheld by the
    same minimum now (the association's rows as length_association gives them at n = 6)."""
    assoc = pd.DataFrame({"layer": [1, 2], "n": 6, "rho": [-0.9, -0.5], "ci_low": [-0.99, -0.7],
                          "ci_high": [-0.4, -0.3], "p_adj": [0.001, 0.002], "capped": "exclude", "n_capped": 0})
    adj = pd.DataFrame({"layer": [1, 2], "reference_length": 30.0, "delta_at_reference": [0.01, 0.05],
                        "slope_per_10": [-0.04, -0.01]})
    dep, la = P.length_claims(assoc, adj, 0.05)[:2]
    assert not dep.holds and not la.holds
    assert dict(la.checks)["the association had at least 8 examples"] is False
    dep, la = P.length_claims(assoc.assign(n=8), adj, 0.05)[:2]  # at 8 both print
    assert dep.holds and la.holds
