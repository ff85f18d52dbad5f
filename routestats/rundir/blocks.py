"""Per-example attention blocks decoded from one Parquet row group, validated as they are read.

:func:`iter_blocks` yields, per example, an :class:`ExampleAttention` (matrices form) or an
:class:`ExampleReductions` (per-query reductions form); every value is checked against the
contract (shapes, finiteness, probabilities per head type) on the way.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from routestats.errors import RoutestatsError, RunFormatError
from routestats.rundir import schema as S
from routestats.rundir.reductions import field_total

__all__ = ["ExampleAttention", "ExampleReductions", "check_grid", "check_probabilities", "decoding", "parquet_file", "read_table",
           "RowGroupColumns", "ExampleRows", "check_reductions"]


def _unreadable(path, exc) -> RunFormatError:
    return RunFormatError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")


_DECODE_ERRORS = (pa.ArrowException, UnicodeDecodeError, ValueError, OverflowError, IndexError, KeyError, TypeError)


@contextmanager
def decoding(path):
    """Turn an error raised while decoding an untrusted file into a :class:`RunFormatError` naming it
    (the contract's own checks raise RunFormatError themselves and pass through)."""
    try:
        yield
    except RoutestatsError:
        raise
    except _DECODE_ERRORS as exc:
        raise _unreadable(path, exc) from None


def parquet_file(path) -> pq.ParquetFile:
    """Open a Parquet file; a truncated, empty or corrupt file is a :class:`RunFormatError` naming it."""
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _unreadable(path, exc) from None


def read_table(path) -> pa.Table:
    """Read a whole (small) Parquet table, with the same error translation as :func:`parquet_file`."""
    pf = parquet_file(path)
    _row_group_chunks(pf, str(path))  # the decoded-size budget, from the metadata, before decoding
    try:
        return pf.read()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _unreadable(path, exc) from None

@dataclass(frozen=True)
class ExampleAttention:
    """All stored attention matrices of one example (form ``matrices``).

    ``weights`` has shape (rows, n, n), one row per (layer, head) sorted by layer then head;
    ``value_norms`` (rows, n) the norm of what each head transports from each key, when stored.
    """

    example_id: int
    layer: np.ndarray
    head: np.ndarray
    head_type: np.ndarray
    weights: np.ndarray
    value_norms: np.ndarray | None = None


@dataclass(frozen=True)
class ExampleReductions:
    """Per-query reductions of one example (form ``reductions``); arrays are (rows, n[, F])."""

    example_id: int
    layer: np.ndarray
    head: np.ndarray
    head_type: np.ndarray
    row_mass: np.ndarray
    entropy: np.ndarray
    entropy_rownorm: np.ndarray
    field_mass: np.ndarray
    first_mass: np.ndarray | None = None  # mass on key 0 (optional column)


# ---------------------------------------------------------------- manifest checks



# ---------------------------------------------------------------- streaming helpers
class RowGroupColumns:
    """One row group's columns as numpy, each converted once (list columns as values + offsets)."""

    def __init__(self, table: pa.Table):
        self.table = table
        self._plain: dict = {}
        self._lists: dict = {}

    def plain(self, name: str) -> np.ndarray:
        if name not in self._plain:
            self._plain[name] = self.table[name].combine_chunks().to_numpy(zero_copy_only=False)
        return self._plain[name]

    def lists(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        if name not in self._lists:
            arr = self.table[name].combine_chunks()
            self._lists[name] = (arr.values.to_numpy(zero_copy_only=False), arr.offsets.to_numpy())
        return self._lists[name]


class ExampleRows:
    """Rows [s, e) of a :class:`RowGroupColumns`: one example's rows, as numpy views."""

    def __init__(self, cols: RowGroupColumns, s: int, e: int):
        self.cols, self.s, self.e = cols, s, e

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols.plain(name)[self.s : self.e]

    def list_values(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(values, offsets) with offsets[i]..offsets[i+1] the values of row i (absolute into values)."""
        values, offsets = self.cols.lists(name)
        return values, offsets[self.s : self.e + 1]


CHUNK_BYTES = 8 << 20  # read consecutive row groups together up to about this much decoded data


def max_decoded_bytes() -> int:
    """The most one row group may decode to (``ROUTESTATS_MAX_DECODE_MB``, default 2048 MB)."""
    from routestats.settings import ENVIRONMENT, env_number

    return int(env_number("ROUTESTATS_MAX_DECODE_MB", **ENVIRONMENT["ROUTESTATS_MAX_DECODE_MB"]) * (1 << 20))


BOMB_FLOOR = 64 << 20  # a row group decoding to less than this is never refused for its compression ratio
MAX_RATIO = 200.0  # decoded / stored bytes above which a large row group is a decompression bomb


def max_ratio() -> float:
    """The largest decoded / stored ratio of a row group over :data:`BOMB_FLOOR` (``ROUTESTATS_MAX_DECODE_RATIO``,
    default 200; attention written by routestats stores at ratios of 1-25, uniform rows of a bomb at 20,000)."""
    from routestats.settings import ENVIRONMENT, env_number

    return env_number("ROUTESTATS_MAX_DECODE_RATIO", **ENVIRONMENT["ROUTESTATS_MAX_DECODE_RATIO"])


def check_decoded_size(meta, rg: int, fname: str) -> int:
    """The decoded size of row group ``rg`` from the file's own metadata, refused in one line before
    anything is decoded when it exceeds :func:`max_decoded_bytes`, or when a large group (over
    :data:`BOMB_FLOOR`) would decompress more than :func:`max_ratio`-fold (a small file of constant
    rows that would fill memory: refused with the memory still free)."""
    uncompressed = stored = 0
    for c in range(meta.num_columns):  # each column's metadata made once (an object per call)
        col = meta.column(c)
        uncompressed += max(0, col.total_uncompressed_size)
        stored += max(0, col.total_compressed_size)
    decoded = max(meta.total_byte_size, uncompressed)
    budget = max_decoded_bytes()
    if decoded > budget:
        raise RunFormatError(f"{fname}: row group {rg} decodes to {decoded / 2**20:,.0f} MB, more than the "
                             f"{budget / 2**20:,.0f} MB allowed (ROUTESTATS_MAX_DECODE_MB); refused before reading it")
    ratio = decoded / max(stored, 1)
    if decoded > BOMB_FLOOR and ratio > max_ratio():
        raise RunFormatError(f"{fname}: row group {rg} would decompress {ratio:,.0f}-fold ({stored / 2**10:,.0f} KB "
                             f"stored, {decoded / 2**20:,.0f} MB decoded), more than the {max_ratio():,.0f}-fold "
                             "allowed (ROUTESTATS_MAX_DECODE_RATIO); refused before reading it")
    return decoded


def groups_holding(pf: pq.ParquetFile, examples) -> list[int]:
    """The row groups that may hold rows of ``examples`` (None: every group), by each group's ``example_id``
    min/max statistics (a group without them is read): reading one example of a 2 x 2,336 pair's matrices
    decodes its own row groups, not 1.2 GB.

    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "a.parquet")
    >>> pq.write_table(pa.table({"example_id": [0, 0, 1, 2, 2, 3]}), path, row_group_size=2)
    >>> groups_holding(pq.ParquetFile(path), [2]), groups_holding(pq.ParquetFile(path), None)
    ([1, 2], [0, 1, 2])
    """
    every = list(range(pf.num_row_groups))
    if examples is None:
        return every
    want = np.asarray(sorted({int(e) for e in examples}), dtype=np.int64)
    col = pf.schema_arrow.get_field_index("example_id")
    out = []
    for rg in every:
        st = pf.metadata.row_group(rg).column(col).statistics if col >= 0 else None
        if st is None or not st.has_min_max:
            out.append(rg)
            continue
        i = np.searchsorted(want, int(st.min))
        if i < len(want) and want[i] <= int(st.max):
            out.append(rg)
    return out


def _row_group_chunks(pf: pq.ParquetFile, fname: str = "attention file", groups=None) -> list[list[int]]:
    """Row groups in order (``groups``, default all), batched so that each read decodes about
    :data:`CHUNK_BYTES` (a file written in small row groups is then not read in thousands of small pieces);
    every row group's decoded size is checked first (:func:`check_decoded_size`)."""
    chunks, cur, size = [], [], 0
    for rg in (range(pf.num_row_groups) if groups is None else groups):
        meta = pf.metadata.row_group(rg)
        check_decoded_size(meta, rg, fname)
        cur.append(rg)
        size += max(0, meta.total_byte_size)
        if size >= CHUNK_BYTES:
            chunks.append(cur)
            cur, size = [], 0
    if cur:
        chunks.append(cur)
    return chunks


def iter_block_groups(pf: pq.ParquetFile, examples, layers, fname: str = "attention file"):
    """Yield (:class:`RowGroupColumns`, [(example_id, start, end), ...]) per chunk of row groups (see
    :func:`_row_group_chunks`): the examples whose rows the chunk completes, as consecutive row ranges of its columns (an example that continues into the
    next group is carried over and yielded with it).

    Every example's rows must be contiguous (an example id that reappears later is an error, raised
    after the examples before it have been yielded)."""
    want_ex = None if examples is None else set(int(e) for e in examples)
    want_layers = None if layers is None else np.asarray(sorted(set(int(x) for x in layers)))
    carry: pa.Table | None = None
    done: set[int] = set()
    chunks = _row_group_chunks(pf, fname, groups_holding(pf, want_ex))  # groups without them: not decoded
    for i, groups in enumerate(chunks):
        try:
            t = pf.read_row_groups(groups)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise _unreadable(fname, exc) from None
        if want_ex is not None:
            mask = pa.compute.is_in(t["example_id"], pa.array(sorted(want_ex), pa.int64()))
            t = t.filter(mask)
        if want_layers is not None:
            mask = pa.compute.is_in(t["layer"], pa.array(want_layers, pa.int16()))
            t = t.filter(mask)
        if carry is not None:
            t = pa.concat_tables([carry, t])
            carry = None
        if t.num_rows == 0:
            continue
        ex = t["example_id"].to_numpy()
        # example ids in first-appearance order; the last one may continue in the next group
        change = np.flatnonzero(np.diff(ex)) + 1
        starts = np.concatenate([[0], change]).tolist()
        ends = np.concatenate([change, [len(ex)]]).tolist()
        last = i == len(chunks) - 1
        cols = RowGroupColumns(t)
        segs = []
        for s, e in zip(starts, ends):
            if e == len(ex) and not last:
                carry = t.slice(s, e - s)
                break
            eid = int(ex[s])
            if eid in done:
                if segs:
                    yield cols, segs
                raise RunFormatError(f"{fname}: the rows of example_id {eid} are not contiguous")
            done.add(eid)
            segs.append((eid, s, e))
        if segs:
            yield cols, segs
    if carry is not None and carry.num_rows:
        e0 = int(carry["example_id"][0].as_py())
        if e0 in done:
            raise RunFormatError(f"{fname}: the rows of example_id {e0} are not contiguous")
        yield RowGroupColumns(carry), [(e0, 0, carry.num_rows)]


def iter_blocks(pf: pq.ParquetFile, examples, layers, fname: str = "attention file"):
    """Yield (example_id, :class:`ExampleRows` of its rows), streaming row group by row group (see
    :func:`iter_block_groups`)."""
    for cols, segs in iter_block_groups(pf, examples, layers, fname):
        for ex, s, e in segs:
            yield ex, ExampleRows(cols, s, e)


def check_grid(fname: str, blk, grid):
    """Every example holds the same complete layer x head grid; returns the grid (layers, heads)."""
    layers, heads = np.unique(blk.layer), np.unique(blk.head)
    if len(blk.layer) != len(layers) * len(heads):
        have = set(zip(blk.layer.tolist(), blk.head.tolist()))
        miss = [(int(a), int(b)) for a in layers for b in heads if (a, b) not in have][:3]
        raise RunFormatError(f"{fname}: example_id {blk.example_id} lacks (layer, head) {miss} of its "
                             f"{len(layers)} x {len(heads)} grid")
    if grid is None:
        return layers, heads
    if not (np.array_equal(grid[0], layers) and np.array_equal(grid[1], heads)):
        raise RunFormatError(f"{fname}: example_id {blk.example_id} holds layers {layers.tolist()} x heads "
                             f"{heads.tolist()}, but earlier examples hold {grid[0].tolist()} x {grid[1].tolist()}")
    return grid


def _check_head_types(fname, ex, head_type) -> None:
    bad = ~np.isin(head_type, S.HEAD_TYPES)
    if bad.any():
        raise RunFormatError(f"{fname}: column 'head_type' of example_id {ex} holds {head_type[bad][0]!r}; "
                             f"head types are {', '.join(S.HEAD_TYPES)}")


def _sorted_rows(rows: ExampleRows):
    layer = rows["layer"].astype(np.int64)
    head = rows["head"].astype(np.int64)
    order = np.lexsort((head, layer))
    key = layer[order] * 100000 + head[order]
    return layer, head, order, key


def matrices_block(fname, ex, rows, lengths, dtype, causal: bool = False) -> ExampleAttention:
    if ex not in lengths:
        raise RunFormatError(f"{fname}: example_id {ex} is not in {S.EXAMPLES}")
    layer, head, order, key = _sorted_rows(rows)
    if np.any(np.diff(key) == 0):
        raise RunFormatError(f"{fname}: example_id {ex} has a repeated (layer, head) row")
    ns = rows["n"]
    n = lengths[ex]
    if np.any(ns != n):
        raise RunFormatError(
            f"{fname}: column 'n' of example_id {ex} is {int(ns[ns != n][0])}, but the example's "
            f"evaluated length is {n}"
        )
    values, offsets = rows.list_values("weights")
    sizes = np.diff(offsets)
    if np.any(sizes != n * n):
        i = int(np.flatnonzero(sizes != n * n)[0])
        raise RunFormatError(
            f"{fname}: column 'weights' of example_id {ex}, layer {layer[i]}, head {head[i]} has "
            f"{sizes[i]} values, expected n*n = {n * n}"
        )
    w = values[offsets[0] : offsets[-1]].reshape(len(ns), n, n)
    if not np.array_equal(order, np.arange(len(order))):
        w = w[order]
    layer, head = layer[order], head[order]
    head_type = rows["head_type"][order]
    check_probabilities(fname, ex, layer, head, head_type, w, dtype)
    if causal and n > 1:
        upper = w[:, np.triu(np.ones((n, n), dtype=bool), 1)]
        if upper.size and upper.max() > 0:
            r = int(np.argmax(upper.max(axis=1)))
            raise RunFormatError(f"{fname}: example_id {ex}, layer {layer[r]}, head {head[r]} attends to a later "
                                 "position, but the run is causal (attention.causal)")
    norms = None
    if "value_norms" in rows.cols.table.column_names:
        values, offsets = rows.list_values("value_norms")
        if np.any(np.diff(offsets) != n):
            raise RunFormatError(f"{fname}: column 'value_norms' of example_id {ex} has the wrong number of values "
                                 f"(expected n = {n} per row)")
        norms = values[offsets[0] : offsets[-1]].reshape(len(ns), n)[order]
        if not np.isfinite(norms).all() or (norms < 0).any():
            raise RunFormatError(f"{fname}: column 'value_norms' of example_id {ex} holds a non-finite or negative "
                                 "value (norms are >= 0)")
    return ExampleAttention(ex, layer, head, head_type, w, norms)


def check_probabilities(fname, ex, layer, head, head_type, w, dtype) -> None:
    """Attention rows of known head types: finite, in [0, 1], softmax rows summing to 1, rows of heads with
    attention sinks to at most 1 (the writer checks what it stores with this too)."""
    _check_head_types(fname, ex, head_type)
    finite = np.isfinite(w)
    if not finite.all():
        i = np.argwhere(~finite)[0]
        raise RunFormatError(
            f"{fname}: column 'weights' of example_id {ex}, layer {layer[i[0]]}, head {head[i[0]]} "
            f"holds {w[tuple(i)]} at query {i[1]}, key {i[2]}"
        )
    neg = w < 0
    if neg.any():
        i = np.argwhere(neg)[0]
        raise RunFormatError(
            f"{fname}: column 'weights' of example_id {ex}, layer {layer[i[0]]}, head {head[i[0]]} "
            f"holds negative attention {float(w[tuple(i)])} at query {i[1]}, key {i[2]}"
        )
    big = w > 1.0 + S.ROW_SUM_ATOL[dtype]  # one attention weight, softmax or sigmoid, lies in [0, 1]
    if big.any():
        i = np.argwhere(big)[0]
        raise RunFormatError(
            f"{fname}: column 'weights' of example_id {ex}, layer {layer[i[0]]}, head {head[i[0]]} "
            f"holds {float(w[tuple(i)]):.6g} at query {i[1]}, key {i[2]}; attention weights lie in [0, 1] "
            f"(within {S.ROW_SUM_ATOL[dtype]:g} for {dtype})"
        )
    sinks = head_type == "sink"
    if sinks.any():  # mass outside the sequence: a row sums to at most 1
        sums = w[sinks].sum(axis=-1, dtype=np.float64)
        tol = S.ROW_SUM_ATOL[dtype]
        if sums.size and sums.max() > 1 + tol:
            r, q = np.unravel_index(int(sums.argmax()), sums.shape)
            rr = np.flatnonzero(sinks)[r]
            raise RunFormatError(
                f"{fname}: sink-head row of example_id {ex}, layer {layer[rr]}, head {head[rr]}, query {q} sums to "
                f"{sums[r, q]:.6g}; rows of heads with attention sinks sum to at most 1 (within {tol:g} for {dtype})"
            )
    soft = head_type == "softmax"
    if soft.any():
        sums = w[soft].sum(axis=-1, dtype=np.float64)
        err = np.abs(sums - 1.0)
        tol = S.ROW_SUM_ATOL[dtype]
        if err.size and err.max() > tol:
            r, q = np.unravel_index(int(err.argmax()), err.shape)
            rr = np.flatnonzero(soft)[r]
            raise RunFormatError(
                f"{fname}: softmax row of example_id {ex}, layer {layer[rr]}, head {head[rr]}, "
                f"query {q} sums to {sums[r, q]:.6g}; rows must sum to 1 within {tol:g} for {dtype}"
            )


def reductions_block(fname, ex, rows, lengths, n_fields, dtype: str = "float64") -> ExampleReductions:
    if ex not in lengths:
        raise RunFormatError(f"{fname}: example_id {ex} is not in {S.EXAMPLES}")
    layer, head, order, key = _sorted_rows(rows)
    if np.any(np.diff(key) == 0):
        raise RunFormatError(f"{fname}: example_id {ex} has a repeated (layer, head) row")
    n = lengths[ex]
    ns = rows["n"]
    if np.any(ns != n):
        raise RunFormatError(
            f"{fname}: column 'n' of example_id {ex} is {int(ns[ns != n][0])}, but the example's "
            f"evaluated length is {n}"
        )
    out = {"first_mass": None}
    cols = S.REDUCTION_COLUMNS
    for col, width in zip(cols, (1, 1, 1, n_fields, 1)):
        if col == "first_mass" and col not in rows.cols.table.column_names:
            continue  # optional column (runs written before it existed)
        values, offsets = rows.list_values(col)
        if np.any(np.diff(offsets) != n * width):
            raise RunFormatError(
                f"{fname}: column {col!r} of example_id {ex} has the wrong number of values "
                f"(expected {n * width} per row)"
            )
        arr = values[offsets[0] : offsets[-1]].reshape((len(ns), n) + ((width,) if col == "field_mass" else ()))
        # masses are non-negative; entropies can be ~ -1e-10 (the epsilon inside the log) on one-hot rows
        if not np.isfinite(arr).all() or (col in ("row_mass", "field_mass", "first_mass") and (arr < 0).any()):
            raise RunFormatError(f"{fname}: column {col!r} of example_id {ex} holds a non-finite or negative value")
        out[col] = arr[order]
    head_type = rows["head_type"][order]
    _check_head_types(fname, ex, head_type)
    check_reductions(fname, ex, layer[order], head[order], head_type, out, n, dtype)
    return ExampleReductions(ex, layer[order], head[order], head_type, **out)


def check_reductions(fname, ex, layer, head, head_type, red, n, dtype) -> None:
    """Per-query reductions that a real attention row can have: softmax rows carry mass 1, rows of heads with
    attention sinks at most 1, sigmoid rows at most n; field masses add up to at most the row mass; entropies
    within [0, ln n]."""
    tol = S.ROW_SUM_ATOL.get(dtype, 1e-9)
    mass, fmass = red["row_mass"], red["field_mass"]

    def fail(what, i, q, value):
        raise RunFormatError(f"{fname}: {what} of example_id {ex}, layer {layer[i]}, head {head[i]}, query {q} is "
                             f"{value:.6g}")

    soft = head_type == "softmax"
    err = np.where(soft[:, None], np.abs(mass - 1.0), 0.0)
    if err.size and err.max() > tol:
        i, q = np.unravel_index(int(err.argmax()), err.shape)
        fail(f"row_mass of a softmax row (must be 1 within {tol:g} for {dtype})", i, q, mass[i, q])
    over = np.where((head_type == "sink")[:, None], mass - 1.0 - tol, -np.inf)
    if over.size and over.max() > 0:
        i, q = np.unravel_index(int(over.argmax()), over.shape)
        fail(f"row_mass of a head with attention sinks (at most 1 within {tol:g} for {dtype})", i, q, mass[i, q])
    over = mass - n * (1 + tol)
    if over.size and over.max() > 0:
        i, q = np.unravel_index(int(over.argmax()), over.shape)
        fail(f"row_mass (at most n = {n})", i, q, mass[i, q])
    excess = field_total(fmass) - mass * (1 + tol) - tol
    if excess.size and excess.max() > 0:
        i, q = np.unravel_index(int(excess.argmax()), excess.shape)
        fail("the summed field_mass (at most row_mass)", i, q, fmass[i, q].sum())
    first = red.get("first_mass")
    if first is not None and first.size:  # one key's weight: at most 1 and at most the row's mass
        over = np.maximum(first - (1 + tol), first - mass * (1 + tol) - tol)
        if over.max() > 0:
            i, q = np.unravel_index(int(over.argmax()), over.shape)
            fail("first_mass (at most 1 and at most row_mass)", i, q, first[i, q])
    cap = np.log(max(n, 1)) * (1 + tol) + 1e-6
    for col in ("entropy", "entropy_rownorm"):
        e = red[col]
        high = np.where(soft[:, None] | (col == "entropy_rownorm"), e - cap, -np.inf)
        if e.size and (high.max() > 0 or e.min() < -1e-6):
            i, q = np.unravel_index(int(np.argmax(np.maximum(high, -e - 1e-6))), e.shape)
            fail(f"{col} (must lie in [0, ln n = {cap:.4g}])", i, q, e[i, q])
