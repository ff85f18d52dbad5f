"""What a runner may do to an output folder: replace only what its runs wrote (shared by training, evaluation
and capture)."""

from __future__ import annotations

from pathlib import Path


def check_replaceable(path: Path, what: str = "--out") -> None:
    """Refuse (one line) to replace a folder holding any file its runs did not write (a user's notes, a
    report, another tool's output): runners replace only what they wrote, and only whole runs; nor one whose
    manifests name a file outside it (:func:`routestats.rundir.replace.check_written`)."""
    from routestats.errors import RoutestatsError
    from routestats.rundir.ownership import unlisted_files, written_by_runs
    from routestats.rundir.replace import check_written, describe_paths

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RoutestatsError(f"{path}: is a file; {what} names a folder")
    foreign = unlisted_files(path) if path.is_dir() else []
    if foreign:
        raise RoutestatsError(f"{path}: holds files no run there wrote ({describe_paths(foreign)}); it is replaced only "
                              f"when it holds nothing else: move them, or choose another {what}")
    if path.is_dir():
        check_written(path, written_by_runs(path))  # a manifest naming a path outside: refused, nothing removed
