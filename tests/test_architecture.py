"""docs/architecture.md is true: every module, name and file it cites exists, and the renderer imports only
the core modules its row of the layer table lists (read from the page itself, checked against grimp's
import graph: the graph import-linter builds, independent of the page)."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
PACKAGES = ("routestats", "runners", "reports")


def cited() -> list[str]:
    """Every inline-code span of the page (fenced blocks are prose about code, handled separately)."""
    prose = re.sub(r"```.*?```", "", PAGE, flags=re.S)
    return re.findall(r"`([^`\n]+)`", prose)


def dotted_names() -> list[str]:
    """Spans that name something of ours: ``routestats.x.y``, ``reports.to_latex(report, name)``, ``runners``..."""
    pattern = r"\b((?:routestats|reports|runners)(?:\.[A-Za-z_][A-Za-z_0-9]*\*?)*)"
    return sorted({token for span in cited() for token in re.findall(pattern, span)})


def resolve(name: str) -> bool:
    """Import the longest module prefix of ``name``, then look the rest up as attributes (a trailing ``*`` is
    a prefix: ``routestats.report.fmt_*``)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if attr.endswith("*"):
                return any(a.startswith(attr[:-1]) for a in dir(obj))
            if not hasattr(obj, attr):
                try:  # a submodule not imported by its package
                    obj = importlib.import_module(f"{obj.__name__}.{attr}")
                    continue
                except (ModuleNotFoundError, AttributeError):
                    return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_cited_name_exists():
    names = dotted_names()
    assert len(names) > 25, names  # the page cites dozens; far fewer means the pattern stopped matching
    missing = [n for n in names if not resolve(n)]
    assert not missing, f"docs/architecture.md cites names that do not exist: {missing}"


def short_names() -> list[tuple[str, tuple[str, ...]]]:
    """Short names in the layer table (`schema`, `inference`, `regime.points`), each with the modules its row
    is about: a short name is a module or name under one of them."""
    out = []
    for line in PAGE.splitlines():
        cells = line.strip().strip("|").split("|")
        if not line.startswith("| `") or len(cells) < 3:
            continue
        owners = tuple(re.findall(r"`((?:routestats|runners)(?:\.[a-z_]+)*)", cells[0])) or \
            (("runners",) if "runners/" in cells[0] else ())
        for span in re.findall(r"`([a-z_]+(?:\.[A-Za-z_]+)*)`", cells[1]):
            if owners and not span.startswith(PACKAGES) and not span.endswith(".py"):
                out.append((span, owners))
    return out


def test_every_short_name_in_the_layer_table_exists():
    names = short_names()
    assert len(names) > 30, names
    missing = [n for n, owners in names if not any(resolve(f"{o}.{n}") for o in owners + ("routestats",))]
    assert not missing, f"docs/architecture.md's layer table names modules that do not exist: {missing}"


def test_every_cited_file_exists():
    files = sorted({s for s in cited() if re.fullmatch(r"[\w/.]+\.py", s)})
    assert len(files) >= 8, files
    # a bare file name (`terminal.py`) may live in any package; a path is relative to the root or to routestats/
    missing = [f for f in files if not ((ROOT / f).exists() or (ROOT / "routestats" / f).exists()
                                       or any(p.name == f for pkg in PACKAGES for p in (ROOT / pkg).rglob(f)))]
    assert not missing, f"docs/architecture.md cites files that do not exist: {missing}"


def allowed_for_renderer() -> set[str]:
    """The core modules the page's row for ``reports/`` says the renderer may import (its third cell)."""
    row = next(line for line in PAGE.splitlines() if line.startswith("| `reports/`"))
    may = row.strip("|").split("|")[2]
    return set(re.findall(r"`(routestats(?:\.[a-z_]+)*)`", may.split("never")[0]))


def test_renderer_imports_only_what_the_page_lists():
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("reports", "routestats")
    allowed = allowed_for_renderer()
    assert {"routestats.report", "routestats.rundir.atomic"} <= allowed, allowed  # the row was found and read
    used = {imported for m in graph.find_children("reports") | {"reports"} for imported in graph.find_modules_directly_imported_by(m)
            if imported.split(".")[0] == "routestats"}
    assert used, "grimp saw no import of the core by the renderer: the graph was not built from this tree"
    extra = sorted(u for u in used if u not in allowed and u != "routestats")
    assert not extra, f"reports/ imports core modules that docs/architecture.md does not list for it: {extra}"


def test_the_checks_catch_a_false_page(monkeypatch):
    """Mutation: a renamed module, a missing file and an unlisted import are each caught."""
    assert not resolve("routestats.rundir.no_such_module")
    assert not resolve("routestats.report.no_such_name")
    assert resolve("routestats.report.fmt_*") and not resolve("routestats.report.zz_*")
    shrunk = PAGE.replace("`routestats.rundir.replace` (replacing a folder), ", "")
    assert shrunk != PAGE
    monkeypatch.setattr(sys.modules[__name__], "PAGE", shrunk)
    with pytest.raises(AssertionError, match="routestats.rundir.replace"):
        test_renderer_imports_only_what_the_page_lists()


def test_the_cli_asks_the_renderer_for_a_report_in_one_call():
    """Issue [honest-gates] 4: the CLI ran the renderer's cache itself (check_output, report_key twice, copy_report,
    store: three climbs per report). It now imports no module or function of the cache: reports.publish decides
    whether the cache holds the report (an ast reading of routestats/cli.py)."""
    import ast

    tree = ast.parse((ROOT / "routestats" / "cli.py").read_text())
    imported = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert not {m for m, _ in imported if m in ("reports.cache",)}, imported
    assert not {a for m, a in imported if m == "reports" and a == "cache"}, imported
    assert not {a for m, a in imported if a in ("copy_report", "report_key", "lookup", "store")}, imported
    assert ("reports", "publish") in imported
