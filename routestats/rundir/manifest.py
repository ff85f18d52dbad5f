"""Reading and validating a run's manifest (``run.json``) and a Parquet file's schema against the
contract (:mod:`routestats.rundir.schema`): every refusal names the file and the key."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from routestats.errors import IncompleteRunError, RunFormatError, SchemaVersionError
from routestats.rundir import schema as S
from routestats.rundir.verify import run_file

__all__ = ["read_manifest"]


def _read_manifest(path: Path) -> dict:
    mpath = path / S.MANIFEST
    if not path.is_dir():
        raise RunFormatError(f"{path}: not a directory")
    if not mpath.is_file():
        raise IncompleteRunError(
            f"{path}: no {S.MANIFEST}; the run is incomplete (still being written or killed)"
        )
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunFormatError(f"{mpath}: not valid UTF-8 JSON ({exc})") from None
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
        sha = entry["sha256"]
        if not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
            raise RunFormatError(f"{mpath}: files entry {entry['path']!r} has no 64-hex-digit sha256")
        p = run_file(path, entry["path"])
        if entry["path"] in seen:
            raise RunFormatError(f"{mpath}: lists {entry['path']} twice")
        seen.add(entry["path"])
        if not p.is_file():
            raise RunFormatError(f"{mpath}: lists {entry['path']} but that file is missing")


def _check_schema(fname: str, actual: pa.Schema, expected: pa.Schema, required=None) -> None:
    required = expected.names if required is None else required
    for f in expected:
        if f.name not in actual.names:
            if f.name in required:
                raise RunFormatError(f"{fname}: missing column {f.name!r}")
            continue
        got = actual.field(f.name).type
        if not got.equals(f.type):
            raise RunFormatError(f"{fname}: column {f.name!r} has type {got}, expected {f.type}")


read_manifest = _read_manifest
