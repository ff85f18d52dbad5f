"""One p-floor: the smallest p the sign-flip test can give is a column of the effects frame, written by
paired_inference, and the headline sentence, the HTML/Markdown cell and the LaTeX cell all print that one number.

Expected floors are closed forms: with n examples every sign pattern of the two-sided test is one of 2^n, and with P
random patterns drawn (the plus-one rule) the smallest raw p is (c + 1)/(P + 1), c the drawn patterns that keep or
flip every sign: binomial(P, 2/2^n), so within a few Monte Carlo SEs of 2/2^n + 1/(P + 1); Holm over k layers
multiplies the smallest p by k. For n = 5, k = 4: about 4 x (2/32 + 1/2001) = 0.252; n = 6: 0.127; n = 8: 0.0332.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import reports
import routestats as rs
from reports.formatting import format_cells
from routestats.numbers import at_floor, floor_text
from routestats.rundir.synthetic import synthetic_pair
from routestats.stats.inference import paired_inference

P = 2000
FLOORS = {n: 2 / 2**n + 1 / (P + 1) for n in (5, 6, 8)}  # one test's smallest p, closed form (the docstring)


def near_floor(value: float, n: int, layers: int = 1) -> bool:
    """``value`` is ``layers`` x (c + 1)/(P + 1) for a c within 4 binomial SEs of its mean P 2/2^n."""
    q = 2 / 2**n
    return abs(value / layers - FLOORS[n]) <= 4 * np.sqrt(q * (1 - q) / P) + 1e-12


@pytest.mark.parametrize("n", sorted(FLOORS))
def test_paired_inference_writes_the_floor_column(n):
    d = np.abs(np.random.default_rng(n).normal(1.0, 0.1, size=(n, 4)))  # every difference positive
    t = paired_inference(d, resamples=200, permutations=P, seed=1).to_frame()
    assert near_floor(t["p_floor"].iloc[0], n) and np.allclose(t["p_adj_floor"], 4 * t["p_floor"])
    # every sign pattern as extreme as the data is the all-positive one or its mirror: each p is the floor itself
    assert (t["p_raw"] == t["p_floor"]).all() and np.allclose(t["p_adj"], t["p_adj_floor"])
    assert all(at_floor(p, f) for p, f in zip(t["p_adj"], t["p_adj_floor"]))


def test_a_floor_set_by_the_draws_is_one_over_p_plus_one():
    t = paired_inference(np.ones((40, 2)) + np.arange(80).reshape(40, 2) / 100, resamples=100, permutations=999,
                         seed=1).to_frame()
    assert np.allclose(t["p_floor"], 1 / 1000) and np.allclose(t["p_adj_floor"], 2 / 1000)


@pytest.mark.parametrize("n", sorted(FLOORS))
def test_sentence_cell_and_latex_print_one_floor(tmp_path, n):
    synthetic_pair(tmp_path, seed=2, n_examples=n, effect=(3.0, 3.0, 3.0, 3.0), exact_null=True)
    rep = rs.analyse(tmp_path, resamples=200, permutations=P)
    eff = rep.frame("effects")
    floor = float(eff["p_holm_floor"].iloc[0])
    assert near_floor(floor, n, layers=4) and np.allclose(eff["p_holm_floor"], floor)
    printed = floor_text(floor, floor)  # rounded up at fmt_p's decimals, never below the floor
    assert float(printed) >= floor and float(printed) - floor < 10.0 ** -(len(printed) - 2)
    headers, rows = format_cells(rep.table("effects"))
    col = headers.index("p (Holm)")
    cells = [r[col] for r in rows]
    assert all(c.get("floor") for c in cells), [c["text"] for c in cells]  # a planted 3-logit effect: at the floor
    assert {c["short"] for c in cells} == {printed}
    assert all(c["text"] == f"{printed} (smallest attainable)" for c in cells)
    latex = reports.to_latex(rep, "effects")
    assert latex.count(printed + r"\textsuperscript{\dag}") == len(cells)
    headline = " ".join(rep.headline)
    said = re.findall(r"p_Holm (?:=|≤) (\d\.\d+), the smallest attainable", headline)
    assert said and set(said) == {printed}, headline
    if floor >= 0.05:  # the floor claim names the same number
        assert f"the smallest attainable p_Holm is {printed}" in headline
    findings = [f for f in rep.findings if f.startswith("Layer ")]  # the per-layer findings quote the cells
    assert len(findings) == 4 and all(f"p_Holm = {printed} (smallest attainable)." in f for f in findings), findings


def test_a_p_above_the_floor_is_printed_as_estimated():
    """Mutation of the rule: a p well above the floor is not marked, and not replaced by the floor."""
    assert not at_floor(0.2, 0.125) and at_floor(0.13, 0.125)
    assert floor_text(0.13, 0.125) == "0.125"


@pytest.mark.parametrize("n, floor", [(5, "0.063"), (6, "0.032"), (8, None)])
def test_the_profile_shape_sentence_says_when_its_test_cannot_reach_alpha(tmp_path, n, floor):
    """The profile-shape sign-flip test enumerates all 2^n sign vectors here: its smallest p is 2/2^n (0.0625,
    0.03125, 0.0078), against the α share 0.025 of two headline families; 0.0625 is printed 0.063, never 0.062."""
    synthetic_pair(tmp_path, seed=2, n_examples=n, effect=(0.0, 0.0, 0.0, 0.0), exact_null=True)
    rep = rs.analyse(tmp_path, resamples=200, permutations=P)
    shape = rep.frame("profile_shape")
    assert np.isclose(shape["p_floor"].iloc[0], 2 / 2**n) and np.isnan(shape["p_floor"].iloc[1])
    sentence = next(h for h in rep.headline if "profile-shape" in h)
    if floor is None:
        assert "cannot reach" not in sentence and "smallest attainable" not in sentence
    else:
        assert "cannot reach p < 0.025" in sentence
        assert (f"smallest attainable p is {floor}" in sentence) or (f"p = {floor}, the smallest attainable" in sentence)
        assert "p = 0.062," not in sentence  # 2/2^5 printed below its exact value
