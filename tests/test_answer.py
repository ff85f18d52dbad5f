"""The answer at a glance: each report kind's first screen leads with one short bold sentence (the brief form of
its answer claim, with the confounds that qualify it) beside the figure that shows it."""

from __future__ import annotations

import re

import pandas as pd
import pytest

import reports
import routestats as rs
from routestats.rundir.synthetic import demo_run_dir
from tests.conftest import synthetic_mofa_tree

FAST = dict(resamples=199, permutations=4999, length_resamples=99, flow="off", seed=1)


def first_screen(html: str) -> str:
    """The headline box of the first part, as written."""
    m = re.search(r'<div class="headline with-answer" id="headline">(.*?)\n  </div>', html, re.S)
    assert m, "no first-screen answer box"
    return m.group(1)


def test_the_pair_answer_is_short_bold_and_beside_its_figure(tmp_path):
    rep = rs.analyse(demo_run_dir(), **FAST)
    eff = rep.frame("effects")
    # the demo pair: every layer's interval is above 0 with p_Holm < 0.0125 (its table; alpha shared by four
    # headline families), so the brief answer is "rose in all 4 layers", scoped to one initialisation and 32 examples
    assert (eff["ci_low"] > 0).all() and (eff["p_holm"] < 0.05 / 4).all()
    assert rep.answer == "SFM rose in all 4 layers, within one initialisation (32 examples)."
    assert len(rep.answer) < len(rep.headline[0]) / 2  # short: the numbers are in the figure and the full sentence
    fig = rep.answer_claim.figure
    est = fig.frames["estimates"].set_index("layer")
    # the figure draws the effects table's own cells
    pd.testing.assert_series_equal(est["estimate"], eff.set_index("layer")["mean_diff"].astype(float),
                                   check_names=False)
    assert set(est["asserted"]) == {"rose"}
    reports.write(rep, tmp_path / "out", ("html",))
    box = first_screen((tmp_path / "out" / "report.html").read_text())
    assert '<p class="answer">SFM rose in all 4 layers, within one initialisation (32 examples).</p>' in box
    assert '<figure class="answer-figure"><svg viewBox=' in box  # the page's own drawing, inline
    assert box.index('class="answer"') < box.index('class="more"')  # the brief answer first, then the sentences


def test_the_study_answer_draws_each_seed_beside_the_across_seed_interval():
    rep = rs.analyse("data/demo_study", **FAST)
    across = rep.frame("across_seeds")
    # the demo study's across-seed table: only layer 0 reaches p_t_holm < 0.05 with its t interval above 0
    up = across[(across["p_t_holm"] < 0.05) & (across["ci_low_t"] > 0)]["layer"].tolist()
    assert up == [0]
    assert rep.answer == "SFM rose in layer 0 of 4, across 3 seeds (seed as the unit)."
    pts = rep.answer_claim.figure.frames["points"]
    assert sorted(pts["seed"].unique()) == [42, 99, 1001] and len(pts) == 3 * 4
    # each layer's across-seed estimate is the mean of the seed points drawn beside it
    means = pts.groupby("layer")["estimate"].mean()
    assert means.to_numpy() == pytest.approx(across.sort_values("layer")["mean_delta"].to_numpy(), abs=1e-12)


def test_the_mofa_answer_counts_each_ratios_lowest_domains_from_the_perplexities(tmp_path):
    synthetic_mofa_tree(tmp_path / "mofa")
    rep = rs.analyse(tmp_path / "mofa", **FAST)
    ppl = rep.frame("ppl")
    # independently: per domain, the ratio of lowest mean PPL over seeds
    lowest = ppl.groupby(["domain", "ratio"])["ppl"].mean().groupby(level="domain").idxmin().map(lambda k: k[1])
    counts = lowest.value_counts()
    d = ppl["domain"].nunique()
    if counts.iloc[0] == d:
        assert rep.answer.startswith(f"Ratio {counts.index[0]} has the lowest mean perplexity in all {d} domains")
    else:
        assert rep.answer.startswith("No one ratio has the lowest mean perplexity in every domain: ")
        for ratio, n in counts.items():
            assert f"{ratio} in {n} of {d}" in rep.answer
    # the worst-vs-best test qualifies it in the same sentence
    wb = rep.frame("worst_best")
    p = "p_holm" if "p_holm" in wb else "p_raw"
    assert f"worst − best reaches p < 0.05 in {int((wb[p] < 0.05).sum())} of {len(wb)} domains" in rep.answer
    rel = rep.answer_claim.figure.frames["relative"]
    # 0 = the domain's lowest mean: each domain's lowest ratio mean of the relative PPL is exactly 0
    assert rel.groupby(["domain", "ratio"])["relative"].mean().groupby(level="domain").min().abs().max() < 1e-12
    reports.write(rep, tmp_path / "out", ("html", "markdown"))
    assert '<figure class="answer-figure"><svg viewBox=' in first_screen((tmp_path / "out" / "report.html").read_text())
    assert f"**{rep.answer}**" in (tmp_path / "out" / "report.md").read_text()


def test_a_confound_joins_the_answer_sentence():
    from routestats.claim import Check, Claim
    from routestats.report import Report, Section

    ev = pd.DataFrame({"layer": [0], "p": [0.01]})
    answer = Claim("rose", "…", "headline", evidence=ev, requires=(Check("p < 0.05", "p < 0.05"),),
                   short="SFM rose in layer 0 of 1, on this pretrained checkpoint (8 examples).")
    shift = Claim("unnamed_shift", "…", "headline", short="in layer 0 about 70% of that change is attention leaving "
                  "special tokens and separators (SFM over the named keys: +0.010)", qualifier=True)
    rep = Report("t", "s", (Section("e", "E", claims=(answer, shift)),))
    assert rep.answer == ("SFM rose in layer 0 of 1, on this pretrained checkpoint (8 examples); in layer 0 about "
                          "70% of that change is attention leaving special tokens and separators (SFM over the named "
                          "keys: +0.010).")
    # an answer whose preconditions fail is not the answer, and its confound is not said alone
    failed = Report("t", "s", (Section("e", "E", claims=(Claim("rose", "…", "headline", evidence=ev.assign(p=0.3),
                                                                requires=answer.requires, short=answer.short),
                                                          shift)),))
    assert failed.answer_claim is None and failed.answer == ""


def test_the_regime_answer_counts_the_certified_points(tmp_path):
    from routestats.compose.regime.build import build_regime_report
    from routestats.settings import AnalysisSettings
    from tests.test_regime_report import write_points

    run = write_points(tmp_path / "run", layers=(0, 1, 2), examples=(0, 1))
    rep = build_regime_report(run, AnalysisSettings(probes=64, seed=0))
    s = rep.frame("summary")
    k = int((s["lambda_max"] > 1).sum())  # switching certified: λ_max > 1 (METHODS, regime switching)
    assert rep.answer == f"Switching is certified (λ_max > 1) at {k} of 6 operating points, layers 0–2."
    assert len(rep.answer_claim.figure.frames["summary"]) == 6


def test_the_answer_table_is_table_one_in_every_report_kind(tmp_path):
    # one numbering rule for every kind: the table the answer rests on first, then section order; the HTML, the
    # Markdown and tables.tex agree
    synthetic_mofa_tree(tmp_path / "mofa")
    for path, name in ((demo_run_dir(), "effects"), ("data/demo_study", "across_seeds"), (tmp_path / "mofa", "per_ratio")):
        rep = rs.analyse(path, **FAST)
        assert rep.answer_claim.table == name
        out = tmp_path / f"out-{name}"
        reports.write(rep, out, ("html", "latex", "markdown"))
        html = (out / "report.html").read_text()
        caption = rep.table(name).caption
        assert f"<strong>Table 1.</strong> {caption[:30]}" in html
        assert f"Table 1. {caption[:30]}" in (out / "report.md").read_text()
        tex = (out / "tables" / "tables.tex").read_text()
        assert re.findall(r"\\input\{([^}]+)\}", tex)[0].endswith(name)
