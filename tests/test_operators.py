"""Pathway Jacobians: closed forms vs autograd of the pathway-split forward, and finite differences."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from routestats.regime import Operators, certify, directional  # noqa: E402
from runners.mofa import GPTConfig, MoFAGPT  # noqa: E402
from runners.operators import hidden_entering, mofa_sublayer, operating_point  # noqa: E402
from runners.train import seed_everything  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.mark.parametrize("n_sigmoid, bias", [(0, "neg_log_t"), (2, "neg_log_t"), (4, "neg_log_n"), (1, "none")])
def test_closed_forms_match_autograd(n_sigmoid, bias):
    torch.set_num_threads(1)
    seed_everything(5)
    m = MoFAGPT(GPTConfig(n_ctx=12, n_layer=2, n_head=4, d_model=16, n_sigmoid=n_sigmoid, sigmoid_bias=bias))
    ids = torch.randint(0, 256, (12,))
    op = operating_point(m, ids, layer=1, r=9)
    # METHODS B.8: analytic vs autograd in float64 within 1e-10; the split forward is the model's sublayer
    assert max(op["errors"][k] for k in ("J_T", "J_Q", "J_K")) < 1e-10
    assert op["errors"]["forward"] < 1e-12


def test_finite_forward_growth_matches_operators():
    torch.set_num_threads(1)
    seed_everything(6)
    m = MoFAGPT(GPTConfig(n_ctx=10, n_layer=1, n_head=2, d_model=8, n_sigmoid=1)).double()
    ids = torch.randint(0, 256, (10,))
    op = operating_point(m, ids, layer=0)
    X = hidden_entering(m, ids, 0)
    sub = mofa_sublayer(m, 0)
    F = lambda a, b, c: sub.output(X, 9, a, b, c)  # noqa: E731
    x = X[9]
    v = torch.randn(8, dtype=torch.float64)
    eps = 1e-6
    J = op["analytic"]
    with torch.no_grad():
        y0 = F(x, x, x).numpy()
        d_full = (F(x + eps * v, x + eps * v, x + eps * v).numpy() - y0) / eps
        d_tq = (F(x + eps * v, x + eps * v, x).numpy() - y0) / eps
    vv = v.numpy()
    np.testing.assert_allclose(d_full, (J["J_T"] + J["J_Q"] + J["J_K"]) @ vv, atol=1e-5)
    np.testing.assert_allclose(d_tq, (J["J_T"] + J["J_Q"]) @ vv, atol=1e-5)
    # and the certification runs on the real operators
    ops = Operators(J["J_T"], J["J_Q"], J["J_K"])
    c = certify(ops)
    assert c.dim_S + c.n_near_zero <= 8
    t = directional(ops, np.eye(8))
    assert set(t["regime"]) <= {"NC", "NS", "Q", "K", "E", "J"}


def test_regime_commands_end_to_end(tmp_path):
    from typer.testing import CliRunner

    import routestats.cli as rcli
    import runners.__main__ as rmain
    from runners.mofa import MoFATrain, train_mofa_run

    torch.set_num_threads(1)
    text = "The quick brown fox jumps over the lazy dog. " * 20
    run = train_mofa_run(tmp_path / "run", cfg=GPTConfig(n_ctx=16, n_layer=2, n_head=2, d_model=16, n_sigmoid=1),
                         train_text=[text], domains={"prose": [text]}, seed=1, tc=MoFATrain(steps=3, batch_size=2))
    (tmp_path / "prose.txt").write_text(text)
    r = CliRunner().invoke(rmain.app, ["regime", str(run), "--out", str(tmp_path / "ops.npz"), "--layer", "1",
                                       "--domain-file", str(tmp_path / "prose.txt")])
    assert r.exit_code == 0, r.output
    assert float(r.output.split("=")[-1]) < 1e-10
    r = CliRunner().invoke(rcli.app, ["regime", str(tmp_path / "ops.npz"), "-o", str(tmp_path / "reg"), "--probes", "20"])
    assert r.exit_code == 0, r.output
    import pandas as pd

    d = pd.read_csv(tmp_path / "reg" / "directions.csv")
    assert set(pd.read_csv(tmp_path / "reg" / "search.csv")["search"]) == {"blind_ambient", "oracle_in_S", "spectral"}
    assert (d["source"] == "random_ambient").sum() == 20
    r = CliRunner().invoke(rcli.app, ["regime", str(tmp_path / "prose.txt")])
    assert r.exit_code == 2 and "not an operator file" in r.output


@pytest.mark.parametrize("kind", ["gpt2", "llama", "encoder", "mofa"])
def test_generic_sublayer_closed_forms(kind):
    from runners.operators import random_sublayer

    sub = random_sublayer(kind, seed=3)
    X = torch.randn(9, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    r = 6
    ana, auto = sub.analytic(X, r), sub.autograd(X, r)
    # METHODS B.8: closed forms vs autograd of the pathway-split forward, float64
    for k in ("J_T", "J_Q", "J_K"):
        assert np.abs(ana[k] - auto[k]).max() < 1e-10, k
    # a sanity check that the pathways are not trivially zero
    assert np.abs(ana["J_Q"]).max() > 1e-3 and np.abs(ana["J_K"]).max() > 1e-4


def test_rope_is_a_rotation():
    from runners.operators import rope_matrix

    R = rope_matrix(5, 8)
    np.testing.assert_allclose(R.T @ R, np.eye(8), atol=1e-12)
    np.testing.assert_allclose(rope_matrix(0, 8), np.eye(8), atol=0)
