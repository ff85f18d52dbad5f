"""Loading, validation, pairing and atomic writes of run directories."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import routestats as rs
from routestats.rundir import schema as S
from routestats.rundir.atomic import atomic_path, write_json_atomic
from routestats.rundir.synthetic import synthetic_pair
from tests.conftest import FIELDS, make_examples, random_attention, reseal, write_run


# ------------------------------------------------------------------ round trip
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_round_trip_is_bitwise(tmp_path, rng, dtype):
    fields = [[4, 4, 3, 3, 3], [4, 3, 3], [4, 4, 4, 3, 3, 3, 3]]
    att = [random_attention(rng, 2, 3, len(g)) for g in fields]
    run = rs.load_run(write_run(tmp_path / "r", att, fields, dtype=dtype))
    blocks = list(run.iter_attention())
    assert [b.example_id for b in blocks] == [0, 1, 2]
    for b, a in zip(blocks, att):
        expected = a.astype(dtype).reshape(6, len(a[0, 0]), -1)
        assert b.weights.dtype == np.dtype(dtype)
        assert np.array_equal(b.weights, expected)  # bitwise: same dtype, exact equality
        assert b.layer.tolist() == [0, 0, 0, 1, 1, 1] and b.head.tolist() == [0, 1, 2, 0, 1, 2]
    ex = run.examples()
    assert ex["length"].tolist() == [5, 3, 7]
    assert [list(v) for v in ex["field_ids"]] == fields
    assert run.validate(deep=True)[0] == "manifest"


def test_selective_reads(tmp_path, rng):
    fields = [[4, 3, 3]] * 5
    att = [random_attention(rng, 3, 2, 3) for _ in fields]
    run = rs.load_run(write_run(tmp_path / "r", att, fields))
    blocks = list(run.iter_attention(examples=[1, 3], layers=[2]))
    assert [b.example_id for b in blocks] == [1, 3]
    assert np.array_equal(blocks[1].weights, att[3][2].astype("float32"))
    assert run.examples(["example_id", "length"]).columns.tolist() == ["example_id", "length"]


@pytest.mark.parametrize("layers, says", [([3, 1], "increasing"), ([-1, 2], "increasing"), ([2], "opened for layers [2]")])
def test_stored_layer_numbers_are_checked(tmp_path, rng, layers, says):
    from routestats.errors import RoutestatsError

    w = rs.RunWriter(tmp_path / "r", run_id="r", study="t", factors={"variant": "baseline"}, seed=0, init_id="i",
                     data_order_id="d", fields=FIELDS)
    w.write_examples(make_examples([[4, 3]]))
    with pytest.raises(RoutestatsError, match=re.escape(says)):
        with w.attention(1, dtype="float32", layers=layers) as sink:
            sink.add(0, random_attention(rng, 2, 1, 2))


def test_stored_layer_numbers_label_the_rows(tmp_path, rng):
    w = rs.RunWriter(tmp_path / "r", run_id="r", study="t", factors={"variant": "baseline"}, seed=0, init_id="i",
                     data_order_id="d", fields=FIELDS)
    w.write_examples(make_examples([[4, 3, 3]]))
    att = random_attention(rng, 2, 2, 3)
    with w.attention(1, dtype="float32", forms=("matrices", "reductions"), layers=[5, 9]) as sink:
        sink.add(0, att)
    run = rs.load_run(w.finalize())
    (blk,) = run.iter_attention()
    assert blk.layer.tolist() == [5, 5, 9, 9]  # the labels given, in the stored order
    assert np.array_equal(blk.weights[2], att[1, 0].astype("float32"))  # stored layer 1 is model layer 9
    assert sorted(rs.layer_summary(run)["layer"]) == [5, 9]


def test_a_row_group_closes_once_its_buffer_holds_the_byte_budget(tmp_path, rng, monkeypatch):
    # 5 examples of 2 heads (2 rows each): a 1-byte budget closes a group after every example; a budget no example
    # reaches keeps write_run's group_size of 2 examples (4 rows, then the last example's 2)
    from routestats.rundir.write import AttentionSink

    fields = [[4, 4, 3]] * 5
    for budget, want in ((1, [2] * 5), (10**9, [4, 4, 2])):
        monkeypatch.setattr(AttentionSink, "GROUP_BYTES", budget)
        path = write_run(tmp_path / f"r{budget}", [random_attention(rng, 1, 2, 3) for _ in fields], fields)
        pf = pq.ParquetFile(path / S.attention_file(10, "matrices"))
        assert [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)] == want


def test_row_groups_hold_whole_examples(tmp_path, rng):
    fields = [[4, 3]] * 5
    path = write_run(tmp_path / "r", [random_attention(rng, 1, 2, 2) for _ in fields], fields)
    pf = pq.ParquetFile(path / S.attention_file(10, "matrices"))
    # group_size=2 in write_run: 2 + 2 + 1 examples, 2 rows (heads) per example
    assert [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)] == [4, 4, 2]


def test_example_split_across_row_groups_is_reassembled(tmp_path, rng):
    fields = [[4, 3]] * 2
    att = [random_attention(rng, 2, 2, 2) for _ in fields]
    path = write_run(tmp_path / "r", att, fields)
    f = path / S.attention_file(10, "matrices")
    t = pq.read_table(f)
    pq.write_table(t, f, row_group_size=3)  # 8 rows -> groups of 3, 3, 2: examples straddle
    reseal(path)
    man = json.loads((path / "run.json").read_text())
    run = rs.run = rs.load_run(path)
    blocks = list(run.iter_attention())
    assert [b.example_id for b in blocks] == [0, 1]
    assert np.array_equal(blocks[1].weights, att[1].astype("float32").reshape(4, 2, 2))
    assert man["schema_version"] == S.SCHEMA_VERSION


# ------------------------------------------------------------------ validation errors
def test_missing_manifest_is_incomplete(tmp_path):
    (tmp_path / "r").mkdir()
    with pytest.raises(rs.IncompleteRunError, match="no run.json; the run is incomplete"):
        rs.load_run(tmp_path / "r")


def test_unknown_schema_version(tmp_path, rng):
    path = write_run(tmp_path / "r", [random_attention(rng, 1, 1, 2)], [[4, 3]])
    m = json.loads((path / "run.json").read_text())
    m["schema_version"] = "9.9"
    (path / "run.json").write_text(json.dumps(m))
    with pytest.raises(rs.SchemaVersionError, match=r"schema_version '9.9' is not supported"):
        rs.load_run(path)


def test_wrong_dtype_column(tmp_path, rng):
    path = write_run(tmp_path / "r", [random_attention(rng, 1, 1, 2)], [[4, 3]])
    t = pq.read_table(path / S.EXAMPLES)
    t = t.set_column(t.schema.get_field_index("length"), "length", t["length"].cast(pa.int64()))
    pq.write_table(t, path / S.EXAMPLES)
    reseal(path)
    with pytest.raises(rs.RunFormatError, match=r"examples.parquet: column 'length' has type int64, expected int32"):
        rs.load_run(path).examples()


def _poison(path, value, where=(0, 0)):
    f = path / S.attention_file(10, "matrices")
    t = pq.read_table(f).to_pandas()
    w = np.array(t.at[0, "weights"], dtype=np.float32)
    w[where[0] * int(np.sqrt(w.size)) + where[1]] = value
    t.at[0, "weights"] = w
    pq.write_table(pa.Table.from_pandas(t, schema=S.attention_matrices_schema("float32"), preserve_index=False), f)
    reseal(path)


def test_nan_attention(tmp_path, rng):
    path = write_run(tmp_path / "r", [random_attention(rng, 1, 1, 3)], [[4, 3, 3]])
    _poison(path, np.nan, (1, 2))
    with pytest.raises(rs.RunFormatError, match=r"'weights' of example_id 0, layer 0, head 0 holds nan at query 1, key 2"):
        list(rs.load_run(path).iter_attention())


def test_negative_attention(tmp_path, rng):
    path = write_run(tmp_path / "r", [random_attention(rng, 1, 1, 3)], [[4, 3, 3]])
    _poison(path, -0.25, (0, 1))
    with pytest.raises(rs.RunFormatError, match=r"holds negative attention -0.25 at query 0, key 1"):
        list(rs.load_run(path).iter_attention())


def test_row_not_summing_to_one(tmp_path):
    a = np.full((1, 1, 3, 3), 1 / 3)
    a[0, 0, 2] = [0.5, 0.3, 0.1]  # sums to 0.9
    # the writer refuses it as it writes ...
    with pytest.raises(rs.RoutestatsError, match=r"query 2 sums to 0.9; rows must sum to 1 within 0.0001 for float32"):
        write_run(tmp_path / "w", [a], [[4, 3, 3]])
    # ... and the reader refuses a file someone else wrote
    path = write_run(tmp_path / "r", [np.full((1, 1, 3, 3), 1 / 3)], [[4, 3, 3]])
    _poison(path, 0.1, (2, 2))  # row 2: 1/3 + 1/3 + 0.1
    with pytest.raises(rs.RunFormatError, match=r"query 2 sums to 0.766667; rows must sum to 1 within 0.0001"):
        list(rs.load_run(path).iter_attention())


def test_sigmoid_rows_need_not_sum_to_one(tmp_path):
    a = np.full((1, 2, 3, 3), 0.2)
    a[0, 0] = 1 / 3
    path = write_run(tmp_path / "r", [a], [[4, 3, 3]], head_types=["softmax", "sigmoid"])
    (blk,) = rs.load_run(path).iter_attention()
    assert blk.head_type.tolist() == ["softmax", "sigmoid"]


def test_field_id_out_of_range(tmp_path, rng):
    path = write_run(tmp_path / "r", [random_attention(rng, 1, 1, 2)], [[4, 3]])
    t = pq.read_table(path / S.EXAMPLES).to_pandas()
    t.at[0, "field_ids"] = np.array([4, 9], dtype=np.int16)
    pq.write_table(pa.Table.from_pandas(t, schema=S.EXAMPLES_SCHEMA, preserve_index=False), path / S.EXAMPLES)
    reseal(path)
    with pytest.raises(rs.RunFormatError, match=r"'field_ids' of example_id 0 holds 9, outside the field vocabulary \[0, 6\)"):
        rs.load_run(path).examples()


@pytest.mark.parametrize("edit, message", [
    # expected: the row each rule names, worked out by hand from the three examples below (ids 0, 1, 2;
    # lengths 2, 3, 2; field vocabulary [0, 6))
    (lambda t: t.__setitem__("example_id", [0, 1, 1]), r"column 'example_id' repeats value 1$"),
    (lambda t: t.__setitem__("cap", [256, 2, 256]),
     r"column 'length' of example_id 1 is 3, expected min\(prepared_length, cap\) = 2$"),
    (lambda t: t.at.__setitem__((2, "field_ids"), np.array([4, 3, 3], dtype=np.int16)),
     r"column 'field_ids' of example_id 2 has 3 entries, expected length = 2$"),
    (lambda t: t.at.__setitem__((1, "word_ids"), np.array([0, 1], dtype=np.int32)),
     r"column 'word_ids' of example_id 1 has 2 entries, expected length = 3$"),
    # the first offending value in row order names its row, also when a later row holds a larger one
    (lambda t: (t.at.__setitem__((1, "field_ids"), np.array([4, 7, 3], dtype=np.int16)),
                t.at.__setitem__((2, "field_ids"), np.array([-1, 3], dtype=np.int16))),
     r"column 'field_ids' of example_id 1 holds 7, outside the field vocabulary \[0, 6\)$"),
])
def test_examples_rules_name_the_first_offending_row(tmp_path, rng, edit, message):
    path = write_run(tmp_path / "r", [random_attention(rng, 1, 1, n) for n in (2, 3, 2)], [[4, 3], [4, 4, 3], [3, 3]])
    t = pq.read_table(path / S.EXAMPLES).to_pandas()
    edit(t)
    pq.write_table(pa.Table.from_pandas(t, schema=S.EXAMPLES_SCHEMA, preserve_index=False), path / S.EXAMPLES)
    reseal(path)
    with pytest.raises(rs.RunFormatError, match=message):
        rs.load_run(path).examples()

def test_wrong_matrix_size(tmp_path, rng):
    path = write_run(tmp_path / "r", [random_attention(rng, 1, 1, 3)], [[4, 3, 3]])
    t = pq.read_table(path / S.EXAMPLES).to_pandas()
    t["prepared_length"] = np.int32(2)
    t["length"] = np.int32(2)
    t.at[0, "field_ids"] = np.array([4, 3], dtype=np.int16)
    t.at[0, "tokens"] = np.array(["a", "b"], dtype=object)
    pq.write_table(pa.Table.from_pandas(t, schema=S.EXAMPLES_SCHEMA, preserve_index=False), path / S.EXAMPLES)
    reseal(path)
    with pytest.raises(rs.RunFormatError, match=r"column 'n' of example_id 0 is 3, but the example's evaluated length is 2"):
        list(rs.load_run(path).iter_attention())


def test_deep_validation_detects_changed_file(tmp_path, rng):
    path = write_run(tmp_path / "r", [random_attention(rng, 1, 1, 2)], [[4, 3]])
    with open(path / S.EXAMPLES, "ab") as fh:
        fh.write(b"x")
    with pytest.raises(rs.RunFormatError, match="differs from run.json"):
        rs.load_run(path).validate(deep=True)


def test_listed_file_missing(tmp_path, rng):
    path = write_run(tmp_path / "r", [random_attention(rng, 1, 1, 2)], [[4, 3]])
    (path / S.attention_file(10, "matrices")).unlink()
    with pytest.raises(rs.RunFormatError, match=r"lists attention/step=000010/matrices.parquet but that file is missing"):
        rs.load_run(path)


def test_writer_refuses_incomplete_attention(tmp_path, rng):
    w = rs.RunWriter(tmp_path / "r", run_id="r", study="t", factors={}, seed=0, init_id="i",
                     data_order_id="d", fields=FIELDS)
    w.write_examples(make_examples([[4, 3], [4, 3]]))
    with pytest.raises(rs.RoutestatsError, match=r"lacks 1 example\(s\)"):
        with w.attention(1, dtype="float32") as sink:
            sink.add(0, random_attention(rng, 1, 1, 2))


def test_writer_refuses_to_overwrite_complete_run(tmp_path, rng):
    path = write_run(tmp_path / "r", [random_attention(rng, 1, 1, 2)], [[4, 3]])
    with pytest.raises(rs.RunFormatError, match="a complete run exists here"):
        rs.RunWriter(path, run_id="r", study="t", factors={}, seed=0, init_id="i", data_order_id="d", fields=FIELDS)


# ------------------------------------------------------------------ pairing
def _pair_runs(tmp_path, rng, **variant_kw):
    fields = [[4, 3, 3], [4, 4, 3]]
    att = [random_attention(rng, 1, 1, 3) for _ in fields]
    b = write_run(tmp_path / "b", att, fields, run_id="b")
    kw = {"run_id": "v", "variant": "saab"} | variant_kw
    vfields = kw.pop("fields_override", fields)
    v = write_run(tmp_path / "v", att, vfields, **kw)
    return rs.load_run(b), rs.load_run(v)


def test_pair_ok(tmp_path, rng):
    b, v = _pair_runs(tmp_path, rng)
    p = rs.pair(b, v)
    assert p.variant.run_id == "v" and p.swapped().baseline.run_id == "v"


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"init_id": "other"}, r"cannot pair b with v: init_id differs \(init vs other\)"),
        ({"data_order_id": "other"}, r"data_order_id differs \(order vs other\)"),
        ({"fields_override": [[4, 3, 3], [4, 3, 3]]}, r"example_id 1 has different content"),
    ],
)
def test_pair_refuses(tmp_path, rng, kw, message):
    b, v = _pair_runs(tmp_path, rng, **kw)
    with pytest.raises(rs.PairingError, match=message):
        rs.pair(b, v)


def test_pair_refuses_other_example_sets(tmp_path, rng):
    b = write_run(tmp_path / "b", [random_attention(rng, 1, 1, 2)] * 2, [[4, 3]] * 2, run_id="b")
    v = write_run(tmp_path / "v", [random_attention(rng, 1, 1, 2)] * 3, [[4, 3]] * 3, run_id="v")
    with pytest.raises(rs.PairingError, match=r"evaluated example counts differ \(2 vs 3\)"):
        rs.pair(rs.load_run(b), rs.load_run(v))


# ------------------------------------------------------------------ trees
def test_load_runs_index_and_pairs(tmp_path):
    synthetic_pair(tmp_path / "seed1", seed=1, n_examples=2)
    synthetic_pair(tmp_path / "deep" / "seed2", seed=2, n_examples=2)
    runs = rs.load_runs(tmp_path)
    assert len(runs) == 4
    assert sorted(runs.index["seed"].tolist()) == [1, 1, 2, 2]
    pairs = runs.pairs()
    assert sorted(p.seed for p in pairs) == [1, 2]
    assert all(p.baseline.factors["variant"] == "baseline" for p in pairs)


def test_load_runs_incomplete(tmp_path):
    synthetic_pair(tmp_path / "a", seed=1, n_examples=2)
    (tmp_path / "a" / "saab" / "run.json").unlink()
    with pytest.raises(rs.IncompleteRunError, match=r"1 incomplete run without run.json"):
        rs.load_runs(tmp_path)
    assert len(rs.load_runs(tmp_path, on_incomplete="skip")) == 1


# ------------------------------------------------------------------ atomic writes
def test_atomic_write_failure_leaves_old_file(tmp_path):
    target = tmp_path / "x.json"
    write_json_atomic(target, {"v": 1})
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("partial")
            raise RuntimeError("boom")
    assert json.loads(target.read_text()) == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]


def test_killed_writer_leaves_no_partial_file(tmp_path):
    """SIGKILL a process mid-way through a large streamed Parquet write."""
    script = textwrap.dedent(
        f"""
        import numpy as np, pyarrow as pa, pyarrow.parquet as pq, sys
        from routestats.rundir.atomic import atomic_path
        with atomic_path({str(tmp_path / 'big.parquet')!r}) as tmp:
            with pq.ParquetWriter(tmp, pa.schema([('x', pa.float64())])) as w:
                print('writing', flush=True)
                for i in range(100000):
                    w.write_table(pa.table({{'x': np.random.rand(10000)}}))
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=os.getcwd())
    assert proc.stdout.readline().strip() == b"writing"
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "big.parquet").exists()
    leftovers = [p.name for p in tmp_path.iterdir()]
    assert all(n.startswith(".big.parquet.") and n.endswith(".tmp") for n in leftovers)


def test_killed_run_reads_as_incomplete(tmp_path, rng):
    w = rs.RunWriter(tmp_path / "r", run_id="r", study="t", factors={}, seed=0, init_id="i",
                     data_order_id="d", fields=FIELDS)
    w.write_examples(make_examples([[4, 3]]))
    # no finalize(): as if the process died before the manifest
    with pytest.raises(rs.IncompleteRunError):
        rs.load_run(tmp_path / "r")


# ------------------------------------------------------------------ boundaries
def test_import_routestats_loads_no_torch_runners_or_jinja():
    # the whole analysis core (every layer below the CLI) loads none of the torch/rendering/CLI stack
    code = ("import sys, routestats, routestats.analysis, routestats.rundir.synthetic, routestats.studies, "
            "routestats.compose.regime.build; print(sorted(m for m in ('torch', 'runners', 'jinja2', 'reports', "
            "'matplotlib', 'seaborn', 'typer', 'rich') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_import_routestats_is_lazy():
    # `import routestats` (and so `routestats --help`) loads neither pandas nor pyarrow until a name is used
    code = ("import sys, routestats; before = [m for m in ('pandas', 'pyarrow', 'numpy') if m in sys.modules]; "
            "routestats.load_run; print(before, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] True"


def test_import_contract():
    lint = shutil.which("lint-imports")
    if lint is None:
        if os.environ.get("ROUTESTATS_REQUIRE_TOOLS"):
            pytest.fail("lint-imports is required here (ROUTESTATS_REQUIRE_TOOLS is set) but not installed")
        pytest.skip("import-linter not installed")
    res = subprocess.run([lint], capture_output=True, text=True, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert res.returncode == 0, res.stdout + res.stderr
    contracts = open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "pyproject.toml")).read().count(
        "[[tool.importlinter.contracts]]")
    assert contracts >= 7 and f"{contracts} kept, 0 broken" in res.stdout  # the acyclic contract among them


def test_no_dynamic_import_of_the_renderer_or_the_runners():
    """import-linter sees import statements only: the core must not reach reports or runners (or anything)
    through importlib or __import__ either (the Report once reached reports.render that way)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "routestats"
    hits = [f"{p.relative_to(root.parent)}:{i}" for p in sorted(root.rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r"\bimport_module\s*\(|__import__\s*\(", line)]
    # the lazy facade, over its own table of core modules, and the forwarding of moved names (to core modules only)
    assert [h.split(":")[0] for h in hits] == ["routestats/__init__.py", "routestats/moved.py"]
    import routestats
    import routestats.studies.pair_report as shim

    assert "routestats.compose." in (root / "studies" / "pair_report.py").read_text() and shim.__getattr__

    assert all(m.startswith("routestats.") and m != "routestats.cli" for m in routestats._EXPORTS.values())


def test_token_list_length_must_match(tmp_path, rng):
    path = write_run(tmp_path / "r", [random_attention(rng, 1, 1, 3)], [[4, 3, 3]])
    t = pq.read_table(path / S.EXAMPLES).to_pandas()
    t.at[0, "tokens"] = np.array(["a", "b"], dtype=object)
    pq.write_table(pa.Table.from_pandas(t, schema=S.EXAMPLES_SCHEMA, preserve_index=False), path / S.EXAMPLES)
    reseal(path)
    with pytest.raises(rs.RunFormatError, match=r"column 'tokens' of example_id 0 has 2 entries, expected length = 3"):
        rs.load_run(path).examples()


RELEASE = """
import numpy as np
from routestats.rundir.memory import release_unused_memory

def rss():
    return int(dict(l.split(":", 1) for l in open("/proc/self/status"))["VmRSS"].split()[0]) // 1024

arrays = [np.ones(8_000) for _ in range(4_000)]   # 4,000 x 64 KB on the C heap (below the mmap threshold)
del arrays[::2]                                   # every other one freed: holes the heap cannot shrink past
held = rss()
release_unused_memory()
print(held - rss())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status; malloc_trim is glibc's")
def test_release_unused_memory_returns_freed_heap_pages():
    # expected: about half of the 256 MB allocated (the freed 2,000 arrays) leaves the resident set;
    # without the trim glibc keeps every page of a heap with live arrays above its holes
    import ctypes.util

    if not ctypes.util.find_library("c"):
        pytest.skip("no C library to trim")
    dropped = int(subprocess.run([sys.executable, "-c", RELEASE], capture_output=True, text=True, check=True).stdout)
    assert dropped >= 100, dropped


HEAP_REUSE = """
import sys
import numpy as np
from routestats.cli import tune_process_memory
from routestats.rundir.memory import release_unused_memory

def rss():
    return int(dict(l.split(":", 1) for l in open("/proc/self/status"))["VmRSS"].split()[0]) // 1024

tuned = tune_process_memory()["heap_reuse"] if sys.argv[1] == "tuned" else False
a = np.ones(2**23)          # 64 MB, above glibc's largest automatic mmap threshold (32 MB)
before = rss()
del a                       # untuned: unmapped at once; tuned: kept on the heap for the next array
kept = rss()
b = np.ones(2**23)          # tuned: the same pages again, no new faults
del b
release_unused_memory()     # the trim after a metric pass still hands them back
print(tuned, before - kept, before - rss())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status; mallopt is glibc's")
def test_tuned_process_keeps_freed_large_arrays_until_the_trim():
    # expected (glibc's mallopt(3)): with M_MMAP_THRESHOLD and M_TRIM_THRESHOLD at 256 MB a freed 64 MB
    # array stays resident for reuse, and malloc_trim returns it; by default free() unmaps it at once
    import ctypes.util

    if not ctypes.util.find_library("c"):
        pytest.skip("no C library")
    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")}
    run = lambda how: subprocess.run([sys.executable, "-c", HEAP_REUSE, how], env=env, capture_output=True,  # noqa: E731
                                     text=True, check=True).stdout.split()
    tuned, dropped_on_free, dropped_after_trim = run("tuned")
    assert tuned == "True" and int(dropped_on_free) < 8 and int(dropped_after_trim) >= 56, (dropped_on_free, dropped_after_trim)
    _, dropped_on_free, _ = run("default")
    assert int(dropped_on_free) >= 56, dropped_on_free


def test_add_reduced_checks_what_it_stores(tmp_path):
    """Reductions computed elsewhere (a GPU capture) pass the reader's checks before they are stored."""
    from routestats.errors import RoutestatsError
    from routestats.rundir.read import load_run
    from routestats.rundir.write import RunWriter

    w = RunWriter(tmp_path / "r", run_id="r", study="t", factors={"variant": "baseline"}, seed=0, init_id="i",
                  data_order_id="d", fields=FIELDS)
    w.write_examples(make_examples([[4, 4, 3]]))
    ok = {"row_mass": np.ones((1, 1, 3)), "entropy": np.zeros((1, 1, 3)), "entropy_rownorm": np.zeros((1, 1, 3)),
          "first_mass": np.zeros((1, 1, 3)), "field_mass": np.full((1, 1, 3, 2), 0.5)}
    for bad, says in ((dict(ok, field_mass=np.full((1, 1, 3, 2), 0.9)), "summed field_mass"),
                      (dict(ok, row_mass=np.full((1, 1, 3), 1.01)), "row_mass of a softmax row"),
                      (dict(ok, entropy=np.full((1, 1, 3), 5.0)), "entropy"),
                      (dict(ok, field_mass=np.full((1, 1, 4, 2), 0.5)), "expected (layers, heads, 3, 2)")):
        with pytest.raises(RoutestatsError, match=re.escape(says)):
            with w.attention(1, dtype="float32", forms=("reductions",)) as sink:
                sink.add_reduced(0, bad)
    with w.attention(1, dtype="float32", forms=("reductions",)) as sink:
        sink.add_reduced(0, ok)
    run = load_run(w.finalize())
    blk = next(run.iter_reductions())
    assert blk.field_mass.shape == (1, 3, 2) and float(blk.field_mass.sum()) == 3.0
    with pytest.raises(RoutestatsError, match="reductions only"):
        with w.attention(2, dtype="float32", forms=("matrices",)) as sink:
            sink.add_reduced(0, ok)


def test_heads_with_attention_sinks_store_rows_below_one_and_their_sink_mass_is_reported(tmp_path, rng):
    """A ``sink`` head's row sums to 1 - the mass its learned sinks take (GPT-OSS): stored as it is, in both
    forms, refused above 1; mass_split reports 1 - row mass as sink_mass and renormalises SFM over the named keys."""
    import routestats as rs
    from routestats.errors import RoutestatsError
    from routestats.metrics.routing import mass_split
    from tests.conftest import random_attention, write_run

    fields = [[4, 4, 3, 3], [4, 3, 3, 3, 3]]  # every position named: U = 0
    att = [random_attention(rng, 1, 2, len(f)) * np.array([0.8, 0.6])[None, :, None, None] for f in fields]
    for forms in (("matrices",), ("reductions",)):
        path = write_run(tmp_path / forms[0], att, fields, head_types=["sink", "sink"], forms=forms)
        m = mass_split(rs.load_run(path))
        # by hand: every query's row sums to 0.8 (head 0) or 0.6 (head 1), so the sinks take 0.3 on average
        assert m["sink_mass"].iloc[0] == pytest.approx(0.3, abs=1e-6)
        s = m.iloc[0]
        assert s["sfm"] + s["cross_mass"] + s["unnamed_mass"] + s["sink_mass"] == pytest.approx(1.0, abs=1e-6)
        # named-key SFM: each query's same-field mass over its named mass (the row sum here), averaged as SFM is
        want = []
        for a, f in zip(att, fields):
            g = np.asarray(f)
            same = (g[:, None] == g[None, :])
            want.append(np.mean([(a[0, h] * same).sum(-1) / a[0, h].sum(-1) for h in range(2)]))
        assert s["sfm_named"] == pytest.approx(np.mean(want), abs=1e-6)
    with pytest.raises(RoutestatsError, match="sum to at most 1"):
        # rows summing to 1.05 (every weight still below 1): more than a sink head's row can hold
        write_run(tmp_path / "over", [random_attention(rng, 1, 2, len(f)) * 1.05 for f in fields], fields,
                  head_types=["sink", "sink"])


def test_a_subset_stored_before_layer_numbers_were_kept_is_said_to_be_renumbered():
    # such runs recorded the stored count as model.layers and numbered rows 0..k-1: layers_stored [1] with
    # model.layers 1 cannot be the model's numbering, and the methods must not claim it is
    from routestats.compose.pair.methods import capture_sentences
    from routestats.rundir.read import stored_layers

    base = {"class": None, "family": None, "model_type": None, "path": None, "inputs": [], "special_tokens": None,
            "truncation": None, "cap": None, "examples_truncated": None, "quantisation": None, "dtype": None}
    old = capture_sentences({**base, **stored_layers(1, [1])}, None, 4)
    new = capture_sentences({**base, **stored_layers(2, [1])}, None, 4)
    assert "number them 0 to 0" in old and "own layer numbers" not in old
    assert "Only layers 1 of its 2 were stored" in new


def test_one_example_is_read_from_its_own_row_groups(tmp_path, rng):
    # the word map reads one example's matrices: only the row groups whose example_id statistics hold it are
    # decoded (a 2 x 2,336 pair: 11 s of the report was decoding 1.2 GB for one example), with the same block
    import pyarrow.parquet as pq

    from routestats.rundir.blocks import groups_holding
    from tests.conftest import random_attention, write_run

    fields = [[3] * 4 + [4] * 4] * 9
    run = rs.load_run(write_run(tmp_path / "r", [random_attention(rng, 2, 2, 8) for _ in fields], fields))
    pf = pq.ParquetFile(run.attention_path(10, "matrices"))
    assert pf.num_row_groups == 5  # groups of 2 examples (group_size=2), 9 examples
    assert groups_holding(pf, [4]) == [2] and groups_holding(pf, [1, 8]) == [0, 4]
    full = {b.example_id: b for b in run.iter_attention(10)}
    (one,) = run.iter_attention(10, examples=[4])
    assert one.example_id == 4 and np.array_equal(one.weights, full[4].weights)


def test_one_example_of_a_large_file_verifies_only_the_pieces_it_reads(tmp_path, rng, monkeypatch):
    # a file larger than VERIFY_PART_BYTES lists the SHA-256 of each piece (run.json "parts"); reading a few
    # examples hashes the pieces read (the word map of a 2 x 2,336 pair hashed 1 GB of matrices for one example)
    import hashlib

    from routestats.errors import IntegrityError

    monkeypatch.setattr(S, "VERIFY_PART_BYTES", 4096)  # pieces small enough that a tiny run has many
    # 4 KB of float32 weights per example, 300 KB in all: well beyond the 64 KB that Arrow reads for the footer
    fields = [[3] * 8 + [4] * 8] * 72
    path = write_run(tmp_path / "r", [random_attention(rng, 2, 2, 16) for _ in fields], fields)
    rel = S.attention_file(10, "matrices")
    entry = next(e for e in json.loads((path / "run.json").read_text())["files"] if e["path"] == rel)
    data = (path / rel).read_bytes()
    # the digests are those of consecutive 4096-byte pieces (hashlib over the raw bytes; none of our code)
    assert entry["parts"]["bytes"] == 4096
    assert entry["parts"]["sha256"] == [hashlib.sha256(data[i:i + 4096]).hexdigest() for i in range(0, len(data), 4096)]
    full = {b.example_id: b.weights for b in rs.load_run(path).iter_attention(10)}
    run = rs.load_run(path)
    (one,) = run.iter_attention(10, examples=[7])
    assert np.array_equal(one.weights, full[7])
    read = run.partly_verified()[rel]
    assert rel not in run.verified_files() and 0 < len(read["pieces"]) < read["of"] == len(entry["parts"]["sha256"])
    # a byte changed in a piece the read did not touch: the one example still reads, and a whole read refuses
    untouched = next(i for i in range(read["of"]) if i not in read["pieces"])
    broken = bytearray(data)
    broken[untouched * 4096] ^= 0xFF
    (path / rel).write_bytes(bytes(broken))
    (again,) = rs.load_run(path).iter_attention(10, examples=[7])
    assert np.array_equal(again.weights, full[7])
    with pytest.raises(IntegrityError, match="differs from run.json"):
        list(rs.load_run(path).iter_attention(10))
    # a byte changed in a piece the read needs: refused, naming the piece
    broken = bytearray(data)
    broken[read["pieces"][0] * 4096 + 1] ^= 0xFF
    (path / rel).write_bytes(bytes(broken))
    with pytest.raises(IntegrityError, match=rf"piece {read['pieces'][0] + 1} of {read['of']}\) differ"):
        list(rs.load_run(path).iter_attention(10, examples=[7]))


@pytest.mark.parametrize("parts, says", [
    ({"bytes": 4096, "sha256": ["0" * 64]}, "lists 1 part digests"),
    ({"bytes": 0, "sha256": []}, "needs 'bytes' and parts"),
    ("x", "needs 'bytes' and parts"),
    ({"bytes": 4096, "sha256": None}, "needs 'bytes' and parts"),
    # one piece as large as the file: a reader would hold it whole in memory to hash it (limit: 64 MiB)
    ({"bytes": 1 << 30, "sha256": ["0" * 64]}, "declares pieces of 1073741824 bytes; at most 67108864"),
])
def test_a_files_entry_with_malformed_parts_is_refused_in_one_line(tmp_path, rng, parts, says):
    fields = [[3, 4]] * 3
    path = write_run(tmp_path / "r", [random_attention(rng, 1, 1, 2) for _ in fields], fields)
    m = json.loads((path / "run.json").read_text())
    m["files"][0] = {**m["files"][0], "bytes": 3 * 4096, "parts": parts}
    (path / "run.json").write_text(json.dumps(m))
    with pytest.raises(rs.RunFormatError, match=re.escape(says)):
        rs.load_run(path)
