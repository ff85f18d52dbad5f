"""Reading a few row groups of a large run file, verifying only the pieces that are read.

A file larger than :data:`routestats.rundir.schema.VERIFY_PART_BYTES` lists the SHA-256 of each
piece in its manifest entry (``parts``). :class:`PartVerifiedFile` is a read-only file object over it
that hands out no byte before the piece holding it matches its digest: the bytes a reader decodes are
the bytes that were verified (no window between checking a file and opening it), and reading one
example of a 1 GB matrices file hashes the footer's piece and the pieces of that example's row groups.

Examples
--------
>>> import hashlib, tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "f"
>>> _ = p.write_bytes(b"abcdefg")
>>> digests = [hashlib.sha256(b).hexdigest() for b in (b"abc", b"def", b"g")]
>>> with PartVerifiedFile(p, 7, 3, digests) as f:
...     _ = f.seek(4); f.read(2), sorted(f.verified)
(b'ef', [1])
>>> _ = p.write_bytes(b"abcdXfg")
>>> with PartVerifiedFile(p, 7, 3, digests) as f:
...     _ = f.seek(4); f.read(2)
Traceback (most recent call last):
...
routestats.errors.IntegrityError: ...: bytes 3-5 (piece 2 of 3) differ from their SHA-256 in run.json; the file changed after the run was written
"""

from __future__ import annotations

import hashlib
import io
import os
from collections import OrderedDict

from routestats.errors import IntegrityError

__all__ = ["PartVerifiedFile"]


class PartVerifiedFile(io.RawIOBase):
    """A read-only, seekable file object over ``path`` that verifies each ``part``-byte piece against
    ``digests`` before any byte of it is returned (a few verified pieces are kept for the next reads).

    ``verified`` holds the indices of the pieces checked so far (for provenance); ``failure``, the
    :class:`~routestats.errors.IntegrityError` of a piece that did not match (a reader such as Arrow may
    report it wrapped in its own error).
    """

    KEEP = 4  # pieces kept in memory: a Parquet reader goes back to the footer and forth to row groups

    def __init__(self, path: str | os.PathLike, size: int, part: int, digests: list[str]):
        super().__init__()
        self.name = str(path)
        self._fd = os.open(path, os.O_RDONLY)
        if os.fstat(self._fd).st_size != size:
            got = os.fstat(self._fd).st_size
            os.close(self._fd)
            raise IntegrityError(f"{path}: {got} bytes where run.json lists {size}; the file changed after the run "
                                 "was written")
        self._size, self._part, self._digests = size, part, digests
        self._pos = 0
        self._kept: OrderedDict[int, bytes] = OrderedDict()
        self.verified: set[int] = set()
        self.failure: IntegrityError | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def size(self) -> int:
        return self._size

    def _piece(self, i: int) -> bytes:
        data = self._kept.get(i)
        if data is not None:
            self._kept.move_to_end(i)
            return data
        start = i * self._part
        data = os.pread(self._fd, min(self._part, self._size - start), start)
        if hashlib.sha256(data).hexdigest() != self._digests[i]:
            self.failure = IntegrityError(f"{self.name}: bytes {start}-{start + len(data) - 1} (piece {i + 1} of "
                                          f"{len(self._digests)}) differ from their SHA-256 in run.json; the file "
                                          "changed after the run was written")
            raise self.failure
        self.verified.add(i)
        self._kept[i] = data
        if len(self._kept) > self.KEEP:
            self._kept.popitem(last=False)
        return data

    def read(self, n: int = -1) -> bytes:
        end = self._size if n is None or n < 0 else min(self._size, self._pos + n)
        out = []
        while self._pos < end:
            i = self._pos // self._part
            piece = self._piece(i)
            lo = self._pos - i * self._part
            chunk = piece[lo:lo + end - self._pos]
            out.append(chunk)
            self._pos += len(chunk)
        return b"".join(out)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
            self._kept.clear()
        super().close()

    def __reduce__(self):  # an open descriptor is not sent to another process
        raise TypeError("a PartVerifiedFile is not pickled")

