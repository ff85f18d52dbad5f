"""Where capture writes: the destination checked before any work (existing runs, a mount point), the runs staged
in a temporary sibling folder and swapped in (an earlier run loses only what its manifest proves it wrote), and the
staging folders of captures that died swept away. Split from ``capture`` (one job per module)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from routestats.errors import RoutestatsError
from routestats.rundir import schema as S
from routestats.rundir.atomic import usual_mode

from runners.outputs import check_replaceable
from runners.pretrained.load import first_line

__all__ = ["Destination", "destination", "check_destination", "refuse_taken", "sweep_partials", "staging",
           "echo_notice", "is_capture_run"]


def is_capture_run(path: Path) -> bool:
    from routestats.rundir.manifest import read_json

    try:
        m = read_json(path / S.MANIFEST)  # a regular file of bounded size: no FIFO, device or link
    except (OSError, ValueError):
        return False
    return isinstance(m, dict) and m.get("pretrained") is True and (m.get("evaluation") or {}).get("kind") == "pretrained"


@dataclass(frozen=True)
class Destination:
    """Run folders ``names`` under ``out`` that :func:`check_destination` found free to write (or, with ``force``,
    to replace): what a command checked once, before loading a model, handed to the capture that writes them."""

    out: Path
    names: tuple[str, ...]
    force: bool
    cli: bool = False  # checked for the command line: a refusal names --force and --out


def destination(out: "str | Path | Destination", names: Sequence[str], force: bool) -> Destination:
    """``out`` as checked for ``names``: a :class:`Destination` checked for them passes as it is (one check a
    command); a path is checked now (:func:`check_destination`)."""
    if isinstance(out, Destination):
        if out.names != tuple(names) or out.force != force:
            raise ValueError(f"{out.out}: checked for {out.names} (force={out.force}), written as {tuple(names)} "
                             f"(force={force})")
        return out
    return check_destination(Path(out), names, force)


def check_destination(out: Path, names: Sequence[str], force: bool, cli: bool = False) -> Destination:
    """Refuse, before any work, run folders under ``out`` that exist: without ``force`` any of
    them; with ``force`` any that is not a complete run written by capture. The refusal names the
    option to give: ``--force`` and ``--out`` for the command line (``cli``), else ``force=True`` and ``out``.
    Returns the checked :class:`Destination`."""
    force_, out_ = ("--force", "--out") if cli else ("force=True", "out")
    if out.exists() and not out.is_dir():
        raise RoutestatsError(f"{out}: is a file; {out_} names a folder for the runs")
    if out.is_dir() and out.resolve() != out.resolve().parent and os.stat(out).st_dev != os.stat(out.resolve().parent).st_dev:
        raise RoutestatsError(f"{out}: is a mount point; the runs are written beside {out_} and moved in, which cannot "
                              f"cross file systems: name a folder inside it ({out_} {out / 'runs'})")
    refuse_taken(out, names, force, force_, out_)
    return Destination(out, tuple(names), force, cli)


def refuse_taken(out: Path, names: Sequence[str], force: bool, force_: str = "force=True", out_: str = "out") -> None:
    """Refuse run folders ``out/<name>`` that exist: without ``force`` any of them; with ``force`` any that is not a
    complete run written by capture, or that holds a user's files. Checked before any work
    (:func:`check_destination`) and again at the swap (:func:`staging`): a folder made or changed meanwhile that this
    rule refuses is never replaced (with ``force``, a capture run is, as it would have been before)."""
    for name in names:
        p = out / name
        if not p.exists():
            continue
        if not force:
            raise RoutestatsError(f"{p}: exists; pass {force_} to replace it (only a run written by capture is "
                                  "replaced, once the new runs are complete)")
        if not p.is_dir() or not is_capture_run(p):
            raise RoutestatsError(f"{p}: exists and is not a run written by capture (a trained run or other files); "
                                  f"choose another {out_}")
        check_replaceable(p, out_)  # a capture run with a user's files inside: refused too


def keep_runs(tmp: Path, out: Path, names: Sequence[str]) -> Path:
    """Move the finished runs ``tmp/<name>`` into a new folder beside ``out`` (``<out>.capture-<pid>-*``, readable
    like ``out``) and return it; where that cannot be done, ``tmp`` itself, which then holds them all (any moved
    already are moved back)."""
    moved: list[str] = []
    try:
        kept = Path(tempfile.mkdtemp(prefix=f"{out.name}.capture-{os.getpid()}-", dir=out.parent))
        kept.chmod(usual_mode(folder=True))  # mkdtemp's 0700: as the user's umask makes folders
        for name in names:
            (tmp / name).rename(kept / name)
            moved.append(name)
        return kept
    except OSError:
        for name in moved:
            with contextlib.suppress(OSError):
                (kept / name).rename(tmp / name)
        return tmp


def echo_notice(line: str) -> None:
    print(line, file=sys.stderr)


def sweep_partials(out: Path) -> None:
    """Remove the partial folders of captures into ``out`` whose process is gone (everything in one was
    written by that capture), beside ``out`` and where earlier releases put them (inside ``out``)."""
    from routestats.rundir.replace import process_alive

    for p in [*out.parent.glob(f".{out.name}.capture-partial-*"), *out.glob(".capture-partial-*")]:
        try:
            pid = int(p.name.split("capture-partial-")[1].split("-")[0])
        except (IndexError, ValueError):
            continue
        if p.is_dir() and not p.is_symlink() and not process_alive(pid):
            shutil.rmtree(p, ignore_errors=True)


@contextlib.contextmanager
def staging(dest: Destination):
    """A temporary folder beside ``dest.out`` (``.<out>.capture-partial-<pid>-*``, never inside it) for the new runs;
    on success each replaces ``out/<name>`` (an earlier run loses only the files its manifest proves it wrote,
    :func:`routestats.rundir.replace.replace_folder`); on failure nothing under ``out`` changes (a folder ``out``
    made for this capture is removed again), and a failed write says so naming ``out``. Partial folders of
    captures that died are swept at the next start.

    The destination is checked again at the swap (:func:`refuse_taken`, as ``dest`` was checked before the work): a
    folder that appeared at ``out/<name>`` meanwhile (a trained run, a user's files; any folder without ``force``)
    is refused in one line, nothing under ``out`` is replaced, and the new runs are kept beside it
    (``<out>.capture-<pid>``), named in the refusal."""
    import pyarrow as pa

    out, names = dest.out, dest.names
    made = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        sweep_partials(out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.capture-partial-{os.getpid()}-", dir=out.parent))
    except OSError as exc:
        raise RoutestatsError(f"{out}: cannot create the runs' folder ({exc.strerror or exc})") from None
    ok = keep = False
    try:
        try:
            yield tmp
        except (OSError, pa.ArrowException) as exc:  # a full disk, a vanished folder: the writers' own words name no path
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else first_line(exc)
            reason = re.sub(r".*\[errno \d+\] ", "", reason)  # Arrow's "Error writing bytes ... [errno 28] ..."
            raise RoutestatsError(f"{out}: could not write the runs ({reason}); nothing was changed") from None
        from routestats.rundir.replace import replace_folder
        from routestats.rundir.ownership import written_by_runs

        try:
            refuse_taken(out, names, dest.force, *(("--force", "--out") if dest.cli else ()))
        except (RoutestatsError, OSError) as exc:  # made or changed during the capture: kept as it is, new runs too
            kept = keep_runs(tmp, out, names)
            if kept == tmp:
                keep = True  # the staging folder itself holds them: not removed below
            why = str(exc) if isinstance(exc, RoutestatsError) else f"{out}: cannot be checked ({exc})"
            raise RoutestatsError(f"{why}; it appeared or changed during the capture, so nothing under {out} was "
                                  f"replaced: the new runs are in {kept}") from None
        for name in names:
            dst = out / name
            replace_folder(tmp / name, dst, written_by_runs(dst) if dst.exists() else {}, echo_notice)
        ok = True
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
        if made and not ok:
            with contextlib.suppress(OSError):
                out.rmdir()  # only if empty
