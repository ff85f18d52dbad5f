import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from routestats.rundir.write import RunWriter

FIELDS = {"named": {"3": "content", "4": "title"}, "mask_id": 5, "vocab_size": 6}


def make_examples(field_lists, cap=256):
    rows = []
    for i, g in enumerate(field_lists):
        rows.append(
            {
                "example_id": i,
                "split": "val",
                "source_index": i,
                "prepared_length": len(g),
                "cap": cap,
                "field_ids": list(g),
                "tokens": [f"tok{i}_{k}" for k in range(len(g))],
                "is_primary": True,
            }
        )
    return pd.DataFrame(rows)


def write_run(path, attention_by_example, field_lists, *, run_id="r", variant="baseline", init_id="init",
              data_order_id="order", dtype="float32", forms=("matrices",), step=10, seed=0, head_types=None,
              fields=FIELDS, factors=None, flags=None):
    """Write a run whose attention[example] has shape (layers, heads, n, n); ``flags`` (column ->
    per-example values) overrides example columns such as ``is_primary``."""
    w = RunWriter(path, run_id=run_id, study="test", factors=factors or {"variant": variant}, seed=seed,
                  init_id=init_id, data_order_id=data_order_id, fields=fields, overwrite=True)
    ex = make_examples(field_lists)
    for col, values in (flags or {}).items():
        ex[col] = list(values)
    w.write_examples(ex)
    with w.attention(step, dtype=dtype, forms=forms, group_size=2) as sink:
        for ex, a in enumerate(attention_by_example):
            sink.add(ex, a, head_types=head_types)
    return w.finalize()


def runners_cli(args, capsys) -> tuple[int, str, str]:
    """``python -m runners ARGS`` in-process through ``runners.__main__.main``: (its real exit code, stdout, stderr);
    what the test printed before is not the CLI's."""
    import sys

    from runners.__main__ import main

    capsys.readouterr()
    old, sys.argv = sys.argv, ["runners", *map(str, args)]
    try:
        with pytest.raises(SystemExit) as exc:
            main()
            raise SystemExit(0)
    finally:
        sys.argv = old
    out = capsys.readouterr()
    return exc.value.code or 0, out.out, out.err


def random_attention(rng, n_layers, n_heads, n):
    x = rng.standard_normal((n_layers, n_heads, n, n))
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(autouse=True)
def no_disk_cache(monkeypatch):
    """Tests compute metrics afresh unless a test opts into the on-disk cache."""
    monkeypatch.setenv("ROUTESTATS_CACHE", "off")


STUDY_FIELDS = [[4, 4, 3, 3, 3], [4, 3, 3, 3], [4, 4, 4, 3, 3, 3], [4, 3, 3, 3, 3, 3]]
STUDY_CONDITIONS = {
    "baseline": {"variant": "baseline", "w_f": 0.0, "bias_layers": "none", "shuffled": False},
    "saab": {"variant": "saab", "w_f": 1.0, "bias_layers": "all", "shuffled": False},
    "wf0": {"variant": "saab", "w_f": 0.0, "bias_layers": "all", "shuffled": False},
    "wf2": {"variant": "saab", "w_f": 2.0, "bias_layers": "all", "shuffled": False},
    "lastonly": {"variant": "saab", "w_f": 1.0, "bias_layers": "0,0,1", "shuffled": False},
    "shuffled": {"variant": "saab_shuffled", "w_f": 1.0, "bias_layers": "all", "shuffled": True},
}


def synthetic_study_tree(root, seeds=(1, 2, 3)):
    """A tree of seeds x STUDY_CONDITIONS runs with random attention (w_f = 0 copies the baseline)."""
    import routestats as rs

    for seed in seeds:
        rng = np.random.default_rng(seed)
        base = [random_attention(rng, 3, 2, len(g)) for g in STUDY_FIELDS]
        for name, f in STUDY_CONDITIONS.items():
            att = base if name in ("baseline", "wf0") else [random_attention(rng, 3, 2, len(g)) for g in STUDY_FIELDS]
            write_run(root / f"seed{seed}" / name, att, STUDY_FIELDS, run_id=f"s{seed}-{name}", seed=seed,
                      init_id=f"init{seed}", data_order_id=f"order{seed}",
                      factors={**f, "depth": 3, "dataset": "toy"})
    return rs.load_runs(root)


MOFA_RATIOS = [("2:0", 0), ("1:1", 1), ("0:2", 2)]
MOFA_DOMAINS = ("code", "prose", "docstrings")


def synthetic_mofa_tree(root, seeds=(1, 2, 3), n_layers=2, n_heads=2, n=6):
    """A MoFA tree (ratios x seeds) with lm_scores per domain block and causal softmax/sigmoid attention."""
    import routestats as rs

    for seed in seeds:
        for ratio, k in MOFA_RATIOS:
            rng = np.random.default_rng(100 * seed + k)
            w = RunWriter(root / f"seed{seed}" / f"ratio-{ratio.replace(':', '-')}", run_id=f"m{seed}-{k}",
                          study="mofa", factors={"ratio": ratio, "n_sigmoid": k}, seed=seed, init_id=f"i{seed}",
                          data_order_id=f"d{seed}", fields=FIELDS, overwrite=True)
            ex = make_examples([[3] * n] * (2 * len(MOFA_DOMAINS)))
            ex["split"] = [d for d in MOFA_DOMAINS for _ in range(2)]
            w.write_examples(ex)
            scores = [{"domain": d, "example_id": i, "sum_nll": float(rng.uniform(10, 20) + 2 * k * (d == "code")),
                       "n_tokens": 5} for i, d in enumerate(ex["split"])]
            w.write_lm_scores(pd.DataFrame(scores))
            types = ["softmax"] * (n_heads - min(k, n_heads)) + ["sigmoid"] * min(k, n_heads)
            tril = np.tril(np.ones((n, n)))
            with w.attention(10, forms=("matrices",)) as sink:
                for e in range(len(ex)):
                    a = np.empty((n_layers, n_heads, n, n))
                    for h, t in enumerate(types):
                        x = rng.standard_normal((n_layers, n, n))
                        if t == "softmax":
                            z = np.exp(np.where(tril > 0, x, -np.inf))
                            a[:, h] = z / z.sum(-1, keepdims=True)
                        else:
                            a[:, h] = tril / (1 + np.exp(-x))
                    sink.add(e, a, head_types=types)
            w.finalize()
    return rs.load_runs(root)


# ------------------------------------------------------------------ real tools (Chromium, pdflatex)
def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("ROUTESTATS_REQUIRE_TOOLS"):
            pytest.fail(f"{tool} is required here (ROUTESTATS_REQUIRE_TOOLS is set) but not installed")
        pytest.skip(f"{tool} is not installed on this machine (CI installs it in .ci/run)")
    return path


def compile_tex(pdflatex: str, folder: Path, name: str) -> None:
    res = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error", name], cwd=folder,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-3000:]
    assert (folder / name.replace(".tex", ".pdf")).is_file()


def chromium_console(chromium: str, html: Path, shot: Path) -> str:
    """Screenshot ``html`` headless; return Chromium's log (console messages included)."""
    with tempfile.TemporaryDirectory() as profile:
        res = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--hide-scrollbars", "--window-size=1200,900", "--enable-logging=stderr",
             "--v=0", f"--screenshot={shot}", html.resolve().as_uri()],
            capture_output=True, text=True, timeout=120)
    return res.stderr


def chromium_dom(chromium: str, html: Path, width: int = 1200) -> tuple[str, str]:
    """(DOM after the page's scripts ran, Chromium's log) of ``html``, headless, in a window ``width`` px wide."""
    with tempfile.TemporaryDirectory() as profile:
        res = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000",
             f"--window-size={width},800", "--dump-dom", html.resolve().as_uri()],
            capture_output=True, text=True, timeout=120)
    return res.stdout, res.stderr


_WIDTH_PROBE = """<script>window.addEventListener('load', function () {
  var p = document.createElement('pre'); p.id = 'WIDTH-PROBE';
  p.textContent = document.documentElement.scrollWidth + ' ' + document.documentElement.clientWidth;
  document.body.appendChild(p); });</script>"""


def page_widths(chromium: str, html: Path, width: int = 1280) -> tuple[int, int]:
    """(the page's scroll width, its viewport width) in px, in a ``width`` px window: a page that scrolls sideways
    has the first larger. Measured on a copy of ``html`` with a probe script added."""
    probe = html.with_name(".width-probe.html")
    probe.write_text(html.read_text().replace("</body>", _WIDTH_PROBE + "</body>"))
    try:
        dom, log = chromium_dom(chromium, probe, width)
    finally:
        probe.unlink()
    m = re.search(r'<pre id="WIDTH-PROBE">(\d+) (\d+)</pre>', dom)
    assert m, log[-2000:]
    return int(m.group(1)), int(m.group(2))


def console_errors(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if "CONSOLE" in ln and re.search(r"Uncaught|Error", ln)]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """3 seeds x STUDY_CONDITIONS (18 runs) with random attention."""
    return synthetic_study_tree(tmp_path_factory.mktemp("tree"))


def reseal(run_path):
    """Rewrite run.json's file hashes after a test edited files on purpose (so a later check, not the
    SHA-256 verification, is what the test exercises)."""
    import json

    from routestats.rundir.write import file_entry

    run_path = Path(run_path)
    m = json.loads((run_path / "run.json").read_text())
    m["files"] = [file_entry(run_path, e["path"]) for e in m["files"]]  # SHA-256, size and pieces, as written
    (run_path / "run.json").write_text(json.dumps(m))
    return run_path


def set_tokens(run_path, tokens):
    """Replace every example's tokens of a run by ``tokens`` repeated (hostile-token tests), keeping the
    content hashes consistent and the manifest resealed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from routestats.rundir import schema as S

    path = Path(run_path) / "examples.parquet"
    t = pq.read_table(path)
    df = t.to_pandas()
    df["tokens"] = [[tokens[i % len(tokens)] for i in range(len(tok))] for tok in df["tokens"]]
    df["content_sha256"] = [S.content_hash(tk, g) for tk, g in zip(df["tokens"], df["field_ids"])]
    pq.write_table(pa.Table.from_pandas(df, schema=t.schema, preserve_index=False), path)
    return reseal(run_path)


@pytest.fixture(autouse=True)
def _fresh_paired_results():
    """Each test computes its paired results itself: none kept by an earlier test (routestats.stats.inference keeps
    the newest by content), so that a test of how results are computed cannot pass on another's kept result."""
    from routestats.stats import inference

    inference._RESULTS.clear()
    yield
