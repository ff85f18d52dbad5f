"""routestats: statistics of attention routing in paired Transformer runs.

The public API is re-exported here lazily (nothing heavy is imported until a name is used, so
``routestats --help`` starts fast); see README.md for a tour, ``docs/architecture.md`` for the
layers and ``docs/run-format.md`` for the run-directory contract. Importing routestats never
imports torch.

>>> import routestats as rs
>>> rs.AnalysisSettings().resamples
10000
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "IncompleteRunError": "routestats.errors",
    "IntegrityError": "routestats.errors",
    "PairingError": "routestats.errors",
    "RoutestatsError": "routestats.errors",
    "RunFormatError": "routestats.errors",
    "SchemaVersionError": "routestats.errors",
    "AnalysisSettings": "routestats.settings",
    "PatternRules": "routestats.settings",
    "Report": "routestats.report",
    "Run": "routestats.rundir.read",
    "RunCollection": "routestats.rundir.collection",
    "RunPair": "routestats.rundir.collection",
    "load_run": "routestats.rundir.read",
    "load_runs": "routestats.rundir.collection",
    "pair": "routestats.rundir.collection",
    "RunWriter": "routestats.rundir.write",
    "adjusted_sfm": "routestats.metrics.routing",
    "entropy": "routestats.metrics.routing",
    "field_to_field": "routestats.metrics.routing",
    "head_metrics": "routestats.metrics.routing",
    "head_sfm": "routestats.metrics.routing",
    "layer_gap": "routestats.metrics.routing",
    "layer_summary": "routestats.metrics.routing",
    "opportunity": "routestats.metrics.routing",
    "profile_distance": "routestats.metrics.routing",
    "sfm": "routestats.metrics.routing",
    "word_attention": "routestats.metrics.routing",
    "holm": "routestats.stats.inference",
    "paired_inference": "routestats.stats.inference",
    "paired_t": "routestats.stats.ttest",
    "spearman_ci": "routestats.stats.spearman",
    "paired_differences": "routestats.studies.effects",
    "paired_effects": "routestats.studies.effects",
    "analyse": "routestats.analysis",
    "plan": "routestats.compose.plan",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'routestats' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
