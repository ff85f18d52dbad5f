"""Everything a multi-run (study) report shows, as tidy frames; sections appear when applicable.

Examples
--------
>>> import tempfile
>>> from routestats.rundir.read import load_runs
>>> from routestats.rundir.synthetic import synthetic_pair
>>> d = tempfile.mkdtemp()
>>> for s in (1, 2):
...     _ = synthetic_pair(f"{d}/seed{s}", seed=s, n_examples=5)
>>> rep = build_study_report(load_runs(d), StudySettings(resamples=100))
>>> sorted(rep.tables())
['across_seeds', 'deltas', 'gradients', 'hierarchical', 'seeds', 'variance_components']
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import asdict, dataclass, field

import pandas as pd

from routestats.rundir import schema as S
from routestats.errors import RoutestatsError
from routestats.rundir.read import RunCollection
from routestats.studies.seeds import (
    PatternRules,
    _is_reference,
    across_seed_tests,
    dataset_table,
    depth_table,
    example_deltas,
    hierarchical_bootstrap,
    summarise_deltas,
    placement_table,
    seed_table,
    shuffled_table,
    sweep_table,
    variance_components,
)
from routestats.studies.training import gradient_checkpoint_summary, trajectory

__all__ = ["StudySettings", "StudyReport", "build_study_report"]


@dataclass(frozen=True)
class StudySettings:
    resamples: int = 2000
    seed: int = 1001
    confidence: float = 0.95
    examples: str = "all"
    step: int | None = None
    rules: PatternRules = field(default_factory=PatternRules)


@dataclass(frozen=True)
class StudyReport:
    """Multi-run tables; None marks a section the tree has no data for."""

    title: str
    settings: StudySettings
    n_runs: int
    seeds: list
    conditions: pd.DataFrame
    deltas: pd.DataFrame
    seed_table: pd.DataFrame | None
    sweep: pd.DataFrame | None
    placement: pd.DataFrame | None
    shuffled: pd.DataFrame | None
    depth: pd.DataFrame | None
    datasets: pd.DataFrame | None
    across_seeds: pd.DataFrame | None
    hierarchical: pd.DataFrame | None
    variance: pd.DataFrame | None
    trajectories: pd.DataFrame | None
    gradients: pd.DataFrame | None
    provenance: dict
    standardisation: pd.DataFrame | None = None
    standardisation_sensitivity: pd.DataFrame | None = None
    init_probe: pd.DataFrame | None = None
    corpus_lengths: pd.DataFrame | None = None  # Table 11: per data set and split

    def tables(self) -> dict[str, pd.DataFrame]:
        named = {"deltas": self.deltas, "seeds": self.seed_table, "sweep": self.sweep, "placement": self.placement,
                 "standardisation": self.standardisation,
                 "standardisation_sensitivity": self.standardisation_sensitivity, "init_probe": self.init_probe,
                 "corpus_lengths": self.corpus_lengths,
                 "shuffled": self.shuffled, "depth": self.depth, "datasets": self.datasets,
                 "across_seeds": self.across_seeds, "hierarchical": self.hierarchical,
                 "variance_components": self.variance, "trajectories": self.trajectories,
                 "gradients": self.gradients}
        return {k: v for k, v in named.items() if v is not None}


def _try(fn, *args, **kw):
    try:
        out = fn(*args, **kw)
    except RoutestatsError:
        return None
    return None if out is None or len(out) == 0 else out


def _standardisation(runs: RunCollection, deltas: pd.DataFrame, settings: StudySettings):
    """Exact-length standardised contrast between the two data sets, at the first seed that has
    a standard SAAB pair on both."""
    from routestats.studies.lengths import length_standardised_contrast

    names = sorted(deltas["dataset"].unique())
    if len(names) != 2:
        return None, None
    ref = deltas[_is_reference(deltas)]
    by = {}
    for p in runs.pairs():
        if p.variant.run_id in set(ref["variant_run"]):
            row = ref[ref["variant_run"] == p.variant.run_id].iloc[0]
            by.setdefault(row["seed"], {})[row["dataset"]] = p
    for seed in sorted(by):
        if len(by[seed]) == 2:
            try:
                res = length_standardised_contrast(by[seed][names[0]], by[seed][names[1]], names=tuple(names),
                                                   resamples=settings.resamples, seed=settings.seed,
                                                   confidence=settings.confidence, examples=settings.examples)
            except RoutestatsError:
                return None, None
            ex = res.exact.copy()
            ex.insert(0, "seed", seed)
            return ex, res.sensitivity
    return None, None


def _corpus_lengths(folder) -> pd.DataFrame | None:
    from pathlib import Path

    from routestats.studies.lengths import length_table

    if folder is None:
        return None
    files = sorted(Path(folder).rglob("lengths.parquet"))
    if not files:
        return None
    frames = []
    for f in files:
        df = pd.read_parquet(f)
        for ds, g in df.groupby("dataset"):
            t = length_table(g[["split", "length"]], cap=int(g["cap"].max()))
            t.insert(0, "dataset", ds)
            frames.append(t)
    return pd.concat(frames, ignore_index=True)


def build_study_report(runs: RunCollection, settings: StudySettings = StudySettings(), progress=None,
                       init_probe=None, lengths=None) -> StudyReport:
    """Compute every applicable multi-run table for a run tree.

    ``init_probe``: folder of ``python -m runners init-probe`` outputs; its correlations with
    the seed table's displacement score become a section. ``lengths``: folder searched for
    ``lengths.parquet`` files (``python -m runners lengths``), summarised per data set and split.
    """
    say = progress or (lambda label: None)
    say("paired deltas")
    ex = example_deltas(runs, settings.step, settings.examples)
    keys = ["baseline_run", "variant_run", "seed", "variant", "w_f", "bias_layers", "shuffled", "depth", "dataset",
            "step", "layer"]
    deltas = summarise_deltas(ex)
    ref = _is_reference(deltas)
    n_ref_seeds = deltas.loc[ref, "seed"].nunique()
    say("seed tables")
    seeds = _try(seed_table, deltas, rules=settings.rules) if ref.any() else None
    sweep = _try(sweep_table, deltas) if deltas.loc[deltas["variant"] == "saab", "w_f"].nunique() > 1 else None
    placement = _try(placement_table, deltas)
    shuffled = _try(shuffled_table, deltas) if (deltas["variant"] == "saab_shuffled").any() else None
    depth = _try(depth_table, deltas) if deltas["depth"].nunique() > 1 else None
    datasets = _try(dataset_table, deltas) if deltas["dataset"].nunique() > 1 else None
    across = hier = var = None
    if n_ref_seeds >= 2:
        say("across-seed inference")
        across = _try(across_seed_tests, deltas)
        hier = _try(hierarchical_bootstrap, ex, resamples=settings.resamples, seed=settings.seed,
                    confidence=settings.confidence)
        var = _try(variance_components, ex)
    say("trajectories")
    traj_rows, grad_rows, seen = [], [], set()
    for p in runs.pairs():
        common = sorted(set(p.baseline.attention_steps) & set(p.variant.attention_steps))
        if len(common) > 1:
            t = trajectory(p, "sfm")
            w = t.pivot_table(index=["step", "layer"], columns="role", values="value").reset_index()
            w["delta"] = w["variant"] - w["baseline"]
            w.insert(0, "variant_run", p.variant.run_id)
            w.insert(1, "seed", p.variant.seed)
            traj_rows.append(w.rename(columns={"baseline": "baseline_sfm", "variant": "variant_sfm"}))
        for run in (p.baseline, p.variant):
            if run.has(S.GRADIENTS) and run.run_id not in seen:
                seen.add(run.run_id)
                g = _try(gradient_checkpoint_summary, run)
                if g is not None:
                    g.insert(1, "seed", run.seed)
                    g.insert(2, "condition", run.manifest.get("condition", run.factors.get("variant")))
                    grad_rows.append(g)
    conditions = runs.index.drop(columns=["path", "init_id", "data_order_id"])
    say("length standardisation")
    std, std_sens = _standardisation(runs, deltas, settings)
    probe = None
    if init_probe is not None and seeds is not None:
        from routestats.studies.initprobe import load_probe, probe_correlations

        # outcomes of the largest data-set/depth group (the init probe is one data set, one depth)
        key = seeds.groupby(["dataset", "depth"], dropna=False).size().idxmax()
        main = seeds[(seeds["dataset"] == key[0]) & (seeds["depth"] == key[1])]
        probe = probe_correlations(load_probe(init_probe), main[["seed", "displacement"]])
    return StudyReport(
        title=f"Study of {len(runs)} runs",
        settings=settings,
        n_runs=len(runs),
        seeds=sorted(deltas["seed"].dropna().unique().tolist()),
        conditions=conditions,
        deltas=deltas[keys + ["baseline_sfm", "variant_sfm", "delta", "n_examples", "max_abs_diff"]],
        seed_table=seeds,
        sweep=sweep,
        placement=placement,
        shuffled=shuffled,
        depth=depth,
        datasets=datasets,
        across_seeds=across,
        hierarchical=hier,
        variance=var,
        trajectories=pd.concat(traj_rows, ignore_index=True) if traj_rows else None,
        gradients=pd.concat(grad_rows, ignore_index=True) if grad_rows else None,
        corpus_lengths=_corpus_lengths(lengths),
        standardisation=std,
        standardisation_sensitivity=std_sens,
        init_probe=probe,
        provenance={
            "runs": runs.index.astype(str).to_dict(orient="records"),
            "analysis": {"generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                         "settings": {**asdict(settings), "rules": asdict(settings.rules)}},
        },
    )
