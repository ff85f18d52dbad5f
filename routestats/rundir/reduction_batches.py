"""Reductions read a row group at a time: the examples of one group validated at once over its flat
columns (:func:`reductions_group`), and stacked into batches of one length
(:class:`ReductionBatch`, :func:`batch_by_length`) for the vectorised metric pass."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from routestats.rundir import schema as S
from routestats.rundir.blocks import ExampleReductions, RowGroupColumns
from routestats.rundir.reductions import field_total

__all__ = ["reductions_group", "GroupReductions", "ReductionBatch", "batch_by_length"]


_RED_COLUMNS = S.REDUCTION_COLUMNS


def reductions_group(fname, cols: RowGroupColumns, segs, lengths, n_fields, dtype, grid) -> "GroupReductions | None":
    """The examples of one row group (``segs`` from :func:`iter_block_groups`) as validated reductions
    (:class:`GroupReductions`: iterating it gives each example's :class:`ExampleReductions`), every check of
    :func:`reductions_block` and :func:`check_grid` done at once over the group's flat columns; ``None`` when any
    check fails or the rows are not stored in grid order, so that the caller takes the per-example path (which
    names the first problem exactly as it always has, or reorders the rows).

    ``grid`` is the (layers, heads) grid the file's earlier examples hold (``None``: not known yet,
    so take the per-example path). Its arrays are views into ``cols``."""
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
    layer0 = np.repeat(grid[0], len(grid[1])).astype(np.int64)  # as the per-example path gives them
    head0 = np.tile(grid[1], len(grid[0])).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(n_rows * n_ex)[:-1]]).astype(np.int64)  # each example's first query
    return GroupReductions(np.array([ex for ex, _, _ in segs], dtype=np.int64), n_ex, layer0, head0,
                           head_type.reshape(len(segs), n_rows), flat, starts, n_fields)


@dataclass(frozen=True)
class GroupReductions:
    """The validated reductions of a row group's examples (:func:`reductions_group`), held as the group's flat
    columns: ``n`` (E,) each example's length, ``starts`` (E,) its first query in the flat columns, ``flat``
    column -> values (``field_mass``: ``n_fields`` values a query). Iterating gives each example's
    :class:`ExampleReductions` (views); :meth:`by_length` copies them out, stacked by length."""

    example_id: np.ndarray
    n: np.ndarray
    layer: np.ndarray
    head: np.ndarray
    head_type: np.ndarray  # (E, rows)
    flat: dict
    starts: np.ndarray
    n_fields: int

    def __len__(self) -> int:
        return len(self.example_id)

    def __iter__(self):
        rows, F = len(self.layer), self.n_fields
        for i, ex in enumerate(self.example_id.tolist()):
            n, q = int(self.n[i]), int(self.starts[i])
            arrays = {col: (v[q * F:(q + rows * n) * F].reshape(rows, n, F) if col == "field_mass"
                            else v[q:q + rows * n].reshape(rows, n)) for col, v in self.flat.items()}
            yield ExampleReductions(ex, self.layer, self.head, self.head_type[i], **arrays)

    def example_bytes(self) -> np.ndarray:
        """(E,) bytes of each example's reductions (what its :class:`ExampleReductions` arrays hold)."""
        per_query = sum(v.itemsize * (self.n_fields if col == "field_mass" else 1) for col, v in self.flat.items())
        return len(self.layer) * self.n * per_query

    def by_length(self) -> tuple[dict, np.ndarray]:
        """The group's examples copied out and stacked by length: ({n: {column: (k, rows, n[, F]), "head_type":
        (k, rows)}}, each example's place in its length's stack). Each length's stacks are arrays of their own (a
        pending length keeps nothing else alive) and hold what :func:`numpy.stack` of those examples'
        :class:`ExampleReductions` gives, in the group's order."""
        rows, F = len(self.layer), self.n_fields
        order = np.argsort(self.n, kind="stable")  # examples by length, in the group's order within a length
        sizes = rows * self.n[order]  # queries of each example, in that order
        ends = np.cumsum(sizes)
        begin = ends - sizes
        at = np.repeat(self.starts[order] - begin, sizes) + np.arange(int(ends[-1]))  # query positions, by length
        head_type = self.head_type[order]
        lengths, first = np.unique(self.n[order], return_index=True)
        last = np.append(first[1:], len(order))
        stacks = {}
        for n, a, b in zip(lengths.tolist(), first.tolist(), last.tolist()):
            mine, k = at[int(begin[a]):int(ends[b - 1])], b - a
            # np.take: a fancy index of the (queries, F) field masses took ten times as long a row
            stacks[n] = {"head_type": head_type[a:b].copy(), **{
                col: (np.take(v.reshape(-1, F), mine, axis=0).reshape(k, rows, n, F) if col == "field_mass"
                      else np.take(v, mine).reshape(k, rows, n)) for col, v in self.flat.items()}}
        place = np.empty(len(order), dtype=np.int64)
        place[order] = np.arange(len(order)) - np.repeat(first, last - first)
        return stacks, place


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
    """Group a stream of :class:`ExampleReductions` and :class:`GroupReductions` (one layer x head grid) into
    :class:`ReductionBatch` es of equal length, holding at most about ``budget_bytes`` of pending
    examples (the largest group is emitted first when it is exceeded) and ``most`` examples per batch.
    A group's examples count one at a time, in the file's order, as single examples do; each length's examples
    of a group are copied out together (a view would keep the whole row group alive while they wait).

    >>> import numpy as np
    >>> blk = lambda ex, n: ExampleReductions(ex, np.zeros(1), np.zeros(1), np.array(["softmax"]),
    ...     np.ones((1, n)), np.zeros((1, n)), np.zeros((1, n)), np.zeros((1, n, 2)))
    >>> [(b.n, b.position.tolist()) for b in batch_by_length([blk(7, 3), blk(8, 5), blk(9, 3)])]
    [(3, [0, 2]), (5, [1])]
    """
    pending: dict[int, list] = {}  # n -> [(position, example_id, source, index)]: a copied block, or a stack
    size: dict[int, int] = {}
    total = 0
    pos = 0

    def emit(n):
        nonlocal total
        total -= size.pop(n)
        return _batch(pending.pop(n))

    def add(n, ex, src, i, nbytes):
        nonlocal total, pos
        pending.setdefault(n, []).append((pos, ex, src, i))
        pos += 1
        size[n] = size.get(n, 0) + nbytes
        total += nbytes
        if len(pending[n]) >= most:
            yield emit(n)
        while total > budget_bytes and pending:
            yield emit(max(size, key=size.get))

    for blk in blocks:
        if isinstance(blk, GroupReductions):
            stacks, place = blk.by_length()  # copied out: nothing pending keeps the row group alive
            for st in stacks.values():
                st["grid"] = (blk.layer, blk.head)
            for ex, n, j, nbytes in zip(blk.example_id.tolist(), blk.n.tolist(), place.tolist(),
                                        blk.example_bytes().tolist()):
                yield from add(n, ex, stacks[n], j, nbytes)
            continue
        n = blk.row_mass.shape[-1]
        nbytes = sum(getattr(blk, c).nbytes for c in _RED_COLUMNS if getattr(blk, c) is not None)
        # a copy: a view would keep its whole row group alive while it waits
        kept = ExampleReductions(blk.example_id, blk.layer, blk.head, blk.head_type,
                                 **{c: (None if getattr(blk, c) is None else getattr(blk, c).copy()) for c in _RED_COLUMNS})
        yield from add(n, blk.example_id, kept, None, nbytes)
    for n in sorted(pending):
        yield emit(n)


def _batch(items) -> ReductionBatch:
    """The batch of pending ``items`` ((position, example_id, source, index) of one length, in the file's order):
    consecutive examples of one group's stack are taken as one slice, a single example as itself."""
    first = items[0][2]
    layer, head = (first.layer, first.head) if isinstance(first, ExampleReductions) else first["grid"]
    cols = [c for c in _RED_COLUMNS if _column(first, c) is not None]
    runs = []  # [source, start, stop]: start None for a single example
    for _, _, src, i in items:
        if runs and runs[-1][0] is src and i is not None and runs[-1][2] == i:
            runs[-1][2] += 1
        else:
            runs.append([src, i, None if i is None else i + 1])

    def parts(c):
        return [_column(src, c)[None] if i is None else _column(src, c)[i:j] for src, i, j in runs]

    return ReductionBatch(np.array([p for p, _, _, _ in items], dtype=np.int64),
                          np.array([e for _, e, _, _ in items], dtype=np.int64),
                          layer, head, np.concatenate(parts("head_type")), {c: np.concatenate(parts(c)) for c in cols})


def _column(src, name: str):
    """Column ``name`` of a pending source: a copied :class:`ExampleReductions` or a stack of one group's examples."""
    return getattr(src, name) if isinstance(src, ExampleReductions) else src.get(name)
