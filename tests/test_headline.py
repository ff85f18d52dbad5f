"""The headline rules (METHODS 3.7) on constructed inputs, one test per branch."""

import pandas as pd

from routestats.studies.headline import pair_headline, study_headline


def eff(diffs, ps):
    return pd.DataFrame({"layer": range(len(diffs)), "mean_diff": diffs, "p_holm": ps})


def test_effect_in_every_layer():
    h = pair_headline(eff([0.1, 0.12, 0.05], [0.001, 0.002, 0.01]), n_examples=64)
    assert h[0] == "Within one initialisation (64 examples), SFM rose in all 3 layers (Δ +0.050 to +0.120, p_Holm ≤ 0.010)."
    assert "not the effect of the architecture across initialisations; that needs several seeds" in h[-1]


def test_effect_in_one_layer():
    h = pair_headline(eff([0.0, 0.002, 0.2], [0.5, 0.7, 0.0001]), n_examples=32)
    assert h[0] == ("Within one initialisation (32 examples), SFM rose in layer 2 (Δ +0.200, p_Holm < 0.001); "
                    "no detectable change in layers 0 and 1.")


def test_no_effect():
    h = pair_headline(eff([0.01, -0.01], [0.4, 0.6]), n_examples=16)
    assert "no layer's SFM changed detectably (p_Holm ≥ 0.05 in every layer)" in h[0]


def test_opposite_signs():
    h = pair_headline(eff([0.1, -0.08, 0.09, 0.0], [0.001, 0.003, 0.002, 0.8]), n_examples=40)
    assert h[0] == ("Within one initialisation (40 examples), SFM rose in layers 0 and 2 (Δ +0.090 to +0.100, "
                    "p_Holm ≤ 0.002); SFM fell in layer 1 (Δ −0.080, p_Holm 0.003); no detectable change in layer 3.")


def test_shape_mechanics_and_confound_sentences():
    shape = pd.DataFrame({"test": ["sign-flip (centred profile)", "Hotelling T2"], "p": [0.0004, 0.001]})
    contrasts = pd.DataFrame({"contrast": ["L1 − L0"], "mean_diff": [-0.08], "ci_low": [-0.09], "ci_high": [-0.07]})
    init = pd.DataFrame({"layer": [0, 1], "step_init": [1, 1], "share_at_init": [0.9, 1.2], "mean_diff": [0.01, -0.02],
                         "p_holm": [0.2, 0.001]})
    assoc = pd.DataFrame({"layer": [0, 1], "rho": [-0.7, -0.2], "ci_low": [-0.8, -0.4], "ci_high": [-0.6, 0.1]})
    h = pair_headline(eff([0.1, 0.02], [0.001, 0.01]), 30, shape, contrasts, init, assoc)
    assert h[1] == ("The change differs across layers (profile-shape sign-flip p < 0.001); the largest contrast is "
                    "L1 − L0 = −0.080 [−0.090, −0.070].")
    assert h[2].startswith("Already at step 1 the difference was 90–120% of its final size")
    assert h[2].endswith("training reduced it in layer 1.")
    assert h[-1] == ("The effect depends on length: the per-example Δ correlates with evaluated length (Spearman ρ "
                     "−0.70 in layer 0, where |ρ| ≥ 0.5 and the CI excludes 0), so the mean Δ depends on this "
                     "sample's lengths; see the length tables.")
    # with the length-adjusted fit, the confounded layers' change at the median length and per 10 tokens
    adj = pd.DataFrame({"layer": [0, 1], "reference_length": [48.0, 48.0], "delta_at_reference": [0.05, 0.3],
                        "slope_per_10": [-0.012, 0.5]})
    h = pair_headline(eff([0.1, 0.02], [0.001, 0.01]), 30, assoc=assoc, length_adjusted=adj)
    assert h[-1] == ("The effect depends on length: the per-example Δ correlates with evaluated length (Spearman ρ "
                     "−0.70 in layer 0, where |ρ| ≥ 0.5 and the CI excludes 0), so the mean Δ depends on this "
                     "sample's lengths; at the median length (48 tokens) Δ is +0.050, and it changes by "
                     "−0.012 per 10 tokens; see the length tables.")
    uniform = pd.DataFrame({"test": ["sign-flip (centred profile)"], "p": [0.31]})
    assert pair_headline(eff([0.1], [0.001]), 30, uniform)[1] == \
        "The change is consistent with a uniform shift across layers (profile-shape sign-flip p = 0.310)."


def test_study_leads_with_the_across_seed_result():
    across = pd.DataFrame({"layer": [0, 1, 2], "n_seeds": 3, "mean_delta": [0.12, 0.05, 0.01],
                           "p_t_holm": [0.01, 0.2, 0.9], "min_attainable_p": 0.25})
    h = study_headline(across, n_pairs=15, seeds=[42, 99, 1001])
    assert h[0] == ("Across 3 seeds (seed as the unit; paired t, Holm over layers), SFM rose in layer 0 (Δ +0.120, "
                    "p_Holm 0.010); no detectable change in layers 1 and 2.")
    # every layer positive, one significant: the headline says "no detectable change" is not "no change"
    assert h[1] == ("Every layer's mean Δ has the same sign (+0.010 to +0.120); with 3 seeds, 1 of 3 layers stay "
                    "significant after Holm.")
    assert "smallest attainable p = 0.250" in h[2]
    assert "within one seed each" in h[3]
    mixed = study_headline(across.assign(mean_delta=[0.12, -0.05, 0.01]), n_pairs=15, seeds=[42, 99, 1001])
    assert not any("same sign" in x for x in mixed)
    single = study_headline(None, n_pairs=4, seeds=[1])
    assert "no across-seed inference is possible" in single[0]
    pre = pair_headline(eff([0.1], [0.001]), 30, pretrained=True)
    assert pre[0].startswith("On this pretrained checkpoint (30 examples, the intervention applied at inference only)")
    assert "for this one checkpoint and data set" in pre[1] and "initialisations" not in " ".join(pre)
    within = pair_headline(eff([0.1], [0.001]), 30, within_study=True)
    assert within[-1].endswith("the study's across-seed results above are that evidence.")
