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
['layers', 'masses', 'head_sfm']
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import asdict

import numpy as np

from routestats.metrics.routing import field_to_field, head_sfm, layer_summary, mass_split, trivial_default
from routestats.report import Claim, Column, Figure, Report, Section, Table, fmt_num, with_claims
from routestats.rundir.read import Run
from routestats.settings import AnalysisSettings

__all__ = ["build_run_report"]


def build_run_report(run: Run, settings: AnalysisSettings | None = None, progress=None) -> Report:
    """Describe one run at ``settings.step`` (default: its final step)."""
    s = settings or AnalysisSettings()
    say = progress or (lambda label: None)
    step = run.final_step if s.step is None else s.step
    say("layer profile")
    layers = layer_summary(run, step, s.examples, s.trivial_queries).drop(columns=["run_id"])
    masses = mass_split(run, step, s.examples, s.trivial_queries).drop(columns=["run_id"])
    heads = head_sfm(run, step, s.examples, s.trivial_queries).drop(columns=["run_id"])
    f2f = field_to_field(run, step, s.missing_fields, s.examples, s.trivial_queries).drop(columns=["run_id"])
    for t in (masses, heads, f2f):
        t.insert(0, "role", "run")
    n_ex = int(layers["n_examples"].max())
    when = "pretrained, evaluated as it is" if run.pretrained else f"step {step}"
    sections = (
        Section("profile", "Layer profile", (Table(
            "layers", layers, f"Same-field attention mass (SFM) and entropy (nats) per layer ({when}), mean over {n_ex} "
                              "examples; the highest SFM in bold.",
            (Column("Layer", "layer", "int"), Column("SFM", "sfm"), Column("Entropy", "entropy"),
             Column("Examples", "n_examples", "int")), bold_max=("sfm",)),),
            (Figure("profile", "run_profile", {"layers": layers}),)),
        Section("masses", "Where the attention goes", (Table(
            "masses", masses, "Per layer: same-field (S), other named fields (C) and keys outside the named fields (U), "
                              "the first key's mass and SFM over the named keys.",
            (Column("Layer", "layer", "int"), Column("S", "sfm"), Column("C", "cross_mass"), Column("U", "unnamed_mass"),
             Column("First key", "first_mass"), Column("SFM named", "sfm_named"))),),
            (Figure("masses", "mass_split", {"masses": masses}, {"labels": {"run": run.run_id}}),)),
        Section("heads", "Head-level SFM", (Table("head_sfm", heads),),
                (Figure("head_sfm", "head_heatmaps", {"head_sfm": heads}),),
                text="SFM of each head averaged over examples."),
        Section("fields", "Field-to-field attention", (Table("field_to_field", f2f),),
                (Figure("field_to_field", "field_heatmaps", {"field_to_field": f2f}),),
                text="Mean attention mass from queries of the source field to keys of the destination field."),
        Section("pairs", "Paired statistics", skipped=f"{run.run_id} is a single run: paired effects need its baseline "
                "or variant (point at the folder holding both, or capture/train the other condition)."),
    )
    top = layers.loc[layers["sfm"].idxmax()]
    u = float(np.nanmax(masses["unnamed_mass"])) if len(masses) else 0.0
    claims = [Claim("profile", f"{run.run_id} ({when}, {n_ex} examples): SFM {fmt_num(layers['sfm'].min())}–"
                    f"{fmt_num(layers['sfm'].max())} across {len(layers)} layers, highest in layer {int(top['layer'])}.",
                    "headline", "layers", tuple(int(x) for x in layers["layer"])),
              Claim("scope", "A single run shows where attention goes, not what a change did: no paired statistics.",
                    "headline", checks=(("one run, no pair", True),))]
    if u > 0.01:
        claims.append(Claim("unnamed_mass", f"Up to {100 * u:.0f}% of a layer's attention lies outside the named "
                            "fields.", "headline", "masses"))
    causal = " The model attends causally; trivial queries are " + trivial_default(run, s.trivial_queries) + "d." \
        if run.causal else ""
    return with_claims(Report(
        title=f"{run.run_id} (single run)",
        subtitle=f"{run.run_id} · {when} · {n_ex} examples · {len(layers)} layers",
        sections=sections,
        methods=("Same-field attention mass (SFM) is the attention a valid query places on valid keys of its own field, "
                 "averaged over valid queries, then heads, then examples; entropy is −Σ p ln(p + 1e-10)." + causal),
        provenance={"run": {"run_id": run.run_id, "path": str(run.path), "files": run.verified_files()},
                    "analysis": {"generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                                 "step": step, "settings": asdict(s)}},
        facts={"run_id": run.run_id, "step": step, "n_examples": n_ex},
    ), claims)
