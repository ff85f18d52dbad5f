"""Moved to :mod:`routestats.compose.claims` (this name is kept for one release)."""

from routestats.moved import forward

__getattr__ = forward(__name__, "routestats.compose.claims")
