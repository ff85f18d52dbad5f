"""The body of ``python -m runners capture``: options parsed and checked, records read, the model loaded, the runs
captured (here, or in shards) and what was written said. Split from ``capture`` (issue [fused-capture]): capture
itself never imports the shards, which import it (no import circle)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

from routestats.errors import RoutestatsError
from routestats.rundir import schema as S

from runners.pretrained.capture import ATTENTION_PATHS, capture_checkpoints, capture_runs, check_destination
from runners.pretrained.load import load_model
from runners.pretrained.records import read_records
from runners.pretrained.seam import Condition

__all__ = ["run_capture_command", "parse_heads", "parse_indices"]


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


def parse_indices(text: str | None, option: str) -> list[int] | None:
    """``"0,1,5"`` -> [0, 1, 5] (None for no option); anything else is refused in one line."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise RoutestatsError(f"{option} {text!r}: expected whole numbers separated by commas, e.g. 0,1,5")
    return sorted(set(int(p) for p in parts))


def run_capture_command(*, model, records, out, format, fields, limit, cap, truncation, special_tokens, bias, ablate,
                        compare, reason, layers, forms, dtype, batch_size, padding, device, force, echo,
                        max_record_mb: float = 8.0, attention: str = "auto", attention_mb: float = 256.0,
                        shards: int = 1, launcher: str = "sequential", timeout_min: int = 240,
                        slurm_partition: str | None = None, gpus_per_node: int | None = None,
                        threads: int = 1, label: str | None = None, split: str | None = None) -> None:
    """``python -m runners capture``: every option checked before the model loads, then the runs.

    ``format`` None: by the path (:func:`records_format`); ``label`` and ``split``: see :func:`read_records`."""
    from runners.progress import progress_bars

    names = [f.strip() for f in fields.split(",") if f.strip()]
    form_list = [f.strip() for f in forms.split(",") if f.strip()]
    bad = [f for f in form_list if f not in S.ATTENTION_FORMS] or ([] if form_list else ["(none)"])
    if bad:
        raise RoutestatsError(f"--forms {forms!r}: expected reductions and/or matrices")
    if dtype not in S.ATTENTION_DTYPES:
        raise RoutestatsError(f"--dtype must be float16 or float32, got {dtype!r}")
    if limit < 1:
        raise RoutestatsError(f"--limit must be at least 1, got {limit}")
    if not 0 < max_record_mb < 1 << 20:
        raise RoutestatsError(f"--max-record-mb must be a positive number of MB, got {max_record_mb}")
    if attention not in ATTENTION_PATHS:
        raise RoutestatsError(f"--attention must be one of {', '.join(ATTENTION_PATHS)}, got {attention!r}")
    if not 0 < attention_mb < 1 << 20:
        raise RoutestatsError(f"--attention-mb must be a positive number of MB, got {attention_mb}")
    if attention == "chunked" and S.FORM_MATRICES in form_list:
        raise RoutestatsError("--attention chunked keeps per-query reductions only; store --forms reductions")
    if compare is not None and (bias is not None or ablate):
        raise RoutestatsError("--compare pairs two checkpoints as they are; run --bias / --ablate captures separately")
    heads, stored = parse_heads(ablate), parse_indices(layers, "--layers")
    conds = [Condition("baseline")] + ([Condition("bias", bias=float(bias))] if bias is not None else []) + \
        ([Condition("ablate", ablate=heads)] if heads else [])
    check_destination(Path(out), ["baseline", "compare"] if compare is not None else [c.name for c in conds], force,
                      cli=True)
    recs = read_records(records, format, names, limit, max_bytes=int(max_record_mb * (1 << 20)), label=label,
                        split=split)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress lines say what happens
    t0 = time.monotonic()
    if shards != 1:
        from runners.launch import make_launcher
        from runners.pretrained.shards import capture_in_shards, shard_bounds

        if compare is not None:
            raise RoutestatsError("--shards splits one model's capture; run --compare unsharded")
        shard_bounds(len(recs), shards)  # refuse a bad count before any job
        runner = make_launcher(launcher, Path(out).parent / f".{Path(out).name}.capture-shards",
                               timeout_min=timeout_min, slurm_partition=slurm_partition, gpus_per_node=gpus_per_node)
        echo(f"capturing {len(recs)} records in {shards} shards ({launcher}) ...", err=True)
        paths = capture_in_shards(model, recs, out, shards=shards, launcher=runner, force=force, threads=threads,
                                  echo=lambda line: echo(line, err=True), conditions=conds, fields=names, cap=cap,
                                  special_tokens=special_tokens, truncation=truncation, layers=stored,
                                  forms=form_list, dtype=dtype, batch_size=batch_size, padding=padding,
                                  device=device, attention=attention, attention_mb=attention_mb)
        _said_written(paths, len(recs), echo)
        echo(f"{len(paths)} run{'' if len(paths) == 1 else 's'} in {time.monotonic() - t0:.1f} s; "
             f"next: routestats report {out}")
        return
    echo(f"loading {model} ...", err=True)
    loaded = load_model(model)
    echo(f"[{time.monotonic() - t0:6.1f} s] loaded {type(loaded.model).__name__} ({loaded.family.name} family, "
         f"{loaded.n_layers} layers x {loaded.n_heads} heads)", err=True)
    with progress_bars() as (_, bar):
        kw = dict(fields=names, cap=cap, special_tokens=special_tokens, truncation=truncation, layers=stored,
                  forms=form_list, dtype=dtype, batch_size=batch_size, padding=padding, device=device, force=force,
                  attention=attention, attention_mb=attention_mb,
                  progress=lambda name, done, total: bar(f"{name} records", done, total))
        if compare is not None:
            other = load_model(compare)
            paths = capture_checkpoints(loaded.to(device), other.to(device), recs, out, reason=reason or "", **kw)
        else:
            paths = capture_runs(loaded.to(device), recs, out, conditions=conds, **kw)
    _said_written(paths, len(recs), echo)
    echo(f"{len(paths)} run{'' if len(paths) == 1 else 's'} in {time.monotonic() - t0:.1f} s; "
         f"next: routestats report {out}")
