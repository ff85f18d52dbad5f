"""Build the bundled real-text corpora from numpydoc docstrings, offline and deterministically.

Source: the docstrings of the installed numpy, scipy, pandas and statsmodels (all BSD-3).
Outputs, in the published formats so the real-data loaders read them unchanged:

* ``docstrings_dbpedia/`` -- DBpedia CSV (``label,title,content``, quoted, no header):
  ``classes.txt``, ``train.csv``, ``val.csv``, ``test.csv``. title = public object name,
  content = summary + extended summary, label = 1-based line of the object's namespace in
  ``classes.txt``.
* ``docstrings_pubmed/`` -- PubMed 200k RCT text: ``train.txt``, ``dev.txt``, ``test.txt``;
  sections SUMMARY / PARAMETERS / RETURNS (read with
  ``fields=("summary", "parameters", "returns")``) plus a NOTES section the loader drops,
  as it drops BACKGROUND in PubMed.
* ``bundled_manifest.json`` -- package versions, record counts and SHA-256 of every file.

Splits: test = records whose SHA-256(title) is 0 mod 10 (stable as the corpus grows);
validation = the first 10 % of ``RandomState(42).permutation`` of the rest, training = the
remainder in permutation order (the reference DBpedia split rule).

Run ``python -m runners.bundled --out data`` to regenerate; ``--check`` rebuilds into a
temporary folder and compares bytes. Output is byte-identical for the same package versions.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import json
import re
import sys
import tempfile
import warnings
from pathlib import Path

from routestats.rundir.atomic import sha256_file, write_bytes_atomic, write_json_atomic

from runners.corpora import split_rows, write_dbpedia_csv, write_pubmed

PACKAGES = ("numpy", "scipy", "pandas", "statsmodels")
NAMESPACES = (
    "numpy", "numpy.linalg", "numpy.fft", "numpy.random", "numpy.polynomial", "numpy.ma",
    "numpy.char", "numpy.lib", "numpy.ndarray",
    "scipy.stats", "scipy.linalg", "scipy.optimize", "scipy.signal", "scipy.special",
    "scipy.integrate", "scipy.interpolate", "scipy.sparse", "scipy.spatial", "scipy.ndimage",
    "scipy.fft", "scipy.cluster.hierarchy", "scipy.io",
    "pandas", "pandas.DataFrame", "pandas.Series", "pandas.Index", "pandas.api.types",
    "statsmodels.api", "statsmodels.stats.api", "statsmodels.tsa.api", "statsmodels.graphics.api",
)
CONTENT_CHARS = 700
SECTION_CHARS = 500
_HEADER = re.compile(r"^([A-Z][A-Za-z ]+)\n-{3,}\s*$", re.M)
_SIGNATURE = re.compile(r"^[\w.]+\(.*\)(\s*->.*)?$")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`(])")


def _resolve(path: str):
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(path)


def _clean(text: str) -> str:
    lines = [ln for ln in text.splitlines() if not ln.strip().startswith((".. ", ">>>", "..."))]
    return re.sub(r"\s+", " ", " ".join(lines)).strip()


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[:limit]
    stop = max(cut.rfind(". "), cut.rfind("? "), cut.rfind("! "))
    return cut[: stop + 1] if stop > limit // 3 else cut.rsplit(" ", 1)[0]


def parse_numpydoc(doc: str) -> dict[str, str]:
    """Split a numpydoc docstring into summary, extended and named sections (raw text).

    >>> d = parse_numpydoc("f(x)\\n\\nAdd one.\\n\\nMore.\\n\\nParameters\\n----------\\nx : int\\n    A value.\\n")
    >>> d["summary"], d["extended"], d["parameters"].split()
    ('Add one.', 'More.', ['x', ':', 'int', 'A', 'value.'])
    """
    lines = doc.strip("\n").splitlines()
    if lines and _SIGNATURE.match(lines[0].strip()):
        lines = lines[1:]
    body = "\n".join(lines).strip("\n")
    heads = list(_HEADER.finditer(body))
    intro = body[: heads[0].start()] if heads else body
    paras = [p for p in re.split(r"\n\s*\n", intro.strip()) if p.strip()]
    out = {"summary": paras[0] if paras else "", "extended": "\n\n".join(paras[1:])}
    for i, h in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(body)
        out[h.group(1).strip().lower()] = body[h.end() : end].strip("\n")
    return out


def _param_sentences(section: str) -> list[str]:
    """'name : type' + indented description -> one sentence per parameter."""
    out, cur = [], None
    for ln in section.splitlines():
        if not ln.strip():
            continue
        if not ln.startswith((" ", "\t")):
            if cur:
                out.append(cur)
            cur = ln.strip().rstrip(".") + "."
        elif cur is not None:
            cur += " " + ln.strip()
    if cur:
        out.append(cur)
    return [_cap(_clean(s), 300) for s in out if _clean(s)]


def _warm_up() -> None:
    """Touch every public attribute until no namespace grows.

    Packages load submodules lazily on attribute access, which adds names to other
    namespaces; harvesting after this fixed point makes the result independent of what the
    process imported before.
    """
    before = None
    while True:
        sizes = []
        for ns in NAMESPACES:
            try:
                holder = _resolve(ns)
            except Exception:  # pragma: no cover
                sizes.append(0)
                continue
            names = sorted(n for n in dir(holder) if not n.startswith("_"))
            for name in names:
                try:
                    getattr(holder, name)
                except Exception:
                    pass
            sizes.append(len(dir(holder)))
        if sizes == before:
            return
        before = sizes


def harvest() -> list[dict]:
    """Unique docstrings of the public objects in :data:`NAMESPACES`, in a fixed order."""
    seen, records = set(), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _warm_up()
        for ns in NAMESPACES:
            try:
                holder = _resolve(ns)
            except Exception:  # pragma: no cover - namespace missing in this version
                continue
            for name in sorted(dir(holder)):
                if name.startswith("_"):
                    continue
                try:
                    obj = getattr(holder, name)
                except Exception:
                    continue
                if inspect.ismodule(obj):
                    continue
                doc = inspect.getdoc(obj)
                if not doc or doc in seen:
                    continue
                seen.add(doc)
                parts = parse_numpydoc(doc)
                summary = _clean(parts["summary"])
                if len(summary) < 20:
                    continue
                records.append(
                    {
                        "namespace": ns,
                        "title": f"{ns}.{name}",
                        "summary": summary,
                        "extended": _clean(parts.get("extended", "")),
                        "parameters": _param_sentences(parts.get("parameters", "")),
                        "returns": _param_sentences(parts.get("returns", "")),
                        "notes": _clean(parts.get("notes", "")),
                    }
                )
    return records


def _split(records: list[dict]):
    test = [r for r in records if int(hashlib.sha256(r["title"].encode()).hexdigest(), 16) % 10 == 0]
    pool = [r for r in records if int(hashlib.sha256(r["title"].encode()).hexdigest(), 16) % 10 != 0]
    val, train = split_rows(pool, validation_size=max(1, len(pool) // 10), seed=42)
    return {"train": train, "val": val, "test": test}


def build(out: Path) -> dict:
    """Write both corpora and the manifest under ``out``; return the manifest."""
    records = harvest()
    classes = sorted({r["namespace"] for r in records})
    label = {c: str(i + 1) for i, c in enumerate(classes)}
    files: dict[str, bytes] = {"docstrings_dbpedia/classes.txt": ("\n".join(classes) + "\n").encode()}
    counts: dict[str, dict[str, int]] = {"dbpedia": {}, "pubmed": {}}
    for split, recs in _split(records).items():
        rows = [
            (label[r["namespace"]], r["title"], _cap((r["summary"] + " " + r["extended"]).strip(), CONTENT_CHARS))
            for r in recs
        ]
        files[f"docstrings_dbpedia/{split}.csv"] = write_dbpedia_csv(rows)
        counts["dbpedia"][split] = len(rows)
        abstracts = []
        for i, r in enumerate(recs):
            if not (r["parameters"] and r["returns"]):
                continue
            lines = [("SUMMARY", s) for s in _SENTENCE.split(_cap((r["summary"] + " " + r["extended"]).strip(), SECTION_CHARS))]
            lines += [("PARAMETERS", s) for s in r["parameters"]][:8]
            lines += [("RETURNS", s) for s in r["returns"]][:4]
            if r["notes"]:
                lines.append(("NOTES", _cap(r["notes"], 200)))
            pmid = str(int(hashlib.sha256(r["title"].encode()).hexdigest()[:7], 16) + 10_000_000)
            abstracts.append((pmid, [(lab, s) for lab, s in lines if s]))
        name = {"train": "train", "val": "dev", "test": "test"}[split]
        files[f"docstrings_pubmed/{name}.txt"] = write_pubmed(abstracts)
        counts["pubmed"][name] = len(abstracts)
    for rel, data in files.items():
        write_bytes_atomic(out / rel, data)
    versions = {}
    for p in PACKAGES:
        versions[p] = importlib.import_module(p).__version__
    manifest = {
        "source": "numpydoc docstrings of installed packages (BSD-3-Clause)",
        "python": ".".join(map(str, sys.version_info[:2])),
        "package_versions": versions,
        "namespaces": list(NAMESPACES),
        "records": counts,
        "classes": classes,
        "files": {rel: sha256_file(out / rel) for rel in sorted(files)},
        "command": "python -m runners.bundled --out data",
    }
    write_json_atomic(out / "bundled_manifest.json", manifest)
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runners.bundled", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="data", help="output folder (default: data)")
    ap.add_argument("--check", action="store_true", help="rebuild in a temporary folder and compare bytes with --out")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            new = build(Path(tmp))
            old = json.loads((out / "bundled_manifest.json").read_text())
            if old["package_versions"] != new["package_versions"]:
                print(f"package versions differ: committed {old['package_versions']}, installed {new['package_versions']}")
            diff = [k for k in new["files"] if old["files"].get(k) != new["files"][k]]
            if diff:
                print("differs: " + ", ".join(diff))
                return 1
            print(f"identical: {len(new['files'])} files")
            return 0
    m = build(out)
    print(json.dumps(m["records"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
