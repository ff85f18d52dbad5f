"""Reuse a finished report folder when nothing it depends on has changed (a warm re-report).

A report is a deterministic function of the files under its inputs, the settings, the output
formats, the routestats code and the versions of the libraries that compute and draw it. The key
of a cached report hashes all of them, the inputs as the same *stamps* the verification layer
trusts to skip re-hashing an unchanged file (:mod:`routestats.rundir.verify`: resolved path,
size, modification and change times in ns, inode) -- of every file under each input, so a file
that is rewritten, touched, added or removed anywhere in a run or tree misses the cache, and the
report is computed (and every file it reads verified) afresh.

Entries live under :func:`routestats.rundir.verify.cache_dir` ``/reports`` (none with
``ROUTESTATS_CACHE=off``); the :data:`KEEP` most recently used are kept.

Examples
--------
>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> (d / "run.json").write_text("{}")
2
>>> a = report_key([d], {"resamples": 10}, ("html",), ())
>>> a == report_key([d], {"resamples": 10}, ("html",), ())
True
>>> a == report_key([d], {"resamples": 11}, ("html",), ())
False
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
from importlib import metadata
from pathlib import Path

from reports.folder import _alive
from routestats.rundir.verify import cache_dir, file_stamp

__all__ = ["KEEP", "report_key", "lookup", "store"]

KEEP = 8  # report folders kept in the cache
_LIBRARIES = ("numpy", "pandas", "scipy", "pyarrow", "statsmodels", "matplotlib", "jinja2")
_CODE: str | None = None


def _code_digest() -> str:
    """SHA-256 over the source of the analysis core and the renderer (paths and contents)."""
    global _CODE
    if _CODE is None:
        h = hashlib.sha256()
        root = Path(__file__).resolve().parent.parent
        for pkg in ("routestats", "reports"):
            for p in sorted((root / pkg).rglob("*")):
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
                    h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
        _CODE = h.hexdigest()
    return _CODE


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for name in _LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _listing(path: Path) -> list:
    """The :func:`~routestats.rundir.verify.file_stamp` (without the resolved path: relative path
    instead) of every file under ``path``, links followed."""
    path = Path(path).resolve()
    files = [path] if path.is_file() else [Path(folder) / name for folder, dirs, names in
                                            sorted(os.walk(path, followlinks=True)) for name in sorted(names)]
    rows = []
    for p in files:
        rel = p.name if p == path else str(p.relative_to(path))
        try:
            rows.append([rel, *file_stamp(p)[1:]])
        except OSError:
            rows.append([rel, None])
    return rows


def report_key(inputs, settings: dict, formats, figures) -> str:
    """The cache key of a report of ``inputs`` (paths) with these settings, formats and figure copies."""
    doc = {
        "code": _code_digest(),
        "libraries": _versions(),
        "settings": settings,
        "formats": sorted(formats),
        "figures": sorted(figures or ()),
        "inputs": [[str(Path(p).resolve()), _listing(Path(p))] for p in inputs],
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def _root() -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / "reports"


def lookup(key: str) -> tuple[Path, dict] | None:
    """(cached report folder, name -> relative path written) for ``key``, or None."""
    root = _root()
    if root is None:
        return None
    entry = root / key
    try:
        written = json.loads((entry / "written.json").read_text())
        folder = entry / "report"
        inside = all(isinstance(v, str) and v and not v.startswith("/") and ".." not in Path(v).parts
                     for v in written.values())  # names of the entry's own files, nothing outside it
        if not folder.is_dir() or not inside or not all((folder / v).exists() for v in written.values()):
            return None
        os.utime(entry)  # recently used
        return folder, written
    except (OSError, ValueError, AttributeError):
        return None


def store(key: str, out: Path, written: dict) -> None:
    """Keep a copy of the finished report folder ``out`` (the writer's temporary folder, before it is
    published: exactly what this run wrote) under ``key`` (a full or read-only cache never fails a
    report); drop all but the :data:`KEEP` most recently used entries and the copies that processes
    which no longer run left half-written."""
    root = _root()
    if root is None:
        return
    entry = root / key
    tmp = root / f".{key}.{os.getpid()}.tmp"
    try:
        root.mkdir(parents=True, exist_ok=True)
        for old in root.glob(".*.tmp"):
            try:
                pid = int(old.name.rsplit(".", 2)[-2])
            except (IndexError, ValueError):
                continue
            if not _alive(pid):
                shutil.rmtree(old, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(out, tmp / "report")
        top = Path(out).resolve()
        rel = {name: str(Path(p).resolve().relative_to(top)) for name, p in written.items()}
        (tmp / "written.json").write_text(json.dumps(rel))
        shutil.rmtree(entry, ignore_errors=True)
        os.rename(tmp, entry)
        entries = sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")),
                         key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[KEEP:]:
            shutil.rmtree(old, ignore_errors=True)
    except (OSError, ValueError):
        shutil.rmtree(tmp, ignore_errors=True)
