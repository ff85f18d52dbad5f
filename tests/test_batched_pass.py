"""The vectorised reductions pass against the per-example pass it replaces (METHODS 2.1-2.3).

The per-example path (``reductions_block`` + ``summarise_queries`` one example at a time) is the
reference: it is the code the golden hashes were made with. The batched path must give bitwise the
same summaries, and its whole-chunk validation must refuse exactly what the per-example checks
refuse, with the same message.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import routestats as rs
from routestats.metrics import passes, routing
from routestats.rundir import schema as S
from routestats.rundir.reductions import reduce_queries, summarise_batch, summarise_queries
from routestats.rundir.write import RunWriter
from tests.conftest import FIELDS, make_examples, random_attention, reseal

STEP = 10


def _write(path, rng, lengths, *, causal=False, head_types=None, forms=("reductions",)):
    fields = [list(rng.choice([0, 3, 4], size=n)) for n in lengths]
    w = RunWriter(path, run_id="r", study="test", factors={"variant": "baseline"}, seed=0, init_id="i",
                  data_order_id="o", fields=FIELDS, overwrite=True, causal=causal)
    w.write_examples(make_examples(fields))
    with w.attention(STEP, dtype="float32", forms=forms, group_size=3) as sink:
        for ex, n in enumerate(lengths):
            a = random_attention(rng, 2, 3, n)
            if causal:
                a = np.tril(a)
                a /= a.sum(-1, keepdims=True)
            if head_types is not None:
                a[:, [i for i, t in enumerate(head_types) if t == "sigmoid"]] *= 0.5
            sink.add(ex, a, head_types=head_types)
    w.finalize()
    return rs.load_run(path)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("trivial", ["include", "exclude"])
def test_batched_summaries_equal_the_per_example_pass(tmp_path, rng, causal, trivial):
    # 40 examples over 7 lengths, rows written in groups of 3: batches mix row groups and lengths
    lengths = rng.choice([1, 2, 5, 9, 17, 33, 130], size=40)
    run = _write(tmp_path / "r", rng, lengths, causal=causal,
                 head_types=["softmax", "sigmoid", "softmax"])
    fields = dict(zip(*run.examples(["example_id", "field_ids"]).to_dict("list").values()))
    named = run.field_ids
    got = passes._summaries_batched(run, STEP, fields, named, trivial)
    want = passes._summaries_per_example(run, STEP, S.FORM_REDUCTIONS, ("attention",), fields, named, trivial)[
        "attention"]
    assert sorted(got[0]) == sorted(want[0])
    for k in want[0]:
        a, b = np.asarray(got[0][k]), np.asarray(want[0][k])
        assert a.dtype == b.dtype and a.shape == b.shape, k
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), k  # bitwise, not approximately
    assert np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2])
    assert got[0]["example_id"][:6].tolist() == [0] * 6  # file order: example 0's 2 x 3 rows first


def test_summarise_batch_is_summarise_queries_per_example(rng):
    named = np.array([1, 2, 5])
    for n in (1, 7, 8, 9, 128, 129, 300):  # around numpy's pairwise-summation block sizes
        g = rng.integers(0, 6, size=(5, n))
        reds = [reduce_queries(rng.dirichlet(np.ones(n), size=(4, n)), gi, named) for gi in g]
        for causal in (False, True):
            b = summarise_batch({k: np.stack([r[k] for r in reds]) for k in reds[0]}, g, named, causal)
            for e in range(5):
                one = summarise_queries(reds[e], g[e], named, causal)
                for k, v in one.items():
                    assert np.array_equal(np.asarray(v), b[k][e], equal_nan=True), (n, k)


def test_field_to_field_sums_equal_the_query_loop_within_rounding():
    # expected: a plain Python loop over the queries of each source field in order, one float64
    # addition at a time, divided by the source field's query count. The matrix product sums in the
    # BLAS kernel's order, which is the loop's bit for bit on some CPUs and not on others (OpenBLAS's
    # Haswell kernel differs in the last bit at n = 300), so the two must agree within the classical
    # bound on a float64 sum of m terms in any order: (m - 1) * eps * sum |term| (Higham, Accuracy
    # and Stability, 4.2); a wrong query, field or count is off by far more.
    rng = np.random.default_rng(12)
    named = np.array([1, 2, 5])
    for n in (1, 9, 64, 129, 256, 300):
        g = rng.integers(0, 6, size=(3, n))
        w = rng.dirichlet(np.ones(n), size=(3, 4, n)) * rng.random((3, 4, n, 1)) ** 6  # masses over many octaves
        reds = [reduce_queries(w[e], g[e], named) for e in range(3)]
        b = summarise_batch({k: np.stack([r[k] for r in reds]) for k in reds[0]}, g, named)
        for e in range(3):
            fm = reds[e]["field_mass"]
            for r in range(4):
                for si, s in enumerate(named):
                    for di in range(len(named)):
                        total, absolute, count = 0.0, 0.0, 0
                        for q in range(n):
                            if g[e, q] == s:
                                total += float(fm[r, q, di])
                                absolute += abs(float(fm[r, q, di]))
                                count += 1
                        bound = max(count - 1, 0) * np.finfo(float).eps * absolute / max(1, count)
                        got = b["f2f"][e, r, si, di]
                        assert abs(got - total / max(1, count)) <= bound, (n, e, r, s, di)


def test_batches_hold_one_length_and_every_example_once(tmp_path, rng):
    lengths = rng.choice([3, 4, 11], size=25)
    run = _write(tmp_path / "r", rng, lengths)
    for budget in (0, 64):
        out = list(run.iter_reduction_batches(STEP, budget_mb=budget))
        assert sorted(np.concatenate([b.position for b in out]).tolist()) == list(range(25))
        for b in out:
            assert {int(lengths[p]) for p in b.position} == {b.n}
            assert b.reductions["row_mass"].shape == (len(b.position), 6, b.n)
        if budget == 0:  # nothing may wait: every example leaves on its own, in file order
            assert [b.position.tolist() for b in out] == [[i] for i in range(25)]
        else:  # all fit: one batch per length
            assert len(out) == 3



@pytest.mark.parametrize("budget_bytes, most", [(0, 256), (2_000, 256), (20_000, 3), (1 << 30, 4), (1 << 30, 256)])
def test_batches_from_row_groups_are_the_batches_of_one_example_at_a_time(tmp_path, rng, budget_bytes, most):
    # the reference: batch_by_length fed one ExampleReductions at a time (each copied as it arrives, then stacked);
    # the reader feeds it whole row groups (GroupReductions, copied out by length): the same batches, bit for bit
    from routestats.rundir.reduction_batches import GroupReductions, batch_by_length

    lengths = rng.choice([3, 4, 7, 11], size=40)
    run = _write(tmp_path / "r", rng, lengths)
    items = list(run._reduction_items(STEP, None, None))
    assert any(isinstance(i, GroupReductions) and len(i) > 1 for i in items)  # the group path is taken
    one_at_a_time = [blk for i in items for blk in (i if isinstance(i, GroupReductions) else [i])]
    got = list(batch_by_length(items, budget_bytes, most))
    want = list(batch_by_length(one_at_a_time, budget_bytes, most))
    assert len(got) == len(want) and len(got) > 1
    for g, w in zip(got, want):
        for name in ("position", "example_id", "layer", "head", "head_type"):
            np.testing.assert_array_equal(getattr(g, name), getattr(w, name))
        assert g.reductions.keys() == w.reductions.keys()
        for k in w.reductions:
            assert g.reductions[k].dtype == w.reductions[k].dtype and g.reductions[k].flags.c_contiguous
            np.testing.assert_array_equal(g.reductions[k], w.reductions[k])

def _edit(run, fn):
    f = run.path / S.attention_file(STEP, "reductions")
    t = pq.read_table(f).to_pandas()
    edited = fn(t)
    t = t if edited is None else edited
    pq.write_table(pa.Table.from_pandas(t, schema=S.REDUCTIONS_SCHEMA, preserve_index=False), f, row_group_size=9)
    reseal(run.path)


def _at(t, ex, layer=1, head=2):
    return t.index[(t["example_id"] == ex) & (t["layer"] == layer) & (t["head"] == head)][0]


def _scale(col, factor):
    def fn(t):
        i = _at(t, 7)
        t.at[i, col] = np.asarray(t.at[i, col]) * factor
    return fn


def _set(col, q, value):
    def fn(t):
        i = _at(t, 7)
        v = np.asarray(t.at[i, col]).copy()
        v[q] = value
        t.at[i, col] = v
    return fn


def _retype(t):
    t.loc[_at(t, 7), "head_type"] = "Softmax"


def _renumber(t):
    t.loc[_at(t, 7), "n"] = 99


def _repeat(t):
    t.loc[_at(t, 7), "head"] = 1


MUTATIONS = {
    "row mass doubled": (_scale("row_mass", 2.0), "row_mass of a softmax row"),
    "field mass inflated": (_scale("field_mass", 1.5), "the summed field_mass"),
    "entropy above ln n": (_set("entropy", 0, 9.0), r"entropy \(must lie in"),
    "rownorm entropy negative": (_set("entropy_rownorm", 1, -0.5), r"entropy_rownorm \(must lie in"),
    "NaN entropy": (_set("entropy", 2, np.nan), "holds a non-finite or negative value"),
    "negative first mass": (_set("first_mass", 0, -0.1), "holds a non-finite or negative value"),
    # on a sigmoid head (layer 1, head 2; row mass 0.5): one weight above its row's mass, and one above 1 in a row
    # whose mass is 3 (each of the chunk check's two conditions alone)
    "first mass above its row's mass": (_set("first_mass", 1, 0.7), r"first_mass \(at most 1 and at most row_mass"),
    "first mass above 1": (lambda t: (_scale("row_mass", 6.0)(t), _set("first_mass", 1, 1.5)(t)) and None,
                           r"first_mass \(at most 1 and at most row_mass"),
    "unknown head type": (_retype, "holds 'Softmax'"),
    "wrong n": (_renumber, "column 'n' of example_id 7 is 99"),
    "repeated row": (_repeat, "has a repeated"),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_chunk_checks_refuse_what_the_per_example_checks_refuse(tmp_path, rng, monkeypatch, name):
    fn, needle = MUTATIONS[name]
    sigmoid = name.startswith("first mass above")
    run = _write(tmp_path / "r", rng, [6] * 12, head_types=["softmax", "softmax", "sigmoid"] if sigmoid else None)
    _edit(run, lambda t: None)  # rewritten in row groups of 9 rows, as the mutated file will be
    seen = []
    from routestats.rundir import reduction_batches

    real = reduction_batches.reductions_group
    monkeypatch.setattr("routestats.rundir.read.reductions_group", lambda *a: seen.append(real(*a)) or seen[-1])
    assert len(list(rs.load_run(run.path).iter_reductions(STEP))) == 12
    assert [len(b) for b in seen] == [11]  # intact: every example after the first passes the chunk checks
    _edit(run, fn)  # example 7 sits inside a chunk: the vectorised checks see it first

    def message():
        with pytest.raises(rs.RunFormatError) as err:
            list(rs.load_run(run.path).iter_reductions(STEP))
        return str(err.value)

    fast = message()
    assert seen[-1] is None  # the chunk checks found it and handed over to the per-example path
    monkeypatch.setattr("routestats.rundir.read.reductions_group", lambda *a, **k: None)
    slow = message()
    assert re.search(needle, fast), fast
    assert "example_id 7" in fast
    assert fast == slow


def test_rows_out_of_grid_order_are_read_as_sorted(tmp_path, rng):
    run = _write(tmp_path / "r", rng, [5] * 8)
    want = routing.sfm(run)
    _edit(run, lambda t: t.iloc[::-1].reset_index(drop=True).sort_values("example_id", kind="stable"))
    pd.testing.assert_frame_equal(routing.sfm(rs.load_run(run.path)), want)


@pytest.mark.parametrize("n_fields", [1, 2, 4, 5, 9])
def test_own_field_mass_is_each_querys_own_column_in_query_order(rng, n_fields):
    # each query's mass on its own field, by a plain loop (the expected values), for the few-field and the
    # many-field selections alike; its memory layout (E, n, rows) is what makes the sums run in query order
    from routestats.rundir.reductions import _own_and_f2f

    E, rows, n = 3, 4, 11
    fm = rng.random((E, rows, n, n_fields))
    src = np.zeros((E, n, n_fields), dtype=bool)
    field = rng.integers(-1, n_fields, (E, n))  # -1: not a named field (not a valid query)
    for e in range(E):
        for q in range(n):
            if field[e, q] >= 0:
                src[e, q, field[e, q]] = True
    valid = src.any(axis=-1)
    own, _, _ = _own_and_f2f(fm, src, valid)
    want = np.array([[[fm[e, r, q, field[e, q]] if field[e, q] >= 0 else fm[e, r, q, 0] for q in range(n)]
                      for r in range(rows)] for e in range(E)])
    assert np.array_equal(own, want)
    assert own.transpose(0, 2, 1).flags["C_CONTIGUOUS"]
