"""torch's CPU thread count: what the user asked for, or the cores that are not busy already.

Two torch jobs on two cores slow each other 10-40x (each spins on the other's cores), so the
default leaves out the cores the 1-minute load average says are taken, and a request that
oversubscribes the machine gets a one-line hint on standard error.
"""

from __future__ import annotations

import os
import sys


def free_cores() -> tuple[int, int, float]:
    """(cores, cores not busy by the 1-minute load average (at least 1), that load)."""
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):  # not available on this platform
        load = 0.0
    return cores, max(1, cores - int(load)), load


def set_threads(requested: int | None) -> int:
    """Set and return torch's intra-op threads: ``requested``, or by default the free cores
    (never more than torch's own default). Says so in one line when the choice oversubscribes.

    >>> import torch; n = set_threads(1); (n, torch.get_num_threads())
    (1, 1)
    """
    import torch

    cores, free, load = free_cores()
    n = requested or min(free, torch.get_num_threads())
    if requested and requested > free:
        print(f"hint: 1-min load {load:.1f} on {cores} cores; if another job is still running, {requested} threads "
              f"compete with it and can run many times slower: --threads {free}", file=sys.stderr, flush=True)
    torch.set_num_threads(n)
    return n
