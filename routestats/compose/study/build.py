"""The multi-run (study) report: tables, figures and sentences; sections appear when applicable.

:func:`build_study_report` runs the section functions of :mod:`routestats.compose.study.sections`
over one :class:`~routestats.compose.study.sections.StudyContext` through the one build skeleton (a
section that fails says why); each section's claims rest on its own frames, ranked by
:data:`~routestats.compose.study.claims.CLAIM_ORDER`.

Examples
--------
>>> import tempfile
>>> from routestats.rundir.collection import load_runs
>>> from routestats.rundir.synthetic import synthetic_pair
>>> d = tempfile.mkdtemp()
>>> for s in (1, 2):
...     _ = synthetic_pair(f"{d}/seed{s}", seed=s, n_examples=5)
>>> rep = build_study_report(load_runs(d), AnalysisSettings(resamples=100))
>>> sorted(rep.tables())
['across_seeds', 'deltas', 'forest', 'gradients', 'hierarchical', 'seeds', 'variance_components']
"""

from __future__ import annotations

from dataclasses import asdict, replace

import pandas as pd

from routestats.compose.skeleton import build_report, generated_now
from routestats.compose.claims import SFM_TERMS, design_claims
from routestats.compose.study.claims import CLAIM_ORDER, scope_claims
from routestats.compose.study.inputs import disagreement  # noqa: F401  (public name)
from routestats.compose.study.sections import STUDY_SECTIONS, study_context
from routestats.report import Report
from routestats.rundir.collection import RunCollection
from routestats.settings import AnalysisSettings

__all__ = ["build_study_report", "disagreement", "study_methods"]


def study_methods(s: AnalysisSettings) -> str:
    return ("Each variant run is paired with the baseline run sharing its initial tensors and data order. Per pair "
            "and layer, Δ is the mean over examples of the per-example SFM difference (variant − baseline). "
            "Across-seed tests treat the seed as the unit (paired t with k − 1 degrees of freedom and the exact "
            "sign-flip test, Holm over layers; the intervals beside them are per layer, not adjusted for "
            "multiplicity). The two-stage bootstrap combines variation between initialisations with variation "
            "between examples in one interval; the mixed model estimates the two variance components. Pattern "
            "labels follow fixed, documented rules over the two top layers (routestats.settings.PatternRules, first "
            f"match wins): upper-layer-dominant when Δ_up ≥ {s.rules.min_change:g} and Δ_up ≥ "
            f"{s.rules.dominance_ratio:g} × |Δ_lo|; ordering reverses when the baseline's gap g = SFM_up − SFM_lo is "
            f"≥ −tol (a tie or above; tol = {s.rules.tie_tol:g}, or {s.rules.tie_se:g} standard errors of the seed's "
            f"gap over its examples where that is larger) and the variant's ≤ −{s.rules.gap_tol:g}; relatively strong "
            f"paired change when Δ_lo ≤ −{s.rules.strong_delta:g}; gap narrows when |g| shrinks by at least "
            f"{s.rules.gap_tol:g}; small change when both |Δ| are below {s.rules.strong_delta:g}; otherwise no rule "
            "matched.")


def build_study_report(runs: RunCollection, settings: AnalysisSettings | None = None, progress=None,
                       init_probe=None, lengths=None, has_parts: bool = False) -> Report:
    """Compute every applicable multi-run table for a run tree.

    ``init_probe``: folder of ``python -m runners init-probe`` outputs; its correlations with
    the seed table's displacement score become a section. ``lengths``: folder searched for
    ``lengths.parquet`` files (``python -m runners lengths``), summarised per data set and split.
    ``has_parts``: per-pair parts will follow this report (its headline then says what they measure).
    """
    ctx = study_context(runs, settings, progress, init_probe, lengths)
    s, deltas = ctx.settings, ctx.deltas
    seeds = sorted(deltas["seed"].dropna().unique().tolist())
    n_pairs = int(deltas["variant_run"].nunique())
    rep = build_report(
        ctx, STUDY_SECTIONS, title=f"Study of {len(runs)} runs",
        subtitle=f"{len(runs)} runs · {n_pairs} pairs · seeds {', '.join(map(str, seeds))} · "
                 f"data sets {', '.join(sorted(map(str, deltas['dataset'].unique())))}",
        methods=study_methods(s),
        provenance={"runs": [{k: (None if pd.isna(v) else v.item() if hasattr(v, "item") else v)
                              for k, v in rec.items()}  # a factor a run lacks is null, not NaN (valid JSON)
                             for rec in runs.index.astype(object).to_dict(orient="records")],
                    "analysis": {"generated": generated_now(), "settings": asdict(s)}},
        data={"conditions": runs.index.drop(columns=["path", "init_id", "data_order_id"])},
        facts={"n_runs": len(runs), "seeds": seeds, "n_pairs": n_pairs, "confidence": s.confidence},
        scope=scope_claims(n_runs=len(runs), n_pairs=n_pairs, seeds=seeds, n_ref_seeds=ctx.n_ref_seeds,
                           has_parts=has_parts) + tuple(design_claims(r.manifest for r in runs)),
        claim_order=CLAIM_ORDER, glossary=SFM_TERMS)
    # after the sections: the provenance lists every file they read (trajectories, gradients, lengths too)
    return replace(rep, provenance={**rep.provenance, "verified_files": runs.verified_files()})
