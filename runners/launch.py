"""Launchers for sweeps: run jobs here, one after another, or through submitit.

A job is a picklable top-level function with keyword arguments. ``SequentialLauncher`` runs
jobs in this process. ``SubmititLauncher`` hands them to submitit's executor with an explicit
``cluster``: ``"slurm"`` (job arrays on a SLURM cluster), ``"local"`` (subprocesses on this
machine) or ``"debug"`` (in-process, for debugging). The cluster is always passed explicitly,
so a missing SLURM never silently falls back to local execution.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence


@dataclass(frozen=True)
class Job:
    name: str
    fn: Callable
    kwargs: dict = field(default_factory=dict)


@dataclass
class JobResult:
    name: str
    ok: bool
    value: Any = None
    error: str | None = None
    log: str | None = None


class Launcher(Protocol):
    def run(self, jobs: Sequence[Job]) -> list[JobResult]:  # pragma: no cover - protocol
        ...


class SequentialLauncher:
    """Run jobs one after another in this process; a failure is recorded and the next job runs."""

    def __init__(self, log_dir: Path | None = None):
        self.log_dir = Path(log_dir) if log_dir else None

    def run(self, jobs: Sequence[Job]) -> list[JobResult]:
        from routestats.rundir.atomic import write_text_atomic

        out = []
        for job in jobs:
            try:
                out.append(JobResult(job.name, True, job.fn(**job.kwargs)))
            except Exception:  # noqa: BLE001 - reported per job
                tb = traceback.format_exc()
                log = None
                if self.log_dir is not None:
                    log = str(self.log_dir / f"{job.name}.log")
                    write_text_atomic(log, tb)
                out.append(JobResult(job.name, False, error=tb.strip().splitlines()[-1], log=log))
        return out


class SubmititLauncher:
    """Submit jobs with submitit (one array when the cluster supports it) and wait for them.

    Parameters
    ----------
    folder : path
        submitit's log and pickle folder (``%j`` is replaced by the job id).
    cluster : {"slurm", "local", "debug"}
        Passed to ``submitit.AutoExecutor`` explicitly.
    parameters : dict
        ``executor.update_parameters`` arguments, e.g. ``timeout_min``, ``slurm_partition``,
        ``gpus_per_node``, ``cpus_per_task``.
    """

    def __init__(self, folder: Path, cluster: str, **parameters):
        if cluster not in ("slurm", "local", "debug"):
            raise ValueError(f"cluster must be slurm, local or debug, got {cluster!r}")
        self.folder = Path(folder)
        self.cluster = cluster
        self.parameters = {"timeout_min": 60, **parameters}

    def run(self, jobs: Sequence[Job]) -> list[JobResult]:
        import submitit

        ex = submitit.AutoExecutor(folder=str(self.folder / "%j"), cluster=self.cluster)
        ex.update_parameters(name="routestats-sweep", **self.parameters)
        submitted = []
        with ex.batch():
            for job in jobs:
                submitted.append(ex.submit(job.fn, **job.kwargs))
        out = []
        for job, sj in zip(jobs, submitted):
            try:
                out.append(JobResult(job.name, True, sj.result()))
            except Exception as exc:  # noqa: BLE001 - submitit re-raises the job's failure
                log = str(getattr(sj.paths, "stderr", "")) or None
                out.append(JobResult(job.name, False, error=str(exc).strip().splitlines()[-1] if str(exc) else
                                     type(exc).__name__, log=log))
        return out


LAUNCHERS = ("sequential", "submitit-local", "submitit-debug", "slurm")


def make_launcher(name: str, folder: Path, *, timeout_min: int = 240, slurm_partition: str | None = None,
                  gpus_per_node: int | None = None):
    """The launcher a command's ``--launcher`` names: None for ``sequential`` (the caller runs jobs itself or
    through :class:`SequentialLauncher`), else a :class:`SubmititLauncher` logging under ``folder/submitit``."""
    from routestats.errors import RoutestatsError

    if name == "sequential":
        return None
    cluster = {"submitit-local": "local", "submitit-debug": "debug", "slurm": "slurm"}.get(name)
    if cluster is None:
        raise RoutestatsError(f"unknown launcher {name!r}: {', '.join(LAUNCHERS)}")
    params = {"timeout_min": timeout_min}
    if cluster == "slurm":
        import shutil

        if shutil.which("sbatch") is None or shutil.which("srun") is None:  # checked before any job or folder
            raise RoutestatsError("--launcher slurm: no sbatch/srun on this machine (not a SLURM cluster's node); "
                                  "run on the cluster, or use --launcher submitit-local or sequential")
        params.update({k: v for k, v in dict(slurm_partition=slurm_partition, gpus_per_node=gpus_per_node).items()
                       if v is not None})
    return SubmititLauncher(Path(folder) / "submitit", cluster, **params)
