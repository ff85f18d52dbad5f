"""Which examples an analysis uses: the flags of ``examples.parquet`` and the paper's protocol (METHODS 3.7)."""

from __future__ import annotations

import numpy as np

from routestats.errors import RoutestatsError
from routestats.rundir.read import Run

__all__ = ["EXAMPLE_SETS", "example_protocol", "resolve_example_sets", "select_examples"]


EXAMPLE_SETS = {"primary": "is_primary", "length_sample": "in_length_sample", "test_sample": "in_test_sample"}


def example_protocol(run: Run) -> dict[str, str]:
    """The example set of each analysis family under the paper's protocol (METHODS 3.7).

    When the run's examples are the union of the primary examples and a length sample (neither
    covering every example), the paired tables use ``primary`` and the length analyses
    ``length_sample``; otherwise both use ``all``. Returns ``{"paired": ..., "lengths": ...}``.
    """
    ex = run.examples(["is_primary", "in_length_sample"])
    primary, sample = ex["is_primary"].to_numpy(bool), ex["in_length_sample"].to_numpy(bool)
    union = primary.any() and sample.any() and not primary.all() and not sample.all()
    return {"paired": "primary", "lengths": "length_sample"} if union else {"paired": "all", "lengths": "all"}


def resolve_example_sets(settings, run: Run):
    """``settings`` with ``examples`` and ``length_examples`` made concrete for ``run``
    (``protocol`` replaced by :func:`example_protocol`'s choice)."""
    proto = example_protocol(run)
    return type(settings).of(settings,
                             examples=proto["paired"] if settings.examples == "protocol" else settings.examples,
                             length_examples=proto["lengths"] if settings.length_examples == "protocol"
                             else settings.length_examples)


def select_examples(run: Run, examples=None) -> np.ndarray | None:
    """Example ids selected by ``examples``: None or "all" (every example), "primary",
    "length_sample", "test_sample" (the flags in examples.parquet), "protocol" (the paired-table
    set of :func:`example_protocol`), or a sequence of ids."""
    if isinstance(examples, str) and examples == "protocol":
        examples = example_protocol(run)["paired"]
    if examples is None or (isinstance(examples, str) and examples == "all"):
        return None
    ex = run.examples(["example_id", *EXAMPLE_SETS.values()])
    if isinstance(examples, str):
        if examples not in EXAMPLE_SETS:
            raise RoutestatsError(f"examples must be all, {', '.join(EXAMPLE_SETS)} or a list of ids, got {examples!r}")
        ids = ex.loc[ex[EXAMPLE_SETS[examples]], "example_id"].to_numpy()
    else:
        ids = np.asarray(list(examples), dtype=np.int64)
        unknown = np.setdiff1d(ids, ex["example_id"].to_numpy())
        if unknown.size:
            raise RoutestatsError(f"{run.run_id}: unknown example ids {unknown[:5].tolist()}")
    if ids.size == 0:
        raise RoutestatsError(f"{run.run_id}: no example selected by {examples!r}")
    return ids
