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

from routestats.rundir.replace import process_alive
from routestats.rundir.verify import cache_dir, file_stamp, seal

__all__ = ["KEEP", "report_key", "lookup", "store", "enabled", "CacheSkipped", "publish"]

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


MAX_FILES = 100_000  # entries listed under the inputs before the cache gives up (the report goes on without it)
MAX_SECONDS = 2.0  # time spent listing them, likewise


class CacheSkipped(Exception):
    """The inputs cannot be listed whole (past :data:`MAX_FILES` / :data:`MAX_SECONDS`, or a link to a folder
    outside them): no cache for this report; the message says why, in one line."""


def _listing(path: Path, deadline: float) -> list:
    """The :func:`~routestats.rundir.verify.file_stamp` (without the resolved path: relative path
    instead) of every file under ``path``, walked as run discovery walks it: links to folders are not
    followed (a link loop or a link to ``/`` costs one entry, listed with its target). A link to a
    folder outside ``path`` could hold inputs the listing does not see (an ``init_probe/`` link, say), so
    it and a walk past :data:`MAX_FILES` entries or the deadline raise :class:`CacheSkipped`."""
    import time

    path = Path(path).resolve()
    if not path.is_dir():
        try:
            return [[path.name, *file_stamp(path)[1:]]]
        except OSError:
            return [[path.name, None]]
    rows, outside, stack = [], [], [path]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            rows.append([str(folder.relative_to(path)), None])
            continue
        if len(rows) + len(entries) > MAX_FILES or time.monotonic() > deadline:
            raise CacheSkipped(f"{path}: more than {MAX_FILES:,} files or {MAX_SECONDS:g} s to list them: this report "
                               "does not use the cache")
        for e in entries:
            p = folder / e.name
            rel = str(p.relative_to(path))
            try:
                is_link, is_dir = e.is_symlink(), e.is_dir()  # is_dir follows a link
            except OSError:
                is_link, is_dir = False, False
            if is_link and is_dir:
                target = os.path.realpath(p)
                rows.append([rel, "link", target])
                if not Path(target).is_relative_to(path):
                    outside.append(f"{rel} -> {target}")
                continue
            if is_dir:
                stack.append(p)
                continue
            try:
                rows.append([rel, *file_stamp(p)[1:]])
            except OSError:
                rows.append([rel, None])
    if outside:
        more = f" and {len(outside) - 1} more" if len(outside) > 1 else ""
        raise CacheSkipped(f"{path}: links to folders outside it are not followed ({outside[0]}{more}); runs behind "
                           "them are not part of this report, and it does not use the cache")
    return sorted(rows, key=lambda r: r[0])


def report_key(inputs, settings: dict, formats, figures) -> str:
    """The cache key of a report of ``inputs`` (paths) with these settings, formats and figure copies;
    :class:`CacheSkipped` when the inputs cannot be listed within the bounds."""
    import time

    deadline = time.monotonic() + MAX_SECONDS
    doc = {
        "code": _code_digest(),
        "libraries": _versions(),
        "settings": settings,
        "formats": sorted(formats),
        "figures": sorted(figures or ()),
        "inputs": [[str(Path(p).resolve()), _listing(Path(p), deadline)] for p in inputs],
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def enabled() -> bool:
    """Whether reports are cached at all (not with ``ROUTESTATS_CACHE=off``)."""
    return _root() is not None


def _root() -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / "reports"


def _digests(folder: Path) -> dict:
    """relative path -> SHA-256 of every file under ``folder`` (links not followed)."""
    from routestats.rundir.atomic import sha256_file

    out = {}
    for dirpath, _, names in os.walk(folder):
        for name in names:
            p = Path(dirpath) / name
            out[str(p.relative_to(folder))] = "link" if p.is_symlink() else sha256_file(p)
    return out


def lookup(key: str) -> tuple[Path, dict] | None:
    """(cached report folder, name -> relative path written) for ``key``, or None: also when the entry
    is not exactly what :func:`store` filed (its sealed list of every file and its SHA-256 must match:
    an edited, added or missing file means the report is computed afresh, never served)."""
    from routestats.rundir.verify import sealed

    root = _root()
    if root is None:
        return None
    entry = root / key
    try:
        raw = (entry / "written.json").read_bytes()
        if not sealed(key, raw, (entry / "written.seal").read_text().strip()):
            return None
        doc = json.loads(raw)
        written, files = doc["written"], doc["files"]
        folder = entry / "report"
        inside = all(isinstance(v, str) and v and not v.startswith("/") and ".." not in Path(v).parts
                     for v in written.values())  # names of the entry's own files, nothing outside it
        if not folder.is_dir() or not inside or _digests(folder) != files:
            return None
        os.utime(entry)  # recently used
        return folder, written
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
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
            if not process_alive(pid):
                shutil.rmtree(old, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(out, tmp / "report")
        top = Path(out).resolve()
        rel = {name: str(Path(p).resolve().relative_to(top)) for name, p in written.items()}
        raw = json.dumps({"written": rel, "files": _digests(tmp / "report")}).encode()
        tag = seal(key, raw)
        if tag is None:  # no usable secret: nothing is filed that could not be checked
            shutil.rmtree(tmp, ignore_errors=True)
            return
        (tmp / "written.json").write_bytes(raw)
        (tmp / "written.seal").write_text(tag)
        shutil.rmtree(entry, ignore_errors=True)
        os.rename(tmp, entry)
        entries = sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")),
                         key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[KEEP:]:
            shutil.rmtree(old, ignore_errors=True)
    except (OSError, ValueError):
        shutil.rmtree(tmp, ignore_errors=True)


def publish(compute, out, inputs, settings: dict, formats, figures=None, force: bool = False,
            progress=None, notice=None) -> dict:
    """The report folder ``out`` of ``inputs`` under ``settings``: a copy of the cached one when every file under the
    inputs, the settings, the formats and the code are unchanged (:func:`report_key`), else ``compute(progress)``
    (a :class:`routestats.report.Report`) written (:func:`reports.render.render`) and filed in the cache when no
    input changed while it was made. The one call a command makes: whether the cache holds the report is decided
    here. ``out`` is checked before any work (:func:`reports.folder.check_output`); ``notice`` hears why the cache
    was passed over. Returns name -> path of what was written.
    """
    from reports.folder import SourceUnreadable, check_output, copy_report

    say = progress or (lambda label: None)
    check_output(out, force, inputs)  # before the analysis, not after it
    try:  # stats every file under the inputs: only when reports are cached at all
        key = report_key(inputs, settings, formats, figures) if enabled() else None
    except CacheSkipped as exc:
        key = None
        if notice is not None:
            notice(f"note: {exc}")
    hit = lookup(key) if key is not None else None
    if hit is not None:
        try:
            written = copy_report(*hit, out, force=force, inputs=inputs)
            say("inputs, settings and code unchanged: the report from the cache")
            return written
        except SourceUnreadable:  # evicted or damaged meanwhile: computed afresh
            pass
    from reports.render import render  # (matplotlib, pandas, jinja2): not for a report from the cache

    rep = compute(say)

    def keep(folder, files):  # only if nothing under the inputs changed while the report was made
        try:
            if key is not None and report_key(inputs, settings, formats, figures) == key:
                store(key, folder, files)
        except CacheSkipped:
            pass

    return render(rep, out, formats, progress=say, force=force, inputs=inputs, figures=figures, keep=keep)
