"""Report folders written atomically: checked before any work, filled in a temporary sibling folder
and renamed into place as a whole (an earlier report is replaced only when the new one is complete).

Light on imports (no matplotlib), so that a report served from :mod:`reports.cache` costs little.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from routestats.errors import RoutestatsError
from routestats.rundir.write import describe_paths

__all__ = ["MARKER", "check_output", "write_folder", "copy_report", "foreign_files", "SourceUnreadable", "put_file",
           "process_alive"]

MARKER = ".routestats-report"


_LAYOUT = ("report.html", "report.md", "claims.csv", "tables", "figures", MARKER)  # before markers listed files


def _files_under(folder: Path) -> list[str]:
    """Relative paths of every file, link and empty folder under ``folder`` (links not followed)."""
    out = []
    for dirpath, dirnames, names in os.walk(folder):
        rel = Path(dirpath).relative_to(folder)
        links = [d for d in dirnames if (Path(dirpath) / d).is_symlink()]
        out += [str(rel / n) for n in names + links]
        if not names and not dirnames and Path(dirpath) != folder:
            out.append(str(rel) + "/")
    return sorted(out)


def _marker_text(folder: Path) -> str:
    """The marker of a finished report folder: every file routestats wrote into it, by relative path."""
    import json

    return json.dumps({"written_by": "routestats", "files": [f for f in _files_under(folder) if f != MARKER]},
                      indent=0) + "\n"


def foreign_files(folder: Path) -> list[str] | None:
    """What ``folder`` holds that routestats did not write into it as a report (its marker lists every file
    it wrote); None when it is no report folder at all (no marker) and not empty."""
    import json

    files = _files_under(folder)
    if not files:
        return []
    try:
        doc = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        ours = set(doc["files"]) if isinstance(doc, dict) and isinstance(doc.get("files"), list) else None
    except (OSError, ValueError):
        ours = None
    if ours is None:
        if not (folder / MARKER).is_file():
            return None
        # a marker of an earlier version (no list): only the report layout itself is ours
        return [f for f in files if f.split("/")[0] not in _LAYOUT]
    return [f for f in files if f != MARKER and f not in ours]


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (a lock's writer)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # no such process (or no such pid at all)
        return False
    except PermissionError:
        return True
    return True


def check_output(out: str | Path, force: bool = False, inputs=()) -> Path:
    """Refuse an output folder that cannot or must not be written, before any work is done.

    ``out`` must not be a file, must not exist unless ``force`` (and then be empty, or an earlier report
    holding nothing but what routestats wrote into it: :func:`foreign_files`), must not lie inside (or
    contain) an input run or tree unless ``force``, and its parent must be a writable folder.
    """
    out = Path(out).absolute()
    if out.is_file():
        raise RoutestatsError(f"{out}: is a file; -o names the report folder")
    if out.exists():
        if not force:
            raise RoutestatsError(f"{out}: exists; pass --force to replace it (the old folder is kept until the new "
                                  "report is complete)")
        foreign = foreign_files(out) if out.is_dir() else None
        if foreign is None:
            raise RoutestatsError(f"{out}: exists and is not an earlier routestats report; choose another folder")
        if foreign:
            raise RoutestatsError(f"{out}: holds files routestats did not write ({describe_paths(foreign)}); --force "
                                  "replaces only a report folder as routestats wrote it: move them or choose another "
                                  "folder")
    for src in inputs:
        src = Path(src).absolute()
        if src.exists() and (out == src or out.is_relative_to(src) or src.is_relative_to(out)) and not force:
            raise RoutestatsError(f"{out}: lies inside (or contains) the input {src}; write the report elsewhere or "
                                  "pass --force")
    parent = out.parent
    if not parent.is_dir():
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RoutestatsError(f"{parent}: cannot create the report's parent folder ({exc.strerror})") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise RoutestatsError(f"{parent}: not writable, so the report folder cannot be created there")
    return out


def _clean_stale(out: Path) -> None:
    for p in out.parent.glob(f".{out.name}.partial-*"):
        try:
            pid = int(p.name.split(".partial-")[1].split("-")[0])
        except (IndexError, ValueError):
            continue
        if not process_alive(pid):
            shutil.rmtree(p, ignore_errors=True)


def put_file(path: Path, data: str | bytes) -> None:
    """Plain write inside the temporary report folder (the folder as a whole is renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)


def write_folder(out: str | Path, fill: Callable[[Path], dict], force: bool = False, inputs: Sequence = (),
                 keep: Callable[[Path, dict], None] | None = None) -> dict[str, Path]:
    """Create the report folder ``out`` atomically: ``fill(tmp)`` writes everything into a temporary
    sibling folder and returns name -> path of what it wrote there; the folder is then renamed into
    place as a whole (an earlier report is replaced only then). ``keep(tmp, written)`` runs on the
    complete temporary folder just before the rename. See :func:`check_output`."""
    out = check_output(out, force, inputs)
    _clean_stale(out)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-{os.getpid()}-", dir=out.parent))
    except OSError as exc:
        raise RoutestatsError(f"{out.parent}: cannot create the report folder ({exc.strerror})") from None
    try:
        written = fill(tmp)
        put_file(tmp / MARKER, _marker_text(tmp))
        if keep is not None:
            keep(tmp, written)
        os.sync()  # the files are on disk before the folder appears under its name
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            os.rename(out, old)
            os.rename(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RoutestatsError(f"{out}: could not write the report ({exc.strerror or exc}); nothing was changed") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {name: out / p.relative_to(tmp) for name, p in written.items()}


class SourceUnreadable(Exception):
    """The folder :func:`copy_report` copies from could not be read (nothing was published)."""


def copy_report(folder: Path, written: dict, out: str | Path, force: bool = False, inputs: Sequence = ()) -> dict[str, Path]:
    """Write a copy of the finished report ``folder`` (``written``: name -> path relative to it) as
    the report folder ``out``, atomically as :func:`write_folder` writes one. Raises
    :class:`SourceUnreadable` (and publishes nothing) when ``folder`` cannot be read whole."""
    def fill(tmp: Path) -> dict:
        try:
            shutil.copytree(folder, tmp, dirs_exist_ok=True)
        except (OSError, shutil.Error) as exc:
            raise SourceUnreadable(str(exc)) from None
        out = {name: tmp / rel for name, rel in written.items()}
        if not all(p.exists() for p in out.values()):
            raise SourceUnreadable(f"{folder}: incomplete")
        return out

    return write_folder(out, fill, force, inputs)
