"""The one-pair report: context, sections (with their claims), methods text and build."""

from routestats.compose.pair.build import WordMap, build_pair_report, select_token_map_example

__all__ = ["build_pair_report", "select_token_map_example", "WordMap"]
