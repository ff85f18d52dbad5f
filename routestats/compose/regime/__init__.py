"""The regime-switching report over stored operating points: context, sections with their claims, build."""

from routestats.compose.regime.build import build_regime_report, terminal_tables

__all__ = ["build_regime_report", "terminal_tables"]
