"""The paired inference engine (METHODS Part I section 3): one implementation of each procedure.

All procedures take paired differences ``d`` of shape (n,) or (n, k) -- k columns forming
one family (e.g. the layers) -- an explicit seed, and return frozen result objects with
``.to_frame()``. Randomness is deterministic in the seed.

Modes of :func:`paired_inference`
---------------------------------
``"shared"`` (canonical)
    One ``numpy.random.default_rng(seed)``. Bootstrap: one index matrix shared by all
    columns, index = floor(u * n) from ``Generator.random`` doubles (one 64-bit draw each,
    so the stream does not depend on chunking), drawn before the signs; each resample mean
    is (resample counts @ d) / n, one matrix product for all columns. Sign flips: one
    sign matrix shared by all columns, sign bits = the raw 64-bit outputs of the bit
    generator read little-endian (bit i of draw p = sign of example i; 1 keeps, 0 flips),
    ``ceil(n / 64)`` words per draw. Evaluated in chunks: memory stays bounded and the
    columns share one matrix product. A permuted |mean| counts as >= the observed one
    within 1e-12 x max|d| (so exact ties count despite summation order). The draws, made once per example set
    and seed and reused by every table of those examples, and their products live in
    :mod:`routestats.stats.draws`.
``"numpy"`` (reference compatibility, METHODS 3.1)
    ``default_rng(seed)`` consumed column by column: ``integers(0, n, size=(B, n))``
    bootstrap indices, then ``choice([-1.0, 1.0], size=(P, n))`` signs; exact ``>=``.
``"python-random"`` (reference compatibility, METHODS 3.2)
    Column l: bootstrap from ``random.Random(seed + l)`` with ``randrange(n)`` one index
    at a time and order-statistic percentiles; signs from ``random.Random(seed + 100 + l)``
    with one ``getrandbits(1)`` per value. No d_z in the reference output (we still report it).

In every mode: percentile bootstrap CI of the mean difference (``numpy.quantile`` linear
interpolation except python-random), two-sided sign-flip p on |mean| with the plus-one
correction p = (count + 1) / (P + 1), Holm across the columns, d_z = mean / SD (ddof 1).

Examples
--------
>>> import numpy as np
>>> d = np.array([[0.10, 0.02], [0.12, -0.01], [0.08, 0.00], [0.11, 0.03]])

Monte Carlo p-values with the plus-one rule; the exact sign-flip p of column 2 (four positive
differences) is 2/16 = 0.125, of which 0.1354 is a 2,000-draw estimate.

>>> r = paired_inference(d, resamples=2000, permutations=2000, seed=1, labels=[2, 3])
>>> r.to_frame()[["label", "mean_diff", "p_raw"]].round(4).values.tolist()
[[2.0, 0.1025, 0.1354], [3.0, 0.01, 0.4843]]
>>> holm([0.01, 0.04, 0.03, 0.002]).tolist()
[0.03, 0.06, 0.06, 0.008]
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from routestats.errors import RoutestatsError
from routestats.settings import Resampling
from routestats.stats.draws import (  # noqa: F401  (public names of this module too)
    bootstrap_means, seeded_bootstrap_means, shared_tables, signflip_count, signflip_floor_drawn,
)
from routestats.stats.percentile import (  # noqa: F401  (public names of this module too)
    PERCENTILE_COVERAGE_95, SMALL_N, percentile_ci, percentile_coverage, quantile_levels,
)
from routestats.stats.reference import numpy_mode, python_mode, reference_floor
from routestats.stats.spread import sd_lower_bound

__all__ = [
    "bootstrap_means",
    "seeded_bootstrap_means",
    "holm",
    "cohen_dz",
    "paired_inference",
    "paired_inferences",
    "PairedInference",
    "signflip_count",
    "signflip_floor",
    "signflip_floor_drawn",
    "percentile_ci",
    "percentile_coverage",
    "PERCENTILE_COVERAGE_95",
    "SMALL_N",
    "array_key",
]

def as_matrix(d) -> np.ndarray:
    """Paired differences as a float64 (examples, columns) matrix (a vector becomes one column)."""
    a = np.asarray(d, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2:
        raise RoutestatsError(f"differences must be 1-D or 2-D (n x k), got shape {a.shape}")
    if a.shape[0] < 2:
        raise RoutestatsError(f"paired inference needs at least 2 pairs, got {a.shape[0]}")
    if not np.isfinite(a).all():
        raise RoutestatsError("paired differences hold NaN or infinity; drop or fix those examples first")
    return a


def holm(p) -> np.ndarray:
    """Holm step-down adjusted p-values (METHODS 3.3); NaN entries stay NaN and are not counted.

    Sort ascending; candidate_k = min(1, (m - k) * p_(k)); adjusted = running maximum, returned
    in the original order.

    >>> holm([0.04, 0.01, 0.03, 0.2]).tolist()
    [0.09, 0.04, 0.09, 0.2]
    """
    p = np.asarray(p, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    q = p[ok]
    m = q.size
    if m == 0:
        return out
    if ((q < 0) | (q > 1)).any():
        raise RoutestatsError(f"p-values must lie in [0, 1], got {q[(q < 0) | (q > 1)][0]}")
    order = np.argsort(q, kind="stable")
    cand = np.minimum(1.0, (m - np.arange(m)) * q[order])
    adj = np.maximum.accumulate(cand)
    res = np.empty(m)
    res[order] = adj
    out[ok] = res
    return out


def signflip_floor(n: int, permutations: int) -> tuple[float, bool]:
    """The smallest raw p the two-sided sign-flip test can give over ``n`` examples with ``permutations`` draws
    (the plus-one rule's 1/(P + 1), or the exact 2/2^n of the two sign patterns as extreme as the data when
    that is larger), and whether the latter (few examples) is what limits it.

    >>> signflip_floor(5, 9999), signflip_floor(40, 9999)
    ((0.0625, True), (0.0001, False))
    """
    mc, exact = 1.0 / (permutations + 1), 2.0 / 2.0 ** min(n, 1000)
    return (exact, True) if exact > mc else (mc, False)


def cohen_dz(d) -> np.ndarray:
    """Paired standardised effect d_z = mean(d) / SD(d, ddof=1) per column; NaN when all d are equal.

    >>> float(cohen_dz([1.0, 2.0, 3.0])[0])
    2.0
    """
    a = as_matrix(d)
    sd = a.std(axis=0, ddof=1)
    # all-equal differences have SD 0 mathematically; floating point can leave ~1e-17
    defined = np.ptp(a, axis=0) > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(defined, a.mean(axis=0) / np.where(defined, sd, 1.0), np.nan)


@dataclass(frozen=True)
class PairedInference:
    """Paired inference for one family of columns (e.g. the layers of one run pair).

    Arrays are aligned with ``labels``. ``p_adj`` is Holm across the family.
    """

    labels: tuple
    n: int
    mean_diff: np.ndarray
    median_diff: np.ndarray
    sd_diff: np.ndarray
    sd_diff_low: np.ndarray  # a one-sided 97.5 % lower bound on the SD (routestats.stats.spread.sd_lower_bound)
    dz: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    p_raw: np.ndarray
    p_adj: np.ndarray
    mode: str
    seed: int
    resamples: int
    permutations: int
    confidence: float
    adj_method: str = "holm"
    method: str = field(default="paired percentile bootstrap + two-sided sign-flip test")

    @property
    def p_floor(self) -> float:
        """The smallest raw p this test can give, with its draws as they were made: the ``shared`` mode's
        (:func:`signflip_floor_drawn`, about 2/2^n + 1/(P + 1)), or the reference modes' (each column draws its own
        patterns: the smallest over the columns, :func:`routestats.stats.reference.reference_floor`)."""
        if self.mode == "shared":
            return signflip_floor_drawn(self.n, self.resamples, self.permutations, self.seed)
        return reference_floor(self.mode, self.n, len(self.labels), self.resamples, self.permutations, self.seed)

    @property
    def p_adj_floor(self) -> float:
        """The smallest Holm p: the raw floor times the family's size, at most 1."""
        return min(1.0, len(self.labels) * self.p_floor)

    def to_frame(self) -> pd.DataFrame:
        """One row per label: label, n, mean_diff, median_diff, sd_diff, sd_diff_low, dz, ci_low, ci_high,
        p_raw, p_adj, p_floor, p_adj_floor (the smallest raw and Holm p the test can give: the one floor column
        that cells and sentences read), adj_method, mode, seed, resamples, permutations, confidence, method."""
        arrays = ("mean_diff", "median_diff", "sd_diff", "sd_diff_low", "dz", "ci_low", "ci_high", "p_raw", "p_adj")
        # one construction: the scalars are broadcast as inserting each column after would, at a fifth of its cost
        return pd.DataFrame({"label": list(self.labels), "n": self.n, **{k: getattr(self, k) for k in arrays},
                             "p_floor": self.p_floor, "p_adj_floor": self.p_adj_floor,
                             **{k: getattr(self, k) for k in ("adj_method", "mode", "seed", "resamples",
                                                              "permutations", "confidence", "method")}})


def paired_inference(
    d,
    *,
    resampling: Resampling | None = None,
    resamples: int | None = None,
    permutations: int | None = None,
    seed: int | None = None,
    mode: str | None = None,
    confidence: float | None = None,
    labels=None,
) -> PairedInference:
    """Bootstrap CI, sign-flip p, Holm and d_z for paired differences (variant - baseline).

    Parameters
    ----------
    d : array_like, shape (n,) or (n, k)
        Paired differences; columns form one Holm family.
    resampling : Resampling, optional
        Resamples, permutations, seed, mode and confidence as one object (default:
        :class:`routestats.settings.Resampling`'s defaults: 10,000 resamples, 20,000 sign-flip
        draws, seed 1001, mode ``shared``, 95 %); the keywords below, when given, override it.
    resamples, permutations, seed, mode, confidence
        Bootstrap resamples, sign-flip draws, the seed of the random procedure, the
        random-number procedure (see the module docstring) and the coverage of the interval.
    labels : sequence, optional
        Column labels (default 0..k-1).
    """
    r = Resampling.of(resampling, resamples=resamples, permutations=permutations, seed=seed, mode=mode,
                      confidence=confidence)
    return paired_inferences([d], resampling=r, labels=[labels])[0]


def paired_inferences(ds, *, resampling: Resampling | None = None, labels=None) -> list[PairedInference]:
    """:func:`paired_inference` of each of several families of the same examples, in one pass over their draws.

    In the ``shared`` mode every family of one example set uses the same draws; here each chunk of them is
    converted to float64 once for all the families, not once a family. Each result is bitwise what its own
    :func:`paired_inference` call gives (the same draws, chunks and products). The newest results are kept by
    the content of their differences and the procedure, so a family analysed ahead with others of its examples
    (a report's context does this) is not drawn again when a section asks for it.

    >>> rng = np.random.default_rng(0)
    >>> a, b = rng.normal(size=(30, 2)), rng.normal(0.5, 1, size=(30, 3))
    >>> r = Resampling(resamples=500, permutations=500)
    >>> both = paired_inferences([a, b], resampling=r)
    >>> bool(np.array_equal(both[1].p_raw, paired_inference(b, resampling=r).p_raw))
    True
    """
    r = Resampling.of(resampling)
    resamples, permutations, seed, mode, confidence = r.resamples, r.permutations, r.seed, r.mode, r.confidence
    mats = [as_matrix(d) for d in ds]  # Resampling checked mode, counts and confidence
    labels = [None] * len(mats) if labels is None else list(labels)
    labels = [tuple(range(a.shape[1])) if lab is None else tuple(lab) for a, lab in zip(mats, labels)]
    for a, lab in zip(mats, labels):
        if len(lab) != a.shape[1]:
            raise RoutestatsError(f"{len(lab)} labels for {a.shape[1]} columns")
    keys = [_result_key(a, r) for a in mats]
    todo = [i for i, key in enumerate(keys) if key not in _RESULTS]
    if mode == "shared":
        by_n: dict = {}
        for i in todo:
            by_n.setdefault(mats[i].shape[0], []).append(i)
        for idx in by_n.values():
            for i, res in zip(idx, shared_tables([mats[i] for i in idx], resamples, permutations, int(seed), confidence)):
                _keep(keys[i], _inference(mats[i], labels[i], *res, r))
    elif mode == "numpy":
        for i in todo:
            _keep(keys[i], _inference(mats[i], labels[i], *numpy_mode(mats[i], resamples, permutations,
                                                                     np.random.default_rng(seed), confidence), r))
    else:
        for i in todo:
            _keep(keys[i], _inference(mats[i], labels[i], *python_mode(mats[i], resamples, permutations, seed,
                                                                      confidence), r))
    return [_copy(_RESULTS[key], lab) for key, lab in zip(keys, labels)]


# results by the content of their differences and the procedure (see _result_key): a family a report analyses
# more than once, or that was analysed ahead with others of its examples (one pass over their draws), is not drawn
# again; the few newest are kept
_RESULTS: dict = {}
_RESULTS_KEEP = 64


def array_key(a) -> tuple:
    """An array's content as a key: its bytes' SHA-1 and its shape (a result kept by content, never by name).

    >>> x = np.arange(6.0).reshape(2, 3)
    >>> array_key(x) == array_key(x.copy()), array_key(x) == array_key(x.reshape(3, 2))
    (True, False)
    """
    a = np.ascontiguousarray(a)
    return hashlib.sha1(a.view(np.uint8)).hexdigest(), a.shape


def _result_key(a: np.ndarray, r: Resampling) -> tuple:
    """The content of a family's differences (:func:`array_key`) and the procedure that analyses them."""
    return (*array_key(a), int(r.resamples), int(r.permutations), int(r.seed), r.mode, float(r.confidence))


def _keep(key: tuple, res: PairedInference) -> None:
    _RESULTS.pop(key, None)
    _RESULTS[key] = res
    while len(_RESULTS) > _RESULTS_KEEP:
        _RESULTS.pop(next(iter(_RESULTS)))  # oldest first


def _copy(res: PairedInference, labels: tuple) -> PairedInference:
    """A kept result with the caller's labels and arrays of its own (a caller's edit reaches no other)."""
    arrays = {k: v.copy() for k, v in vars(res).items() if isinstance(v, np.ndarray)}
    return replace(res, labels=labels, **arrays)


def _inference(a: np.ndarray, labels: tuple, lo, hi, count, r: Resampling) -> PairedInference:
    p = (count + 1) / (r.permutations + 1)
    return PairedInference(
        labels=labels,
        n=a.shape[0],
        mean_diff=a.mean(axis=0),
        median_diff=np.median(a, axis=0),
        sd_diff=a.std(axis=0, ddof=1),
        sd_diff_low=sd_lower_bound(a),
        dz=cohen_dz(a),
        ci_low=np.asarray(lo, dtype=np.float64),
        ci_high=np.asarray(hi, dtype=np.float64),
        p_raw=p,
        p_adj=holm(p),
        mode=r.mode,
        seed=int(r.seed),
        resamples=int(r.resamples),
        permutations=int(r.permutations),
        confidence=float(r.confidence),
    )
