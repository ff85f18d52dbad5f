"""Progress of long runner work: a bar per task on a terminal, plain lines otherwise.

On a file, a pipe, nohup or a batch system (stderr not a terminal) each task prints its first
report without a rate (nothing is timed yet), then a line every 5 % or 30 s with its rate and ETA.
"""

from __future__ import annotations

import contextlib
import sys
import time
from types import SimpleNamespace


def _echo(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@contextlib.contextmanager
def progress_bars():
    """Yields ``(log, progress)``: ``log.console.log(*parts)`` writes a line; ``progress(name, step,
    total)`` reports one task's progress."""
    if not sys.stderr.isatty():
        t0 = time.monotonic()
        state: dict = {}

        def plain(name, step, total):
            now = time.monotonic()
            if name not in state:  # the rate counts from the first report of this name
                state[name] = (now, step, step, now)
                _echo(f"[{now - t0:7.1f} s] {name}: {step}/{total}")
                return
            first_t, first_step, last_step, last_t = state[name]
            if step != total and step - last_step < max(1, total // 20) and now - last_t < 30:
                return
            state[name] = (first_t, first_step, step, now)
            rate = (step - first_step) / (now - first_t) if now > first_t else float("nan")
            eta = (total - step) / rate if rate > 0 else float("nan")
            _echo(f"[{now - t0:7.1f} s] {name}: {step}/{total} ({rate:.2f}/s, ETA {eta:.0f} s)")

        yield SimpleNamespace(console=SimpleNamespace(log=lambda *a: _echo(" ".join(map(str, a))))), plain
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), TimeRemainingColumn()) as bar:
        tasks = {}

        def progress(name, step, total):
            if name not in tasks:
                tasks[name] = bar.add_task(name, total=total)
            bar.update(tasks[name], completed=step)

        yield bar, progress
