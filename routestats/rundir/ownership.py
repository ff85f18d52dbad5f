"""Which files under a folder its runs wrote: what a writer may remove when it replaces the folder, and
what it must refuse to touch.

A run lists every file it wrote, with its SHA-256, in its ``run.json``; a tree of runs also holds the
tree files of :data:`TREE_FILES`. :func:`written_by_runs` collects those records and
:func:`unlisted_files` the files no record names (links are never followed).
"""

from __future__ import annotations

import json
from pathlib import Path

from routestats.rundir import schema as S
from routestats.rundir.atomic import sha256_file
from routestats.rundir.manifest import read_json
from routestats.rundir.replace import walk_folders

__all__ = ["TREE_FILES", "written_by_runs", "unlisted_files"]


TREE_FILES = ("tokenizer.json", "plan.json")  # written beside the runs of a tree by training and sweeps


def written_by_runs(folder: Path) -> dict[str, str]:
    """relative path -> SHA-256 of every file under ``folder`` that a run there wrote: the files each run's
    manifest lists with their hashes, each ``run.json`` itself and the tree files of :data:`TREE_FILES` (as read
    now). A writer that replaces the folder removes only these, and only while their content is unchanged
    (:func:`routestats.rundir.replace.remove_written`)."""
    folder = Path(folder)
    out: dict[str, str] = {}
    for here, dirs, names in walk_folders(folder):
        rel_here = here.relative_to(folder)
        if S.MANIFEST in names:
            try:
                m = read_json(here / S.MANIFEST)  # untrusted: size and depth bounded
                for e in m.get("files", []):
                    if isinstance(e, dict) and isinstance(e.get("path"), str) and isinstance(e.get("sha256"), str):
                        out[(rel_here / e["path"]).as_posix()] = e["sha256"]
                out[(rel_here / S.MANIFEST).as_posix()] = sha256_file(here / S.MANIFEST)
            except (OSError, ValueError, AttributeError):  # RunFormatError is a ValueError: nothing is proven
                pass
            dirs[:] = []
            continue
        for n in names:
            if n in TREE_FILES:
                out[(rel_here / n).as_posix()] = sha256_file(here / n)
    return out


def unlisted_files(folder: Path) -> list[str]:
    """Relative paths of the files under ``folder`` that no run there wrote: neither listed in the manifest
    of the run holding them (nor that ``run.json`` itself) nor a tree file of :data:`TREE_FILES` outside the
    runs. A writer may replace a folder only when this is empty (links are not followed).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "tokenizer.json").write_text("{}"); _ = (d / "NOTES.txt").write_text("mine")
    >>> unlisted_files(d)
    ['NOTES.txt']
    """
    folder = Path(folder)
    out = []
    for here, dirnames, names in walk_folders(folder):  # a link to a folder is among the names, not followed
        if S.MANIFEST in names:  # a run: everything under it must be in its manifest
            try:
                m = json.loads((here / S.MANIFEST).read_text(encoding="utf-8"))
                listed = {e["path"] for e in m.get("files", []) if isinstance(e, dict) and isinstance(e.get("path"), str)}
            except (OSError, ValueError, AttributeError):
                listed = set()
            for sub, _, files in walk_folders(here):
                for f in files:
                    rel = (Path(sub) / f).relative_to(here).as_posix()
                    if rel != S.MANIFEST and rel not in listed:
                        out.append((Path(sub) / f).relative_to(folder).as_posix())
            dirnames[:] = []
            continue
        out += [(here / n).relative_to(folder).as_posix() for n in names if n not in TREE_FILES]
    return sorted(out)
