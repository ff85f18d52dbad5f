"""Render finished report data (``routestats.pair_report.PairReport``) to HTML, LaTeX and figures.

:func:`build_context` turns report objects into the plain dict the HTML template sees (tests
check its numbers before anything is rendered); :func:`render` writes

* ``OUT/report.html`` — one self-contained file: figures embedded, sortable tables, provenance;
* ``OUT/tables/*.tex`` (booktabs fragments), ``OUT/tables/tables.tex`` (a standalone document
  that inputs them all) and ``OUT/tables/*.csv``;
* ``OUT/figures/*.png`` and ``*.pdf``.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

from jinja2 import Environment, FileSystemLoader, select_autoescape

from routestats.rundir.atomic import write_text_atomic

from . import figures as F
from .formatting import embedded, fmt_ci, fmt_num, fmt_p, format_cells, report_specs, table_context
from .latex import latex_table

TEMPLATES = Path(__file__).resolve().parent / "templates"
FORMATS = ("html", "latex")


def html_env() -> Environment:
    return Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html", "j2"]),
                       trim_blocks=False, lstrip_blocks=False)


def latex_env() -> Environment:
    # values are escaped in Python (reports.latex.latex_escape) before they reach the template
    return Environment(loader=FileSystemLoader(TEMPLATES), autoescape=False, keep_trailing_newline=True)


def slug(text: str) -> str:
    """File- and anchor-safe name.

    >>> slug("saab vs a_b & \\\\input{x}")
    'saab-vs-a_b-input-x'
    """
    return re.sub(r"-+", "-", re.sub(r"[^A-Za-z0-9_.]+", "-", text)).strip("-.") or "report"


def _labels(rep) -> dict:
    return {"baseline": f"baseline ({rep.baseline_id})", "variant": f"variant ({rep.variant_id})",
            "difference": "variant − baseline"}


def findings(rep) -> list[str]:
    """Plain-language lines summarising the finished tables (formatting only, no statistics)."""
    out = []
    conf = f"{100 * rep.settings.confidence:.0f}%"
    for r in rep.effects.sort_values("layer").itertuples():
        sign = "+" if r.mean_diff >= 0 else "−"
        out.append(
            f"Layer {r.layer}: SFM {fmt_num(r.baseline_mean)} → {fmt_num(r.variant_mean)}, "
            f"Δ = {sign}{fmt_num(abs(r.mean_diff))}, {conf} CI {fmt_ci(r.ci_low, r.ci_high)}, "
            f"d_z = {fmt_num(r.dz, 2)}, p_Holm {'' if fmt_p(r.p_holm).startswith('<') else '= '}{fmt_p(r.p_holm)}"
        )
    lay = rep.layers
    for role in ("baseline", "variant"):
        t = lay[(lay["role"] == role) & lay["is_max_sfm"]]
        if len(t):
            out.append(f"Highest SFM in the {role}: layer {int(t['layer'].iloc[0])} ({fmt_num(t['sfm'].iloc[0])}).")
    out.append(f"Profile distance between the two layer profiles: {fmt_num(rep.profile_distance, 4)}.")
    ex = int(rep.adjusted["excluded"].iloc[0])
    out.append(f"Opportunity-adjusted analysis: {int(rep.adjusted['n'].iloc[0])} examples, {ex} excluded "
               f"(one visible field), mean O_e {fmt_num(rep.adjusted['mean_opportunity'].iloc[0])}.")
    return out


def methods_text(rep) -> str:
    """A methods paragraph generated from the report's actual settings."""
    s = rep.settings
    names = ", ".join(rep.field_names.values())
    mode = {"shared": "one generator whose bootstrap indices and sign patterns are shared across layers",
            "numpy": "the reference implementation's per-layer NumPy procedure",
            "python-random": "the reference implementation's per-layer Python random procedure"}[s.mode]
    return (
        f"Attention was recorded at training step {rep.step} for {rep.n_examples} evaluation examples "
        f"(selection: {s.examples}) in both models ({rep.n_layers} layers, {rep.n_heads} heads each). "
        f"Same-field attention mass (SFM) is the attention a valid query places on valid keys of its own field "
        f"(named fields: {names}), averaged over valid queries, then heads, then examples, without renormalisation; "
        f"entropy is −Σ p ln(p + 1e-10) over all keys, averaged the same way. Paired differences (variant − baseline, "
        f"per example) are summarised by their mean with a {100 * s.confidence:.0f}% percentile bootstrap "
        f"confidence interval ({s.resamples:,} resamples) and tested with a two-sided sign-flip permutation test on "
        f"the absolute mean ({s.permutations:,} random sign patterns, p = (count + 1)/(P + 1)); p-values are "
        f"Holm-adjusted across the {rep.n_layers} layers, and d_z = mean/SD (ddof 1). Random procedures use seed "
        f"{s.seed} ({mode}). Opportunity-adjusted SFM is (SFM − O_e)/(1 − O_e) with O_e = Σ_f n_f²/N², "
        f"excluding examples with a single visible field. Field-to-field means count examples lacking the source "
        f"field as {'zero' if s.missing_fields == 'zero' else 'missing'}. Gradient ratios are means of per-step "
        f"ratios over up to {s.gradient_window} steps ending at each checkpoint."
    )


def _provenance_rows(rep) -> list[tuple[str, str]]:
    pv = rep.provenance
    rows = []
    for role in ("baseline", "variant"):
        r = pv["runs"][role]
        rows += [
            (f"{role} run", r["run_id"]),
            (f"{role} path", r["path"]),
            (f"{role} seed / factors", f"{r['seed']} / {json.dumps(r['factors'], sort_keys=True)}"),
            (f"{role} init_id", r["init_id"]),
            (f"{role} data_order_id", r["data_order_id"]),
            (f"{role} created / git", f"{r['created']} / {r['git_commit']}"),
        ]
        for path, digest in sorted(r["files"].items()):
            rows.append((f"{role} {path}", digest))
    a = pv["analysis"]
    rows.append(("analysis settings", json.dumps(a["settings"], sort_keys=True)))
    rows.append(("analysis software", json.dumps(a["software"], sort_keys=True)))
    return rows


def build_context(reports: Sequence, figures: dict | None = None, title: str | None = None) -> dict:
    """The dict rendered by ``report.html.j2``. ``figures`` maps (pair slug, name) -> PNG bytes."""
    from routestats import __version__

    from routestats.studies.mofa_report import MoFAReport
    from routestats.regime.report import RegimeReport
    from routestats.studies.study_report import StudyReport

    from .mofa import mofa_section
    from .regime import regime_section
    from .study import study_section

    figures = figures or {}
    pairs = []
    for rep in reports:
        s = slug(rep.title)
        if isinstance(rep, StudyReport):
            pairs.append(study_section(rep, s, figures))
            continue
        if isinstance(rep, MoFAReport):
            pairs.append(mofa_section(rep, s, figures))
            continue
        if isinstance(rep, RegimeReport):
            pairs.append(regime_section(rep, s, figures))
            continue
        specs = report_specs(rep)

        def table(name):
            return table_context(getattr(rep, name if name != "gradients" else "gradient_checkpoints"), specs[name])

        def fig(name):
            return embedded(figures, s, name)

        blocks = [
            {"id": "performance", "title": "Task performance", "tables": [table("performance")], "figure": fig("training"), "text": ""},
            {"id": "profile", "title": "Layer profile (Table 1)", "tables": [table("layers")], "figure": fig("profile"), "text": ""},
            {"id": "effects", "title": "Paired SFM effects (Table 2)", "tables": [table("effects")], "figure": None, "text": ""},
            {"id": "entropy", "title": "Paired entropy effects", "tables": [table("entropy_effects")], "figure": None, "text": ""},
            {"id": "adjusted", "title": "Opportunity-adjusted SFM (Table 10)", "tables": [table("adjusted")], "figure": None, "text": ""},
            {"id": "fields", "title": "Field-to-field attention", "tables": [], "figure": fig("field_to_field"),
             "text": "Mean attention mass from queries of the source field (rows) to keys of the destination field "
                     "(columns), per layer; the difference panel is variant − baseline."},
            {"id": "heads", "title": "Head-level SFM", "tables": [], "figure": fig("head_sfm"),
             "text": "SFM of each head averaged over examples; a layer's SFM is the mean of its heads."},
        ]
        if rep.trajectory is not None:
            blocks.append({"id": "trajectories", "title": "Trajectories over training", "tables": [],
                           "figure": fig("trajectories"), "text": "Layer SFM at every stored checkpoint step."})
        if rep.gradient_steps is not None:
            blocks.append({"id": "gradients", "title": "Gradient-norm ratio",
                           "tables": [table("gradients")] if rep.gradient_checkpoints is not None else [],
                           "figure": fig("gradients"), "text": ""})
        if rep.lengths is not None:
            blocks.append({"id": "lengths", "title": "Lengths (Tables 11 and 12A)",
                           "tables": [table("lengths"), table("length_association"), table("length_bins")],
                           "figure": fig("lengths"), "text": ""})
        if rep.word_map is not None:
            blocks.append({"id": "words", "title": f"Word-level attention, example {rep.word_map.example_id}",
                           "tables": [], "figure": fig("word_map"),
                           "text": "Head-averaged attention grouped into words (average over query pieces, sum over key "
                                   f"pieces); white/black lines mark field boundaries. Example selection: {rep.word_map.selection_rule}."})
        else:
            blocks.append({"id": "words", "title": "Word-level attention", "tables": [], "figure": None,
                           "text": "No evaluated example meets the selection rule (or no full matrices are stored "
                                   "at this step), so no word-level map is shown."})
        pairs.append({
            "slug": s, "label": rep.title, "baseline_id": rep.baseline_id, "variant_id": rep.variant_id,
            "subtitle": f"Baseline {rep.baseline_id} · variant {rep.variant_id} · step {rep.step} · "
                        f"{rep.n_examples} examples · {rep.n_layers} layers × {rep.n_heads} heads",
            "step": rep.step, "n_examples": rep.n_examples, "n_layers": rep.n_layers, "n_heads": rep.n_heads,
            "findings": findings(rep), "blocks": blocks, "methods": methods_text(rep),
            "provenance_rows": _provenance_rows(rep),
            "provenance_json": json.dumps(rep.provenance, indent=2, sort_keys=True, default=str),
        })
    generated = reports[0].provenance["analysis"]["generated"] if reports else ""
    if title is None and reports and isinstance(reports[0], (StudyReport, MoFAReport, RegimeReport)):
        title = "routestats report: " + reports[0].title
    return {"title": title or ("routestats report: " + (reports[0].title if len(reports) == 1 else f"{len(reports)} pairs")),
            "version": __version__, "generated": generated, "pairs": pairs}


def make_figures(rep, folder: Path, prefix: str = "") -> dict:
    """Draw every figure of one pair (in parallel processes where possible); returns name -> PNG bytes."""
    labels = _labels(rep)
    jobs = {}
    if rep.curves is not None:
        jobs["training"] = lambda: F.training_curves({r: g for r, g in rep.curves.groupby("role")}, labels)
    jobs["profile"] = lambda: F.profile(rep.layers, rep.effects, labels)
    jobs["field_to_field"] = lambda: F.field_heatmaps(rep.field_to_field, labels)
    jobs["head_sfm"] = lambda: F.head_heatmaps(rep.head_sfm, labels)
    if rep.trajectory is not None:
        jobs["trajectories"] = lambda: F.trajectories(rep.trajectory, labels)
    if rep.gradient_steps is not None:
        jobs["gradients"] = lambda: F.gradient_ratios(rep.gradient_steps, labels)
    if rep.word_map is not None:
        jobs["word_map"] = lambda: F.word_map(rep.word_map, labels)
    if rep.lengths is not None and rep.length_examples is not None:
        jobs["lengths"] = lambda: F.lengths(rep.length_examples)
    return F.draw_all(jobs, folder, prefix)


def latex_tables(rep, prefix: str = "") -> dict[str, str]:
    """Every table of one pair (or study) as a LaTeX fragment, by file stem."""
    from routestats.studies.study_report import StudyReport

    from .study import study_specs

    from routestats.studies.mofa_report import MoFAReport
    from routestats.regime.report import RegimeReport

    from .mofa import mofa_specs
    from .regime import regime_specs

    env = latex_env()
    if isinstance(rep, RegimeReport):
        tables = rep.tables()
        return {prefix + name: latex_table(tables[name], spec, f"tab:{slug(prefix + name)}", env)
                for name, spec in regime_specs(rep).items()}
    if isinstance(rep, MoFAReport):
        tables = {**rep.tables(), "pca": rep.pca.scores if rep.pca is not None else None}
        return {prefix + name: latex_table(tables[name], spec, f"tab:{slug(prefix + name)}", env)
                for name, spec in mofa_specs(rep).items()}
    if isinstance(rep, StudyReport):
        tables = rep.tables()
        return {prefix + name: latex_table(tables[name], spec, f"tab:{slug(prefix + name)}", env)
                for name, spec in study_specs(rep).items()}
    specs = report_specs(rep)
    out = {}
    for name, spec in specs.items():
        df = rep.gradient_checkpoints if name == "gradients" else getattr(rep, name)
        spec = replace(spec, subject=f"{rep.variant_id} vs {rep.baseline_id}")
        out[prefix + name] = latex_table(df, spec, f"tab:{slug(prefix + name)}", env)
    return out


def render(reports: Sequence, out: str | Path, formats: Sequence[str] = FORMATS,
           progress: Callable[[str], None] | None = None, title: str | None = None) -> dict[str, Path]:
    """Write the report files for one or more pairs; returns name -> path of what was written."""
    out = Path(out)
    say = progress or (lambda label: None)
    bad = set(formats) - set(FORMATS)
    if bad:
        raise ValueError(f"unknown format(s) {sorted(bad)}; choose from {FORMATS}")
    written: dict[str, Path] = {}
    figs = {}
    multi = len(reports) > 1
    tex_files = []
    from routestats.studies.study_report import StudyReport

    from .study import study_figures

    for rep in reports:
        s = slug(rep.title)
        prefix = f"{s}-" if multi else ""
        say(f"figures: {rep.title}")
        from routestats.studies.mofa_report import MoFAReport
        from routestats.regime.report import RegimeReport

        from .mofa import mofa_figures
        from .regime import regime_figures

        draw = (study_figures if isinstance(rep, StudyReport) else
                mofa_figures if isinstance(rep, MoFAReport) else
                regime_figures if isinstance(rep, RegimeReport) else make_figures)
        for name, png in draw(rep, out / "figures", prefix).items():
            figs[(s, name)] = png
        for name, df in rep.tables().items():
            write_text_atomic(out / "tables" / f"{prefix}{name}.csv", df.to_csv(index=False))
        if "latex" in formats:
            say(f"LaTeX tables: {rep.title}")
            for stem, tex in latex_tables(rep, prefix).items():
                write_text_atomic(out / "tables" / f"{stem}.tex", tex)
                tex_files.append(stem)
    if "latex" in formats:
        doc = latex_env().get_template("tables.tex.j2").render(files=tex_files)
        write_text_atomic(out / "tables" / "tables.tex", doc)
        written["tables"] = out / "tables" / "tables.tex"
    if "html" in formats:
        say("HTML")
        html = html_env().get_template("report.html.j2").render(**build_context(reports, figs, title))
        write_text_atomic(out / "report.html", html)
        written["html"] = out / "report.html"
    written["figures"] = out / "figures"
    return written


def table_text(df, spec, fmt: str) -> str:
    """One table as LaTeX (with a spec), CSV or Markdown text."""
    if fmt == "csv":
        return df.to_csv(index=False)
    if fmt == "markdown":
        headers, rows = format_cells(df, spec) if spec is not None else (list(df.columns), None)
        if rows is None:
            rows = [[{"text": str(v)} for v in r] for r in df.itertuples(index=False)]
        esc = lambda t: str(t).replace("|", "\\|")  # noqa: E731
        lines = ["| " + " | ".join(esc(h) for h in headers) + " |", "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(esc(c["text"]) for c in r) + " |" for r in rows]
        return "\n".join(lines) + "\n"
    if fmt == "latex":
        if spec is None:
            raise ValueError("this table has no LaTeX layout; use csv or markdown")
        return latex_table(df, spec, f"tab:{slug(spec.name)}", latex_env())
    raise ValueError(f"unknown table format {fmt!r}: latex, csv or markdown")
