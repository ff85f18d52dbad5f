"""Reading and validating a run's manifest (``run.json``) and a Parquet file's schema against the
contract (:mod:`routestats.rundir.schema`): every refusal names the file and the key."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pyarrow as pa

from routestats.errors import IncompleteRunError, RunFormatError, SchemaVersionError
from routestats.rundir import schema as S
from routestats.rundir.verify import run_file

__all__ = ["read_manifest", "read_json", "read_regular", "check_schema", "model_folders"]

MAX_JSON_BYTES = 64 << 20  # a manifest or index larger than this is refused before parsing
MAX_JSON_DEPTH = 32  # nesting deeper than any file routestats writes (run.json: 5)


def _depth(value, limit: int) -> int:
    """Nesting depth of parsed JSON, stopping once past ``limit`` (iterative: no recursion to exhaust)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            return deepest
        if isinstance(v, dict):
            stack += [(x, d + 1) for x in v.values()]
        elif isinstance(v, list):
            stack += [(x, d + 1) for x in v]
    return deepest


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` when it is a regular file (not a link, FIFO, device or folder) of at most ``limit``
    bytes, read without following a link at its last step and without blocking on a FIFO; else a
    :class:`RunFormatError` in one line. ``OSError`` when it cannot be opened at all.

    >>> read_regular(Path("/dev/zero"), 10)
    Traceback (most recent call last):
    ...
    routestats.errors.RunFormatError: /dev/zero: not a regular file (a character device); refused
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a character device" if stat.S_ISCHR(st.st_mode)
                    else "a block device" if stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                    else "a folder" if stat.S_ISDIR(st.st_mode) else "not a file")
            raise RunFormatError(f"{path}: not a regular file ({kind}); refused")
        if st.st_size > limit:
            raise RunFormatError(f"{path}: {st.st_size / 2**20:,.1f} MB, more than the {limit / 2**20:,.0f} MB such "
                                 "a file may hold")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while read
        raise RunFormatError(f"{path}: more than the {limit / 2**20:,.0f} MB such a file may hold")
    return data


def read_json(path: Path, limit: int = MAX_JSON_BYTES):
    """Parse a JSON file of a run (its manifest, an operator index, a report marker): a regular file (no link,
    FIFO or device: :func:`read_regular`) of UTF-8, at most ``limit`` bytes (:data:`MAX_JSON_BYTES`), nested at
    most :data:`MAX_JSON_DEPTH` deep; anything else is a :class:`RunFormatError` naming the file, in one line."""
    try:
        raw = read_regular(path, limit)
        value = json.loads(raw.decode("utf-8-sig"))
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the last step is a link (O_NOFOLLOW)
            raise RunFormatError(f"{path}: is a link; refused (a run's own JSON files are regular files)") from None
        raise RunFormatError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunFormatError(f"{path}: not valid UTF-8 JSON ({exc})") from None
    except RecursionError:
        raise RunFormatError(f"{path}: JSON nested too deeply to read") from None
    if _depth(value, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise RunFormatError(f"{path}: JSON nested more than {MAX_JSON_DEPTH} levels deep")
    return value


def read_manifest(path: Path) -> dict:
    """The validated manifest (``run.json``) of the run directory ``path``; a one-line error otherwise."""
    mpath = path / S.MANIFEST
    if not path.is_dir():
        raise RunFormatError(f"{path}: not a directory")
    if not mpath.is_file():
        raise IncompleteRunError(
            f"{path}: no {S.MANIFEST}; the run is incomplete (still being written or killed)"
        )
    manifest = read_json(mpath)
    if not isinstance(manifest, dict):
        raise RunFormatError(f"{mpath}: expected a JSON object")
    version = manifest.get("schema_version")
    if not isinstance(version, str):
        raise SchemaVersionError(
            f"{mpath}: schema_version must be a string such as \"{S.SCHEMA_VERSION}\", got {version!r} "
            f"({type(version).__name__})"
        )
    if version not in S.SUPPORTED_SCHEMA_VERSIONS:
        raise SchemaVersionError(
            f"{mpath}: schema_version {version!r} is not supported "
            f"(this routestats reads {', '.join(S.SUPPORTED_SCHEMA_VERSIONS)})"
        )
    for key, typ in S.MANIFEST_REQUIRED.items():
        if key not in manifest:
            raise RunFormatError(f"{mpath}: missing key {key!r}")
        if not isinstance(manifest[key], typ):
            raise RunFormatError(
                f"{mpath}: key {key!r} must be {typ.__name__}, got {type(manifest[key]).__name__}"
            )
    if "seed" not in manifest or not (manifest["seed"] is None or isinstance(manifest["seed"], int)):
        raise RunFormatError(f"{mpath}: key 'seed' must be an integer or null")
    _check_fields(mpath, manifest["fields"])
    _check_attention(mpath, manifest)
    _check_files(path, mpath, manifest["files"])
    return manifest


def _check_fields(mpath: Path, fields: dict) -> None:
    named = fields.get("named")
    if not isinstance(named, dict) or not named:
        raise RunFormatError(f"{mpath}: fields.named must be a non-empty object id -> name")
    try:
        ids = [int(k) for k in named]
    except ValueError:
        raise RunFormatError(f"{mpath}: fields.named keys must be integer ids, got {list(named)}") from None
    vocab = fields.get("vocab_size")
    if not isinstance(vocab, int) or vocab <= max(ids):
        raise RunFormatError(
            f"{mpath}: fields.vocab_size must be an integer > every named id ({max(ids)}), got {vocab!r}"
        )
    if min(ids) < 0:
        raise RunFormatError(f"{mpath}: fields.named has a negative id {min(ids)}")


def _check_attention(mpath: Path, manifest: dict) -> None:
    att = manifest["attention"]
    steps = att.get("steps", {})
    if not isinstance(steps, dict):
        raise RunFormatError(f"{mpath}: attention.steps must map step -> list of forms")
    for st, forms in steps.items():
        if not str(st).isdigit() or not isinstance(forms, list) or any(f not in S.ATTENTION_FORMS for f in forms):
            raise RunFormatError(f"{mpath}: attention.steps[{st!r}] = {forms!r} is not a list of {S.ATTENTION_FORMS}")
    if not isinstance(att.get("causal", False), bool):
        raise RunFormatError(f"{mpath}: attention.causal must be true or false, got {att.get('causal')!r}")
    if not isinstance(manifest.get("pretrained", False), bool):
        raise RunFormatError(f"{mpath}: pretrained must be true or false, got {manifest.get('pretrained')!r}")
    if steps and att.get("dtype") not in S.ATTENTION_DTYPES:
        raise RunFormatError(f"{mpath}: attention.dtype {att.get('dtype')!r} is not one of {S.ATTENTION_DTYPES}")


def _check_files(path: Path, mpath: Path, files: list) -> None:
    seen = set()
    for entry in files:
        if not isinstance(entry, dict) or "path" not in entry or "sha256" not in entry:
            raise RunFormatError(f"{mpath}: every files entry needs 'path' and 'sha256'")
        if not is_sha256(entry["sha256"]):
            raise RunFormatError(f"{mpath}: files entry {entry['path']!r} has no 64-hex-digit sha256")
        if "parts" in entry:
            check_parts(mpath, entry)
        p = run_file(path, entry["path"])
        if entry["path"] in seen:
            raise RunFormatError(f"{mpath}: lists {entry['path']} twice")
        seen.add(entry["path"])
        if not p.is_file():
            raise RunFormatError(f"{mpath}: lists {entry['path']} but that file is missing")


MAX_PART_BYTES = 64 << 20
"""The largest piece a ``parts`` entry may declare: a reader holds a piece in memory to hash it before handing out
any of its bytes (the writer uses :data:`routestats.rundir.schema.VERIFY_PART_BYTES`, 8 MiB)."""


def is_sha256(v) -> bool:
    """Whether ``v`` is a SHA-256 hex digest as run.json writes them (64 lower-case hex digits).

    >>> is_sha256("0" * 64), is_sha256("0" * 63), is_sha256("G" * 64), is_sha256(None)
    (True, False, False, False)
    """
    return isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v)


def check_parts(mpath, entry: dict) -> None:
    """A ``files`` entry's ``parts``: a piece size (at most :data:`MAX_PART_BYTES`) and one 64-hex-digit
    SHA-256 per piece of its ``bytes``.

    >>> check_parts("run.json", {"path": "a", "bytes": 5, "parts": {"bytes": 2, "sha256": ["0" * 64] * 3}})
    >>> check_parts("run.json", {"path": "a", "bytes": 5, "parts": {"bytes": 2, "sha256": ["0" * 64] * 2}})
    Traceback (most recent call last):
    ...
    routestats.errors.RunFormatError: run.json: files entry 'a' lists 2 part digests for 5 bytes in parts of 2 bytes; 3 expected
    """
    parts, size = entry["parts"], entry.get("bytes")
    piece = parts.get("bytes") if isinstance(parts, dict) else None
    digests = parts.get("sha256") if isinstance(parts, dict) else None
    if not (isinstance(piece, int) and not isinstance(piece, bool) and piece > 0 and isinstance(digests, list)
            and isinstance(size, int) and not isinstance(size, bool) and size >= 0):
        raise RunFormatError(f"{mpath}: files entry {entry['path']!r} needs 'bytes' and parts "
                             "{'bytes': piece size, 'sha256': [one digest per piece]}")
    if piece > MAX_PART_BYTES:  # it would be read whole into memory to be hashed
        raise RunFormatError(f"{mpath}: files entry {entry['path']!r} declares pieces of {piece} bytes; at most "
                             f"{MAX_PART_BYTES} are read")
    want = -(-size // piece)
    if len(digests) != want:
        raise RunFormatError(f"{mpath}: files entry {entry['path']!r} lists {len(digests)} part digests for {size} "
                             f"bytes in parts of {piece} bytes; {want} expected")
    if not all(is_sha256(d) for d in digests):
        raise RunFormatError(f"{mpath}: files entry {entry['path']!r} has a part digest that is not 64 hex digits")


def check_schema(fname: str, actual: pa.Schema, expected: pa.Schema, required=None) -> None:
    """Refuse a Parquet file whose columns lack one of ``required`` or carry another type than ``expected``."""
    required = expected.names if required is None else required
    for f in expected:
        if f.name not in actual.names:
            if f.name in required:
                raise RunFormatError(f"{fname}: missing column {f.name!r}")
            continue
        got = actual.field(f.name).type
        if not got.equals(f.type):
            raise RunFormatError(f"{fname}: column {f.name!r} has type {got}, expected {f.type}")


def model_folders(root: str | Path) -> list[Path]:
    """The folders directly below ``root`` that hold ``operators/index.json``, sorted by name.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> (root / "a" / "operators").mkdir(parents=True); _ = (root / "a" / "operators" / "index.json").write_text("{}")
    >>> (root / "notes").mkdir()
    >>> [p.name for p in model_folders(root)]
    ['a']
    """
    root = Path(root)
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
                  and (p / S.OPERATOR_DIR / S.OPERATOR_INDEX).is_file())
