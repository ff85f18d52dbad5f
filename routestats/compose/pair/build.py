"""The one-pair report: every table, figure and sentence for a baseline and its variant.

:func:`build_pair_report` runs the section functions of :mod:`routestats.compose.pair.sections`
over one :class:`~routestats.compose.pair.context.PairContext` through the one build skeleton
(:func:`routestats.compose.skeleton.build_report`): each section returns its tables, figures and the
claims resting on them; the headline and findings are those claims in rank order (:data:`CLAIM_ORDER`); ``report.tables()`` returns every
table as a DataFrame (the same frames the HTML and LaTeX outputs are rendered from).

Examples
--------
>>> import tempfile
>>> from routestats.rundir.read import load_run
>>> from routestats.rundir.collection import pair
>>> from routestats.rundir.synthetic import synthetic_pair
>>> b, v = synthetic_pair(tempfile.mkdtemp(), seed=0, n_examples=8)
>>> rep = build_pair_report(pair(load_run(b), load_run(v)), AnalysisSettings(resamples=200, permutations=200))
>>> sorted(rep.tables())[:4]
['adjusted', 'effects', 'entropy_effects', 'field_to_field']
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Callable

from routestats.compose.claims import SFM_TERMS, design_claims
from routestats.compose.pair.claims import CLAIM_ORDER, scope_claim
from routestats.compose.pair.context import PairContext, pair_context
from routestats.compose.pair.methods import pair_methods
from routestats.compose.pair.sections import pair_sections
from routestats.compose.skeleton import build_report, generated_now
from routestats.report import Report
from routestats.rundir.collection import RunPair
from routestats.settings import AnalysisSettings
from routestats.studies.word_map import WordMap, select_token_map_example  # noqa: F401  (public names)

__all__ = ["build_pair_report", "select_token_map_example", "WordMap"]

# frames drawn by a figure that are not tables, kept in Report.data under these names
FIGURE_DATA = {"training": ("curves", "curves"), "gradients": ("steps", "gradient_steps"),
               "lengths": ("examples", "length_examples")}


def provenance(p: RunPair, settings: AnalysisSettings, step: int) -> dict:
    """What the pair report read and how: each run's identity and verified files, the settings."""
    from routestats.rundir.write import software_versions

    runs = {}
    for role, run in (("baseline", p.baseline), ("variant", p.variant)):
        m = run.manifest
        files = run.verified_files()  # the files this analysis read, each checked against run.json
        partly = run.partly_verified()  # read in part: only the pieces read were checked
        runs[role] = {
            "run_id": run.run_id, "path": str(run.path), "study": run.study, "seed": run.seed,
            "factors": run.factors, "init_id": run.init_id, "data_order_id": run.data_order_id,
            "created": m.get("created"), "git_commit": m.get("git_commit"), "software": m.get("software", {}),
            "dataset": (m.get("dataset") or {}).get("name"), "files": files, "notes": m.get("notes"),
        }
        if partly:
            runs[role]["files_read_in_part"] = partly
        if run.capture is not None:
            runs[role]["capture"] = run.capture
    return {
        "runs": runs,
        "analysis": {
            "generated": generated_now(),
            "step": step,
            "settings": asdict(settings),
            "software": software_versions(("statsmodels", "jinja2", "matplotlib")),
        },
    }


def facts(ctx: PairContext) -> dict:
    """The descriptive scalars of a pair report (``Report.facts``), from the context's typed fields."""
    return {"baseline_id": ctx.pair.baseline.run_id, "variant_id": ctx.pair.variant.run_id, "step": ctx.step,
            "n_examples": ctx.n_examples, "n_layers": ctx.n_layers, "n_heads": ctx.n_heads,
            "profile_distance": ctx.profile_distance, "causal": ctx.causal, "pretrained": ctx.pretrained,
            "trivial": ctx.trivial, "field_names": dict(ctx.pair.baseline.named_fields),
            "capture": ctx.pair.baseline.capture, "capture_variant": ctx.pair.variant.capture,
            "confidence": ctx.settings.confidence, "first_key_fields": ctx.first_key_fields}


def layers_phrase(ctx) -> str:
    """"12 layers", or for a capture that stored some: "layers 3, 7 of 12"."""
    cap = ctx.pair.baseline.capture or {}
    if cap.get("layers_stored") and not cap.get("layers_renumbered"):
        of = f" of {cap['model_layers']}" if cap.get("model_layers") else ""
        return f"layer{'s' if len(cap['layers_stored']) > 1 else ''} {', '.join(map(str, cap['layers_stored']))}{of}"
    return f"{ctx.n_layers} layer{'s' if ctx.n_layers != 1 else ''}"


def build_pair_report(p: RunPair, settings: AnalysisSettings | None = None,
                      progress: Callable[[str], None] | None = None, within_study: bool = False,
                      bias_off=None) -> Report:
    """Compute every section of the one-pair report, with its claims, then its methods.

    ``progress`` (optional) is called with a short label before each stage; ``within_study``
    marks a part of a study report (its headline then points at the across-seed results);
    ``bias_off``, the variant evaluated with its bias removed, adds the learned-vs-mechanical split.
    """
    ctx = pair_context(p, settings, progress, within_study, bias_off)
    s = ctx.settings
    when = "pretrained, evaluated as it is" if ctx.pretrained else f"step {ctx.step}"
    rep = build_report(
        ctx, pair_sections(), title=ctx.subject,
        subtitle=f"Baseline {p.baseline.run_id} · variant {p.variant.run_id} · {when} · {ctx.n_examples} examples · "
                 f"{layers_phrase(ctx)} × {ctx.n_heads} heads",
        methods=lambda draft: pair_methods(draft, s, ctx), facts=facts(ctx),
        scope=(scope_claim(ctx.pretrained, within_study, ctx.n_examples),
               *design_claims([p.baseline.manifest, p.variant.manifest])), claim_order=CLAIM_ORDER, glossary=SFM_TERMS)
    data = {name: f.frames[key] for sec in rep.sections for f in sec.figures if f.name in FIGURE_DATA
            for key, name in [FIGURE_DATA[f.name]]}
    # after the sections: the provenance lists what they read (the word map reads the matrices file last)
    return replace(rep, data=data, provenance=provenance(p, s, ctx.step))
