"""What a path holds: one run or a tree, its pairs, and whether it is a MoFA tree.

Grouping comes from manifests, never from folder names.
"""

from __future__ import annotations

from pathlib import Path

from routestats.errors import RoutestatsError
from routestats.rundir import schema as S
from routestats.rundir.collection import RunCollection, RunPair, load_runs
from routestats.rundir.read import Run, load_run
from routestats.settings import AnalysisSettings

__all__ = ["load", "find_pairs", "is_mofa_tree"]


def load(path: str | Path, settings: AnalysisSettings | None = None) -> Run | RunCollection:
    """A :class:`Run` when ``path`` holds ``run.json`` or a tree of exactly one run, else the
    :class:`RunCollection` of the tree.

    A tree that mixes studies is refused with their names unless ``settings.study`` picks one;
    ``settings.skip_incomplete`` leaves out runs without a manifest (still being written).
    """
    s = settings or AnalysisSettings()
    path = Path(path)
    if not path.exists():
        raise RoutestatsError(f"{path}: no such file or directory")
    if (path / S.MANIFEST).is_file():
        return load_run(path)
    runs = load_runs(path, on_incomplete="skip" if s.skip_incomplete else "raise")
    if s.study is not None:
        if s.study not in runs.studies:
            raise RoutestatsError(f"{path}: no runs of study {s.study!r}; studies here: {', '.join(runs.studies)}")
        runs = runs.select(study=s.study)
    elif len(runs.studies) > 1:
        counts = runs.index["study"].value_counts()
        named = ", ".join(f"{k} ({v} runs)" for k, v in sorted(counts.items()))
        raise RoutestatsError(f"{path} mixes studies {named}; choose one with --study NAME (Python: study=...)")
    if len(runs) == 1:  # a folder holding one run (a one-condition capture's --out) is that run
        return next(iter(runs))
    return runs


def is_mofa_tree(runs: RunCollection, settings: AnalysisSettings) -> bool:
    """A tree of MoFA runs: runs carry a ``ratio`` factor and no pairing factor."""
    return "ratio" in runs.index.columns and settings.factor not in runs.index.columns


def find_pairs(obj: Run | RunCollection, settings: AnalysisSettings) -> list[RunPair]:
    """Every (baseline, variant) pair of ``obj`` by ``settings.factor`` / ``settings.baseline``."""
    if isinstance(obj, Run):
        raise RoutestatsError(f"{obj.path} is a single run; give the folder holding the baseline and variant runs")
    pairs = obj.pairs(factor=settings.factor, baseline=settings.baseline)
    if not pairs:
        raise RoutestatsError(f"no {settings.factor}={settings.baseline} baseline with a paired variant found")
    return pairs
