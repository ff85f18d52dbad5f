"""Cells of a :class:`routestats.report.Table` as display strings, shared by HTML, LaTeX and Markdown.

The number formats themselves (``fmt_num``, ``fmt_p``, ...) live in :mod:`routestats.report`, so
that generated sentences and table cells agree; nothing here computes a statistic.

A p column of a sign-flip test (``Column.floor`` names the frame's floor column, written with the p-values by
:func:`routestats.stats.inference.paired_inference`) prints the floor itself with "(smallest attainable)" when the
value sits at it (:func:`routestats.numbers.at_floor`), exactly as the sentences print it.

Examples
--------
>>> import pandas as pd
>>> from routestats.report import Column, Table
>>> t = Table("t", pd.DataFrame({"p": [0.00002, 0.0123], "lo": [0.1, 0.2], "hi": [0.3, 0.4]}), "",
...           (Column("p", "p", "p"), Column("CI", ("lo", "hi"), "ci")))
>>> headers, rows = format_cells(t)
>>> headers, [c["text"] for c in rows[0]]
(['p', 'CI'], ['< 0.001', '[0.100, 0.300]'])
"""

from __future__ import annotations

import base64

from routestats.report import (  # noqa: F401  (re-exported for callers that format cells)
    DASH, Table, at_printed_floor, is_missing, fmt_ci, fmt_int, fmt_num, fmt_p, fmt_sig,
)

_FORMAT = {"num": fmt_num, "p": fmt_p, "sig": fmt_sig}


def fmt_range(lo, hi, digits: int = 3) -> str:
    """'first–last': whole numbers as integers, anything else to ``digits`` significant digits.

    >>> fmt_range(2, 5), fmt_range(0.3, 0.3333), fmt_range(91.83, 108.31)
    ('2–5', '0.3–0.333', '91.8–108')
    """
    if is_missing(lo) and is_missing(hi):
        return DASH
    whole = all(not is_missing(v) and float(v).is_integer() for v in (lo, hi))
    f = fmt_int if whole else (lambda v: fmt_sig(v, digits))
    return f"{f(lo)}–{f(hi)}"


def format_cells(table: Table) -> tuple[list[str], list[list[dict]]]:
    """Headers and rows of cells ``{"text", "value", "bold", "numeric"}`` of a shown table (a p-value at
    its permutation floor also has ``"short"``, the number alone, and ``"floor": True``)."""
    df = table.frame
    headers = [c.header for c in table.columns]
    marks = set()
    for col in table.bold_max:
        groups = [df] if table.group_by is None else [g for _, g in df.groupby(table.group_by, sort=False)]
        for g in groups:
            if len(g) and g[col].notna().any():
                marks.add((g[col].idxmax(), col))
    rows = []
    for idx, r in df.iterrows():
        cells = []
        for c in table.columns:
            if c.kind in ("ci", "range"):
                lo, hi = r[c.source[0]], r[c.source[1]]
                text = fmt_ci(lo, hi, c.digits) if c.kind == "ci" else fmt_range(lo, hi, c.digits)
                cells.append({"text": text, "value": None if is_missing(lo) else float(lo), "bold": False, "numeric": True})
                continue
            v = r[c.source]
            if c.kind == "p" and c.floor:
                # the frame's floor column, read as the sentences read it; LaTeX marks it with a dagger and one note
                short = at_printed_floor(v, r.get(c.floor), c.digits)
                if short is not None:
                    cells.append({"text": f"{short} (smallest attainable)", "short": short, "floor": True,
                                  "value": float(v), "bold": (idx, c.source) in marks, "numeric": True})
                    continue
                text = fmt_p(v, c.digits)
            elif c.kind in _FORMAT:
                text = _FORMAT[c.kind](v, c.digits)
            elif c.kind == "int":
                text = fmt_int(v)
            else:
                text = DASH if is_missing(v) else str(v)
            numeric = c.kind in ("num", "int", "p", "sig")
            cells.append({"text": text, "value": float(v) if numeric and not is_missing(v) else (None if numeric else str(v)),
                          "bold": (idx, c.source) in marks, "numeric": numeric})
        rows.append(cells)
    return headers, rows


def page_cells(table: Table) -> tuple[list[str], list[tuple[int, list[dict]]]]:
    """Headers and the (position, cells) of the rows shown on the page: ``table.page_rows`` when the
    table says which (a long table's most telling rows), else every row."""
    headers, rows = format_cells(table)
    keep = range(len(rows)) if table.page_rows is None else sorted(set(table.page_rows))
    return headers, [(i, rows[i]) for i in keep if 0 <= i < len(rows)]


def table_context(table: Table) -> dict:
    """One table as the HTML template sees it: name, headers (with each column's legend as its hover ``titles``),
    rows of cells (each with its position in the full table), caption, the columns' legend and the note on rows
    left off the page."""
    headers, rows = page_cells(table)
    return {"name": table.name, "headers": headers, "rows": [c for _, c in rows], "positions": [i for i, _ in rows],
            "titles": [f"{c.legend}; " if c.legend else "" for c in table.columns],
            "caption": table.caption, "legend": table.legend, "page_note": table.page_note}


def embedded(png: bytes | None) -> str | None:
    """Base64 of PNG bytes for a data: URI, or None."""
    return base64.b64encode(png).decode("ascii") if png else None
