"""The routing metrics, one registry: what each measures, how it is computed, which way is "more routing".

Every metric here is a per-query quantity averaged like SFM (METHODS 2.1): over an example's valid
queries, then over heads, then over examples. The reduction pass (:mod:`routestats.metrics.passes`)
computes every registered metric in its one pass over a run's attention; the paired tables
(:func:`routestats.studies.effects.paired_effects`), the pair report's sections and
``routestats table`` all derive from this registry.

Built-in metrics are computed by :func:`routestats.rundir.reductions.summarise_batch` (their
``per_query`` is None). A new metric is one definition and one entry::

    def max_field_share(red, field_ids, named, causal):
        # the largest share of a query's mass on any one named field, per (example, row, query)
        return red["field_mass"].max(axis=-1)

    register(RoutingMetric("max_field", "max field share", "the largest share of a query's attention "
                           "on one named field", per_query=max_field_share))

after which ``paired_effects(pair, metric="max_field")`` works, the pair report shows a section
"Paired max field share effects" with the table ``max_field_effects``, and ``routestats table
max_field_effects PAIR`` exports it (a test in tests/test_registry.py does exactly this).
``per_query(red, field_ids, named, causal)`` receives the per-query reductions of a batch of
examples of one length (arrays (E, rows, n) and ``field_mass`` (E, rows, n, F); see
:data:`routestats.rundir.schema.REDUCTION_COLUMNS`), their field ids (E, n), the named field ids
and whether attention is causal, and returns (E, rows, n).

>>> metric("entropy").label, metric("entropy").unit
('entropy', 'nats')
>>> [m.name for m in paired_metrics()]
['sfm', 'entropy']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from routestats.errors import RoutestatsError
from routestats.rundir.reductions import SUMMARIES

__all__ = ["RoutingMetric", "REGISTRY", "register", "unregister", "metric", "paired_metrics", "extra_definitions"]


@dataclass(frozen=True)
class RoutingMetric:
    """One routing metric (see the module docstring).

    ``paired``: the pair report tests it (a section and a ``<name>_effects`` table);
    ``unit``: shown after values ("nats").
    """

    name: str
    label: str
    description: str
    per_query: Callable | None = None
    paired: bool = True
    unit: str = ""

    def __post_init__(self):
        if not self.name.isidentifier():
            raise RoutestatsError(f"a metric name must be an identifier, got {self.name!r}")
        if self.per_query is None and self.name not in SUMMARIES:
            raise RoutestatsError(f"metric {self.name!r} has no per_query definition and is not built in")

    @property
    def table(self) -> str:
        """The name of its paired-effects table."""
        return "effects" if self.name == "sfm" else f"{self.name}_effects"


REGISTRY: dict[str, RoutingMetric] = {}


def register(m: RoutingMetric) -> RoutingMetric:
    """Add a metric (its name must be new); returns it."""
    if m.name in REGISTRY:
        raise RoutestatsError(f"a metric named {m.name!r} is registered already")
    REGISTRY[m.name] = m
    return m


def unregister(name: str) -> None:
    """Remove a metric that is not built in (tests add and remove toy metrics)."""
    if name in SUMMARIES:
        raise RoutestatsError(f"{name!r} is built in")
    REGISTRY.pop(name, None)


def metric(name: str) -> RoutingMetric:
    """The registered metric ``name``; an unknown one is refused naming those there are."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise RoutestatsError(f"metric must be one of {', '.join(REGISTRY)}, got {name!r}") from None


def paired_metrics() -> list[RoutingMetric]:
    """The metrics with paired inference and a report section, SFM first."""
    return [m for m in REGISTRY.values() if m.paired]


def extra_definitions() -> dict[str, Callable]:
    """name -> per_query of the registered metrics that are not built in (what the pass adds)."""
    return {m.name: m.per_query for m in REGISTRY.values() if m.per_query is not None}


for _m in (
    RoutingMetric("sfm", "SFM", "the attention a valid query places on valid keys of its own field"),
    RoutingMetric("entropy", "entropy", "−Σ p ln(p + 1e-10) over all keys", unit="nats"),
    RoutingMetric("entropy_rownorm", "row-normalised entropy", "the entropy of the row divided by its mass",
                  paired=False, unit="nats"),
    RoutingMetric("row_mass", "row mass", "the sum of a query's attention (1 for softmax heads)", paired=False),
    RoutingMetric("unnamed_mass", "unnamed mass", "the attention on keys outside the named fields", paired=False),
    RoutingMetric("first_mass", "first-key mass", "the attention on key 0 (the attention sink)", paired=False),
    RoutingMetric("sfm_named", "named-key SFM", "SFM renormalised over the named keys, S / (1 − U)",
                  paired=False),
):
    register(_m)
