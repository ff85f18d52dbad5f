"""The body of ``python -m runners capture``: options parsed and checked, records read, the model loaded, the runs
captured (here, or in shards) and what was written said. Split from ``capture`` (issue [fused-capture]): capture
itself never imports the shards, which import it (no import circle)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

from routestats.errors import RoutestatsError

from runners.pretrained.capture import capture_checkpoints, capture_runs
from runners.pretrained.destination import Destination, check_destination
from runners.pretrained.load import load_model
from runners.pretrained.options import CaptureOptions
from runners.pretrained.records import read_records
from runners.pretrained.seam import Condition

__all__ = ["run_capture_command", "parse_heads", "conditions_of"]


def _said_written(paths: Sequence[Path], n_records: int, echo) -> None:
    for p in paths:
        mb = sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 2 ** 20
        how = json.loads((p / "run.json").read_text())["evaluation"]["capture"].get("attention", {}).get("path")
        echo(f"wrote {p} ({mb:,.1f} MB, {mb / n_records:,.3f} MB per record; {how} attention)")


def parse_heads(text: str | None) -> tuple[tuple[int, int], ...]:
    """``"0.3,2.5"`` -> ((0, 3), (2, 5)); anything else is refused in one line.

    >>> parse_heads("0.3, 2.5")
    ((0, 3), (2, 5))
    """
    out = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        bits = part.split(".")
        if len(bits) != 2 or not all(b.isdigit() for b in bits):
            raise RoutestatsError(f"--ablate {part!r}: expected LAYER.HEAD with whole numbers, e.g. 0.3")
        out.append((int(bits[0]), int(bits[1])))
    return tuple(out)


def conditions_of(bias: float | None, ablate: str | None, compare) -> list[Condition]:
    """The conditions ``--bias`` and ``--ablate`` ask for, beside the baseline (``--compare``: the baseline only)."""
    if compare is not None and (bias is not None or ablate):
        raise RoutestatsError("--compare pairs two checkpoints as they are; run --bias / --ablate captures separately")
    heads = parse_heads(ablate)
    return [Condition("baseline")] + ([Condition("bias", bias=float(bias))] if bias is not None else []) + \
        ([Condition("ablate", ablate=heads)] if heads else [])


def _in_shards(model, recs, dest: Destination, conds, options: CaptureOptions, *, shards: int, launcher: str,
               force: bool, threads: int, echo, submitit: dict) -> list[Path]:
    from runners.launch import make_launcher
    from runners.pretrained.shards import capture_in_shards, shard_bounds

    shard_bounds(len(recs), shards)  # refuse a bad count before any job
    runner = make_launcher(launcher, dest.out.parent / f".{dest.out.name}.capture-shards", **submitit)
    echo(f"capturing {len(recs)} records in {shards} shards ({launcher}) ...", err=True)
    return capture_in_shards(model, recs, dest, shards=shards, launcher=runner, force=force, threads=threads,
                             echo=lambda line: echo(line, err=True), conditions=conds, options=options)


def _here(model, recs, out: Destination, conds, options: CaptureOptions, *, compare, reason, force: bool, echo, t0: float):
    from runners.progress import progress_bars

    echo(f"loading {model} ...", err=True)
    loaded = load_model(model)
    echo(f"[{time.monotonic() - t0:6.1f} s] loaded {type(loaded.model).__name__} ({loaded.family.name} family, "
         f"{loaded.n_layers} layers x {loaded.n_heads} heads"
         + (f"; a hybrid: attention matrices in layers {', '.join(map(str, loaded.layers))} only, the others are "
            "linear attention or state-space layers" if loaded.attention_layers else "") + ")", err=True)
    with progress_bars() as (_, bar):
        kw = dict(options=options, force=force, progress=lambda name, done, total: bar(f"{name} records", done, total))
        if compare is not None:
            other = load_model(compare)
            device = options.device
            return capture_checkpoints(loaded.to(device), other.to(device), recs, out, reason=reason or "", **kw)
        return capture_runs(loaded.to(options.device), recs, out, conditions=conds, **kw)


def run_capture_command(*, model, records, out, options: CaptureOptions, echo, format: str | None = None,
                        limit: int = 64, label: str | None = None, split: str | None = None,
                        max_record_mb: float = 8.0, bias: float | None = None, ablate: str | None = None,
                        compare=None, reason: str | None = None, force: bool = False, shards: int = 1,
                        launcher: str = "sequential", threads: int = 1, submitit: dict | None = None) -> None:
    """``python -m runners capture``: every option checked before the model loads, then the runs.

    ``options`` say how each record is captured (checked where they were made); ``format`` None: by the path
    (:func:`records_format`); ``label`` and ``split``: see :func:`read_records`; ``submitit``: the launcher's
    ``timeout_min``, ``slurm_partition`` and ``gpus_per_node``."""
    if limit < 1:
        raise RoutestatsError(f"--limit must be at least 1, got {limit}")
    if not 0 < max_record_mb < 1 << 20:
        raise RoutestatsError(f"--max-record-mb must be a positive number of MB, got {max_record_mb}")
    if shards != 1 and compare is not None:
        raise RoutestatsError("--shards splits one model's capture; run --compare unsharded")
    conds = conditions_of(bias, ablate, compare)
    # checked once, before the model loads; the capture writes to what was checked
    dest = check_destination(Path(out), ["baseline", "compare"] if compare is not None else [c.name for c in conds],
                             force, cli=True)
    recs = read_records(records, format, None if options.fields is None else list(options.fields), limit,
                        max_bytes=int(max_record_mb * (1 << 20)), label=label, split=split)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress lines say what happens
    t0 = time.monotonic()
    if shards != 1:
        paths = _in_shards(model, recs, dest, conds, options, shards=shards, launcher=launcher, force=force,
                           threads=threads, echo=echo, submitit=submitit or {})
    else:
        paths = _here(model, recs, dest, conds, options, compare=compare, reason=reason, force=force, echo=echo, t0=t0)
    _said_written(paths, len(recs), echo)
    echo(f"{len(paths)} run{'' if len(paths) == 1 else 's'} in {time.monotonic() - t0:.1f} s; "
         f"next: routestats report {out}")
