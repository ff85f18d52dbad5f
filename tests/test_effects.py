"""paired_effects: the Table 2 / Table 10 layouts from a run pair, checked against hand computation."""

import numpy as np
import pytest

import routestats as rs
from tests.conftest import random_attention, write_run
from tests.test_metrics import brute_force


def _pair(tmp_path, rng, fields, n_layers=3, n_heads=2):
    base = [random_attention(rng, n_layers, n_heads, len(g)) for g in fields]
    var = [random_attention(rng, n_layers, n_heads, len(g)) for g in fields]
    b = write_run(tmp_path / "b", base, fields, run_id="b")
    v = write_run(tmp_path / "v", var, fields, run_id="v", variant="saab")
    return rs.pair(rs.load_run(b), rs.load_run(v)), base, var


def test_paired_effects_against_hand_computation(tmp_path, rng):
    fields = [[4, 4, 3, 3, 3], [4, 3, 3], [4, 4, 3, 3, 3, 3], [4, 3, 3, 3], [4, 4, 4, 3]]
    p, base, var = _pair(tmp_path, rng, fields)
    t = rs.paired_effects(p, resamples=400, permutations=400, seed=3)
    # hand: per-example SFM = mean over heads of the brute-force per-head SFM
    def per_example(att):
        return np.array([[np.mean([brute_force(a[layer, h].astype(np.float32).astype(float), g, [3, 4])[0]
                                   for h in range(2)]) for layer in range(3)] for a, g in zip(att, fields)])
    bm, vm = per_example(base), per_example(var)
    d = vm - bm
    np.testing.assert_allclose(t["baseline_mean"], bm.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(t["variant_mean"], vm.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(t["mean_diff"], d.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(t["median_diff"], np.median(d, axis=0), atol=1e-12)
    np.testing.assert_allclose(t["dz"], d.mean(0) / d.std(0, ddof=1), atol=1e-10)
    engine = rs.paired_inference(d, resamples=400, permutations=400, seed=3)
    np.testing.assert_allclose(t["ci_low"], engine.ci_low, atol=1e-12)
    np.testing.assert_array_equal(t["p_raw"], engine.p_raw)
    np.testing.assert_array_equal(t["p_holm"], rs.holm(engine.p_raw))
    assert t["n"].tolist() == [5, 5, 5] and t["excluded"].tolist() == [0, 0, 0]
    assert t.columns[:6].tolist() == ["metric", "layer", "n", "excluded", "baseline_mean", "variant_mean"]


def test_swapping_roles_flips_signs(tmp_path, rng):
    fields = [[4, 3, 3], [4, 4, 3], [4, 3, 3, 3]]
    p, _, _ = _pair(tmp_path, rng, fields)
    a = rs.paired_effects(p, resamples=300, permutations=300)
    b = rs.paired_effects(p.swapped(), resamples=300, permutations=300)
    np.testing.assert_allclose(b["mean_diff"], -a["mean_diff"], atol=1e-15)
    np.testing.assert_allclose(b["ci_low"], -a["ci_high"], atol=1e-12)
    np.testing.assert_array_equal(b["p_raw"], a["p_raw"])


def test_adjusted_excludes_single_field_examples(tmp_path, rng):
    fields = [[4, 3, 3], [3, 3, 3, 3], [4, 4, 3, 3], [4, 3, 3, 3, 3]]  # example 1 sees one field only
    p, base, var = _pair(tmp_path, rng, fields, n_layers=2)
    t = rs.paired_effects(p, adjusted=True, resamples=200, permutations=200)
    assert t["metric"].unique().tolist() == ["sfm_adj"]
    assert t["n"].tolist() == [3, 3] and t["excluded"].tolist() == [1, 1]
    # mean O_e over ALL examples, the excluded one included: (5/9 + 1 + 1/2 + 17/25) / 4
    assert t["mean_opportunity"].iloc[0] == pytest.approx((5 / 9 + 1 + 0.5 + 17 / 25) / 4, abs=1e-15)
    # issue [true-words-2]: the sentence's mean is over exactly the 3 analysed examples: (5/9 + 1/2 + 17/25) / 3
    assert t["mean_opportunity_analysed"].iloc[0] == pytest.approx((5 / 9 + 0.5 + 17 / 25) / 3, abs=1e-15)
    raw = rs.paired_differences(p)
    adj = rs.paired_differences(p, adjusted=True)
    keep = raw[raw.example_id != 1].reset_index(drop=True)
    o = {0: 5 / 9, 2: 0.5, 3: 17 / 25}
    want = [(r.variant - o[r.example_id]) / (1 - o[r.example_id]) - (r.baseline - o[r.example_id]) / (1 - o[r.example_id])
            for r in keep.itertuples()]
    np.testing.assert_allclose(adj["diff"], want, atol=1e-12)


def test_entropy_effects_and_errors(tmp_path, rng):
    p, _, _ = _pair(tmp_path, rng, [[4, 3, 3], [4, 4, 3]])
    e = rs.paired_effects(p, metric="entropy", resamples=100, permutations=100)
    assert e["metric"].unique().tolist() == ["entropy"]
    with pytest.raises(rs.RoutestatsError, match="opportunity adjustment applies to SFM only"):
        rs.paired_effects(p, metric="entropy", adjusted=True)
    with pytest.raises(rs.RoutestatsError, match="metric must be one of"):
        rs.paired_effects(p, metric="bogus")


def test_paired_differences_are_computed_once_and_every_caller_gets_its_own_copy(tmp_path, rng):
    # the per-pair memo: the same arguments give an equal frame (the first call's), a caller that writes into
    # its frame changes no other caller's, and other arguments (examples as a list or tuple alike) are their own
    fields = [[4, 3, 3], [4, 4, 3], [4, 3, 3, 3], [4, 4, 3, 3]]
    p, _, _ = _pair(tmp_path, rng, fields)
    first = rs.paired_differences(p)
    first.loc[:, "diff"] = 99.0  # a caller's own edit
    again = rs.paired_differences(p)
    assert (again["diff"] != 99.0).all()
    np.testing.assert_allclose(again["diff"], again["variant"] - again["baseline"], atol=0)
    some = rs.paired_differences(p, examples=[0, 2])
    assert sorted(set(some["example_id"])) == [0, 2]
    assert rs.paired_differences(p, examples=(0, 2)).equals(some)
    assert rs.paired_differences(p, examples=[1, 3])["example_id"].nunique() == 2


def test_both_runs_side_by_side_are_what_pivot_table_gives():
    # expected: pandas' pivot_table (dropna=False: every example in every layer), sorted by layer then example, on
    # generated long tables: examples missing from a run or a layer, NaN values, unsorted rows
    import pandas as pd
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from routestats.studies.effects import _wide_by_layer

    cells = st.lists(st.tuples(st.sampled_from(["baseline", "variant"]), st.integers(0, 6), st.integers(0, 3),
                               st.one_of(st.floats(0, 1), st.just(float("nan")))), min_size=1, max_size=40,
                     unique_by=lambda c: c[:3])

    @settings(max_examples=200, deadline=None)
    @given(cells)
    def check(rows):
        long = pd.DataFrame(rows, columns=["role", "example_id", "layer", "sfm"])
        if long["role"].nunique() < 2:
            return
        want = (long.pivot_table(index=["example_id", "layer"], columns="role", values="sfm", dropna=False,
                                 sort=False).reset_index().sort_values(["layer", "example_id"], kind="stable")
                .reset_index(drop=True))
        want.columns.name = None
        pd.testing.assert_frame_equal(_wide_by_layer(long, "sfm"), want[["example_id", "layer", "baseline", "variant"]])

    check()


def test_a_run_with_two_values_for_one_example_and_layer_is_refused():
    import pandas as pd

    from routestats.studies.effects import _wide_by_layer

    long = pd.DataFrame({"role": ["baseline", "baseline", "variant"], "example_id": [1, 1, 1], "layer": [0, 0, 0],
                         "sfm": [0.1, 0.2, 0.3]})
    with pytest.raises(rs.RoutestatsError, match="two values for one example and layer"):
        _wide_by_layer(long, "sfm")
