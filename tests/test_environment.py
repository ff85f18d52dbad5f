"""The test environment is reproducible (issue [green-ci]): the README's test command installs from
``.ci/constraints.txt``, which pins every package the extras name, and the sweep table of docs/real-models.md
is the sweep's own output for the pinned transformers (its heading names the version, its counts are its rows)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pins() -> dict[str, str]:
    out = {}
    for line in (ROOT / ".ci" / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            out[re.sub(r"[-_.]+", "-", name).lower()] = version
    return out


def test_the_readme_test_command_installs_the_tested_versions():
    text = (ROOT / "README.md").read_text()
    cmd = text.split("<!-- test-command", 1)[1].split("```bash\n", 1)[1].split("\n", 1)[0]
    assert 'pip install -e ".[train,capture,dev]" -c .ci/constraints.txt' in cmd
    # every dependency the package and its test extras name is pinned to one tested version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    named = project["dependencies"] + [d for k in ("train", "capture", "dev") for d in project["optional-dependencies"][k]]
    names = {re.sub(r"[-_.]+", "-", re.split(r"[<>=!~\[ ]", d, 1)[0]).lower() for d in named}
    pinned = pins()
    assert not names - set(pinned), names - set(pinned)
    assert all(re.fullmatch(r"\d+(\.\w+)*", v) for v in pinned.values()), pinned  # exact versions, no ranges
    assert pinned["torch"].startswith("2.13.")  # the CPU build pyproject pins


def test_the_sweep_table_names_the_pinned_transformers_and_counts_its_rows():
    doc = (ROOT / "docs" / "real-models.md").read_text()
    section = doc[doc.index("\n## Sweep of model types"):]
    version = re.search(r"## Sweep of model types \(transformers ([^,]+), tiny configs\)", section).group(1)
    assert version == pins()["transformers"]
    rows = [r for r in section.splitlines() if r.startswith("| `")]
    stated = re.search(r"\*\*(\d+) types captured\*\* \((\d+) of them chunked, (\d+) observed.*?\), "
                       r"\*\*(\d+) refused\*\*.*?; (\d+) certified for regime", section)
    captured, chunked, observed, refused, certified = map(int, stated.groups())
    assert observed == sum("observed)" in r for r in rows)
    assert captured == sum("| captured" in r for r in rows)
    assert refused == sum("| refused |" in r for r in rows)
    assert chunked == sum("| chunked:" in r for r in rows)
    assert certified == sum(r.rstrip(" |").split(" | ")[-1].startswith("certified") for r in rows)
    assert len(rows) == captured + refused
