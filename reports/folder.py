"""Report folders written atomically: checked before any work, filled in a temporary sibling folder
and swapped into place as a whole (an earlier report is replaced only when the new one is complete).

The marker (``.routestats-report``) lists every file the report wrote with its SHA-256. Replacing a
report removes only those files whose content still has that hash, checked at the moment of removal
(:func:`routestats.rundir.replace.replace_folder`): a file saved into the folder while the new report
was drawn, or edited since, stays, and the command says where. A marker without hashes (an older
routestats), an empty or a damaged one grants nothing: ``--force`` then refuses, naming what would be
lost.

Light on imports (no matplotlib), so that a report served from :mod:`reports.cache` costs little.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from routestats.errors import RoutestatsError
from routestats.rundir.atomic import sha256_file, usual_mode
from routestats.rundir.replace import NotReplaced, check_written, files_under, process_alive, replace_folder
from routestats.rundir.replace import describe_paths

__all__ = ["MARKER", "check_output", "write_folder", "copy_report", "foreign_files", "SourceUnreadable", "put_file",
           "process_alive"]

MARKER = ".routestats-report"


MARKER_FORMAT = 2
MAX_NAME_BYTES = 255 - len(".") - len(".partial-") - 7 - len("-") - 8  # a 7-digit pid, mkdtemp's 8 characters


def _marker_text(folder: Path) -> str:
    """The marker of a finished report folder: every file routestats wrote into it, with its SHA-256."""
    import json

    files = {f: sha256_file(folder / f)
             for f in files_under(folder) if f != MARKER and not (folder / f).is_symlink()}
    return json.dumps({"written_by": "routestats", "format": MARKER_FORMAT, "files": files}, indent=0) + "\n"


def written_files(folder: Path) -> dict[str, str] | None:
    """relative path -> SHA-256 of every file the report in ``folder`` wrote, from its marker; None when the
    marker is missing, damaged, empty or of an older format (it then proves nothing). Read as any run JSON
    is (:func:`routestats.rundir.manifest.read_json`: a regular file, size and depth bounded); a marker naming a
    path outside ``folder`` (absolute, dotted, through a link) is refused in one line
    (:func:`routestats.rundir.replace.check_written`)."""
    from routestats.rundir.manifest import read_json

    try:
        doc = read_json(Path(folder) / MARKER)
    except (OSError, RoutestatsError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != MARKER_FORMAT or not isinstance(doc.get("files"), dict):
        return None
    files = doc["files"]
    if not files or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return None
    check_written(Path(folder), files, Path(folder) / MARKER)  # a path outside the folder: refused in one line
    return files


def foreign_files(folder: Path) -> list[str] | None:
    """What ``folder`` holds that routestats cannot prove it wrote there as a report: files its marker does
    not list, or whose content no longer has the listed hash. None when the folder holds files but no marker
    that proves anything (none, an older format, empty or damaged): then every file would be lost."""
    folder = Path(folder)
    files = files_under(folder)
    if not files:
        return []
    ours = written_files(folder)
    if ours is None:
        return None
    out = []
    for f in files:
        if f == MARKER:
            continue
        p = folder / f
        if f not in ours or p.is_symlink() or not p.is_file() or sha256_file(p) != ours[f]:
            out.append(f)
    return out


def check_output(out: str | Path, force: bool = False, inputs=()) -> Path:
    """Refuse an output folder that cannot or must not be written, before any work is done.

    ``out`` must not be a file, must not exist unless ``force`` (and then be empty, or an earlier report
    holding nothing but what routestats wrote into it: :func:`foreign_files`), must not lie inside (or
    contain) an input run or tree unless ``force``, and its parent must be a writable folder.
    """
    out = Path(out).absolute()
    if len(out.name.encode()) > MAX_NAME_BYTES:  # said now, not after the analysis naming a hidden folder
        raise RoutestatsError(f"{out.name[:40]}...: the report folder's name is {len(out.name.encode())} bytes; at most "
                              f"{MAX_NAME_BYTES} (its temporary sibling .NAME.partial-PID-XXXXXXXX must fit the "
                              "file system's 255)")
    if out.is_file():
        raise RoutestatsError(f"{out}: is a file; -o names the report folder")
    if out.is_dir() and os.path.ismount(out):  # a report is swapped in as a whole folder: a mount point cannot be
        raise RoutestatsError(f"{out}: is a mount point, and a report folder is swapped into place whole; name a "
                              f"folder inside it (-o {out / 'report'})")
    if out.exists():
        if not force:
            raise RoutestatsError(f"{out}: exists; pass --force to replace it (the old folder is kept until the new "
                                  "report is complete)")
        foreign = foreign_files(out) if out.is_dir() else None
        if foreign is None:
            if (out / MARKER).is_file():
                lost = [f for f in files_under(out) if f != MARKER]
                raise RoutestatsError(f"{out}: its report marker is from an older routestats, empty or damaged and "
                                      f"proves nothing, so --force would lose {describe_paths(lost)}; move them or "
                                      "choose another folder")
            raise RoutestatsError(f"{out}: exists and is not an earlier routestats report; choose another folder")
        if foreign:
            raise RoutestatsError(f"{out}: holds files routestats did not write ({describe_paths(foreign)}); --force "
                                  "replaces only a report folder as routestats wrote it: move them or choose another "
                                  "folder")
    _refuse_foreign_stale(_stale(out))  # a dead writer's folder is removed only if it holds nothing else
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


def proven_files(folder: Path) -> dict[str, str]:
    """What the report in ``folder`` proves it wrote (its marker's list), plus the marker itself as read now."""
    ours = written_files(folder)
    if ours is None:
        return {}
    try:
        return {**ours, MARKER: sha256_file(Path(folder) / MARKER)}
    except OSError:
        return dict(ours)


def _stale(out: Path) -> list[Path]:
    """Temporary folders beside ``out`` of report writers that died (never a link: a writer makes a folder)."""
    found = []
    for p in out.parent.glob(f".{out.name}.partial-*"):
        try:
            pid = int(p.name.split(".partial-")[1].split("-")[0])
        except (IndexError, ValueError):
            continue
        if not process_alive(pid) and not p.is_symlink() and p.is_dir():
            found.append(p)
    return found


# what a report writer puts in its folder before the marker: a folder without one holding anything else was not
# (only) a report writer's
_WRITER_SHAPE = re.compile(r"(report\.html|report\.md|claims\.csv|tables/[^/]+\.(csv|tex)|figures/[^/]+\.(png|pdf|svg))")


def stale_foreign(folder: Path) -> list[str]:
    """What a dead report writer's temporary ``folder`` holds that the writer did not write: with a marker, every
    file the marker does not prove (:func:`foreign_files`; all of them when it proves nothing); without one (the
    writer died while filling it), every file or link not of a report's own shape, and every link."""
    folder = Path(folder)
    if os.path.lexists(folder / MARKER):
        foreign = foreign_files(folder)
        return [f for f in files_under(folder) if f != MARKER] if foreign is None else foreign
    return [f for f in files_under(folder) if (folder / f).is_symlink() or not _WRITER_SHAPE.fullmatch(f)]


def _refuse_foreign_stale(stale: list[Path]) -> None:
    """Refuse, in one line, if any dead writer's folder holds what that writer did not write (:func:`stale_foreign`)."""
    for p in stale:
        foreign = stale_foreign(p)
        if foreign:
            raise RoutestatsError(f"{p}: a report writer that died left this folder, and it holds what that writer did "
                                  f"not write ({describe_paths(foreign)}); move them out (or remove the folder "
                                  "yourself), then run again")


def _clean_stale(out: Path) -> None:
    """Temporary folders of report writers that died are removed, each only when everything in it is what that
    writer wrote (checked again for every folder before any is touched: one may have changed since
    :func:`check_output` refused the others)."""
    stale = _stale(out)
    _refuse_foreign_stale(stale)
    from routestats.rundir.replace import prune_empty, remove_written

    for p in stale:  # file by file, never a whole tree: what arrives meanwhile stays
        if os.path.lexists(p / MARKER):
            remove_written(p, proven_files(p))  # only files whose content still has the marker's hash
            mine = [MARKER]
        else:
            mine = [f for f in files_under(p) if not (p / f).is_symlink() and _WRITER_SHAPE.fullmatch(f)]
        for f in mine:
            try:
                (p / f).unlink()
            except OSError:
                pass
        prune_empty(p)  # and the folder itself, when nothing arrived meanwhile


def put_file(path: Path, data: str | bytes) -> None:
    """Plain write inside the temporary report folder (the folder as a whole is renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)


def _notice(line: str) -> None:
    import sys

    print(line, file=sys.stderr)


def write_folder(out: str | Path, fill: Callable[[Path], dict], force: bool = False, inputs: Sequence = (),
                 keep: Callable[[Path, dict], None] | None = None,
                 notice: Callable[[str], None] = _notice) -> dict[str, Path]:
    """Create the report folder ``out`` atomically: ``fill(tmp)`` writes everything into a temporary
    sibling folder and returns name -> path of what it wrote there; the folder is then renamed into
    place as a whole (an earlier report is replaced only then). ``keep(tmp, written)`` runs on the
    complete temporary folder just before the rename. The old folder loses only what its marker proves
    routestats wrote (:func:`routestats.rundir.replace.replace_folder`); ``notice`` hears where anything
    else was kept. See :func:`check_output`."""
    out = check_output(out, force, inputs)
    _clean_stale(out)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-{os.getpid()}-", dir=out.parent))
        os.chmod(tmp, usual_mode(folder=True))  # mkdtemp's 0700 would make the published report owner-only
    except OSError as exc:
        raise RoutestatsError(f"{out.parent}: cannot create the report folder ({exc.strerror})") from None
    swapping = False
    try:
        written = fill(tmp)
        put_file(tmp / MARKER, _marker_text(tmp))
        if keep is not None:
            keep(tmp, written)
        os.sync()  # the files are on disk before the folder appears under its name
        ours = proven_files(out) if out.exists() else {}  # what the old report proves it wrote, read now
        swapping = True  # from here on tmp may hold the old folder: never removed whole
        replace_folder(tmp, out, ours, notice)
    except NotReplaced as exc:  # the old folder could not be moved aside: it is as it was
        shutil.rmtree(tmp, ignore_errors=True)
        raise RoutestatsError(f"{out}: could not be replaced ({exc.strerror or exc}; a mount point or a read-only "
                              "folder?); nothing was changed") from None
    except OSError as exc:
        if swapping:
            raise RoutestatsError(f"{out}: the new report is in place, but the old one could not be cleared "
                                  f"({exc.strerror or exc}); what it held is in {tmp}") from None
        shutil.rmtree(tmp, ignore_errors=True)
        raise RoutestatsError(f"{out}: could not write the report ({exc.strerror or exc}); nothing was changed") from None
    except BaseException:
        if not swapping:
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
