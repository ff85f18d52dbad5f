"""The report kinds of routestats.compose: sections own their claims, preconditions are computed and
can fail, a renamed table fails loudly, the MoFA tables are computed once, and a new section with one
table and one sentence is one function.

Every mutation below changes the rows a claim cites (or a design value it relies on) the way a
different data set would, and the expected verdicts are read off the changed rows by hand.
"""

from __future__ import annotations

import re

from dataclasses import replace

import pandas as pd
import pytest

import routestats as rs
from routestats.compose.claims import direct_learned_claim, direction_claim, profile_claims
from routestats.compose.pair import claims as P
from routestats.compose.study import claims as St
from routestats.claim import Check, Claim, evaluate
from routestats.report import Section, Table, section
from routestats.rundir.synthetic import demo_run_dir

FAST = dict(resamples=200, permutations=200, length_resamples=50)


def rows(claim: Claim, **cols) -> Claim:
    """``claim`` with some cited cells changed (a dict value: {row position: new value})."""
    ev = claim.evidence.copy()
    for col, v in cols.items():
        if isinstance(v, dict):
            for i, x in v.items():
                ev.iloc[i, ev.columns.get_loc(col)] = x
        else:
            ev[col] = v
    return replace(claim, evidence=ev)


def design(claim: Claim, **kv) -> Claim:
    return replace(claim, design={**claim.design, **kv})


def failing(claim: Claim) -> list[str]:
    return [name for name, ok in claim.checks if not ok]


def effects():
    # layer 0 rose (p 0.001, CI [0.05, 0.15]); layer 1 fell; layer 2's interval excludes 0 at p 0.2; layer 3 includes 0
    return pd.DataFrame({"layer": [0, 1, 2, 3], "d": [0.1, -0.08, 0.03, 0.0], "p": [0.001, 0.002, 0.2, 0.8],
                         "lo": [0.05, -0.1, 0.01, -0.01], "hi": [0.15, -0.05, 0.06, 0.01]})


def answer(t=None):
    return direction_claim(effects() if t is None else t, "Lead", est="d", p="p", lo="lo", hi="hi", alpha=0.05,
                           metric="SFM", table="effects", conf="95%")


def test_the_direction_claim_holds_and_each_mutation_of_its_rows_withholds_it():
    c = answer()
    assert c.kind == "mixed" and c.holds
    # each layer's word is the one verdict of its four that holds (routestats.claim.verdicts): rose, fell, excludes,
    # includes for layers 0-3 as effects() plants them
    held = [(v.rows[0], v.sentence.split(": ")[1]) for v in c.verdicts if v.holds]
    assert held == [(0, "rose"), (1, "fell"), (2, "excludes"), (3, "includes")] and len(c.verdicts) == 16
    said = {(v.rows[0], v.sentence.split(": ")[1]): v for v in c.verdicts}
    assert failing(rows(said[0, "rose"], p=0.3)) == ["rose: p_holm < alpha and ci_low > 0"]  # raise a p-value
    assert failing(rows(said[1, "fell"], hi=0.02)) == ["fell: p_holm < alpha and ci_high < 0"]  # flip an interval
    assert failing(rows(said[2, "excludes"], p=0.01)) == ["excludes 0 without p_holm < alpha"]
    assert failing(rows(said[3, "includes"], lo=0.001)) == ["includes 0: ci_low <= 0 <= ci_high"]
    # and on the builder's input: layer 0's p raised to 0.3, its interval [0.05, 0.15] still excludes 0
    again = answer(effects().assign(p=[0.3, 0.002, 0.2, 0.8]))
    assert again.evidence["asserted"].tolist() == ["excludes", "fell", "excludes", "includes"] and again.holds
    assert "in layer 0 the per-layer 95% interval [0.050, 0.150] excludes 0 but p_Holm = 0.300" in again.sentence
    dropped = replace(c, evidence=c.evidence.iloc[:3])  # drop a row: layer 3 is no longer described (nor one row)
    assert failing(dropped) == ["every layer of the table is described", "one row per layer: the words name layers"]


def test_an_answer_over_a_layer_held_twice_is_withheld_not_said_twice():
    """An across-seed table of two data sets holds layer 3 twice, rising in one and not in the other: the answer,
    whose words name layers and not data sets, said "rose in layer 3 (...); in layer 3 the 95% interval ... includes
    0" and printed (reviewer's reproduction); it is withheld now, one data set's table still answers."""
    t = pd.DataFrame({"dataset": ["A", "B"], "layer": [3, 3], "d": [0.1, 0.0], "p": [0.001, 0.6],
                      "lo": [0.05, -0.02], "hi": [0.2, 0.03]})
    both = answer(t)
    assert not both.holds and failing(both) == ["one row per layer: the words name layers"]
    assert answer(t.iloc[:1]).holds and answer(t.iloc[:1]).kind == "rose"


def test_every_claim_kind_with_preconditions_is_withheld_when_they_fail():
    seen = set()

    def withheld(c):
        assert not c.holds, c.kind
        seen.add(c.kind)

    # profile shape: p 0.0004 < 0.05 differs; raised to 0.3 it does not
    # both wordings are built from the same row and the checks choose (issue [honest-gates]): the other is withheld
    shape = pd.DataFrame({"test": ["sign-flip (centred profile)"], "p": [0.0004]})
    built = {c.kind: c for c in P.shape_claims(shape, None, 0.05, "95%")}
    differs = built["differs_across_layers"]
    assert differs.holds and not built["no_evidence_shape"].holds
    withheld(rows(differs, p=0.3))
    built = {c.kind: c for c in P.shape_claims(shape.assign(p=0.31), None, 0.05, "95%")}
    uniform = built["no_evidence_shape"]
    assert uniform.holds and not built["differs_across_layers"].holds
    withheld(rows(uniform, p=0.01))
    # unnamed mass: layer 1 loses 0.08 (0.30 -> 0.22); a change of 0.005 is not worth saying
    masses = pd.DataFrame({"role": ["baseline"] * 2 + ["variant"] * 2, "layer": [0, 1, 0, 1],
                           "unnamed_mass": [0.1, 0.3, 0.1, 0.22], "sfm": [0.5, 0.4, 0.5, 0.45],
                           "sfm_named": [0.55, 0.6, 0.55, 0.58], "first_mass": [0.1, 0.78, 0.09, 0.74]})
    u = P.unnamed_claims(masses)[0]
    withheld(rows(u, unnamed_change=0.005))
    learned = P.learned_sink_claims(masses.assign(sink_mass=[0.05, 0.09, 0.04, 0.08]))[0]
    assert learned.holds and "4–9%" in learned.sentence  # the sinks' share, lowest (0.04) to highest (0.09)
    withheld(rows(learned, sink_mass=0.001))
    sink = P.sink_claims(masses, {"title": 30}, 32)[0]
    withheld(rows(sink, first_mass=0.1))
    withheld(design(sink, first_named=10))
    # the early share: layer 1 shrank (p 0.001, CI [-0.03, -0.01]); its p raised to 0.4 it did not
    init = pd.DataFrame({"layer": [0, 1], "step_init": [1, 1], "share_at_init": [0.9, 1.2], "mean_diff": [0.01, -0.02],
                         "share_ci_low": [0.7, 1.05], "share_ci_high": [1.1, 1.4],
                         "ci_low": [-0.01, -0.03], "ci_high": [0.03, -0.01], "p_holm": [0.2, 0.001],
                         "delta_init": [0.09, 0.12], "delta_final": [0.1, 0.1], "p_holm_init": 0.001,
                         "ci_low_init": [0.05, 0.08], "ci_high_init": [0.13, 0.16], "p_holm_final": 0.001,
                         "ci_low_final": 0.05, "ci_high_final": 0.15})
    none, early, needs = P.early_claims(init, 0.05, 0)  # both wordings of the first part are built
    assert early.holds and not none.holds and none.sentence.startswith("At step 1, the earliest stored step, Δ is")
    # each layer's words are its verdicts that hold: layer 0 within 0-100 % and not decided at the end (p 0.2),
    # layer 1 beyond (interval [1.05, 1.4]) and shrank (|-0.02 ... 0.1| < 0.12, the same sign)
    said = {(v.rows[0], v.sentence.split(": ")[1]): v for v in early.verdicts}
    assert [k for k, v in said.items() if v.holds] == [(0, "not beyond"), (1, "beyond 0–100%"), (0, "none"),
                                                       (1, "shrank")]
    withheld(rows(said[1, "shrank"], p_holm=0.4))
    withheld(rows(said[1, "beyond 0–100%"], share_ci_low=0.95))  # its interval reaches into 0-100%: not beyond
    withheld(rows(said[0, "not beyond"], share_ci_high=-0.1))  # its interval now excludes 0-100%: it is beyond
    withheld(rows(early, p_holm_init={0: 0.3}))  # a share stated where the first step's Δ is not told from 0
    withheld(rows(early, ci_low_final={1: -0.01}))  # ... or the final one's
    withheld(design(needs, bias_off_runs=1))
    decomp = pd.DataFrame({"component": ["total", "direct", "learned"], "layer": [0] * 3, "mean_diff": [0.1, 0.08, 0.02]})
    dl = direct_learned_claim(decomp, 1)
    assert dl.holds
    withheld(design(dl, bias_off_runs=0))
    withheld(rows(dl, total=0.2))  # total no longer direct + learned
    withheld(design(P.scope_claim(False, False, 32), n_examples=1))
    withheld(design(P.censoring_claims({"n_capped": 3, "n": 20, "cap": 64}, True)[0], n_capped=0))
    assoc = pd.DataFrame({"layer": [0, 1], "n": [20, 20], "rho": [-0.7, -0.6], "ci_low": [-0.8, -0.75],
                          "ci_high": [-0.6, -0.3], "p_adj": [0.001, 0.02], "capped": ["include"] * 2, "n_capped": [0, 0]})
    dep = P.length_claims(assoc, None, 0.05)[0]
    assert dep.kind == "depends_on_length" and dep.holds
    named = {v.rows[0]: v for v in dep.verdicts}  # the layers it names: those whose verdict holds
    withheld(rows(named[1], p_adj=0.3))  # a raised p_Holm
    withheld(rows(named[1], ci_low=-0.9, ci_high=0.2))  # an interval that includes 0
    assert "in layers 0 and 1;" in dep.sentence and "in layer 0;" in P.length_claims(
        assoc.assign(p_adj=[0.001, 0.3]), None, 0.05)[0].sentence  # on the builder's input, layer 1 is not named
    withheld(rows(dep, n=5))
    # five examples: the exact sign-flip floor 2/2^5 = 0.0625, times 4 layers after Holm = 0.25 >= alpha
    eff5 = pd.DataFrame({"layer": range(4), "mean_diff": [0.1] * 4, "p_holm": 0.25, "ci_low": 0.05, "ci_high": 0.2,
                         "baseline_mean": 0.5, "variant_mean": 0.6, "dz": 1.0, "n": 5, "p_holm_floor": 0.25})
    c5 = {c.kind: c for c in P.effects_claims(eff5, n_examples=5, pretrained=False, alpha=0.05, confidence=0.95,
                                              permutations=9999)}
    assert c5["pair_floor"].holds and "smallest attainable p_Holm is 0.250 (about 4 × 2/2^5)" in c5["pair_floor"].sentence
    assert "p_Holm = 0.250, the smallest attainable with 5 examples" in c5["no_evidence"].sentence
    withheld(design(c5["pair_floor"], floor=0.01))
    # 32 examples, layer 1 not called: the change its test would miss, (1.960 + 0.842) x 0.03 / sqrt(32) = 0.0149
    # and layer 2 (SD 0.04): 2.802 x 0.04 / sqrt(32) = 0.0198; printed rounded down ("smaller than" stays true);
    # sized from the SD's lower bound (sd_diff_low), never the sample SD (0.05 here, which would give 0.024)
    eff32 = pd.DataFrame({"layer": [0, 1, 2], "mean_diff": [0.1, 0.004, 0.002], "p_holm": [0.001, 0.4, 0.5],
                          "ci_low": [0.05, -0.01, -0.01], "ci_high": [0.2, 0.02, 0.02], "baseline_mean": 0.5,
                          "variant_mean": 0.6, "dz": 1.0, "n": 32, "sd_diff": 0.05, "sd_diff_low": [0.03, 0.03, 0.04],
                          "p_holm_floor": 3 / 10000})  # 3 layers x 1/(9999 + 1): the draws' floor
    mc = {c.kind: c for c in P.effects_claims(eff32, n_examples=32, pretrained=False, alpha=0.05, confidence=0.95,
                                              permutations=9999)}["missed_change"]
    assert mc.holds and mc.rows == (1, 2) and "smaller than 0.014 (layer 1) to 0.019 (layer 2)" in mc.sentence
    sized = {v.rows[0]: v for v in mc.verdicts}  # the layers it sizes: those whose verdict (not called) holds
    assert [k for k, v in sized.items() if v.holds] == [1, 2]
    withheld(rows(sized[1], p_holm=0.001, ci_low=0.001))  # layer 1 called changed after all: its verdict withheld
    withheld(design(mc, floor=0.5))  # the test cannot reach alpha: the floor's sentence says it instead
    eff30 = pd.DataFrame({"layer": range(30), "mean_diff": [0.01] * 30, "p_holm": 0.001, "ci_low": 0.005,
                          "ci_high": 0.02, "baseline_mean": 0.5, "variant_mean": 0.51, "dz": 1.0})
    listed = P.effect_findings(eff30, "95%")[0]
    withheld(replace(listed, evidence=listed.evidence.iloc[:12]))
    # study: three seeds, every mean Δ positive, layer 1 not reaching alpha, a floor of 0.25 above alpha
    across = pd.DataFrame({"dataset": "d", "layer": [0, 1], "n_seeds": 3, "mean_delta": [0.1, 0.05], "sd_delta": 0.01,
                           "p_t_holm": [0.01, 0.2], "ci_low_t": [0.05, -0.01], "ci_high_t": [0.15, 0.11],
                           "p_signflip_holm": 1.0, "min_attainable_p": 0.25})
    st = {c.kind: c for c in St.across_seed_claims(across, 0.05, "95%")}
    withheld(rows(st["same_sign"], mean_delta={1: -0.05}))
    withheld(rows(st["same_sign"], p_t_holm=0.01))
    withheld(rows(st["signflip_floor"], min_attainable_p=0.002))
    withheld(rows(St.convergence_claims(pd.DataFrame({"layer": [0], "converged": [False]}))[0], converged=True))
    shared = pd.DataFrame({"layer": [0], "n_examples": [32], "mean_r": [0.4]})
    withheld(rows(St.shared_example_claims(shared)[0], mean_r=float("nan")))
    scope = {c.kind: c for c in St.scope_claims(n_runs=4, n_pairs=2, seeds=[1], n_ref_seeds=1, has_parts=True)}
    withheld(design(scope["no_across_seed"], n_ref_seeds=2))
    withheld(design(scope["parts_scope"], has_parts=False))
    # MoFA: the worst-vs-best test can reach alpha (min p 0.03); with a floor of 0.25 it cannot
    from routestats.compose.mofa.build import worst_best_claims

    wb = pd.DataFrame({"stratum": ["a"], "p_raw": [0.01], "min_attainable_p": [0.03], "n_seeds": [5]})
    withheld(rows(worst_best_claims(wb, 0.05, "t")[0], min_attainable_p=0.25))
    floor = worst_best_claims(wb.assign(min_attainable_p=0.25), 0.05, "t")[1]
    withheld(rows(floor, min_attainable_p=0.03))
    # the highest layer: layer 1 above layer 0 in every example (by 0.1 +- 0.01), a tie when they trade places
    lay = pd.DataFrame({"role": ["baseline"] * 2, "layer": [0, 1], "sfm": [0.5, 0.6]})
    per = pd.DataFrame({"example_id": list(range(8)) * 2, "layer": [0] * 8 + [1] * 8,
                        "baseline": [0.5] * 8 + [0.59, 0.61] * 4, "variant": 0.5})
    from routestats.settings import Resampling
    from routestats.studies.effects import highest_layers

    r = Resampling(resamples=500, permutations=999)
    built = {c.kind: c for c in profile_claims(highest_layers(lay, per, r))}  # both wordings; the checks choose
    top = built["highest_layer"]
    assert not built["highest_tie"].holds
    # 8 examples all of one sign: sign-flip p = 2/2^8 ~ 0.0078 (one other layer, so no Bonferroni factor)
    assert top.kind == "highest_layer" and top.holds and "the closest is layer 0, by +0.100" in top.sentence
    withheld(rows(top, ci_low=-0.01))
    withheld(rows(top, p_adj=0.2))
    built = {c.kind: c for c in profile_claims(highest_layers(lay.assign(sfm=[0.5, 0.5001]),
                                                              per.assign(baseline=[0.5, 0.49] * 4 + [0.49, 0.5] * 4), r))}
    tie = built["highest_tie"]
    assert not built["highest_layer"].holds
    assert tie.kind == "highest_tie" and tie.holds and "no layer is distinguishable as the highest" in tie.sentence
    withheld(rows(tie, ci_low=0.01, p_adj=0.001, above_all=True))
    # the largest contrast is said only beside a profile-shape test that rejects a uniform shift
    contrasts = pd.DataFrame({"contrast": ["L1 − L0"], "layer_a": [0], "layer_b": [1], "mean_diff": [0.1],
                              "ci_low": [0.05], "ci_high": [0.15]})
    largest = {c.kind: c for c in P.shape_claims(shape, contrasts, 0.05, "95%")}["largest_contrast"]
    assert largest.kind == "largest_contrast" and largest.holds
    withheld(design(largest, p=0.3))
    adjusted = pd.DataFrame({"layer": [0, 1], "reference_length": [20, 20], "delta_at_reference": [0.1, 0.2],
                             "slope_per_10": [0.01, 0.02]})
    la = P.length_claims(assoc, adjusted, 0.05)[1]
    assert la.kind == "length_adjusted" and la.holds
    withheld(replace(la, evidence=la.evidence.iloc[:0]))
    small = P.small_sample_claims(6, 0.95)[0]
    assert "about 87% of samples from a normal population" in small.sentence  # bench_coverage.py, n = 6
    withheld(design(small, n_used=40))
    # claims that quote a table are withheld when what they quote is undefined (a NaN would print as "nan")
    eff2 = pd.DataFrame({"layer": [0, 1], "mean_diff": [0.1, 0.02], "p_holm": [0.001, 0.2], "ci_low": [0.05, -0.01],
                         "ci_high": [0.15, 0.05], "baseline_mean": 0.5, "variant_mean": 0.6, "dz": 1.0})
    withheld(rows(next(c for c in P.effect_findings(eff2, "95%") if c.kind == "layer_effect"), mean_diff=float("nan")))
    dist = pd.DataFrame({"profile_distance": [0.2], "ci_low": [0.1], "ci_high": [0.3]})
    withheld(rows(P.distance_claims(dist)[0], ci_low=float("nan")))
    one = profile_claims(pd.DataFrame({"role": ["baseline"], "layer": [3], "sfm": [0.5], "layers": [1]}))[0]
    assert one.kind == "highest_layer" and one.holds and "One layer in the baseline: layer 3" in one.sentence
    withheld(rows(one, layers=2))  # several layers without a runner-up (no per-example values): nothing is said
    across_seed = {c.kind: c for c in St.across_seed_claims(across, 0.05, "95%")}
    withheld(rows(across_seed["seed_layer"], mean_delta=float("nan")))
    seeds = pd.DataFrame({"seed": [1, 2], "pattern": ["Gap narrows", "Small change"]})
    pat = St.pattern_claims(seeds)[0]
    assert pat.holds
    withheld(rows(pat, pattern=float("nan")))
    withheld(replace(pat, evidence=seeds.iloc[:1]))
    counts = [c for c in St.scope_claims(n_runs=4, n_pairs=2, seeds=[1], n_ref_seeds=1, has_parts=True)
              if c.kind == "counts"][0]
    assert not counts.requires and counts.because  # a constant is a because= (issue [honest-gates]), not a check
    nc = St.null_check_claims({"max_abs_diff": 1e-8, "passes": True, "tolerance": 1.2e-7})[0]
    assert nc.holds
    withheld(design(nc, max_abs_diff=float("nan")))
    assert seen >= {"layer_effect", "profile_distance", "seed_layer", "patterns", "null_check"}
    assert seen >= {"differs_across_layers", "no_evidence_shape", "unnamed_shift", "first_key_sink", "early_share",
                    "needs_bias_off", "direct_learned", "scope", "censoring", "depends_on_length",
                    "layers_listed", "pair_floor", "highest_layer", "highest_tie", "largest_contrast", "length_adjusted",
                    "small_sample_intervals", "same_sign", "signflip_floor", "mixed_not_converged", "shared_examples",
                    "no_across_seed", "parts_scope", "worst_best", "floor", "missed_change"}


def test_seeds_with_the_same_ids_but_other_texts_are_not_called_crossed(tmp_path):
    # was: "All seeds were evaluated on the same 6 examples, so seeds and examples are crossed" when each seed's
    # synthetic pair drew its own texts under the same ids; the truth here: content hashes differ in every example
    from routestats.rundir.synthetic import synthetic_pair

    for s in (1, 2, 3):
        synthetic_pair(tmp_path / f"seed{s}", seed=s, n_examples=6)
    rep = rs.analyse(tmp_path, resamples=100, permutations=100)
    kinds = {c.kind: c for c in rep.claims}
    assert "shared_examples" not in kinds and "shared_examples" not in rep.tables()
    nested = kinds["examples_nested"]
    assert nested.holds and "share their 6 example ids but not their contents (6 differ" in nested.sentence
    assert not replace(nested, design={"differ": 0}).holds


def test_no_precondition_is_a_literal_and_a_reason_is_not_a_check():
    # every check is an expression over rows or design values; a check over nothing is refused by evaluate
    assert not evaluate(Check("rows present", "rows >= 1", on="design"), pd.DataFrame(), {})
    with pytest.raises(ValueError):
        Check("bad", "True", every="most")
    c = P.scope_claim(False, False, 32)
    assert c.because == ("examples are the unit",) and [n for n, _ in c.checks] == ["at least 2 paired examples"]


def test_the_demo_reports_claims_come_from_their_sections():
    rep = rs.analyse(demo_run_dir(), **FAST)
    own = [c for s in rep.sections for c in s.claims]
    assert set(map(id, own)) | set(map(id, rep.scope)) == set(map(id, rep.claims))
    for s in rep.sections:  # a section's claims cite its own tables (or none)
        names = {t.name for t in s.tables}
        assert all(c.table in names or c.table == "" for c in s.claims), s.id
    # layers, profile shape, length and the change from the earliest step: four families share α
    assert rep.headline[0].startswith("Within one initialisation (32 examples; α 0.05 shared by 4 headline families")


def test_a_renamed_table_fails_loudly(monkeypatch):
    from routestats.compose.pair import sections as secs

    original = secs.effects_section

    @section("effects", "Paired SFM effects")
    def renamed(ctx):
        s = original(ctx)
        return replace(s, tables=tuple(replace(t, name="paired_effects") for t in s.tables))

    monkeypatch.setattr(secs, "effects_section", renamed)
    with pytest.raises(ValueError, match="cites table 'effects'"):
        rs.analyse(demo_run_dir(), **FAST)


def test_mofa_tables_are_computed_once(tmp_path, monkeypatch):
    from routestats.compose.mofa import build as mofa
    from tests.conftest import synthetic_mofa_tree

    calls = []
    real = mofa.worst_vs_best
    monkeypatch.setattr(mofa, "worst_vs_best", lambda *a, **k: calls.append(1) or real(*a, **k))
    synthetic_mofa_tree(tmp_path / "mofa")
    rep = rs.analyse(tmp_path / "mofa", **FAST)
    assert "worst_best" in rep.tables() and len(calls) == 1


def test_a_new_section_with_one_table_and_one_sentence_is_one_function():
    """What a new section touches: this function and one registry line (docs/architecture.md)."""
    from routestats.compose.pair.sections import register_section, unregister_section

    @section("toy", "Toy: layers with more than half their attention same-field")
    def toy(ctx):
        t = ctx.layers[ctx.layers["sfm"] > 0.5][["role", "layer", "sfm"]]
        n = int((t["role"] == "variant").sum())
        claim = Claim("toy", f"{n} of {ctx.n_layers} layers of the variant keep most attention within the field.",
                      "finding", "toy", requires=(Check("the count is the table's", f"rows == {n}", "role == 'variant'",
                                                        on="design"),), evidence=t)
        return Section("toy", "Toy", (Table("toy", t),), claims=(claim,))

    register_section(toy)
    try:
        rep = rs.analyse(demo_run_dir(), **FAST)
    finally:
        unregister_section("toy")
    n = int(((rep.frame("layers")["role"] == "variant") & (rep.frame("layers")["sfm"] > 0.5)).sum())
    assert f"{n} of 4 layers of the variant keep most attention within the field." in rep.findings
    assert "toy" in rep.tables() and rep.claims_frame().query("kind == 'toy'")["printed"].tolist() == [True]


def mutations(c: Claim):
    """Generic falsifications of a claim's inputs: its cited numbers undefined, flipped or shifted (all rows, or
    the first row alone), its labels undefined or set to each value its checks' ``where`` clauses name, its rows
    dropped or doubled, each design value undefined, zero, flipped or shifted."""
    ev = c.evidence
    if ev is not None:
        num = ev.select_dtypes("number").columns
        for f in (lambda x: x * float("nan"), lambda x: -x, lambda x: x + 1.0, lambda x: pd.Series(2.0, index=x.index),
                  lambda x: pd.Series(-2.0, index=x.index)):
            yield replace(c, evidence=ev.assign(**{k: f(ev[k].astype(float)) for k in num}))
        if len(ev) > 1:  # one row against the others: "every row the same sign" can fail
            first = ev.copy()
            first.loc[first.index[0], num] = -first.loc[first.index[0], num].astype(float)
            yield replace(c, evidence=first)
        for k in ev.columns:
            if ev[k].dtype == bool:
                yield replace(c, evidence=ev.assign(**{k: ~ev[k]}))
            elif not pd.api.types.is_numeric_dtype(ev[k]):  # a label column (object or string): undefined, or empty
                yield replace(c, evidence=ev.assign(**{k: None}))  # (a row its verdicts gave no word)
                yield replace(c, evidence=ev.assign(**{k: ""}))
        for col, value in {m for check in c.requires for m in re.findall(r"(\w+) == '([^']*)'", check.where)}:
            if col in ev:  # rows relabelled to what a conditional check applies to
                yield replace(c, evidence=ev.assign(**{col: value}))
        yield replace(c, evidence=ev.iloc[:0])
        yield replace(c, evidence=pd.concat([ev, ev]))
    for k, v in c.design.items():
        for w in (float("nan"), 0, -1, 10**6, -v if isinstance(v, (int, float)) else v):
            yield design(c, **{k: w})


def test_every_claim_of_every_report_kind_has_a_precondition_that_can_fail(tmp_path):
    # the claims as the six report kinds build them (demo pair and study, a single run, a MoFA tree, a regime
    # run, a cross-architecture comparison): every claim kind has computed preconditions, and some change of its cited rows or design withholds it
    from routestats.compose.regime.build import build_regime_report
    from routestats.rundir.synthetic import synthetic_pair
    from routestats.settings import AnalysisSettings
    from tests.conftest import synthetic_mofa_tree
    from tests.test_regime_report import comparison_tree, write_points

    b, _ = synthetic_pair(tmp_path / "pair", seed=2, n_examples=10, effect=(0.0, 0.3, -0.3, 0.0), exact_null=True)
    kw = dict(resamples=300, permutations=300, length_resamples=100, flow="off")
    reports = [rs.analyse(demo_run_dir(), **kw), rs.analyse(demo_run_dir().parent / "demo_study", **kw),
               rs.analyse(b, **kw), rs.analyse(tmp_path / "pair", **kw),
               (synthetic_mofa_tree(tmp_path / "mofa"), rs.analyse(tmp_path / "mofa", **kw))[1],
               build_regime_report(write_points(tmp_path / "regime"), AnalysisSettings(probes=64, seed=0)),
               rs.analyse(comparison_tree(tmp_path / "cmp"), probes=64)]
    claims = [x for r in reports for part in r.all_reports() for c in part.claims for x in (c, *c.verdicts)]
    # a claim true of every report of its kind (a single run has no pair) says why in because=, not in a check
    no_check = sorted({c.kind for c in claims if not c.requires and not c.because})
    assert no_check == [], no_check
    withheld = {c.kind for c in claims if not c.holds} | {c.kind for c in claims if any(not m.holds for m in mutations(c))}
    never = sorted({c.kind for c in claims} - withheld)
    assert never == [], never
    # issue [one-rule]: every check of every claim kind, not only each kind, is false on some input -- a check that
    # never fails restates the builder's own if (or holds by construction: then it is a because=, not a check)
    can_fail = {}
    for c in claims:
        for k, (_, ok) in zip(c.requires, c.checks):
            if ok and not c.holds:
                continue  # a wording built to be withheld by another of its checks (tests/test_gates.py)
            fails = not ok or any(
                not evaluate(k, m.evidence, m.design) for m in mutations(c))
            can_fail[(c.kind, k.name)] = can_fail.get((c.kind, k.name), False) or fails
    never = sorted(key for key, v in can_fail.items() if not v)
    assert never == [] and len(can_fail) >= 60, (never, len(can_fail))
    kinds = {c.kind for c in claims}
    assert {"rose", "highest_layer", "highest_tie", "layer_effect", "profile", "counts", "point",
            "pca", "endpoint_worst", "seed_layer", "patterns", "compare_scope", "compare_model"} <= kinds, sorted(kinds)
