"""Moved to :mod:`routestats.compose.study` (this name is kept for one release)."""

from routestats.moved import forward

__getattr__ = forward(__name__, "routestats.compose.study.build")
