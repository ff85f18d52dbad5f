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
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from routestats.errors import RoutestatsError
from routestats.rundir.identity import content_sha256

from runners.launch import Job, SequentialLauncher
from runners.pretrained.capture import capture_runs, plan_for
from runners.pretrained.destination import destination
from runners.pretrained.options import CaptureOptions, with_options
from runners.pretrained.seam import Condition

__all__ = ["SPEC", "SHARD", "shard_bounds", "shard_complete", "capture_shard", "capture_in_shards", "slice_identity",
           "claim_work_folder", "check_shard_runs"]

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


SHARD = "shard.json"  # in each shard folder: its slice (first record, count, the records' hash) and the options


def capture_shard(model: str, records: list, out: str, conditions: Sequence[Condition], options: CaptureOptions,
                  threads: int = 1, first: int = 0, model_sha: str | None = None) -> str:
    """One shard's job: ``records`` (the slice from record ``first``) captured into ``out/<condition>``
    ("captured"), or "skipped" when its runs are complete and its ``shard.json`` proves the same model (the content
    of its folder: weights, config, tokenizer files; ``model_sha``, else computed here), slice, conditions and
    options. A shard folder that proves anything else (another model of the same architecture, weights replaced
    under the same path, another slice, other options, swapped in) is recaptured, never kept."""
    import torch

    from routestats.rundir.atomic import write_json_atomic
    from routestats.rundir.manifest import read_json

    from runners.pretrained.load import load_model

    names = [c.name for c in conditions]
    model_sha = model_sha or content_sha256(model)
    folder, want = Path(out), slice_identity(records, conditions, options, first, model_sha)
    try:
        same = read_json(folder / SHARD, 1 << 20) == want
    except (OSError, RoutestatsError):
        same = False
    if same and shard_complete(folder, names):
        return "skipped"
    if folder.is_symlink():
        folder.unlink()  # a link planted in the work folder: removed, never followed
    shutil.rmtree(folder, ignore_errors=True)  # the work folder's own shard: written by this kind of job only
    torch.set_num_threads(threads)
    loaded = load_model(model).to(options.device)
    capture_runs(loaded, records, out, conditions=conditions, options=options, force=True)
    write_json_atomic(folder / SHARD, want)
    return "captured"


def _options(conditions: Sequence[Condition], options: CaptureOptions) -> dict:
    conds = [vars(c) | {"ablate": [list(a) for a in c.ablate]} for c in conditions]
    return json.loads(json.dumps({"conditions": conds, **options.identity()}, default=str))


def _records_sha(records) -> str:
    texts = [[r.label, [list(f) for f in r.fields]] for r in records]
    return hashlib.sha256(json.dumps(texts, ensure_ascii=False).encode()).hexdigest()


def slice_identity(records, conditions: Sequence[Condition], options: CaptureOptions, first: int,
                   model_sha: str) -> dict:
    """What a shard folder must prove to be kept: the model's content (:func:`routestats.rundir.identity.
    content_sha256` of its folder or file), its first record, count, the records' SHA-256, the conditions and the
    options."""
    return {"model": model_sha, "first": int(first), "count": len(records), "records": _records_sha(records),
            "options": _options(conditions, options)}


def _identity(model, model_sha: str, records, conditions: Sequence[Condition], options: CaptureOptions,
              shards: int) -> dict:
    return {"model": str(Path(model).resolve()), "model_sha256": model_sha, "shards": shards,
            "records": _records_sha(records), "options": _options(conditions, options)}


def capture_in_shards(model, records: Sequence, out, *, shards: int, launcher=None, force: bool = False,
                      threads: int = 1, echo=print, conditions: Sequence[Condition] = (Condition(),),
                      options: CaptureOptions | None = None, **option_values) -> list[Path]:
    """Capture ``records`` with ``model`` (a folder) in ``shards`` jobs run by ``launcher`` (a
    :mod:`runners.launch` launcher; default: one after another here) and merge them into ``out/<condition>``.

    ``conditions`` and ``options`` (or single options by name) as for
    :func:`runners.pretrained.capture.capture_runs`. A failed shard is named in one line; the finished ones are
    kept for the rerun.
    """
    from runners.pretrained.load import load_model

    records = list(records)
    options, conditions = with_options(options, option_values), tuple(conditions)
    names = [c.name for c in conditions]
    bounds = shard_bounds(len(records), shards)
    dest = destination(out, names, force)  # checked here, or once by the command
    out = dest.out
    work = out.parent / f".{out.name}.capture-shards"
    model_sha = content_sha256(model)  # the model by its content: another model's shards are never merged
    claim_work_folder(work, _identity(model, model_sha, records, conditions, options, shards))
    jobs = [Job(f"shard-{i}", capture_shard, dict(model=str(model), records=records[a:b], out=str(work / f"shard-{i}"),
                                                  conditions=conditions, options=options, threads=threads,
                                                  first=a, model_sha=model_sha))
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
    check_shard_runs(loaded, records, work, bounds, conditions, options)
    paths = capture_runs(loaded, records, dest, conditions=conditions, options=replace(options, device="cpu"),
                         force=force, shards=[(a, work / f"shard-{i}") for i, (a, _) in enumerate(bounds)])
    for i in range(shards):  # everything here was written by this command: its spec, its shard runs, their logs
        shutil.rmtree(work / f"shard-{i}", ignore_errors=True)
    shutil.rmtree(work / "submitit", ignore_errors=True)
    (work / SPEC).unlink(missing_ok=True)
    try:
        work.rmdir()
    except OSError:
        echo(f"note: {work} keeps files this capture did not write; left in place")
    return paths


def claim_work_folder(work: Path, spec: dict) -> None:
    """The shards' folder for the capture ``spec`` names: made with its ``shards.json``, or kept when that file
    proves the same capture (a rerun); a link, or the shards of another capture, is refused in one line."""
    from routestats.rundir.atomic import write_json_atomic
    from routestats.rundir.manifest import read_json

    if work.is_symlink():
        raise RoutestatsError(f"{work}: is a link, not the shards' own folder; remove it")
    if not work.exists():
        work.mkdir(parents=True)
        write_json_atomic(work / SPEC, spec)
        return
    try:
        old = read_json(work / SPEC, 1 << 20)  # a regular file, bounded: no FIFO, device or link
    except (OSError, ValueError, RoutestatsError):
        old = None
    if old != spec:
        names = {"model": "the model's path", "model_sha256": "the model's content (weights, config or tokenizer "
                 "files)", "records": "the records", "options": "the options", "shards": "the number of shards"}
        what = [names.get(k, k) for k in spec if not isinstance(old, dict) or old.get(k) != spec[k]]
        raise RoutestatsError(f"{work}: holds the shards of another capture ({', '.join(what) or 'unreadable'} "
                              "differ); remove it to start this one")


def check_shard_runs(loaded, records: Sequence, work: Path, bounds, conditions: Sequence[Condition],
                     options: CaptureOptions) -> None:
    """Before the merge, every shard's runs must hold exactly its slice of ``records`` (tokens, fields and labels
    as this capture encodes them) captured under this command's conditions and options; a shard that holds
    anything else is removed and refused in one line (rerunning recaptures it), never merged."""
    from routestats.rundir.read import load_run

    plan = plan_for(loaded, records, options)
    want = plan.examples()
    for i, (a, b) in enumerate(bounds):
        folder = work / f"shard-{i}"
        for cond in conditions:
            run = load_run(folder / cond.name)
            ev = run.manifest.get("evaluation") if isinstance(run.manifest.get("evaluation"), dict) else {}
            got, part = run.examples(["tokens", "field_ids", "label"]), want.iloc[a:b]
            same = (len(got) == b - a and ev.get("bias") == cond.bias and ev.get("cap") == plan.cap
                    and ev.get("ablate") == [f"{x}.{y}" for x, y in cond.ablate] and ev.get("fields") == plan.names
                    and ev.get("special_tokens") == plan.special
                    and all(list(map(str, g)) == list(map(str, w)) for col in ("tokens", "field_ids")
                            for g, w in zip(got[col], part[col]))
                    and list(map(str, got["label"])) == list(part["label"]))
            if not same:
                shutil.rmtree(folder, ignore_errors=True)
                raise RoutestatsError(f"{folder}: its {cond.name} run holds other records or options than this "
                                      f"capture's records {a}-{b - 1} (swapped or from another command); removed, "
                                      "rerun the same command to capture it again")
