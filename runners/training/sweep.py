"""Resumable study sweeps: seeds x conditions into one run tree, run sequentially on this machine.

The plan (``OUT/plan.json``) lists every (seed, condition) run. Running the sweep again skips
complete runs (those with ``run.json``), resumes incomplete ones from their last checkpoint,
and trains the rest. A failing seed is recorded with its error and the sweep goes on; the
result lists failures so the caller can exit non-zero.
"""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from routestats.rundir import schema as S
from routestats.rundir.atomic import write_json_atomic, write_text_atomic

from runners.training.data import DataSpec
from runners.training.presets import Condition, Preset


@dataclass
class SweepResult:
    complete: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)  # seed -> log path


def plan(out: Path, seeds: Sequence[int], conditions: Sequence[Condition], preset: Preset, data: DataSpec) -> dict:
    """Write ``OUT/plan.json`` (or check it matches an existing plan) and return it."""
    p = {
        "preset": preset.name,
        "model": preset.model,
        "training": preset.train.to_dict(),
        "data": data.name,
        "seeds": list(seeds),
        "conditions": [c.name for c in conditions],
        "runs": [f"seed{s}/{c.name}" for s in seeds for c in conditions],
    }
    path = Path(out) / "plan.json"
    if path.is_file():
        old = json.loads(path.read_text())
        for key in ("preset", "model", "training", "data"):
            if old.get(key) != p[key]:
                raise ValueError(f"{path}: the existing plan has a different {key}; use another --out")
        p["seeds"] = sorted(set(old["seeds"]) | set(p["seeds"]))
        p["conditions"] = list(dict.fromkeys(old["conditions"] + p["conditions"]))
        p["runs"] = list(dict.fromkeys(old["runs"] + p["runs"]))
    write_json_atomic(path, p)
    return p


def train_seed(out: str, seed: int, conditions, preset: Preset, data: DataSpec, study: str, device: str,
               keep_checkpoints: str, threads: int | None = None) -> list[str]:
    """One sweep job: train every condition of one seed (resuming what a killed job left)."""
    from runners.threads import set_threads

    set_threads(threads)
    from runners.training.train import train_study

    paths = train_study(Path(out) / f"seed{seed}", data=data, preset=preset, conditions=conditions, seed=seed,
                        study=study, device=device, keep_checkpoints=keep_checkpoints)
    return [str(p) for p in paths]


def run_sweep(out: Path, *, seeds: Sequence[int], conditions: Sequence[Condition], preset: Preset, data: DataSpec,
              study: str = "saab", device: str = "auto", keep_checkpoints: str = "last",
              progress: Callable | None = None, on_run: Callable[[str], None] | None = None,
              launcher=None, threads: int | None = None) -> SweepResult:
    """Train every (seed, condition) of the plan that is not complete yet.

    One job per seed with something left to train; ``launcher`` defaults to
    :class:`runners.launch.SequentialLauncher` (with live progress bars).
    """
    from runners.launch import Job, SequentialLauncher
    from runners.training.train import train_study

    out = Path(out)
    plan(out, seeds, conditions, preset, data)
    res = SweepResult()
    jobs = []
    for seed in seeds:
        folder = out / f"seed{seed}"
        todo = [c for c in conditions if not (folder / c.name / S.MANIFEST).is_file()]
        res.skipped += [folder / c.name for c in conditions if c not in todo]
        if on_run:
            on_run(f"seed {seed}: {len(todo)} to train, {len(conditions) - len(todo)} complete")
        if todo:
            jobs.append(Job(f"seed{seed}", train_seed, dict(out=str(out), seed=seed, conditions=list(conditions),
                                                            preset=preset, data=data, study=study, device=device,
                                                            keep_checkpoints=keep_checkpoints, threads=threads)))
    if launcher is None and progress is not None:
        # in-process: keep the live progress bars, "run k of n" over the whole sweep
        per_seed = sum(not c.bias_off for c in conditions)
        for i, job in enumerate(jobs):
            kw = job.kwargs
            try:
                paths = train_study(out / f"seed{kw['seed']}", data=data, preset=preset, conditions=conditions,
                                    seed=kw["seed"], study=study, device=device, keep_checkpoints=keep_checkpoints,
                                    progress=progress, job=(i * per_seed, len(jobs) * per_seed))
                res.complete += [p for p in paths if p not in res.skipped]
            except Exception:  # noqa: BLE001 - recorded and reported; the sweep continues
                log = out / "logs" / f"{job.name}.log"
                write_text_atomic(log, traceback.format_exc())
                res.failed[kw["seed"]] = str(log)
        return res
    launcher = launcher or SequentialLauncher(out / "logs")
    for job, r in zip(jobs, launcher.run(jobs)):
        seed = job.kwargs["seed"]
        if r.ok:
            res.complete += [Path(p) for p in r.value if Path(p) not in res.skipped]
        else:
            res.failed[seed] = r.log or r.error or "failed"
    return res
