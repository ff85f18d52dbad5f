"""What every section of a pair report reads: :class:`PairContext`, built once per pair.

It holds the pair, the settings with concrete example sets, the step, the paired example count,
the layer summary and the paired SFM differences (computed once, shared by every section that
needs them), and small helpers: :meth:`PairContext.per_role` (a per-run table for both runs with
a ``role`` column), :meth:`PairContext.effects` (the paired table of a metric with the report's
settings, computed once each), :meth:`PairContext.table` and :meth:`PairContext.figure` (a table
or figure with the report's subject and labels). Sections are named with
:func:`routestats.report.section` and run through :func:`routestats.report.guarded`, the one rule
that turns a section's :class:`~routestats.errors.RoutestatsError` into "Not computed: ...".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from routestats.compose.pair.inputs import init_vs_final
from routestats.errors import RoutestatsError
from routestats.metrics.definitions import paired_metrics
from routestats.metrics.examples import resolve_example_sets, select_examples
from routestats.metrics.passes import head_pass, reduce_attention, trivial_default
from routestats.metrics.routing import layer_summary, profile_distance
from routestats.report import Figure, Table, guarded, section  # noqa: F401  (section helpers, re-exported)
from routestats.rundir.collection import RunPair
from routestats.settings import AnalysisSettings
from routestats.stats.inference import as_matrix, paired_inferences
from routestats.stats.profile import contrast_family
from routestats.studies.effects import effects_family, highest_layer_families, paired_differences, paired_effects

__all__ = ["PairContext", "pair_context", "section", "guarded"]


@dataclass(frozen=True)
class PairContext:
    """The inputs of every pair-report section (see the module docstring)."""

    pair: RunPair
    settings: AnalysisSettings
    step: int
    n_examples: int
    layers: pd.DataFrame = field(repr=False)
    diffs: pd.DataFrame = field(repr=False)
    say: Callable[[str], None] = field(default=lambda label: None, repr=False, compare=False)
    within_study: bool = False
    bias_off: object = None  # the variant's bias-off evaluation (a Run), or why the runs beside it are not one

    @property
    def runs(self):
        return (("baseline", self.pair.baseline), ("variant", self.pair.variant))

    @property
    def n_layers(self) -> int:
        return int(self.layers["layer"].nunique())

    @property
    def pretrained(self) -> bool:
        return self.pair.baseline.pretrained and self.pair.variant.pretrained

    @property
    def causal(self) -> bool:
        return self.pair.baseline.causal

    @property
    def trivial(self) -> str:
        return trivial_default(self.pair.baseline, self.settings.trivial_queries)

    @property
    def subject(self) -> str:
        return f"{self.pair.variant.run_id} vs {self.pair.baseline.run_id}"

    @property
    def labels(self) -> dict:
        return {"baseline": f"baseline ({self.pair.baseline.run_id})", "variant": f"variant ({self.pair.variant.run_id})",
                "difference": "variant − baseline"}

    @functools.cached_property
    def D(self) -> pd.DataFrame:
        """The paired SFM differences as an example x layer matrix (layers ascending)."""
        return self.diffs.pivot(index="example_id", columns="layer", values="diff").sort_index(axis=1)

    @functools.cached_property
    def profile_distance(self) -> float:
        """The distance between the two models' layer-SFM profiles (their layer means)."""
        lay = self.layers
        return profile_distance(lay[lay.role == "baseline"].sort_values("layer")["sfm"].to_numpy(),
                                lay[lay.role == "variant"].sort_values("layer")["sfm"].to_numpy())

    @functools.cached_property
    def n_heads(self) -> int:
        return int(head_pass(self.pair.baseline, self.step, trivial=self.settings.trivial_queries)
                   .heads["head"].nunique())

    @functools.cached_property
    def first_key_fields(self) -> dict:
        """Named field -> number of evaluated examples whose first position lies in it (the attention sink's field)."""
        names = self.pair.baseline.named_fields
        out: dict = {}
        for g in self.pair.baseline.examples(["field_ids"])["field_ids"]:
            if len(g) and int(g[0]) in names:
                out[names[int(g[0])]] = out.get(names[int(g[0])], 0) + 1
        return out

    @functools.cached_property
    def length_inputs(self):
        """(the examples of the length analyses, the censoring counts) and whether those analyses can run."""
        from routestats.metrics.examples import select_examples
        from routestats.studies.lengths import censoring

        p, s = self.pair, self.settings
        ex = p.baseline.examples(["example_id", "split", "length", "cap"])
        ids = select_examples(p.baseline, s.length_examples)
        if ids is not None:
            ex = ex[ex["example_id"].isin(ids)]
        c = censoring(p, s.length_examples)
        runs = ex["length"].nunique() >= 3 and len(ex) >= 8 and not (
            s.capped_examples == "exclude" and c["n"] - c["n_capped"] < 8)
        return ex, c, bool(runs)

    @property
    def headline_families(self) -> tuple[str, ...]:
        """The families of tests whose rejections the headline states: the layers (always), the profile shape
        (two layers and two examples), the length association (when the length analyses run) and the change
        from the earliest stored step to the final one (with two steps on the same examples). The
        headline's error rate is controlled across them: each is tested at alpha / their number."""
        D = self.D
        out = ["layers"]
        if D.shape[1] >= 2 and D.shape[0] >= 2:
            out.append("profile shape")
        if self.length_inputs[2]:
            out.append("length")
        if self.early is not None:
            out.append("early share")
        return tuple(out)

    @functools.cached_property
    def early(self) -> pd.DataFrame | None:
        """Δ at the earliest stored step against the final one (:func:`routestats.compose.pair.inputs.init_vs_final`),
        None with one step or other examples there."""
        return init_vs_final(self) if len(self.common_steps) > 1 else None

    @property
    def family_alpha(self) -> float:
        """alpha split over the headline's families (Bonferroni): any positive headline claim on data with no
        effect at most alpha in all."""
        return self.settings.alpha / len(self.headline_families)

    @property
    def bias_off_runs(self) -> int:
        """How many bias-off evaluations of the variant the input holds (0 or 1)."""
        return int(self.bias_off is not None and not isinstance(self.bias_off, str))

    @functools.cached_property
    def common_steps(self) -> list[int]:
        return sorted(set(self.pair.baseline.attention_steps) & set(self.pair.variant.attention_steps))

    @property
    def inference(self) -> dict:
        """The keyword arguments of every paired table: resampling, example set, step, trivial queries."""
        s = self.settings
        return dict(resampling=s.resampling, examples=s.examples, step=self.step, trivial=s.trivial_queries)

    def effects(self, metric: str = "sfm", **kw) -> pd.DataFrame:
        """The paired-effects table of ``metric`` (keyword variants: adjusted, weighting), computed once."""
        key = (metric, tuple(sorted(kw.items())))
        memo = self.__dict__.setdefault("_effects", {})
        if key not in memo:
            extra = {"keys": self.settings.keys} if metric == "sfm" and kw.get("weighting", "attention") == "attention" \
                else {}
            memo[key] = paired_effects(self.pair, metric=metric, **self.inference, **extra, **kw)
        return memo[key]

    def analyse_ahead(self) -> None:
        """Analyse, in one pass over their shared draws, the paired families of these examples that the sections
        will ask for: the effects tables every pair report shows (:func:`planned_effects`), the highest-layer tests
        and the layer contrasts. Their results are kept by content (:func:`routestats.stats.paired_inferences`), so
        each section's own call finds its result, bitwise what it would have drawn; a family that cannot be formed
        here is left to its section, which says why."""
        s = self.settings
        if s.resampling.mode != "shared":
            return  # the reference modes draw per family: nothing to share
        builders = [functools.partial(self._effects_family, key) for key in planned_effects()]
        builders += [lambda: highest_layer_families(self.layers, self.diffs),
                     lambda: [contrast_family(self.D.to_numpy(), list(self.D.columns))[0]]]
        families = []
        for build in builders:
            try:
                got = build()
                families += [as_matrix(d) for d in (got if isinstance(got, list) else [got])]
            except Exception:  # noqa: BLE001 -- its section forms it again and reports what is wrong
                continue
        if families:
            self.say(f"paired tests of {len(families)} tables (one pass over their shared draws)")
            paired_inferences(families, resampling=s.resampling)

    def _effects_family(self, key) -> np.ndarray:
        """The differences family of an :meth:`effects` key (SFM's from :attr:`diffs`)."""
        metric, kw = key[0], dict(key[1])
        adjusted, weighting = bool(kw.get("adjusted", False)), kw.get("weighting", "attention")
        s = self.settings
        if metric == "sfm" and not adjusted and weighting == "attention":
            diffs = self.diffs  # made by pair_context with these arguments
        else:
            keys = s.keys if metric == "sfm" and weighting == "attention" else "all"  # as effects() asks
            diffs = paired_differences(self.pair, metric, adjusted, self.step, s.examples, s.trivial_queries, keys,
                                       weighting)
        return effects_family(diffs)[0]

    def per_role(self, fn: Callable, *args, **kw) -> pd.DataFrame:
        """``fn(run, *args, **kw)`` for the baseline and the variant, stacked with a leading ``role``."""
        frames = []
        for role, run in self.runs:
            t = fn(run, *args, **kw)
            t.insert(0, "role", role)
            frames.append(t)
        return pd.concat(frames, ignore_index=True)

    def with_difference(self, frame: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
        """``frame`` (a :meth:`per_role` table) with the rows ``role == "difference"`` (variant − baseline)."""
        idx = lambda role: frame[frame.role == role].set_index(keys)[value]  # noqa: E731
        diff = (idx("variant") - idx("baseline")).reset_index()
        diff["role"] = "difference"
        return pd.concat([frame[["role", *keys, value]], diff], ignore_index=True)[["role", *keys, value]]

    def table(self, name: str, frame: pd.DataFrame, caption: str = "", columns=(), **kw) -> Table:
        return Table(name, frame, caption, tuple(columns), subject=self.subject if columns else "", **kw)

    def figure(self, name: str, kind: str, **frames) -> Figure:
        return Figure(name, kind, frames, {"labels": self.labels})


def planned_effects() -> tuple:
    """The :meth:`PairContext.effects` keys every pair report asks for: SFM (profile, effects), each other paired
    metric (its section) and the opportunity-adjusted SFM.

    >>> planned_effects()[:2]
    (('sfm', ()), ('entropy', ()))
    """
    return (("sfm", ()), *((m.name, ()) for m in paired_metrics() if m.name != "sfm"), ("sfm", (("adjusted", True),)))


def pair_context(p: RunPair, settings: AnalysisSettings | None = None, say: Callable[[str], None] | None = None,
                 within_study: bool = False, bias_off=None) -> PairContext:
    """Check the step, read both runs' attention once and build the :class:`PairContext`."""
    s = resolve_example_sets(settings or AnalysisSettings(), p.baseline)
    say = say or (lambda label: None)
    step = p.baseline.final_step if s.step is None else s.step
    for run in (p.baseline, p.variant):
        if step not in run.attention_steps:
            raise RoutestatsError(f"no attention at step {step} in {run.run_id}; stored steps: {run.attention_steps}")
    for role, run in (("baseline", p.baseline), ("variant", p.variant)):  # most of a large report's time
        say(f"reading the {role}'s attention ({run.run_id}, step {step}, {len(run.examples(['example_id'])):,} examples)")
        reduce_attention(run, step, s.trivial_queries)
    say("layer summary")
    layers = layer_summary(p, step, s.examples, s.trivial_queries).drop(columns=["run_id"])
    ids = select_examples(p.baseline, s.examples)
    n = len(p.baseline.examples(["example_id"])) if ids is None else len(ids)
    diffs = paired_differences(p, step=step, examples=s.examples, trivial=s.trivial_queries, keys=s.keys)
    ctx = PairContext(p, s, step, n, layers, diffs, say, within_study, bias_off)
    ctx.analyse_ahead()
    return ctx
