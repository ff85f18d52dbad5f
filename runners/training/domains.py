"""Build contrasting real-text domains offline, from what any machine with the project's
dependencies has (for MoFA zero-shot perplexity; METHODS Part II A.3).

Domains (one JSONL file each, ``{"text": ...}`` per line, sorted and deterministic for the
same installed versions):

* ``docstrings`` -- numpydoc docstring prose of numpy/scipy/pandas/statsmodels (the training
  domain; its held-out records are the in-domain evaluation);
* ``code``       -- Python standard-library source files;
* ``licenses``   -- licence texts shipped in installed packages' metadata (legal prose);
* ``readmes``    -- package long descriptions from installed metadata (long technical prose);
* ``tables``     -- CSV data files shipped with statsmodels' datasets (numeric, tabular).

``python -m runners domains --out data/domains`` writes ``<domain>.jsonl`` and
``domains_manifest.json`` (counts, sizes, SHA-256, Python and package versions).
"""

from __future__ import annotations

import importlib.metadata as md
import json
import sys
import sysconfig
from pathlib import Path

from routestats.rundir.atomic import sha256_file, write_json_atomic, write_text_atomic

MAX_DOC_CHARS = 3000


def _cap(text: str) -> str:
    return text[:MAX_DOC_CHARS]


def _budget(docs: list[str], max_chars: int) -> list[str]:
    out, total = [], 0
    for d in docs:
        if not d.strip():
            continue
        if total + len(d) > max_chars:
            break
        out.append(d)
        total += len(d)
    return out


def docstrings_domain(split: str = "test") -> list[str]:
    from runners.corpora import read_dbpedia_csv
    from runners.training.data import DATA_DIR

    rows = read_dbpedia_csv(DATA_DIR / "docstrings_dbpedia" / f"{split}.csv")
    return [f"{title}\n{content}" for _, title, content in rows]


def code_domain() -> list[str]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in lib.glob("*.py") if not p.name.startswith("_"))
    return [_cap(p.read_text(encoding="utf-8", errors="replace")) for p in files]


def _dists():
    return sorted(md.distributions(), key=lambda d: (d.metadata["Name"] or "").lower())


def licenses_domain() -> list[str]:
    out, seen = [], set()
    for d in _dists():
        for f in d.files or []:
            name = f.name.upper()
            if name.startswith(("LICENSE", "LICENCE", "COPYING")) and not name.endswith((".PY", ".PYC")):
                try:
                    text = f.read_text()
                except (OSError, UnicodeDecodeError):
                    continue
                if text and text not in seen:
                    seen.add(text)
                    out.append(_cap(text))
    return out


def readmes_domain() -> list[str]:
    out, seen = [], set()
    for d in _dists():
        text = d.metadata.get_payload() if hasattr(d.metadata, "get_payload") else None
        text = text or d.metadata.get("Description") or ""
        if len(text) > 200 and text not in seen:
            seen.add(text)
            out.append(_cap(text))
    return out


def tables_domain() -> list[str]:
    import statsmodels

    root = Path(statsmodels.__file__).parent / "datasets"
    return [_cap(p.read_text(encoding="utf-8", errors="replace")) for p in sorted(root.glob("*/*.csv"))]


DOMAINS = {"docstrings": docstrings_domain, "code": code_domain, "licenses": licenses_domain,
           "readmes": readmes_domain, "tables": tables_domain}


def build_domains(out: Path, max_chars: int = 150_000) -> dict:
    """Write every domain (at most ``max_chars`` characters each) and a manifest."""
    out = Path(out)
    manifest = {"python": sys.version.split()[0], "max_chars": max_chars, "domains": {}}
    for name, fn in DOMAINS.items():
        docs = _budget(fn(), max_chars)
        text = "".join(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in docs)
        write_text_atomic(out / f"{name}.jsonl", text)
        manifest["domains"][name] = {"documents": len(docs), "characters": sum(map(len, docs)),
                                     "sha256": sha256_file(out / f"{name}.jsonl")}
    manifest["package_versions"] = {p: md.version(p) for p in ("numpy", "scipy", "pandas", "statsmodels")}
    write_json_atomic(out / "domains_manifest.json", manifest)
    return manifest


def read_domain(path: Path) -> list[str]:
    """Documents of a domain file: JSONL (``text`` field), Parquet (``text`` column) or txt (blank-line separated)."""
    from routestats.errors import RoutestatsError

    path = Path(path)
    try:
        if path.suffix == ".parquet":
            import pandas as pd

            docs = pd.read_parquet(path, columns=["text"])["text"].tolist()
        else:
            text = path.read_text(encoding="utf-8-sig")
            if path.suffix != ".jsonl":
                return [d for d in text.split("\n\n") if d.strip()]
            docs = []
            for i, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    obj = json.loads(line)
                    if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                        raise RoutestatsError(f"{path}: line {i} is not an object with a \"text\" string")
                    docs.append(obj["text"])
    except UnicodeDecodeError as exc:
        raise RoutestatsError(f"{path}: not UTF-8 text (byte {exc.start}; a binary file?); a domain file is JSONL "
                              "with a \"text\" field, Parquet with a text column, or plain text") from None
    except json.JSONDecodeError as exc:
        raise RoutestatsError(f"{path}: not JSONL ({exc})") from None
    except (OSError, ValueError, KeyError) as exc:  # a missing file, an unreadable Parquet, no text column
        if isinstance(exc, RoutestatsError):
            raise
        raise RoutestatsError(f"{path}: cannot be read as a domain file ({str(exc).splitlines()[0][:160]})") from None
    if not all(isinstance(d, str) for d in docs):
        raise RoutestatsError(f"{path}: its text column holds values that are not strings")
    return docs
