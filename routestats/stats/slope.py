"""The least-squares slope of each column on one regressor, tested with a heteroscedasticity-robust standard
error: HC2 with the Bell-McCaffrey degrees of freedom (Bell & McCaffrey 2002; Imbens & Kolesar 2016), the
length association's second p (docs/methods.md, Lengths).

It tests the *mean* of y against x and holds its level where y's spread, not its mean, changes with x -- a
dependence the permutation p (exact only under independence) reads as an association (issue [true-words-3]).
"""

from __future__ import annotations

import numpy as np
from scipy import special

__all__ = ["slope_hc2"]


def slope_hc2(x, y) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Per column of ``y``: the least-squares slope b on ``x`` (with an intercept), its HC2 standard error and
    the two-sided p of b = 0 against t on the Bell-McCaffrey df (one df for every column: it depends on x only).

    With h_i the leverages, e the residuals and w = (x - mean x) / Sxx (b = w . y), the HC2 variance is
    sum_i w_i^2 e_i^2 / (1 - h_i); the df is (tr M)^2 / tr(M^2) for M = diag(a) (I - H) diag(a),
    a_i = w_i / sqrt(1 - h_i), H the hat matrix -- the Satterthwaite df of that variance were the errors
    homoscedastic. With a two-valued x, b is the difference of the two means, the HC2 variance is Welch's s1^2/n1 + s2^2/n2, and the
    df is Welch's at equal variances. Returns ``(b, se, p, df)``; p is NaN where x or a column is constant, where
    one row is alone at its x and every other row shares one x (leverage 1), or where fewer than 3 rows are given.

    >>> x = np.array([0.0, 0, 0, 1, 1, 1])
    >>> b, se, p, df = slope_hc2(x, np.array([1.0, 2, 3, 5, 7, 9]))
    >>> float(b[0]), round(float(se[0]) ** 2, 4), round(df, 4)   # 7 - 2; Welch's 1/3 + 4/3; df of equal variances
    (5.0, 1.6667, 4.0)
    """
    xv = np.asarray(x, dtype=np.float64)
    Y = np.asarray(y, dtype=np.float64)
    Y = Y[:, None] if Y.ndim == 1 else Y
    n, k = Y.shape
    xc = xv - xv.mean() if n else xv
    sxx = float(xc @ xc)
    if n < 3 or not sxx > 0:
        nan = np.full(k, np.nan)
        return nan, nan.copy(), nan.copy(), float("nan")
    w = xc / sxx
    h = 1.0 / n + xc * w
    b = w @ Y
    e = Y - Y.mean(axis=0) - np.outer(xc, b)
    # tr M and tr M^2 in O(n): with A = diag(a^2) and I - H = I - U U' (U = [1/sqrt(n), xc/sqrt(Sxx)]),
    # tr M^2 = tr A^2 - 2 tr(A^2 U U') + ||U' A U||_F^2 (no n x n matrix: a 20,000-example run would need 3.2 GB)
    if (h >= 1.0 - 1e-12).any():  # one row alone at its x: the slope is that row's, with no residual to judge it
        nan = np.full(k, np.nan)
        return b, nan, nan.copy(), float("nan")
    a2 = w * w / (1.0 - h)
    se = np.sqrt((a2[:, None] * e * e).sum(axis=0))
    u = np.column_stack([np.full(n, 1.0 / np.sqrt(n)), xc / np.sqrt(sxx)])
    uau = u.T @ (a2[:, None] * u)
    df = float((a2 @ (1.0 - h)) ** 2 / (a2 @ a2 - 2 * (a2 * a2) @ h + (uau * uau).sum()))
    with np.errstate(divide="ignore", invalid="ignore"):
        p = 2 * special.stdtr(df, -np.abs(b / se))
    return b, se, np.where(se > 0, p, np.nan), df
