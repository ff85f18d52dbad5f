"""Loading checkpoints safely: never unpickle arbitrary objects from a run directory.

A checkpoint found in a run directory is untrusted input: ``torch.load(weights_only=False)``
would run any code a planted pickle names. :func:`load_checkpoint` unpickles with
``weights_only=True`` (tensors and plain containers only), which is all the project's own
checkpoints hold, and refuses anything else with one line.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch

from routestats.errors import RoutestatsError

__all__ = ["load_checkpoint"]


def load_checkpoint(path: str | Path) -> dict:
    """The checkpoint at ``path`` (on CPU), unpickled with ``weights_only=True``."""
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise RoutestatsError(f"{path}: refused: the checkpoint holds objects other than tensors and plain "
                              f"containers, which could run code when unpickled ({first})") from None
    except (OSError, RuntimeError, EOFError, ValueError) as exc:
        raise RoutestatsError(f"{path}: not a readable checkpoint ({type(exc).__name__}: {str(exc)[:160]})") from None
    if not isinstance(ck, dict):
        raise RoutestatsError(f"{path}: not a routestats checkpoint (expected a dict, got {type(ck).__name__})")
    return ck
