"""The one call that runs whatever analysis a path holds: :func:`analyse`.

A path is one of: a run directory (``run.json``) with regime operators, or a bare operator
``.npz`` (regime report); a tree whose runs carry MoFA ``ratio`` factors (MoFA report); a
folder holding a baseline and its paired variant(s) (pair report), or a tree of several pairs
(study report, with per-pair parts as ``settings.pairs`` says). Grouping comes from
manifests, never from folder names (:mod:`routestats.studies.discover`); ``init_probe/`` and
``lengths/`` folders beside the runs are picked up by the study report.

Examples
--------
>>> import routestats as rs
>>> from routestats.rundir.synthetic import demo_run_dir
>>> rep = rs.analyse(demo_run_dir(), resamples=200, permutations=200)
>>> rep.title
'demo-docstrings-dbpedia-saab-seed1001 vs demo-docstrings-dbpedia-baseline-seed1001'
>>> rep.table("effects").frame.columns[:3].tolist()
['metric', 'layer', 'n']
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from routestats.report import Report
from routestats.rundir import schema as S
from routestats.rundir.collection import RunCollection, RunPair
from routestats.rundir.read import Run
from routestats.settings import AnalysisSettings
from routestats.studies.discover import find_pairs, is_mofa_tree, load
from routestats.studies.seeds import is_reference_pair

__all__ = ["analyse", "summary_tables"]


def _pair_parts(pairs: list[RunPair], settings: AnalysisSettings) -> list[RunPair]:
    mode = ("all" if len(pairs) == 1 else "none") if settings.pairs == "auto" else settings.pairs
    if mode == "reference":
        return [p for p in pairs if is_reference_pair(p.variant.factors)]
    return pairs if mode == "all" else []


def _pair_with_bias_off(pairs: list[RunPair]) -> tuple[RunPair, Run | str] | None:
    """(the pair, its variant's bias-off run) when the pairs are one baseline/variant pair plus the bias-off
    evaluation of that variant (``python -m runners evaluate RUN --bias off`` beside a pair); (the pair, why
    the decomposition is left out) when the bias-off runs beside one pair are not that one evaluation (two of
    them, or one naming no or another ``source_run``): the folder stays a pair. Else None."""
    off = [p.variant for p in pairs if p.variant.factors.get("eval_bias") == "off"]
    main = [p for p in pairs if p.variant.factors.get("eval_bias") != "off"]
    if len(main) != 1 or not off:
        return None
    vid = main[0].variant.run_id
    if len(off) == 1 and off[0].manifest.get("source_run") == vid:
        return main[0], off[0]
    if len(off) > 1:
        why = f"{len(off)} bias-off evaluations lie beside the pair ({', '.join(r.run_id for r in off)}); it takes one"
    else:
        src = off[0].manifest.get("source_run")
        named = f"names source_run {src!r}" if src else "names no source_run"
        why = f"the bias-off run {off[0].run_id} {named}, not the variant {vid} it would evaluate"
    return main[0], why + ", so the decomposition is left out"


def _operators_report(path: Path, s: AnalysisSettings, progress) -> Report | None:
    """The regime report of a folder that is not a run: a pretrained model's operators (``runners regime --out``),
    or one folder per pretrained model, each with operators/ (the cross-architecture comparison). Operators of a
    trained run (``runners regime RUN``) lie inside that run: the folder stays the pair or study it is
    (``routestats regime RUN`` reports them). None for anything else."""
    if not path.is_dir() or (path / S.MANIFEST).is_file():
        return None
    if (path / S.OPERATOR_DIR / S.OPERATOR_INDEX).is_file():  # a pretrained model's operators (runners regime --out)
        from routestats.compose.regime.build import build_regime_report

        return build_regime_report(path, s, progress)
    from routestats.rundir.manifest import model_folders

    models = model_folders(path)
    # one folder per pretrained model, each with operators/: the cross-architecture comparison. Operators of a
    # trained run (runners regime RUN) lie inside that run: the folder stays the pair or study it is
    # (`routestats regime RUN` reports them)
    if models and not any((m / S.MANIFEST).is_file() for m in models):
        from routestats.compose.regime.compare import build_comparison_report

        return build_comparison_report(path, s, progress)
    return None


def analyse(path: str | Path, settings: AnalysisSettings | None = None, *, progress=None,
            init_probe: str | Path | None = None, workers: int = 1, **overrides) -> Report:
    """The :class:`Report` of whatever ``path`` holds (pair, study tree, MoFA tree, regime operators, a folder of
    several models' operators: the cross-architecture comparison).

    Keyword ``overrides`` are :class:`AnalysisSettings` fields (``resamples=2000``, ...).
    ``workers`` > 1 reduces the runs of a tree in parallel processes through the on-disk cache.
    """
    s = AnalysisSettings.of(settings, **overrides)
    path = Path(path)
    if path.is_file() and path.suffix == ".npz":
        from routestats.compose.regime.build import build_regime_report

        return build_regime_report(path, s, progress)
    rep = _operators_report(path, s, progress)
    if rep is not None:
        return rep
    obj = load(path, s)
    if isinstance(obj, Run):
        if (obj.path / S.OPERATOR_DIR / S.OPERATOR_INDEX).is_file():
            from routestats.compose.regime.build import build_regime_report

            return build_regime_report(obj.path, s, progress)
        from routestats.compose.run.build import build_run_report

        return build_run_report(obj, s, progress)  # a single run: descriptive, no paired statistics
    if workers > 1:
        from routestats.metrics.passes import warm_cache

        warm_cache(obj, workers=workers)
    if is_mofa_tree(obj, s):
        from routestats.compose.mofa.build import build_mofa_report

        return build_mofa_report(obj, s, progress)
    from routestats.compose.pair.build import build_pair_report

    pairs = find_pairs(obj, s)
    one = _pair_with_bias_off(pairs)
    if one is not None:  # a pair and its variant's bias-off evaluation: still a pair, plus the decomposition
        return build_pair_report(one[0], s, progress, bias_off=one[1])
    parts = tuple(build_pair_report(p, s, progress, within_study=len(pairs) > 1) for p in _pair_parts(pairs, s))
    if len(pairs) == 1:
        return parts[0] if parts else build_pair_report(pairs[0], s, progress)
    from routestats.compose.study.build import build_study_report

    probe = init_probe or (path / "init_probe" if (path / "init_probe" / "probe.json").is_file() else None)
    lengths = path / "lengths" if (path / "lengths").is_dir() else None
    study = build_study_report(obj, s, progress, init_probe=probe, lengths=lengths, has_parts=bool(parts))
    from dataclasses import replace

    return replace(study, parts=parts)


def summary_tables(path: str | Path, settings: AnalysisSettings | None = None) -> list[tuple[str, "object"]]:
    """(title, frame) pairs for the terminal: per-layer SFM/entropy per run, paired effects per pair."""
    from routestats.metrics.routing import layer_summary
    from routestats.studies.effects import paired_effects

    s = settings or AnalysisSettings()
    obj = load(path, s)
    runs = [obj] if isinstance(obj, Run) else list(obj)
    out = [(f"{r.run_id} (step {r.final_step})", layer_summary(r)[["layer", "sfm", "entropy", "n_examples"]])
           for r in runs]
    if isinstance(obj, RunCollection) and s.factor in obj.index.columns:
        from routestats.report import fmt_ci, fmt_num, fmt_p

        for p in obj.pairs(factor=s.factor, baseline=s.baseline):
            e = paired_effects(p, resampling=s.resampling)
            shown = pd.DataFrame({  # formatted as in the report (p-values below 0.001 as "< 0.001")
                "layer": e["layer"], "SFM base": e["baseline_mean"].map(fmt_num),
                "SFM variant": e["variant_mean"].map(fmt_num), "Δ": e["mean_diff"].map(fmt_num),
                "95% CI": [fmt_ci(a, b) for a, b in zip(e["ci_low"], e["ci_high"])],
                "d_z": e["dz"].map(lambda x: fmt_num(x, 2)), "p (Holm)": e["p_holm"].map(fmt_p)})
            out.append((f"paired SFM: {p.variant.run_id} − {p.baseline.run_id}", shown))
    return out

