"""The multi-run (study) report: tables, figures and sentences; sections appear when applicable.

:func:`build_study_report` runs the section functions of :mod:`routestats.studies.study_sections`
over one :class:`~routestats.studies.study_sections.StudyContext` (a section that fails says why),
then writes the headline, findings and methods from the finished sections.

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

import datetime as _dt
from dataclasses import asdict, replace

import pandas as pd

from routestats.report import Report, fmt_num, fmt_p
from routestats.rundir.collection import RunCollection
from routestats.settings import AnalysisSettings
from routestats.studies.headline import study_headline
from routestats.report import guarded
from routestats.studies.pair_layout import frame_of
from routestats.studies.seeds import null_check
from routestats.studies.study_inputs import disagreement  # noqa: F401  (public name)
from routestats.studies.study_sections import STUDY_SECTIONS, study_context

__all__ = ["build_study_report", "disagreement"]


def study_findings(report: Report, n_runs: int, seeds: list) -> list[str]:
    """Plain-language lines quoting the finished study tables."""
    t = {name: report.frame(name) for name in ("seeds", "across_seeds", "sweep") if name in report.tables()}
    out = [f"{n_runs} runs, seeds {', '.join(map(str, seeds))}."]
    if t.get("seeds") is not None:
        counts = t["seeds"]["pattern"].value_counts()
        n = int(counts.sum())
        out.append("Seed-table patterns (the documented rules of routestats.studies.PatternRules): "
                   + "; ".join(f"“{k}” in {v} of {n} seeds" for k, v in counts.items()) + ".")
    if t.get("across_seeds") is not None:
        a = t["across_seeds"]
        for r in a.itertuples():
            where = f"{r.dataset}, " if a["dataset"].nunique() > 1 else ""
            out.append(f"{where}Layer {r.layer}: mean Δ over {r.n_seeds} seeds {fmt_num(r.mean_delta)} "
                       f"(SD {fmt_num(r.sd_delta)}), paired t p_Holm {fmt_p(r.p_t_holm)}, exact sign-flip "
                       f"p_Holm {fmt_p(r.p_signflip_holm)} (min attainable {fmt_p(r.min_attainable_p)}).")
    verdict = null_check(t["sweep"]) if t.get("sweep") is not None else None
    if verdict is not None:
        out.append(f"Null check w_f = 0 vs baseline: max |ΔSFM| = {verdict['max_abs_diff']:.2e} "
                   f"({'passes' if verdict['passes'] else 'FAILS'} the {verdict['tolerance']:.1e} criterion).")
    return out


def study_methods(s: AnalysisSettings) -> str:
    return ("Each variant run is paired with the baseline run sharing its initial tensors and data order. Per pair "
            "and layer, Δ is the mean over examples of the per-example SFM difference (variant − baseline). "
            "Across-seed tests treat the seed as the unit; the two-stage bootstrap and the mixed model separate "
            "variation between initialisations from variation between examples. Pattern labels follow fixed, "
            f"documented rules (strong |Δ| ≥ {s.rules.strong_delta}, dominance ratio "
            f"{s.rules.dominance_ratio}, gap tolerance {s.rules.gap_tol}).")


def build_study_report(runs: RunCollection, settings: AnalysisSettings | None = None, progress=None,
                       init_probe=None, lengths=None) -> Report:
    """Compute every applicable multi-run table for a run tree.

    ``init_probe``: folder of ``python -m runners init-probe`` outputs; its correlations with
    the seed table's displacement score become a section. ``lengths``: folder searched for
    ``lengths.parquet`` files (``python -m runners lengths``), summarised per data set and split.
    """
    ctx = study_context(runs, settings, progress, init_probe, lengths)
    s, deltas = ctx.settings, ctx.deltas
    sections = tuple(sec for fn in STUDY_SECTIONS if (sec := guarded(fn, ctx)) is not None)
    seeds = sorted(deltas["seed"].dropna().unique().tolist())
    n_pairs = int(deltas["variant_run"].nunique())
    draft = Report(
        title=f"Study of {len(runs)} runs",
        subtitle=f"{len(runs)} runs · {n_pairs} pairs · seeds {', '.join(map(str, seeds))} · "
                 f"data sets {', '.join(sorted(map(str, deltas['dataset'].unique())))}",
        sections=sections, methods=study_methods(s),
        provenance={"runs": [{k: (None if pd.isna(v) else v.item() if hasattr(v, "item") else v)
                              for k, v in rec.items()}  # a factor a run lacks is null, not NaN (valid JSON)
                             for rec in runs.index.astype(object).to_dict(orient="records")],
                    "verified_files": runs.verified_files(),
                    "analysis": {"generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                                 "settings": asdict(s)}},
        data={"conditions": runs.index.drop(columns=["path", "init_id", "data_order_id"])},
        facts={"n_runs": len(runs), "seeds": seeds, "n_pairs": n_pairs})
    return replace(draft, findings=tuple(study_findings(draft, len(runs), seeds)),
                   headline=tuple(study_headline(frame_of(draft, "across_seeds"), n_pairs, seeds,
                                                 decomposition=frame_of(draft, "decomposition"))))
