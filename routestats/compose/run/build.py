"""A descriptive report of one run (no pair, so no paired statistics): layer profile, where the
attention goes, head-level SFM, field-to-field mass and a word map when matrices are stored.

Examples
--------
>>> import tempfile
>>> from routestats.rundir.read import load_run
>>> from routestats.rundir.synthetic import synthetic_pair
>>> b, _ = synthetic_pair(tempfile.mkdtemp(), seed=0, n_examples=4)
>>> rep = build_run_report(load_run(b))
>>> list(rep.tables())[:3]
['layers', 'highest_layer', 'masses']
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

import pandas as pd

from routestats.compose.claims import SFM_TERMS, profile_claims
from routestats.compose.skeleton import build_report, generated_now
from routestats.metrics.passes import trivial_default
from routestats.metrics.routing import field_to_field, head_sfm, layer_summary, mass_split, sfm
from routestats.claim import Check, Claim
from routestats.report import Column, Figure, Report, Section, Table, fmt_num, pct, section
from routestats.rundir.read import Run
from routestats.settings import AnalysisSettings
from routestats.studies.effects import highest_layers

__all__ = ["build_run_report", "RunContext", "RUN_SECTIONS", "CLAIM_ORDER"]

CLAIM_ORDER = ("profile", "scope", "unnamed_mass")


@dataclass(frozen=True)
class RunContext:
    """What every section of a one-run report reads: the run, the settings and the step."""

    run: Run
    settings: AnalysisSettings
    step: int

    def with_role(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` without its run_id, with a leading ``role`` column ("run")."""
        frame = frame.drop(columns=["run_id"])
        frame.insert(0, "role", "run")
        return frame

    @functools.cached_property
    def layers(self) -> pd.DataFrame:
        s = self.settings
        return layer_summary(self.run, self.step, s.examples, s.trivial_queries).drop(columns=["run_id"])

    @functools.cached_property
    def masses(self) -> pd.DataFrame:
        s = self.settings
        return self.with_role(mass_split(self.run, self.step, s.examples, s.trivial_queries))

    @property
    def n_examples(self) -> int:
        return int(self.layers["n_examples"].max())

    @property
    def when(self) -> str:
        return "pretrained, evaluated as it is" if self.run.pretrained else f"step {self.step}"


def profile_claim(subject: str, layers: pd.DataFrame) -> Claim:
    """The run's SFM range across its layers (the ``layers`` table), said when every layer's SFM is defined."""
    return Claim("profile", f"{subject}: SFM {fmt_num(layers['sfm'].min())}–{fmt_num(layers['sfm'].max())} across "
                 f"{len(layers)} layers.", "headline", "layers", tuple(int(x) for x in layers["layer"]), evidence=layers,
                 requires=(Check("every layer's SFM is defined", "sfm == sfm"),))


def unnamed_mass_claim(masses: pd.DataFrame) -> Claim:
    """How much of a layer's attention lies outside the named fields (the ``masses`` table), said when it is
    above 1% in some layer: built at any size, even with no rows, and its check decides whether it prints."""
    u = masses["unnamed_mass"].max() if len(masses) else float("nan")
    return Claim("unnamed_mass", f"Up to {100 * u:.0f}% of a layer's attention lies outside the named fields.",
                 "headline", "masses", requires=(Check("unnamed mass above 1% in some layer", "unnamed_mass > 0.01",
                                                       every="any"),), evidence=masses)


@section("profile", "Layer profile")
def profile_section(ctx: RunContext) -> Section:
    layers, s = ctx.layers, ctx.settings
    per = sfm(ctx.run, ctx.step, s.examples, s.trivial_queries)[["example_id", "layer", "sfm"]]
    top = highest_layers(layers.assign(role="run"), per.rename(columns={"sfm": "run"}), s.resampling)
    claim = profile_claim(f"{ctx.run.run_id} ({ctx.when}, {ctx.n_examples} examples)", layers)
    conf = pct(s.confidence)
    return Section(tables=(Table(
        "layers", layers, f"Same-field attention mass (SFM) and entropy (nats) per layer ({ctx.when}), mean over "
                          f"{ctx.n_examples} examples; the highest SFM in bold.",
        (Column("Layer", "layer", "int"), Column("SFM", "sfm"), Column("Entropy", "entropy"),
         Column("Examples", "n_examples", "int")), bold_max=("sfm",)), Table(
        "highest_layer", top, f"Is the highest-SFM layer above every other layer? The mean per-example difference "
                              f"from the runner-up with a paired {conf} percentile bootstrap CI, and the largest "
                              "two-sided sign-flip p of its differences from each other layer, Bonferroni over them.",
        (Column("Top layer", "layer", "int"), Column("SFM", "sfm"), Column("Runner-up", "runner_up", "int"),
         Column("Runner-up SFM", "runner_up_sfm"), Column("Difference", "difference"),
         Column(f"{conf} CI", ("ci_low", "ci_high"), "ci"), Column("p (Bonferroni)", "p_adj", "p"),
         Column("n", "n", "int")))),
        figures=(Figure("profile", "run_profile", {"layers": layers}),),
        claims=(claim, *profile_claims(top, s.alpha, conf)))


@section("masses", "Where the attention goes")
def masses_section(ctx: RunContext) -> Section:
    masses = ctx.masses
    claims = (unnamed_mass_claim(masses),)
    return Section(tables=(Table(
        "masses", masses, "Per layer: same-field (S), other named fields (C) and keys outside the named fields (U), "
                          "the first key's mass and SFM over the named keys.",
        (Column("Layer", "layer", "int"), Column("S", "sfm"), Column("C", "cross_mass"), Column("U", "unnamed_mass"),
         Column("First key", "first_mass"), Column("SFM named", "sfm_named"))),),
        figures=(Figure("masses", "mass_split", {"masses": masses}, {"labels": {"run": ctx.run.run_id}}),), claims=claims)


@section("heads", "Head-level SFM")
def heads_section(ctx: RunContext) -> Section:
    s = ctx.settings
    heads = ctx.with_role(head_sfm(ctx.run, ctx.step, s.examples, s.trivial_queries))
    return Section(tables=(Table("head_sfm", heads),),
                   figures=(Figure("head_sfm", "head_heatmaps", {"head_sfm": heads}),),
                   text="SFM of each head averaged over examples.")


@section("fields", "Field-to-field attention")
def fields_section(ctx: RunContext) -> Section:
    s = ctx.settings
    f2f = ctx.with_role(field_to_field(ctx.run, ctx.step, s.missing_fields, s.examples, s.trivial_queries))
    return Section(tables=(Table("field_to_field", f2f),),
                   figures=(Figure("field_to_field", "field_heatmaps", {"field_to_field": f2f}),),
                   text="Mean attention mass from queries of the source field to keys of the destination field.")


@section("pairs", "Paired statistics")
def pairs_section(ctx: RunContext) -> Section:
    return Section(skipped=f"{ctx.run.run_id} is a single run: paired effects need its "
                   "baseline or variant (point at the folder holding both, or capture/train the other condition).")


RUN_SECTIONS = (profile_section, masses_section, heads_section, fields_section, pairs_section)


def build_run_report(run: Run, settings: AnalysisSettings | None = None, progress=None) -> Report:
    """Describe one run at ``settings.step`` (default: its final step)."""
    s = settings or AnalysisSettings()
    (progress or (lambda label: None))("layer profile")
    ctx = RunContext(run, s, run.final_step if s.step is None else s.step)
    causal = " The model attends causally; trivial queries are " + trivial_default(run, s.trivial_queries) + "d." \
        if run.causal else ""
    scope = Claim("scope", "A single run shows where attention goes, not what a change did: no paired statistics.",
                  "headline", because=("one run, no pair: true of every report of this kind, so not a check",))
    return build_report(
        ctx, RUN_SECTIONS, title=f"{run.run_id} (single run)",
        subtitle=f"{run.run_id} · {ctx.when} · {ctx.n_examples} examples · {len(ctx.layers)} layers",
        methods=("Same-field attention mass (SFM) is the attention a valid query places on valid keys of its own field, "
                 "averaged over valid queries, then heads, then examples; entropy is −Σ p ln(p + 1e-10)." + causal),
        provenance={"run": {"run_id": run.run_id, "path": str(run.path), "files": run.verified_files()},
                    "analysis": {"generated": generated_now(), "step": ctx.step, "settings": asdict(s)}},
        facts={"run_id": run.run_id, "step": ctx.step, "n_examples": ctx.n_examples}, scope=(scope,),
        claim_order=CLAIM_ORDER, glossary=SFM_TERMS)
