"""Every figure kind and how it is drawn, and the drawing of a report's figures.

The pair, run, study and MoFA reports' figures (:mod:`reports.pair_figures`, :mod:`reports.heat_figures`,
:mod:`reports.training`, :mod:`reports.study`, :mod:`reports.mofa`) are drawn on a :class:`reports.canvas.Canvas`,
with no plotting library: the page embeds their SVG, and PNG or PDF copies replay the same marks through matplotlib.
The other reports' drawers (:mod:`reports.regime`, :mod:`reports.plan`) return matplotlib figures; they, and
matplotlib, are imported only when a figure of theirs is drawn. The tables are joined here by explicit imports
(no module registers into another's table).
"""

from __future__ import annotations

from pathlib import Path

from reports import heat_figures, mofa, pair_figures, study, training
from reports.canvas import Canvas, inline

__all__ = ["REGISTRY", "CANVAS_KINDS", "registry", "draw", "draw_all", "save_drawing"]


def _join(*tables: dict) -> dict:
    out: dict = {}
    for t in tables:
        clash = set(out) & set(t)
        if clash:
            raise ValueError(f"figure kinds drawn twice: {sorted(clash)}")
        out.update(t)
    return out


# the page's kinds: drawn without matplotlib
CANVAS = _join(pair_figures.DRAWERS, heat_figures.DRAWERS, training.DRAWERS, study.DRAWERS, mofa.DRAWERS)
CANVAS_KINDS = frozenset(CANVAS)


def registry() -> dict:
    """Every figure kind -> its drawer (imports the matplotlib drawers)."""
    from reports import plan, regime

    return _join(CANVAS, regime.DRAWERS, plan.DRAWERS)


def __getattr__(name):
    if name == "REGISTRY":  # built on first use: it imports matplotlib
        return registry()
    raise AttributeError(name)


def draw(figure):
    """Draw one :class:`routestats.report.Figure` with the drawer of its kind: a :class:`reports.canvas.Canvas` for
    the page's kinds (:data:`CANVAS_KINDS`), a matplotlib figure for the others."""
    fn = CANVAS.get(figure.kind)
    if fn is None:
        fn = registry().get(figure.kind)
    if fn is None:
        raise ValueError(f"no drawer for figure kind {figure.kind!r}")
    return fn(dict(figure.frames), dict(figure.params))


def save_drawing(drawing, folder: Path, name: str, vector: tuple = ()):
    """Write a drawing under ``folder``; return what the page embeds: a canvas's SVG markup (a str, without the
    namespace a file needs; written as ``name.svg``, with a PNG or PDF copy per ``vector`` format) or a matplotlib
    figure's PNG bytes (with its vector copies)."""
    if isinstance(drawing, Canvas):
        wanted = ("svg",) + tuple(f for f in vector if f != "svg")
        return inline(drawing.save(folder, name, wanted)["svg"].decode())
    from reports.figures import save

    return save(drawing, folder, name, tuple(f for f in vector if f != "png"))


_JOBS: list = []


def _draw_job(i: int):
    figure, folder, name, vector = _JOBS[i]
    return save_drawing(draw(figure), folder, name, vector)


def draw_all(jobs: dict, folder: Path, workers: int | None = None, vector: tuple = ()) -> dict:
    """Draw and save figures (file stem -> :class:`routestats.report.Figure`); stem -> SVG markup (str) or PNG bytes.

    The page's canvas figures are drawn here, in this process (a few milliseconds each). Matplotlib figures, with two
    or more CPUs and two or more of them, are drawn by forked worker processes in parallel (each writes its own
    files). Without ``fork`` (or with ``ROUTESTATS_FIGURE_WORKERS=1``) they are drawn one after another.
    """
    import gc
    import multiprocessing as mp
    import os

    global _JOBS
    light = [n for n in jobs if jobs[n].kind in CANVAS_KINDS and not set(vector) - {"svg"}]
    out = {n: save_drawing(draw(jobs[n]), folder, n, vector) for n in light}
    names = [n for n in jobs if n not in out]
    if workers is None:
        from routestats.settings import ENVIRONMENT, env_number

        workers = env_number("ROUTESTATS_FIGURE_WORKERS", **ENVIRONMENT["ROUTESTATS_FIGURE_WORKERS"]) \
            or min(len(os.sched_getaffinity(0)), 4)
    workers = min(workers, len(names))
    if workers < 2 or "fork" not in mp.get_all_start_methods():
        out.update({n: save_drawing(draw(jobs[n]), folder, n, vector) for n in names})
        return {n: out[n] for n in jobs}
    _JOBS = [(jobs[n], folder, n, vector) for n in names]
    # frozen objects are skipped by the workers' garbage collector, which would otherwise write to (and so
    # copy) every page of the parent's heap it visits: 2 x 2,336 pair, 2 workers, 2.8 -> 2.0-2.7 s CPU
    gc.freeze()
    try:
        with mp.get_context("fork").Pool(workers) as pool:
            drawn = pool.map(_draw_job, range(len(names)), chunksize=1)
    finally:
        gc.unfreeze()
        _JOBS = []
    out.update(zip(names, drawn))
    return {n: out[n] for n in jobs}
