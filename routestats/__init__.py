"""routestats: statistics of attention routing in paired Transformer runs.

The public API is re-exported here; see README.md for a tour and ``docs/run-format.md``
for the run-directory contract. Importing routestats never imports torch.
"""

from routestats.errors import (
    IncompleteRunError,
    PairingError,
    RoutestatsError,
    RunFormatError,
    SchemaVersionError,
)
from routestats.rundir.read import Run, RunCollection, RunPair, load_run, load_runs, pair
from routestats.rundir.write import RunWriter
from routestats.metrics.routing import (
    adjusted_sfm,
    entropy,
    field_to_field,
    head_metrics,
    head_sfm,
    layer_gap,
    layer_summary,
    opportunity,
    profile_distance,
    sfm,
    word_attention,
)
from routestats.stats.inference import holm, paired_inference, paired_t, spearman_ci
from routestats.studies.effects import paired_differences, paired_effects

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
    "adjusted_sfm",
    "entropy",
    "field_to_field",
    "head_metrics",
    "head_sfm",
    "holm",
    "layer_gap",
    "layer_summary",
    "opportunity",
    "paired_differences",
    "paired_effects",
    "paired_inference",
    "paired_t",
    "profile_distance",
    "sfm",
    "spearman_ci",
    "word_attention",
    "load_run",
    "load_runs",
    "pair",
]
