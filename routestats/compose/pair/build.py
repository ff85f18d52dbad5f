"""The one-pair report: every table, figure and sentence for a baseline and its variant.

:func:`build_pair_report` runs the section functions of :mod:`routestats.compose.pair.sections`
over one :class:`~routestats.compose.pair.context.PairContext` (a section that cannot be computed
says why instead of ending the report), then writes the headline, findings and methods from the
finished sections into a frozen :class:`routestats.report.Report`; ``report.tables()`` returns every
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

import datetime as _dt
from dataclasses import asdict, replace
from typing import Callable

from routestats.metrics.passes import _pass
from routestats.metrics.routing import profile_distance
from routestats.report import Report, with_claims
from routestats.rundir.collection import RunPair
from routestats.settings import AnalysisSettings
from routestats.compose.claims import pair_claims
from routestats.studies.lengths import censoring
from routestats.report import guarded
from routestats.compose.pair.context import PairContext, pair_context
from routestats.compose.pair.methods import pair_methods
from routestats.compose.pair.sections import pair_sections
from routestats.studies.word_map import WordMap, select_token_map_example, word_label  # noqa: F401  (public names)

__all__ = ["build_pair_report", "select_token_map_example", "WordMap"]

# frames drawn by a figure that are not tables, kept in Report.data under these names
_DATA = {"training": ("curves", "curves"), "gradients": ("steps", "gradient_steps"),
         "lengths": ("examples", "length_examples")}


def _provenance(p: RunPair, settings: AnalysisSettings, step: int) -> dict:
    from routestats.rundir.write import software_versions

    runs = {}
    for role, run in (("baseline", p.baseline), ("variant", p.variant)):
        m = run.manifest
        files = run.verified_files()  # the files this analysis read, each checked against run.json
        runs[role] = {
            "run_id": run.run_id, "path": str(run.path), "study": run.study, "seed": run.seed,
            "factors": run.factors, "init_id": run.init_id, "data_order_id": run.data_order_id,
            "created": m.get("created"), "git_commit": m.get("git_commit"), "software": m.get("software", {}),
            "dataset": (m.get("dataset") or {}).get("name"), "files": files, "notes": m.get("notes"),
        }
        if run.capture is not None:
            runs[role]["capture"] = run.capture
    return {
        "runs": runs,
        "analysis": {
            "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "step": step,
            "settings": asdict(settings),
            "software": software_versions(("statsmodels", "jinja2", "matplotlib")),
        },
    }


def _facts(ctx: PairContext) -> dict:
    layers = ctx.layers
    heads = _pass(ctx.pair.baseline, ctx.step, trivial=ctx.settings.trivial_queries).heads
    return {"baseline_id": ctx.pair.baseline.run_id, "variant_id": ctx.pair.variant.run_id, "step": ctx.step,
            "n_examples": ctx.n_examples, "n_layers": ctx.n_layers, "n_heads": int(heads["head"].nunique()),
            "profile_distance": profile_distance(
                layers[layers.role == "baseline"].sort_values("layer")["sfm"].to_numpy(),
                layers[layers.role == "variant"].sort_values("layer")["sfm"].to_numpy()),
            "causal": ctx.causal, "pretrained": ctx.pretrained, "trivial": ctx.trivial,
            "field_names": dict(ctx.pair.baseline.named_fields), "capture": ctx.pair.baseline.capture,
            "capture_variant": ctx.pair.variant.capture, "confidence": ctx.settings.confidence,
            "first_key_fields": _first_key_fields(ctx)}


def _first_key_fields(ctx: PairContext) -> dict:
    """Named field -> number of evaluated examples whose first position lies in it (the attention sink's field)."""
    names = ctx.pair.baseline.named_fields
    out: dict = {}
    for g in ctx.pair.baseline.examples(["field_ids"])["field_ids"]:
        if len(g) and int(g[0]) in names:
            out[names[int(g[0])]] = out.get(names[int(g[0])], 0) + 1
    return out


def build_pair_report(p: RunPair, settings: AnalysisSettings | None = None,
                      progress: Callable[[str], None] | None = None, within_study: bool = False,
                      bias_off=None) -> Report:
    """Compute every section of the one-pair report, then its headline, findings and methods.

    ``progress`` (optional) is called with a short label before each stage; ``within_study``
    marks a part of a study report (its headline then points at the across-seed results);
    ``bias_off``, the variant evaluated with its bias removed, adds the learned-vs-mechanical split.
    """
    ctx = pair_context(p, settings, progress, within_study, bias_off)
    sections = tuple(sec for fn in pair_sections() if (sec := guarded(fn, ctx)) is not None)
    facts = _facts(ctx)
    data = {name: f.frames[key] for sec in sections for f in sec.figures if f.name in _DATA
            for key, name in [_DATA[f.name]]}
    when = "pretrained, evaluated as it is" if ctx.pretrained else f"step {ctx.step}"
    draft = Report(title=ctx.subject, subtitle=f"Baseline {p.baseline.run_id} · variant {p.variant.run_id} · {when} · "
                   f"{ctx.n_examples} examples · {facts['n_layers']} layers × {facts['n_heads']} heads",
                   sections=sections, data=data, facts=facts)
    s = ctx.settings
    draft = replace(draft, methods=pair_methods(draft, s), provenance=_provenance(p, s, ctx.step))
    claims = pair_claims(draft, n_examples=ctx.n_examples, alpha=s.alpha, rho=s.length_rho,
                         conf=f"{100 * s.confidence:.0f}%", pretrained=ctx.pretrained, within_study=within_study,
                         permutations=s.permutations, censored=censoring(p, s.length_examples),
                         has_bias_off=bias_off is not None)
    return with_claims(draft, claims)
