"""Routing metrics, cross-checked against brute-force loops written straight from METHODS section 2."""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import routestats as rs
from routestats.metrics.routing import adjust
from tests.conftest import random_attention, write_run

PUBMED = {"named": {"3": "methods", "4": "results", "5": "conclusions"}, "mask_id": 6, "vocab_size": 7}


def brute_force(A, g, named):
    """Loops transcribed from METHODS 2.1-2.3 for one (layer, head) matrix."""
    n = len(g)
    valid = [g[i] in named for i in range(n)]
    nq = max(1, sum(valid))
    sfm = sum(sum(A[i][j] for j in range(n) if valid[j] and g[j] == g[i]) for i in range(n) if valid[i]) / nq
    ent = sum(-sum(A[i][j] * math.log(A[i][j] + 1e-10) for j in range(n)) for i in range(n) if valid[i]) / nq
    f2f = {}
    for s in named:
        src = [i for i in range(n) if valid[i] and g[i] == s]
        for d in named:
            tot = sum(sum(A[i][j] for j in range(n) if valid[j] and g[j] == d) for i in src)
            f2f[s, d] = (tot / max(1, len(src)), bool(src))
    return sfm, ent, f2f


def test_methods_worked_example(tmp_path):
    # METHODS 2.1: these rows with field ids (4, 4, 3, 3) give SFM 0.8
    A = np.array([[0.6, 0.2, 0.1, 0.1], [0.3, 0.5, 0.1, 0.1], [0.1, 0.1, 0.5, 0.3], [0.1, 0.1, 0.2, 0.6]])
    run = rs.load_run(write_run(tmp_path / "r", [A[None, None]], [[4, 4, 3, 3]], dtype="float32"))
    assert rs.sfm(run)["sfm"].iloc[0] == pytest.approx(0.8, abs=1e-7)  # float32 storage


def test_metrics_match_brute_force(tmp_path, rng):
    # three named fields, a mask id (6) and a [NONE] position (1) that are not valid,
    # and an example lacking field 5
    fields = [[3, 3, 4, 4, 5, 5, 6], [3, 1, 4, 4, 4, 5], [3, 3, 3, 4, 4], [5, 3, 4, 3, 5]]
    att = [random_attention(rng, 2, 3, len(g)) for g in fields]
    run = rs.load_run(write_run(tmp_path / "r", att, fields, fields=PUBMED, dtype="float32"))
    h = rs.head_metrics(run)
    named = [3, 4, 5]
    for row in h.itertuples():
        A = att[row.example_id][row.layer, row.head].astype(np.float32).astype(np.float64)
        sfm, ent, _ = brute_force(A, fields[row.example_id], named)
        assert row.sfm == pytest.approx(sfm, abs=1e-12)
        assert row.entropy == pytest.approx(ent, abs=1e-12)
    # field-to-field, reference rule: examples lacking the source count as 0 in the mean
    f = rs.field_to_field(run, missing="zero")
    fx = rs.field_to_field(run, missing="exclude")
    for layer in (0, 1):
        for s in named:
            for d in named:
                vals = []
                for e, g in enumerate(fields):
                    for head in range(3):
                        A = att[e][layer, head].astype(np.float32).astype(np.float64)
                        vals.append(brute_force(A, g, named)[2][s, d])
                zero = np.mean([v for v, _ in vals])
                excl = np.mean([v for v, has in vals if has])
                got = f[(f.layer == layer) & (f.source == s) & (f.destination == d)]["mass"].item()
                gotx = fx[(fx.layer == layer) & (fx.source == s) & (fx.destination == d)]["mass"].item()
                assert got == pytest.approx(zero, abs=1e-12)
                assert gotx == pytest.approx(excl, abs=1e-12)
    # example 2 lacks field 5: 3 of 4 examples have it
    assert fx[(fx.source == 5)]["n_examples_with_source"].unique().tolist() == [3]


def test_storage_forms_agree_exactly(tmp_path, rng):
    fields = [[4, 4, 3, 3, 3], [4, 3, 3], [4, 4, 4, 3, 3, 3, 3, 5]]
    att = [random_attention(rng, 2, 2, len(g)) for g in fields]
    run = rs.load_run(write_run(tmp_path / "r", att, fields, dtype="float16", forms=("matrices", "reductions")))
    a = rs.head_metrics(run, form="matrices")
    b = rs.head_metrics(run, form="reductions")
    pd.testing.assert_frame_equal(a, b, check_exact=True)


def test_layer_and_head_aggregation(tmp_path, rng):
    fields = [[4, 4, 3, 3], [4, 3, 3, 3, 3]]
    att = [random_attention(rng, 2, 3, len(g)) for g in fields]
    run = rs.load_run(write_run(tmp_path / "r", att, fields))
    h = rs.head_metrics(run)
    layers = rs.layer_summary(run)
    heads = rs.head_sfm(run)
    for layer in (0, 1):
        # layer SFM = mean over examples of the head-mean = mean of the head values (equal weights)
        want = h[h.layer == layer].groupby("example_id")["sfm"].mean().mean()
        assert layers.loc[layers.layer == layer, "sfm"].item() == pytest.approx(want, abs=1e-15)
        assert heads[heads.layer == layer]["sfm"].mean() == pytest.approx(want, abs=1e-15)
    assert layers["is_max_sfm"].sum() == 1
    assert layers.loc[layers["is_max_sfm"], "sfm"].item() == layers["sfm"].max()


@pytest.mark.parametrize(
    "g, expected",
    [
        ([3, 3, 4, 4], 0.5),  # METHODS 2.5 test value
        ([3, 3, 3, 4], 10 / 16),  # METHODS 2.5 test value
        ([3, 3, 4], 5 / 9),  # METHODS [3,3,4,0,5] mask [1,1,1,0,1] cap 4: stored positions are 3,3,4
        ([3, 3, 4, 5], 5 / 9),  # the mask id (5) is not a named field
        ([4, 4, 4], 1.0),
    ],
)
def test_opportunity_values(tmp_path, g, expected):
    run = rs.load_run(write_run(tmp_path / "r", [np.full((1, 1, len(g), len(g)), 1 / len(g))], [g]))
    o = rs.opportunity(run)
    assert o["opportunity"].item() == pytest.approx(expected, abs=1e-15)
    assert o["defined_adjusted"].item() == (expected < 1)


def test_adjust_values():
    # METHODS 2.5: adj(0.6, 0.6) = 0; adj(1, 0.6) = 1; adj(0.4, 0.6) < 0; adj(1, 1) undefined
    assert adjust(0.6, 0.6) == 0.0
    assert adjust(1.0, 0.6) == pytest.approx(1.0, abs=1e-15)
    assert adjust(0.4, 0.6) < 0
    assert math.isnan(adjust(1.0, 1.0))


def test_profile_distance_and_gap():
    # METHODS 2.7: Table 1 rounded profiles give 0.1193 (paper: 0.119)
    assert rs.profile_distance([0.750, 0.884, 0.904, 0.899], [0.814, 0.860, 0.820, 0.949]) == pytest.approx(0.1193, abs=5e-5)
    assert rs.layer_gap([0.1, 0.2, 0.5, 0.9]) == pytest.approx(0.4)
    with pytest.raises(rs.RoutestatsError, match="profiles differ in length"):
        rs.profile_distance([1, 2], [1, 2, 3])


def test_word_attention_brute_force(rng):
    A = random_attention(rng, 1, 1, 7)[0, 0]
    words = [0, 1, 1, 2, 3, 3, 3]
    W, groups = rs.word_attention(A, words)
    for ui, u in enumerate(groups):
        for vi, v in enumerate(groups):
            qi = [i for i in range(7) if words[i] == u]
            kj = [j for j in range(7) if words[j] == v]
            assert W[ui, vi] == pytest.approx(sum(A[i, j] for i in qi for j in kj) / len(qi), abs=1e-15)
    np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.sampled_from([3, 4]), min_size=2, max_size=12),
    st.integers(0, 2**32 - 1),
)
def test_property_sfm_bounds_and_uniform_adjusted_zero(tmp_path_factory, g, seed):
    rng = np.random.default_rng(seed)
    n = len(g)
    path = tmp_path_factory.mktemp("p")
    att = random_attention(rng, 1, 2, n)
    uniform = np.full((1, 2, n, n), 1.0 / n)  # the same layer x head grid as example 0
    run = rs.load_run(write_run(path / "r", [att, uniform], [g, g], dtype="float32"))
    s = rs.sfm(run)
    assert ((s["sfm"] >= -1e-7) & (s["sfm"] <= 1 + 1e-7)).all()
    adj = rs.adjusted_sfm(run)
    u = adj[adj.example_id == 1]["sfm_adj"].item()
    if len(set(g)) == 1:
        assert math.isnan(u)
    else:
        # uniform attention over valid keys has SFM = O_e exactly, so the adjusted SFM is 0
        assert u == pytest.approx(0.0, abs=1e-6)  # float32 storage of 1/n


def test_disk_cache_round_trip_and_key(tmp_path, rng, monkeypatch):
    fields = [[4, 4, 3, 3], [4, 3, 3, 3, 3]]
    att = [random_attention(rng, 2, 2, len(g)) for g in fields]
    path = write_run(tmp_path / "r", att, fields)
    monkeypatch.setenv("ROUTESTATS_CACHE", str(tmp_path / "cache"))
    first = rs.head_metrics(rs.load_run(path))
    files = list((tmp_path / "cache").glob("*.npz"))
    assert len(files) == 1
    # a fresh Run object reads the cached table: identical numbers, attention never opened
    run = rs.load_run(path)
    with monkeypatch.context() as m:
        m.setattr(type(run), "iter_attention", lambda *a, **k: (_ for _ in ()).throw(AssertionError("read")))
        second = rs.head_metrics(run)
        pd.testing.assert_frame_equal(first, second, check_dtype=False)
        np.testing.assert_array_equal(rs.field_to_field(run)["mass"], rs.field_to_field(rs.load_run(path))["mass"])
    # different inputs (another run written with other attention) get another key
    att2 = [random_attention(rng, 2, 2, len(g)) for g in fields]
    path2 = write_run(tmp_path / "r2", att2, fields)
    rs.head_metrics(rs.load_run(path2))
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 2


def test_cache_entries_with_the_old_constant_columns_read_the_same(tmp_path, rng, monkeypatch):
    # expected: head_metrics computed afresh. Entries written before the pass stopped storing run_id and
    # step on every row hold them as h_run_id / h_step; read back, the frame is the same
    fields = [[4, 4, 3, 3], [4, 3, 3, 3, 3]]
    path = write_run(tmp_path / "r", [random_attention(rng, 2, 2, len(g)) for g in fields], fields)
    want = rs.head_metrics(rs.load_run(path))  # the test default: cache off, computed
    monkeypatch.setenv("ROUTESTATS_CACHE", str(tmp_path / "cache"))
    rs.head_metrics(rs.load_run(path))
    (entry,) = (tmp_path / "cache").glob("*.npz")
    with np.load(entry) as z:
        arrays = {k: z[k] for k in z.files}
    assert "h_run_id" not in arrays and "h_step" not in arrays
    arrays["h_run_id"] = np.array(["someone-else"] * len(arrays["h_sfm"]))  # as an old entry stored them
    arrays["h_step"] = np.full(len(arrays["h_sfm"]), 999)
    np.savez(entry, **arrays)
    got = rs.head_metrics(rs.load_run(path))
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


def test_warm_cache_in_a_process_pool(tmp_path, monkeypatch):
    from routestats.rundir.synthetic import synthetic_pair
    from routestats.metrics.passes import warm_cache

    synthetic_pair(tmp_path / "t" / "s1", seed=1, n_examples=3, steps=(10, 20))
    synthetic_pair(tmp_path / "t" / "s2", seed=2, n_examples=3, steps=(10, 20))
    runs = rs.load_runs(tmp_path / "t")
    assert warm_cache(runs, workers=2) == 0  # cache off (the test default): nothing to do
    monkeypatch.setenv("ROUTESTATS_CACHE", str(tmp_path / "cache"))
    assert warm_cache(runs, workers=2) == 4 * 2  # 4 runs x 2 steps, computed in worker processes
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 8
    cached = rs.head_metrics(rs.load_runs(tmp_path / "t").runs[0], step=10)  # read from the worker's cache file
    monkeypatch.setenv("ROUTESTATS_CACHE", "off")
    computed = rs.head_metrics(rs.load_runs(tmp_path / "t").runs[0], step=10)
    pd.testing.assert_frame_equal(cached, computed, check_dtype=False)


def test_pass_frame_is_narrow_and_callers_get_int64(tmp_path, rng):
    # expected: the dtypes the public frames always had (int64), while the frame every metric of a step
    # reads keeps head as int16 and the query counts as int32 (its memory at whole-split scale)
    from routestats.metrics import routing

    fields = [[4, 4, 3, 3, 3], [4, 3, 3]]
    run = rs.load_run(write_run(tmp_path / "r", [random_attention(rng, 2, 3, len(g)) for g in fields], fields))
    inner = routing.head_pass(run).heads
    assert (inner["head"].dtype, inner["n_valid"].dtype, inner["n_trivial"].dtype) == (np.int16, np.int32, np.int32)
    h = rs.head_metrics(run)
    assert {c: str(h[c].dtype) for c in ("layer", "head", "n_valid", "n_trivial")} == dict.fromkeys(
        ("layer", "head", "n_valid", "n_trivial"), "int64")
    # every position of both examples is in a named field (3 or 4): 5 and 3 valid queries, on each of the
    # 2 layers x 3 heads, heads numbered 0-2 within each layer
    assert h["n_valid"].tolist() == [5] * 6 + [3] * 6 and h["head"].tolist() == [0, 1, 2] * 4
    assert str(rs.head_sfm(run)["head"].dtype) == "int64"


@given(st.lists(st.lists(st.integers(-2, 6), max_size=12), max_size=8),
       st.lists(st.integers(-1, 6), min_size=1, max_size=4, unique=True))
@settings(max_examples=200, deadline=None)
def test_field_counts_match_a_comparison_per_example(examples, named):
    # the per-example counts behind the opportunity O_e, taken over all examples' positions at once, against the
    # comparison of each example's ids with each named id (the code it replaced), including ids that are not named,
    # named ids in any order and examples with no position
    from routestats.metrics.routing import _field_counts

    named = np.array(named)
    got = _field_counts([np.array(g, dtype=np.int64) for g in examples], named)
    want = np.array([[sum(1 for v in g if v == f) for f in named] for g in examples], dtype=np.int64).reshape(
        len(examples), len(named))
    assert got.dtype == np.int64 and np.array_equal(got, want)
