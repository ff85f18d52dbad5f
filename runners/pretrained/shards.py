"""A capture split into shards of records, each captured as a job (submitit locally or on SLURM, one GPU each),
then merged into one run per condition (``python -m runners capture ... --shards N --launcher ...``).

The shards live beside ``out`` in ``.<out>.capture-shards/`` (``shard-<i>/<condition>``, complete capture runs)
with ``shards.json``, the identity of the command (model, records, options). Rerunning the same command skips
every shard whose runs are complete and verified, so a killed job costs only its own shard; a folder holding the
shards of another command is refused, never reused. The merge reads the shards' stored attention back in record
order (:func:`runners.pretrained.capture.shard_captures`) into runs written exactly as an unsharded capture
writes them: the same examples, data-order identity, weights identity and per-example values (tested: every
table of the report equal).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Sequence

from routestats.errors import RoutestatsError

from runners.launch import Job, SequentialLauncher
from runners.pretrained.capture import capture_runs, check_destination
from runners.pretrained.seam import Condition

__all__ = ["SPEC", "shard_bounds", "shard_complete", "capture_shard", "capture_in_shards"]

SPEC = "shards.json"


def shard_bounds(n: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous record ranges, as even as they can be.

    >>> shard_bounds(10, 3)
    [(0, 4), (4, 7), (7, 10)]
    """
    if not 1 <= shards <= n:
        raise RoutestatsError(f"--shards must be between 1 and the {n} records, got {shards}")
    size, extra = divmod(n, shards)
    starts = [i * size + min(i, extra) for i in range(shards + 1)]
    return list(zip(starts[:-1], starts[1:]))


def shard_complete(folder: Path, names: Sequence[str]) -> bool:
    """Every condition's run under ``folder`` is complete: its manifest loads and every file's SHA-256 matches."""
    from routestats.errors import RunFormatError
    from routestats.rundir.read import load_run

    try:
        return all(load_run(folder / n).validate(deep=True) for n in names)
    except (RunFormatError, RoutestatsError, OSError):
        return False


def capture_shard(model: str, records: list, out: str, capture: dict, threads: int = 1) -> str:
    """One shard's job: ``records`` captured into ``out/<condition>`` ("captured"), or "skipped" when complete."""
    import torch

    from runners.pretrained.load import load_model

    names = [c.name for c in capture.get("conditions", (Condition(),))]
    if shard_complete(Path(out), names):
        return "skipped"
    torch.set_num_threads(threads)
    loaded = load_model(model).to(capture.get("device", "cpu"))
    capture_runs(loaded, records, out, force=True, **capture)
    return "captured"


def _identity(model, records, capture: dict, shards: int) -> dict:
    texts = [[r.label, [list(f) for f in r.fields]] for r in records]
    opts = {k: ([vars(c) | {"ablate": [list(a) for a in c.ablate]} for c in v] if k == "conditions" else v)
            for k, v in sorted(capture.items())}
    return {"model": str(Path(model).resolve()), "shards": shards,
            "records": hashlib.sha256(json.dumps(texts, ensure_ascii=False).encode()).hexdigest(),
            "options": json.loads(json.dumps(opts, default=str))}


def capture_in_shards(model, records: Sequence, out, *, shards: int, launcher=None, force: bool = False,
                      threads: int = 1, echo=print, **capture) -> list[Path]:
    """Capture ``records`` with ``model`` (a folder) in ``shards`` jobs run by ``launcher`` (a
    :mod:`runners.launch` launcher; default: one after another here) and merge them into ``out/<condition>``.

    ``capture`` holds :func:`runners.pretrained.capture.capture_runs`' options (conditions, cap, forms, ...).
    A failed shard is named in one line; the finished ones are kept for the rerun.
    """
    from routestats.rundir.atomic import write_json_atomic

    from runners.pretrained.load import load_model

    out, records = Path(out), list(records)
    names = [c.name for c in capture.get("conditions", (Condition(),))]
    bounds = shard_bounds(len(records), shards)
    check_destination(out, names, force)
    work = out.parent / f".{out.name}.capture-shards"
    spec = _identity(model, records, capture, shards)
    if work.exists():
        try:
            same = json.loads((work / SPEC).read_text()) == spec
        except (OSError, ValueError):
            same = False
        if not same:
            raise RoutestatsError(f"{work}: holds the shards of another capture (other model, records or options); "
                                  "remove it to start this one")
    else:
        work.mkdir(parents=True)
        write_json_atomic(work / SPEC, spec)
    jobs = [Job(f"shard-{i}", capture_shard, dict(model=str(model), records=records[a:b], out=str(work / f"shard-{i}"),
                                                  capture=capture, threads=threads))
            for i, (a, b) in enumerate(bounds)]
    results = (launcher or SequentialLauncher()).run(jobs)
    bad = [r for r in results if not r.ok]
    if bad:
        where = f" (log: {bad[0].log})" if bad[0].log else ""
        raise RoutestatsError(f"{len(bad)} of {shards} shards failed, {bad[0].name}: {bad[0].error}{where}; rerun the "
                              "same command: finished shards are kept")
    echo(f"shards: {sum(r.value == 'captured' for r in results)} captured, "
         f"{sum(r.value == 'skipped' for r in results)} already complete; merging")
    loaded = load_model(model)
    merge = {k: v for k, v in capture.items() if k != "device"}
    paths = capture_runs(loaded, records, out, force=force, shards=[(a, work / f"shard-{i}")
                                                                    for i, (a, _) in enumerate(bounds)], **merge)
    for i in range(shards):  # everything here was written by this command: its spec, its shard runs, their logs
        shutil.rmtree(work / f"shard-{i}", ignore_errors=True)
    shutil.rmtree(work / "submitit", ignore_errors=True)
    (work / SPEC).unlink(missing_ok=True)
    try:
        work.rmdir()
    except OSError:
        echo(f"note: {work} keeps files this capture did not write; left in place")
    return paths
