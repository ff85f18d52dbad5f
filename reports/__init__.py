"""Rendering of any :class:`routestats.report.Report`: Jinja2 templates (HTML, LaTeX), Markdown, CSV
and seaborn figures over finished frames. Nothing in this package computes a statistic."""

from reports.render import build_context, markdown, render, table_text

__all__ = ["build_context", "markdown", "render", "table_text"]
