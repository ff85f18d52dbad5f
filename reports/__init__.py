"""Rendering of any :class:`routestats.report.Report`: Jinja2 templates (HTML, LaTeX), Markdown, CSV
and matplotlib figures (seaborn's look, :mod:`reports.theme`) over finished frames. Nothing in this package computes a statistic.

Entry points: :func:`reports.render.render` (a report folder), :func:`reports.render.table_text`
(one table as LaTeX, CSV or Markdown), :func:`reports.render.markdown` (a whole report as Markdown);
``Report.write`` / ``Report.to_latex`` call them.
"""
