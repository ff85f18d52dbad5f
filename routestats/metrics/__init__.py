"""Routing metrics: attention of a run -> per-example tidy tables (SFM, entropy, field-to-field,
head SFM, opportunity, adjusted SFM, word maps), computed from either storage form.

``definitions``: the registry of routing metrics; ``passes``: the one reduction pass over a run's
attention and its cache; ``examples``: example sets; ``routing``: the tables."""

from routestats.metrics.definitions import RoutingMetric, metric, paired_metrics, register  # noqa: F401
from routestats.metrics.routing import (  # noqa: F401
    adjust, adjusted_sfm, entropy, field_to_field, head_metrics, head_sfm, layer_gap, layer_summary, metric_values,
    opportunity, profile_distance, sfm, word_attention,
)
from routestats.metrics.examples import select_examples  # noqa: F401
from routestats.metrics.passes import warm_cache  # noqa: F401
