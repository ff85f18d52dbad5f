"""Atomic file writes: temp file in the target folder, fsync, rename, fsync the folder.

Every file the project writes goes through :func:`atomic_path` (directly or through the
helpers below), so a killed process leaves either the old file or the new one, never a
half-written one. Temporary files are named ``.<name>.<random>.tmp`` beside the target.

Examples
--------
>>> import json, tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> write_json_atomic(d / "x.json", {"b": 1, "a": 2})
>>> json.loads((d / "x.json").read_text())
{'a': 2, 'b': 1}
>>> sorted(p.name for p in d.iterdir())
['x.json']
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:  # pyarrow is imported where a table is written: hashing and writing JSON need none of it
    import pyarrow as pa


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def usual_mode(folder: bool = False) -> int:
    """The mode a plain ``open``/``mkdir`` gives under the user's umask (0666 or 0777 minus it): what files and
    folders made by ``mkstemp``/``mkdtemp`` (0600/0700) are set to before they are published, so that a
    colleague or a web server can read a report as they can any other file the user writes."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if folder else 0o666) & ~umask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path; on clean exit it replaces ``path`` atomically.

    On an exception the temporary file is removed and ``path`` is left untouched.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    os.chmod(tmp_name, usual_mode())  # mkstemp creates 0600 files: the result gets the user's umask
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike, obj) -> None:
    """Write ``obj`` as indented JSON with sorted keys; NaN and infinity are refused."""
    text = json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n"
    write_text_atomic(path, text)


def write_table_atomic(path: str | os.PathLike, table: pa.Table, **options) -> None:
    """Write a pyarrow table to Parquet atomically (zstd, no dictionary by default)."""
    from routestats.rundir.schema import PARQUET_OPTIONS

    opts = {**PARQUET_OPTIONS, **options}
    with atomic_path(path) as tmp:
        import pyarrow.parquet as pq

        pq.write_table(table, tmp, **opts)


def sha256_parts(path: str | os.PathLike, part: int) -> tuple[str, list[str]]:
    """SHA-256 of a file and of each consecutive ``part``-byte piece of it, in one pass.

    >>> import tempfile, pathlib, hashlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "f"
    >>> _ = p.write_bytes(b"abcde")
    >>> whole, parts = sha256_parts(p, 2)
    >>> whole == sha256_file(p), parts == [hashlib.sha256(b).hexdigest() for b in (b"ab", b"cd", b"e")]
    (True, True)
    """
    whole, parts = hashlib.sha256(), []
    with open(path, "rb") as fh:
        while block := fh.read(part):
            whole.update(block)
            parts.append(hashlib.sha256(block).hexdigest())
    return whole.hexdigest(), parts


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """SHA-256 hex digest of a regular file, read in 1 MiB chunks; ``OSError`` for anything else (a FIFO, a
    device such as ``/dev/zero``, a folder), which is never read.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "f"
    >>> _ = p.write_bytes(b"abc")
    >>> sha256_file(p)[:16]
    'ba7816bf8f01cfea'
    """
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once instead of waiting for a writer
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO, device or folder: never read (it may never end)
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()
