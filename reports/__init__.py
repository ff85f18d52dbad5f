"""Report rendering: Jinja2 templates (HTML, LaTeX) and seaborn figures over finished tidy frames.

Nothing in this package computes a statistic; the numbers come from
:func:`routestats.pair_report.build_pair_report`.
"""

from .render import build_context, render, table_text

__all__ = ["build_context", "render", "table_text"]
