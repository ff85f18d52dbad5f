"""Length analyses: tables, Spearman association, equal-count bins, exact-length standardisation."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import routestats as rs
from routestats.studies.lengths import (
    common_length_range, equal_count_bins, length_association, length_bins, length_standardised_contrast, length_table,
)
from tests.conftest import random_attention, write_run


def make_pair(tmp_path, lengths, seed, tag):
    rng = np.random.default_rng(seed)
    fields = [[4] * max(1, n // 3) + [3] * (n - max(1, n // 3)) for n in lengths]
    b = [random_attention(rng, 2, 1, len(g)) for g in fields]
    v = [random_attention(rng, 2, 1, len(g)) for g in fields]
    pb = write_run(tmp_path / tag / "b", b, fields, run_id=f"{tag}b", init_id=tag, data_order_id=tag)
    pv = write_run(tmp_path / tag / "v", v, fields, run_id=f"{tag}v", variant="saab", init_id=tag, data_order_id=tag)
    return rs.pair(rs.load_run(pb), rs.load_run(pv))


def test_length_table_against_numpy():
    x = np.array([5, 7, 7, 9, 12, 64, 64, 30])
    t = length_table(pd.DataFrame({"split": "val", "length": x}), cap=64).iloc[0]
    assert t["mean"] == x.mean() and t["sd_population"] == x.std(ddof=0)
    assert t["median"] == np.median(x) and t["p90"] == np.percentile(x, 90)  # linear interpolation
    assert t["iqr"] == np.percentile(x, 75) - np.percentile(x, 25)
    assert t["saturation_count"] == 2 and t["saturation_rate"] == 0.25
    with pytest.raises(rs.RoutestatsError, match="length 65 is outside 1..64"):
        length_table(pd.DataFrame({"split": "val", "length": [3, 65]}), cap=64)


def test_equal_count_bins_methods_example():
    # METHODS 3.5: lengths 1..10 plus thirty rows of 256 -> every bin has exactly 10 rows
    lengths = list(range(1, 11)) + [256] * 30
    bins = equal_count_bins(lengths, list(range(40)))
    assert np.bincount(bins)[1:].tolist() == [10, 10, 10, 10]
    assert (bins[:10] == 1).all()


def test_length_association_matches_scipy(tmp_path):
    lengths = [6, 8, 8, 9, 11, 12, 14, 15, 17, 20]
    p = make_pair(tmp_path, lengths, 1, "a")
    la = length_association(p, resamples=200)
    d = rs.paired_differences(p)
    for layer in (0, 1):
        y = d[d.layer == layer].sort_values("example_id")["diff"].to_numpy()
        s = stats.spearmanr(lengths, y)
        row = la[la.layer == layer].iloc[0]
        assert row["rho"] == pytest.approx(s.statistic, abs=1e-12)
        assert row["p_t"] == pytest.approx(s.pvalue, rel=1e-10)  # the paper's t approximation, kept
        # the permutation p: scipy's permutation test of the same pairing (20,000 draws each side), within 4
        # standard errors of Monte Carlo error; the p the report tests with is the larger of it and the slope's HC2 p
        # (tests/test_length_robust.py checks that one), or 1 where ρ and the slope (numpy's polyfit) differ in sign
        ref = stats.permutation_test((np.asarray(lengths, float), y), lambda a, b: stats.spearmanr(a, b).statistic,
                                     permutation_type="pairings", n_resamples=2000, random_state=layer).pvalue
        assert abs(row["p_permutation"] - ref) < 4 * np.sqrt(ref * (1 - ref) * (1 / 2000 + 1 / 20000)) + 1e-3
        agree = np.sign(np.polyfit(lengths, y, 1)[0]) == np.sign(s.statistic)
        assert row["p_raw"] == (max(row["p_permutation"], row["p_robust"]) if agree else 1.0)
    bins = length_bins(p)
    assert bins.groupby("bin")["count"].first().tolist() == [3, 2, 3, 2]  # floor(4r/10)+1 for r = 0..9
    assert bins[(bins.bin == 1) & (bins.layer == 0)]["max_length"].item() == 8


def test_common_range_and_standardisation_by_hand(tmp_path):
    pa_ = make_pair(tmp_path, [5, 6, 6, 7, 9], 2, "a")
    pb_ = make_pair(tmp_path, [6, 6, 7, 7, 7, 10], 3, "b")
    c = common_length_range({"A": pa_, "B": pb_})
    assert c["lower"].unique().tolist() == [6] and c["upper"].unique().tolist() == [9]
    res = length_standardised_contrast(pa_, pb_, names=("A", "B"), resamples=300, seed=4)
    # shared exact lengths in [6, 9]: 6 (A 2, B 2) and 7 (A 1, B 3) -> weights 2 and 1, W = 3
    assert res.shared_strata == 2 and res.overlap_target_mass == 3
    da = rs.paired_differences(pa_).merge(pa_.baseline.examples(["example_id", "length"]), on="example_id")
    db = rs.paired_differences(pb_).merge(pb_.baseline.examples(["example_id", "length"]), on="example_id")
    for layer in (0, 1):
        ma = {n: da[(da.layer == layer) & (da.length == n)]["diff"].mean() for n in (6, 7)}
        mb = {n: db[(db.layer == layer) & (db.length == n)]["diff"].mean() for n in (6, 7)}
        sa = (2 * ma[6] + 1 * ma[7]) / 3
        sb = (2 * mb[6] + 1 * mb[7]) / 3
        row = res.exact[res.exact.layer == layer].iloc[0]
        assert row["standardised_delta_A"] == pytest.approx(sa, abs=1e-15)
        assert row["contrast"] == pytest.approx(sb - sa, abs=1e-15)
        assert row["ci_low"] <= row["contrast"] <= row["ci_high"] or np.isclose(row["ci_low"], row["ci_high"])
    assert res.standardised_length == {"A": pytest.approx((2 * 6 + 7) / 3), "B": pytest.approx((2 * 6 + 7) / 3)}
    assert sorted(res.sensitivity["band_width"].unique()) == [1, 2, 5, 10]


def test_reference_mode_is_the_transcribed_loop(tmp_path):
    pa_ = make_pair(tmp_path, [5, 6, 6, 7, 9], 2, "a")
    pb_ = make_pair(tmp_path, [6, 6, 7, 7, 7, 10], 3, "b")
    res = length_standardised_contrast(pa_, pb_, resamples=50, seed=9, mode="reference")
    # METHODS 3.6 step 5 transcribed: per resample, per shared stratum ascending, A then B
    da = rs.paired_differences(pa_).merge(pa_.baseline.examples(["example_id", "length"]), on="example_id")
    db = rs.paired_differences(pb_).merge(pb_.baseline.examples(["example_id", "length"]), on="example_id")
    ga = [da[da.length == n].pivot(index="example_id", columns="layer", values="diff").to_numpy() for n in (6, 7)]
    gb = [db[db.length == n].pivot(index="example_id", columns="layer", values="diff").to_numpy() for n in (6, 7)]
    rng = np.random.default_rng(9)
    boots = []
    for _ in range(50):
        acc = np.zeros(2)
        for a, b, w in zip(ga, gb, (2, 1)):
            ia = rng.integers(0, len(a), size=len(a))
            ib = rng.integers(0, len(b), size=len(b))
            acc += w * (b[ib].mean(0) - a[ia].mean(0))
        boots.append(acc / 3)
    lo, hi = np.quantile(np.array(boots), [0.025, 0.975], axis=0)
    np.testing.assert_allclose(res.exact["ci_low"], lo, atol=1e-15)
    np.testing.assert_allclose(res.exact["ci_high"], hi, atol=1e-15)


def test_zero_overlap_is_a_clear_error(tmp_path):
    pa_ = make_pair(tmp_path, [5, 6, 7], 2, "a")
    pb_ = make_pair(tmp_path, [9, 10, 11], 3, "b")
    with pytest.raises(rs.RoutestatsError, match="no length overlap"):
        length_standardised_contrast(pa_, pb_, resamples=10)
    with pytest.raises(rs.RoutestatsError, match="do not overlap"):
        common_length_range({"a": pa_, "b": pb_})


def test_bins_of_examples_cut_at_the_cap_are_flagged(tmp_path):
    import numpy as np

    import routestats as rs
    from routestats.studies.lengths import length_bins
    from tests.conftest import FIELDS, random_attention

    rng = np.random.default_rng(0)
    prepared = [6, 7, 8, 9, 12, 15, 20, 30, 10, 11, 40, 50, 60, 8, 9, 70]  # 10 of 16 reach the cap of 10
    runs = []
    for name in ("b", "v"):
        w = rs.RunWriter(tmp_path / name, run_id=name, study="t", factors={"variant": "baseline" if name == "b" else "saab"},
                         seed=0, init_id="i", data_order_id="d", fields=FIELDS)
        n = [min(k, 10) for k in prepared]
        w.write_examples(pd.DataFrame({"example_id": range(16), "split": "val", "source_index": range(16),
                                       "prepared_length": prepared, "cap": 10,
                                       "field_ids": [[4] * 2 + [3] * (k - 2) for k in n]}))
        with w.attention(1, dtype="float32") as sink:
            for i, k in enumerate(n):
                sink.add(i, random_attention(rng, 1, 1, k))
        runs.append(rs.load_run(w.finalize()))
    t = length_bins(rs.pair(*runs))
    assert t["at_cap"].sum() == 10  # each example counted once (one layer)
    assert (t["saturated"] == ((t["min_length"] == 10) & (t["max_length"] == 10))).all()
    assert t["saturated"].sum() == 2  # the two top quartiles hold only capped examples


def test_linear_length_fit_against_statsmodels_and_a_resample_loop():
    import statsmodels.api as sm

    from routestats.studies.lengths import linear_length_fit

    rng = np.random.default_rng(7)
    x = rng.integers(10, 80, size=40).astype(float)
    D = np.column_stack([0.2 - 0.002 * x + 0.01 * rng.standard_normal(40), 0.05 * rng.standard_normal(40)])
    ref = float(np.median(x))
    f = linear_length_fit(x, D, ref, resamples=300, seed=11)
    for layer in range(2):
        # statsmodels OLS of d on (x - ref): the intercept is Δ at the reference length
        fit = sm.OLS(D[:, layer], sm.add_constant(x - ref)).fit()
        assert f["delta_at_reference"][layer] == pytest.approx(fit.params[0], abs=1e-12)
        assert f["slope_per_10"][layer] == pytest.approx(10 * fit.params[1], abs=1e-12)
        assert f["delta"][layer] == pytest.approx(D[:, layer].mean(), abs=1e-15)
    # bootstrap: the shared mode's resamples (counts per example), each expanded into its drawn examples
    # and refitted with np.polyfit
    from routestats.stats.draws import bootstrap_count_chunks

    boot = []
    for cnt in bootstrap_count_chunks(40, 300, 11):
        for row in cnt:
            i = np.repeat(np.arange(40), row)
            boot.append([np.polyfit(x[i] - ref, D[i, k], 1) for k in range(2)])
    boot = np.array(boot)  # (B, layer, [slope, intercept])
    np.testing.assert_allclose(f[["ci_low", "ci_high"]].to_numpy().T, np.quantile(boot[:, :, 1], [0.025, 0.975], axis=0),
                               atol=1e-10)
    np.testing.assert_allclose(f[["slope_ci_low", "slope_ci_high"]].to_numpy().T,
                               10 * np.quantile(boot[:, :, 0], [0.025, 0.975], axis=0), atol=1e-10)
    assert (f["resamples_kept"] == 300).all()
    with pytest.raises(rs.RoutestatsError, match="different lengths"):
        linear_length_fit([5, 5, 5], [[1.0], [2.0], [3.0]], 5.0)


def test_paper_protocol_uses_primary_for_paired_tables_and_the_length_sample_for_lengths(tmp_path):
    # a record selector's union: examples 0-5 primary, 4-13 the length sample (overlap 4, 5)
    from tests.conftest import random_attention, write_run

    lengths = [6, 9, 12, 7, 15, 18, 8, 11, 20, 14, 10, 16, 13, 19]
    fields = [[4] * max(1, n // 3) + [3] * (n - max(1, n // 3)) for n in lengths]
    flags = {"is_primary": [i < 6 for i in range(14)], "in_length_sample": [i >= 4 for i in range(14)]}
    rng = np.random.default_rng(3)
    b = [random_attention(rng, 2, 1, len(g)) for g in fields]
    v = [random_attention(rng, 2, 1, len(g)) for g in fields]
    write_run(tmp_path / "b", b, fields, run_id="b", flags=flags)
    write_run(tmp_path / "v", v, fields, run_id="v", variant="saab", flags=flags)
    rep = rs.analyse(tmp_path, resamples=200, permutations=200)
    assert set(rep.frame("layers")["n_examples"]) == {6}
    assert set(rep.frame("length_association")["n"]) == {10} and set(rep.frame("length_adjusted")["n"]) == {10}
    assert "The paired tables use the primary examples (6); the length analyses use the length sample (10)." in rep.methods
    # choosing one set for everything overrides the protocol
    rep = rs.analyse(tmp_path, resamples=200, permutations=200, examples="all", length_examples="all")
    assert set(rep.frame("layers")["n_examples"]) == {14} and set(rep.frame("length_association")["n"]) == {14}
    assert "The paired tables use every evaluated example (14), as do the length analyses." in rep.methods
