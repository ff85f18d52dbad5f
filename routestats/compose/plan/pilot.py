"""What a plan reads from its pilot: a pair's paired SFM differences and its headline's alpha, or a study's
variance split between seeds and examples.

:func:`read_pilot` takes whatever ``routestats report`` takes and keeps what the plan needs: for one pair,
the example x layer matrix of paired SFM differences and the family's share of alpha its report's headline
tests at (:attr:`routestats.compose.pair.context.PairContext.family_alpha`: the same number of headline
families, so the plan powers the test the report will run); for a tree of several seeds of the standard
SAAB pair, the random-intercept variance components per layer
(:func:`routestats.studies.seeds.variance_components`) and the study's alpha.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from routestats.errors import RoutestatsError
from routestats.settings import AnalysisSettings

__all__ = ["Pilot", "read_pilot"]


@dataclass(frozen=True)
class Pilot:
    """A pilot's numbers for planning. ``kind`` is ``pair`` or ``study``; ``D`` (pair) the example x layer
    differences; ``components`` (study) one row per layer: n_seeds, n_examples, mean_delta,
    var_between_seeds, var_within_seed; ``alpha`` the level the report's headline test uses."""

    kind: str
    subject: str
    alpha: float
    families: int
    n_examples: int
    layers: tuple
    D: pd.DataFrame | None = field(default=None, repr=False)
    components: pd.DataFrame | None = field(default=None, repr=False)
    n_seeds: int = 1


def read_pilot(path, settings: AnalysisSettings | None = None, say=None) -> Pilot:
    """The :class:`Pilot` of ``path`` (a pair folder or a one-run folder of a pair, or a study tree)."""
    from routestats.compose.pair.context import pair_context
    from routestats.rundir.read import Run
    from routestats.studies.discover import find_pairs, load
    from routestats.studies.seeds import example_deltas, reference_rows, variance_components

    s = AnalysisSettings.of(settings)
    obj = load(Path(path), s)
    if isinstance(obj, Run):
        raise RoutestatsError(f"{path}: one run, no pair: a plan needs a pilot pair (a baseline and its variant) or a "
                              "study of several seeds")
    pairs = find_pairs(obj, s)
    if len(pairs) == 1:
        ctx = pair_context(pairs[0], s, say)
        D = ctx.D
        return Pilot("pair", ctx.subject, ctx.family_alpha, len(ctx.headline_families), int(D.shape[0]),
                     tuple(int(c) for c in D.columns), D=D)
    ex = example_deltas(obj, examples=s.examples)
    ref = ex[reference_rows(ex)]
    if ref["seed"].nunique() < 2:
        raise RoutestatsError(f"{path}: {len(pairs)} pairs but fewer than 2 seeds of the standard SAAB pair: a study "
                              "plan needs the variance between seeds")
    if ref["dataset"].nunique() > 1 or ref["depth"].nunique() > 1:
        raise RoutestatsError(f"{path}: several data sets or depths; plan from a tree of one data set and depth")
    vc = variance_components(ref)
    if not vc["converged"].all():
        raise RoutestatsError(f"{path}: the mixed model did not converge on some layer; no variance split to plan from")
    comp = vc[["layer", "n_seeds", "n_examples", "mean_delta", "var_between_seeds", "var_within_seed"]].copy()
    comp["n_examples"] = (comp["n_examples"] / comp["n_seeds"]).round().astype(int)  # per seed
    return Pilot("study", f"{int(comp['n_seeds'].max())} seeds of {pairs[0].variant.run_id.rsplit('-seed', 1)[0]}",
                 s.alpha, 1, int(comp["n_examples"].min()), tuple(int(v) for v in comp["layer"]),
                 components=comp.reset_index(drop=True), n_seeds=int(comp["n_seeds"].max()))
