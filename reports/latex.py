"""LaTeX tables: booktabs, fixed decimals right-aligned (so decimal points align), CIs in
brackets, p-values as '< 0.001', and every string escaped.

Examples
--------
>>> latex_escape(r"a_b & \\input{x}")
'a\\\\_b \\\\& \\\\textbackslash{}input\\\\{x\\\\}'
>>> print(latex_escape("50% of $5 # ~^"))
50\\% of \\$5 \\# \\textasciitilde{}\\textasciicircum{}
"""

from __future__ import annotations

import re

from reports.formatting import format_cells
from routestats.report import Table

_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
}
_UNICODE = {
    "Δ": r"$\Delta$",
    "−": r"$-$",
    "–": r"\textendash{}",  # not "--": a following minus sign would fuse with it
    "—": r"\textemdash{}",
    "×": r"$\times$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "…": r"\ldots{}",
    "ρ": r"$\rho$",
    # the other symbols our own captions use (each was printed as "?" in the compiled PDF)
    "Σ": r"$\Sigma$",
    "‖": r"$\|$",
    "τ": r"$\tau$",
    "λ": r"$\lambda$",
    "α": r"$\alpha$",
    "ε": r"$\varepsilon$",
    "Π": r"$\Pi$",
    "ᵀ": r"$^{\top}$",
    "₂": r"$_2$",
    "→": r"$\rightarrow$",
    "⊆": r"$\subseteq$",
    "√": r"$\surd$",
    "“": "``",
    "”": "''",
}
_RE = re.compile("|".join(re.escape(k) for k in _SPECIAL))


def latex_escape(text) -> str:
    r"""Escape a user-supplied string for LaTeX text mode (also maps a few Unicode symbols); every run of
    whitespace (newlines, blank lines, tabs) becomes one space, and every other control character a visible
    ``?`` (a NUL or an escape character in a run id stops pdflatex).

    >>> latex_escape("run\x00id\x1b[1m\x7f_x")
    'run?id?[1m?\\_x'
    """
    text = re.sub(r"\s+", " ", str(text))  # a blank line would end \caption
    text = re.sub(r"[\x00-\x1f\x7f-\x9f]", "?", text)
    out = _RE.sub(lambda m: _SPECIAL[m.group(0)], text)
    for k, v in _UNICODE.items():
        out = out.replace(k, v)
    # anything else outside Latin-1 could break pdflatex: replace it visibly
    return "".join(ch if ord(ch) < 256 else "?" for ch in out)


_MATH = {r"d\_z": r"$d_z$", r"O\_e": r"$O_e$", r"n\_f": r"$n_f$"}


def latex_text(text) -> str:
    """Escape one of our own captions or headers, typesetting its symbols (d_z, O_e) as math."""
    out = latex_escape(text)
    for k, v in _MATH.items():
        out = out.replace(k, v)
    return out


LONG_ROWS = 36  # tables with more rows are set as a longtable (they break across pages)
WRAP_CHARS = 18  # a text column whose longest cell is longer is set as a wrapping paragraph column


def _cell(c: dict) -> str:
    text = latex_escape(c.get("short", c["text"]))
    if c["numeric"]:
        text = re.sub(r"(?<![\w$])-(?=\d)", "$-$", text)
    if c.get("floor"):
        text += r"\textsuperscript{\dag}"
    if not c["numeric"] and len(c["text"]) > WRAP_CHARS:  # run ids and names break after - and _
        text = re.sub(r"(-|\\_|/|\.)", r"\1\\allowbreak{}", text)
    return rf"\textbf{{{text}}}" if c["bold"] else text


def _header(text: str) -> str:
    r"""A header of two or more words set on two lines (a column is then as wide as its numbers).

    >>> print(_header("SFM baseline"), _header("n"))
    \begin{tabular}[b]{@{}c@{}}SFM\\ baseline\end{tabular} n
    """
    words = latex_text(text).split(" ")
    if len(words) < 2 or len(text) <= 6:
        return latex_text(text)
    best = min(range(1, len(words)), key=lambda k: abs(len(" ".join(words[:k])) - len(" ".join(words[k:]))))
    return r"\begin{tabular}[b]{@{}c@{}}" + " ".join(words[:best]) + r"\\ " + " ".join(words[best:]) + r"\end{tabular}"


def _align(table: Table, rows) -> str:
    spec = []
    for k, c in enumerate(table.columns):
        if c.kind == "text":
            longest = max((len(r[k]["text"]) for r in rows), default=0)
            spec.append("p{2.8cm}" if longest > WRAP_CHARS else "l")  # breaks at the \\allowbreak of _cell
        else:
            spec.append("c" if c.kind in ("ci", "range") else "r")
    return "".join(spec)


def latex_table(table: Table, label: str, env, wide: bool = False) -> str:
    r"""Render one shown table with the ``table.tex.j2`` template of ``env``: ``\small`` with narrow column
    gaps, multi-word headers on two lines, long text wrapped, a p-value at its permutation floor marked
    with a dagger and one note; a table wider than the line is scaled down to it, one of more than
    :data:`LONG_ROWS` rows is a ``longtable`` that breaks across pages. ``wide`` sets a float across both
    columns of a two-column paper (``table*``), never a ``longtable`` (which two-column papers cannot hold):
    a long wide table is split into floats of at most :data:`LONG_ROWS` rows, captioned "(rows a–b of N)"."""
    headers, rows = format_cells(table)
    notes = [latex_text(table.notes)] if table.notes else []
    if any(c.get("floor") for r in rows for c in r):
        notes.append(r"\textsuperscript{\dag}\,the smallest p the sign-flip test can give: $1/(P + 1)$ with $P$ "
                     r"draws, or $2/2^{n}$ with $n$ examples where that is larger; times the number of comparisons "
                     "after Holm.")
    cells = [" & ".join(_cell(c) for c in row) for row in rows]
    caption = latex_text(table.caption) + (f" ({latex_escape(table.subject)})" if table.subject else "")
    chunks = [cells[i:i + LONG_ROWS] for i in range(0, len(cells), LONG_ROWS)] if wide and len(cells) > LONG_ROWS \
        else [cells]
    return env.get_template("table.tex.j2").render(
        name=table.name,
        caption=caption,
        label=re.sub(r"[^A-Za-z0-9:._-]", "-", label),
        align=_align(table, rows),
        header=" & ".join(_header(h) for h in headers),
        ncols=len(headers),
        rows=cells,
        chunks=[(chunk, (f" (rows {k * LONG_ROWS + 1}–{k * LONG_ROWS + len(chunk)} of {len(cells)})"
                         if len(chunks) > 1 else "")) for k, chunk in enumerate(chunks)],
        notes=" ".join(notes),
        long=len(rows) > LONG_ROWS and not wide,
        env="table*" if wide else "table",
    )
