"""Profile-shape statistics (METHODS 3.3) against independent computations."""

import itertools

import numpy as np
import pytest
from scipy import stats

from routestats.stats.inference import bootstrap_means, paired_inference
from routestats.stats.profile import layer_contrasts, profile_distance_ci, profile_shape


def _D(seed=0, n=25, L=4, shift=(0, 0, 0, 0.05)):
    rng = np.random.default_rng(seed)
    return rng.normal(0.1, 0.05, (n, L)) + np.asarray(shift)[:L]


def test_hotelling_matches_a_direct_computation_and_any_contrast():
    D = _D()
    n, L = D.shape
    got = profile_shape(D, permutations=100).set_index("test").loc["Hotelling T2"]
    # direct: differences to the first layer (another full-rank contrast), inverse covariance, F
    z = D[:, 1:] - D[:, [0]]
    m, S, q = z.mean(0), np.cov(z, rowvar=False), L - 1
    t2 = n * m @ np.linalg.inv(S) @ m
    F = (n - q) * t2 / (q * (n - 1))
    assert got["statistic"] == pytest.approx(t2, rel=1e-10)
    assert got["p"] == pytest.approx(stats.f.sf(F, q, n - q), rel=1e-9)


def test_f_sf_is_scipy_f_sf_bitwise():
    # expected: scipy.stats.f.sf itself, compared with ==: the report prints the p scipy would
    from routestats.stats.profile import f_sf

    rng = np.random.default_rng(4)
    for F in (*rng.exponential(2.0, 40), 0.0, -1.0, 1e-300, 1e6, np.inf):
        for dfn, dfd in ((1, 1), (1, 30), (3, 21), (11, 2325), (2, 10)):
            assert f_sf(F, dfn, dfd) == float(stats.f.sf(F, dfn, dfd)), (F, dfn, dfd)
    assert np.isnan(f_sf(np.nan, 3, 10)) and np.isnan(stats.f.sf(np.nan, 3, 10))


def test_signflip_exact_equals_brute_force_enumeration():
    D = _D(n=9, shift=(0, 0.02, 0, 0.04))
    c = D - D.mean(axis=1, keepdims=True)
    T = (c.mean(0) ** 2).sum()
    count = 0
    for s in itertools.product([-1.0, 1.0], repeat=len(D)):  # every sign vector, written out
        cs = c * np.asarray(s)[:, None]
        count += (cs.mean(0) ** 2).sum() >= T - 1e-12 * T
    got = profile_shape(D, permutations=20_000).set_index("test").loc["sign-flip (centred profile)"]
    assert bool(got["exact"]) and got["permutations"] == 2**9
    assert got["p"] == count / 2**9


def test_signflip_random_draws_agree_with_the_exact_p():
    D = _D(seed=3, n=12, shift=(0, 0.01, 0, 0.02))
    exact = profile_shape(D, permutations=2**12).set_index("test").loc["sign-flip (centred profile)", "p"]
    approx = profile_shape(D, permutations=4000, seed=5).set_index("test").loc["sign-flip (centred profile)", "p"]
    assert abs(approx - exact) < 4 * np.sqrt(exact * (1 - exact) / 4000) + 1e-3  # Monte-Carlo error


def test_uniform_shift_is_not_a_shape_change():
    rng = np.random.default_rng(1)
    D = rng.normal(0.2, 0.05, (40, 1)) + rng.normal(0, 0.01, (40, 4))  # every layer moves by the same amount
    p = profile_shape(D, permutations=2000, seed=2)["p"]
    assert (p > 0.05).all()


def test_contrast_cis_equal_the_bootstrap_of_the_differenced_column():
    D = _D(n=30)
    t = layer_contrasts(D, resamples=2000, permutations=2000, seed=9)
    assert t["contrast"].tolist() == ["L1 − L0", "L2 − L0", "L3 − L0", "L2 − L1", "L3 − L1", "L3 − L2"]
    one = paired_inference((D[:, 3] - D[:, 2])[:, None], resamples=2000, permutations=2000, seed=9).to_frame()
    row = t[t["contrast"] == "L3 − L2"].iloc[0]
    # the same resamples (shared across columns); only the matrix product's summation order differs
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((one["ci_low"].iloc[0], one["ci_high"].iloc[0]), abs=1e-14)
    assert row["p_raw"] == one["p_raw"].iloc[0]
    assert row["mean_diff"] == pytest.approx((D[:, 3] - D[:, 2]).mean(), abs=1e-15)
    # Holm over the 6 contrasts (statsmodels' holm, cross-checked in test_stats)
    from statsmodels.stats.multitest import multipletests

    np.testing.assert_allclose(t["p_holm"], multipletests(t["p_raw"], method="holm")[1])


def test_bootstrap_means_equal_a_naive_resampling_loop():
    D = _D(n=17)
    rng = np.random.default_rng(4)
    got = bootstrap_means(D, 50, np.random.default_rng(4))
    want = np.array([D[np.minimum((rng.random(17) * 17).astype(int), 16)].mean(0) for _ in range(50)])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)


def test_profile_distance_ci():
    D = _D(n=40)
    t = profile_distance_ci(D, resamples=3000, seed=2).iloc[0]
    assert t["profile_distance"] == pytest.approx(np.linalg.norm(D.mean(0)), abs=1e-15)
    boot = np.linalg.norm(bootstrap_means(D, 3000, np.random.default_rng(2)), axis=1)
    assert (t["ci_low"], t["ci_high"]) == pytest.approx(tuple(np.percentile(boot, [2.5, 97.5])), abs=1e-12)
    assert t["ci_low"] < t["profile_distance"] < t["ci_high"]


def test_blocked_sign_products_draw_the_same_signs(monkeypatch):
    # at whole-split scale the sign-pattern products run in row blocks (routestats.stats.draws.row_blocks);
    # the draws must be the same stream: with 1,000-value blocks the counts equal those of one product
    rng = np.random.default_rng(3)
    D = rng.standard_normal((40, 4)) * 0.1 + np.array([0.0, 0.02, 0.01, -0.03])
    want_profile = profile_shape(D, permutations=3000, seed=5)
    want = paired_inference(D, resamples=200, permutations=3000, seed=5).to_frame()
    import routestats.stats.draws as inf
    from routestats.stats import inference

    monkeypatch.setattr(inf, "_BLOCK_VALUES", 1000)
    monkeypatch.setattr(inf, "_SPLIT_VALUES", 1000)
    assert len(list(inf.row_blocks(4096, 40))) == 164  # really blocked: 1000 // 40 = 25 rows, ceil(4096 / 25)
    got_profile = profile_shape(D, permutations=3000, seed=5)
    inference._RESULTS.clear()  # computed again, in blocks, not the kept result
    got = paired_inference(D, resamples=200, permutations=3000, seed=5).to_frame()
    assert got_profile["p"].tolist() == want_profile["p"].tolist()
    assert got["p_raw"].tolist() == want["p_raw"].tolist()
    monkeypatch.setattr(inf, "_DRAW_BUDGET", 0)  # too large to keep: drawn as they are used, block by block
    inf._DRAWS.clear()
    inference._RESULTS.clear()
    streamed = paired_inference(D, resamples=200, permutations=3000, seed=5).to_frame()
    assert streamed[["ci_low", "ci_high", "p_raw"]].equals(want[["ci_low", "ci_high", "p_raw"]])
    assert 0 < want_profile["p"].iloc[0] < 1  # a p-value the draws decide (not a floor or 1)


def test_profile_signs_are_the_integers_stream_of_the_reference(monkeypatch):
    # expected: the sign-flip p of the centred-profile test computed directly from
    # numpy's rng.integers(0, 2, size=(P, n)) in one call (what profile_shape drew until session 7),
    # here with an odd n and odd row blocks, so that half-used 64-bit words carry over between blocks
    from routestats.stats.profile import _CoinStream
    import routestats.stats.draws as inf

    rng = np.random.default_rng(8)
    D = rng.standard_normal((41, 3)) * 0.1 + np.array([0.0, 0.03, -0.01])
    c = D - D.mean(axis=1, keepdims=True)
    T = float((c.mean(axis=0) ** 2).sum())
    signs = np.random.default_rng(9).integers(0, 2, size=(3001, 41)) * 2.0 - 1.0
    count = int(((((signs @ c) / 41) ** 2).sum(axis=1) >= T - 1e-12 * T).sum())
    want = (count + 1) / 3002
    assert profile_shape(D, permutations=3001, seed=9)["p"].iloc[0] == want
    monkeypatch.setattr(inf, "_BLOCK_VALUES", 41 * 7)  # blocks of 7 rows: 287 values, odd
    monkeypatch.setattr(inf, "_SPLIT_VALUES", 41 * 7)
    assert len(list(inf.row_blocks(3001, 41))) == 429
    assert profile_shape(D, permutations=3001, seed=9)["p"].iloc[0] == want
    stream = _CoinStream(np.random.default_rng(1))
    got = np.concatenate([stream.take(k) for k in (0, 1, 3, 0, 64, 5, 2)])
    assert got.tolist() == np.random.default_rng(1).integers(0, 2, size=75).tolist()
