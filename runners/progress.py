"""Progress of long runner work: a bar per task on a terminal, plain lines otherwise.

On a file, a pipe, nohup or a batch system (stderr not a terminal) each task prints its first
report without a rate (nothing is timed yet), then a line every 5 % or 30 s with its rate and ETA.
A job of several runs (``progress.job(k, n)``: the k-th of n runs of one size) labels each line
"run k of n" and adds the job's ETA: the current run's rate (measured within that run only) times what
is left of this run and of the runs after it.
"""

from __future__ import annotations

import contextlib
import sys
import time
from types import SimpleNamespace
from typing import Callable


def _echo(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Progress:
    """``progress(name, step, total)`` reports one task; ``progress.job(k, n)`` is the reporter of the k-th of
    n runs of a job (each of ``total`` steps), whose lines say so and carry the job's ETA.

    >>> lines = []
    >>> p = Progress(lambda name, step, total, job: lines.append((name, step, total, job)))
    >>> p.job(2, 3)("saab", 5, 10); lines
    [('run 2 of 3: saab', 5, 10, (2, 3))]
    """

    def __init__(self, emit: Callable[[str, int, int, tuple | None], None]):
        self.emit = emit

    def __call__(self, name: str, step: int, total: int) -> None:
        self.emit(name, step, total, None)

    def job(self, k: int, n: int) -> "JobRun":
        return JobRun(self.emit, k, n)


class JobRun:
    """The reporter of run ``k`` of ``n``: calls report its steps with the job's ETA; ``note(name, step, total)``
    reports a phase of the run of another kind (scoring after training) under the same label, without it."""

    def __init__(self, emit, k: int, n: int):
        self.emit, self.k, self.n = emit, k, n

    def __call__(self, name: str, step: int, total: int) -> None:
        self.emit(f"run {self.k} of {self.n}: {name}", step, total, (self.k, self.n))

    def note(self, name: str, step: int, total: int) -> None:
        self.emit(f"run {self.k} of {self.n}: {name}", step, total, None)


def job_reporter(progress, k: int, n: int):
    """The reporter for run ``k`` of ``n`` of a job: ``progress.job(k, n)`` where ``progress`` is a
    :class:`Progress`, else ``progress`` itself (any ``(name, step, total)`` callable, or None)."""
    return progress.job(k, n) if isinstance(progress, Progress) else progress


def _plain() -> Progress:
    t0 = time.monotonic()
    state: dict = {}

    def emit(name, step, total, job):
        now = time.monotonic()
        if name not in state:  # the rate counts from the first report of this name: within this run
            state[name] = (now, step, step, now)
            _echo(f"[{now - t0:7.1f} s] {name}: {step}/{total}")
            return
        first_t, first_step, last_step, last_t = state[name]
        if step != total and step - last_step < max(1, total // 20) and now - last_t < 30:
            return
        state[name] = (first_t, first_step, step, now)
        rate = (step - first_step) / (now - first_t) if now > first_t else float("nan")
        eta = (total - step) / rate if rate > 0 else float("nan")
        whole = f"; job ETA {eta + (job[1] - job[0]) * total / rate:.0f} s" if job and rate > 0 else ""
        _echo(f"[{now - t0:7.1f} s] {name}: {step}/{total} ({rate:.2f}/s, ETA {eta:.0f} s{whole})")

    return Progress(emit)


@contextlib.contextmanager
def progress_bars():
    """Yields ``(log, progress)``: ``log.console.log(*parts)`` writes a line; ``progress`` is a :class:`Progress`
    (``progress(name, step, total)`` reports one task; ``progress.job(k, n)`` one run of a job)."""
    if not sys.stderr.isatty():
        yield SimpleNamespace(console=SimpleNamespace(log=lambda *a: _echo(" ".join(map(str, a))))), _plain()
        return
    from rich.progress import BarColumn, Progress as Bars, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Bars(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
              TimeElapsedColumn(), TimeRemainingColumn()) as bar:
        tasks = {}

        def emit(name, step, total, job):
            if name not in tasks:
                tasks[name] = bar.add_task(name, total=total)
            bar.update(tasks[name], completed=step)
            if job:  # the whole job: n runs of this size, the earlier ones done
                if "job" not in tasks:
                    tasks["job"] = bar.add_task("whole job", total=job[1] * total)
                bar.update(tasks["job"], total=job[1] * total, completed=(job[0] - 1) * total + step)

        yield bar, Progress(emit)
