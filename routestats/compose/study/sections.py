"""The sections of the study (run tree) report: one function ``(ctx) -> Section | None`` each over
one :class:`StudyContext` (None: the tree holds nothing for it; a section that fails says why,
through :func:`routestats.compose.pair.context.guarded`).

The context computes the frames several sections share once (the paired deltas, the seed table,
the across-seed tests, the two-stage bootstrap, the mixed model).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Callable

import pandas as pd

from routestats.compose.claims import direct_learned_claim
from routestats.compose.study.claims import (
    across_seed_claims, convergence_claims, null_check_claims, pattern_claims, shared_example_claims,
)
from routestats.errors import RoutestatsError
from routestats.claim import Check, Claim
from routestats.report import Column, Figure, Section, Table
from routestats.rundir import schema as S
from routestats.rundir.collection import RunCollection
from routestats.settings import AnalysisSettings
from routestats.report import section
from routestats.studies.seeds import (
    NULL_TOLERANCE, across_seed_tests, null_check, dataset_table, depth_table, example_deltas, hierarchical_bootstrap,
    placement_table, reference_rows, seed_table, shuffled_table, summarise_deltas, sweep_table, variance_components,
)
from routestats.compose.study.inputs import corpus_lengths, disagreement, forest_frame, shared_examples, standardisation
from routestats.studies.training import gradient_checkpoint_summary, trajectory

__all__ = ["StudyContext", "study_context", "STUDY_SECTIONS"]


def _nonempty(frame):
    return None if frame is None or len(frame) == 0 else frame


@dataclass(frozen=True)
class StudyContext:
    """The inputs of every study section: the runs, the settings and the per-example deltas."""

    runs: RunCollection
    settings: AnalysisSettings
    ex: pd.DataFrame = field(repr=False)
    say: Callable[[str], None] = field(default=lambda label: None, repr=False, compare=False)
    init_probe: object = None
    lengths: object = None

    @functools.cached_property
    def deltas(self) -> pd.DataFrame:
        return summarise_deltas(self.ex)

    @property
    def ref(self) -> pd.Series:
        return reference_rows(self.deltas)

    @property
    def n_ref_seeds(self) -> int:
        return int(self.deltas.loc[self.ref, "seed"].nunique())

    @functools.cached_property
    def seeds(self) -> pd.DataFrame | None:
        return _nonempty(seed_table(self.deltas, rules=self.settings.rules, examples=self.ex)) if self.ref.any() \
            else None

    @functools.cached_property
    def across_seeds(self) -> pd.DataFrame | None:
        return _nonempty(across_seed_tests(self.deltas, resampling=self.settings.resampling)) \
            if self.n_ref_seeds >= 2 else None

    @functools.cached_property
    def hierarchical(self) -> pd.DataFrame | None:
        s = self.settings
        return _nonempty(hierarchical_bootstrap(self.ex, resampling=s.resampling)) \
            if self.n_ref_seeds >= 2 else None

    @functools.cached_property
    def variance_components(self) -> pd.DataFrame | None:
        return _nonempty(variance_components(self.ex, confidence=self.settings.confidence)) \
            if self.n_ref_seeds >= 2 else None

    @property
    def group_columns(self) -> tuple[Column, ...]:
        d = self.deltas
        return ((Column("Data set", "dataset", "text"),) if d["dataset"].nunique() > 1 else ()) + \
            ((Column("Depth", "depth", "int"),) if d["depth"].nunique() > 1 else ())

    @property
    def bias_off_runs(self) -> int:
        """How many bias-off evaluations the tree holds."""
        from routestats.rundir.read import is_bias_off

        return sum(1 for r in self.runs if is_bias_off(r))

    @property
    def conf(self) -> str:
        return f"{100 * self.settings.confidence:.0f}%"


def study_context(runs: RunCollection, settings: AnalysisSettings | None = None, say=None, init_probe=None,
                  lengths=None) -> StudyContext:
    s = settings or AnalysisSettings()
    say = say or (lambda label: None)
    say("paired deltas")
    return StudyContext(runs, s, example_deltas(runs, s.step, s.examples), say, init_probe, lengths)


def _delta_columns(df: pd.DataFrame, prefix: str = "delta_l", label: str = "Δ L") -> tuple[Column, ...]:
    cols = sorted((c for c in df.columns if c.startswith(prefix)), key=lambda c: int(c[len(prefix):]))
    return tuple(Column(f"{label}{c[len(prefix):]}", c) for c in cols)


def _one(table: Table, figure: Figure | None = None, text: str = "", claims=()) -> Section:
    """A section of one table (and a figure): its id and title come from its section function's decorator."""
    return Section(tables=(table,), figures=(figure,) if figure is not None else (), text=text, claims=tuple(claims))


@section("seeds", "Seeds")
def seeds_section(ctx: StudyContext) -> Section | None:
    t = ctx.seeds
    if t is None:
        return None
    ctx.say("seed tables")
    lo, up = int(t["lower_layer"].iloc[0]), int(t["upper_layer"].iloc[0])
    table = Table("seeds", t, f"Per-seed SFM of layers L{lo} and L{up} (standard SAAB vs baseline); Δ from unrounded "
                  "values; pattern labels by the documented rules (routestats.studies.PatternRules).",
                  (*ctx.group_columns, Column("Seed", "seed", "int"), Column(f"Base L{lo}", "baseline_lower"),
                   Column(f"Base L{up}", "baseline_upper"), Column(f"SAAB L{lo}", "variant_lower"),
                   Column(f"SAAB L{up}", "variant_upper"), Column(f"Δ L{lo}", "delta_lower"),
                   Column(f"Δ L{up}", "delta_upper"), Column("Displacement", "displacement"),
                   Column("Pattern", "pattern", "text")))
    ref = ctx.deltas[ctx.ref]
    lines = ref[["dataset", "seed", "layer", "delta"]].sort_values(["dataset", "seed", "layer"])
    mean = ref.groupby("layer")["delta"].mean().rename("delta").reset_index()
    fig = Figure("study-seeds", "study_seeds", {"lines": lines, "mean": mean},
                 {"several_datasets": bool(ref["dataset"].nunique() > 1)})
    return _one(table, fig, claims=pattern_claims(t))


@section("evidence", "Evidence by level: each seed, then across seeds")
def evidence_section(ctx: StudyContext) -> Section | None:
    if ctx.across_seeds is None:
        return None
    forest = forest_frame(ctx)
    if forest is None:
        return None
    why = disagreement(forest, int(ctx.across_seeds["n_seeds"].max()), ctx.settings.confidence)
    return Section(tables=(Table("forest", forest),),
                   figures=(Figure("study-forest", "study_forest", {"forest": forest}),),
                   text=("Per layer: each seed's Δ with its bootstrap interval over that seed's examples (within-seed "
                         "precision), then the across-seed estimates with their intervals (seed as the unit). ")
                   + (" ".join(why) if why else "The across-seed intervals agree on whether they exclude 0."))


@section("across_seeds", "Across-seed inference")
def across_seeds_section(ctx: StudyContext) -> Section | None:
    if ctx.across_seeds is None:
        return None
    ctx.say("across-seed inference")
    return _one(Table(
        "across_seeds", ctx.across_seeds, "Across-seed inference (unit = seed): per-seed mean Δ, paired t-test and exact "
        "sign-flip test over all 2^n sign patterns (beyond 16 seeds: random patterns, the plus-one rule), Holm over "
        "layers; the t interval is per layer (not adjusted for multiplicity). The smallest attainable sign-flip p is "
        "2/2^n.",
        (*ctx.group_columns, Column("Layer", "layer", "int"), Column("Seeds", "n_seeds", "int"),
         Column("Mean Δ", "mean_delta"), Column("SD", "sd_delta"), Column("d_z", "dz", "num", 2),
         Column("t", "t", "num", 2), Column(f"{ctx.conf} CI (t)", ("ci_low_t", "ci_high_t"), "ci"),
         Column("p t (Holm)", "p_t_holm", "p"), Column("p sign-flip (Holm)", "p_signflip_holm", "p"),
         Column("min p", "min_attainable_p", "p"))),
        claims=with_seed_points(across_seed_claims(ctx.across_seeds, ctx.settings.alpha, ctx.conf),
                                ctx.deltas[ctx.ref]))


def with_seed_points(claims: list, ref: pd.DataFrame) -> list:
    """The answer's figure with each seed's Δ beside the across-seed interval (one data set: the points of
    several would share a layer's column)."""
    if ref["dataset"].nunique() != 1:
        return claims
    pts = ref[["seed", "layer", "delta"]].rename(columns={"delta": "estimate"})
    return [replace(c, figure=replace(c.figure, frames={**c.figure.frames, "points": pts},
                                      params={**c.figure.params, "points": "seed"}))
            if c.figure is not None else c for c in claims]


@section("hierarchical", "Example vs initialisation variance: two-stage bootstrap")
def hierarchical_section(ctx: StudyContext) -> Section | None:
    if ctx.hierarchical is None:
        return None
    return _one(Table(
        "hierarchical", ctx.hierarchical, f"Two-stage bootstrap (seeds, then examples within seeds; "
        f"{ctx.settings.resamples:,} resamples): mean Δ over seeds with a {ctx.conf} percentile interval. Assumes "
        "exchangeable seeds and exchangeable examples within a seed.",
        (*ctx.group_columns, Column("Layer", "layer", "int"), Column("Seeds", "n_seeds", "int"),
         Column("Mean Δ", "mean_delta"), Column(f"{ctx.conf} CI", ("ci_low", "ci_high"), "ci"))))


@section("variance_components", "Example vs initialisation variance: mixed model")
def variance_section(ctx: StudyContext) -> Section | None:
    vc = ctx.variance_components
    if vc is None:
        return None
    bad = vc[~vc["converged"].astype(bool)]
    text = ("The random-intercept model could not be fitted for any layer (too few seeds or no variation between them "
            "for REML); the two-stage bootstrap above does not need it." if vc["mean_delta"].isna().all() else
            f"The fit did not converge in layers {', '.join(map(str, bad['layer']))}: no estimates are shown or quoted "
            "there." if len(bad) else "")
    return _one(Table(
        "variance_components", vc, f"Random-intercept model diff ~ 1 + (1 | seed) per layer (REML; closed form when "
        f"every seed holds the same examples): mean Δ with a per-layer {ctx.conf} interval from t with k − 1 degrees "
        "of freedom (k seeds), and the split of variance between seeds (initialisation) and examples.",
        (*ctx.group_columns, Column("Layer", "layer", "int"), Column("Mean Δ", "mean_delta"),
         Column("SE", "se", "num", 4), Column("df", "df", "int"), Column(f"{ctx.conf} CI (t)", ("ci_low", "ci_high"), "ci"),
         Column("Var seeds", "var_between_seeds", "num", 5), Column("Var examples", "var_within_seed", "num", 5),
         Column("ICC", "icc", "num", 2), Column("Converged", "converged", "text"))), text=text,
        claims=convergence_claims(vc))


def example_contents(ctx: StudyContext) -> dict:
    """baseline run id -> {example id: content hash} of the standard pair's baseline runs (the hashes that
    say whether two seeds were evaluated on the same texts, not only on the same ids)."""
    ref = ctx.ex[reference_rows(ctx.ex)]
    out = {}
    for run_id in sorted(set(ref["baseline_run"])):
        e = ctx.runs.get(run_id).examples(["example_id", "content_sha256"])
        out[run_id] = dict(zip(e["example_id"].tolist(), e["content_sha256"].tolist()))
    return out


def nested_claim(n_ids: int, differ: int) -> Claim:
    """Seeds that share their ``n_ids`` example ids but not the contents of ``differ`` of them."""
    return Claim("examples_nested", f"The seeds share their {n_ids} example ids but not their contents ({differ} "
                 "differ between seeds: other texts, lengths or fields), so each seed's examples are its own and seeds "
                 "and examples are not crossed; the two-stage bootstrap and the mixed model treat them so.", "finding",
                 requires=(Check("some example's content differs between seeds", "differ >= 1", on="design"),),
                 design={"differ": differ})


@section("example_sets", "Example sets across seeds")
def example_sets_section(ctx: StudyContext) -> Section | None:
    if ctx.n_ref_seeds < 2:
        return None
    contents = example_contents(ctx)
    same_ids = len({tuple(sorted(c)) for c in contents.values()}) == 1
    crossed = same_ids and len({tuple(sorted(c.items())) for c in contents.values()}) == 1
    if same_ids and not crossed:
        differ = sum(len({c[i] for c in contents.values()}) > 1 for i in next(iter(contents.values())))
        return Section(claims=(nested_claim(len(next(iter(contents.values()))), differ),),
                       text="The example ids coincide across seeds, the contents (content hashes) do not.")
    t = _nonempty(shared_examples(ctx.ex)) if crossed else None
    if t is None:
        return None
    return _one(Table(
        "shared_examples", t, "Every seed of the standard pair was evaluated on the same examples (the same ids and "
        "content hashes): seeds and examples are crossed. Mean r: the mean Pearson correlation of the per-example Δ "
        "between pairs of seeds (0 when an example's Δ carries no information across seeds).",
        (*ctx.group_columns, Column("Layer", "layer", "int"), Column("Examples", "n_examples", "int"),
         Column("Seeds", "n_seeds", "int"), Column("Mean r", "mean_r", "num", 2))), claims=shared_example_claims(t))


@section("sweep", "Bias strength")
def sweep_section(ctx: StudyContext) -> Section | None:
    d = ctx.deltas
    if d.loc[d["variant"] == "saab", "w_f"].nunique() <= 1 or (t := _nonempty(sweep_table(d))) is None:
        return None
    has_null = bool((t["w_f"].astype(float) == 0).any())
    table = Table("sweep", t, "Bias-strength sweep: Δ SFM per layer by w_f." + (
        f" Null check (w_f = 0 rows only): the largest per-example |SFM difference| from the explicit baseline must be "
        f"at most {NULL_TOLERANCE:g}." if has_null else ""),
        (Column("Seed", "seed", "int"), Column("w_f", "w_f", "num", 2), *_delta_columns(t),
         *((Column("Null check", "null_check", "text"),) if has_null else ())))
    sel = d[(d["variant"] == "saab") & (d["bias_layers"] == "all") & (~d["shuffled"].astype(bool))]
    mean = sel.groupby(["layer", "w_f"])["delta"].mean().rename("delta").reset_index()
    return _one(table,
                Figure("study-sweep", "study_sweep", {"points": sel[["layer", "w_f", "delta"]], "mean": mean}),
                claims=null_check_claims(null_check(t)))


@section("placement", "Layer placement")
def placement_section(ctx: StudyContext) -> Section | None:
    t = _nonempty(placement_table(ctx.deltas))
    return None if t is None else _one(Table(
        "placement", t, "Layer placement of the bias (per-layer multipliers): Δ SFM per layer.",
        (Column("Seed", "seed", "int"), Column("Bias layers", "bias_layers", "text"), *_delta_columns(t))))


@section("shuffled", "Shuffled control")
def shuffled_section(ctx: StudyContext) -> Section | None:
    d = ctx.deltas
    if not (d["variant"] == "saab_shuffled").any() or (t := _nonempty(shuffled_table(d))) is None:
        return None
    bands = []
    for label, sel in (("SAAB", ctx.ref), ("shuffled", d["variant"] == "saab_shuffled")):
        m = d[sel].groupby("layer")["delta"].agg(["mean", "min", "max"]).reset_index()
        m.insert(0, "condition", label)
        bands.append(m)
    return _one(Table(
        "shuffled", t, "Shuffled control: Euclidean distances between layer-SFM profiles.",
        (Column("Seed", "seed", "int"), Column("SAAB–baseline", "distance_saab_baseline"),
         Column("Shuffled–baseline", "distance_shuffled_baseline"), Column("SAAB–shuffled", "distance_saab_shuffled"))),
        Figure("study-shuffled", "study_shuffled", {"bands": pd.concat(bands, ignore_index=True)}))


@section("depth", "Depth")
def depth_section(ctx: StudyContext) -> Section | None:
    if ctx.deltas["depth"].nunique() <= 1 or (t := _nonempty(depth_table(ctx.deltas))) is None:
        return None
    return _one(Table(
        "depth", t, "Depth: last-layer SFM and the profile distance (standard SAAB vs baseline).",
        (Column("Depth", "depth", "int"), Column("Seed", "seed", "int"), Column("Last layer", "last_layer", "int"),
         Column("Base", "baseline_last"), Column("SAAB", "variant_last"), Column("Δ", "delta_last"),
         Column("Profile distance", "profile_distance"))))


@section("datasets", "Data sets")
def datasets_section(ctx: StudyContext) -> Section | None:
    if ctx.deltas["dataset"].nunique() <= 1 or (t := _nonempty(dataset_table(ctx.deltas))) is None:
        return None
    return _one(Table(
        "datasets", t, "Data sets: mean over seeds of each layer's SFM (standard SAAB vs baseline).",
        (Column("Data set", "dataset", "text"), Column("Layer", "layer", "int"), Column("Base", "baseline_sfm"),
         Column("SAAB", "variant_sfm"), Column("Δ", "delta"), Column("Seeds", "n_seeds", "int"))))


@section("corpus_lengths", "Data-set lengths")
def corpus_lengths_section(ctx: StudyContext) -> Section | None:
    t = corpus_lengths(ctx.lengths)
    return None if t is None else _one(Table(
        "corpus_lengths", t, "Data-set token lengths per split (as in the SAAB paper's Table 11): mean, population SD, "
        "linear-interpolation quantiles, and saturation at the cap.",
        (Column("Data set", "dataset", "text"), Column("Split", "split", "text"), Column("n", "n", "int"),
         Column("Mean", "mean", "num", 1), Column("SD", "sd_population", "num", 1), Column("Median", "median", "num", 1),
         Column("IQR", "iqr", "num", 1), Column("P90", "p90", "num", 1), Column("P95", "p95", "num", 1),
         Column("Cap", "cap", "int"), Column("Saturated", "saturation_count", "int"),
         Column("Rate", "saturation_rate", "num", 3))))


@section("standardisation", "Length-standardised data-set contrast")
def standardisation_section(ctx: StudyContext) -> Section | None:
    ctx.say("length standardisation")
    exact = standardisation(ctx)[0]
    if exact is None:
        return None
    a, b = [c.replace("standardised_delta_", "") for c in exact.columns if c.startswith("standardised_delta_")]
    return _one(Table(
        "standardisation", exact, f"Exact-length standardisation (as in the SAAB paper's Table 12B): per-layer Δ standardised over the "
        f"shared exact lengths (weights min of the two counts), contrast {b} − {a} with a stratified bootstrap "
        f"{ctx.conf} CI ({ctx.settings.resamples:,} resamples, weights fixed).",
        (Column("Seed", "seed", "int"), Column("Layer", "layer", "int"), Column(f"Std. Δ {a}", f"standardised_delta_{a}"),
         Column(f"Std. Δ {b}", f"standardised_delta_{b}"), Column("Contrast", "contrast"),
         Column(f"{ctx.conf} CI", ("ci_low", "ci_high"), "ci"), Column("Strata", "shared_strata", "int"),
         Column("Mass W", "overlap_target_mass", "int"))))


@section("standardisation_sensitivity", "Band-width sensitivity")
def sensitivity_section(ctx: StudyContext) -> Section | None:
    t = standardisation(ctx)[1]
    return None if t is None else _one(Table(
        "standardisation_sensitivity", t, "Band-width sensitivity of the standardised contrast (point estimates).",
        (Column("Band", "band_width", "int"), Column("Layer", "layer", "int"), Column("Strata", "shared_strata", "int"),
         Column("Contrast", "contrast"))))


@section("init_probe", "Initialisation probes")
def init_probe_section(ctx: StudyContext) -> Section | None:
    if ctx.init_probe is None or ctx.seeds is None:
        return None
    from routestats.studies.initprobe import load_probe, probe_correlations

    # outcomes of the largest data-set/depth group (the init probe is one data set, one depth)
    key = ctx.seeds.groupby(["dataset", "depth"], dropna=False).size().idxmax()
    main = ctx.seeds[(ctx.seeds["dataset"] == key[0]) & (ctx.seeds["depth"] == key[1])]
    t = _nonempty(probe_correlations(load_probe(ctx.init_probe), main[["seed", "displacement"]]))
    return None if t is None else _one(Table(
        "init_probe", t, "Initialisation probes: Spearman ρ of initial-state quantities with the per-seed displacement "
        "score (Δ last − Δ penultimate layer).",
        (Column("Analysis", "analysis", "text"), Column("Metric", "metric", "text"), Column("ρ", "spearman_rho"),
         Column("Seeds", "n_seeds", "int"))))


@section("decomposition", "Learned vs mechanical: the bias on and off on the same weights")
def decomposition_section(ctx: StudyContext) -> Section | None:
    from routestats.studies.decomposition import decomposition, decomposition_table

    t = _nonempty(decomposition(ctx.runs, ctx.settings))
    if t is None:
        return None
    left = t.attrs.get("left_out", [])
    return _one(decomposition_table(t, ctx.conf),
                text=("Left out: " + "; ".join(left) + ".") if left else "",
                claims=(direct_learned_claim(t, ctx.bias_off_runs - len(left)),))


@section("gradients", "Gradient-norm ratios")
def gradients_section(ctx: StudyContext) -> Section | None:
    rows, seen = [], set()
    for p in ctx.runs.pairs():
        for run in (p.baseline, p.variant):
            if run.has(S.GRADIENTS) and run.run_id not in seen:
                seen.add(run.run_id)
                try:
                    g = _nonempty(gradient_checkpoint_summary(run))
                except RoutestatsError:
                    g = None
                if g is not None:
                    g.insert(1, "seed", run.seed)
                    g.insert(2, "condition", run.manifest.get("condition", run.factors.get("variant")))
                    rows.append(g)
    if not rows:
        return None
    return _one(Table(
        "gradients", pd.concat(rows, ignore_index=True), "Gradient-norm ratio last/penultimate layer: mean of per-step "
        "ratios over the last steps ending at each checkpoint, per run.",
        (Column("Seed", "seed", "int"), Column("Run", "run_id", "text"), Column("Step", "checkpoint_step", "int"),
         Column("Mean ratio", "mean_ratio"), Column("SD", "sd_ratio"))))


@section("trajectories", "Trajectories")
def trajectories_section(ctx: StudyContext) -> Section | None:
    ctx.say("trajectories")
    rows = []
    for p in ctx.runs.pairs():
        if len(set(p.baseline.attention_steps) & set(p.variant.attention_steps)) > 1:
            w = trajectory(p, "sfm").pivot_table(index=["step", "layer"], columns="role", values="value").reset_index()
            w["delta"] = w["variant"] - w["baseline"]
            w.insert(0, "variant_run", p.variant.run_id)
            w.insert(1, "seed", p.variant.seed)
            rows.append(w.rename(columns={"baseline": "baseline_sfm", "variant": "variant_sfm"}))
    if not rows:
        return None
    tr = pd.concat(rows, ignore_index=True)
    ref = tr[tr["variant_run"].isin(set(ctx.deltas.loc[ctx.ref, "variant_run"]))]
    figs = ()
    if len(ref):
        mean = ref.groupby(["layer", "step"])["delta"].mean().rename("delta").reset_index()
        figs = (Figure("study-trajectories", "study_trajectories", {"lines": ref[["layer", "seed", "step", "delta"]],
                                                                     "mean": mean}),)
    return Section(tables=(Table("trajectories", tr),), figures=figs,
                   text="Δ SFM per layer at every checkpoint step shared by a pair.")


@section("deltas", "Paired deltas")
def deltas_section(ctx: StudyContext) -> Section:
    keys = ["baseline_run", "variant_run", "seed", "variant", "w_f", "bias_layers", "shuffled", "depth", "dataset",
            "step", "layer"]
    out = ctx.deltas[keys + ["baseline_sfm", "variant_sfm", "delta", "n_examples", "max_abs_diff"]]
    out.insert(0, "study", ", ".join(ctx.runs.studies))  # one study per report (studies.discover.load)
    return Section(tables=(Table("deltas", out),))


STUDY_SECTIONS = (seeds_section, evidence_section, across_seeds_section, hierarchical_section, variance_section,
                  example_sets_section,
                  sweep_section, placement_section, shuffled_section, depth_section, datasets_section,
                  corpus_lengths_section, standardisation_section, sensitivity_section, init_probe_section,
                  decomposition_section, gradients_section, trajectories_section, deltas_section)
