"""Numbers as every report prints them: the formats shared by table cells, LaTeX and the generated sentences, and
the one rule for a p-value at its test's floor (the smallest p a sign-flip test can give: a frame's floor column,
written by :func:`routestats.stats.inference.paired_inference`, read by the sentences and the cells alike).

>>> fmt_p(0.00002), fmt_ci(0.11241, 0.1383), fmt_num(float("nan"))
('< 0.001', '[0.112, 0.138]', '–')
>>> at_floor(0.066, 0.0625), floor_text(0.066, 0.0625)
(True, '0.063')
"""

from __future__ import annotations

import math

import pandas as pd

__all__ = ["DASH", "is_missing", "fmt_num", "fmt_sig", "fmt_int", "fmt_p", "fmt_ci", "pct", "counted", "FLOOR_TOLERANCE", "at_floor",
           "floor_text", "at_printed_floor"]

DASH = "–"


def is_missing(x) -> bool:
    """None, NaN or pandas' NA: a cell shown as an en dash."""
    return x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA


def fmt_num(x, digits: int = 3) -> str:
    """Fixed decimals; missing values as an en dash."""
    return DASH if is_missing(x) else f"{float(x):.{digits}f}"


def fmt_sig(x, digits: int = 3) -> str:
    """Significant digits, for values spanning orders of magnitude (eigenvalues, errors).

    >>> fmt_sig(1694570.3), fmt_sig(0.000123456), fmt_sig(float("nan"))
    ('1.69e+06', '0.000123', '–')
    """
    return DASH if is_missing(x) else f"{float(x):.{digits}g}"


def fmt_int(x) -> str:
    return DASH if is_missing(x) else f"{int(x):d}"


def fmt_p(p, digits: int = 3, alpha: float = 0.05) -> str:
    """p-values as a reader can compare them with alpha, never shown below a floor they do not reach:
    '< 0.001' below 10^-digits; two significant digits below 0.01 (0.0015 stays 0.0015, not 0.001);
    otherwise ``digits`` decimals, with one more where rounding would put the value on the other side
    of ``alpha``.

    >>> fmt_p(0.0015), fmt_p(0.00002), fmt_p(0.00995), fmt_p(0.0213), fmt_p(0.0498), fmt_p(0.4), fmt_p(float("nan"))
    ('0.0015', '< 0.001', '0.010', '0.021', '0.0498', '0.400', '–')
    """
    if is_missing(p):
        return DASH
    p = float(p)
    floor = 10.0 ** (-digits)
    if p < floor:
        return f"< {floor:.{digits}f}"
    if p < 0.01:
        text = f"{p:.{max(digits, 1 - math.floor(math.log10(p)))}f}"
        if float(text) < 0.01:  # 0.00995 rounds up to 0.01: then as any p from 0.01 on
            return text
    text = f"{p:.{digits}f}"
    while (float(text) < alpha) != (p < alpha) and len(text) < 12:
        digits += 1
        text = f"{p:.{digits}f}"
    return text


def fmt_ci(lo, hi, digits: int = 3) -> str:
    return DASH if is_missing(lo) or is_missing(hi) else f"[{lo:.{digits}f}, {hi:.{digits}f}]"


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def counted(n: int, noun: str) -> str:
    """A count and its noun in the number it takes.

    >>> counted(1, "operating point"), counted(8, "operating point"), counted(0, "run")
    ('1 operating point', '8 operating points', '0 runs')
    """
    return f"{n} {noun}{'' if n == 1 else 's'}"


FLOOR_TOLERANCE = 1.25  # a Monte Carlo p within this factor of the test's floor counts as at the floor


def at_floor(p: float, floor: float | None) -> bool:
    """Whether ``p`` sits at (or, by Monte Carlo noise, near) the smallest p the test can give."""
    return floor is not None and float(p) <= floor * FLOOR_TOLERANCE


def floor_text(p: float, floor: float) -> str:
    """A p at its test's floor (:func:`at_floor`) as sentences, table cells and LaTeX print it: the floor itself,
    the smallest p the test can give, rounded *up* at the decimals :func:`fmt_p` would use, so it is never
    printed below its exact value and every place prints the same number, whatever the Monte Carlo estimate
    beside it (2/2^5 = 0.0625 reads 0.063; 4 × 2/2^5 = 0.25 reads 0.250 for an estimate of 0.26; 3 × 2/2^6 =
    0.09375 reads 0.094).

    >>> floor_text(0.093, 3 * 2 / 2**6), floor_text(0.26, 0.25), floor_text(0.0625, 0.0625), floor_text(0.0002, 4 / 10001)
    ('0.094', '0.250', '0.063', '< 0.001')
    """
    v = float(floor)
    text = fmt_p(v)
    if text.startswith("<") or not math.isfinite(v):  # no floor (a claim built to be withheld): as fmt_p says it
        return text
    d = len(text.split(".")[1]) if "." in text else 0
    return f"{math.ceil(v * 10 ** d - 1e-9) / 10 ** d:.{d}f}"


def at_printed_floor(p, floor, digits: int = 3) -> str | None:
    """The text of ``p`` where it sits at its test's floor and the floor prints as a number at ``digits``
    (:func:`floor_text`, what sentences and cells print, with "(smallest attainable)" beside it), else None.

    >>> at_printed_floor(0.302, 0.25), at_printed_floor(0.5, 0.25), at_printed_floor(0.0002, 4 / 20001)
    ('0.250', None, None)
    """
    if is_missing(p) or is_missing(floor) or not at_floor(p, float(floor)) or float(floor) < 10.0 ** -digits:
        return None
    return floor_text(p, float(floor))
