"""Spectral certification of regime switching against explicit constructions and brute force."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import linalg

from routestats.regime.certify import Operators, certify, classify, directional, growth, severity_certificate, tau_max_dual


def operators(seed, d=8, gate=0.6):
    """Transport that contracts most directions plus random gating Jacobians."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    J_T = Q @ np.diag(np.linspace(0.2, 1.3, d)) @ Q.T
    return Operators(J_T, gate * rng.standard_normal((d, d)) / np.sqrt(d), gate * rng.standard_normal((d, d)) / np.sqrt(d))


def test_growth_paper_example():
    # METHODS B.1: J = diag(2, 1/2) gives G = diag(3, -3/4) under M = I
    np.testing.assert_allclose(growth(np.diag([2.0, 0.5])), np.diag([3.0, -0.75]))


def test_query_key_interaction_identity():
    ops = operators(0)
    V = np.random.default_rng(1).standard_normal((8, 20))
    t = directional(ops, V)
    # 2 <J_Q v, J_K v> computed directly (METHODS B.4)
    direct = 2 * np.einsum("ij,ij->j", ops.J_Q @ V, ops.J_K @ V)
    np.testing.assert_allclose(t["qk_interaction"], direct, atol=1e-12)
    # gating correction: v'dG v = 2<J_T v, J_G v> + |J_G v|^2
    JG = ops.J_Q + ops.J_K
    corr = 2 * np.einsum("ij,ij->j", ops.J_T @ V, JG @ V) + np.einsum("ij,ij->j", JG @ V, JG @ V)
    np.testing.assert_allclose(t["g_full"] - t["g_T"], corr, atol=1e-12)


@pytest.mark.parametrize("vals, label", [
    ((0.1, 1, 1, 1), "NC"), ((-0.1, 1, 1, -0.01), "NS"),
    ((-0.1, 5.7437, -0.002801, 0.3), "Q"),  # the paper's v_rel: 5.7437 > 0 >= -0.002801
    ((-0.1, -0.2, 0.4, 0.3), "K"), ((-0.1, 0.2, 0.4, 0.3), "E"), ((-0.1, -0.2, -0.4, 0.3), "J"),
])
def test_classify(vals, label):
    assert classify(*vals) == label
    assert classify(*vals, margin=1.0) == "ambiguous"


def test_certificate_matches_explicit_W():
    ops = operators(2)
    c = certify(ops)
    Cm = linalg.fractional_matrix_power(c.C, -0.5).real
    W = Cm @ c.R @ Cm
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh((W + W.T) / 2))[::-1], c.eigenvalues, atol=1e-9)
    lam, _ = np.linalg.eigh(ops.G_T)
    assert c.dim_S == int((lam < -c.tol).sum())


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([0.35, 1.2]))
def test_property_switching_subspace_all_switch(seed, gate):
    ops = operators(seed, d=12, gate=gate)
    c = certify(ops)
    if c.d_sw == 0:
        return
    rng = np.random.default_rng(seed)
    V = c.V_sw @ rng.standard_normal((c.d_sw, 200))
    t = directional(ops, V)
    assert ((t["g_T"] < 0) & (t["g_full"] > 0)).all()  # every combination inside V_sw switches
    assert (t["Gamma"] > 1).all()
    assert directional(ops, c.v_sw)["Gamma"].item() == pytest.approx(c.lambda_max, rel=1e-8)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([0.35, 1.2]))
def test_property_tau_cert_below_tau_max(seed, gate):
    # weak gating (0.35) gives tau_cert < tau_max strictly; strong gating (1.2) switches the most severe direction
    ops = operators(seed, d=12, gate=gate)
    c = certify(ops)
    if not c.switches or c.dim_S < 3:
        return
    sev = severity_certificate(ops, c)
    tmax = tau_max_dual(c)
    assert sev["tau_cert"] <= tmax + 1e-9
    t = directional(ops, sev["v_sev"]).iloc[0]
    assert t["g_T"] < 0 < t["g_full"] and t["tau"] >= sev["tau_cert"] - 1e-9
    # brute force: sampled feasible directions in S never beat the dual optimum
    rng = np.random.default_rng(seed)
    U = rng.standard_normal((c.dim_S, 4000))
    tau = np.einsum("ij,ik,kj->j", U, c.C, U) / np.einsum("ij,ij->j", U, U)
    feasible = np.einsum("ij,ik,kj->j", U, c.R - c.C, U) >= 0
    if feasible.any():
        assert tau[feasible].max() <= tmax + 1e-9
    # binary search equals the linear scan over the nested subspaces
    M = np.eye(ops.J_T.shape[0])
    eta, Qm = linalg.eigh(c.C, c.P.T @ M @ c.P)
    order = np.argsort(eta)[::-1]
    eta, Qm = eta[order], Qm[:, order]
    lams = [linalg.eigh(Qm[:, :j].T @ c.R @ Qm[:, :j], Qm[:, :j].T @ c.C @ Qm[:, :j])[0][-1] for j in range(1, len(eta) + 1)]
    assert np.all(np.diff(lams) >= -1e-9)  # nested subspaces: non-decreasing
    j_star = next(j for j, lam in enumerate(lams, 1) if lam > 1)
    assert sev["j_star"] == j_star and sev["tau_cert"] == pytest.approx(eta[j_star - 1])


def test_no_switch_when_gating_is_absent():
    ops = operators(3)
    none = Operators(ops.J_T, np.zeros_like(ops.J_T), np.zeros_like(ops.J_T))
    c = certify(none)
    assert not c.switches and c.d_sw == 0 and c.no_switch_sufficient()
    assert severity_certificate(none, c)["tau_cert"] == 0.0 and tau_max_dual(c) == 0.0


def test_near_zero_eigenvalues_are_excluded():
    # transport that is exactly an isometry on half the space: G_T has exact zeros there
    d = 6
    J_T = np.diag([1, 1, 1, 0.5, 0.4, 0.3]).astype(float)
    rng = np.random.default_rng(4)
    c = certify(Operators(J_T, rng.standard_normal((d, d)), rng.standard_normal((d, d))))
    assert c.n_near_zero == 3 and c.dim_S == 3
    assert c.d_sw_band(0.0)[0] <= c.d_sw <= c.d_sw_band(0.0)[1]


def test_weak_gating_separates_tau_cert_and_tau_max():
    ops = operators(0, d=12, gate=0.35)
    c = certify(ops)
    sev = severity_certificate(ops, c)
    assert c.d_sw == 2 and sev["j_star"] == 7 and sev["solves"] == 4  # binary search over k = 8 subspaces
    # J_T has singular values linspace(0.2, 1.3, 12), so the severities eta are 1 - sigma^2 exactly; the
    # certified level is one of them: 1 - 0.8^2 = 0.36
    assert sev["tau_cert"] == pytest.approx(0.36)
    # regression value of the dual (its validity is checked against sampling in the property test above)
    assert tau_max_dual(c) == pytest.approx(0.8342, abs=1e-4)


def test_probe_projection_mechanisms_and_search():
    from routestats.regime.certify import mechanism_composition, probe_basis, search_quality

    ops = operators(0, d=12, gate=0.35)
    P64 = probe_basis(12, 6, seed=3, total=10)
    P8 = probe_basis(12, 8, seed=3, total=10)
    np.testing.assert_allclose(P64, P8[:, :6])  # nested probes
    np.testing.assert_allclose(P8.T @ P8, np.eye(8), atol=1e-12)
    full, proj = certify(ops), certify(ops, P=P8)
    assert proj.dim_S <= full.dim_S
    # projected certificate: its basis lies in the probe and every certified direction switches
    np.testing.assert_allclose(P8 @ (P8.T @ proj.P), proj.P, atol=1e-10)
    if proj.d_sw:
        t = directional(ops, proj.V_sw @ np.random.default_rng(0).standard_normal((proj.d_sw, 50)))
        assert ((t["g_T"] < 0) & (t["g_full"] > 0)).all()
    mc = mechanism_composition(ops, full, n=2000, seed=1)
    assert mc["count"].sum() == 2000 and mc.set_index("regime").loc["NC", "count"] == 0  # inside S: g_T < 0
    sw = mc[mc.regime.isin(list("QKEJ"))]
    assert sw["share_of_switching"].sum() == pytest.approx(1.0)
    sq = search_quality(ops, full, n_ambient=500, n_S=500, seed=2).set_index("search")
    assert sq.loc["spectral", "best_tau"] == pytest.approx(severity_certificate(ops, full)["tau_cert"])
    # sampled best severity never beats the exact supremum
    assert sq.loc["oracle_in_S", "best_tau"] <= tau_max_dual(full) + 1e-9
