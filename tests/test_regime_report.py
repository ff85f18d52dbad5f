"""Regime analysis without torch: query-gating geometry, regime maps, agreement, severity sweep,
stored operator points and the report (against closed forms, brute force and scipy/numpy)."""

import json

import routestats as rs

import numpy as np
import pandas as pd
import pytest
from scipy import linalg
from typer.testing import CliRunner

from routestats.rundir.atomic import sha256_file
from routestats.errors import RoutestatsError, RunFormatError
from routestats.regime.certify import Operators, certify, directional, probe_sweep, severity_certificate, severity_sweep
from routestats.regime.geometry import overlap_sweep, query_gating_geometry, routing_decomposition, support_overlap
from routestats.regime.maps import adjacency, agreement, fibonacci_sphere, regime_map, slice_basis
from routestats.compose.regime.build import build_regime_report
from routestats.regime.points import analyse_point, load_operator_points
from routestats.settings import AnalysisSettings
from tests.test_regime import operators


def factorised_head(rng, n=6, d=12, dh=8, duplicate=False, X=None):
    """A softmax head in the factorised form of Prop. 1, built directly (no attention code)."""
    X = rng.standard_normal((n, d)) if X is None else X
    if duplicate:
        X[1] = X[0]
    W_K = rng.standard_normal((dh, d))
    Q = rng.standard_normal((dh, d)) / np.sqrt(dh)
    W_VO = rng.standard_normal((d, dh)) @ rng.standard_normal((dh, d)) / d
    s = X @ W_K.T @ (Q @ rng.standard_normal(d))
    a = np.exp(s - s.max())
    a /= a.sum()
    K = X @ W_K.T
    mu, kbar = a @ X, a @ K
    J_q = W_VO @ ((X - mu).T * a) @ (K - kbar) @ Q
    return dict(X=X, alpha=a, key_vectors=K, W_VO=W_VO, query_map=Q, J_q=J_q, W_QK=W_K.T @ Q)


@pytest.mark.parametrize("seed, n, dh, duplicate, dim_u", [(0, 6, 8, False, 5), (1, 6, 8, True, 4), (2, 10, 4, False, 9)])
def test_query_gating_geometry_against_construction(seed, n, dh, duplicate, dim_u):
    h = factorised_head(np.random.default_rng(seed), n=n, dh=dh, duplicate=duplicate)
    g = query_gating_geometry(h["X"], h["alpha"], key_vectors=h["key_vectors"], W_VO=h["W_VO"],
                              query_map=h["query_map"], J_q=h["J_q"], W_QK=h["W_QK"])
    # dim U_r = |A_r| - 1 for distinct keys, one less with a duplicated key (numpy's rank of the differences)
    assert g.dim_U == dim_u == np.linalg.matrix_rank(h["X"][1:] - h["X"][0])
    # rank J_q <= min(dim U_r, d_h), attained for generic weights
    assert g.rank_Jq == min(dim_u, dh) and g.rank_bound_holds
    assert g.range_residual < 1e-12 and g.null_residual < 1e-12
    # brute force diam and kappa; |J_q|_2 below the paper's bound and the Cauchy-Schwarz bound
    diam = max(np.linalg.norm(x - y) for x in h["X"] for y in h["X"])
    assert g.diam == pytest.approx(diam, rel=1e-12) and g.kappa == pytest.approx((h["alpha"] ** 2).sum(), rel=1e-12)
    paper = np.linalg.norm(h["W_VO"], 2) * np.linalg.norm(h["W_QK"], 2) * diam**2 / 2 * (1 - g.kappa)
    assert g.bound_paper == pytest.approx(paper, rel=1e-12)
    assert g.norm_Jq == pytest.approx(np.linalg.norm(h["J_q"], 2), rel=1e-12)
    assert g.norm_Jq <= g.bound_paper and g.norm_Jq <= g.bound_cs


def test_geometry_detects_a_jacobian_outside_prop1():
    h = factorised_head(np.random.default_rng(3))
    bad = h["J_q"] + 0.1 * np.random.default_rng(4).standard_normal(h["J_q"].shape)
    g = query_gating_geometry(h["X"], h["alpha"], key_vectors=h["key_vectors"], W_VO=h["W_VO"],
                              query_map=h["query_map"], J_q=bad)
    assert g.range_residual > 0.01 and g.null_residual > 0.01 and not g.rank_bound_holds
    assert np.isnan(g.bound_paper)  # no W_QK given (as under RoPE)
    with pytest.raises(RoutestatsError, match="same n keys"):
        query_gating_geometry(h["X"], h["alpha"][:-1], key_vectors=h["key_vectors"], W_VO=h["W_VO"],
                              query_map=h["query_map"], J_q=h["J_q"])


def test_support_overlap_zero_exactly_on_null_directions():
    h = factorised_head(np.random.default_rng(5))
    Kc = h["key_vectors"][1:] - h["key_vectors"][0]  # spans the attention-centred keys
    null = linalg.null_space(Kc @ h["query_map"])
    V = np.column_stack([null[:, :3], np.random.default_rng(6).standard_normal((12, 3))])
    t = support_overlap(h["key_vectors"], h["alpha"], h["query_map"], h["J_q"], V)
    assert (t["overlap"][:3] < 1e-12 * t["overlap"].max()).all() and (t["response"][:3] < 1e-12 * t["response"].max()).all()
    assert (t["overlap"][3:] > 1e-3).all() and (t["response"][3:] > 1e-3).all()


def test_fibonacci_lattice_is_uniform():
    W = fibonacci_sphere(2000)
    np.testing.assert_allclose(np.linalg.norm(W, axis=1), 1, atol=1e-12)
    # a polar cap z > 1/2 has area fraction (1 - 1/2) / 2 = 1/4 (Archimedes)
    assert abs((W[:, 2] > 0.5).mean() - 0.25) < 2e-3
    d = np.sort(np.linalg.norm(W[:, None] - W[None], axis=-1), axis=1)[:, 1]
    assert d.max() / d.min() < 1.6  # nearest-neighbour spacing nearly constant


def test_adjacency_matches_brute_force():
    W = fibonacci_sphere(60)
    labels = np.where(W[:, 0] > 0.3, "Q", np.where(W[:, 2] > 0, "NS", "NC"))
    shares, edges = adjacency(W, labels, k=4)
    D = np.linalg.norm(W[:, None] - W[None], axis=-1)
    nn = np.argsort(D, axis=1)[:, 1:5]
    pairs = {tuple(sorted((i, int(j)))) for i in range(60) for j in nn[i]}
    brute = pd.Series([tuple(sorted((labels[i], labels[j]))) for i, j in pairs if labels[i] != labels[j]]).value_counts()
    got = {(r.regime_a, r.regime_b): r.neighbour_pairs for r in edges.itertuples()}
    assert got == {k: int(v) for k, v in brute.items()}
    assert shares.set_index("regime")["points"].to_dict() == pd.Series(labels).value_counts().to_dict()


def test_regime_map_and_agreement():
    ops = operators(2, d=8, gate=0.9)
    E = slice_basis(certify(ops).v_sw, d=8, seed=1)
    np.testing.assert_allclose(E.T @ E, np.eye(3), atol=1e-12)
    m = regime_map(ops, E, n=400)
    ref = directional(ops, E @ fibonacci_sphere(400).T)
    assert (m["regime"] == ref["regime"]).all()
    # a perturbed copy that flips one switching label: counts, shares and r by hand (numpy corrcoef)
    fd = ref[["g_T", "g_TQ", "g_TK", "g_full"]].copy()
    i = int(np.flatnonzero(ref["regime"].isin(["Q", "K", "E", "J"]))[0])
    fd.loc[i, "g_full"] = -abs(fd.loc[i, "g_full"]) - 1.0
    a = agreement(ref, fd).iloc[0]
    assert a["label_disagreements"] == 1 and a["switch_agreement"] == pytest.approx(399 / 400)
    assert a["pearson_r"] == pytest.approx(np.corrcoef(ref["g_full"], fd["g_full"])[0, 1], rel=1e-12)
    # a margin that covers the flipped direction's deciding values flags it instead
    margin = float(np.abs(ref.loc[i, ["g_T", "g_TQ", "g_TK", "g_full"]]).max()) * 1.01
    assert agreement(ref, fd, margin=margin).iloc[0]["flagged"] >= 1


def test_severity_sweep_reaches_tau_cert():
    ops = operators(0, d=10, gate=0.8)
    c = certify(ops)
    sev = severity_certificate(ops, c)
    sw = severity_sweep(ops, c, points=40)
    assert sev["tau_cert"] in set(sw["tau0"])
    at = sw.set_index("tau0")["lambda_max"]
    # predicate lambda > 1 holds up to tau_cert and fails above it (nested subspaces, METHODS B.6)
    assert at[sev["tau_cert"]] > 1 and (at[at.index > sev["tau_cert"]] <= 1).all()
    assert (np.diff(sw["lambda_max"].to_numpy()) <= 1e-9).all()  # non-increasing in tau0
    assert sw["lambda_max"].iloc[0] == pytest.approx(c.lambda_max, rel=1e-9)  # the lowest level is all of S


def write_points(run, seed=0, lattice=200, layers=(0, 1), n_layers=None, examples=(0,), tokens=None):
    """A run directory with operators/ as the runners write it, from numpy-built operators (``n_layers``, when
    given, is the layer count the index records; ``tokens`` maps an example to its query token, default 5)."""
    folder = run / "operators"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    index = {"version": "routestats-operators/1", "model_kind": "synthetic", "checkpoint_sha256": "0" * 64,
             "settings": {}, "points": [], **({"n_layers": n_layers} if n_layers else {})}
    for layer, example in ((lyr, ex) for lyr in layers for ex in examples):
        ops = operators(seed + layer + 100 * example, d=12, gate=0.9)
        X = rng.standard_normal((6, 12))
        heads = [factorised_head(rng, X=X) for _ in range(2)]
        J_Q = sum(h["J_q"] for h in heads)
        c = certify(Operators(ops.J_T, J_Q, ops.J_K))
        E = slice_basis(c.v_sw, d=12, seed=1)
        W = fibonacci_sphere(lattice)
        g = directional(Operators(ops.J_T, J_Q, ops.J_K), E @ W.T)[["g_T", "g_TQ", "g_TK", "g_full"]].to_numpy()
        arrays = {"J_T": ops.J_T, "J_Q": J_Q, "J_K": ops.J_K, "J_Q_heads": np.stack([h["J_q"] for h in heads]),
                  "W_VO": np.stack([h["W_VO"] for h in heads]), "query_map": np.stack([h["query_map"] for h in heads]),
                  "key_vectors": np.stack([h["key_vectors"] for h in heads]),
                  "alpha": np.stack([h["alpha"] for h in heads]), "X_keys": heads[0]["X"],
                  "head_types": np.array(["softmax", "softmax"]), "slice_E": E, "lattice_W": W,
                  "lattice_fd": g + 1e-9 * rng.standard_normal(g.shape)}
        token = (tokens or {}).get(example, 5)
        name = f"L{layer}-E{example}-r{token}.npz"
        meta = {"layer": layer, "example": example, "token": token, "errors": {"J_T": 1e-16, "J_Q": 2e-16, "J_K": 1e-16}}
        np.savez(folder / name, **arrays, meta=json.dumps(meta))
        index["points"].append({"layer": layer, "example": example, "token": token, "token_arg": None, "file": name,
                                "sha256": sha256_file(folder / name), "errors": meta["errors"]})
    (folder / "index.json").write_text(json.dumps(index))
    return run


def test_stored_points_analyse_and_select(tmp_path):
    run = write_points(tmp_path / "run")
    pts = load_operator_points(run)
    assert [(p.layer, p.example, p.token) for p in pts] == [(0, 0, 5), (1, 0, 5)]
    t = analyse_point(pts[1], probes=64)
    assert (t["summary"]["layer"] == 1).all() and {"spectrum", "sweep", "regimes", "agreement", "adjacency"} <= set(t)
    # the summary is the certificate recomputed from the stored operators
    c = certify(pts[1].operators)
    s = t["summary"].iloc[0]
    assert s["lambda_max"] == pytest.approx(c.lambda_max) and s["d_sw"] == c.d_sw and s["dim_S"] == c.dim_S
    # the synthetic finite forwards differ from the analytic values by 1e-9: full agreement
    assert t["agreement"].iloc[0]["switch_agreement"] == 1.0 and t["agreement"].iloc[0]["pearson_r"] > 0.999999
    assert len(load_operator_points(run, layer=0)) == 1
    with pytest.raises(RoutestatsError, match=r"stored \(layer, example, token\): \[\(0, 0, 5\), \(1, 0, 5\)\]"):
        load_operator_points(run, example=3)
    (run / "operators" / "L1-E0-r5.npz").unlink()
    with pytest.raises(RunFormatError, match="missing"):
        load_operator_points(run)
    with pytest.raises(RoutestatsError, match="no operators/index.json"):
        load_operator_points(tmp_path)


def test_regime_report_renders_and_compiles(tmp_path):
    from reports.render import render
    from routestats.cli import app
    from tests.conftest import chromium_console, compile_tex, console_errors, need

    run = write_points(tmp_path / "run")
    rep = build_regime_report(run, AnalysisSettings(probes=64, seed=0))
    assert rep.facts["n_points"] == 2 and set(rep.frame("summary")["layer"]) == {0, 1}
    res = CliRunner().invoke(app, ["regime", str(run), "-o", str(tmp_path / "out"), "--probes", "64"])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "out" / "report.html").read_text()
    for needle in ("Spectral certificate", "Geometry of query gating", "Regime map", "data:image/png;base64"):
        assert needle in html
    geo = pd.read_csv(tmp_path / "out" / "tables" / "geometry.csv")
    assert (geo["range_residual"] < 1e-12).all() and geo["rank_bound_holds"].all()
    res = CliRunner().invoke(app, ["regime", str(run), "--format", "pdf"])
    assert res.exit_code == 2 and "--format" in res.output
    compile_tex(need("pdflatex"), tmp_path / "out" / "tables", "tables.tex")
    chromium = need("chromium")
    log = chromium_console(chromium, tmp_path / "out" / "report.html", tmp_path / "shot.png")
    assert console_errors(log) == [], log[-2000:]
    render(rep, tmp_path / "again", formats=("latex",))
    assert (tmp_path / "again" / "tables" / "summary.tex").is_file()


def test_routing_decomposition_identities():
    h = factorised_head(np.random.default_rng(7))
    heads = {"X_keys": h["X"], "alpha": h["alpha"][None], "W_VO": h["W_VO"][None], "key_vectors": h["key_vectors"][None],
             "query_map": h["query_map"][None], "head_types": ["softmax"]}
    V = np.random.default_rng(8).standard_normal((12, 5))
    t = routing_decomposition(heads, V)
    # I_gate(v) = v' J_q v (App. 9.6 with M = I), |rho| <= 1, and D_v, S_v by explicit loops
    np.testing.assert_allclose(t["I_gate"], np.einsum("ij,ik,kj->j", V, h["J_q"], V), rtol=1e-10, atol=1e-12)
    assert (t["alignment"].abs() <= 1 + 1e-12).all()
    a, X = h["alpha"], h["X"]
    for j in range(5):
        v = V[:, j]
        F = sum(a[i] * h["W_VO"] @ X[i] for i in range(len(a)))
        D = np.sqrt(sum(a[i] * (v @ (h["W_VO"] @ X[i] - F)) ** 2 for i in range(len(a))))
        g = [h["query_map"].T @ k for k in h["key_vectors"]]
        gbar = sum(a[i] * g[i] for i in range(len(a)))
        S = np.sqrt(sum(a[i] * ((g[i] - gbar) @ v) ** 2 for i in range(len(a))))
        assert t.loc[j, "diversity"] == pytest.approx(D, rel=1e-10) and t.loc[j, "sensitivity"] == pytest.approx(S, rel=1e-10)


def test_probe_sweep_full_probe_is_the_full_certificate():
    ops = operators(4, d=12, gate=0.8)
    t = probe_sweep(ops, sizes=(4, 8, 12, 40), seed=3).set_index("probe")
    assert list(t.index) == [4, 8, 12]  # sizes above d are left out
    c = certify(ops)
    # a probe spanning all of R^d gives the ambient certificate (same S, same spectrum)
    assert t.loc[12, "dim_S_proj"] == c.dim_S and t.loc[12, "d_sw"] == c.d_sw
    assert t.loc[12, "lambda_max"] == pytest.approx(c.lambda_max, rel=1e-9)
    assert (t["normalised_d_sw"] == t["d_sw"] / t["dim_S_proj"]).all()


def test_overlap_sweep_starts_in_the_query_null_space():
    h = factorised_head(np.random.default_rng(9), n=5, dh=8)
    t = overlap_sweep(h["key_vectors"], h["alpha"], h["query_map"], h["J_q"], n=50, seed=1)
    # theta = 0 lies in the null space: no overlap and (Prop. 1) no response; theta > 0 leaves it
    assert t["theta"].iloc[0] == 0 and t["overlap"].iloc[0] < 1e-12 and t["response"].iloc[0] < 1e-12
    assert (t["overlap"].iloc[1:] > 0).all() and t["response"].max() > 1e-3


def comparison_tree(root):
    """Two synthetic models: A with 5 layers (points at layers 0, 2, 4) and B with 3 (layers 0, 1, 2), 2 prompts."""
    write_points(root / "A", seed=1, lattice=20, layers=(0, 2, 4), n_layers=5, examples=(0, 1))
    write_points(root / "B", seed=7, lattice=20, layers=(0, 1, 2), n_layers=3, examples=(0, 1))
    return root


def test_models_compare_by_normalised_depth(tmp_path):
    from routestats.regime.certify import probe_basis
    from routestats.regime.compare import compare_models

    root = comparison_tree(tmp_path / "cmp")
    t = compare_models(root, directions=64, seed=3)
    # depth = layer / (layers - 1): A's layers 0, 2, 4 of 5 and B's 0, 1, 2 of 3 both sit at 0, 0.5, 1
    assert t["by_depth"].groupby("model")["depth"].apply(list).to_dict() == {"A": [0, 0.5, 1], "B": [0, 0.5, 1]}
    assert t["models"][["model", "n_layers", "d", "points", "examples"]].values.tolist() == [["A", 5, 12, 6, 2],
                                                                                             ["B", 3, 12, 6, 2]]
    # the probe is capped at the narrowest width (12), and each point's probe certificate is the certificate of
    # its operators restricted to the first 12 columns of the seeded basis (an orthonormal basis of R^12)
    pts = t["points"]
    assert (pts["probe"] == 12).all()
    for pt in load_operator_points(root / "A"):
        r = pts[(pts["model"] == "A") & (pts["layer"] == pt.layer) & (pts["example"] == pt.example)].iloc[0]
        c = certify(pt.operators, P=probe_basis(12, 12, seed=3))
        assert r["probe_lambda_max"] == pytest.approx(c.lambda_max) and r["probe_d_sw"] == c.d_sw
        assert r["lambda_max"] == pytest.approx(certify(pt.operators).lambda_max)
    # the depth profile is the median over prompts, by numpy on the point rows
    for (m, layer), g in pts.groupby(["model", "layer"]):
        row = t["by_depth"][(t["by_depth"]["model"] == m) & (t["by_depth"]["layer"] == layer)].iloc[0]
        assert row["lambda_max"] == pytest.approx(np.median(g["probe_lambda_max"]))
        assert row["switching"] == int((g["probe_lambda_max"] > 1).sum()) and row["points"] == 2


def test_the_comparison_report_states_its_scope_and_refuses_unnormalisable_depths(tmp_path):
    from typer.testing import CliRunner

    from routestats.cli import app

    root = comparison_tree(tmp_path / "cmp")
    rep = rs.analyse(root, probes=64)
    assert rep.title.startswith("regime switching across models")
    head = [c for c in rep.claims if c.kind == "compare_scope"][0]
    assert head.holds and head.sentence.startswith("2 models compared at 3 normalised depths, 2 prompts each")
    per = {c.sentence.split(":")[0]: c for c in rep.claims if c.kind == "compare_model"}
    bd = rep.frame("by_depth")
    for m in ("A", "B"):  # the counts in the sentence are the table's
        rows = bd[bd["model"] == m]
        assert f"at {int(rows['switching'].sum())} of 6 points" in per[m].sentence and per[m].holds
    res = CliRunner().invoke(app, ["regime", str(root), "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "out" / "figures").is_dir() and "across models" in (tmp_path / "out" / "report.html").read_text()
    res = CliRunner().invoke(app, ["regime", str(root), "--layer", "0"])
    assert res.exit_code == 2 and "give its folder" in res.output
    # a point whose operators are of another width than the model's other points: one line, exit 2
    odd = tmp_path / "odd"
    comparison_tree(odd)
    idx = json.loads((odd / "B" / "operators" / "index.json").read_text())
    f = odd / "B" / "operators" / idx["points"][-1]["file"]
    np.savez(f, J_T=np.eye(10), J_Q=np.zeros((10, 10)), J_K=np.zeros((10, 10)),
             meta=json.dumps({"layer": 2, "example": 1, "token": 5}))
    idx["points"][-1]["sha256"] = sha256_file(f)
    (odd / "B" / "operators" / "index.json").write_text(json.dumps(idx))
    res = CliRunner().invoke(app, ["regime", str(odd)])
    assert res.exit_code == 2 and "but the model's other points are 12 x 12" in res.output, res.output
    # an index without the layer count cannot place its points on a normalised depth: one line, exit 2
    write_points(root / "C", seed=2, lattice=20)
    res = CliRunner().invoke(app, ["regime", str(root)])
    assert res.exit_code == 2 and "no layer count (n_layers)" in res.output, res.output


def test_operators_without_a_finite_lambda_max_report_and_say_so(tmp_path):
    """Issue [no-escape]: every point's transport expanding (J_T = 10 I: the contractive subspace S is empty, so
    λ_max is NaN) crashed summary_claims (idxmax of all-NA); the layer list names the layers there are (1 and 3,
    never "1–3")."""
    import reports

    run = write_points(tmp_path / "run", layers=(1, 3))
    idx = json.loads((run / "operators" / "index.json").read_text())
    for p in idx["points"]:
        f = run / "operators" / p["file"]
        arrays = dict(np.load(f, allow_pickle=False))
        arrays["J_T"] = 10 * np.eye(arrays["J_T"].shape[0])
        np.savez(f, **arrays)
        p["sha256"] = sha256_file(f)
    (run / "operators" / "index.json").write_text(json.dumps(idx))
    rep = rs.analyse(run, resamples=100)
    assert rep.frame("summary")["dim_S"].eq(0).all() and rep.frame("summary")["lambda_max"].isna().all()
    assert rep.answer == ("No switching is certified: λ_max is undefined (S empty) at all 2 operating points, "
                          "layers 1 and 3.")
    reports.write(rep, tmp_path / "report", ("html",))
    assert (tmp_path / "report" / "report.html").is_file()


def test_the_regime_terminal_summary_fits_a_screen_and_names_only_stored_points(tmp_path):
    from routestats.cli import app
    from routestats.compose.regime.build import terminal_tables

    # 3 layers x 2 examples whose query tokens differ (5 and 9): 6 points, never (example 0, token 9)
    run = write_points(tmp_path / "run", layers=(0, 1, 2), examples=(0, 1), tokens={0: 5, 1: 9}, lattice=60)
    res = CliRunner().invoke(app, ["regime", str(run), "--probes", "16"], env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert len(lines) <= 40, res.output  # one screen (it printed 130 lines of one block a row before)
    assert lines[0].startswith("Switching is certified") or lines[0].startswith("No switching")  # the answer first
    terms = " ".join(lines[1:8])
    for term in ("λ_max:", "d_sw:", "τ_cert:", "τ_max:"):  # every column symbol explained
        assert term in terms, terms
    assert "--all" in res.output and "regime counts" in res.output
    rep = build_regime_report(run, AnalysisSettings(probes=16, seed=0))
    (_, summary), (_, counts), _ = terminal_tables(rep, every=True)
    assert len(summary) == 6
    # the counts name the (point, direction set) pairs there are: 6 points x 4 sets, none invented (a pivot over
    # the cross product had listed (example 0, token 9) and (example 1, token 5) as rows of zeros)
    stored = rep.frame("regimes")[["layer", "example", "token", "source"]].drop_duplicates()
    assert len(counts) == len(stored) == 24
    assert set(map(tuple, counts[["example", "token"]].to_numpy())) == {(0, 5), (1, 9)}
    assert (counts[[c for c in counts.columns if c in ("NC", "NS", "Q", "K", "E", "J")]].sum(axis=1) > 0).all()
    res = CliRunner().invoke(app, ["regime", str(run), "--probes", "16", "--all"], env={"COLUMNS": "100"})
    assert res.exit_code == 0 and "J: only both together" in res.output  # the labels' legend with their counts


def test_the_regime_page_explains_its_terms_and_columns_and_fits_1280_px(tmp_path):
    from routestats.cli import app
    from tests.conftest import need, page_widths

    run = write_points(tmp_path / "run", lattice=60)
    res = CliRunner().invoke(app, ["regime", str(run), "-o", str(tmp_path / "out"), "--probes", "16"])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "out" / "report.html").read_text()
    first = html.split('id="headline"', 1)[1].split('class="findings"', 1)[0]  # the first screen's box
    for term in ("λ_max", "d_sw", "τ_cert", "τ_max", "L0 E0 r5"):
        assert f"<dt>{term}</dt>" in first, term
    assert "<dd>layer 0, example 0, query token r = 5</dd>" in first
    # terse headers are explained under their table and on hover; regime labels in words
    assert "d_sw: switching directions" in html and 'title="above 1: switching is certified; click to sort"' in html
    assert "J: only both together" in html
    assert "operating point(s)" not in html and "2 operating points" in html
    assert html.count('<div class="table-scroll"><table class="data') == html.count('<table class="data')
    chromium = need("chromium")
    scroll, view = page_widths(chromium, tmp_path / "out" / "report.html")
    assert scroll <= view, (scroll, view)


def test_no_report_page_scrolls_sideways_at_1280_px_whatever_its_tables(tmp_path):
    from reports.render import render
    from routestats.report import Column, Report, Section, Table
    from tests.conftest import need, page_widths

    # 40 columns of 12-digit numbers: about 5,000 px of table (the regime geometry table was 1,330 px wide)
    wide = pd.DataFrame({f"column_{i}": [123456.789012 + i] for i in range(40)})
    t = Table("wide", wide, "A wide table.", tuple(Column(f"a long header {i}", f"column_{i}", "num", 6)
                                                  for i in range(40)))
    render(Report("wide", "one table", (Section("s", "S", tables=(t,)),)), tmp_path / "out", formats=("html",))
    scroll, view = page_widths(need("chromium"), tmp_path / "out" / "report.html")
    assert scroll <= view, (scroll, view)  # the table scrolls inside its own box


@pytest.mark.parametrize("points", [6, 7])
def test_the_findings_list_every_point_up_to_the_limit_and_point_to_the_table_past_it(tmp_path, points):
    """Issue [honest-gates]: with exactly MAX_POINTS_LISTED (6) operating points the findings listed 5 and withheld
    the pointer to the summary table (an `if` counted the two claims before the points), so the sixth point vanished.
    6 points: all 6 listed, no pointer; 7: the first 6 and the pointer, the seventh built and withheld."""
    from routestats.compose.regime.build import MAX_POINTS_LISTED

    assert MAX_POINTS_LISTED == 6
    run = write_points(tmp_path / "run", layers=tuple(range(points)), n_layers=points, lattice=20)
    rep = rs.analyse(run, resamples=100)
    printed = [c for c in rep.claims if c.kind == "point" and c.holds]
    withheld = [c for c in rep.claims if c.kind == "point" and not c.holds]
    pointer = [c for c in rep.claims if c.kind == "more_points"]
    assert len(printed) == 6 and len(withheld) == points - 6
    assert len(pointer) == 1 and pointer[0].holds == (points > 6)
    listed = [f for f in rep.findings if f.startswith("L")]
    assert len(listed) == 6, rep.findings  # the page's findings, as printed
    assert any("all points in the summary table" in f for f in rep.findings) == (points > 6)
