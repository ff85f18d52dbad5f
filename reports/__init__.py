"""Rendering of any :class:`routestats.report.Report`: Jinja2 templates (HTML, LaTeX), Markdown, CSV
and figures (the pair and run pages' drawn as SVG by :mod:`reports.canvas`, the others by matplotlib) over
finished frames. Nothing in this package computes a statistic, and the analysis core never imports it (the edge is
one-way).

Entry points (imported lazily, so ``import reports`` is cheap)::

    import routestats as rs, reports
    rep = rs.analyse("data/demo_run")
    reports.to_latex(rep, "effects")      # one table as a booktabs fragment
    reports.table_text(rep, "effects", "csv")
    reports.to_markdown(rep)              # the whole report as Markdown
    reports.write(rep, "report/demo")     # HTML + LaTeX + CSV + figures, as `routestats report`
"""

from __future__ import annotations

__all__ = ["write", "publish", "to_latex", "to_markdown", "table_text"]


def _notebook(kind: str):
    def view(obj) -> str:  # imported on first display: `import reports` stays cheap
        from reports import notebook

        return notebook.report_html(obj) if kind == "report" else notebook.table_html(obj)

    return view


def _enter_views() -> None:
    """Let a notebook show reports and tables with their figures (``Report._repr_html_``)."""
    from routestats.views import NOTEBOOK_VIEWS  # not routestats.report: pandas, 0.3 s of a report from the cache

    NOTEBOOK_VIEWS.update(report=_notebook("report"), table=_notebook("table"))


_enter_views()


def table_text(report, name: str, fmt: str = "latex", wide: bool = False) -> str:
    """Table ``name`` of ``report`` (or of one of its parts) as LaTeX, CSV or Markdown text (``wide``: a
    LaTeX float across both columns of a two-column paper)."""
    from routestats.errors import RoutestatsError

    from reports.render import table_text as _text

    try:
        return _text(report.find_table(name), fmt, wide=wide)
    except ValueError as exc:
        raise RoutestatsError(str(exc)) from None


def to_latex(report, name: str, wide: bool = False) -> str:
    """One table as a booktabs LaTeX fragment (escaped; its first line names the packages it needs:
    booktabs and graphicx, or longtable for a long table). ``wide``: ``table*`` for a two-column paper."""
    return table_text(report, name, "latex", wide=wide)


def to_markdown(report, name: str | None = None) -> str:
    """One table (or, without a name, the whole report) as Markdown."""
    if name:
        return table_text(report, name, "markdown")
    from reports.render import markdown

    return markdown(report)


def write(report, out, formats=("html", "latex"), **kw):
    """Write the report folder (HTML, LaTeX, CSV, figures) atomically; returns what was written.
    Keywords as :func:`reports.render.render`."""
    from reports.render import render

    return render(report, out, formats, **kw)


def publish(compute, out, inputs, settings: dict, formats=("html", "latex"), figures=None, force: bool = False,
            progress=None, notice=None) -> dict:
    """The report folder ``out``, from the report cache when nothing it depends on changed, else ``compute(progress)``
    written and cached: what ``routestats report`` calls (:func:`reports.cache.publish`)."""
    from reports.cache import publish as _publish

    return _publish(compute, out, inputs, settings, formats, figures, force, progress, notice)
