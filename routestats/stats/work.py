"""What random work the statistics do, recorded where they do it: a public hook for benchmarks and audits.

Inside :func:`recording`, every resampling procedure notes the shape of its work -- sign patterns drawn
for a table, bootstrap counts drawn, bootstrap tables multiplied, Spearman resamples, profile sign-flip
products -- so a benchmark can redo exactly that work at its floor (``benchmarks/bench_report.py``), and a
reader can see what a report cost, without patching any function. Outside it, :func:`note` is one
truth test.

>>> import numpy as np
>>> from routestats.stats.inference import seeded_bootstrap_means
>>> with recording() as work:
...     _ = seeded_bootstrap_means(np.ones((8, 3)), 100, seed=1)
>>> work["boot_draws"], work["boot_tables"]
([[8, 100]], [[8, 3, 100]])
"""

from __future__ import annotations

from contextlib import contextmanager

__all__ = ["KINDS", "recording", "note"]

KINDS = {
    "signs": "sign-flip test of a table: examples n, columns k, permutations P, seed",
    "boot_draws": "bootstrap resample counts drawn: examples n, resamples B",
    "boot_tables": "bootstrap means of a table from counts: examples n, columns k, resamples B",
    "spearman": "Spearman resamples of one column: resamples B, examples n",
    "profile": "profile sign-flip products: sign rows, examples n, layers L",
    "pairings": "permutation test of Spearman's rho: random pairings P of n examples, columns k",
}
_ACTIVE: list[dict] = []


@contextmanager
def recording():
    """Collect the work of the statistics computed inside: ``{kind: [shape, ...]}`` (see :data:`KINDS`)."""
    work = {k: [] for k in KINDS}
    _ACTIVE.append(work)
    try:
        yield work
    finally:
        _ACTIVE.remove(work)


def note(kind: str, *shape: int) -> None:
    """Record one piece of work of ``kind`` (a key of :data:`KINDS`) with its shape, when recording."""
    if _ACTIVE:
        for work in _ACTIVE:
            work[kind].append([int(x) for x in shape])
