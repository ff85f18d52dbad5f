"""How a notebook shows a :class:`routestats.report.Report` or :class:`~routestats.report.Table`: the renderer's views
(with figures) once ``import reports`` has entered them in :data:`NOTEBOOK_VIEWS`, :func:`plain_html` without it.
Both names are also names of :mod:`routestats.report`."""

from __future__ import annotations

__all__ = ["NOTEBOOK_VIEWS", "plain_html"]

NOTEBOOK_VIEWS: dict = {}
"""How a notebook shows a :class:`Report` or :class:`Table` (``"report"``, ``"table"`` -> ``fn(obj) -> html``): the
renderer (``import reports``) enters its views here, with figures; without it, :func:`plain_html`."""


def plain_html(obj) -> str:
    """A notebook's view of a report or a table without the renderer: the answer, headline, findings and the
    tables' names (a report); the frame (a table).

    >>> import pandas as pd
    >>> from routestats.report import Table
    >>> t = Table("effects", pd.DataFrame({"layer": [0]}), "Paired effects.")
    >>> "Paired effects." in plain_html(t) and "<table" in plain_html(t)
    True
    """
    from html import escape

    if hasattr(obj, "frame") and hasattr(obj, "caption"):  # a Table
        return f"<p><b>{escape(obj.name)}</b>: {escape(obj.caption)}</p>" + obj.frame.to_html(index=False)
    parts = [f"<h3>{escape(obj.title)}</h3><p>{escape(obj.subtitle)}</p>"]
    if obj.answer:
        parts.append(f"<p style='font-size:1.2em'><b>{escape(obj.answer)}</b></p>")
    parts += [f"<p>{escape(h)}</p>" for h in obj.headline]
    if obj.findings:
        parts.append("<ul>" + "".join(f"<li>{escape(f)}</li>" for f in obj.findings) + "</ul>")
    parts.append("<p>Tables: " + ", ".join(f"<code>{escape(n)}</code>" for n in obj.tables())
                 + " (<code>rep.table(NAME)</code>); <code>import reports</code> shows the figures here.</p>")
    return "\n".join(parts)
