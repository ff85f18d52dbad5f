"""What a notebook shows for a :class:`routestats.report.Report` or :class:`~routestats.report.Table`
(their ``_repr_html_``): the report's first screen -- its answer in bold beside the figure that shows it, the other
headline sentences -- then its findings and the list of its tables; a table formatted as the report shows it.
``import reports`` enters these views in :data:`routestats.report.NOTEBOOK_VIEWS`.

>>> import pandas as pd
>>> from routestats.report import Column, Table
>>> t = Table("effects", pd.DataFrame({"layer": [0], "p": [0.00002]}), "Paired effects.",
...           (Column("Layer", "layer", "int"), Column("p", "p", "p")))
>>> html = table_html(t)
>>> "<td>&lt; 0.001</td>" in html and "Paired effects." in html
True
"""

from __future__ import annotations

import io
from html import escape

from reports.formatting import embedded, format_cells
from reports.render import answer_figure

__all__ = ["report_html", "table_html", "figure_png", "figure_html"]


def figure_png(figure, dpi: int = 110) -> bytes:
    """One :class:`routestats.report.Figure` drawn to PNG bytes (no file; a page figure's marks through matplotlib)."""
    import matplotlib.pyplot as plt

    from reports.drawing import draw

    fig = draw(figure)
    if hasattr(fig, "marks"):  # a canvas
        fig = fig.figure()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return buf.getvalue()


def figure_html(figure, style: str) -> str:
    """One figure for a notebook cell: a page figure as its inline SVG (no matplotlib), any other as a PNG."""
    from reports.drawing import CANVAS_KINDS, draw

    if figure.kind in CANVAS_KINDS:
        from reports.canvas import inline

        return inline(draw(figure).svg(), style)
    png = embedded(figure_png(figure))
    return f"<img style='{style}' alt='the answer per layer' src='data:image/png;base64,{png}'>"


def table_html(table) -> str:
    """A table with its formatted cells (as the report page shows them) and its caption; a table without a
    layout (exported only) as its frame."""
    if not table.shown:
        return f"<p><b>{escape(table.name)}</b> {escape(table.caption)}</p>" + table.frame.to_html(index=False)
    headers, rows = format_cells(table)
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(c['text'])}</td>" for c in r) + "</tr>" for r in rows)
    return (f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            f"<p><i>{escape(table.name)}</i>: {escape(table.caption)}</p>")


def report_html(rep) -> str:
    """The report's first screen, findings and table list, for a notebook cell."""
    fig = answer_figure(rep)
    img = figure_html(fig, "max-width:440px;float:right;margin:0 0 8px 16px") if fig is not None else ""
    out = [f"<div><h3>{escape(rep.title)}</h3><p style='color:#5b6670'>{escape(rep.subtitle)}</p>", img]
    if rep.answer:
        out.append(f"<p style='font-size:1.25em;font-weight:700'>{escape(rep.answer)}</p>")
    out += [f"<p>{escape(h)}</p>" for h in rep.headline]
    out.append("<div style='clear:both'></div>")
    if rep.findings:
        out.append("<details><summary>Findings</summary><ul>"
                   + "".join(f"<li>{escape(f)}</li>" for f in rep.findings) + "</ul></details>")
    names = [(t.name, t.caption) for s in rep.sections for t in s.tables]
    out.append("<details><summary>Tables (<code>rep.table(NAME)</code>)</summary><ul>"
               + "".join(f"<li><code>{escape(n)}</code> {escape(c)}</li>" for n, c in names) + "</ul></details>")
    if rep.parts:
        out.append(f"<p>{len(rep.parts)} parts: " + ", ".join(escape(p.title) for p in rep.parts)
                   + " (<code>rep.parts</code>).</p>")
    return "\n".join(out) + "</div>"
