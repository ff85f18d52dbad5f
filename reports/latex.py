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
    "“": "``",
    "”": "''",
}
_RE = re.compile("|".join(re.escape(k) for k in _SPECIAL))


def latex_escape(text) -> str:
    """Escape a user-supplied string for LaTeX text mode (also maps a few Unicode symbols); every run of
    whitespace (newlines, blank lines, tabs) becomes one space."""
    out = _RE.sub(lambda m: _SPECIAL[m.group(0)], re.sub(r"\s+", " ", str(text)))  # a blank line would end \caption
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


def _cell(c: dict) -> str:
    text = latex_escape(c["text"])
    if c["numeric"]:
        text = re.sub(r"(?<![\w$])-(?=\d)", "$-$", text)
    return rf"\textbf{{{text}}}" if c["bold"] else text


def latex_table(table: Table, label: str, env) -> str:
    """Render one shown table with the ``table.tex.j2`` template of ``env``."""
    spec = table
    headers, rows = format_cells(table)
    align = "".join("l" if c.kind == "text" else ("c" if c.kind in ("ci", "range") else "r") for c in spec.columns)
    return env.get_template("table.tex.j2").render(
        name=spec.name,
        caption=latex_text(spec.caption) + (f" ({latex_escape(spec.subject)})" if spec.subject else ""),
        label=re.sub(r"[^A-Za-z0-9:._-]", "-", label),
        align=align,
        header=" & ".join(latex_text(h) for h in headers),
        rows=[" & ".join(_cell(c) for c in row) for row in rows],
        notes=latex_text(spec.notes) if spec.notes else "",
    )
