"""Study (multi-run) reports: tables from routestats.studies.seeds, rendered to HTML and LaTeX."""

import numpy as np
from typer.testing import CliRunner

import routestats as rs
from routestats.cli import app
from routestats.settings import AnalysisSettings
from routestats.compose.study.build import build_study_report
from routestats.studies.seeds import across_seed_tests, paired_deltas
from tests.conftest import compile_tex, need

runner = CliRunner()


def test_study_report_tables_are_the_study_functions(tree):  # noqa: F811
    rep = build_study_report(tree, AnalysisSettings(resamples=200, seed=5))
    t = rep.tables()
    assert {"seeds", "sweep", "placement", "shuffled", "across_seeds", "hierarchical", "variance_components"} <= set(t)
    assert "depth" not in t and "datasets" not in t  # one depth, one data set: not applicable
    np.testing.assert_array_equal(t["across_seeds"]["p_t"], across_seed_tests(paired_deltas(tree))["p_t"])
    assert rep.facts["seeds"] == [1, 2, 3]


def test_study_report_cli_and_latex(tree, tmp_path):  # noqa: F811
    root = tree.runs[0].path.parent.parent
    r = runner.invoke(app, ["report", str(root), "-o", str(tmp_path / "o"), "--resamples", "200",
                            "--permutations", "200", "--pairs", "reference"])
    assert r.exit_code == 0, r.output
    html = (tmp_path / "o" / "report.html").read_text()
    assert "Across-seed inference" in html and "Bias strength" in html and "Shuffled control" in html
    assert html.count('<section class="pair"') == 1 + 3  # the study + 3 reference pairs
    tables = tmp_path / "o" / "tables"
    assert (tables / "Study-of-18-runs-sweep.tex").is_file()  # 3 seeds x 6 conditions; prefixed: several sections
    compile_tex(need("pdflatex"), tables, "tables.tex")


def test_pairs_option_validated(tree, tmp_path):  # noqa: F811
    root = tree.runs[0].path.parent.parent
    r = runner.invoke(app, ["report", str(root), "-o", str(tmp_path / "o"), "--pairs", "some"])
    assert r.exit_code == 2 and "pairs must be auto, reference, all or none" in r.output


def test_dataset_standardisation_and_init_probe_sections(tmp_path):
    import pandas as pd

    from routestats.studies.initprobe import probe_correlations
    from routestats.studies.lengths import length_standardised_contrast
    from tests.conftest import random_attention, write_run
    from tests.test_initprobe import synthetic_probe
    from tests.conftest import STUDY_CONDITIONS as CONDITIONS

    rng = np.random.default_rng(3)
    lens = {"dbpedia": [6, 7, 7, 8, 9, 10], "pubmed": [7, 7, 8, 8, 9, 12]}
    for seed in (0, 7, 42, 99, 123):
        for ds, lengths in lens.items():
            fields = [[4] * 2 + [3] * (n - 2) for n in lengths]
            tag = f"{ds}-s{seed}"
            for name in ("baseline", "saab"):
                att = [random_attention(rng, 2, 1, len(g)) for g in fields]
                write_run(tmp_path / "tree" / tag / name, att, fields, run_id=f"{tag}-{name}", seed=seed,
                          init_id=tag, data_order_id=tag, factors={**CONDITIONS[name], "dataset": ds, "depth": 2})
    probe, _ = synthetic_probe()
    pdir = tmp_path / "probe"
    pdir.mkdir()
    for name, df in probe.items():
        df.to_parquet(pdir / f"{name}.parquet")
    runs = rs.load_runs(tmp_path / "tree")
    rep = build_study_report(runs, AnalysisSettings(resamples=200, seed=2), init_probe=pdir)
    # standardisation at the first seed with both data sets (seed 0), B - A = pubmed - dbpedia
    pairs = {p.variant.factors["dataset"]: p for p in runs.pairs() if p.variant.seed == 0}
    direct = length_standardised_contrast(pairs["dbpedia"], pairs["pubmed"], names=("dbpedia", "pubmed"),
                                          resamples=200, seed=2)
    np.testing.assert_array_equal(rep.frame("standardisation")["contrast"], direct.exact["contrast"])
    np.testing.assert_array_equal(rep.frame("standardisation")["ci_low"], direct.exact["ci_low"])
    assert "datasets" in rep.tables() and set(rep.frame("datasets")["dataset"]) == {"dbpedia", "pubmed"}
    first = rep.frame("seeds")[rep.frame("seeds")["dataset"] == "dbpedia"]  # equal group sizes: the first group
    want = probe_correlations(probe, first[["seed", "displacement"]])
    pd.testing.assert_frame_equal(rep.frame("init_probe"), want)


def test_evidence_levels_forest_and_disagreement(tree):  # noqa: F811
    import pandas as pd

    from routestats.stats.inference import bootstrap_means
    from routestats.compose.study.build import disagreement

    rep = build_study_report(tree, AnalysisSettings(resamples=300, seed=4))
    f = rep.frame("forest")
    across = rep.frame("across_seeds").set_index("layer")
    t_rows = f[f["label"] == "paired t (seeds)"].set_index("layer")
    np.testing.assert_array_equal(t_rows["ci_low"], across.loc[t_rows.index, "ci_low_t"])
    # a seed's interval is the bootstrap of that seed's per-example differences (same seed, same resamples)
    from routestats.studies.seeds import example_deltas, reference_rows

    ex = example_deltas(tree, None, "all")
    g = ex[reference_rows(ex) & (ex["seed"] == 2)].pivot_table(index="example_id", columns="layer", values="diff")
    m = bootstrap_means(g.to_numpy(), 300, np.random.default_rng(4))
    row = f[(f["label"] == "seed 2") & (f["layer"] == 1)].iloc[0]
    assert row["ci_low"] == np.percentile(m[:, 1], 2.5) and row["estimate"] == g[1].mean()
    built = pd.DataFrame([{"dataset": "d", "layer": 2, "level": "across seeds", "label": n, "estimate": 0.1,
                           "ci_low": lo, "ci_high": hi} for n, lo, hi in
                          (("paired t (seeds)", -0.005, 0.246), ("two-stage bootstrap", 0.068, 0.165),
                           ("mixed model", 0.063, 0.177))])
    (layer, why) = disagreement(built, 3)  # one sentence per layer, then the reasons once
    assert layer.startswith("Layer 2: the paired t (seeds) [-0.005, 0.246] includes 0 while the two-stage bootstrap")
    # t on 2 df: scipy.stats.t.ppf(0.975, 2) = 4.303; width ratio (0.165 - 0.068) / (0.246 + 0.005) = 0.386
    assert why.startswith("Why: ") and "t on 2 degrees of freedom (critical value 4.30" in why
    assert "0.39–0.39 times as wide" in why
    two = disagreement(pd.concat([built, built.assign(layer=3)]), 3)
    assert len(two) == 3 and sum(x.startswith("Why") for x in two) == 1


def test_no_report_page_scrolls_sideways_at_1280_px(tmp_path):
    """Issue [same-inputs]: a study page (18 runs, 3 seeds) scrolled sideways at 1280 px. Each kind of report is
    rendered and measured in Chromium: the page is never wider than the window (tables scroll in their own box).
    The regime pages are measured in tests/test_regime_report.py."""
    import reports
    from routestats.compose.plan import PlanQuestion, build_plan_report
    from tests.conftest import page_widths, synthetic_mofa_tree, synthetic_study_tree

    chromium = need("chromium")
    quick = dict(resamples=200, permutations=200)
    synthetic_study_tree(tmp_path / "study")  # 3 seeds x 6 conditions: 18 runs
    synthetic_mofa_tree(tmp_path / "mofa")
    pages = {"pair": rs.analyse("data/demo_run", **quick), "study": rs.analyse(tmp_path / "study", **quick),
             "mofa": rs.analyse(tmp_path / "mofa", **quick),
             "plan": build_plan_report("data/demo_run", PlanQuestion(delta=0.02, sims=40, max_examples=60),
                                       AnalysisSettings(resamples=200, permutations=999))}
    for kind, rep in pages.items():
        reports.write(rep, tmp_path / f"{kind}-report", ("html",))
        scroll, view = page_widths(chromium, tmp_path / f"{kind}-report" / "report.html")
        assert scroll <= view, (kind, scroll, view)
