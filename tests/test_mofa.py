"""MoFA analyses against scipy, scikit-learn and hand computation."""

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import routestats as rs
from routestats.studies.mofa import (
    consecutive_ratio_tests, domain_ranking, pca_domain_response, pooled_perplexity, ppl_table, ratio_tests,
    worst_vs_best,
)
from tests.conftest import FIELDS, make_examples

RATIOS = [("4:0", 0), ("3:1", 1), ("2:2", 2), ("1:3", 3), ("0:4", 4)]


def fake_ppl(seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    base = {"code": 30.0, "prose": 50.0, "legal": 20.0, "owt": 25.0}
    shape = {"code": [0, 1, 2, 3, 6], "prose": [5, 1, 0, 1, 4], "legal": [0, 2, 4, 2, 1], "owt": [0, .1, .2, .3, .5]}
    for s in (1, 2, 3, 4, 5):
        for (r, k) in RATIOS:
            for d in base:
                rows.append({"seed": s, "ratio": r, "n_sigmoid": k, "domain": d,
                             "ppl": base[d] + shape[d][k] + rng.normal(0, 0.3)})
    return pd.DataFrame(rows)


def test_pooled_perplexity_is_exact():
    s = pd.DataFrame({"run_id": "r", "domain": ["a", "a", "b"], "sum_nll": [3.0, 5.0, 2.0], "n_tokens": [3, 5, 4]})
    p = pooled_perplexity(s).set_index("domain")
    assert p.loc["a", "ppl"] == pytest.approx(np.exp(8 / 8)) and p.loc["b", "ppl"] == pytest.approx(np.exp(0.5))


def test_ppl_table_from_runs(tmp_path):
    for (r, k) in RATIOS[:2]:
        w = rs.RunWriter(tmp_path / r.replace(":", "-"), run_id=f"m{k}", study="mofa",
                         factors={"ratio": r, "n_sigmoid": k}, seed=1, init_id="i", data_order_id="d", fields=FIELDS)
        w.write_examples(make_examples([[4, 3]]))
        w.write_lm_scores(pd.DataFrame({"domain": ["code", "code", "wiki"], "example_id": [0, 1, 0],
                                        "sum_nll": [10.0 + k, 12.0, 9.0], "n_tokens": [5, 5, 6]}))
        w.finalize()
    t = ppl_table(rs.load_runs(tmp_path))
    row = t[(t.ratio == "3:1") & (t.domain == "code")].iloc[0]
    assert row["ppl"] == pytest.approx(np.exp((11.0 + 12.0) / 10)) and row["n_sigmoid"] == 1


def test_domain_ranking():
    ppl = fake_ppl()
    per_domain, per_ratio = domain_ranking(ppl, in_domain="owt")
    d = per_domain.set_index("domain")
    means = ppl.groupby(["domain", "ratio"])["ppl"].mean().unstack()
    for dom in ("code", "prose", "legal"):
        assert d.loc[dom, "best"] == means.loc[dom].idxmin() and d.loc[dom, "worst"] == means.loc[dom].idxmax()
        assert d.loc[dom, "spread"] == pytest.approx(means.loc[dom].max() - means.loc[dom].min())
    assert d.loc["code", "worst"] == "0:4" and d.loc["legal", "worst"] == "2:2"
    assert per_domain.attrs["pure_endpoint_worst"] == int(d["worst"].isin(["4:0", "0:4"]).sum())
    assert per_ratio["n_best"].sum() == 4 and per_ratio["n_worst"].sum() == 4
    gap = means.loc["owt"].max() - means.loc["owt"].min()
    assert d.loc["code", "spread_vs_in_domain_gap"] == pytest.approx(d.loc["code", "spread"] / gap)


def test_ratio_tests_against_scipy_and_enumeration():
    ppl = fake_ppl().rename(columns={"domain": "stratum"})
    pairs = [("code", "4:0", "0:4"), ("prose", "2:2", "4:0")]
    t = ratio_tests(ppl, pairs, test="t")
    for (stratum, a, b), row in zip(pairs, t.itertuples()):
        w = ppl[ppl.stratum == stratum].pivot(index="seed", columns="ratio", values="ppl")
        ref = stats.ttest_rel(w[b], w[a])
        assert row.statistic == pytest.approx(ref.statistic, rel=1e-12) and row.p_raw == pytest.approx(ref.pvalue, rel=1e-10)
        assert row.mean_diff == pytest.approx((w[b] - w[a]).mean())
    with pytest.warns(UserWarning, match="cannot reach p < 0.05"):
        wil = ratio_tests(ppl, pairs, test="wilcoxon")
    w = ppl[ppl.stratum == "code"].pivot(index="seed", columns="ratio", values="ppl")
    assert wil["p_raw"].iloc[0] == pytest.approx(stats.wilcoxon(w["0:4"], w["4:0"], method="exact").pvalue)
    assert wil["min_attainable_p"].iloc[0] == 2 / 32  # n = 5: 0.0625 > 0.05
    with pytest.warns(UserWarning):
        sf = ratio_tests(ppl, pairs, test="signflip", holm_family=True)
    d = (w["0:4"] - w["4:0"]).to_numpy()
    brute = sum(abs((np.array(s) * d).mean()) >= abs(d.mean()) - 1e-12 for s in itertools.product([-1, 1], repeat=5)) / 32
    assert sf["p_raw"].iloc[0] == brute
    np.testing.assert_allclose(sf["p_holm"], rs.holm(sf["p_raw"]))


def test_worst_vs_best_uses_the_ranking():
    ppl = fake_ppl()
    wb = worst_vs_best(ppl)
    per_domain, _ = domain_ranking(ppl)
    assert wb.set_index("stratum").loc["code", "ratio_b"] == per_domain.set_index("domain").loc["code", "worst"]
    assert (wb["mean_diff"] > 0).all()  # worst minus best


def test_pca_protocol_matches_sklearn():
    sklearn = pytest.importorskip("sklearn.decomposition")
    ppl = fake_ppl()
    Y = ppl.groupby(["domain", "ratio"])["ppl"].mean().unstack()[[r for r, _ in RATIOS]]
    res = pca_domain_response(Y)
    Z = Y.sub(Y.mean(axis=1), axis=0).div(Y.std(axis=1, ddof=1), axis=0)  # row z-score, sample SD
    sk = sklearn.PCA().fit(Z.to_numpy())
    np.testing.assert_allclose(res.explained_ratio[:4], sk.explained_variance_ratio_[:4], atol=1e-12)
    sk_scores = sk.transform(Z.to_numpy())[:, 0]
    ours = res.scores.set_index("domain").loc[Y.index, "pc1"].to_numpy()
    sign = np.sign(sk.components_[0, -1])  # our orientation: positive loading on the all-sigmoid column
    np.testing.assert_allclose(ours, sign * sk_scores, atol=1e-12)
    assert res.loadings[0, -1] > 0
    top = res.scores.iloc[0]
    assert top["rank"] == 1 and top["pc1"] == res.scores["pc1"].max()
    assert set(res.scores["label"]) <= {"softmax-leaning", "sigmoid-leaning"}
    # "code" gets relatively worse as sigmoid heads are added: softmax-leaning
    assert res.scores.set_index("domain").loc["code", "label"] == "softmax-leaning"


def test_consecutive_ratio_tests_only_where_the_type_exists():
    rows = []
    rng = np.random.default_rng(1)
    for s in (1, 2, 3):
        for r, k in RATIOS:
            if k < 4:
                rows.append({"seed": s, "ratio": r, "n_sigmoid": k, "head_type": "softmax", "entropy": 2 + 0.1 * k + rng.normal(0, .01)})
            if k > 0:
                rows.append({"seed": s, "ratio": r, "n_sigmoid": k, "head_type": "sigmoid", "entropy": 3 - 0.1 * k + rng.normal(0, .01)})
    t = consecutive_ratio_tests(pd.DataFrame(rows))
    soft = t[t.head_type == "softmax"][["ratio_a", "ratio_b"]].values.tolist()
    sig = t[t.head_type == "sigmoid"][["ratio_a", "ratio_b"]].values.tolist()
    assert soft == [["4:0", "3:1"], ["3:1", "2:2"], ["2:2", "1:3"]]
    assert sig == [["3:1", "2:2"], ["2:2", "1:3"], ["1:3", "0:4"]]
    assert (t[t.head_type == "softmax"]["mean_diff"] > 0).all()
