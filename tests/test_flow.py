"""Routing beyond one layer's weights: norm-weighted attention and attention rollout (METHODS III 3.5-3.6)."""

import numpy as np
import pandas as pd
import pytest

import routestats as rs
from routestats.metrics.passes import rollout
from routestats.metrics.routing import sfm
from routestats.rundir.reductions import reduce_queries, summarise_queries
from tests.conftest import FIELDS, make_examples, random_attention


def write_with_norms(path, att, fields, norms, run_id="r", variant="baseline"):
    w = rs.RunWriter(path, run_id=run_id, study="test", factors={"variant": variant}, seed=0, init_id="i",
                     data_order_id="o", fields=FIELDS, overwrite=True)
    w.write_examples(make_examples(fields))
    with w.attention(10, dtype="float32", forms=("matrices",), group_size=2, value_norms=True) as sink:
        for ex, (a, nu) in enumerate(zip(att, norms)):
            sink.add(ex, a, value_norms=nu)
    return w.finalize()


FIELD_LISTS = [[4, 4, 3, 3, 3], [4, 3, 3, 3], [4, 4, 4, 3, 3, 3]]


def test_norm_weighted_sfm_equals_weight_sfm_when_all_norms_are_equal(tmp_path):
    rng = np.random.default_rng(0)
    att = [random_attention(rng, 2, 3, len(g)) for g in FIELD_LISTS]
    equal = [np.full((2, 3, len(g)), 2.5) for g in FIELD_LISTS]
    run = rs.load_run(write_with_norms(tmp_path / "r", att, FIELD_LISTS, equal))
    a = sfm(run)
    b = sfm(run, weighting="norm")
    np.testing.assert_allclose(b["sfm"], a["sfm"], atol=1e-6)  # float32 storage, float64 renormalisation
    # and the stored norms come back as written
    blk = next(iter(run.iter_attention(10)))
    np.testing.assert_array_equal(blk.value_norms, np.full((6, 5), 2.5, np.float32))


def test_norm_weighted_sfm_against_a_direct_computation(tmp_path):
    rng = np.random.default_rng(1)
    att = [random_attention(rng, 2, 2, len(g)) for g in FIELD_LISTS]
    norms = [rng.uniform(0.1, 3.0, (2, 2, len(g))) for g in FIELD_LISTS]
    run = rs.load_run(write_with_norms(tmp_path / "r", att, FIELD_LISTS, norms))
    got = sfm(run, weighting="norm").set_index(["example_id", "layer"])["sfm"]
    for e, (a, nu, g) in enumerate(zip(att, norms, FIELD_LISTS)):
        a32, nu32 = a.astype(np.float32).astype(np.float64), nu.astype(np.float32).astype(np.float64)
        g = np.array(g)
        for layer in range(2):
            per_head = []
            for h in range(2):  # by hand: weight each key by its norm, renormalise, sum the same-field mass
                t = a32[layer, h] * nu32[layer, h][None, :]
                t = t / t.sum(axis=1, keepdims=True)
                per_head.append(np.mean([t[i, g == g[i]].sum() for i in range(len(g))]))
            assert got[(e, layer)] == pytest.approx(np.mean(per_head), abs=1e-12)


def test_rollout_against_a_direct_matrix_product():
    rng = np.random.default_rng(2)
    w = random_attention(rng, 3, 2, 4).reshape(6, 4, 4)
    P = rollout(w, 3)
    R = [(0.5 * w[2 * layer:2 * layer + 2].mean(axis=0) + 0.5 * np.eye(4)) for layer in range(3)]
    R = [r / r.sum(axis=1, keepdims=True) for r in R]
    np.testing.assert_allclose(P[0], R[0], atol=1e-15)
    np.testing.assert_allclose(P[1], R[1] @ R[0], atol=1e-15)
    np.testing.assert_allclose(P[2], R[2] @ R[1] @ R[0], atol=1e-15)
    np.testing.assert_allclose(P.sum(axis=-1), 1.0, atol=1e-12)  # products of row-stochastic matrices
    # identity attention rolls out to the identity
    np.testing.assert_allclose(rollout(np.tile(np.eye(5), (6, 1, 1)), 3), np.tile(np.eye(5), (3, 1, 1)))


def test_rollout_sfm_is_the_sfm_of_the_rolled_out_matrix(tmp_path):
    from tests.conftest import write_run

    rng = np.random.default_rng(3)
    att = [random_attention(rng, 3, 2, len(g)) for g in FIELD_LISTS]
    run = rs.load_run(write_run(tmp_path / "r", att, FIELD_LISTS))
    got = sfm(run, weighting="rollout").set_index(["example_id", "layer"])["sfm"]
    for e, (a, g) in enumerate(zip(att, FIELD_LISTS)):
        P = rollout(a.astype(np.float32).reshape(6, len(g), len(g)), 3)
        g = np.array(g)
        for layer in range(3):
            want = np.mean([P[layer][i, g == g[i]].sum() for i in range(len(g))])
            assert got[(e, layer)] == pytest.approx(want, abs=1e-12)
    # the single-head path of the one SFM implementation agrees
    red = reduce_queries(P[:1], g, np.array([3, 4]))
    assert summarise_queries(red, g, np.array([3, 4]))["sfm"][0] == pytest.approx(
        np.mean([P[0][i, g == g[i]].sum() for i in range(len(g))]), abs=1e-12)


def test_value_norms_are_validated(tmp_path):
    w = rs.RunWriter(tmp_path / "r", run_id="r", study="t", factors={"variant": "baseline"}, seed=0, init_id="i",
                     data_order_id="o", fields=FIELDS, overwrite=True)
    w.write_examples(make_examples([[4, 3]]))
    a = np.full((1, 1, 2, 2), 0.5)
    with pytest.raises(rs.RoutestatsError, match="negative"):
        with w.attention(1, dtype="float32", value_norms=True) as sink:
            sink.add(0, a, value_norms=np.array([[[1.0, -1.0]]]))
    with pytest.raises(rs.RoutestatsError, match="value_norms missing"):
        with w.attention(2, dtype="float32", value_norms=True) as sink:
            sink.add(0, a)


def test_saab_model_norms_are_what_the_output_projection_makes_of_one_value(tmp_path):
    # independent path: feed head h's value of key j alone through the layer's own output projection
    torch = pytest.importorskip("torch")
    from runners.training.model import EncoderConfig, SAABEncoder

    torch.manual_seed(0)
    m = SAABEncoder(EncoderConfig(vocab_size=50, max_length=8, d_model=16, num_layers=2, num_heads=4, ff_dim=32,
                                  dropout=0.0)).eval()
    ids = torch.randint(5, 50, (1, 6))
    fields = torch.tensor([[4, 4, 3, 3, 3, 3]])
    mask = torch.ones(1, 6, dtype=torch.long)
    vs = {}
    hook = m.layers[1].attn.v.register_forward_hook(lambda _m, _a, out: vs.setdefault("v", out.detach()))
    with torch.no_grad():
        m(ids, fields, mask, need_probs=True, impl="explicit")
    hook.remove()
    attn = m.layers[1].attn
    got = attn.value_norms[0]  # [H, S]
    for h in range(4):
        for j in range(6):
            z = torch.zeros(16)
            z[h * 4:(h + 1) * 4] = vs["v"][0, j, h * 4:(h + 1) * 4]
            with torch.no_grad():
                want = (attn.o(z) - attn.o.bias).norm()
            assert float(got[h, j]) == pytest.approx(float(want), rel=1e-5)


def test_runs_without_norms_and_schema_1_0_runs_still_read(tmp_path):
    import json

    from tests.conftest import reseal, write_run

    rng = np.random.default_rng(4)
    fields = FIELD_LISTS * 3
    for name, variant in (("b", "baseline"), ("v", "saab")):
        att = [random_attention(rng, 2, 2, len(g)) for g in fields]
        path = write_run(tmp_path / name, att, fields, run_id=name, variant=variant)  # no value_norms column
        m = json.loads((path / "run.json").read_text())
        m["schema_version"] = "1.0"  # as written before the column existed
        (path / "run.json").write_text(json.dumps(m))
        reseal(path)
    rep = rs.analyse(tmp_path, resamples=100, permutations=100)
    assert "rollout_effects" in rep.tables() and "norm_effects" not in rep.tables()
    assert "do not store" in rep.section("flow").text
    assert list(rep.frame("rollout_effects").columns) == list(rep.frame("effects").columns)
    assert isinstance(rep.frame("rollout_effects"), pd.DataFrame)
    # the demo run (schema 1.1) has all three measures
    demo = rs.analyse("data/demo_run", resamples=100, permutations=100)
    assert {"effects", "norm_effects", "rollout_effects"} <= set(demo.tables())


def test_norm_weighted_and_rollout_come_from_one_read_of_the_matrices(tmp_path, monkeypatch):
    """Issue [report-floor] 2: each flow weighting read the whole matrices file again (two reads a run, the most
    expensive part of a small report's flow section); now the first asked computes the other in the same read.
    The values are those each gives alone (fresh runs, one weighting each), bitwise; a run without value norms
    still gives its rollout from one read, and its norm-weighted measure refuses in one line, as before."""
    monkeypatch.setenv("ROUTESTATS_CACHE", "off")
    rng = np.random.default_rng(7)
    att = [random_attention(rng, 2, 2, len(g)) for g in FIELD_LISTS]
    norms = [rng.uniform(0.1, 3.0, (2, 2, len(g))) for g in FIELD_LISTS]
    path = write_with_norms(tmp_path / "r", att, FIELD_LISTS, norms)
    run = rs.load_run(path)
    reads = []
    real = type(run).iter_attention
    monkeypatch.setattr(type(run), "iter_attention", lambda self, *a, **k: reads.append(1) or real(self, *a, **k))
    both = {w: sfm(run, weighting=w) for w in ("norm", "rollout")}
    assert len(reads) == 1
    for w in ("rollout", "norm"):  # each alone on a fresh run object: the same numbers
        alone = sfm(rs.load_run(path), weighting=w)
        pd.testing.assert_frame_equal(both[w], alone)
    # without value norms: the rollout still comes from one read; norm refuses as it did
    from tests.conftest import write_run

    plain = rs.load_run(write_run(tmp_path / "p", att, FIELD_LISTS, run_id="p"))
    reads.clear()
    assert len(sfm(plain, weighting="rollout")) and len(reads) == 1
    with pytest.raises(rs.RoutestatsError, match="no value norms"):
        sfm(plain, weighting="norm")
