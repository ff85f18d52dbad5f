"""Every command block of README.md, then of docs/real-models.md, runs in order: the newcomer's walk.

The bash blocks run as one script in a fresh folder (with ``data`` linked to the bundled data),
exactly as written except for what this test must leave out or shorten, listed in ``SHORTER``:
installs (the test environment has them; the set-up line's venv and pip parts) and training
lengths (``--max-steps`` / ``--steps`` appended so each training takes seconds, not minutes).
Every option, path and the order of the commands are the documents'. After the walk the main job
runs again with ``--force`` (what its own error message suggests): it must replace its report and
leave every other file of the walk byte for byte. The Python block runs as written, against the
bundled demo run and demo study.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
REAL_MODELS = (ROOT / "docs" / "real-models.md").read_text()

# (pattern, replacement) applied to each bash line, in order
SHORTER = [
    (r"^python3 -m venv .*&& (routestats .*)$", r"\1"),  # the set-up line: keep its routestats command
    (r"^pip install .*$", ""),  # installs
    (r"^(python -m runners (?:saab|sweep) .*?)(\s+#.*)?$", r"\1 --max-steps 4\2"),
    (r"^(python -m runners mofa .*?)(\s+#.*)?$", r"\1 --steps 4\2"),
]


def blocks(language: str, text: str = README) -> list[str]:
    """The fenced blocks of one language of a document, in order, without the test-command block."""
    out = []
    for m in re.finditer(r"(<!-- test-command[^\n]*\n)?```" + language + r"\n(.*?)```", text, re.S):
        if not m.group(1):
            out.append(m.group(2))
    return out


def shortened(script: str) -> str:
    lines = script.replace("\\\n", " ").splitlines()
    out = []
    for line in lines:
        line = line.strip()
        for pat, rep in SHORTER:
            line = re.sub(pat, rep, line)
        out.append(line)
    return "\n".join(out)


def test_the_readme_has_the_blocks_this_test_runs():
    bash = blocks("bash")
    assert len(bash) >= 6 and len(blocks("python")) == 1
    assert "routestats report data/demo_run -o report" in bash[0]
    # the test command itself is not among them (CI runs it)
    assert not any("python -m pytest" in b for b in bash)
    assert "--max-steps 4" in shortened("python -m runners saab --preset tiny --out r  # c")


def _files(root: Path) -> dict:
    """Relative path -> bytes of every file under ``root``, links (``data``) not followed."""
    out = {}
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = [d for d in dirnames if not (Path(dirpath) / d).is_symlink()]
        for n in names:
            p = Path(dirpath) / n
            if not p.is_symlink():
                out[str(p.relative_to(root))] = p.read_bytes()
    return out


@pytest.fixture(scope="module")
def walk(tmp_path_factory):
    """Run every bash block of README.md, then of docs/real-models.md, in order; then the main job again
    with --force. Return the folder and the files outside report/ before that re-run."""
    here = tmp_path_factory.mktemp("readme")
    (here / "data").symlink_to(ROOT / "data")
    script = "set -euo pipefail\n" + "\n".join(shortened(b) for b in blocks("bash") + blocks("bash", REAL_MODELS))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "100",
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    res = subprocess.run(["bash", "-c", script], cwd=here, capture_output=True, text=True, env=env, timeout=2400)
    assert res.returncode == 0, f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    before = {k: v for k, v in _files(here).items() if not k.startswith("report/")}
    main = shortened(blocks("bash")[0]).strip()
    assert main == "routestats report data/demo_run -o report"
    again = subprocess.run(["bash", "-c", main + " --force"], cwd=here, capture_output=True, text=True, env=env,
                           timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    return here, before


@pytest.mark.slow  # the whole walk: about 15 minutes on 2 cores (the quick subset leaves it out)
def test_every_readme_bash_block_runs_in_order(walk):
    walk, before = walk
    for path in ("report/report.html", "report-seed1001/report.html", "report-seed1001-decomposed/report.html",
                 "report-study/report.html", "report-test/report.html", "report-mofa/report.html",
                 "report-regime/report.html", "runs/study/seed42/saab-bias-off/run.json",
                 "report-minilm/report.html", "report-smollm2/report.html"):
        assert (walk / path).is_file(), path
    # after the bias-off step the folder is still a pair (every pair section, the explorer) plus the split
    html = (walk / "report-seed1001-decomposed/report.html").read_text()
    assert "Study of" not in html and 'id="attention-explorer"' in html
    assert (walk / "report-seed1001-decomposed/tables/decomposition.csv").is_file()
    assert (walk / "report-seed1001-decomposed/tables/effects.csv").is_file()
    # the untouched-test confirmation reports the pair: its effects table over the 256 test examples, its scope
    # said on the first screen (the bias-off run beside the pair is not evaluated unless asked)
    import pandas as pd

    eff = pd.read_csv(walk / "report-test/tables/effects.csv")
    assert eff["n"].unique().tolist() == [256] and len(eff) == 4
    html = (walk / "report-test/report.html").read_text()
    assert "Study of" not in html and "on an untouched test sample of 256, drawn before any model output was seen" in html
    assert sorted(p.name for p in (walk / "runs/seed1001-test").iterdir()) == ["baseline", "saab", "test_manifest.json"]
    # after the regime step (operators inside runs/seed1001/saab) the folder is still the pair: its effects table
    # (was: "regime switching across models", and "unknown table 'effects'")
    assert (walk / "runs/seed1001/saab/operators/index.json").is_file()
    from typer.testing import CliRunner

    from routestats.cli import app

    res = CliRunner().invoke(app, ["table", "effects", str(walk / "runs/seed1001"), "--format", "csv",
                                   "--resamples", "200", "--permutations", "200"])
    assert res.exit_code == 0, res.output
    assert pd.read_csv(io.StringIO(res.stdout))["layer"].tolist() == [0, 1, 2, 3]


@pytest.mark.slow  # the whole walk: about 15 minutes on 2 cores (the quick subset leaves it out)
def test_the_main_job_rerun_with_force_loses_no_file(walk):
    walk, before = walk
    after = {k: v for k, v in _files(walk).items() if not k.startswith("report/")}
    assert after == before  # every report, run and table of the walk, byte for byte
    assert (walk / "report" / "report.html").is_file()


def test_the_readme_python_block_runs_on_bundled_data_alone(tmp_path):
    # a fresh folder holding only the bundled data: the block needs nothing the user has not got
    (tmp_path / "data").symlink_to(ROOT / "data")
    code = blocks("python")[0]
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "report-demo/report.html").is_file()
