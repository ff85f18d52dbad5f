"""The ``shared`` mode's random draws (:mod:`routestats.stats.inference`): bootstrap resample counts and sign patterns
made once per example set and seed, kept within a memory budget and reused by every table of those examples, and the
products of one or several tables with them (each table's numbers bitwise what it gets alone).

>>> d = np.array([[0.10, 0.02], [0.12, -0.01], [0.08, 0.00], [0.11, 0.03]])
>>> lo, hi, count = shared_tables([d], 200, 200, 1, 0.95)[0]
>>> bool(lo[0] <= d[:, 0].mean() <= hi[0]), count.shape
(True, (2,))
"""

from __future__ import annotations

import functools

import numpy as np

from routestats.stats.percentile import percentile_ci
from routestats.stats.work import note

__all__ = ["row_blocks", "signflip_count", "signflip_counts", "bootstrap_means", "bootstrap_count_chunks",
           "seeded_bootstrap_means", "signflip_floor_drawn", "shared_tables"]

_REL_TIE = 1e-12
_CHUNK = 2048
_BLOCK_VALUES = 1 << 24  # the most values (128 MB of float64) one unsplit sign-pattern product holds
_SPLIT_VALUES = 1 << 22  # the most values (32 MB) of each block once a product is split
_ONE_BLOCK_N = 4096  # beyond this many examples products are always split


def row_blocks(rows: int, n: int):
    """Row ranges [s, e) for evaluating a (rows x n) sign-pattern product: for n <= 4,096 examples one
    block when it holds at most :data:`_BLOCK_VALUES` values (every shape of the reference procedures,
    so their numbers stay bitwise what one product gives), else -- and always beyond n = 4,096, the
    short last chunk of a stream included -- blocks of at most :data:`_SPLIT_VALUES` values (bounded
    memory at the scale of whole splits: 32 MB per block; a count can then differ from one product's
    only where a permuted statistic lies within rounding of the observed one).

    >>> list(row_blocks(2048, 2336)), len(list(row_blocks(2048, 70_000)))  # 2^22 // 70,000 = 59 rows a block
    ([(0, 2048)], 35)
    >>> list(row_blocks(1568, 10_000))[:2]  # the last chunk of 20,000 draws, split too: 2^22 // 10,000 = 419 rows
    [(0, 419), (419, 838)]
    """
    one = n <= _ONE_BLOCK_N and rows * n <= _BLOCK_VALUES
    step = rows if one else max(1, _SPLIT_VALUES // n)
    for s in range(0, rows, step):
        yield s, min(rows, s + step)


@functools.lru_cache(maxsize=64)
def signflip_floor_drawn(n: int, resamples: int, permutations: int, seed: int) -> float:
    """The smallest raw p the ``shared`` mode's sign-flip test gives over ``n`` examples with its draws as they are
    made (the bootstrap counts, then the sign patterns, from ``default_rng(seed)``): data all of one sign are reached
    by exactly the drawn patterns that keep every sign or flip every sign, so p = (c + 1) / (P + 1) with c the number
    of such patterns among the P drawn. About 2/2^n + 1/(P + 1), on either side of :func:`signflip_floor`'s
    max(2/2^n, 1/(P + 1)) by chance: with 10,000 resamples, 4,999 patterns and seed 1001, 9 examples give 0.0046
    (the max says 0.0039) and 12 give 0.0004 (it says 0.00049). Beyond 62 examples a pattern of any feasible P is
    all of one sign with probability below 1e-9: 1/(P + 1).

    >>> round(signflip_floor_drawn(9, 10_000, 4_999, 1001), 4)
    0.0046
    """
    n, permutations = int(n), int(permutations)
    if n > 62:
        return 1.0 / (permutations + 1)
    rng = np.random.default_rng(seed)
    for _ in _count_chunks(rng, n, resamples):  # the bootstrap's draws come first in the stream (_shared_draws)
        pass
    words = -(-n // 64)
    full = (1 << n) - 1
    c = 0
    for s in range(0, permutations, _CHUNK):
        raw = rng.bit_generator.random_raw(min(_CHUNK, permutations - s) * words).astype("<u8")
        low = raw & np.uint64(full)  # one word a pattern (n <= 62): bit j keeps example j's sign
        c += int(((low == 0) | (low == np.uint64(full))).sum())
    return (c + 1) / (permutations + 1)


def signflip_count(d: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """Count sign patterns whose |mean| reaches the observed |mean|, per column.

    Parameters
    ----------
    d : ndarray (n, k)
    bits : ndarray (P, n) of 0/1
        1 keeps the sign of a difference, 0 flips it.

    The permuted mean is (2 * bits @ d - sum(d)) / n, evaluated as one matrix product.
    """
    return signflip_counts([d], bits)[0]


def signflip_counts(ds, bits: np.ndarray) -> list[np.ndarray]:
    """:func:`signflip_count` of each table of ``ds`` (each (n, k_i), the same n) against the same sign
    patterns, each block of patterns converted to float64 once for every table (each table's counts are
    bitwise its own call's: the same blocks, the same product).

    >>> bits = np.array([[1, 1, 1], [0, 1, 1], [1, 0, 1], [0, 0, 0]], dtype=np.uint8)
    >>> a, b = np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, -1.0], [-1.0, 1.0], [0.5, 0.5]])
    >>> [c.tolist() for c in signflip_counts([a, b], bits)], signflip_count(b, bits).tolist()
    ([[2], [4, 4]], [4, 4])
    """
    n = ds[0].shape[0]
    totals = [d.sum(axis=0) for d in ds]
    obs = [np.abs(t) / n for t in totals]
    tol = [_REL_TIE * np.abs(d).max(axis=0) for d in ds]
    counts = [np.zeros(d.shape[1], dtype=np.int64) for d in ds]
    for s, e in row_blocks(len(bits), n):
        block = bits[s:e].astype(np.float64)
        for d, total, o, t, count in zip(ds, totals, obs, tol, counts):
            stat = np.abs(2.0 * (block @ d) - total) / n
            count += (stat >= o - t).sum(axis=0)
        del block  # before the next one is made
    return counts


def bootstrap_means(d: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, k) column means of ``d`` (n, k) over bootstrap resamples of its rows (examples),
    one resample of row indices shared by every column (the ``shared`` mode's draws)."""
    n, k = d.shape
    note("boot_tables", n, k, resamples)
    means = np.empty((resamples, k))
    rows = max(1, _CHUNK * 512 // n)  # bounded memory: about 1M indices per chunk
    for s in range(0, resamples, rows):
        c = min(rows, resamples - s)
        idx = np.minimum((rng.random((c, n)) * n).astype(np.int64), n - 1)
        idx += (np.arange(c, dtype=np.int64) * n)[:, None]
        # resample counts per example, then one matrix product for all columns
        counts = np.bincount(idx.ravel(), minlength=c * n).reshape(c, n).astype(np.float64)
        means[s : s + c] = (counts @ d) / n
    return means


def _count_chunks(rng: np.random.Generator, n: int, resamples: int):
    """Bootstrap resample counts, chunk by chunk ((c, n) unsigned ints; row r counts how often each
    example is drawn in resample r): the draws of :func:`bootstrap_means` and the shared mode."""
    note("boot_draws", n, resamples)
    rows = max(1, _CHUNK * 512 // n)  # bounded memory: about 1M indices per chunk
    for s in range(0, resamples, rows):
        c = min(rows, resamples - s)
        idx = np.minimum((rng.random((c, n)) * n).astype(np.int64), n - 1)
        idx += (np.arange(c, dtype=np.int64) * n)[:, None]
        cnt = np.bincount(idx.ravel(), minlength=c * n).reshape(c, n)
        top = int(cnt.max()) if cnt.size else 0
        yield cnt.astype(np.uint8 if top < 256 else np.uint16 if top < 65536 else np.uint32)


def bootstrap_count_chunks(n: int, resamples: int, seed: int):
    """The shared mode's bootstrap counts for ``n`` examples and ``seed`` (reused when a paired table of
    the same examples drew them already), chunk by chunk; any statistic that is a function of
    weighted sums over examples (means, least-squares lines) can use them.

    >>> sum(int(c.sum()) for c in bootstrap_count_chunks(5, 100, 1))   # every resample draws n examples
    500
    """
    for (kn, kr, _kp, ks), (counts, _bits) in _DRAWS.items():
        if (kn, kr, ks) == (n, resamples, seed):
            yield from counts
            return
    yield from _count_chunks(np.random.default_rng(seed), n, resamples)


def _means_many(ds, chunks, resamples: int) -> list[np.ndarray]:
    """Bootstrap means of each table of ``ds`` (the same n) from the same count chunks, each chunk
    converted to float64 once for every table (each table's means bitwise its own call's)."""
    means = []
    for d in ds:
        note("boot_tables", d.shape[0], d.shape[1], resamples)
        means.append(np.empty((resamples, d.shape[1])))
    s = 0
    for cnt in chunks:  # uint counts are exact: as float64 they are what bootstrap_means multiplies
        c = cnt.astype(np.float64)
        for d, m in zip(ds, means):
            m[s : s + len(cnt)] = (c @ d) / d.shape[0]
        s += len(cnt)
    return means


def seeded_bootstrap_means(d, resamples: int, seed: int) -> np.ndarray:
    """``bootstrap_means(d, resamples, numpy.random.default_rng(seed))``, bitwise, without drawing
    again when a paired table of the same number of examples and seed kept its draws (the same
    counts, chunk shapes and products).

    >>> d = np.arange(12.0).reshape(6, 2)
    >>> bool(np.array_equal(seeded_bootstrap_means(d, 50, 3), bootstrap_means(d, 50, np.random.default_rng(3))))
    True
    """
    d = np.asarray(d, dtype=np.float64)
    d = d[:, None] if d.ndim == 1 else d
    return _means_many([d], bootstrap_count_chunks(len(d), resamples, seed), resamples)[0]


_DRAWS: dict = {}  # (n, resamples, permutations, seed) -> (count chunks, packed sign chunks); see _shared_draws
# bytes of draws kept for reuse: the counts (one byte each) and packed signs of one example set of up to about
# 23,000 examples (2 x 20,000 pair: each of the layer summary's tables drew 10 s afresh, 4 s of it counts)
_DRAW_BUDGET = 256 * 2**20


def _signs(raw: np.ndarray, n: int) -> np.ndarray:
    """Sign bits (c, n) of 0/1 from ``c * ceil(n / 64)`` raw generator words (bit j of a pattern's words is
    example j), as the sign-flip products read them."""
    words = -(-n // 64)
    c = len(raw) // words
    return np.unpackbits(raw.view(np.uint8).reshape(c, words * 8), axis=1, bitorder="little")[:, :n]


def _shared_draws(n: int, resamples: int, permutations: int, seed: int):
    """The ``shared`` mode's random draws for ``n`` examples: bootstrap resample counts (chunks of
    (c, n)) and sign patterns (chunks of ``c * ceil(n / 64)`` raw 64-bit words, unpacked by
    :func:`_signs` where a table uses them), made once per (n, resamples, permutations, seed) and
    reused by every table of a report that analyses the same examples with the same seed (the
    numbers are bitwise those of drawing afresh: same generator, same order, same shapes).
    Draws larger than the budget are made afresh each time and not kept."""
    key = (n, resamples, permutations, seed)
    if key in _DRAWS:
        return _DRAWS[key]
    words = -(-n // 64)
    if resamples * n + permutations * words * 8 > _DRAW_BUDGET:  # counts of one byte, 64 signs a word
        return None  # too large to keep: the caller streams them
    rng = np.random.default_rng(seed)
    counts = list(_count_chunks(rng, n, resamples))
    signs = [rng.bit_generator.random_raw(min(_CHUNK, permutations - s) * words).astype("<u8")
             for s in range(0, permutations, _CHUNK)]
    draws = (counts, signs)
    size = sum(a.nbytes for a in counts) + sum(b.nbytes for b in signs)
    if size > _DRAW_BUDGET:  # a count above 255 widened the counts: used for this table, not kept
        return draws
    while _DRAWS and sum(sum(a.nbytes for a in c) + sum(b.nbytes for b in bb) for c, bb in _DRAWS.values()) \
            + size > _DRAW_BUDGET:
        _DRAWS.pop(next(iter(_DRAWS)))  # oldest first
    _DRAWS[key] = draws
    return draws


def _shared_streamed(d, resamples, permutations, rng, confidence):
    """The ``shared`` mode drawing as it goes (draws too large to keep)."""
    n, k = d.shape
    means = bootstrap_means(d, resamples, rng)
    lo, hi = percentile_ci(means, confidence)
    words = -(-n // 64)
    count = np.zeros(k, dtype=np.int64)
    for s in range(0, permutations, _CHUNK):
        c = min(_CHUNK, permutations - s)
        for a, b in row_blocks(c, n):  # raw words are one stream however they are taken: same signs
            count += signflip_count(d, _signs(rng.bit_generator.random_raw((b - a) * words).astype("<u8"), n))
    return lo, hi, count


def shared_tables(ds, resamples, permutations, seed, confidence) -> list[tuple]:
    """(lo, hi, count) of the ``shared`` mode for each table of ``ds`` (the same examples: bootstrap percentile
    interval and sign-flip count), from one set of draws converted once per chunk for every table; each table's
    numbers bitwise what it gets alone."""
    n = ds[0].shape[0]
    for d in ds:
        note("signs", n, d.shape[1], permutations, seed)
    draws = _shared_draws(n, resamples, permutations, seed)
    if draws is None:
        return [_shared_streamed(d, resamples, permutations, np.random.default_rng(seed), confidence) for d in ds]
    counts, signs = draws
    cis = [percentile_ci(m, confidence) for m in _means_many(ds, counts, resamples)]
    totals = [np.zeros(d.shape[1], dtype=np.int64) for d in ds]
    for raw in signs:
        for total, c in zip(totals, signflip_counts(ds, _signs(raw, n))):
            total += c
    return [(lo, hi, total) for (lo, hi), total in zip(cis, totals)]
