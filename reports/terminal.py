"""Tables for a terminal: rich tables fitted to its width, never cutting a number, a header or a word; a
table that cannot fit that way is printed one block a row. The CLI prints its tables with :func:`print_tables`.
"""

from __future__ import annotations

import textwrap

from routestats.usage import printable

__all__ = ["cell_text", "fit_columns", "long_format", "print_tables", "runs_text"]


def cell_text(v) -> str:
    """One value as the terminal tables show it (floats to 4 significant digits, exponent kept; control characters of
    text read from a run directory escaped, :func:`routestats.usage.printable`)."""
    return f"{v:.4g}" if isinstance(v, float) else printable(v)


def fit_columns(headers: list[str], rows: list[list[str]], numeric: list[bool], width: int) -> list[int] | None:
    """Content widths that fit a table of these cells into ``width`` terminal columns (rich's default box: a
    border and a space of padding each side of each cell) with nothing cut: numeric columns and every header
    kept on one line, text wrapped only between words; None when even that is wider than ``width``.

    >>> fit_columns(["layer", "source"], [["0", "slice (finite forward)"]], [True, False], 80)
    [5, 22]
    >>> fit_columns(["layer", "source"], [["0", "slice (finite forward)"]], [True, False], 20)
    [5, 8]
    >>> fit_columns(["lambda_max"], [["4.441e-16"]], [True], 12) is None
    True
    """
    from rich.cells import cell_len

    cols = list(zip(headers, *rows)) if rows else [(h,) for h in headers]
    natural = [max(cell_len(t) for t in col) for col in cols]
    room = width - (3 * len(headers) + 1)
    if sum(natural) <= room:
        return natural
    least = [n if num else max([cell_len(col[0])] + [cell_len(w) for t in col[1:] for w in t.split()])
             for col, n, num in zip(cols, natural, numeric)]
    if sum(least) > room:
        return None
    widths, slack = list(least), room - sum(least)
    while slack:  # the room left goes to the text columns, one character at a time, until each is whole
        grew = False
        for i, n in enumerate(natural):
            if slack and widths[i] < n:
                widths[i], slack, grew = widths[i] + 1, slack - 1, True
        if not grew:
            break
    return widths


def long_format(title: str, headers: list[str], rows: list[list[str]], width: int) -> list[str]:
    """A table too wide for the terminal as one block a row, one ``column  value`` line a column (values
    wrapped only between words)."""
    from rich.cells import cell_len

    key = max((cell_len(h) for h in headers), default=0)
    below = key + 4 + 12 > width  # headers too long to share a line with their values
    lines = textwrap.wrap(f"{title} (one block a row: wider than the terminal)".lstrip(), width=max(20, width - 1),
                          break_long_words=False, break_on_hyphens=False)
    for row in rows or [[]]:
        lines.append("")
        if not row:
            lines.append("  (no rows)")
        for h, v in zip(headers, row):
            if below:
                lines.append(f"  {h}")
                lines += textwrap.wrap(v, width=max(20, width - 1), initial_indent="    ", subsequent_indent="    ",
                                       break_long_words=False, break_on_hyphens=False) or ["    "]
                continue
            pad = " " * (key - cell_len(h))
            wrapped = textwrap.wrap(v, width=max(12, width - 1 - key - 4), break_long_words=False,
                                    break_on_hyphens=False) or [""]
            lines.append(f"  {h}{pad}  {wrapped[0]}".rstrip())
            lines += [" " * (key + 4) + w for w in wrapped[1:]]
    return lines + [""]


def print_tables(frames: list) -> None:
    """Print (title, frame) pairs as rich tables fitted to the terminal, never cutting a number, a header or a
    word; a table that cannot fit that way is printed one block a row (:func:`long_format`)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    con = Console()
    for title, df in frames:
        title = printable(title) if title else title
        headers = [printable(c) for c in df.columns]
        rows = [[cell_text(v) for v in row] for row in df.itertuples(index=False)]
        numeric = [df[c].dtype.kind in "fiu" or (len(df) > 0 and not any(ch.isalpha() for r in rows for ch in r[i]))
                   for i, c in enumerate(df.columns)]  # numbers, or numbers formatted as text ("[0.1, 0.2]", "< 0.001")
        widths = fit_columns(headers, rows, numeric, con.width)
        if widths is None:
            for line in long_format(title, headers, rows, con.width):
                print(line)
            continue
        t = Table(title=Text(title) if title else None)
        for h, num, w in zip(headers, numeric, widths):
            t.add_column(Text(h), justify="right" if num else "left", width=w, no_wrap=num, overflow="fold")
        for row in rows:
            t.add_row(*[Text(c) for c in row])
        con.print(t)


def runs_text(title: str, runs, note: str = "", width: int = 78) -> str:
    """What ``routestats info`` prints: ``title``, then one block per run of the ``runs`` frame (its id, then
    study, seed, examples, init and steps, then its factors; wrapped to ``width``, ids never cut), then ``note``.

    >>> import pandas as pd
    >>> df = pd.DataFrame([{"run_id": "r1", "study": "s", "seed": 1, "examples": 8, "steps": "10", "final forms":
    ...                     "reductions", "init": "abc", "pretrained": False, "variant": "saab"}])
    >>> print(runs_text("1 run(s) under t", df, "incomplete: t/x"))
    1 run(s) under t
    <BLANKLINE>
    r1
      study s · seed 1 · 8 examples · init abc · steps 10 (final: reductions)
      variant=saab
    <BLANKLINE>
    incomplete: t/x
    """

    def given(v) -> bool:  # a factor another run of the tree has (NaN here) or a None value: left out
        return v is not None and not (isinstance(v, float) and v != v)

    out = [printable(title)]
    fixed = ("run_id", "study", "seed", "examples", "steps", "final forms", "init", "pretrained")
    for r in runs.to_dict(orient="records"):
        r = {k: printable(v) if isinstance(v, str) else v for k, v in r.items()}  # ids, studies, factors: untrusted
        factors = " ".join(f"{printable(k)}={v}" for k, v in r.items() if k not in fixed and given(v))
        seed = (f"seed {r['seed']}" if given(r["seed"]) else
                "pretrained (no seed)" if r["pretrained"] else "no seed")
        steps = f"steps {r['steps']} (final: {r['final forms']})" if r["steps"] else "no attention stored"
        detail = f"study {r['study']} · {seed} · {r['examples']} examples · init {r['init']} · {steps}"
        out += ["", r["run_id"]] + [textwrap.fill(line, width=width, initial_indent="  ", subsequent_indent="    ",
                                                  break_on_hyphens=False) for line in (detail, factors) if line]
    if note:
        out += ["", textwrap.fill(printable(note), width=width, break_on_hyphens=False)]
    return "\n".join(out)

