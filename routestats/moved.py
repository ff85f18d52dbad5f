"""Forwarding for the report builders that moved from ``studies`` (and ``regime.report``) to
:mod:`routestats.compose` in 0.2; kept for one release, then removed.

A shim module sets ``__getattr__ = forward(__name__, "routestats.compose.pair.build", ...)``: a name
looked up on the old module is taken from the first new module that has it, with a
:class:`DeprecationWarning` naming where it lives now. The new modules are imported only when a name is
asked for, so the old module imports nothing from the layer above it.

>>> import warnings
>>> get = forward("old.place", "routestats.report")
>>> with warnings.catch_warnings(record=True) as w:
...     warnings.simplefilter("always")
...     get("fmt_p")(0.5), str(w[0].message)
('0.500', 'old.place.fmt_p moved to routestats.report.fmt_p (the old name goes in the next release)')
"""

from __future__ import annotations

import importlib
import warnings

__all__ = ["forward"]


def forward(old: str, *new: str):
    """A module ``__getattr__`` that forwards ``old.NAME`` to the first of ``new`` holding NAME."""

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        for target in new:
            module = importlib.import_module(target)
            if hasattr(module, name):
                warnings.warn(f"{old}.{name} moved to {target}.{name} (the old name goes in the next release)",
                              DeprecationWarning, stacklevel=2)
                return getattr(module, name)
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    return __getattr__
