"""The paired inference engine against independent implementations (scipy, statsmodels, pingouin, enumeration)."""

import itertools
import math
import random

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import routestats as rs
from routestats.stats.inference import cohen_dz, signflip_count


# ------------------------------------------------------------------ Holm
def test_holm_methods_examples():
    # METHODS 3.3 test values, compared with exact float equality as the reference tests do
    assert rs.holm([0.01, 0.04, 0.03, 0.002]).tolist() == [0.03, 0.06, 0.06, 0.008]
    assert rs.holm([0.04, 0.01, 0.03, 0.2]).tolist() == [0.09, 0.04, 0.09, 0.2]
    # paper: four raw p at the floor 1/20001 give p_Holm = 4/20001
    assert rs.holm([1 / 20001] * 4).tolist() == [4 / 20001] * 4


def test_holm_matches_statsmodels():
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(0)
    for m in (1, 2, 4, 9, 30):
        p = rng.uniform(0, 0.2, m)
        # method="holm": statsmodels' default is Holm-Sidak, which is a different procedure
        want = multipletests(p, method="holm")[1]
        np.testing.assert_allclose(rs.holm(p), want, rtol=0, atol=1e-15)


def test_holm_nan_not_counted():
    out = rs.holm([0.01, np.nan, 0.02])
    assert math.isnan(out[1])
    assert out[[0, 2]].tolist() == [0.02, 0.02]  # m = 2, not 3


# ------------------------------------------------------------------ d_z and t
def test_dz_and_t_match_scipy_and_pingouin():
    pingouin = pytest.importorskip("pingouin")
    rng = np.random.default_rng(1)
    base = rng.normal(0.8, 0.05, 40)
    var = base + rng.normal(0.02, 0.03, 40)
    d = var - base
    t = stats.ttest_rel(var, base)
    # d_z = t / sqrt(n) for the paired t statistic (closed form)
    assert cohen_dz(d)[0] == pytest.approx(t.statistic / math.sqrt(40), rel=1e-12)
    r = rs.paired_t(d)
    assert r.statistic[0] == pytest.approx(t.statistic, rel=1e-12)
    assert r.p_raw[0] == pytest.approx(t.pvalue, rel=1e-10)
    pg = pingouin.ttest(var, base, paired=True)
    assert r.statistic[0] == pytest.approx(pg["T"].item(), rel=1e-10)
    # pingouin's paired "cohen" effect size is d_av (mean / average SD), NOT d_z: it differs
    d_av = d.mean() / math.sqrt((var.std(ddof=1) ** 2 + base.std(ddof=1) ** 2) / 2)
    assert pingouin.compute_effsize(var, base, paired=True, eftype="cohen") == pytest.approx(d_av, rel=1e-10)
    assert abs(cohen_dz(d)[0] - d_av) > 0.1


def test_dz_undefined_when_constant():
    assert math.isnan(cohen_dz([0.1, 0.1, 0.1])[0])


# ------------------------------------------------------------------ sign-flip test
def test_signflip_exhaustive_matches_scipy_exact():
    rng = np.random.default_rng(2)
    for n in (5, 8, 10):
        d = rng.normal(0.3, 1.0, n)
        bits = np.array(list(itertools.product([0, 1], repeat=n)), dtype=np.uint8)
        p_enum = signflip_count(d[:, None], bits)[0] / 2**n
        # scipy: exact enumeration (2^n < n_resamples); two-sided = 2 x min one-sided, which
        # equals P(|T| >= |t|) here because the sign-flip null of the mean is symmetric
        res = stats.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=10**6,
                                     alternative="two-sided")
        assert p_enum == pytest.approx(res.pvalue, rel=1e-12)


def test_signflip_monte_carlo_close_to_exact():
    rng = np.random.default_rng(3)
    d = rng.normal(0.25, 1.0, 12)
    bits = np.array(list(itertools.product([0, 1], repeat=12)), dtype=np.uint8)
    exact = signflip_count(d[:, None], bits)[0] / 2**12
    r = rs.paired_inference(d, resamples=10, permutations=20000, seed=5)
    se = math.sqrt(exact * (1 - exact) / 20000)
    assert abs(r.p_raw[0] - exact) < 4 * se + 1 / 20001


def test_signflip_floor_and_plus_one():
    d = np.linspace(0.5, 1.5, 64)  # all positive, far from 0
    r = rs.paired_inference(d, resamples=100, permutations=20000, seed=1001)
    assert r.p_raw[0] == 1 / 20001  # only the observed statistic counts: (0 + 1) / (P + 1)


@pytest.mark.parametrize("n", [5, 9, 12, 16, 40])
def test_the_floor_a_table_prints_is_the_smallest_p_its_own_draws_give(n):
    """"The smallest attainable p" beside a table is a bound the test attains: data all of one sign (no sign pattern
    but keep-all and flip-all reaches their mean) give exactly p_floor with the shared mode's draws as made, and
    p_adj_floor = layers x p_floor is their smallest Holm p (statsmodels' Holm). The old floor, max(2/2^n, 1/(P + 1)),
    was below what those draws can give (at 12 examples and 4,999 patterns 0.00049 against 0.0006)."""
    from statsmodels.stats.multitest import multipletests

    d = np.arange(1.0, n + 1)[:, None] * np.ones(3)
    r = rs.paired_inference(d, resamples=2000, permutations=4999, seed=1001)
    assert r.p_raw[0] == r.p_floor and r.mode == "shared"
    assert multipletests(r.p_raw, method="holm")[1].min() == pytest.approx(r.p_adj_floor, rel=1e-12)
    # shifted by a constant the data stay of one sign: the same floor, reached again
    assert rs.paired_inference(d + 5.0, resamples=2000, permutations=4999, seed=1001).p_raw[0] == r.p_floor


@pytest.mark.parametrize("mode", ["numpy", "python-random"])
@pytest.mark.parametrize("n", [5, 9, 12, 70])
def test_the_reference_modes_floor_is_a_bound_their_own_draws_attain(mode, n):
    """The reference modes draw each column's sign patterns apart: data all of one sign reach, in some column, the
    floor the table prints, and no column goes below it. It was max(2/2^n, 1/(P + 1)), which numpy's draws went
    below (n = 12, 4,999 patterns, seed 1: 0.0004 against 0.00049; a reviewer's reproduction)."""
    d = np.arange(1.0, n + 1)[:, None] * np.ones(3)
    permutations = 999 if mode == "python-random" else 4999
    r = rs.paired_inference(d, resamples=50, permutations=permutations, seed=1, mode=mode)
    assert (r.p_raw >= r.p_floor).all() and r.p_raw.min() == r.p_floor
    if n > 62:  # no drawn pattern keeps every sign: the plus-one rule's 1 / (P + 1)
        assert r.p_floor == 1 / (permutations + 1)


def test_signflip_exact_ties_count_despite_rounding():
    # mathematically the mean is 0, so every sign pattern ties with the observed |mean|
    d = np.array([0.1, -0.1, 0.3, -0.3, 0.7, -0.7, 0.2, -0.2])
    assert rs.paired_inference(d, resamples=10, permutations=1000, seed=0).p_raw[0] == 1.0
    # all-equal differences: only "keep all" and "flip all" reach the observed |mean|
    bits = np.array(list(itertools.product([0, 1], repeat=7)), dtype=np.uint8)
    assert signflip_count(np.full((7, 1), 0.1), bits)[0] == 2


# ------------------------------------------------------------------ bootstrap
def test_bootstrap_close_to_scipy_percentile():
    rng = np.random.default_rng(4)
    d = rng.normal(0.05, 0.1, 200)
    r = rs.paired_inference(d, resamples=20000, permutations=10, seed=7)
    sc = stats.bootstrap((d,), np.mean, method="percentile", n_resamples=20000, rng=np.random.default_rng(8))
    width = sc.confidence_interval.high - sc.confidence_interval.low
    # two independent Monte Carlo runs of the same percentile definition agree to ~1 % of width
    assert abs(r.ci_low[0] - sc.confidence_interval.low) < 0.03 * width
    assert abs(r.ci_high[0] - sc.confidence_interval.high) < 0.03 * width


def test_bootstrap_matches_scipy_on_same_resamples():
    """scipy's percentile CI of the same replicate means equals ours (same quantile rule)."""
    rng = np.random.default_rng(5)
    d = rng.normal(0, 1, 30)
    r = rs.paired_inference(d, resamples=999, permutations=10, seed=11)
    g = np.random.default_rng(11)
    idx = np.minimum((g.random((999, 30)) * 30).astype(np.int64), 29)  # the documented index rule
    means = d[idx].mean(axis=1)
    # same resamples and quantile rule; only the summation order of each mean differs
    assert r.ci_low[0] == pytest.approx(np.percentile(means, 2.5), abs=1e-15)
    assert r.ci_high[0] == pytest.approx(np.percentile(means, 97.5), abs=1e-15)


# ------------------------------------------------------------------ compatibility modes
def reference_numpy_mode(d, B, P, seed):
    """METHODS 3.1 transcribed: one default_rng shared layer by layer; indices then signs."""
    rng = np.random.default_rng(seed)
    out = []
    for j in range(d.shape[1]):
        x = d[:, j]
        idx = rng.integers(0, len(x), size=(B, len(x)))
        lo, hi = np.quantile(x[idx].mean(axis=1), [0.025, 0.975])
        signs = rng.choice([-1.0, 1.0], size=(P, len(x)), replace=True)
        p = (int((np.abs((signs * x).mean(axis=1)) >= abs(x.mean())).sum()) + 1) / (P + 1)
        out.append((lo, hi, p))
    return out


def reference_python_mode(d, B, P, seed):
    """METHODS 3.2 transcribed: random.Random(seed + l) and (seed + 100 + l)."""
    out = []
    for j in range(d.shape[1]):
        x = list(d[:, j])
        n = len(x)
        r = random.Random(seed + j)
        means = []
        for _ in range(B):
            means.append(sum(x[r.randrange(n)] for _ in range(n)) / n)
        means.sort()
        lo, hi = means[math.floor(0.025 * (B - 1))], means[math.ceil(0.975 * (B - 1))]
        r = random.Random(seed + 100 + j)
        obs = abs(sum(x) / n)
        c = 0
        for _ in range(P):
            vals = [v if r.getrandbits(1) == 1 else -v for v in x]
            c += abs(sum(vals) / n) >= obs
        out.append((lo, hi, (c + 1) / (P + 1)))
    return out


def test_numpy_mode_number_for_number():
    d = np.random.default_rng(6).normal(0.01, 0.05, (64, 4))
    r = rs.paired_inference(d, resamples=500, permutations=700, seed=1001, mode="numpy")
    for j, (lo, hi, p) in enumerate(reference_numpy_mode(d, 500, 700, 1001)):
        assert (r.ci_low[j], r.ci_high[j], r.p_raw[j]) == (lo, hi, p)


def test_python_random_mode_number_for_number():
    d = np.random.default_rng(7).normal(0.01, 0.05, (16, 2))
    r = rs.paired_inference(d, resamples=300, permutations=400, seed=1001, mode="python-random")
    for j, (lo, hi, p) in enumerate(reference_python_mode(d, 300, 400, 1001)):
        assert (r.ci_low[j], r.ci_high[j], r.p_raw[j]) == (lo, hi, p)


# ------------------------------------------------------------------ properties
@settings(max_examples=25, deadline=None)
@given(st.integers(3, 40), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_property_swap_permute_seed(n, k, seed):
    rng = np.random.default_rng(seed)
    d = rng.normal(0.05, 0.2, (n, k))
    kw = dict(resamples=300, permutations=300, seed=seed % 1000)
    a = rs.paired_inference(d, **kw)
    b = rs.paired_inference(-d, **kw)  # baseline and variant swapped
    np.testing.assert_allclose(b.mean_diff, -a.mean_diff, atol=1e-15)
    np.testing.assert_allclose(b.ci_low, -a.ci_high, atol=1e-12)
    np.testing.assert_allclose(b.ci_high, -a.ci_low, atol=1e-12)
    np.testing.assert_array_equal(b.p_raw, a.p_raw)
    np.testing.assert_allclose(b.dz, -a.dz, atol=1e-12)
    perm = rng.permutation(n)
    c = rs.paired_inference(d[perm], **kw)  # reordering examples leaves the estimates unchanged
    np.testing.assert_allclose(c.mean_diff, a.mean_diff, atol=1e-14)
    np.testing.assert_allclose(c.median_diff, a.median_diff, atol=0)
    np.testing.assert_allclose(c.dz, a.dz, rtol=1e-10)
    again = rs.paired_inference(d, **kw)  # identical seeds give identical results
    for f in ("ci_low", "ci_high", "p_raw", "p_adj"):
        np.testing.assert_array_equal(getattr(again, f), getattr(a, f))


def test_inputs_validated():
    with pytest.raises(rs.RoutestatsError, match="NaN or infinity"):
        rs.paired_inference([0.1, np.nan, 0.2])
    with pytest.raises(rs.RoutestatsError, match="at least 2 pairs"):
        rs.paired_inference([0.1])
    with pytest.raises(rs.RoutestatsError, match="mode must be one of"):
        rs.paired_inference([0.1, 0.2], mode="bca")


def test_to_frame_columns():
    f = rs.paired_inference(np.ones((5, 2)) * [[0.1, 0.2]] + np.arange(5)[:, None] * 0.01, resamples=50,
                            permutations=50, labels=["L0", "L1"]).to_frame()
    assert f.columns[:11].tolist() == ["label", "n", "mean_diff", "median_diff", "sd_diff", "sd_diff_low", "dz",
                                       "ci_low", "ci_high", "p_raw", "p_adj"]
    assert f["label"].tolist() == ["L0", "L1"] and (f["resamples"] == 50).all()


# ------------------------------------------------------------------ Spearman
def test_spearman_matches_scipy_and_brute_force_bootstrap():
    rng = np.random.default_rng(9)
    x = rng.integers(20, 60, 50).astype(float)  # integer lengths: many ties
    y = np.column_stack([0.01 * x + rng.normal(0, 0.2, 50), rng.normal(0, 1, 50)])
    r = rs.spearman_ci(x, y, resamples=200, seed=1001)
    for j in range(2):
        s = stats.spearmanr(x, y[:, j])
        assert r.rho[j] == pytest.approx(s.statistic, abs=1e-12)
        assert r.p_raw[j] == pytest.approx(s.pvalue, rel=1e-10)
    # brute force: the same reference index stream, scipy.spearmanr per resample
    g = np.random.default_rng(1001 + 17)
    for j in range(2):
        vals = []
        for _ in range(200):
            i = g.integers(0, 50, size=50)
            v = stats.spearmanr(x[i], y[i, j]).statistic
            if np.isfinite(v):
                vals.append(v)
        lo, hi = np.quantile(vals, [0.025, 0.975])
        assert r.ci_low[j] == pytest.approx(lo, abs=1e-12)
        assert r.ci_high[j] == pytest.approx(hi, abs=1e-12)
    np.testing.assert_allclose(r.p_adj, rs.holm(r.p_raw))


def test_spearman_permutation_p_matches_enumeration_and_scipy():
    """The length association's p: exact enumeration of all 7! = 5,040 pairings (scipy's rankdata and Pearson on
    each) and scipy.stats.permutation_test (pairings, 20,000 draws) on tied lengths; ours uses 20,000 random
    pairings, so it agrees within Monte Carlo error (4 standard errors)."""
    import itertools

    from routestats.stats.spearman import spearman_permutation_p

    def rho(a, b, axis=-1):  # Spearman with average ranks, vectorised along ``axis``
        ra, rb = stats.rankdata(a, axis=axis), stats.rankdata(b, axis=axis)
        ra, rb = ra - ra.mean(axis=axis, keepdims=True), rb - rb.mean(axis=axis, keepdims=True)
        return (ra * rb).sum(axis=axis) / np.sqrt((ra ** 2).sum(axis=axis) * (rb ** 2).sum(axis=axis))

    x = np.array([5.0, 5, 6, 7, 7, 9, 12])
    y = np.array([0.3, -0.1, 0.5, 0.2, 0.9, 0.4, 1.1])
    obs = abs(stats.spearmanr(x, y).statistic)
    every = np.array(list(itertools.permutations(x)))
    exact = float(np.mean(np.abs(rho(every, np.broadcast_to(y, every.shape))) >= obs - 1e-12))
    ours = spearman_permutation_p(x, y, 20000, 1)[0]
    assert abs(ours - exact) < 4 * np.sqrt(exact * (1 - exact) / 20000) + 1 / 20001, (ours, exact)
    # exact 0.1286 here; the t approximation (scipy's spearmanr p, the length table's p before) says 0.1106: this
    # comparison tells the two apart
    assert abs(stats.spearmanr(x, y).pvalue - exact) > 0.01
    rng = np.random.default_rng(4)
    x2 = rng.integers(6, 12, 14).astype(float)
    y2 = rng.normal(size=14) + 0.05 * x2
    ref = stats.permutation_test((x2, y2), rho, vectorized=True, permutation_type="pairings", n_resamples=20000,
                                 random_state=3).pvalue
    ours2 = spearman_permutation_p(x2, y2, 20000, 2)[0]
    assert abs(ours2 - ref) < 4 * np.sqrt(ref * (1 - ref) * (2 / 20000)) + 1e-4, (ours2, ref)


def test_spearman_permutation_p_draws_the_pairings_numpy_permuted_draws():
    """The pairings are the rows numpy's own ``Generator.permuted(..., axis=1)`` draws from the same seed (the
    form the p was first written in: index permutations gathered from x's ranks), so the p is bitwise what it
    was: recomputed here with that form, scipy's ranks, and the same plus-one rule, on tied lengths and three
    columns over more than one chunk."""
    from routestats.stats.spearman import spearman_permutation_p

    rng = np.random.default_rng(8)
    n, perms, seed = 1500, 3000, 5
    x = rng.integers(10, 60, n).astype(float)
    y = rng.normal(size=(n, 3)) + np.array([0.0, 0.002, -0.004]) * x[:, None]
    rx = stats.rankdata(x) - (n + 1) / 2
    ry = stats.rankdata(y, axis=0) - (n + 1) / 2
    obs = np.abs(rx @ ry)
    draws = np.random.default_rng(seed + 29)
    count = np.zeros(3, dtype=np.int64)
    chunk = (1 << 21) // n  # the chunks of the implementation: the generator is drawn row by row either way
    for s in range(0, perms, chunk):
        order = draws.permuted(np.broadcast_to(np.arange(n), (min(chunk, perms - s), n)), axis=1)
        count += (np.abs(rx[order] @ ry) >= obs - 1e-9 * obs).sum(axis=0)
    np.testing.assert_array_equal(spearman_permutation_p(x, y, perms, seed), (count + 1) / (perms + 1))


def test_spearman_permutation_p_keeps_its_level_where_the_t_approximation_does_not():
    """2,000 exact nulls (8 examples, lengths 6-11 with ties, heavy-tailed changes): at alpha 0.0125 (one of four
    headline families) the t approximation rejected 1.6 % of 4,000 such nulls in our simulation; the permutation
    p must stay within 3 standard errors of alpha."""
    from routestats.stats.spearman import spearman_permutation_p

    rng = np.random.default_rng(11)
    n, alpha, draws = 8, 0.0125, 2000
    hits = sum(spearman_permutation_p(rng.integers(6, 12, n).astype(float), rng.standard_t(3, size=(n, 1)), 999, i)[0]
               < alpha for i in range(draws))
    assert hits / draws <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / draws), hits / draws


def test_spearman_reference_values():
    # METHODS 3.4 test values of the hand-written Spearman: +1 and -1 on monotone data
    assert rs.spearman_ci([1, 2, 3, 4], [10, 20, 30, 40], resamples=5).rho[0] == pytest.approx(1.0)
    assert rs.spearman_ci([1, 2, 3, 4], [40, 30, 20, 10], resamples=5).rho[0] == pytest.approx(-1.0)
    # ties: average ranks ranks([1, 1, 3]) = [1.5, 1.5, 3] (METHODS 3.4)
    from routestats.stats.spearman import average_ranks

    assert average_ranks([1, 1, 3]).tolist() == [1.5, 1.5, 3.0]


def test_spearman_and_ranks_bitwise_scipy():
    # expected: scipy.stats.spearmanr / rankdata themselves; equality is exact (==), not approximate:
    # the report's rho and p must be the numbers scipy would print
    from routestats.stats.spearman import average_ranks, spearman

    rng = np.random.default_rng(12)
    cases = 0
    for n in (2, 3, 4, 5, 7, 16, 33, 100, 257, 2336, 5001):
        for kind in ("continuous", "ties", "lengths", "monotone", "reversed"):
            if kind == "continuous":
                x, y = rng.standard_normal(n), rng.standard_normal(n)
            elif kind == "ties":
                x, y = np.round(rng.standard_normal(n), 1), rng.integers(0, 4, n).astype(float)
            elif kind == "lengths":
                x = rng.integers(20, 60, n).astype(float)
                y = 0.01 * x + rng.normal(0, 0.2, n)
            else:
                x = np.arange(n, dtype=float)
                y = x * 2 + 1 if kind == "monotone" else -x
            np.testing.assert_array_equal(average_ranks(x), stats.rankdata(x))
            with np.errstate(all="ignore"):
                want = stats.spearmanr(x, y)
            got = spearman(x, y)
            assert np.array_equal(got, [want.statistic, want.pvalue], equal_nan=True), (n, kind, got, want)  # n = 2: p NaN
            cases += 1
    assert cases == 55
    # undefined cases: NaN in both, as scipy (which also warns)
    import warnings

    for x, y in (([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]), ([1.0, np.nan, 2.0], [1.0, 2.0, 3.0]), ([1.0], [2.0])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = stats.spearmanr(x, y)
        assert all(np.isnan(v) for v in spearman(x, y)) and np.isnan(want.statistic) and np.isnan(want.pvalue)


@pytest.mark.parametrize("x_ties,y_ties", [(True, True), (True, False), (False, True), (False, False)])
def test_resampled_spearman_equals_scipy_per_resample(x_ties, y_ties):
    from scipy import stats as sst

    from routestats.stats.spearman import _spearman_resamples

    rng = np.random.default_rng(3)
    n = 40
    x = rng.integers(5, 15, n).astype(float) if x_ties else rng.standard_normal(n)  # ties as with lengths, or none
    y = np.round(rng.standard_normal(n), 1) if y_ties else rng.standard_normal(n)
    idx = rng.integers(0, n, size=(60, n))
    got = _spearman_resamples(x, y, idx)
    # expected: scipy.stats.spearmanr on each resample, one at a time
    want = np.array([sst.spearmanr(x[i], y[i]).statistic for i in idx])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    # a constant resample has no rho (NaN, skipped by spearman_ci), as in scipy
    const = np.zeros((1, n), dtype=np.int64)
    assert np.isnan(_spearman_resamples(x, y, const)).all()


def test_resampled_spearman_integer_sums_at_scale(monkeypatch):
    # the Pearson sums are taken as int64 (twice the rank deviations); at n = 3,000 they reach ~1e10, far past
    # where a float32 or an int32 would round or wrap: each resample's rho against scipy.stats.spearmanr on that
    # resample, and bitwise against the float sums the code takes past INTEGER_SUMS_UP_TO (both exact here)
    from scipy import stats as sst

    import importlib

    sp = importlib.import_module("routestats.stats.spearman")  # the module (the package exports a function of its name)
    rng = np.random.default_rng(11)
    n = 3000
    x = rng.integers(10, 300, n).astype(float)  # lengths: many ties
    y = rng.standard_normal(n) + 0.01 * x
    idx = rng.integers(0, n, size=(4, n))
    got = sp._spearman_resamples(x, y, idx)
    want = np.array([sst.spearmanr(x[i], y[i]).statistic for i in idx])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    # the largest n summed as integers: a sum is at most n^3 (n counts times products of twice-deviations <= n^2)
    assert sp.INTEGER_SUMS_UP_TO ** 3 < 2 ** 63
    monkeypatch.setattr(sp, "INTEGER_SUMS_UP_TO", 10)
    np.testing.assert_array_equal(sp._spearman_resamples(x, y, idx), got)


def test_shared_draws_are_reused_bitwise_and_bounded(monkeypatch):
    # a report's tables reuse one set of bootstrap counts and sign bits per (n, resamples, permutations, seed):
    # the numbers are bitwise those of drawing afresh, and draws over the budget are streamed, not kept
    from routestats.stats import draws as I

    rng = np.random.default_rng(5)
    d = rng.standard_normal((300, 3))
    I._DRAWS.clear()
    fresh = I._shared_streamed(d, 2000, 3000, np.random.default_rng(1001), 0.95)
    first = I.shared_tables([d], 2000, 3000, 1001, 0.95)[0]
    assert (300, 2000, 3000, 1001) in I._DRAWS
    again = I.shared_tables([d[:, ::-1].copy()], 2000, 3000, 1001, 0.95)[0]  # other columns, same examples: reused
    for a, b in zip(fresh, first):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(again[0], first[0][::-1], rtol=1e-12)
    monkeypatch.setattr(I, "_DRAW_BUDGET", 1000)
    I._DRAWS.clear()
    big = I.shared_tables([d], 2000, 3000, 1001, 0.95)[0]
    assert not I._DRAWS  # too large to keep
    for a, b in zip(fresh, big):
        np.testing.assert_array_equal(a, b)


def test_bootstrap_count_chunks_are_the_bootstrap_means_draws():
    from routestats.stats.draws import bootstrap_count_chunks, bootstrap_means

    d = np.random.default_rng(2).standard_normal((50, 2))
    means = bootstrap_means(d, 700, np.random.default_rng(9))
    counts = np.concatenate(list(bootstrap_count_chunks(50, 700, 9))).astype(float)
    assert (counts.sum(axis=1) == 50).all()
    np.testing.assert_array_equal((counts @ d) / 50, means)


def test_seeded_bootstrap_means_is_bootstrap_means_bitwise_kept_or_fresh():
    # expected: bootstrap_means with a fresh default_rng(seed) -- the reference the profile distance and
    # the forest plot used before; equal with == whether the counts are drawn afresh or were kept
    from routestats.stats import draws, inference as inf

    rng = np.random.default_rng(5)
    for n in (7, 300, 2336):
        d = rng.normal(0.01, 0.05, (n, 3))
        want = inf.bootstrap_means(d, 1000, np.random.default_rng(77))
        draws._DRAWS.clear()
        assert np.array_equal(inf.seeded_bootstrap_means(d, 1000, 77), want)  # drawn afresh
        inf.paired_inference(d[:, :1], resamples=1000, permutations=50, seed=77)  # keeps the draws of (n, seed)
        assert any(key[0] == n and key[3] == 77 for key in draws._DRAWS)
        assert np.array_equal(inf.seeded_bootstrap_means(d, 1000, 77), want)  # from the kept counts
        assert not np.array_equal(inf.seeded_bootstrap_means(d, 1000, 78), want)  # another seed, other resamples
    draws._DRAWS.clear()


@pytest.mark.parametrize("budget", [None, 1000])
def test_paired_inferences_are_each_familys_own_call_bitwise(monkeypatch, budget):
    # families analysed together (one pass over the shared draws, each chunk converted once) give every number
    # their own paired_inference call gives, bitwise; families of another n and draws too large to keep
    # (budget 1000 bytes: streamed) included. The expected values are the one-family calls themselves.
    from routestats.settings import Resampling
    from routestats.stats import draws
    from routestats.stats import inference as I

    if budget is not None:
        monkeypatch.setattr(draws, "_DRAW_BUDGET", budget)
    rng = np.random.default_rng(11)
    fams = [rng.standard_normal((120, 3)), rng.normal(0.3, 1, (120, 1)), rng.integers(-2, 3, (120, 4)) * 0.25,
            rng.standard_normal((45, 2))]
    r = Resampling(resamples=1500, permutations=2500, seed=77)
    draws._DRAWS.clear()
    I._RESULTS.clear()
    together = I.paired_inferences(fams, resampling=r, labels=[None, ["x"], None, ["a", "b"]])
    for d, got, lab in zip(fams, together, [None, ["x"], None, ["a", "b"]]):
        draws._DRAWS.clear()
        I._RESULTS.clear()  # drawn afresh, not the kept result
        alone = I.paired_inference(d, resampling=r, labels=lab)
        pd.testing.assert_frame_equal(got.to_frame(), alone.to_frame(), check_exact=True)
    with pytest.raises(rs.RoutestatsError, match="1 labels for 3 columns"):
        I.paired_inferences(fams[:1], resampling=r, labels=[["only"]])


def test_kept_results_are_found_by_content_with_the_callers_labels_and_own_arrays(monkeypatch):
    # a family analysed before (same differences, same procedure) is not drawn again: the result is the kept one,
    # with this call's labels and arrays a caller may edit; other differences or another seed are drawn afresh.
    # Expected values: a fresh call with the memo cleared.
    from routestats.settings import Resampling
    from routestats.stats import inference as I

    d = np.random.default_rng(3).standard_normal((40, 2))
    r = Resampling(resamples=600, permutations=600, seed=5)
    I._RESULTS.clear()
    first = I.paired_inference(d, resampling=r, labels=["a", "b"])
    first.p_raw[:] = -1.0  # a caller's edit
    drawn = []
    monkey = I.shared_tables
    monkeypatch.setattr(I, "shared_tables", lambda ds, *a: drawn.append(len(ds)) or monkey(ds, *a))
    again = I.paired_inference(d.copy(), resampling=r, labels=["x", "y"])
    other = I.paired_inference(d, resampling=Resampling(resamples=600, permutations=600, seed=6))
    moved = I.paired_inference(d + 1e-9, resampling=r)
    monkeypatch.undo()
    assert drawn == [1, 1]  # the seed-6 and the moved family; the same content was found
    assert again.labels == ("x", "y") and (again.p_raw > 0).all()
    I._RESULTS.clear()
    fresh = I.paired_inference(d, resampling=r, labels=["x", "y"])
    pd.testing.assert_frame_equal(again.to_frame(), fresh.to_frame(), check_exact=True)
    assert not np.array_equal(other.ci_low, fresh.ci_low) and not np.array_equal(moved.mean_diff, fresh.mean_diff)


def test_a_pair_report_draws_its_planned_families_together_and_no_family_twice(monkeypatch):
    # the pair context analyses its planned paired families ahead, in one pass over the shared draws (three effects
    # tables, two highest-layer tests, the layer contrasts); each section then finds its result, so no family's
    # draws are made twice in a report
    import hashlib

    from routestats.rundir.synthetic import demo_run_dir
    from routestats.stats import inference as I

    I._RESULTS.clear()
    passes = []
    monkey = I.shared_tables
    monkeypatch.setattr(I, "shared_tables", lambda ds, *a: passes.append([hashlib.sha1(d.tobytes()).hexdigest()
                                                                           for d in ds]) or monkey(ds, *a))
    rs.analyse(demo_run_dir(), resamples=300, permutations=300, length_resamples=50)
    assert len(passes[0]) == 6
    drawn = [h for p in passes for h in p]
    assert len(drawn) == len(set(drawn))
