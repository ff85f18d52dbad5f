"""The MoFA report (mixtures of softmax and sigmoid heads): context, sections with their claims, build."""

from routestats.compose.mofa.build import build_mofa_report

__all__ = ["build_mofa_report"]
