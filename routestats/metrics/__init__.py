"""Routing metrics: attention of a run -> per-example tidy tables (SFM, entropy, field-to-field,
head SFM, opportunity, adjusted SFM, word maps), computed from either storage form."""

from routestats.metrics.routing import (  # noqa: F401
    adjust, adjusted_sfm, entropy, field_to_field, head_metrics, head_sfm, layer_gap, layer_summary, opportunity,
    profile_distance, select_examples, sfm, warm_cache, word_attention,
)
