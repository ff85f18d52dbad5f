"""Moved to :mod:`routestats.compose.run` (this name is kept for one release)."""

from routestats.moved import forward

__getattr__ = forward(__name__, "routestats.compose.run.build")
