"""The multi-run (study) report: tables, figures and sentences; sections appear when applicable.

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
from dataclasses import asdict

import pandas as pd

from routestats.rundir import schema as S
from routestats.errors import RoutestatsError
from routestats.rundir.collection import RunCollection
from routestats.studies.seeds import (
    NULL_TOLERANCE,
    null_check,
    reference_rows,
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
from routestats.report import Column, Figure, Report, Section, Table, fmt_num, fmt_p  # noqa: F401
from routestats.settings import AnalysisSettings
from routestats.studies.headline import study_headline

__all__ = ["build_study_report"]


def _try(fn, *args, **kw):
    try:
        out = fn(*args, **kw)
    except RoutestatsError:
        return None
    return None if out is None or len(out) == 0 else out


def _standardisation(runs: RunCollection, deltas: pd.DataFrame, settings: AnalysisSettings):
    """Exact-length standardised contrast between the two data sets, at the first seed that has
    a standard SAAB pair on both."""
    from routestats.studies.lengths import length_standardised_contrast

    names = sorted(deltas["dataset"].unique())
    if len(names) != 2:
        return None, None
    ref = deltas[reference_rows(deltas)]
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


def _delta_columns(df: pd.DataFrame, prefix: str = "delta_l", label: str = "Δ L") -> tuple[Column, ...]:
    cols = sorted((c for c in df.columns if c.startswith(prefix)), key=lambda c: int(c[len(prefix):]))
    return tuple(Column(f"{label}{c[len(prefix):]}", c) for c in cols)


def _tables(t: dict, deltas: pd.DataFrame, s: AnalysisSettings) -> dict[str, Table]:
    """The shown tables of the study sections present in ``t`` (name -> frame or None)."""
    out = {}
    grp = []
    if deltas["dataset"].nunique() > 1:
        grp.append(Column("Data set", "dataset", "text"))
    if deltas["depth"].nunique() > 1:
        grp.append(Column("Depth", "depth", "int"))
    grp = tuple(grp)
    conf = f"{100 * s.confidence:.0f}%"

    def add(name, caption, columns, **kw):
        if t.get(name) is not None:
            out[name] = Table(name, t[name], caption, columns, **kw)

    if t.get("seeds") is not None:
        lo, up = int(t["seeds"]["lower_layer"].iloc[0]), int(t["seeds"]["upper_layer"].iloc[0])
        add("seeds", f"Per-seed SFM of layers L{lo} and L{up} (standard SAAB vs baseline); Δ from unrounded values; "
                     "pattern labels by the documented rules (routestats.studies.PatternRules).",
            (*grp, Column("Seed", "seed", "int"), Column(f"Base L{lo}", "baseline_lower"), Column(f"Base L{up}", "baseline_upper"),
             Column(f"SAAB L{lo}", "variant_lower"), Column(f"SAAB L{up}", "variant_upper"),
             Column(f"Δ L{lo}", "delta_lower"), Column(f"Δ L{up}", "delta_upper"),
             Column("Displacement", "displacement"), Column("Pattern", "pattern", "text")))
    if t.get("sweep") is not None:
        has_null = bool((t["sweep"]["w_f"].astype(float) == 0).any())
        add("sweep", "Bias-strength sweep: Δ SFM per layer by w_f."
                     + (f" Null check (w_f = 0 rows only): the largest per-example |SFM difference| from the explicit "
                        f"baseline must be at most {NULL_TOLERANCE:g}." if has_null else ""),
            (Column("Seed", "seed", "int"), Column("w_f", "w_f", "num", 2), *_delta_columns(t["sweep"]),
             *((Column("Null check", "null_check", "text"),) if has_null else ())))
    if t.get("placement") is not None:
        add("placement", "Layer placement of the bias (per-layer multipliers): Δ SFM per layer.",
            (Column("Seed", "seed", "int"), Column("Bias layers", "bias_layers", "text"), *_delta_columns(t["placement"])))
    add("shuffled", "Shuffled control: Euclidean distances between layer-SFM profiles.",
        (Column("Seed", "seed", "int"), Column("SAAB–baseline", "distance_saab_baseline"),
         Column("Shuffled–baseline", "distance_shuffled_baseline"), Column("SAAB–shuffled", "distance_saab_shuffled")))
    add("depth", "Depth: last-layer SFM and the profile distance (standard SAAB vs baseline).",
        (Column("Depth", "depth", "int"), Column("Seed", "seed", "int"), Column("Last layer", "last_layer", "int"),
         Column("Base", "baseline_last"), Column("SAAB", "variant_last"), Column("Δ", "delta_last"),
         Column("Profile distance", "profile_distance")))
    add("datasets", "Data sets: mean over seeds of each layer's SFM (standard SAAB vs baseline).",
        (Column("Data set", "dataset", "text"), Column("Layer", "layer", "int"), Column("Base", "baseline_sfm"),
         Column("SAAB", "variant_sfm"), Column("Δ", "delta"), Column("Seeds", "n_seeds", "int")))
    add("across_seeds", "Across-seed inference (unit = seed): per-seed mean Δ, paired t-test and exact sign-flip "
                        "test over all 2^n sign patterns, Holm over layers. The smallest attainable sign-flip p is "
                        "2/2^n.",
        (*grp, Column("Layer", "layer", "int"), Column("Seeds", "n_seeds", "int"), Column("Mean Δ", "mean_delta"),
         Column("SD", "sd_delta"), Column("d_z", "dz", "num", 2), Column("t", "t", "num", 2),
         Column(f"{conf} CI (t)", ("ci_low_t", "ci_high_t"), "ci"), Column("p t (Holm)", "p_t_holm", "p"),
         Column("p sign-flip (Holm)", "p_signflip_holm", "p"), Column("min p", "min_attainable_p", "p")))
    add("hierarchical", f"Two-stage bootstrap (seeds, then examples within seeds; {s.resamples:,} "
                        f"resamples): mean Δ over seeds with a {conf} percentile interval. Assumes exchangeable seeds "
                        "and exchangeable examples within a seed.",
        (*grp, Column("Layer", "layer", "int"), Column("Seeds", "n_seeds", "int"), Column("Mean Δ", "mean_delta"),
         Column(f"{conf} CI", ("ci_low", "ci_high"), "ci")))
    add("variance_components", "Random-intercept model diff ~ 1 + (1 | seed) per layer (REML): mean Δ with Wald "
                               "CI and the split of variance between seeds (initialisation) and examples.",
        (*grp, Column("Layer", "layer", "int"), Column("Mean Δ", "mean_delta"), Column("SE", "se", "num", 4),
         Column("95% CI", ("ci_low", "ci_high"), "ci"), Column("Var seeds", "var_between_seeds", "num", 5),
         Column("Var examples", "var_within_seed", "num", 5), Column("ICC", "icc", "num", 2)))
    if t.get("standardisation") is not None:
        a, b = [c.replace("standardised_delta_", "") for c in t["standardisation"].columns
                if c.startswith("standardised_delta_")]
        add("standardisation", f"Exact-length standardisation (paper Table 12B): per-layer Δ standardised over the shared "
                               f"exact lengths (weights min of the two counts), contrast {b} − {a} with a stratified "
                               f"bootstrap {conf} CI ({s.resamples:,} resamples, weights fixed).",
            (Column("Seed", "seed", "int"), Column("Layer", "layer", "int"), Column(f"Std. Δ {a}", f"standardised_delta_{a}"),
             Column(f"Std. Δ {b}", f"standardised_delta_{b}"), Column("Contrast", "contrast"),
             Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("Strata", "shared_strata", "int"),
             Column("Mass W", "overlap_target_mass", "int")))
        add("standardisation_sensitivity", "Band-width sensitivity of the standardised contrast (point estimates).",
            (Column("Band", "band_width", "int"), Column("Layer", "layer", "int"), Column("Strata", "shared_strata", "int"),
             Column("Contrast", "contrast")))
    add("corpus_lengths", "Data-set token lengths per split (paper Table 11): mean, population SD, linear-interpolation "
                          "quantiles, and saturation at the cap.",
        (Column("Data set", "dataset", "text"), Column("Split", "split", "text"), Column("n", "n", "int"),
         Column("Mean", "mean", "num", 1), Column("SD", "sd_population", "num", 1), Column("Median", "median", "num", 1),
         Column("IQR", "iqr", "num", 1), Column("P90", "p90", "num", 1), Column("P95", "p95", "num", 1),
         Column("Cap", "cap", "int"), Column("Saturated", "saturation_count", "int"),
         Column("Rate", "saturation_rate", "num", 3)))
    add("init_probe", "Initialisation probes: Spearman ρ of initial-state quantities with the per-seed "
                      "displacement score (Δ last − Δ penultimate layer).",
        (Column("Analysis", "analysis", "text"), Column("Metric", "metric", "text"), Column("ρ", "spearman_rho"),
         Column("Seeds", "n_seeds", "int")))
    add("decomposition", f"Learned vs mechanical (METHODS 3.4b): total = SAAB − baseline, direct = SAAB − the same "
                         f"weights with the bias removed, learned = bias-off − baseline (total = direct + learned per "
                         f"example); mean, {conf} bootstrap CI and sign-flip p, Holm over layers within each component.",
        (Column("Seed", "seed", "int"), Column("Component", "component", "text"), Column("Layer", "layer", "int"),
         Column("Δ", "mean_diff"), Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("d_z", "dz", "num", 2),
         Column("p (Holm)", "p_holm", "p", floor="holm"), Column("n", "n", "int")))
    add("gradients", "Gradient-norm ratio last/penultimate layer: mean of per-step ratios over the last steps "
                     "ending at each checkpoint, per run.",
        (Column("Seed", "seed", "int"), Column("Run", "run_id", "text"), Column("Step", "checkpoint_step", "int"),
         Column("Mean ratio", "mean_ratio"), Column("SD", "sd_ratio")))
    return out


def _figures(t: dict, deltas: pd.DataFrame) -> dict[str, Figure]:
    """The study figures, each from frames aggregated here (the renderer only draws)."""
    out = {}
    ref = deltas[reference_rows(deltas)]
    if t.get("seeds") is not None:
        lines = ref[["dataset", "seed", "layer", "delta"]].sort_values(["dataset", "seed", "layer"])
        mean = ref.groupby("layer")["delta"].mean().rename("delta").reset_index()
        out["seeds"] = Figure("study-seeds", "study_seeds", {"lines": lines, "mean": mean},
                              {"several_datasets": bool(ref["dataset"].nunique() > 1)})
    if t.get("sweep") is not None:
        d = deltas[(deltas["variant"] == "saab") & (deltas["bias_layers"] == "all") & (~deltas["shuffled"].astype(bool))]
        points = d[["layer", "w_f", "delta"]]
        mean = d.groupby(["layer", "w_f"])["delta"].mean().rename("delta").reset_index()
        out["sweep"] = Figure("study-sweep", "study_sweep", {"points": points, "mean": mean})
    if t.get("shuffled") is not None:
        bands = []
        for label, sel in (("SAAB", reference_rows(deltas)), ("shuffled", deltas["variant"] == "saab_shuffled")):
            m = deltas[sel].groupby("layer")["delta"].agg(["mean", "min", "max"]).reset_index()
            m.insert(0, "condition", label)
            bands.append(m)
        out["shuffled"] = Figure("study-shuffled", "study_shuffled", {"bands": pd.concat(bands, ignore_index=True)})
    tr = t.get("trajectories")
    if tr is not None:
        tr = tr[tr["variant_run"].isin(set(ref["variant_run"]))]
        if len(tr):
            mean = tr.groupby(["layer", "step"])["delta"].mean().rename("delta").reset_index()
            out["trajectories"] = Figure("study-trajectories", "study_trajectories",
                                         {"lines": tr[["layer", "seed", "step", "delta"]], "mean": mean})
    return out


def _forest(ex: pd.DataFrame, t: dict, s: AnalysisSettings) -> pd.DataFrame | None:
    """Per layer: each seed's Δ with its bootstrap CI over that seed's examples, then the across-seed
    estimates with their intervals (paired t, two-stage bootstrap, mixed model) -- the evidence hierarchy."""
    if t.get("across_seeds") is None:
        return None
    from routestats.stats.inference import percentile_ci, seeded_bootstrap_means

    ref = ex[reference_rows(ex)]
    rows = []
    for (ds, seed), g in ref.groupby(["dataset", "seed"], sort=True):
        D = g.pivot_table(index="example_id", columns="layer", values="diff").sort_index(axis=1)
        lo, hi = percentile_ci(seeded_bootstrap_means(D.to_numpy(), s.resamples, s.seed), s.confidence)
        for j, layer in enumerate(D.columns):
            rows.append({"dataset": ds, "layer": int(layer), "level": "seed", "label": f"seed {seed}",
                         "estimate": float(D[layer].mean()), "ci_low": float(lo[j]), "ci_high": float(hi[j])})
    for name, key, lo_c, hi_c in (("paired t (seeds)", "across_seeds", "ci_low_t", "ci_high_t"),
                                  ("two-stage bootstrap", "hierarchical", "ci_low", "ci_high"),
                                  ("mixed model", "variance_components", "ci_low", "ci_high")):
        f = t.get(key)
        if f is None:
            continue
        for r in f.itertuples():
            rows.append({"dataset": r.dataset, "layer": int(r.layer), "level": "across seeds", "label": name,
                         "estimate": float(r.mean_delta), "ci_low": float(getattr(r, lo_c)),
                         "ci_high": float(getattr(r, hi_c))})
    return pd.DataFrame(rows) if rows else None


def disagreement(forest: pd.DataFrame | None, n_seeds: int) -> list[str]:
    """Sentences for layers whose across-seed intervals disagree about excluding 0, with the reasons."""
    if forest is None:
        return []
    out = []
    acr = forest[forest["level"] == "across seeds"]
    for (ds, layer), g in acr.groupby(["dataset", "layer"]):
        excl = {r.label: (r.ci_low > 0 or r.ci_high < 0) for r in g.itertuples()}
        if len(set(excl.values())) < 2:
            continue
        say = lambda names: " and ".join(  # noqa: E731
            f"the {n} [{fmt_num(g.loc[g.label == n, 'ci_low'].iloc[0])}, {fmt_num(g.loc[g.label == n, 'ci_high'].iloc[0])}]"
            for n in names)
        yes = [k for k, v in excl.items() if v]
        no = [k for k, v in excl.items() if not v]
        out.append(f"Layer {layer}: {say(no)} include{'s' if len(no) == 1 else ''} 0 while {say(yes)} exclude"
                   f"{'s' if len(yes) == 1 else ''} it.")
    if out:  # the reasons once, after the layers they explain
        out.append(f"Why: with {n_seeds} seeds the paired t interval rests on {n_seeds} per-seed means (t with "
                   f"{n_seeds - 1} df, so it is wide); the two-stage bootstrap resamples only the {n_seeds} observed "
                   f"seeds and understates between-seed variation; the mixed model assumes normal seed effects and "
                   f"estimates their variance from {n_seeds} seeds. Trust the widest interval until more seeds are run.")
    return out


def _findings(t: dict, n_runs: int, seeds: list, s: AnalysisSettings) -> list[str]:
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


def build_study_report(runs: RunCollection, settings: AnalysisSettings | None = None, progress=None,
                       init_probe=None, lengths=None) -> Report:
    """Compute every applicable multi-run table for a run tree.

    ``init_probe``: folder of ``python -m runners init-probe`` outputs; its correlations with
    the seed table's displacement score become a section. ``lengths``: folder searched for
    ``lengths.parquet`` files (``python -m runners lengths``), summarised per data set and split.
    """
    s = settings or AnalysisSettings()
    say = progress or (lambda label: None)
    say("paired deltas")
    ex = example_deltas(runs, s.step, s.examples)
    keys = ["baseline_run", "variant_run", "seed", "variant", "w_f", "bias_layers", "shuffled", "depth", "dataset",
            "step", "layer"]
    deltas = summarise_deltas(ex)
    ref = reference_rows(deltas)
    n_ref_seeds = deltas.loc[ref, "seed"].nunique()
    say("seed tables")
    t = {}
    t["seeds"] = _try(seed_table, deltas, rules=s.rules) if ref.any() else None
    t["sweep"] = _try(sweep_table, deltas) if deltas.loc[deltas["variant"] == "saab", "w_f"].nunique() > 1 else None
    t["placement"] = _try(placement_table, deltas)
    t["shuffled"] = _try(shuffled_table, deltas) if (deltas["variant"] == "saab_shuffled").any() else None
    t["depth"] = _try(depth_table, deltas) if deltas["depth"].nunique() > 1 else None
    t["datasets"] = _try(dataset_table, deltas) if deltas["dataset"].nunique() > 1 else None
    if n_ref_seeds >= 2:
        say("across-seed inference")
        t["across_seeds"] = _try(across_seed_tests, deltas)
        t["hierarchical"] = _try(hierarchical_bootstrap, ex, resamples=s.resamples, seed=s.seed, confidence=s.confidence)
        t["variance_components"] = _try(variance_components, ex)
    say("trajectories")
    traj_rows, grad_rows, seen = [], [], set()
    for p in runs.pairs():
        common = sorted(set(p.baseline.attention_steps) & set(p.variant.attention_steps))
        if len(common) > 1:
            tr = trajectory(p, "sfm")
            w = tr.pivot_table(index=["step", "layer"], columns="role", values="value").reset_index()
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
    t["trajectories"] = pd.concat(traj_rows, ignore_index=True) if traj_rows else None
    t["gradients"] = pd.concat(grad_rows, ignore_index=True) if grad_rows else None
    say("length standardisation")
    t["standardisation"], t["standardisation_sensitivity"] = _standardisation(runs, deltas, s)
    t["corpus_lengths"] = _corpus_lengths(lengths)
    if init_probe is not None and t["seeds"] is not None:
        from routestats.studies.initprobe import load_probe, probe_correlations

        # outcomes of the largest data-set/depth group (the init probe is one data set, one depth)
        seeds_t = t["seeds"]
        key = seeds_t.groupby(["dataset", "depth"], dropna=False).size().idxmax()
        main = seeds_t[(seeds_t["dataset"] == key[0]) & (seeds_t["depth"] == key[1])]
        t["init_probe"] = probe_correlations(load_probe(init_probe), main[["seed", "displacement"]])
    forest = _forest(ex, t, s)
    from routestats.studies.decomposition import decomposition

    t["decomposition"] = decomposition(runs, s)
    deltas_out = deltas[keys + ["baseline_sfm", "variant_sfm", "delta", "n_examples", "max_abs_diff"]]
    deltas_out.insert(0, "study", ", ".join(runs.studies))  # one study per report (studies.discover.load)
    tables = _tables(t, deltas, s)
    figs = _figures(t, deltas)
    order = [("seeds", "Seeds (paper Table 3)"), ("across_seeds", "Across-seed inference"),
             ("hierarchical", "Example vs initialisation variance: two-stage bootstrap"),
             ("variance_components", "Example vs initialisation variance: mixed model"),
             ("sweep", "Bias strength"), ("placement", "Layer placement"), ("shuffled", "Shuffled control"),
             ("depth", "Depth"), ("datasets", "Data sets"), ("corpus_lengths", "Data-set lengths (paper Table 11)"),
             ("standardisation", "Length-standardised data-set contrast"),
             ("standardisation_sensitivity", "Band-width sensitivity"), ("init_probe", "Initialisation probes"),
             ("decomposition", "Learned vs mechanical: the bias on and off on the same weights"),
             ("gradients", "Gradient-norm ratios")]
    sections = [Section(name, title, (tables[name],), (figs[name],) if name in figs else ())
                for name, title in order if name in tables]
    vc = t.get("variance_components")
    if vc is not None and vc["mean_delta"].isna().all():
        i = next(k for k, sec in enumerate(sections) if sec.id == "variance_components")
        sections[i] = Section("variance_components", sections[i].title, sections[i].tables,
                              text="The random-intercept model could not be fitted for any layer (too few seeds or "
                                   "no variation between them for REML); the two-stage bootstrap above does not need it.")
    if forest is not None:
        n_ref = int(t["across_seeds"]["n_seeds"].max())
        why = disagreement(forest, n_ref)
        sections.insert(1, Section(
            "evidence", "Evidence by level: each seed, then across seeds", (Table("forest", forest),),
            (Figure("study-forest", "study_forest", {"forest": forest}),),
            text=("Per layer: each seed's Δ with its bootstrap interval over that seed's examples (within-seed "
                  "precision), then the across-seed estimates with their intervals (seed as the unit). ")
            + (" ".join(why) if why else "The across-seed intervals agree on whether they exclude 0.")))
    if t["trajectories"] is not None:
        sections.append(Section("trajectories", "Trajectories", (Table("trajectories", t["trajectories"]),),
                                (figs["trajectories"],) if "trajectories" in figs else (),
                                text="Δ SFM per layer at every checkpoint step shared by a pair."))
    sections.append(Section("deltas", "Paired deltas", (Table("deltas", deltas_out),)))
    seeds = sorted(deltas["seed"].dropna().unique().tolist())
    n_pairs = deltas["variant_run"].nunique()
    methods = ("Each variant run is paired with the baseline run sharing its initial tensors and data order. Per pair "
               "and layer, Δ is the mean over examples of the per-example SFM difference (variant − baseline). "
               "Across-seed tests treat the seed as the unit; the two-stage bootstrap and the mixed model separate "
               "variation between initialisations from variation between examples. Pattern labels follow fixed, "
               f"documented rules (strong |Δ| ≥ {s.rules.strong_delta}, dominance ratio "
               f"{s.rules.dominance_ratio}, gap tolerance {s.rules.gap_tol}).")
    return Report(
        title=f"Study of {len(runs)} runs",
        subtitle=f"{len(runs)} runs · {n_pairs} pairs · seeds {', '.join(map(str, seeds))} · "
                 f"data sets {', '.join(sorted(map(str, deltas['dataset'].unique())))}",
        sections=tuple(sections),
        findings=tuple(_findings(t, len(runs), seeds, s)),
        headline=tuple(study_headline(t.get("across_seeds"), int(n_pairs), seeds,
                                      decomposition=t.get("decomposition"))),
        methods=methods,
        provenance={"runs": [{k: (None if pd.isna(v) else v.item() if hasattr(v, "item") else v)
                              for k, v in rec.items()}  # a factor a run lacks is null, not NaN (valid JSON)
                             for rec in runs.index.astype(object).to_dict(orient="records")],
                    "verified_files": runs.verified_files(),
                    "analysis": {"generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                                 "settings": asdict(s)}},
        data={"conditions": runs.index.drop(columns=["path", "init_id", "data_order_id"])},
        facts={"n_runs": len(runs), "seeds": seeds, "n_pairs": int(n_pairs)},
    )
