"""Replacing a folder without losing what anyone else wrote into it.

Every writer that replaces a folder (report folders, captured runs, the demo runs) goes through here:

* :func:`replace_folder` swaps the finished new folder into place (one atomic exchange where the
  kernel offers ``renameat2(RENAME_EXCHANGE)``, else two renames), then removes from the old folder
  only the files its writer's record lists *and* whose SHA-256 still equals the recorded one, checked
  at the moment of removal; whatever else is there (a file saved into the folder while the new one
  was being made, a file edited since) is moved into the new folder where its name is free, and
  otherwise kept in a sibling ``<name>.kept-<time>`` folder; ``notice`` says which and where.
* :func:`remove_written` is that removal on its own, for a writer that refills a folder in place.

Examples
--------
>>> import tempfile
>>> d = Path(tempfile.mkdtemp())
>>> from routestats.rundir.atomic import sha256_file
>>> _ = (d / "ours.txt").write_text("ours"); _ = (d / "notes.txt").write_text("mine")
>>> listed = {"ours.txt": sha256_file(d / "ours.txt"), "notes.txt": "0" * 64}  # notes.txt: not what was written
>>> remove_written(d, listed)
['notes.txt']
>>> sorted(p.name for p in d.iterdir())
['notes.txt']
"""

from __future__ import annotations

import ctypes
import ctypes.util
import datetime as _dt
import os
from pathlib import Path
from typing import Callable, Mapping

__all__ = ["NotReplaced", "check_written", "exchange", "remove_written", "replace_folder", "files_under", "process_alive", "prune_empty",
           "walk_folders", "MAX_DEPTH", "describe_paths"]

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (the writer of a temporary folder)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # no such process (or no such pid at all)
        return False
    except PermissionError:
        return True
    return True


def _sha256(path: Path) -> str | None:
    """The file's SHA-256 (:func:`routestats.rundir.atomic.sha256_file`), or None when it cannot be read."""
    from routestats.rundir.atomic import sha256_file

    try:
        return sha256_file(path)
    except OSError:
        return None


def exchange(a: Path, b: Path) -> bool:
    """Swap the names of ``a`` and ``b`` in one atomic step (Linux ``renameat2``); False where the
    system or file system does not offer it (then nothing was changed)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn(_AT_FDCWD, os.fsencode(str(a)), _AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE) == 0


def files_under(folder: Path) -> list[str]:
    """Relative paths of every file and link under ``folder`` (links are not followed), walked without
    recursion."""
    out, stack = [], [Path(folder)]
    while stack:
        here = stack.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        for e in entries:
            p = Path(e.path)
            if e.is_dir(follow_symlinks=False):
                stack.append(p)
            else:
                out.append(str(p.relative_to(folder)))
    return sorted(out)


def prune_empty(folder: Path) -> None:
    """Remove the empty folders under ``folder`` (deepest first) and ``folder`` itself when empty."""
    dirs = [Path(folder)]
    i = 0
    while i < len(dirs):
        try:
            dirs += [Path(e.path) for e in os.scandir(dirs[i]) if e.is_dir(follow_symlinks=False)]
        except OSError:
            pass
        i += 1
    for d in reversed(dirs):
        try:
            os.rmdir(d)
        except OSError:
            pass


def check_written(folder: Path, written: Mapping[str, str], source: object = None) -> None:
    """Refuse in one line (:class:`routestats.errors.RunFormatError`) a list of written files that names any path
    outside ``folder``: absolute, dotted, or through a link (:func:`routestats.rundir.verify.inside`, the
    validator's own rule, with no link allowed on the way). ``source`` names the file that listed them."""
    from routestats.rundir.verify import inside

    checked: set = set()  # folders proved not to be links, shared by the entries below them: linear in the entries
    for rel in written:
        inside(Path(folder), rel, source or Path(folder), f"{folder}", links=False, checked=checked)


def remove_written(folder: Path, written: Mapping[str, str], source: object = None) -> list[str]:
    """Remove from ``folder`` each file of ``written`` (relative path -> SHA-256) whose content still has that
    hash, checked now; then the folders left empty. Returns the relative paths of what stays. Every path is
    checked first (:func:`check_written`): one outside ``folder`` refuses the whole removal, nothing removed."""
    folder = Path(folder)
    check_written(folder, written, source)
    for rel, digest in written.items():
        p = folder / rel
        if p.is_symlink() or not p.is_file():
            continue
        if _sha256(p) == digest:
            try:
                p.unlink()
            except OSError:
                pass
    prune_empty(folder)
    return files_under(folder) if folder.exists() else []


class NotReplaced(OSError):
    """:func:`replace_folder` could not swap the folders (a mount point, a read-only parent): nothing moved."""


def replace_folder(new: Path, out: Path, written: Mapping[str, str],
                   notice: Callable[[str], None] | None = None) -> list[str]:
    """Put the finished folder ``new`` in place of ``out`` and remove from the old ``out`` only what
    ``written`` proves its writer wrote (see the module docstring). Returns the relative paths kept."""
    new, out = Path(new), Path(out)
    if not out.exists():
        os.rename(new, out)
        return []
    check_written(out, written)  # before the swap: a list naming a path outside refuses it, nothing moved
    if exchange(new, out):
        old = new  # the old folder now has the new one's temporary name
    else:
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        try:
            os.rename(out, old)  # a mount point or a read-only parent: EBUSY, EROFS, EXDEV, nothing moved
        except OSError as exc:
            raise NotReplaced(exc.errno, exc.strerror) from None
        try:
            os.rename(new, out)
        except OSError as exc:
            os.rename(old, out)  # back as it was
            raise NotReplaced(exc.errno, exc.strerror) from None
    left = remove_written(old, written)
    if not left:
        return []
    back, stay = [], []
    for rel in left:
        dst = out / rel
        if os.path.lexists(dst):
            stay.append(rel)
            continue
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.rename(old / rel, dst)
            back.append(rel)
        except OSError:
            stay.append(rel)
    prune_empty(old)
    say = notice or (lambda line: None)
    if back:
        say(f"{out}: kept {len(back)} file(s) routestats did not write there, in place ({describe_paths(back)})")
    if old.exists():
        kept = out.parent / f"{out.name}.kept-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        os.rename(old, kept)
        say(f"{out}: kept {len(stay)} file(s) whose names the new folder uses in {kept} ({describe_paths(stay)})")
    return back + stay


MAX_DEPTH = 64  # folders below a tree's root that a walk visits; deeper is refused in one line


def walk_folders(folder: Path, max_depth: int = MAX_DEPTH):
    """(folder, sub-folder names, file names) for ``folder`` and every folder below it, top down, without
    recursion and without following links (a link to a folder is listed with the files); a tree deeper than
    ``max_depth`` is refused in one line. Removing names from the sub-folder list prunes the walk."""
    from routestats.errors import RoutestatsError

    stack = [(Path(folder), 0)]
    while stack:
        here, depth = stack.pop()
        try:
            entries = sorted(os.scandir(here), key=lambda e: e.name)
        except OSError:
            continue
        dirs = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
        files = [e.name for e in entries if not e.is_dir(follow_symlinks=False)]
        yield here, dirs, files
        if dirs and depth + 1 > max_depth:
            raise RoutestatsError(f"{folder}: folders nest deeper than {max_depth} levels (at {here}); point at the "
                                  "run or tree itself")
        stack += [(here / d, depth + 1) for d in reversed(dirs)]


def describe_paths(paths: list[str], most: int = 3) -> str:
    """Relative paths grouped by their top-level entry, for a one-line message.

    >>> describe_paths(["NOTES.txt", "seed1001/report.html", "seed1001/tables/a.csv"])
    'NOTES.txt, seed1001/ (2 files)'
    """
    groups: dict[str, int] = {}
    for f in paths:
        top, _, rest = f.partition("/")
        key = top + "/" if rest or f.endswith("/") else top
        groups[key] = groups.get(key, 0) + 1
    shown = [k if not k.endswith("/") else f"{k} ({n} file{'s' if n > 1 else ''})" for k, n in list(groups.items())[:most]]
    return ", ".join(shown) + (f" and {len(groups) - most} more" if len(groups) > most else "")
