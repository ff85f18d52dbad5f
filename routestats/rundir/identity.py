"""Identity by content: what a rerun may keep is proved by the SHA-256 of the inputs that made it, never by a name.

Every writer that resumes (capture shards, regime operating points, MoFA runs) records :func:`input_identity` of
the files it read -- model weights and config, tokenizer files, records, prompts, domain files -- beside its
options, and keeps an earlier result only where the identity it recorded equals the identity of the inputs now
(:func:`changed_inputs` names what differs). A file edited under the same path, or another model's folder of the
same architecture, is a different input.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "prompts.txt").write_text("a prompt")
>>> before = input_identity(prompts=d / "prompts.txt")
>>> _ = (d / "prompts.txt").write_text("another prompt")
>>> changed_inputs(before, input_identity(prompts=d / "prompts.txt"))
['prompts']
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Mapping

from routestats.rundir.atomic import sha256_file

__all__ = ["identity_of_files", "content_sha256", "input_identity", "changed_inputs"]


def identity_of_files(files, root=None) -> str:
    """SHA-256 of the sorted ``name:sha256`` lines of ``files`` (name: the path relative to ``root`` when given,
    else the file's own name: the recipe of a pretrained model's init_id and of :func:`content_sha256`)."""
    name = (lambda f: Path(f).relative_to(root).as_posix()) if root is not None else (lambda f: Path(f).name)
    lines = sorted(f"{name(f)}:{sha256_file(f)}" for f in files)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def content_sha256(path) -> str:
    """SHA-256 of a file's bytes; of a folder, SHA-256 of the ``relative/path:sha256`` lines of every regular file
    under it (links to files followed, as a model loader follows them; hidden entries such as ``.cache`` and links
    to folders left out), sorted: the same files with the same bytes give the same identity wherever they lie."""
    p = Path(path)
    if not p.is_dir():
        return sha256_file(p)
    found = []
    for root, dirs, files in os.walk(p, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [Path(root) / name for name in files if not name.startswith(".") and (Path(root) / name).is_file()]
    return identity_of_files(found, root=p)


def input_identity(**paths) -> dict[str, str | None]:
    """``name -> content_sha256(path)`` of each input a result was made from (``None`` for an input not given)."""
    return {name: (None if p is None else content_sha256(p)) for name, p in sorted(paths.items())}


def changed_inputs(kept: Mapping | None, now: Mapping) -> list[str]:
    """The inputs whose identity differs between what a kept result recorded and the inputs now (every one, when
    the result recorded none: it proves nothing)."""
    kept = kept if isinstance(kept, Mapping) else {}
    return sorted(k for k in set(kept) | set(now) if kept.get(k) != now.get(k))
