"""Issue [plan-2]: "a change smaller than x would be missed at least one time in five" holds in the share of samples
it states. x is sized from a one-sided 97.5 % lower bound on the SD (routestats.stats.spread.sd_lower_bound, Bonett
2006); sized from the sample SD it was too large about half the time. Judged against planted truth: populations of
known SD, unlike the normal one the method assumes (skewed, heavy-tailed, many exact zeros, discrete)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import routestats as rs
from routestats.stats.power import detectable_change
from routestats.stats.spread import sd_lower_bound

# each population: a draw of (n, k) differences with mean 0 from a generator, and its true SD (closed forms)
POPULATIONS = {
    "normal": (lambda g, shape: g.standard_normal(shape), 1.0),
    "lognormal": (lambda g, shape: g.lognormal(0.0, 0.8, shape) - np.exp(0.32),
                  float(np.sqrt((np.exp(0.64) - 1) * np.exp(0.64)))),  # Var = (e^{s^2} - 1) e^{s^2}
    "t3": (lambda g, shape: g.standard_t(3, shape), float(np.sqrt(3.0))),  # Var t_nu = nu / (nu - 2)
    "zeros60": (lambda g, shape: g.standard_normal(shape) * (g.random(shape) > 0.6), float(np.sqrt(0.4))),
    "discrete": (lambda g, shape: g.integers(-2, 3, shape).astype(float), float(np.sqrt(2.0))),  # uniform -2..2
}


@pytest.mark.parametrize("name", sorted(POPULATIONS))
@pytest.mark.parametrize("n", [8, 20, 64])
def test_the_sd_bound_covers_the_true_sd_in_at_least_nine_samples_in_ten(name, n):
    draw, sigma = POPULATIONS[name]
    covered = float(np.mean(sd_lower_bound(draw(np.random.default_rng(n), (n, 4000))) <= sigma))
    # nominal 0.975; at 0.95 measured 0.92-0.99 over these populations and sizes (the discrete one, lighter-tailed
    # than the normal, the lowest); the sentence promises "at least nine samples in ten"
    assert covered >= 0.93, (name, n, covered)


def test_the_bound_is_normal_theory_for_normal_differences_and_below_the_sample_sd():
    # for normal differences of n = 400 Bonett's bound is close to the chi-square bound, s sqrt((n-1) / chi2_0.95(n-1))
    # at 97.5 % (scipy.stats.chi2, an independent implementation of normal theory); never above the sample SD
    x = np.random.default_rng(0).standard_normal((400, 50))
    chi = x.std(axis=0, ddof=1) * np.sqrt(399 / stats.chi2.ppf(0.975, 399))
    low = sd_lower_bound(x)
    assert np.allclose(low, chi, rtol=0.02) and (low <= x.std(axis=0, ddof=1)).all()
    assert sd_lower_bound(np.zeros((10, 1)))[0] == 0.0 and np.isnan(sd_lower_bound(np.ones((1, 1)))[0])


def detected_share(g, draw, change: float, n: int, alpha: float, reps: int = 600) -> float:
    """How often the report's own test (routestats.paired_inference: sign-flip p and bootstrap CI, each column a
    fresh sample of n differences shifted by ``change``) calls the change at alpha."""
    d = draw(g, (n, reps)) + change
    res = rs.paired_inference(d, resamples=199, permutations=999, seed=3)
    return float(np.mean((res.p_raw < alpha) & ((res.ci_low > 0) | (res.ci_high < 0))))


@pytest.mark.parametrize("name", ["discrete", "lognormal", "normal", "t3", "zeros60"])
def test_a_change_just_below_the_stated_size_is_missed_at_least_one_time_in_five(name):
    # 80 pilot-sized samples of n = 24; each states x from its own SD bound; the truth: how often the report's test
    # calls a change of 0.99 x at this n (600 fresh samples of the planted population). The sentence holds where
    # that is at most 0.8; it must hold in at least nine samples in ten (measured over three seeds: lognormal
    # 0.95-0.975, t3 0.96-1.0, discrete 1.0; with a 95 % bound lognormal 0.86-0.95), and sized from the sample SD it does not
    # (0.53-0.75)
    draw, _sigma = POPULATIONS[name]
    g = np.random.default_rng(24)
    n, alpha = 24, 0.05
    holds, holds_sample_sd = [], []
    for _ in range(80):
        s = draw(g, (n, 1))
        x_low = float(detectable_change(sd_lower_bound(s), n, alpha)[0])
        x_sample = float(detectable_change(s.std(axis=0, ddof=1), n, alpha)[0])
        holds.append(detected_share(g, draw, 0.99 * x_low, n, alpha) <= 0.8)
        holds_sample_sd.append(detected_share(g, draw, 0.99 * x_sample, n, alpha) <= 0.8)
    assert np.mean(holds) >= 0.9, (name, np.mean(holds))
    if name != "discrete":  # five values of bounded range: their sample SD barely varies, the old sizing held in 0.8
        assert np.mean(holds_sample_sd) < 0.8, (name, np.mean(holds_sample_sd))  # the old sizing, caught
