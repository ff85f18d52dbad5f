"""Reductions read a row group at a time: the examples of one group validated at once over its flat
columns (:func:`reductions_group`), and stacked into batches of one length
(:class:`ReductionBatch`, :func:`batch_by_length`) for the vectorised metric pass."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from routestats.rundir import schema as S
from routestats.rundir.blocks import ExampleReductions, RowGroupColumns
from routestats.rundir.reductions import field_total

__all__ = ["reductions_group", "ReductionBatch", "batch_by_length"]


_RED_COLUMNS = S.REDUCTION_COLUMNS


def reductions_group(fname, cols: RowGroupColumns, segs, lengths, n_fields, dtype, grid) -> list[ExampleReductions] | None:
    """The examples of one row group (``segs`` from :func:`iter_block_groups`) as validated
    :class:`ExampleReductions`, every check of :func:`reductions_block` and :func:`check_grid` done
    at once over the group's flat columns; ``None`` when any check fails or the rows are not stored
    in grid order, so that the caller takes the per-example path (which names the first problem
    exactly as it always has, or reorders the rows).

    ``grid`` is the (layers, heads) grid the file's earlier examples hold (``None``: not known yet,
    so take the per-example path). Arrays of the returned blocks are views into ``cols``."""
    layout = _layout(cols, segs, lengths, grid)
    if layout is None:
        return None
    n_rows, n_ex, head_type, r0, r1 = layout
    n_row = np.repeat(n_ex, n_rows)
    present = [c for c in _RED_COLUMNS if c != "first_mass" or c in cols.table.column_names]
    flat = _flat_values(cols, present, r0, r1, n_row, n_fields)
    if flat is None or not _values_ok(flat, head_type == "softmax", n_row, n_ex, n_rows, n_fields, dtype,
                                      head_type == "sink"):
        return None
    out, q = [], 0
    layer0 = np.repeat(grid[0], len(grid[1])).astype(np.int64)  # as the per-example path gives them
    head0 = np.tile(grid[1], len(grid[0])).astype(np.int64)
    for i, (ex, s, e) in enumerate(segs):
        n = int(n_ex[i])
        size = n_rows * n
        arrays = {}
        for col in present:
            width = n_fields if col == "field_mass" else 1
            a = flat[col][q * width : (q + size) * width]
            arrays[col] = a.reshape((n_rows, n, n_fields) if col == "field_mass" else (n_rows, n))
        q += size
        out.append(ExampleReductions(ex, layer0, head0, head_type[i * n_rows : (i + 1) * n_rows], **arrays))
    return out


def _layout(cols: RowGroupColumns, segs, lengths, grid):
    """(rows per example, each example's n, head types, first row, end row) when the group's rows are
    the known grid in order with the lengths examples.parquet gives; else None."""
    if grid is None or any(ex not in lengths for ex, _, _ in segs):
        return None
    n_rows = len(grid[0]) * len(grid[1])
    r0, r1 = segs[0][1], segs[-1][2]
    if any(e - s != n_rows for _, s, e in segs) or r1 - r0 != n_rows * len(segs):
        return None
    E = len(segs)
    layer = cols.plain("layer")[r0:r1].astype(np.int64).reshape(E, n_rows)
    head = cols.plain("head")[r0:r1].astype(np.int64).reshape(E, n_rows)
    if not ((layer == np.repeat(grid[0], len(grid[1]))).all() and (head == np.tile(grid[1], len(grid[0]))).all()):
        return None  # another grid, repeated or unsorted rows: the per-example path says which
    n_ex = np.array([lengths[ex] for ex, _, _ in segs], dtype=np.int64)
    if not n_ex.min() > 0 or not np.array_equal(cols.plain("n")[r0:r1], np.repeat(n_ex, n_rows)):
        return None
    head_type = cols.plain("head_type")[r0:r1]
    if not np.isin(head_type, S.HEAD_TYPES).all():
        return None
    return n_rows, n_ex, head_type, r0, r1


def _flat_values(cols: RowGroupColumns, present, r0: int, r1: int, n_row, n_fields: int) -> dict | None:
    """Each reduction column's values over the group (finite; non-negative but entropies), or None."""
    flat = {}
    for col in present:
        width = n_fields if col == "field_mass" else 1
        values, offsets = cols.lists(col)
        off = offsets[r0 : r1 + 1]
        if not np.array_equal(np.diff(off), n_row * width):
            return None
        v = values[off[0] : off[-1]]
        if v.size:
            lo, hi = v.min(), v.max()  # NaN propagates into both, so each test below also fails on NaN
            if not (np.isfinite(lo) and np.isfinite(hi)) or (col not in ("entropy", "entropy_rownorm") and not lo >= 0):
                return None
        flat[col] = v
    return flat


def _values_ok(flat: dict, soft, n_row, n_ex, n_rows: int, n_fields: int, dtype: str, sink=None) -> bool:
    """The value checks of ``check_reductions``, as whole-chunk reductions with the same outcome (``sink``: rows
    of heads with attention sinks, whose mass is at most 1)."""
    tol = S.ROW_SUM_ATOL.get(dtype, 1e-9)
    mass = flat["row_mass"]
    starts = np.concatenate([[0], np.cumsum(n_row)[:-1]])  # first query of each row
    if mass.size:
        row_max = np.maximum.reduceat(mass, starts)
        row_min = np.minimum.reduceat(mass, starts)
        # max |m - 1| > tol, exactly: fl(m - 1) is monotone in m
        if soft.any() and max((row_max[soft] - 1.0).max(), (1.0 - row_min[soft]).max()) > tol:
            return False
        if sink is not None and sink.any() and (row_max[sink] - 1.0).max() > tol:
            return False
        if (row_max - n_row * (1 + tol)).max() > 0:
            return False
    if (field_total(flat["field_mass"].reshape(-1, n_fields)) - mass * (1 + tol) - tol).max(initial=-1.0) > 0:
        return False
    first = flat.get("first_mass")
    # the per-example check's max(first - (1 + tol), first - mass (1 + tol) - tol) > 0, exactly: fl(a - b) > 0 iff a > b
    if first is not None and first.size and (first.max() > 1 + tol or (first - mass * (1 + tol)).max() > tol):
        return False
    caps = {n: np.log(max(n, 1)) * (1 + tol) + 1e-6 for n in set(n_ex.tolist())}  # as check_reductions has it
    cap_row = np.repeat(np.array([caps[n] for n in n_ex.tolist()]), n_rows)
    for col in ("entropy", "entropy_rownorm"):
        e = flat[col]
        if not e.size:
            continue
        if e.min() < -1e-6:
            return False
        high = np.maximum.reduceat(e, starts) - cap_row  # > 0 exactly when some query's e - cap > 0
        if col == "entropy":
            high = high[soft]
        if high.max(initial=-1.0) > 0:
            return False
    return True


@dataclass(frozen=True)
class ReductionBatch:
    """Examples of one length, stacked: ``position`` (E,) is each example's place in the file's order,
    ``head_type`` (E, rows) and the reductions (E, rows, n[, F]) as in :class:`ExampleReductions`."""

    position: np.ndarray
    example_id: np.ndarray
    layer: np.ndarray
    head: np.ndarray
    head_type: np.ndarray
    reductions: dict

    @property
    def n(self) -> int:
        return int(self.reductions["row_mass"].shape[-1])


def batch_by_length(blocks, budget_bytes: int = 32 << 20, most: int = 256):
    """Group a stream of :class:`ExampleReductions` (one layer x head grid) into
    :class:`ReductionBatch` es of equal length, holding at most about ``budget_bytes`` of pending
    examples (the largest group is emitted first when it is exceeded) and ``most`` examples per batch.

    >>> import numpy as np
    >>> blk = lambda ex, n: ExampleReductions(ex, np.zeros(1), np.zeros(1), np.array(["softmax"]),
    ...     np.ones((1, n)), np.zeros((1, n)), np.zeros((1, n)), np.zeros((1, n, 2)))
    >>> [(b.n, b.position.tolist()) for b in batch_by_length([blk(7, 3), blk(8, 5), blk(9, 3)])]
    [(3, [0, 2]), (5, [1])]
    """
    pending: dict[int, list] = {}
    size: dict[int, int] = {}
    total = 0

    def emit(n):
        nonlocal total
        items = pending.pop(n)
        total -= size.pop(n)
        first = items[0][1]
        cols = [c for c in _RED_COLUMNS if getattr(first, c) is not None]
        return ReductionBatch(
            np.array([p for p, _ in items], dtype=np.int64),
            np.array([b.example_id for _, b in items], dtype=np.int64),
            first.layer, first.head,
            np.stack([b.head_type for _, b in items]),
            {c: np.stack([getattr(b, c) for _, b in items]) for c in cols},
        )

    for pos, blk in enumerate(blocks):
        n = blk.row_mass.shape[-1]
        nbytes = sum(getattr(blk, c).nbytes for c in _RED_COLUMNS if getattr(blk, c) is not None)
        # a copy: a view would keep its whole row group alive while it waits
        kept = ExampleReductions(blk.example_id, blk.layer, blk.head, blk.head_type,
                                 **{c: (None if getattr(blk, c) is None else getattr(blk, c).copy()) for c in _RED_COLUMNS})
        pending.setdefault(n, []).append((pos, kept))
        size[n] = size.get(n, 0) + nbytes
        total += nbytes
        if len(pending[n]) >= most:
            yield emit(n)
        while total > budget_bytes and pending:
            yield emit(max(size, key=size.get))
    for n in sorted(pending):
        yield emit(n)
