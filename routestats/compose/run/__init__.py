"""The descriptive report of one run (no pair, so no paired statistics)."""

from routestats.compose.run.build import build_run_report

__all__ = ["build_run_report"]
