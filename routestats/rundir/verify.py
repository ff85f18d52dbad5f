"""What is read is what the manifest describes: SHA-256 verification with remembered stamps.

Every file an analysis reads is checked against the SHA-256 its run's ``run.json`` records
before its first byte is used. Hashing costs about one pass over the file (0.5-1 GB/s here),
so a verified file is remembered by a *stamp* keyed by its resolved path, size, modification
and change times (ns) and inode: in this process, and on disk under :func:`cache_dir` ``/stamps``.
A stamp is used only while all five are unchanged; any change (a rewrite, a touch, a copy)
hashes the file again. ``ROUTESTATS_CACHE=off`` disables the on-disk stamps (and the metrics
cache); the in-process stamps always apply.

Everything the caches hold is *sealed* (:func:`seal`): an HMAC-SHA256 under a secret that only
this user can read (``cache_dir()/secret``, mode 0600, made on first use) over the entry's key and
content. A stamp, metric-cache entry or cached report whose seal does not match -- edited, planted,
copied from elsewhere, or with a file missing -- is ignored and computed afresh, never served.

Manifest paths must be relative, normalised and inside the run; anything else is refused
before any file is opened (:func:`run_file`).

Examples
--------
>>> from pathlib import Path
>>> run_file(Path("/runs/a"), "attention/step=000010/matrices.parquet")
PosixPath('/runs/a/attention/step=000010/matrices.parquet')
>>> run_file(Path("/runs/a"), "../b/examples.parquet")
Traceback (most recent call last):
...
routestats.errors.RunFormatError: /runs/a/run.json: file path '../b/examples.parquet' is not a normalised relative path inside the run
"""

from __future__ import annotations

import hashlib
import hmac
import os
import posixpath
from pathlib import Path

from routestats.errors import RunFormatError
from routestats.rundir.atomic import sha256_file

__all__ = ["cache_dir", "file_stamp", "inside", "run_file", "verified_sha256", "seal", "sealed"]

_STAMPS: dict[tuple, str] = {}


def cache_dir() -> Path | None:
    """Folder of the on-disk caches (metrics, stamps), or None when disabled.

    ``ROUTESTATS_CACHE`` = a folder, or ``off``; default ``$XDG_CACHE_HOME/routestats``
    (``~/.cache/routestats``).
    """
    v = os.environ.get("ROUTESTATS_CACHE", "")
    if v.lower() in ("0", "off", "no", "false", "none"):
        return None
    if v:
        return Path(v)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "routestats"


def inside(folder: Path, rel: object, source: object, what: str = "the run", links: bool = True,
           checked: set | None = None) -> Path:
    """``folder / rel`` when ``rel`` (a path named by the file ``source``: a manifest, a report marker) is a
    normalised relative POSIX path that stays inside ``folder``; else a :class:`RunFormatError` in one line.

    The one containment rule of every path a run or report file names: not absolute, no ``..``, ``.``, empty
    step, backslash or NUL, and -- resolved -- inside ``folder``. With ``links=False`` (a path to *remove*) no
    step below ``folder`` may be a link at all, whether it leads in or out.

    >>> inside(Path("/r"), "tables/a.csv", "/r/.marker")
    PosixPath('/r/tables/a.csv')
    >>> inside(Path("/r"), "/etc/passwd", "/r/.marker", "the report folder")
    Traceback (most recent call last):
    ...
    routestats.errors.RunFormatError: /r/.marker: file path '/etc/passwd' is not a normalised relative path inside the report folder
    """
    ok = (isinstance(rel, str) and rel != "" and not rel.startswith("/") and "\\" not in rel and "\x00" not in rel
          and posixpath.normpath(rel) == rel and not rel.startswith("../") and rel != "..")
    if not ok:
        raise RunFormatError(f"{source}: file path {rel!r} is not a normalised relative path inside {what}")
    p = Path(folder) / rel
    if not links:
        # no step below ``folder`` a link and a normalised path without "..": ``p`` lies inside ``folder`` (``p``
        # itself may be a link: it is removed, never followed), so nothing is resolved. ``checked`` holds the steps a
        # caller has proved already (a marker of 400,000 entries checked its shared folders once each: 522 s before)
        base, step = os.fspath(folder), ""
        for part in rel.split("/")[:-1]:  # string steps: a Path per step cost 25 us an entry
            step = f"{step}/{part}" if step else part
            if checked is not None and step in checked:
                continue
            if os.path.islink(os.path.join(base, step)):
                raise RunFormatError(f"{source}: file path {rel!r} passes through a link ({part}); refused")
            if checked is not None:
                checked.add(step)
        return p
    try:
        ok = p.resolve().is_relative_to(Path(folder).resolve()) or (not links and p.is_symlink())
    except OSError:
        ok = False
    if not ok:
        raise RunFormatError(f"{source}: file path {rel!r} leads outside {what} (a link?)")
    return p


def run_file(run_path: Path, rel: object) -> Path:
    """The path of manifest entry ``rel`` inside ``run_path``; refuses absolute, non-normalised
    or escaping paths (``..``, backslashes, links that lead outside the run): :func:`inside`."""
    return inside(run_path, rel, run_path / "run.json")


def file_stamp(path: Path) -> tuple:
    """(resolved path, size, mtime ns, ctime ns, inode): what must stay the same for an earlier hash
    (or a report cached from the file, :mod:`reports.cache`) to stand for the file."""
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


_SECRET: dict[str, bytes] = {}


def _secret(folder: Path) -> bytes | None:
    """The cache's sealing key (32 random bytes, readable by this user only), made on first use."""
    key = str(folder)
    if key not in _SECRET:
        path = folder / "secret"
        try:
            if not path.is_file():
                folder.mkdir(parents=True, exist_ok=True)
                tmp = folder / f".secret.{os.getpid()}.tmp"
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(os.urandom(32))
                try:
                    os.link(tmp, path)  # first writer wins; the others read its key
                except FileExistsError:
                    pass
                os.unlink(tmp)
            st = path.stat()
            if st.st_size != 32 or (st.st_mode & 0o077) or st.st_uid != os.getuid():
                return None  # readable or writable by others (or not ours): nothing sealed with it is trusted
            _SECRET[key] = path.read_bytes()
        except OSError:
            return None
    return _SECRET.get(key)


def seal(name: str, data: bytes) -> str | None:
    """The seal of a cache entry ``name`` holding ``data`` (None when the cache has no usable secret).

    >>> import tempfile, os
    >>> os.environ["ROUTESTATS_CACHE"] = tempfile.mkdtemp()
    >>> tag = seal("entry", b"abc")
    >>> sealed("entry", b"abc", tag), sealed("entry", b"abd", tag), sealed("other", b"abc", tag)
    (True, False, False)
    >>> del os.environ["ROUTESTATS_CACHE"]
    """
    folder = cache_dir()
    secret = None if folder is None else _secret(folder)
    if secret is None:
        return None
    return hmac.new(secret, name.encode() + b"\0" + data, hashlib.sha256).hexdigest()


def sealed(name: str, data: bytes, tag: str | None) -> bool:
    """Whether ``tag`` is the seal of entry ``name`` holding ``data``."""
    want = seal(name, data)
    return want is not None and isinstance(tag, str) and hmac.compare_digest(want, tag)


def verified_sha256(path: Path) -> str:
    """SHA-256 of ``path``, from a stamp when the file is unchanged since it was last hashed."""
    key = file_stamp(path)
    if key in _STAMPS:
        return _STAMPS[key]
    folder = cache_dir()
    stamp = None
    if folder is not None:
        stamp = folder / "stamps" / hashlib.sha256(repr(key).encode()).hexdigest()
        try:  # "<digest> <seal over the stat key and digest>": a planted or edited stamp is ignored
            digest, tag = (stamp.read_text().split() + [""])[:2]
            if len(digest) == 64 and sealed(repr(key), digest.encode(), tag) and file_stamp(path) == key:
                _STAMPS[key] = digest
                return digest
        except (OSError, ValueError):
            pass
    digest = sha256_file(path)
    if file_stamp(path) != key:  # changed while being hashed: refuse to remember it
        raise RunFormatError(f"{path}: the file changed while it was being read")
    _STAMPS[key] = digest
    if stamp is not None:
        try:
            stamp.parent.mkdir(parents=True, exist_ok=True)
            tag = seal(repr(key), digest.encode())
            if tag is not None:
                tmp = stamp.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(f"{digest} {tag}")
                os.replace(tmp, stamp)
        except OSError:  # a read-only or full cache never breaks an analysis
            pass
    return digest
