"""Does a paired change differ between layers? Tests on the shape of the per-example profile (METHODS 3.3).

For per-example paired differences D (n examples x L layers):

* :func:`profile_shape` -- H0: the intervention shifts every layer by the same amount. The
  multivariate sign-flip test on the centred profiles c_e = d_e - mean(d_e) with
  T = sum_l (mean_e c_el)^2 (one sign per example, shared across layers; exact over all 2^n
  sign vectors when 2^n <= permutations), and Hotelling's T^2 on the L - 1 successive
  differences as its parametric companion.
* :func:`layer_contrasts` -- every Delta_l' - Delta_l with the paired bootstrap CI, sign-flip p and
  Holm over the L(L - 1)/2 contrasts (the engine of :func:`routestats.stats.paired_inference`).
* :func:`profile_distance_ci` -- the norm of the layer-mean profile with a percentile bootstrap CI.

Examples
--------
>>> rng = np.random.default_rng(0)
>>> D = rng.normal(0.1, 0.02, (30, 4)) + np.array([0, 0, 0, 0.1])  # layer 3 moves more
>>> t = profile_shape(D, permutations=2000, seed=1)
>>> t["test"].tolist(), bool((t["p"] < 0.01).all())
(['sign-flip (centred profile)', 'Hotelling T2'], True)
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from scipy import special

from routestats.errors import RoutestatsError
from routestats.settings import Resampling
from routestats.stats.draws import row_blocks, seeded_bootstrap_means
from routestats.stats.inference import paired_inference, percentile_ci, signflip_floor
from routestats.stats.work import note

__all__ = ["profile_shape", "layer_contrasts", "contrast_family", "profile_distance_ci"]

_TIE = 1e-12


def _matrix(D) -> np.ndarray:
    D = np.asarray(D, dtype=np.float64)
    if D.ndim != 2 or D.shape[1] < 2:
        raise RoutestatsError(f"a profile test needs an (examples x layers) matrix with >= 2 layers, got {D.shape}")
    if D.shape[0] < 2 or not np.isfinite(D).all():
        raise RoutestatsError("a profile test needs >= 2 examples and finite differences")
    return D


def _signflip_T(c: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """T* = sum_l (mean_e s_e c_el)^2 for each row of signs (P, n)."""
    note("profile", signs.shape[0], c.shape[0], c.shape[1])
    return (((signs @ c) / c.shape[0]) ** 2).sum(axis=1)


def _signflip_T_kept(c: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """:func:`_signflip_T` of the signs 2 keep - 1 for each row of ``keep`` (P, n) of 0/1, as 2 (keep @ c) - sum(c):
    no second pass over the patterns to make them signs.

    >>> c = np.array([[0.5, -0.5], [-0.25, 0.25], [1.0, -1.0]])
    >>> keep = np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    >>> bool(np.allclose(_signflip_T_kept(c, keep), _signflip_T(c, keep * 2.0 - 1.0), rtol=1e-15))
    True
    """
    note("profile", keep.shape[0], c.shape[0], c.shape[1])
    return (((2.0 * (keep @ c) - c.sum(axis=0)) / c.shape[0]) ** 2).sum(axis=1)


def profile_shape(D, permutations: int | None = None, seed: int | None = None,
                  resampling: Resampling | None = None) -> pd.DataFrame:
    """Layer x condition interaction: sign-flip test on centred profiles and Hotelling's T^2.

    Columns: test, statistic, df1, df2, p, n, layers, permutations, exact, p_floor (the smallest p the sign-flip
    test can give, :func:`~routestats.stats.inference.signflip_floor`; NaN for Hotelling). ``exact`` is True when
    all 2^n sign vectors were enumerated (p = #{T* >= T} / 2^n); otherwise p = (#{T* >= T} + 1) /
    (P + 1) over P random sign vectors. Hotelling's T^2 needs n > L - 1 (else p is NaN).
    """
    r = Resampling.of(resampling, permutations=permutations, seed=seed)
    permutations, seed = r.permutations, r.seed
    D = _matrix(D)
    n, L = D.shape
    c = D - D.mean(axis=1, keepdims=True)
    T = float((c.mean(axis=0) ** 2).sum())
    tol = _TIE * max(T, 1e-300)
    if 2**n <= permutations:
        count = 0
        for block in itertools.islice(_sign_blocks(n), None):
            count += int((_signflip_T(c, block) >= T - tol).sum())
        p_sf, exact, draws = count / 2**n, True, 2**n
    else:
        bits = _CoinStream(np.random.default_rng(seed))
        count, done = 0, 0
        while done < permutations:
            m = min(4096, permutations - done)
            # one stream however it is taken, so large n is drawn (and evaluated) in blocks of bounded
            # size (see row_blocks)
            for s, e in row_blocks(m, n):
                keep = bits.take((e - s) * n).reshape(e - s, n).astype(np.float64)  # 1 keeps a sign, 0 flips it
                count += int((_signflip_T_kept(c, keep) >= T - tol).sum())
                del keep  # before the next block is allocated
            done += m
        p_sf, exact, draws = (count + 1) / (permutations + 1), False, permutations
    z = np.diff(D, axis=1)
    q = L - 1
    if n > q:
        m = z.mean(axis=0)
        S = np.cov(z, rowvar=False, ddof=1).reshape(q, q)
        t2 = float(n * m @ np.linalg.pinv(S) @ m)
        F = (n - q) * t2 / (q * (n - 1))
        p_h = f_sf(F, q, n - q)
    else:
        t2, F, p_h = np.nan, np.nan, np.nan
    return pd.DataFrame([
        {"test": "sign-flip (centred profile)", "statistic": T, "df1": np.nan, "df2": np.nan, "p": p_sf, "n": n,
         "layers": L, "permutations": draws, "exact": exact, "p_floor": signflip_floor(n, permutations)[0]},
        {"test": "Hotelling T2", "statistic": t2, "df1": float(q), "df2": float(n - q), "p": p_h, "n": n,
         "layers": L, "permutations": 0, "exact": False, "p_floor": np.nan, "F": F},
    ])


class _CoinStream:
    """The values ``rng.integers(0, 2, size=k)`` gives call after call (0/1 as uint8), from the bit
    generator's raw words at a fraction of the cost (no per-value bounded draw, no int64 array).

    For a range of two numpy draws a 32-bit value and keeps its top bit (Lemire's method, which never
    rejects for a power-of-two range), taking the 32-bit values low half first from each 64-bit word
    and keeping an unused high half for the next call. Bitwise equal to ``integers``; tested.

    >>> a = np.random.default_rng(4).integers(0, 2, size=9)
    >>> bits = _CoinStream(np.random.default_rng(4))
    >>> bool(np.array_equal(np.r_[bits.take(5), bits.take(4)], a))
    True
    """

    def __init__(self, rng: np.random.Generator):
        self._bitgen = rng.bit_generator
        self._high: np.ndarray | None = None  # the top bit of a drawn word's unused high half

    def take(self, k: int) -> np.ndarray:
        if k <= 0:
            return np.empty(0, dtype=np.uint8)
        head, self._high = self._high, None
        need = k - (0 if head is None else 1)
        words = self._bitgen.random_raw(-(-need // 2)).astype("<u8", copy=False)
        halves = (words.view("<u4") >> 31).astype(np.uint8)
        if need % 2:  # the last word's high half is the next call's first value
            self._high, halves = halves[-1:].copy(), halves[:-1]
        return halves if head is None else np.concatenate([head, halves])


def f_sf(F: float, dfn: int, dfd: int) -> float:
    """Upper tail P(F(dfn, dfd) > F): the value ``scipy.stats.f.sf`` gives (its ``_sf`` is this
    ``fdtrc``; 1 at F <= 0, NaN for NaN), without importing scipy.stats (0.5 s CPU per report).

    >>> f_sf(0.0, 2, 10), round(f_sf(4.10, 2, 10), 4)
    (1.0, 0.0501)
    """
    if np.isnan(F):
        return float("nan")
    return 1.0 if F <= 0 else float(special.fdtrc(float(dfn), float(dfd), float(F)))


def _sign_blocks(n: int, block: int = 4096):
    """All 2^n sign vectors in blocks of rows (P, n), as +-1.0."""
    total = 2**n
    for s in range(0, total, block):
        k = np.arange(s, min(total, s + block), dtype=np.int64)
        bits = (k[:, None] >> np.arange(n, dtype=np.int64)[None, :]) & 1
        yield bits * 2.0 - 1.0


def contrast_family(D, layers=None) -> tuple[np.ndarray, list[str], list[tuple[int, int]]]:
    """The family :func:`layer_contrasts` tests: every Delta_b - Delta_a (a < b) as columns, their names and the
    (a, b) column pairs.

    >>> C, names, pairs = contrast_family(np.array([[0.1, 0.3, 0.2], [0.2, 0.2, 0.5]]), [4, 5, 6])
    >>> names, pairs
    (['L5 − L4', 'L6 − L4', 'L6 − L5'], [(0, 1), (0, 2), (1, 2)])
    """
    D = _matrix(D)
    layers = list(range(D.shape[1])) if layers is None else list(layers)
    pairs = [(i, j) for i in range(len(layers)) for j in range(i + 1, len(layers))]
    C = np.column_stack([D[:, j] - D[:, i] for i, j in pairs])
    return C, [f"L{layers[j]} − L{layers[i]}" for i, j in pairs], pairs


def layer_contrasts(D, layers=None, resamples: int | None = None, permutations: int | None = None,
                    seed: int | None = None, mode: str | None = None, confidence: float | None = None,
                    resampling: Resampling | None = None) -> pd.DataFrame:
    """Every pairwise contrast Delta_b - Delta_a (a < b) with paired inference, Holm over contrasts.

    Columns: contrast ("L3 - L2"), layer_a, layer_b, then the columns of
    :meth:`routestats.stats.PairedInference.to_frame` (mean_diff, ci_low, ci_high, p_raw,
    p_holm, dz, ...).
    """
    D = _matrix(D)
    layers = list(range(D.shape[1])) if layers is None else list(layers)
    C, names, pairs = contrast_family(D, layers)
    res = paired_inference(C, resampling=resampling, resamples=resamples, permutations=permutations, seed=seed,
                           mode=mode, confidence=confidence, labels=names)
    out = res.to_frame().rename(columns={"label": "contrast", "p_adj": "p_holm", "p_adj_floor": "p_holm_floor"})
    out.insert(1, "layer_a", [layers[i] for i, _ in pairs])
    out.insert(2, "layer_b", [layers[j] for _, j in pairs])
    return out


def profile_distance_ci(D, resamples: int | None = None, seed: int | None = None, confidence: float | None = None,
                        resampling: Resampling | None = None) -> pd.DataFrame:
    """||(Delta_1, ..., Delta_L)||_2 with a percentile bootstrap over examples (one row)."""
    r = Resampling.of(resampling, resamples=resamples, seed=seed, confidence=confidence)
    resamples, seed, confidence = r.resamples, r.seed, r.confidence
    D = _matrix(D)
    est = float(np.linalg.norm(D.mean(axis=0)))
    norms = np.linalg.norm(seeded_bootstrap_means(D, resamples, seed), axis=1)  # the paired tables' resamples
    lo, hi = percentile_ci(norms[:, None], confidence)
    return pd.DataFrame([{"profile_distance": est, "ci_low": float(lo[0]), "ci_high": float(hi[0]),
                          "n": D.shape[0], "layers": D.shape[1], "resamples": resamples, "seed": seed}])
