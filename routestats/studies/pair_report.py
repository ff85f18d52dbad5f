"""Moved to :mod:`routestats.compose.pair` (this name is kept for one release)."""

from routestats.moved import forward

__getattr__ = forward(__name__, "routestats.compose.pair.build")
