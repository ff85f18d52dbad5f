"""Multi-run study tables, checked against hand computation from per-run library calls."""

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import routestats as rs
from routestats.studies.seeds import (
    PatternRules, across_seed_tests, dataset_table, depth_table, example_deltas, hierarchical_bootstrap,
    paired_deltas, placement_table, seed_table, shuffled_table, sweep_table, variance_components,
)
from tests.conftest import STUDY_CONDITIONS, STUDY_FIELDS, random_attention, write_run

FIELDS, CONDITIONS = STUDY_FIELDS, STUDY_CONDITIONS


def test_paired_deltas_against_per_run_sfm(tree):
    d = paired_deltas(tree)
    assert len(d) == 3 * 5 * 3  # seeds x non-baseline conditions x layers
    row = d[(d.seed == 2) & (d.w_f == 2.0) & (d.layer == 1)].iloc[0]
    b = rs.sfm(tree.get("s2-baseline")).query("layer == 1")["sfm"].to_numpy()
    v = rs.sfm(tree.get("s2-wf2")).query("layer == 1")["sfm"].to_numpy()
    assert row["delta"] == pytest.approx((v - b).mean(), abs=1e-15)
    assert row["baseline_sfm"] == pytest.approx(b.mean(), abs=1e-15)
    assert row["max_abs_diff"] == pytest.approx(np.abs(v - b).max(), abs=1e-15)


def test_sweep_table_null_check(tree):
    t = sweep_table(paired_deltas(tree))
    assert sorted(t["w_f"].unique()) == [0.0, 1.0, 2.0]
    # w_f = 0 was written with the baseline's own attention: the null check is exactly 0
    assert (t.loc[t.w_f == 0.0, "max_abs_diff"] == 0).all()
    assert (t.loc[t.w_f == 2.0, "max_abs_diff"] > 0).all()
    assert {"delta_l0", "delta_l1", "delta_l2"} <= set(t.columns)


def test_placement_shuffled_depth_dataset_tables(tree):
    d = paired_deltas(tree)
    p = placement_table(d)
    assert sorted(p["bias_layers"].unique()) == ["0,0,1", "all"]
    s = shuffled_table(d)
    ref = d[(d.seed == 1) & (d.variant == "saab") & (d.w_f == 1.0) & (d.bias_layers == "all")].sort_values("layer")
    sh = d[(d.seed == 1) & (d.variant == "saab_shuffled")].sort_values("layer")
    want = np.linalg.norm(ref["variant_sfm"].to_numpy() - sh["variant_sfm"].to_numpy())
    assert s.loc[s.seed == 1, "distance_saab_shuffled"].item() == pytest.approx(want, abs=1e-15)
    dt = depth_table(d)
    assert dt["depth"].unique().tolist() == [3] and dt["last_layer"].unique().tolist() == [2]
    ds = dataset_table(d)
    assert ds["n_seeds"].unique().tolist() == [3]
    assert ds.loc[ds.layer == 0, "delta"].item() == pytest.approx(ref_mean(d, 0), abs=1e-15)


def ref_mean(d, layer):
    r = d[(d.variant == "saab") & (d.w_f == 1.0) & (d.bias_layers == "all") & (d.layer == layer)]
    return r["delta"].mean()


def test_seed_table_values(tree):
    d = paired_deltas(tree)
    t = seed_table(d)
    assert t["seed"].tolist() == [1, 2, 3]
    r = t.iloc[0]
    ref = d[(d.seed == 1) & (d.variant == "saab") & (d.w_f == 1.0) & (d.bias_layers == "all")].set_index("layer")
    assert r["delta_upper"] == ref.loc[2, "delta"] and r["delta_lower"] == ref.loc[1, "delta"]
    assert r["displacement"] == pytest.approx(ref.loc[2, "delta"] - ref.loc[1, "delta"], abs=1e-15)
    assert r["variant_gap"] == pytest.approx(ref.loc[2, "variant_sfm"] - ref.loc[1, "variant_sfm"], abs=1e-15)


@pytest.mark.parametrize(
    "args, label",
    [  # (Δ_lo, Δ_up, g_b, g_v) with g = SFM_up − SFM_lo; the first matching rule of PatternRules wins
        ((0.01, 0.08, 0.02, 0.09), "L3-dominant change"),               # Δ_up > 0 and 0.08 >= 2 x |0.01|
        ((0.03, -0.02, 0.01, -0.04), "Ordering reverses"),               # g_b >= 0, g_v <= -0.01
        ((-0.06, 0.07, -0.2, -0.07), "Relatively strong paired change"),  # 0.07 < 2 x 0.06; Δ_lo <= -0.05
        ((0.06, 0.07, -0.2, -0.2), "No rule matched"),                    # Δ_lo rose: never "strong paired change";
                                                                          # changes >= 0.05 are not "small"
        ((0.0, 0.0001, 0.02, 0.02), "Small change"),                      # below the 0.01 floor: dominates nothing
        ((0.03, -0.02, -0.0009, -0.04), "Ordering reverses"),            # a baseline gap within 0.005 is a tie
        ((0.02, 0.01, 0.05, 0.02), "Gap narrows"),                        # |0.02| <= |0.05| - 0.01
        ((0.01, 0.01, 0.02, 0.02), "Small change"),
    ],
)
def test_pattern_rules(args, label):
    assert PatternRules().label(*args, "L3") == label


# The paper's Table 3, as printed: seed, baseline L2, L3, SAAB L2, L3, ΔL2, ΔL3, label (issue 30).
PAPER_TABLE_3 = [
    (0, .800, .902, .819, .889, +.019, -.013, "Gap narrows"),
    (7, .891, .909, .918, .857, +.027, -.052, "Ordering reverses"),
    (42, .933, .943, .932, .909, -.001, -.034, "Ordering reverses"),
    (99, .822, .891, .353, .927, -.469, +.036, "Relatively strong paired change"),
    (123, .960, .947, .973, .986, +.013, +.039, "L3-dominant change"),
    (256, .887, .891, .881, .957, -.006, +.066, "L3-dominant change"),
    (1001, .904, .899, .820, .949, -.084, +.050, "Relatively strong paired change"),
    (2024, .829, .906, .827, .960, -.002, +.054, "L3-dominant change"),
]


@pytest.mark.parametrize("seed, b2, b3, v2, v3, d2, d3, label", PAPER_TABLE_3)
def test_pattern_rules_reproduce_the_papers_table_3(seed, b2, b3, v2, v3, d2, d3, label):
    # the rules see the table's Δ columns and the gaps of its SFM columns
    assert PatternRules().label(d2, d3, b3 - b2, v3 - v2, "L3") == label, seed


def test_seed_table_labels_the_papers_table_3():
    # the same eight seeds through seed_table itself (layers 2 and 3 of a 4-layer model)
    rows = [{"baseline_run": f"b{s}", "variant_run": f"v{s}", "seed": s, "variant": "saab", "w_f": 1.0,
             "bias_layers": "all", "shuffled": False, "depth": 4, "dataset": "dbpedia", "step": 1, "layer": layer,
             "baseline_sfm": b, "variant_sfm": v, "delta": d, "n_examples": 10, "max_abs_diff": abs(d)}
            for s, b2, b3, v2, v3, d2, d3, _ in PAPER_TABLE_3 for layer, b, v, d in ((2, b2, v2, d2), (3, b3, v3, d3))]
    t = seed_table(pd.DataFrame(rows)).set_index("seed")
    assert t["pattern"].to_dict() == {s: label for s, *_, label in PAPER_TABLE_3}


def test_across_seed_tests_exact_and_t(tree):
    d = paired_deltas(tree)
    a = across_seed_tests(d)
    x = d[(d.variant == "saab") & (d.w_f == 1.0) & (d.bias_layers == "all")].pivot(index="seed", columns="layer", values="delta")
    for layer in range(3):
        v = x[layer].to_numpy()
        # exact enumeration by brute force over the 8 sign patterns
        obs = abs(v.mean())
        count = sum(abs((np.array(s) * v).mean()) >= obs - 1e-12 for s in itertools.product([-1, 1], repeat=3))
        row = a[a.layer == layer].iloc[0]
        assert row["p_signflip_exact"] == count / 8
        t = stats.ttest_1samp(v, 0.0)
        assert row["t"] == pytest.approx(t.statistic, rel=1e-12)
        assert row["p_t"] == pytest.approx(t.pvalue, rel=1e-12)
    assert a["min_attainable_p"].unique().tolist() == [0.25]


def test_hierarchical_bootstrap_and_variance_components(tree):
    ex = example_deltas(tree)
    h = hierarchical_bootstrap(ex, resamples=500, seed=3)
    assert (h["ci_low"] <= h["mean_delta"]).all() and (h["mean_delta"] <= h["ci_high"]).all()
    again = hierarchical_bootstrap(ex, resamples=500, seed=3)
    pd.testing.assert_frame_equal(h, again)
    v = variance_components(ex)
    # balanced one-way design: REML equals the ANOVA estimators when the between part is positive
    ref = ex[(ex.variant == "saab") & (ex.w_f == 1.0) & (ex.bias_layers == "all")]
    for layer, g in ref.groupby("layer"):
        groups = [x["diff"].to_numpy() for _, x in g.groupby("seed")]
        k, n = len(groups), len(groups[0])
        grand = np.mean(np.concatenate(groups))
        msb = n * sum((x.mean() - grand) ** 2 for x in groups) / (k - 1)
        msw = sum(((x - x.mean()) ** 2).sum() for x in groups) / (k * (n - 1))
        row = v[v.layer == layer].iloc[0]
        assert row["mean_delta"] == pytest.approx(grand, abs=1e-10)
        if msb > msw:
            assert row["var_within_seed"] == pytest.approx(msw, rel=1e-4)
            assert row["var_between_seeds"] == pytest.approx((msb - msw) / n, rel=1e-3, abs=1e-8)


def test_constant_deltas_collapse_bootstrap(tmp_path):
    rng = np.random.default_rng(0)
    for seed in (1, 2):
        base = [random_attention(rng, 1, 1, len(g)) for g in FIELDS]
        for name in ("baseline", "saab"):
            write_run(tmp_path / f"s{seed}" / name, base, FIELDS, run_id=f"{seed}{name}", seed=seed,
                      init_id=f"i{seed}", data_order_id=f"o{seed}", factors=CONDITIONS[name])
    h = hierarchical_bootstrap(example_deltas(rs.load_runs(tmp_path)), resamples=50)
    assert h[["mean_delta", "ci_low", "ci_high"]].abs().max().max() == 0.0


def test_depth_and_dataset_tables(tmp_path):
    rng = np.random.default_rng(5)
    for seed in (1, 2):
        for depth, dataset in ((2, "dbpedia"), (3, "pubmed")):
            base = [random_attention(rng, depth, 1, len(g)) for g in FIELDS]
            var = [random_attention(rng, depth, 1, len(g)) for g in FIELDS]
            tag = f"s{seed}-d{depth}"
            for name, att in (("baseline", base), ("saab", var)):
                write_run(tmp_path / tag / name, att, FIELDS, run_id=f"{tag}-{name}", seed=seed, init_id=tag,
                          data_order_id=tag, factors={**CONDITIONS[name], "depth": depth, "dataset": dataset})
    runs = rs.load_runs(tmp_path)
    d = paired_deltas(runs)
    dt = depth_table(d)
    assert sorted(dt["depth"].unique()) == [2, 3]
    assert dt.loc[dt.depth == 3, "last_layer"].unique().tolist() == [2]
    r = dt[(dt.depth == 2) & (dt.seed == 1)].iloc[0]
    g = d[(d.depth == 2) & (d.seed == 1)].sort_values("layer")
    assert r["delta_last"] == g["delta"].iloc[-1]
    assert r["profile_distance"] == pytest.approx(np.linalg.norm(g["variant_sfm"] - g["baseline_sfm"]), abs=1e-15)
    ds = dataset_table(d)
    # per data set and layer: mean over the two seeds of the pair deltas
    want = d[(d.dataset == "pubmed") & (d.layer == 1)]["delta"].mean()
    assert ds[(ds.dataset == "pubmed") & (ds.layer == 1)]["delta"].item() == pytest.approx(want, abs=1e-15)
    assert ds.groupby("dataset")["layer"].nunique().to_dict() == {"dbpedia": 2, "pubmed": 3}


def test_single_seed_groups_are_skipped(tree):
    ex = example_deltas(tree)
    one = ex[ex.seed == 1]
    with pytest.raises(rs.RoutestatsError, match="at least 2 seeds"):
        hierarchical_bootstrap(one, resamples=10)
    with pytest.raises(rs.RoutestatsError, match="at least 2 seeds"):
        variance_components(one)
    two = ex[ex.seed.isin([1, 2])]
    assert hierarchical_bootstrap(two, resamples=10)["n_seeds"].unique().tolist() == [2]


def _one_way(k: int, n: int, between_sd: float, seed: int, unbalanced: bool = False) -> pd.DataFrame:
    """Per-example deltas of k seeds x n examples with a seed effect of SD ``between_sd`` (layer 0)."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(k):
        mu = 0.1 + between_sd * rng.standard_normal()
        for e in range(n - (s if unbalanced else 0)):
            rows.append({"seed": s, "dataset": "d", "depth": 4, "layer": 0, "example_id": e, "variant": "saab",
                         "w_f": 1.0, "bias_layers": "all", "shuffled": False, "diff": mu + 0.05 * rng.standard_normal()})
    return pd.DataFrame(rows)


@pytest.mark.filterwarnings("ignore:The MLE may be on the boundary")  # statsmodels says so of small variances
def test_balanced_closed_form_reml_equals_statsmodels_and_uses_t():
    import statsmodels.formula.api as smf

    ex = _one_way(k=3, n=32, between_sd=0.03, seed=11)
    row = variance_components(ex).iloc[0]
    # independent: statsmodels' iterative REML fit of the same model on the same rows
    fit = smf.mixedlm("diff ~ 1", ex, groups=ex["seed"]).fit(reml=True)
    assert fit.converged
    assert row["mean_delta"] == pytest.approx(fit.fe_params["Intercept"], rel=1e-9)
    assert row["se"] == pytest.approx(fit.bse_fe["Intercept"], rel=1e-4)
    assert row["var_between_seeds"] == pytest.approx(fit.cov_re.iloc[0, 0], rel=1e-3)
    assert row["var_within_seed"] == pytest.approx(fit.scale, rel=1e-4)
    # the SE equals the paired-t one over the seed means, and the interval uses t with k - 1 = 2 df
    means = ex.groupby("seed")["diff"].mean()
    assert row["se"] == pytest.approx(means.std(ddof=1) / np.sqrt(3), rel=1e-12)
    q = stats.t.ppf(0.975, 2)  # 4.303, not 1.96
    assert row["df"] == 2 and row["ci_high"] - row["mean_delta"] == pytest.approx(q * row["se"], rel=1e-12)
    assert bool(row["converged"])


def test_unbalanced_fit_reports_convergence_and_never_quotes_a_failed_fit(monkeypatch):
    from statsmodels.regression.mixed_linear_model import MixedLM

    ex = _one_way(k=4, n=20, between_sd=0.03, seed=5, unbalanced=True)
    ok = variance_components(ex).iloc[0]
    assert bool(ok["converged"]) and ok["method"].startswith("MixedLM") and ok["df"] == 3
    original = MixedLM.fit

    def not_converged(self, *a, **kw):  # the optimiser stops early, as on the demo layer 0
        res = original(self, *a, **kw)
        res.converged = False
        return res

    monkeypatch.setattr(MixedLM, "fit", not_converged)
    bad = variance_components(ex).iloc[0]
    assert not bool(bad["converged"]) and np.isnan(bad["mean_delta"]) and np.isnan(bad["ci_low"])


def test_a_baseline_gap_within_two_standard_errors_is_a_tie():
    # issue [true-words-2] 5: a planted tie whose sample gap (-0.006) fell just outside the fixed 0.005 was
    # "No rule matched" beside "Ordering reverses"; the tolerance is now max(0.005, 2 SE of the seed's own gap).
    # One seed, 25 examples: baseline gap -0.006 with per-example SD 0.02 (SE 0.004, tolerance 0.008); the variant
    # lifts layer 2 by 0.03 and lowers layer 3 by 0.004 (variant gap -0.040): by the rules, the ordering reverses
    from routestats.studies.seeds import summarise_deltas

    rng = np.random.default_rng(0)
    e = rng.standard_normal(25)
    e = 0.02 * (e - e.mean()) / e.std(ddof=1)  # exactly mean 0, SD 0.02
    b2 = 0.8 + 0.01 * rng.standard_normal(25)
    b3 = b2 - 0.006 + e
    meta = {"baseline_run": "b", "variant_run": "v", "seed": 1, "variant": "saab", "w_f": 1.0, "bias_layers": "all",
            "shuffled": False, "depth": 4, "dataset": "dbpedia", "step": 1}
    rows = [{**meta, "example_id": i, "layer": layer, "baseline": b, "variant_sfm": b + d, "diff": d}
            for i in range(25) for layer, b, d in ((2, b2[i], 0.03), (3, b3[i], -0.004))]
    ex = pd.DataFrame(rows)
    t = seed_table(summarise_deltas(ex), examples=ex).iloc[0]
    assert t["baseline_gap"] == pytest.approx(-0.006) and t["baseline_gap_se"] == pytest.approx(0.004)
    assert t["tie_tolerance"] == pytest.approx(0.008) and t["pattern"] == "Ordering reverses"
    # without the examples, the fixed 0.005: the same seed is no tie, and no rule matches its changes
    assert seed_table(summarise_deltas(ex)).iloc[0]["pattern"] != "Ordering reverses"


def test_across_seed_tests_beyond_exact_enumeration(tree):
    """Issue [plan-2]: a study of more than 16 seeds got no across-seed test at all ("exact enumeration is limited to
    16") although the plan may recommend 17-28 seeds. Beyond 16 the sign-flip p is drawn (20,000 random patterns,
    plus-one rule): it agrees with brute-force enumeration of all 2^18 = 262,144 patterns within Monte Carlo error
    (4 SE), and the t-test is scipy's."""
    rng = np.random.default_rng(3)
    seeds, layers = 18, 3
    mean = np.array([0.004, 0.0, -0.002])
    x = mean + 0.01 * rng.standard_normal((seeds, layers))
    deltas = pd.DataFrame([{"dataset": "d", "depth": 4, "seed": s, "layer": layer, "delta": x[s, layer]}
                           for s in range(seeds) for layer in range(layers)])
    out = across_seed_tests(deltas, condition=lambda d: np.ones(len(d), dtype=bool))
    assert (out["signflip_draws"] == 20_000).all() and (out["n_seeds"] == 18).all()
    signs = 1 - 2 * ((np.arange(2**seeds)[:, None] >> np.arange(seeds)) & 1)  # every pattern, as +1 / -1
    for layer in range(layers):
        stat = np.abs(signs @ x[:, layer])
        exact = float(np.mean(stat >= abs(x[:, layer].sum()) - 1e-12))
        got = float(out.loc[out["layer"] == layer, "p_signflip_exact"].iloc[0])
        assert abs(got - exact) <= 4 * np.sqrt(exact * (1 - exact) / 20_000) + 1 / 20_001, (layer, got, exact)
        t = stats.ttest_1samp(x[:, layer], 0.0)
        assert float(out.loc[out["layer"] == layer, "p_t"].iloc[0]) == pytest.approx(t.pvalue, rel=1e-12)
    assert out["min_attainable_p"].iloc[0] == pytest.approx(1 / 20_001)
