"""routestats: statistics of attention routing in paired Transformer runs.

The public API is re-exported here; see README.md for a tour and ``docs/run-format.md``
for the run-directory contract. Importing routestats never imports torch.
"""

from .errors import (
    IncompleteRunError,
    PairingError,
    RoutestatsError,
    RunFormatError,
    SchemaVersionError,
)
from .io import Run, RunCollection, RunPair, load_run, load_runs, pair
from .runwriter import RunWriter

__version__ = "0.1.0"

__all__ = [
    "IncompleteRunError",
    "PairingError",
    "RoutestatsError",
    "Run",
    "RunCollection",
    "RunFormatError",
    "RunPair",
    "RunWriter",
    "SchemaVersionError",
    "load_run",
    "load_runs",
    "pair",
]
