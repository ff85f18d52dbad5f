"""Every figure kind and how it is drawn: the drawers of :mod:`reports.figures` and :mod:`reports.training`
(pairs), :mod:`reports.study`, :mod:`reports.mofa`, :mod:`reports.regime` and :mod:`reports.plan`, joined here by explicit
imports (no module registers into another's table), and the parallel drawing of a report's figures.
"""

from __future__ import annotations

from pathlib import Path

from reports import figures, mofa, plan, regime, study, training
from reports.figures import save

__all__ = ["REGISTRY", "draw", "draw_all"]


def _join(*tables: dict) -> dict:
    out: dict = {}
    for t in tables:
        clash = set(out) & set(t)
        if clash:
            raise ValueError(f"figure kinds drawn twice: {sorted(clash)}")
        out.update(t)
    return out


REGISTRY: dict = _join(figures.DRAWERS, training.DRAWERS, study.DRAWERS, mofa.DRAWERS, regime.DRAWERS, plan.DRAWERS)


def draw(figure):
    """Draw one :class:`routestats.report.Figure` with the drawer of its kind."""
    try:
        fn = REGISTRY[figure.kind]
    except KeyError:
        raise ValueError(f"no drawer for figure kind {figure.kind!r}") from None
    return fn(dict(figure.frames), dict(figure.params))


_JOBS: list = []


def _draw_job(i: int) -> bytes:
    figure, folder, name, vector = _JOBS[i]
    return save(draw(figure), folder, name, vector)


def draw_all(jobs: dict, folder: Path, workers: int | None = None, vector: tuple = ()) -> dict:
    """Draw and save figures (file stem -> :class:`routestats.report.Figure`); stem -> PNG bytes.

    With two or more CPUs and figures, forked worker processes draw them in parallel (the
    figures are independent; each worker writes its own PNG and vector copies). Without
    ``fork`` (or with ``ROUTESTATS_FIGURE_WORKERS=1``) they are drawn one after another.
    """
    import gc
    import multiprocessing as mp
    import os

    global _JOBS
    names = list(jobs)
    if workers is None:
        from routestats.settings import env_number

        from routestats.settings import ENVIRONMENT

        workers = env_number("ROUTESTATS_FIGURE_WORKERS", **ENVIRONMENT["ROUTESTATS_FIGURE_WORKERS"]) \
            or min(len(os.sched_getaffinity(0)), 4)
    workers = min(workers, len(names))
    if workers < 2 or "fork" not in mp.get_all_start_methods():
        return {n: save(draw(jobs[n]), folder, n, vector) for n in names}
    _JOBS = [(jobs[n], folder, n, vector) for n in names]
    # frozen objects are skipped by the workers' garbage collector, which would otherwise write to (and so
    # copy) every page of the parent's heap it visits: 2 x 2,336 pair, 2 workers, 2.8 -> 2.0-2.7 s CPU
    gc.freeze()
    try:
        with mp.get_context("fork").Pool(workers) as pool:
            pngs = pool.map(_draw_job, range(len(names)), chunksize=1)
    finally:
        gc.unfreeze()
        _JOBS = []
    return dict(zip(names, pngs))
