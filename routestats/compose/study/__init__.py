"""The study (run tree) report: context, sections (with their claims), methods text and build."""

from routestats.compose.study.build import build_study_report, disagreement

__all__ = ["build_study_report", "disagreement"]
