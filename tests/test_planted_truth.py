"""Every printed sentence of the pair report judged against planted truth (issue [true-words]).

The scenarios (``tests/planted_truth.py``) plant per-layer effects whose population signs, ties and nulls are
known in closed form; the checker reads ``claims.csv`` and the tables a user gets and shares no code with the
sentence builders. This is the fast subset; ``benchmarks/bench_claims.py`` runs the full sweep (its numbers
are in docs/methods.md).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.planted_studies import StudyScenario, run_study
from tests.planted_truth import Scenario, draw, run_scenario, summary

# a seeded draw over the ranges, plus the corners a random draw may miss
DRAWN = [draw(np.random.default_rng(7)) for _ in range(6)]
CORNERS = [
    Scenario(seed=11, n=5, effect=(1.0, -1.0, 0.0)),                          # n at the sign-flip floor
    Scenario(seed=12, n=48, effect=(0.0,) * 29 + (0.3,), bias=0.5),           # 30 layers, one effect
    Scenario(seed=13, n=40, effect=(0.3,) * 4, bias=4.0, cap=14),              # a tie at the ceiling, censored
    Scenario(seed=14, n=24, effect=(0.0, 0.3, -0.3), steps=(10, 100), causal=True, n_fields=3),
    Scenario(seed=15, n=20, effect=(0.0, 0.3, 0.0), unnamed=3),                 # examples with no named position
    Scenario(seed=16, n=40, effect=(0.0, -0.3), noise_df=1.0),                  # heavy-tailed differences
    Scenario(seed=18, n=96, effect=(0.0, 0.3, 0.0), noise_length=2.0),          # spread grows with length, no centre
    Scenario(seed=17, n=24, effect=(0.3, 0.3, 0.0), learned=(0.3, 0.0, 0.0), steps=(10, 100)),  # a bias-off split
]


def test_planted_truth_sentences_are_true_and_quote_their_cells(tmp_path):
    verdicts = []
    for i, sc in enumerate(DRAWN + CORNERS):
        v, _ = run_scenario(sc, tmp_path / str(i))
        verdicts += v
    s = summary(verdicts)
    wrong = [(v.kind, v.problems, v.sentence) for v in verdicts if not v.true]
    # the targets: at least 98 % of printed sentences true, no number that differs from its cell
    assert s["wrong_numbers"] == 0, wrong
    assert s["true_rate"] >= 0.98, wrong
    assert s["judged_by_truth"] >= 20  # the checker judged the directional claims, not only the numbers
    # issue [true-words-2]: every sentence is judged against the truth or exempt by its kind with a reason
    assert s["neither"] == 0 and s["judged_by_truth"] + s["exempt"] == s["sentences"], s


@pytest.mark.parametrize("seed, noise_length", [(101, None), (102, None), (103, None), (105, 2.0), (106, 2.0)])
def test_exact_nulls_make_no_positive_headline_claim(tmp_path, seed, noise_length):
    # an exact null (effect 0 everywhere): any rose / fell / differs / length claim is a false positive; the
    # benchmark measures their rate over 100 nulls (docs/methods.md); these seeds must make none, also where the
    # differences' spread grows with length (issue [true-words-3]: dependence that is no association; of seeds
    # 104-115 at n = 96 one, 104, made a chance length and profile claim, none without the spread)
    sc = Scenario(seed=seed, n=24 if noise_length is None else 96, effect=(0.0,) * 4, noise_length=noise_length)
    verdicts, positive = run_scenario(sc, tmp_path)
    assert positive == set()
    assert all(v.true for v in verdicts), [(v.kind, v.problems) for v in verdicts if not v.true]


def test_the_checker_catches_a_planted_lie(tmp_path):
    # the checker can fail: a rose claim on a layer whose planted effect is 0 is judged false
    sc = Scenario(seed=21, n=24, effect=(0.0, 1.0))
    lie = Scenario(seed=21, n=24, effect=(0.0, 0.0))  # the same runs judged against a truth of no effect
    verdicts, _ = run_scenario(sc, tmp_path / "a")
    from tests.planted_truth import judge
    lied = judge(tmp_path / "a" / "out", lie, tmp_path / "a" / "runs")
    assert all(v.true for v in verdicts)
    assert any("planted effect is +0" in p for v in lied for p in v.problems)
    # silence fails: the same report with its answer withheld, and with a layer dropped from the answer's words
    claims = pd.read_csv(tmp_path / "a" / "out" / "claims.csv")
    answer = claims.index[claims["kind"].isin(["rose", "fell", "mixed", "no_evidence"]) & claims["printed"]][0]
    claims.loc[answer, "printed"] = False
    claims.to_csv(tmp_path / "a" / "out" / "claims.csv", index=False)
    quiet = judge(tmp_path / "a" / "out", sc, tmp_path / "a" / "runs")
    assert any("0 direction answers in the headline" in p for v in quiet for p in v.problems)
    claims.loc[answer, "printed"] = True
    said = claims.loc[answer, "sentence"]
    claims.loc[answer, "sentence"] = said.replace("SFM rose in layer 1 (", "SFM rose in layer 0 (")
    claims.to_csv(tmp_path / "a" / "out" / "claims.csv", index=False)
    moved = judge(tmp_path / "a" / "out", sc, tmp_path / "a" / "runs")
    problems = [p for v in moved for p in v.problems]
    assert any("layer 1's row says 'rose'" in p for p in problems), (said, problems)
    assert any("layer 0 'both' disagrees with its row" in p for p in problems), problems  # said rose and includes


def test_a_less_than_is_licensed_by_the_p_it_quotes_not_any_smaller_cell():
    # issue [true-words-2]: "p_Holm < 0.001" beside a row whose p is 0.935 passed (a Δ of 0.0004 was "smaller")
    from tests.planted_truth import Verdict, check_numbers

    rows = pd.DataFrame({"layer": [2], "mean_diff": [0.0004], "p_holm": [0.935], "p_holm_floor": [0.0001]})
    bad = Verdict("layer_effect", "finding", "")
    check_numbers(bad, "Layer 2: Δ +0.0004, p_Holm < 0.001.", rows, {})
    assert not bad.true
    good = Verdict("layer_effect", "finding", "")
    check_numbers(good, "Layer 2: Δ +0.0004, p_Holm < 0.001.", rows.assign(p_holm=0.0002), {})
    assert good.true, good.problems


STUDIES = [
    StudyScenario((1, 2, 3), 16, (0.0, 0.3, -0.3)),            # 3 seeds: the exact sign-flip floor 0.25 > alpha
    StudyScenario(tuple(range(1, 9)), 12, (0.0, 0.0, 0.3, 0.3)),  # 8 seeds, a two-layer effect
    StudyScenario((4, 5, 6, 7, 8), 8, (0.0,) * 3, bias=4.0),    # a null at the ceiling, floor 2/2^5
]


def test_planted_truth_study_sentences(tmp_path):
    verdicts = []
    for i, sc in enumerate(STUDIES):
        verdicts += run_study(sc, tmp_path / str(i))
    s = summary(verdicts)
    wrong = [(v.kind, v.problems, v.sentence) for v in verdicts if not v.true]
    assert s["wrong_numbers"] == 0 and s["true_rate"] >= 0.98, wrong
    kinds = {v.kind for v in verdicts}
    # the planted seeds draw their own examples: never "crossed"; the rules of the seed table recomputed here
    assert {"examples_nested", "patterns", "signflip_floor", "counts"} <= kinds and "shared_examples" not in kinds


def test_the_missed_change_judge_catches_a_size_the_test_would_see():
    from tests.planted_truth import Verdict, missed_change_numbers

    rows = pd.DataFrame({"layer": [1], "sd_diff": [0.03]})
    # statsmodels: TTestPower().power(0.0149 / 0.03, nobs=32, alpha=0.05) = 0.78 (below 0.8: the sentence is true)
    ok = Verdict("missed_change", "headline", "")
    said = "With 32 examples, a change in layer 1's SFM smaller than 0.0149 would be missed ... at α 0.05 (normal"
    assert missed_change_numbers(ok, said, rows) == [0.0149, 0.8] and ok.true
    bad = Verdict("missed_change", "headline", "")  # mutation: a size the t-test sees 99% of the time
    missed_change_numbers(bad, said.replace("0.0149", "0.0230"), rows)
    assert not bad.true


def test_every_kind_is_judged_or_exempt_and_the_design_kinds_can_fail():
    # issue [true-words-2]: a kind the checker has no judgement for and no exemption is a false sentence (a new
    # sentence kind must be judged before it ships); the kinds judged by the scenario's design fail on a lie
    from tests.planted_truth import EXEMPT, Verdict, judge_design, settle

    assert "neither judged" in settle(Verdict("brand_new_kind", "headline", "Layer 0 is special.")).problems[0]
    assert settle(Verdict("layer_effect", "findings", "Layer 0: ...")).exempt == EXEMPT["layer_effect"]
    lies = {  # kind: (a true sentence, the same sentence made false)
        "scope": ("These p-values measure precision within one model (examples as the unit), not the effect of "
                  "the architecture across initialisations; that needs several seeds.",
                  "These p-values measure the effect of the architecture across 3 seeds."),
        "early_share": ("... the change from then to the end reaches p_Holm < 0.0125 in no layer.",
                        "... the change from then to the end reaches p_Holm < 0.0125 in layers 1 and 2."),
        "needs_bias_off": ("Whether an early difference is what the bias does ... is not shown by this design: ...",
                           "The early difference is what the bias does to near-initial weights."),
        "small_sample_intervals": ("With 5 examples the per-layer 95% intervals are narrower than their label",
                                   "With 6 examples the per-layer 95% intervals are narrower than their label"),
    }
    # the bias-off design: a split only beside its evaluation, and no "would split it" beside one
    lone = Verdict("direct_learned", "headline", "With the bias switched off ...")
    judge_design(lone, lone.sentence, 5, bias_off=False)
    beside = Verdict("needs_bias_off", "headline", lies["needs_bias_off"][0])
    judge_design(beside, beside.sentence, 5, bias_off=True)
    assert not lone.true and not beside.true
    for kind, (true, false) in lies.items():
        ok, lie = Verdict(kind, "headline", true), Verdict(kind, "headline", false)
        judge_design(ok, true, 5)
        judge_design(lie, false, 5)
        assert ok.true and ok.judged_by_truth, (kind, ok.problems)
        assert not lie.true, kind


def test_heavy_tailed_scenarios_have_heavy_tails_and_keep_their_truth(tmp_path):
    # synthetic_pair(noise_df=1): each run's extra noise of an example scaled by sqrt(1 / chi2(1)) (Student t's
    # scale mixture). The per-example differences of an exact null get heavier tails than the normal case's
    # (scipy's excess kurtosis, an independent estimate) and stay centred on 0 (exchangeable runs)
    from scipy import stats

    import routestats as rs

    def deltas(df):
        runs = Scenario(seed=31, n=300, effect=(0.0,), noise_df=df).write(tmp_path / str(df))
        pair = rs.pair(rs.load_run(runs / "baseline"), rs.load_run(runs / "saab"))
        return rs.paired_differences(pair)["diff"].to_numpy()

    normal, heavy = deltas(None), deltas(1.0)
    # measured: excess kurtosis 5.0 (normal; the lengths already mix scales) and 33 (1 df)
    assert stats.kurtosis(heavy) > stats.kurtosis(normal) + 10, (stats.kurtosis(normal), stats.kurtosis(heavy))
    assert stats.wilcoxon(heavy).pvalue > 0.01  # centred on 0 (the null is exact)


def test_a_withheld_split_beside_a_bias_off_evaluation_fails(tmp_path):
    # silence fails: the report of a pair with its bias-off evaluation, its direct/learned sentence withheld
    from tests.planted_truth import judge

    sc = CORNERS[-1]
    assert sc.learned is not None
    verdicts, _ = run_scenario(sc, tmp_path)
    assert any(v.kind == "direct_learned" and v.true and v.judged_by_truth for v in verdicts)
    claims = pd.read_csv(tmp_path / "out" / "claims.csv")
    claims.loc[claims["kind"] == "direct_learned", "printed"] = False
    claims.to_csv(tmp_path / "out" / "claims.csv", index=False)
    quiet = judge(tmp_path / "out", sc, tmp_path / "runs")
    assert any("does not split the change" in p for v in quiet for p in v.problems)
