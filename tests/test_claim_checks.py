"""A claim's checks are computed by :func:`routestats.claim.expression_value`, which reads a test once and applies
its operators to the rows' columns. These tests hold it to pandas' own ``DataFrame.eval(engine="python")`` (an
independent parser and evaluator: what the checks were computed with before), on generated expressions over
generated rows, and on every check of real reports."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import routestats as rs
from routestats.claim import Check, evaluate, expression_value
from routestats.rundir.synthetic import synthetic_pair
from tests.conftest import synthetic_study_tree

NUMERIC = ["a", "b", "`x y`"]  # float with NaN, int, a float column whose name needs quoting
COMPARE = ["<", "<=", ">", ">=", "==", "!="]


def numeric(depth: int = 2):
    atom = st.one_of(st.sampled_from(NUMERIC), st.integers(0, 3).map(str),
                     st.sampled_from([0.0, 0.5, 1.5]).map(repr))
    if depth == 0:
        return atom
    inner = numeric(depth - 1)
    return st.one_of(atom,
                     st.tuples(inner, st.sampled_from(["+", "-", "*", "/"]), inner)
                     .map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
                     inner.map(lambda e: f"abs({e})"), inner.map(lambda e: f"-{e}"))


def boolean(depth: int = 2):
    n = numeric(1)
    atom = st.one_of(
        st.tuples(n, st.sampled_from(COMPARE), n).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.tuples(n, st.sampled_from(COMPARE[:4]), n, st.sampled_from(COMPARE[:4]), n).map(" ".join),  # chained
        st.sampled_from(["w == 'rose'", "w != ''", "c", "c == False", "a == a", "a != a"]))
    if depth == 0:
        return atom
    inner = boolean(depth - 1)
    return st.one_of(atom,
                     st.tuples(inner, st.sampled_from(["and", "or", "&", "|"]), inner)
                     .map(lambda t: f"({t[0]}) {t[1]} ({t[2]})"),
                     st.tuples(inner, st.sampled_from(["and", "or"]), inner).map(" ".join),  # bare: precedence
                     inner.map(lambda e: f"not ({e})"), inner.map(lambda e: f"~({e})"))


rows = st.integers(1, 6).flatmap(lambda n: st.fixed_dictionaries({
    "a": st.lists(st.one_of(st.floats(-3, 3, allow_nan=False), st.just(float("nan"))), min_size=n, max_size=n),
    "b": st.lists(st.integers(-3, 3), min_size=n, max_size=n),
    "x y": st.lists(st.floats(-2, 2, allow_nan=False), min_size=n, max_size=n),
    "c": st.lists(st.booleans(), min_size=n, max_size=n),
    "w": st.lists(st.sampled_from(["rose", "", "fell"]), min_size=n, max_size=n),
}).map(pd.DataFrame))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frame=rows, expression=boolean())
def test_a_test_has_the_value_pandas_gives_it(frame, expression):
    # expected: pandas' own parser and evaluator (engine="python"), on the same rows
    try:
        expected = frame.eval(expression, engine="python")
    except ZeroDivisionError:  # constants divided by zero: refused alike
        with pytest.raises(ZeroDivisionError):
            expression_value(expression, frame)
        return
    got = expression_value(expression, frame)
    if isinstance(expected, pd.Series):
        pd.testing.assert_series_equal(got, expected, check_names=False)
    else:  # a test of constants only: one value
        assert not isinstance(got, pd.Series) and bool(got) == bool(expected)


@settings(max_examples=100, deadline=None)
@given(frame=rows, expression=boolean(1))
def test_a_where_clause_keeps_the_rows_pandas_query_keeps(frame, expression):
    # evaluate() selects a check's rows by its `where`; pandas' DataFrame.query is the reference
    where = f"({expression}) and b == b"  # a row-wise selection, as a where clause is
    check = Check("c", "a == a or a != a", where=where, every="any")
    try:
        kept = frame.query(where, engine="python")
    except ZeroDivisionError:
        with pytest.raises(ZeroDivisionError):
            evaluate(check, frame, {})
        return
    assert evaluate(check, frame, {}) == (len(kept) > 0)
    # the rows kept are query's: as many, and every one of them satisfies the clause (an inverted or shifted
    # selection fails one of the two)
    assert evaluate(Check("count", f"rows == {len(kept)}", where=where, on="design"), frame, {})
    assert evaluate(Check("each", where, where=where), frame, {})


def test_a_test_naming_no_column_is_refused():
    with pytest.raises(NameError, match="'p' is not a column"):
        expression_value("p < 0.05", pd.DataFrame({"q": [1.0]}))
    with pytest.raises(ValueError, match="may not use"):
        expression_value("a in [1, 2]", pd.DataFrame({"a": [1.0]}))


def pandas_evaluate(check: Check, evidence, design) -> bool:
    """What evaluate() gave when every test was run through pandas' DataFrame.eval and query (the reference)."""
    rows = evidence if evidence is not None else pd.DataFrame()
    if check.where:
        rows = rows.query(check.where, engine="python") if len(rows) else rows
    if check.on == "design":
        env = pd.DataFrame([{**design, "rows": len(rows)}])
        return bool(env.eval(check.test, engine="python").iloc[0])
    if not len(rows):
        return check.every in ("all", "same")
    v = rows.eval(check.test, engine="python").astype(bool).to_numpy()
    return bool(v.any()) if check.every == "any" else bool(v.all() or not v.any()) if check.every == "same" \
        else bool(v.all())


def every_check(report):
    for claim in report.claims:
        for part in (claim, *claim.verdicts):
            for check in part.requires:
                yield part, check


def test_every_check_of_real_reports_has_the_value_pandas_gives_it(tmp_path):
    # a pair with a planted change (claims rose / includes / verdicts per layer) and a three-seed study
    synthetic_pair(tmp_path / "pair", seed=3, n_examples=24, effect=(0.0, 0.6, -0.6, 1.0), steps=(1, 100))
    synthetic_study_tree(tmp_path / "study")
    fast = dict(resamples=200, permutations=199, length_resamples=100)
    reports = [rs.analyse(tmp_path / "pair", **fast), rs.analyse(tmp_path / "study", **fast)]
    seen = 0
    for report in reports:
        for part, check in every_check(report):
            assert evaluate(check, part.evidence, part.design) == pandas_evaluate(check, part.evidence, part.design), \
                (part.kind, check)
            seen += 1
    assert seen >= 60  # the reports hold many checks: this test compares them, it does not pass for want of any
    assert np.mean([ok for r in reports for c in r.claims for _, ok in c.checks]) < 1  # some checks fail, too
