"""Rendering of multi-run (study) reports: table layouts, figures and the HTML section."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from . import figures as F
from .formatting import Column, TableSpec, fmt_num, fmt_p, section_lookups


def _delta_columns(df: pd.DataFrame, prefix: str = "delta_l", label: str = "Δ L") -> tuple[Column, ...]:
    cols = sorted((c for c in df.columns if c.startswith(prefix)), key=lambda c: int(c[len(prefix):]))
    return tuple(Column(f"{label}{c[len(prefix):]}", c) for c in cols)


def _group_cols(rep) -> tuple[Column, ...]:
    """Data-set / depth columns, shown only when the tree has more than one of them."""
    cols = []
    if rep.deltas["dataset"].nunique() > 1:
        cols.append(Column("Data set", "dataset", "text"))
    if rep.deltas["depth"].nunique() > 1:
        cols.append(Column("Depth", "depth", "int"))
    return tuple(cols)


def study_specs(rep) -> dict[str, TableSpec]:
    """Table layouts of the study sections present in ``rep``."""
    specs = {}
    grp = _group_cols(rep)
    conf = f"{100 * rep.settings.confidence:.0f}%"
    if rep.seed_table is not None:
        t = rep.seed_table
        lo, up = int(t["lower_layer"].iloc[0]), int(t["upper_layer"].iloc[0])
        specs["seeds"] = TableSpec(
            "seeds", f"Per-seed SFM of layers L{lo} and L{up} (standard SAAB vs baseline); Δ from unrounded values; "
                     "pattern labels by the documented rules (routestats.studies.PatternRules).",
            (*grp, Column("Seed", "seed", "int"), Column(f"Base L{lo}", "baseline_lower"), Column(f"Base L{up}", "baseline_upper"),
             Column(f"SAAB L{lo}", "variant_lower"), Column(f"SAAB L{up}", "variant_upper"),
             Column(f"Δ L{lo}", "delta_lower"), Column(f"Δ L{up}", "delta_upper"),
             Column("Displacement", "displacement"), Column("Pattern", "pattern", "text")))
    if rep.sweep is not None:
        specs["sweep"] = TableSpec(
            "sweep", "Bias-strength sweep: Δ SFM per layer by w_f; the last column is the null check, the largest "
                     "per-example |SFM difference| from the explicit baseline (w_f = 0 must give 0 up to rounding).",
            (Column("Seed", "seed", "int"), Column("w_f", "w_f", "num", 2), *_delta_columns(rep.sweep),
             Column("max |Δ| (null check)", "max_abs_diff", "num", 8)))
    if rep.placement is not None:
        specs["placement"] = TableSpec(
            "placement", "Layer placement of the bias (per-layer multipliers): Δ SFM per layer.",
            (Column("Seed", "seed", "int"), Column("Bias layers", "bias_layers", "text"), *_delta_columns(rep.placement)))
    if rep.shuffled is not None:
        specs["shuffled"] = TableSpec(
            "shuffled", "Shuffled control: Euclidean distances between layer-SFM profiles.",
            (Column("Seed", "seed", "int"), Column("SAAB–baseline", "distance_saab_baseline"),
             Column("Shuffled–baseline", "distance_shuffled_baseline"), Column("SAAB–shuffled", "distance_saab_shuffled")))
    if rep.depth is not None:
        specs["depth"] = TableSpec(
            "depth", "Depth: last-layer SFM and the profile distance (standard SAAB vs baseline).",
            (Column("Depth", "depth", "int"), Column("Seed", "seed", "int"), Column("Last layer", "last_layer", "int"),
             Column("Base", "baseline_last"), Column("SAAB", "variant_last"), Column("Δ", "delta_last"),
             Column("Profile distance", "profile_distance")))
    if rep.datasets is not None:
        specs["datasets"] = TableSpec(
            "datasets", "Data sets: mean over seeds of each layer's SFM (standard SAAB vs baseline).",
            (Column("Data set", "dataset", "text"), Column("Layer", "layer", "int"), Column("Base", "baseline_sfm"),
             Column("SAAB", "variant_sfm"), Column("Δ", "delta"), Column("Seeds", "n_seeds", "int")))
    if rep.across_seeds is not None:
        specs["across_seeds"] = TableSpec(
            "across_seeds", "Across-seed inference (unit = seed): per-seed mean Δ, paired t-test and exact sign-flip "
                            "test over all 2^n sign patterns, Holm over layers. The smallest attainable sign-flip p is "
                            "2/2^n.",
            (*grp, Column("Layer", "layer", "int"), Column("Seeds", "n_seeds", "int"), Column("Mean Δ", "mean_delta"),
             Column("SD", "sd_delta"), Column("d_z", "dz", "num", 2), Column("t", "t", "num", 2),
             Column(f"{conf} CI (t)", ("ci_low_t", "ci_high_t"), "ci"), Column("p t (Holm)", "p_t_holm", "p"),
             Column("p sign-flip (Holm)", "p_signflip_holm", "p"), Column("min p", "min_attainable_p", "p")))
    if rep.hierarchical is not None:
        specs["hierarchical"] = TableSpec(
            "hierarchical", f"Two-stage bootstrap (seeds, then examples within seeds; {rep.settings.resamples:,} "
                            f"resamples): mean Δ over seeds with a {conf} percentile interval. Assumes exchangeable seeds "
                            "and exchangeable examples within a seed.",
            (*grp, Column("Layer", "layer", "int"), Column("Seeds", "n_seeds", "int"), Column("Mean Δ", "mean_delta"),
             Column(f"{conf} CI", ("ci_low", "ci_high"), "ci")))
    if rep.variance is not None:
        specs["variance_components"] = TableSpec(
            "variance_components", "Random-intercept model diff ~ 1 + (1 | seed) per layer (REML): mean Δ with Wald "
                                   "CI and the split of variance between seeds (initialisation) and examples.",
            (*grp, Column("Layer", "layer", "int"), Column("Mean Δ", "mean_delta"), Column("SE", "se", "num", 4),
             Column("95% CI", ("ci_low", "ci_high"), "ci"), Column("Var seeds", "var_between_seeds", "num", 5),
             Column("Var examples", "var_within_seed", "num", 5), Column("ICC", "icc", "num", 2)))
    if rep.standardisation is not None:
        a, b = [c.replace("standardised_delta_", "") for c in rep.standardisation.columns if c.startswith("standardised_delta_")]
        specs["standardisation"] = TableSpec(
            "standardisation", f"Exact-length standardisation (Table 12B): per-layer Δ standardised over the shared "
                               f"exact lengths (weights min of the two counts), contrast {b} − {a} with a stratified "
                               f"bootstrap {conf} CI ({rep.settings.resamples:,} resamples, weights fixed).",
            (Column("Seed", "seed", "int"), Column("Layer", "layer", "int"), Column(f"Std. Δ {a}", f"standardised_delta_{a}"),
             Column(f"Std. Δ {b}", f"standardised_delta_{b}"), Column("Contrast", "contrast"),
             Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("Strata", "shared_strata", "int"),
             Column("Mass W", "overlap_target_mass", "int")))
        specs["standardisation_sensitivity"] = TableSpec(
            "standardisation_sensitivity", "Band-width sensitivity of the standardised contrast (point estimates).",
            (Column("Band", "band_width", "int"), Column("Layer", "layer", "int"), Column("Strata", "shared_strata", "int"),
             Column("Contrast", "contrast")))
    if rep.corpus_lengths is not None:
        specs["corpus_lengths"] = TableSpec(
            "corpus_lengths", "Data-set token lengths per split (Table 11): mean, population SD, linear-interpolation "
                              "quantiles, and saturation at the cap.",
            (Column("Data set", "dataset", "text"), Column("Split", "split", "text"), Column("n", "n", "int"),
             Column("Mean", "mean", "num", 1), Column("SD", "sd_population", "num", 1), Column("Median", "median", "num", 1),
             Column("IQR", "iqr", "num", 1), Column("P90", "p90", "num", 1), Column("P95", "p95", "num", 1),
             Column("Cap", "cap", "int"), Column("Saturated", "saturation_count", "int"),
             Column("Rate", "saturation_rate", "num", 3)))
    if rep.init_probe is not None:
        specs["init_probe"] = TableSpec(
            "init_probe", "Initialisation probes: Spearman ρ of initial-state quantities with the per-seed "
                          "displacement score (Δ last − Δ penultimate layer).",
            (Column("Analysis", "analysis", "text"), Column("Metric", "metric", "text"), Column("ρ", "spearman_rho"),
             Column("Seeds", "n_seeds", "int")))
    if rep.gradients is not None:
        specs["gradients"] = TableSpec(
            "gradients", "Gradient-norm ratio last/penultimate layer: mean of per-step ratios over the last steps "
                         "ending at each checkpoint, per run.",
            (Column("Seed", "seed", "int"), Column("Run", "run_id", "text"), Column("Step", "checkpoint_step", "int"),
             Column("Mean ratio", "mean_ratio"), Column("SD", "sd_ratio")))
    return specs


def _frame(rep, name):
    return rep.tables()[name]


def study_figures(rep, folder: Path, prefix: str = "") -> dict:
    out = {}
    if rep.seed_table is not None:
        d = rep.deltas[(rep.deltas["variant"] == "saab") & (rep.deltas["w_f"] == 1.0) & (rep.deltas["bias_layers"] == "all")]
        fig, ax = plt.subplots(figsize=(7, 3.6))
        for (ds, seed), g in d.groupby(["dataset", "seed"]):
            g = g.sort_values("layer")
            label = f"seed {seed}" if d["dataset"].nunique() == 1 else f"{ds} seed {seed}"
            ax.plot(g["layer"], g["delta"], marker="o", lw=1, alpha=0.6, label=F.plain(label))
        m = d.groupby("layer")["delta"].mean()
        ax.plot(m.index, m.values, color="black", lw=2.5, marker="s", label="mean over seeds")
        ax.axhline(0, color="0.4", ls="--", lw=1)
        ax.set(xlabel="layer", ylabel="Δ SFM (SAAB − baseline)", title="Per-seed paired differences")
        ax.set_xticks(sorted(d["layer"].unique()))
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
        fig.tight_layout()
        out["seeds"] = F.save(fig, folder, prefix + "study-seeds")
    if rep.sweep is not None:
        d = rep.deltas[(rep.deltas["variant"] == "saab") & (rep.deltas["bias_layers"] == "all") & (~rep.deltas["shuffled"].astype(bool))]
        fig, ax = plt.subplots(figsize=(7, 3.6))
        layers = sorted(d["layer"].unique())
        colors = sns.color_palette("viridis", len(layers))
        for c, layer in zip(colors, layers):
            g = d[d["layer"] == layer]
            ax.scatter(g["w_f"], g["delta"], color=c, s=12, alpha=0.6)
            mm = g.groupby("w_f")["delta"].mean()
            ax.plot(mm.index, mm.values, color=c, marker="o", label=f"layer {layer}")
        ax.axhline(0, color="0.4", ls="--", lw=1)
        ax.set(xlabel="bias strength w_f", ylabel="Δ SFM", title="Bias-strength sweep (points: seeds)")
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
        fig.tight_layout()
        out["sweep"] = F.save(fig, folder, prefix + "study-sweep")
    if rep.shuffled is not None:
        d = rep.deltas
        fig, ax = plt.subplots(figsize=(7, 3.6))
        for label, sel, color in (("SAAB", (d["variant"] == "saab") & (d["w_f"] == 1.0) & (d["bias_layers"] == "all"), "#DD8452"),
                                  ("shuffled", d["variant"] == "saab_shuffled", "#8172B3")):
            m = d[sel].groupby("layer")["delta"].agg(["mean", "min", "max"])
            ax.plot(m.index, m["mean"], marker="o", color=color, label=f"{label} − baseline (mean over seeds)")
            ax.fill_between(m.index, m["min"], m["max"], color=color, alpha=0.15)
        ax.axhline(0, color="0.4", ls="--", lw=1)
        ax.set(xlabel="layer", ylabel="Δ SFM", title="Shuffled control (band: range over seeds)")
        ax.set_xticks(sorted(d["layer"].unique()))
        ax.legend(fontsize=8)
        fig.tight_layout()
        out["shuffled"] = F.save(fig, folder, prefix + "study-shuffled")
    if rep.trajectories is not None:
        t = rep.trajectories
        ref_runs = set(rep.deltas.loc[(rep.deltas["variant"] == "saab") & (rep.deltas["w_f"] == 1.0)
                                      & (rep.deltas["bias_layers"] == "all"), "variant_run"])
        t = t[t["variant_run"].isin(ref_runs)]
        if len(t):
            fig, ax = plt.subplots(figsize=(7.5, 3.6))
            layers = sorted(t["layer"].unique())
            colors = sns.color_palette("viridis", len(layers))
            for c, layer in zip(colors, layers):
                g = t[t["layer"] == layer]
                for _, gs in g.groupby("seed"):
                    ax.plot(gs["step"], gs["delta"], color=c, lw=0.8, alpha=0.35)
                m = g.groupby("step")["delta"].mean()
                ax.plot(m.index, m.values, color=c, lw=2, marker="o", ms=3, label=f"layer {layer}")
            ax.axhline(0, color="0.4", ls="--", lw=1)
            ax.set(xscale="symlog", xlabel="training step", ylabel="Δ SFM (SAAB − baseline)",
                   title="Trajectories (thin: seeds, thick: mean)")
            ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
            fig.tight_layout()
            out["trajectories"] = F.save(fig, folder, prefix + "study-trajectories")
    return out


def study_section(rep, slug: str, figs: dict) -> dict:
    """The HTML context of one study section (same structure as a pair section)."""
    specs = study_specs(rep)
    tables = rep.tables()

    table, fig = section_lookups(tables, specs, figs, slug)

    blocks = []
    order = [("seeds", "Seeds (Table 3)", "seeds"), ("across_seeds", "Across-seed inference", None),
             ("hierarchical", "Example vs initialisation variance: two-stage bootstrap", None),
             ("variance_components", "Example vs initialisation variance: mixed model", None),
             ("sweep", "Bias strength", "sweep"), ("placement", "Layer placement", None),
             ("shuffled", "Shuffled control", "shuffled"), ("depth", "Depth", None), ("datasets", "Data sets", None),
             ("corpus_lengths", "Data-set lengths (Table 11)", None),
             ("standardisation", "Length-standardised data-set contrast", None),
             ("standardisation_sensitivity", "Band-width sensitivity", None),
             ("init_probe", "Initialisation probes", None),
             ("gradients", "Gradient-norm ratios", None)]
    for name, title, figname in order:
        if name in specs:
            blocks.append({"id": name, "title": title, "tables": [table(name)], "figure": fig(figname) if figname else None,
                           "text": ""})
    if "trajectories" in tables:
        blocks.append({"id": "trajectories", "title": "Trajectories", "tables": [], "figure": fig("trajectories"),
                       "text": "Δ SFM per layer at every checkpoint step shared by a pair."})
    findings = [f"{rep.n_runs} runs, seeds {', '.join(map(str, rep.seeds))}."]
    if rep.seed_table is not None:
        counts = rep.seed_table["pattern"].value_counts()
        findings.append("Seed patterns: " + "; ".join(f"{k} × {v}" for k, v in counts.items()) + ".")
    if rep.across_seeds is not None:
        for r in rep.across_seeds.itertuples():
            where = f"{r.dataset}, " if rep.across_seeds["dataset"].nunique() > 1 else ""
            findings.append(f"{where}Layer {r.layer}: mean Δ over {r.n_seeds} seeds {fmt_num(r.mean_delta)} "
                            f"(SD {fmt_num(r.sd_delta)}), paired t p_Holm {fmt_p(r.p_t_holm)}, exact sign-flip "
                            f"p_Holm {fmt_p(r.p_signflip_holm)} (min attainable {fmt_p(r.min_attainable_p)}).")
    if rep.sweep is not None and (rep.sweep["w_f"] == 0).any():
        worst = rep.sweep.loc[rep.sweep["w_f"] == 0, "max_abs_diff"].max()
        findings.append(f"Null check w_f = 0 vs baseline: max |ΔSFM| = {worst:.2e} "
                        f"({'passes' if worst <= 1.2e-7 else 'FAILS'} the 1.2e-7 criterion).")
    methods = ("Each variant run is paired with the baseline run sharing its initial tensors and data order. Per pair "
               "and layer, Δ is the mean over examples of the per-example SFM difference (variant − baseline). "
               "Across-seed tests treat the seed as the unit; the two-stage bootstrap and the mixed model separate "
               "variation between initialisations from variation between examples. Pattern labels follow fixed, "
               f"documented rules (strong |Δ| ≥ {rep.settings.rules.strong_delta}, dominance ratio "
               f"{rep.settings.rules.dominance_ratio}, gap tolerance {rep.settings.rules.gap_tol}).")
    prov = [("runs", str(rep.n_runs)), ("analysis settings", json.dumps(rep.provenance["analysis"]["settings"], sort_keys=True))]
    prov += [(r["run_id"], json.dumps(r, sort_keys=True)) for r in rep.provenance["runs"]]
    n_pairs = rep.deltas["variant_run"].nunique()
    return {"slug": slug, "label": rep.title, "baseline_id": "—", "variant_id": "—", "step": "final",
            "subtitle": f"{rep.n_runs} runs · {n_pairs} pairs · seeds {', '.join(map(str, rep.seeds))} · "
                        f"data sets {', '.join(sorted(map(str, rep.deltas['dataset'].unique())))}",
            "n_examples": int(rep.deltas["n_examples"].max()), "n_layers": int(rep.deltas["layer"].nunique()),
            "n_heads": "—", "findings": findings, "blocks": blocks, "methods": methods, "provenance_rows": prov,
            "provenance_json": json.dumps(rep.provenance, indent=2, sort_keys=True, default=str)}
