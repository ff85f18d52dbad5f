"""Deterministic example selection (METHODS 3.7), fixed before any model output is seen.

Examples
--------
Check values from METHODS 3.7 (CPython ``random``):

>>> reservoir_indices(10, 5, seed=1001)
[2, 4, 5, 7, 8]
>>> reservoir_indices(70_000, 2_336, seed=1001)[:10]
[25, 36, 88, 137, 205, 273, 286, 287, 334, 361]
"""

from __future__ import annotations

import random

from routestats.errors import RoutestatsError

__all__ = ["reservoir_indices"]


def reservoir_indices(n_records: int, k: int, seed: int = 1001) -> list[int]:
    """Algorithm R over record indices 0..n_records-1 with ``random.Random(seed)``, sorted.

    While fewer than ``k`` are kept, keep; afterwards draw j = ``randrange(i + 1)`` and
    replace slot j when j < k. The draws depend only on the record count, so two files of
    equal length get the same index set. Errors when the file has fewer than ``k`` records.
    """
    if k < 0:
        raise RoutestatsError("sample size must be non-negative")
    if n_records < k:
        raise RoutestatsError(f"cannot sample {k} records from {n_records}")
    rng = random.Random(seed)
    kept: list[int] = []
    for i in range(n_records):
        if len(kept) < k:
            kept.append(i)
        else:
            j = rng.randrange(i + 1)
            if j < k:
                kept[j] = i
    return sorted(kept)
