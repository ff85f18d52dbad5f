"""Adversarial cases on the surfaces added since the first hardening pass (issue 31): tree walks
through links, values outside the contract, files swapped between passes, caches edited on disk,
hostile tokens in the explorer, decode bombs, out-of-range options and hostile JSON.

Each case states the failure it reproduces; every refusal must be one ``error:`` line with exit
code 2 (never a traceback), and nothing wrong may be served or printed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import routestats as rs
from routestats.cli import app
from routestats.rundir.synthetic import synthetic_pair
from tests.conftest import (FIELDS, chromium_dom, console_errors, make_examples, need, random_attention, reseal,
                            set_tokens)

runner = CliRunner()
FAST = ["--resamples", "50", "--permutations", "50"]
MATRICES = "attention/step=000100/matrices.parquet"
REDUCTIONS = "attention/step=000100/reductions.parquet"


@pytest.fixture
def pair(tmp_path):
    d = tmp_path / "pair"
    synthetic_pair(d, seed=5, n_examples=6, n_layers=2, n_heads=2, same_field_bias=(0.5, 1.0), effect=(0.3, -0.2),
                   forms=("matrices", "reductions"), length_range=(5, 9))
    return d


def one_line_error(res, *needles):
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2, res.output
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert "Traceback" not in res.output and "internal error" not in res.output
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def validate_refuses(path, *needles):
    """``routestats validate``: an ``ok`` line per sound run, then one ``error:`` line, exit 2."""
    res = runner.invoke(app, ["validate", str(path)])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert lines[-1].startswith("error: ") and all(ln.startswith(("ok ", "    ")) for ln in lines[:-1]), res.output
    for n in needles:
        assert n in lines[-1], lines[-1]


def edit_list_value(path, column, row, index, value, **set_columns):
    """Set element ``index`` of list column ``column`` in row ``row`` (and plain columns) of a Parquet file."""
    t = pq.read_table(path)
    df = t.to_pandas()
    arr = np.array(df.at[row, column], dtype=np.float64)
    arr[index] = value
    df.at[row, column] = arr
    for k, v in set_columns.items():
        df.at[row, k] = v
    pq.write_table(pa.Table.from_pandas(df, schema=t.schema, preserve_index=False), path)


# ------------------------------------------------------------------ tree walks
def test_report_on_a_tree_with_a_link_loop_and_a_link_to_root_finishes(pair, tmp_path, monkeypatch):
    # was: the cache key walked every file under the inputs following links -- forever (a loop) or over the
    # whole disk (a link to /), with memory growing, even with ROUTESTATS_CACHE=off
    from reports import cache

    monkeypatch.setenv("ROUTESTATS_CACHE", str(tmp_path / "cache"))
    os.symlink(pair, pair / "loop")
    os.symlink("/", pair / "root")
    t0 = time.monotonic()
    with pytest.raises(cache.CacheSkipped, match=r"not followed \(root -> /\)"):
        cache.report_key([pair], {}, ("html",), ())
    assert time.monotonic() - t0 < 1  # links are not followed: the walk is the run's own few files
    res = runner.invoke(app, ["report", str(pair), "-o", str(tmp_path / "out"), "--format", "html", *FAST])
    assert res.exit_code == 0, res.output
    notes = [ln for ln in res.output.splitlines() if ln.startswith("note:")]
    assert len(notes) == 1 and "links to folders outside it are not followed (root -> /)" in notes[0]
    assert "does not use the cache" in notes[0]
    # a loop alone (a link back inside the input) is listed as one entry, and cached as usual
    os.unlink(pair / "root")
    rows = cache._listing(pair, time.monotonic() + 2)
    assert ["loop", "link", str(pair.resolve())] in rows
    assert not any(r[0].startswith("loop/") for r in rows)
    assert runner.invoke(app, ["report", str(pair), "-o", str(tmp_path / "o2"), "--format", "html", *FAST]).exit_code == 0
    assert list((tmp_path / "cache" / "reports").iterdir())


def test_no_cache_means_no_listing(pair, tmp_path, monkeypatch):
    from reports import cache

    monkeypatch.setenv("ROUTESTATS_CACHE", "off")

    def boom(*a, **k):
        raise AssertionError("the inputs were listed although nothing is cached")

    monkeypatch.setattr(cache, "_listing", boom)
    res = runner.invoke(app, ["report", str(pair), "-o", str(tmp_path / "out"), "--format", "html", *FAST])
    assert res.exit_code == 0, res.output


# ------------------------------------------------------------------ values outside the contract
def test_a_sigmoid_weight_above_one_is_refused(pair, tmp_path):
    # was: a sigmoid weight of 3e38 passed validate and gave a layer SFM of 2.5e36
    f = pair / "saab" / MATRICES
    edit_list_value(f, "weights", 0, 1, 3e38, head_type="sigmoid")
    reseal(pair / "saab")
    validate_refuses(pair, "attention weights lie in [0, 1]")
    # with the matrices the only form, the analysis reads them too, and refuses
    d = tmp_path / "m"
    synthetic_pair(d, seed=5, n_examples=4, n_layers=2, n_heads=2, same_field_bias=(0.5, 1.0), effect=(0.3, -0.2),
                   length_range=(5, 9))
    edit_list_value(d / "saab" / MATRICES, "weights", 0, 1, 3e38, head_type="sigmoid")
    reseal(d / "saab")
    one_line_error(runner.invoke(app, ["table", "effects", str(d), "--format", "csv", *FAST]), "lie in [0, 1]")


def test_the_writer_refuses_weights_above_one(tmp_path):
    w = rs.RunWriter(tmp_path / "r", run_id="r", study="t", factors={"variant": "baseline"}, seed=0, init_id="i",
                     data_order_id="o", fields=FIELDS)
    w.write_examples(make_examples([[4, 3, 3]]))
    a = np.full((1, 1, 3, 3), 0.5)
    a[0, 0, 1, 2] = 7.0
    with pytest.raises(rs.RoutestatsError, match=r"lie in \[0, 1\]"):
        with w.attention(1, dtype="float32", forms=("matrices",)) as sink:
            sink.add(0, a, head_types=["sigmoid"])


def test_a_first_key_mass_above_the_row_mass_is_refused(pair):
    # was: first_mass was never compared with the row mass (a softmax row printed a first-key mass of 3.09)
    f = pair / "baseline" / REDUCTIONS
    edit_list_value(f, "first_mass", 0, 0, 3.09)
    reseal(pair / "baseline")
    validate_refuses(pair, "first_mass")


def test_all_zero_value_norms_are_undefined_not_zero(tmp_path):
    # was: a pruned head (all transported vectors 0) got norm-weighted SFM 0, and the pair a "significant" drop
    from routestats.metrics.routing import sfm
    from tests.test_flow import FIELD_LISTS, write_with_norms

    rng = np.random.default_rng(4)
    att = [random_attention(rng, 1, 3, len(g)) for g in FIELD_LISTS]
    norms = [rng.uniform(0.5, 2.0, (1, 3, len(g))) for g in FIELD_LISTS]
    for nu in norms:
        nu[0, 1] = 0.0
    run = rs.load_run(write_with_norms(tmp_path / "r", att, FIELD_LISTS, norms))
    got = sfm(run, weighting="norm").set_index("example_id")["sfm"]
    for e, (a, nu, g) in enumerate(zip(att, norms, FIELD_LISTS)):
        a32, nu32, g = a.astype(np.float32).astype(float), nu.astype(np.float32).astype(float), np.array(g)
        per_head = []
        for h in (0, 2):  # by hand, the pruned head 1 left out
            t = a32[0, h] * nu32[0, h][None, :]
            t = t / t.sum(axis=1, keepdims=True)
            per_head.append(np.mean([t[i, g == g[i]].sum() for i in range(len(g))]))
        assert got[e] == pytest.approx(np.mean(per_head), abs=1e-12)


def test_an_example_without_a_named_query_is_left_out_not_zero():
    # was: under max(1, #valid) an example with no named position counted as SFM 0 and diluted the mean
    from routestats.rundir.reductions import REDUCTION_COLUMNS, reduce_queries, summarise_batch

    rng = np.random.default_rng(0)
    A = rng.dirichlet(np.ones(4), size=(2, 1, 4))
    g = np.array([[1, 1, 2, 2], [0, 0, 0, 0]])  # example 1: no position in a named field
    named = np.array([1, 2])
    red = {k: np.stack([reduce_queries(a, gi, named)[k] for a, gi in zip(A, g)]) for k in REDUCTION_COLUMNS}
    out = summarise_batch(red, g, named)
    assert np.isfinite(out["sfm"][0]).all() and np.isnan(out["sfm"][1]).all() and out["n_valid"][1] == 0


# ------------------------------------------------------------------ verified for the whole report
def test_a_file_swapped_after_its_first_read_is_refused(pair, tmp_path):
    # was: a file renamed over after the first pass was read unverified by the later passes
    run = rs.load_run(pair / "saab")
    run.verify(MATRICES)
    other = tmp_path / "other.parquet"
    shutil.copy(pair / "baseline" / MATRICES, other)
    os.replace(other, pair / "saab" / MATRICES)
    with pytest.raises(rs.RunFormatError, match="differs from run.json"):
        run.verify(MATRICES)
    with pytest.raises(rs.RunFormatError, match="differs from run.json"):
        list(run.iter_attention(100))


# ------------------------------------------------------------------ caches edited on disk
def test_a_planted_stamp_does_not_pass_a_tampered_file(pair, tmp_path, monkeypatch):
    import hashlib

    from routestats.rundir.verify import _STAMPS, file_stamp, verified_sha256

    monkeypatch.setenv("ROUTESTATS_CACHE", str(tmp_path / "cache"))
    f = pair / "saab" / MATRICES
    want = json.loads((pair / "saab" / "run.json").read_text())
    want = {e["path"]: e["sha256"] for e in want["files"]}[MATRICES]
    edit_list_value(f, "weights", 0, 0, 0.5)  # tampered, hashes left as they were
    key = file_stamp(f)
    stamp = tmp_path / "cache" / "stamps" / hashlib.sha256(repr(key).encode()).hexdigest()
    stamp.parent.mkdir(parents=True)
    stamp.write_text(want)  # the manifest's digest, planted (the old unsealed format)
    _STAMPS.clear()
    assert verified_sha256(f) != want  # hashed afresh: the plant is ignored
    stamp.write_text(f"{want} {'0' * 64}")  # with a forged seal
    _STAMPS.clear()
    assert verified_sha256(f) != want
    with pytest.raises(rs.RunFormatError, match="differs from run.json"):
        rs.load_run(pair / "saab").verify(MATRICES)


def test_an_edited_metric_cache_entry_is_recomputed(pair, tmp_path, monkeypatch):
    from routestats.metrics import passes
    from routestats.metrics.routing import sfm

    monkeypatch.setenv("ROUTESTATS_CACHE", str(tmp_path / "cache"))
    want = sfm(rs.load_run(pair / "saab"))
    entries = [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and p.suffix == ".npz"]
    assert entries, "the pass was not cached"
    for p in entries:  # an entry rewritten with other numbers (a valid npz)
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        arrays["h_sfm"] = np.zeros_like(arrays["h_sfm"])
        np.savez(p, **arrays)
    monkeypatch.setattr(passes, "_cache_save", lambda *a: None)
    got = sfm(rs.load_run(pair / "saab"))  # a fresh Run object: only the disk cache could serve it
    np.testing.assert_array_equal(got["sfm"].to_numpy(), want["sfm"].to_numpy())  # not the zeros planted


def test_an_edited_or_incomplete_report_cache_entry_is_not_served(pair, tmp_path, monkeypatch):
    from reports import cache

    monkeypatch.setenv("ROUTESTATS_CACHE", str(tmp_path / "cache"))
    args = ["report", str(pair), "--format", "html", *FAST]
    assert runner.invoke(app, [*args, "-o", str(tmp_path / "a")]).exit_code == 0
    (entry,) = [p for p in (tmp_path / "cache" / "reports").iterdir() if p.is_dir()]
    html = entry / "report" / "report.html"
    html.write_text(html.read_text().replace("Within one initialisation", "FORGED"))
    assert cache.lookup(entry.name) is None  # edited: recomputed
    res = runner.invoke(app, [*args, "-o", str(tmp_path / "b")])
    assert res.exit_code == 0 and "FORGED" not in (tmp_path / "b" / "report.html").read_text()
    (entry,) = [p for p in (tmp_path / "cache" / "reports").iterdir() if p.is_dir()]
    assert cache.lookup(entry.name) is not None  # the fresh entry is good ...
    next((entry / "report" / "figures").iterdir()).unlink()
    assert cache.lookup(entry.name) is None  # ... until a file goes missing


# ------------------------------------------------------------------ hostile tokens in the explorer
def test_hostile_tokens_cannot_swallow_the_page(tmp_path):
    # was: a token "<!--<script>" in the explorer's JSON put Chromium's tokenizer into the double-escaped
    # script state: the explorer and sorter stopped and everything after the explorer disappeared
    chromium = need("chromium")
    from reports.render import render

    from routestats.rundir.synthetic import demo_run_dir

    d = tmp_path / "pair"
    shutil.copytree(demo_run_dir(), d)  # the bundled demo: its word map selects an example
    hostile = ["<!--<script>", "</script><b>", "&amp;", "\u2028", "x]]>", "<!--"]
    for role in ("baseline", "saab"):
        set_tokens(d / role, hostile)
    rep = rs.analyse(d, resamples=50, permutations=50)
    render(rep, tmp_path / "o", formats=("html",))
    page = (tmp_path / "o" / "report.html").read_text()
    widget = page.split('<script type="application/json" class="explorer-data">')[1].split("</script>")[0]
    assert "<" not in widget and "&" not in widget and "\u2028" not in widget
    dom, log = chromium_dom(chromium, tmp_path / "o" / "report.html")
    assert not console_errors(log), console_errors(log)
    outside = re.sub(r"<script\b.*?</script>", "", dom, flags=re.S)  # what is left is elements, not script text
    assert '<section id="provenance">' in outside and "Full provenance (JSON)" in outside  # the last section
    assert re.search(r'<div[^>]*id="attention-explorer"[^>]*data-bound=', outside) or \
        re.search(r'<div[^>]*data-bound=[^>]*id="attention-explorer"', outside)  # the explorer's script ran


# ------------------------------------------------------------------ decode bombs, options, JSON
def test_a_file_that_would_decode_past_the_budget_is_refused_before_decoding(pair, monkeypatch):
    # stands for the 39 KB run folder whose uniform rows decompress to gigabytes: the metadata says so first
    monkeypatch.setenv("ROUTESTATS_MAX_DECODE_MB", "0.001")
    one_line_error(runner.invoke(app, ["table", "effects", str(pair), "--format", "csv", *FAST]), "decodes to",
                   "ROUTESTATS_MAX_DECODE_MB")


def test_a_decompression_bomb_is_refused_with_the_memory_still_free(tmp_path):
    # was: a run folder of a few KB (uniform rows compress 20,000-fold) drove `table effects` to 1.7-2.8 GB
    import subprocess
    import sys

    from tests.conftest import write_run

    if not os.path.exists("/proc/self/status"):
        pytest.skip("peak memory is read from /proc (Linux)")
    n, layers, heads = 2048, 2, 4  # 2 examples x 2 x 4 heads x 2048^2 float16 = 128 MB decoded per file
    g = [4] * (n // 2) + [3] * (n - n // 2)
    uniform = np.full((layers, heads, n, n), 1.0 / n, dtype=np.float32)
    for role in ("baseline", "saab"):
        write_run(tmp_path / "bomb" / role, [uniform, uniform], [g, g], run_id=role, variant=role, dtype="float16",
                  flags={"cap": [n, n]})
    stored = sum(f.stat().st_size for f in (tmp_path / "bomb").rglob("*") if f.is_file())
    assert stored < 200_000, stored  # a bomb: the whole folder is tens of KB
    # the CLI's own high-water mark (VmHWM: ru_maxrss would carry over the forked test process's)
    probe = ("import re, sys\nfrom routestats.cli import main\ntry:\n    main()\nfinally:\n    print('peak_kb', "
             "re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1), file=sys.stderr)\n")
    res = subprocess.run([sys.executable, "-c", probe, "table", "effects", str(tmp_path / "bomb"), "--format", "csv",
                          *FAST], capture_output=True, text=True, env={**os.environ, "ROUTESTATS_CACHE": "off"})
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error")]
    assert res.returncode == 2 and len(errors) == 1 and "would decompress" in errors[0], res.stderr
    assert "ROUTESTATS_MAX_DECODE_RATIO" in errors[0] and "Traceback" not in res.stderr
    peak_mb = int(res.stderr.split("peak_kb")[1].split()[0]) / 1024
    assert peak_mb < 300, peak_mb  # the bound; decoding it would take 128 MB x ~6


@pytest.mark.parametrize("args, says", [
    (["--seed", "-1"], "seed must be a whole number from 0"),
    (["--resamples", str(10**12)], "resamples must be a whole number from 1 to 10,000,000"),
    (["--permutations", "0"], "permutations must be a whole number from 1"),
])
def test_numeric_options_are_checked_in_one_place(pair, args, says):
    one_line_error(runner.invoke(app, ["table", "effects", str(pair), "--format", "csv", *args]), says)


def test_a_deeply_nested_manifest_is_refused_in_one_line(pair):
    # was: a run.json nested 100,000 deep ended in a one-line "internal error" (a RecursionError)
    text = (pair / "saab" / "run.json").read_text().rstrip()
    assert text.endswith("}")
    (pair / "saab" / "run.json").write_text(text[:-1] + ', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}")
    validate_refuses(pair, "nested")
    one_line_error(runner.invoke(app, ["table", "effects", str(pair), "--format", "csv", *FAST]), "nested")


def test_operator_index_paths_are_confined(tmp_path):
    ops = tmp_path / "run" / "operators"
    ops.mkdir(parents=True)
    secret = tmp_path / "secret.npz"
    np.savez(secret, J_T=np.eye(2))
    for bad in (str(secret), "../../secret.npz"):
        (ops / "index.json").write_text(json.dumps({"points": [{"layer": 0, "example": 0, "token": 0, "file": bad,
                                                                "sha256": "0" * 64}]}))
        one_line_error(runner.invoke(app, ["regime", str(tmp_path / "run")]), "not a normalised relative path")
    (ops / "index.json").write_text('{"points": [1, 2]}')
    one_line_error(runner.invoke(app, ["regime", str(tmp_path / "run")]), "expected")


def test_a_layer_missing_from_one_run_is_named(tmp_path):
    # was: "profiles differ in length ((3,) vs (2,))"
    three = tmp_path / "three"
    two = tmp_path / "two"
    synthetic_pair(three, seed=5, n_examples=6, n_layers=3, n_heads=2, same_field_bias=(0.5, 1.0, 0.8),
                   effect=(0.3, -0.2, 0.1), length_range=(5, 9))
    synthetic_pair(two, seed=5, n_examples=6, n_layers=2, n_heads=2, same_field_bias=(0.5, 1.0), effect=(0.3, -0.2),
                   length_range=(5, 9))
    shutil.rmtree(three / "saab")
    shutil.copytree(two / "saab", three / "saab")  # the same seed: the same init and data order, 2 layers
    line = one_line_error(runner.invoke(app, ["table", "effects", str(three), "--format", "csv", *FAST]),
                          "layer 2 is stored in the baseline only", "baseline: 3 layer(s), 0-2; variant: 2 layer(s), 0-1")
    assert "profiles differ" not in line
    res = runner.invoke(app, ["report", str(three), "-o", str(tmp_path / "o"), *FAST])  # progress lines, then the error
    assert res.exit_code == 2 and res.output.strip().splitlines()[-1] == line and "Traceback" not in res.output
