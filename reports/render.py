"""Render any :class:`routestats.report.Report` to HTML, LaTeX, CSV and Markdown.

The renderer knows nothing about which analysis produced a report: it walks the report's
sections (and its parts), formats each shown table, draws each figure with the drawer
of its kind (:data:`reports.drawing.REGISTRY`) and writes

* ``OUT/report.html`` — one self-contained file: figures embedded, sortable tables, provenance;
* ``OUT/tables/*.tex`` (booktabs fragments), ``OUT/tables/tables.tex`` (a standalone document
  that inputs them all) and ``OUT/tables/*.csv`` (every table, shown or not);
* ``OUT/claims.csv`` — every sentence the report considered (printed or not), with the table and
  rows it rests on and its preconditions (:func:`claims_table`);
* ``OUT/figures/*.svg`` of the pair, run, study and MoFA reports' figures (embedded in the page as they are) and
  ``*.png`` of the regime and plan reports' figures, with ``*.png`` / ``*.pdf`` / ``*.svg`` copies of every figure when ``figures`` asks;
* ``OUT/report.md`` with the ``markdown`` format.

The folder is written atomically: everything goes into a hidden sibling
(``.OUT.partial-PID-*``) that is renamed into place at the end, so a killed or failing report
leaves the previous folder intact and no partial one (stale partial folders of dead processes
are removed by the next report). An existing folder is replaced only with ``force=True``, and
only when it is empty or an earlier routestats report (it holds the marker file
``.routestats-report``).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Callable, Sequence

from jinja2 import Environment, FileSystemLoader, select_autoescape

from reports.drawing import draw_all
from reports.explorer import WIDGETS
from reports.formatting import embedded, format_cells, page_cells, table_context
from reports.folder import put_file, write_folder
from reports.latex import latex_table
import pandas as pd

from routestats.claim import Claim
from routestats.report import Report, Table

TEMPLATES = Path(__file__).resolve().parent / "templates"
FORMATS = ("html", "latex", "markdown")
DEFAULT_FORMATS = ("html", "latex")
FIGURE_FORMATS = ("png", "pdf", "svg")


@functools.cache
def html_env() -> Environment:
    """The page's environment, one a process: it keeps each template compiled once (a new environment per table
    compiled the LaTeX table's template fourteen times a pair report, 0.15 s CPU)."""
    return Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html", "j2"]),
                       trim_blocks=False, lstrip_blocks=False)


@functools.cache
def latex_env() -> Environment:
    # values are escaped in Python (reports.latex.latex_escape) before they reach the template
    return Environment(loader=FileSystemLoader(TEMPLATES), autoescape=False, keep_trailing_newline=True)


def slug(text: str) -> str:
    """File- and anchor-safe name.

    >>> slug("saab vs a_b & \\\\input{x}")
    'saab-vs-a_b-input-x'
    """
    return re.sub(r"-+", "-", re.sub(r"[^A-Za-z0-9_.]+", "-", text)).strip("-.") or "report"


def provenance_rows(prov: dict) -> list[tuple[str, str]]:
    """Key/value rows of a provenance dict: nested keys joined, leaves as text or JSON."""
    rows: list[tuple[str, str]] = []

    def leaf(v) -> str:
        return v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)

    def walk(key: str, v, depth: int) -> None:
        if isinstance(v, dict) and v and depth < 4:
            for k in v:
                walk(f"{key} {k}".strip(), v[k], depth + 1)
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for i, x in enumerate(v):
                rows.append((f"{key} {x.get('run_id', x.get('file', i))}", leaf(x)))
        else:
            rows.append((key, leaf(v)))

    walk("", prov, 0)
    return rows


def _parts(report: Report) -> list[tuple[Report, str, str]]:
    """(report, slug, file prefix) of the report and each of its parts."""
    parts = report.all_reports()
    return [(r, slug(r.title), f"{slug(r.title)}-" if len(parts) > 1 else "") for r in parts]


def claims_table(report: Report) -> pd.DataFrame:
    """Every claim of the report and of its parts (``claims.csv``): the part, then the columns of
    :meth:`routestats.report.Report.claims_frame`."""
    frames = [r.claims_frame().assign(part=s) for r, s, _ in _parts(report)]
    out = pd.concat(frames, ignore_index=True)
    return out[["part", *[c for c in out.columns if c != "part"]]]


def _row_indices(t: Table, claim: Claim) -> list[int]:
    """Positions (in the rendered order) of the rows of ``t`` a claim rests on; all when it names none."""
    if not claim.rows or claim.key not in t.frame:
        return []
    wanted = {str(r) for r in claim.rows}
    return [i for i, v in enumerate(t.frame[claim.key]) if str(v) in wanted]


def _sentences(rep: Report, where: str, s: str, prefix: str, numbers: dict) -> list[dict]:
    """The printed sentences of ``where`` (headline or finding), each with a link to the table its
    claim rests on: ``{"text", "href", "label", "rows"}`` (href None when the table is not shown)."""
    claims = [c for c in rep.claims if c.where == where and c.holds]
    if not claims:  # a report built without claims: its sentences, unlinked
        return [{"text": x, "href": None} for x in (rep.headline if where == "headline" else rep.findings)]
    out = []
    for c in claims:
        item = {"text": c.sentence, "href": None}
        if c.table and c.table in rep.tables():
            t = rep.table(c.table)
            if t.shown:
                item.update(href=f"#{s}-table-{t.name}", label=f"Table {numbers[t.name]}",
                            rows=",".join(map(str, _row_indices(t, c))))
            else:
                item.update(csv=f"{prefix}{c.table}.csv")
        out.append(item)
    return out


ANSWER = "answer-at-a-glance"  # the figures key of a part's first-screen figure


def page_sections(rep: Report) -> list:
    """The sections of one report in the order the page shows them: the section holding the table its answer
    rests on first (right below the answer), then the others in their order, so tables are numbered in order of
    appearance."""
    key = rep.answer_claim.table if rep.answer_claim is not None else ""
    return sorted(rep.sections, key=lambda sec: not any(t.name == key and t.shown for t in sec.tables))


def table_order(rep: Report) -> list[Table]:
    """The shown tables of one report (not its parts) in their numbering order, the same in every report kind and
    the order the page shows them (:func:`page_sections`): the table its answer rests on first (the effects table
    is Table 1 of every pair report, trained, pretrained or on a test sample), then the others."""
    shown = [t for sec in page_sections(rep) for t in sec.tables if t.shown]
    key = rep.answer_claim.table if rep.answer_claim is not None else ""
    return sorted(shown, key=lambda t: t.name != key)


def table_numbers(report: Report) -> dict:
    """(part slug, table name) -> its number: each part's :func:`table_order`, counted on across the parts, as
    the HTML, the Markdown and ``tables.tex`` number them."""
    out, n = {}, 0
    for rep, s, _ in _parts(report):
        for t in table_order(rep):
            n += 1
            out[(s, t.name)] = n
    return out


def answer_figure(rep: Report):
    """The figure beside a report's first-screen answer: the answer claim's own, or None."""
    c = rep.answer_claim
    return c.figure if c is not None else None


def build_context(report: Report, figures: dict | None = None) -> dict:
    """The dict rendered by ``report.html.j2``. ``figures`` maps (part slug, figure name) -> PNG bytes."""
    from routestats import __version__

    figures = figures or {}
    parts = []
    number = table_numbers(report)  # the order tables.tex inputs them, so HTML and PDF agree
    for rep, s, prefix in _parts(report):
        blocks = []
        numbers = {name: k for (part, name), k in number.items() if part == s}
        for sec in page_sections(rep):
            shown = []
            for t in sec.tables:
                if t.shown:
                    shown.append({**table_context(t), "number": numbers[t.name], "anchor": f"{s}-table-{t.name}"})
            figs = []
            for f in sec.figures:
                got = figures.get((s, f.name))
                if isinstance(got, str):  # an interactive widget's HTML, or a drawing's SVG
                    figs.append({"title": f.name, "html": got if f.kind in WIDGETS else f"<figure>{got}</figure>"})
                elif got:
                    figs.append({"title": f.name, "png": embedded(got)})
            if not (shown or figs or sec.text or sec.skipped):
                continue
            blocks.append({"id": sec.id, "title": sec.title, "tables": shown, "figures": figs,
                           "text": sec.skipped or sec.text, "skipped": bool(sec.skipped)})
        key = figures.get((s, ANSWER))
        parts.append({"slug": s, "label": rep.title, "subtitle": rep.subtitle, "answer": rep.answer,
                      "terms": rep.used_terms(rep.first_screen),
                      "answer_png": embedded(key) if isinstance(key, bytes) else None,
                      "answer_svg": key if isinstance(key, str) else None,
                      "findings": _sentences(rep, "finding", s, prefix, numbers),
                      "headline": _sentences(rep, "headline", s, prefix, numbers),
                      "blocks": blocks, "methods": rep.methods, "provenance_rows": provenance_rows(dict(rep.provenance)),
                      "provenance_json": json.dumps(rep.provenance, indent=2, sort_keys=True, default=str)})
    generated = report.provenance.get("analysis", {}).get("generated", "")
    return {"title": "routestats report: " + report.title, "version": __version__, "generated": generated,
            "parts": parts}


def table_text(table: Table, fmt: str, wide: bool = False, page: bool = False) -> str:
    """One table as LaTeX, CSV or Markdown text (``wide``: see :func:`reports.latex.latex_table`; ``page``:
    Markdown of the rows the report page shows, with its note on the rest)."""
    if fmt == "csv":
        return table.frame.to_csv(index=False)
    if fmt == "markdown":
        if table.shown:
            if page:
                headers, rows = page_cells(table)
            else:
                headers, cells = format_cells(table)
                rows = list(enumerate(cells))
            rows = [[c["text"] for c in r] for _, r in rows]
        else:
            headers, rows = list(table.frame.columns), [[str(v) for v in r] for r in table.frame.itertuples(index=False)]
        esc = lambda t: str(t).replace("|", "\\|")  # noqa: E731
        lines = ["| " + " | ".join(esc(h) for h in headers) + " |", "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
        return "\n".join(lines) + "\n"
    if fmt == "latex":
        if not table.shown:
            raise ValueError(f"table {table.name!r} has no LaTeX layout (it is exported as CSV); use csv or markdown")
        return latex_table(table, f"tab:{slug(table.name)}", latex_env(), wide=wide)
    raise ValueError(f"unknown table format {fmt!r}: latex, csv or markdown")


def markdown(report: Report) -> str:
    """The report as Markdown for a terminal or a notebook: title, findings, every shown table."""
    out = []
    number = table_numbers(report)  # the numbering of the HTML and the PDF
    for rep, s, _ in _parts(report):
        out += [f"# {rep.title}", "", rep.subtitle, ""]
        if rep.headline:
            out += ["## Answer", ""] + ([f"**{rep.answer}**", ""] if rep.answer else []) + [" ".join(rep.headline), ""]
            out += [f"*{rep.terms}*", ""] if rep.terms else []
        out += [f"- {f}" for f in rep.findings] + [""]
        for sec in page_sections(rep):
            shown = [t for t in sec.tables if t.shown]
            if not shown and not sec.skipped:
                continue
            out += [f"## {sec.title}", ""]
            if sec.skipped:
                out += [sec.skipped, ""]
            for t in shown:
                out += [table_text(t, "markdown", page=True), f"Table {number[(s, t.name)]}. {t.caption}"
                        + (f" {t.legend}" if t.legend else "") + (f" {t.page_note}" if t.page_note else ""), ""]
    return "\n".join(out)


def render(report: Report, out: str | Path, formats: Sequence[str] = DEFAULT_FORMATS,
           progress: Callable[[str], None] | None = None, figures: Sequence[str] | None = None, force: bool = False,
           inputs: Sequence = (), keep: Callable[[Path, dict], None] | None = None) -> dict[str, Path]:
    """Write the report folder atomically; returns name -> path of what was written.

    ``keep(folder, written)``, when given, is called with the finished temporary folder just before
    it is renamed into place (the report cache files a copy of exactly what this call wrote).

    The pair, run, study and MoFA reports' figures are SVG and the regime and plan reports' PNG (embedded in the HTML
    as they are); ``figures`` adds copies of every figure in those formats (``png``, ``pdf``, ``svg``; default none: a
    PNG or PDF is drawn by matplotlib, most of a report's cost where it is). See
    :func:`reports.folder.check_output` for ``force`` and ``inputs``.
    """
    bad = set(formats) - set(FORMATS)
    if bad:
        raise ValueError(f"unknown format(s) {sorted(bad)}; choose from {FORMATS}")
    vector = tuple(dict.fromkeys(figures or ()))
    if set(vector) - set(FIGURE_FORMATS):
        raise ValueError(f"figure formats are {', '.join(FIGURE_FORMATS)}; got {sorted(set(vector))}")
    return write_folder(out, lambda tmp: _render_into(report, tmp, formats, progress, vector), force, inputs, keep)


def _render_into(report: Report, out: Path, formats: Sequence[str], progress, vector: tuple) -> dict[str, Path]:
    say = progress or (lambda label: None)
    written: dict[str, Path] = {}
    parts = _parts(report)
    say("figures")
    jobs, where = {}, {}
    widgets = {}
    for rep, s, prefix in parts:
        for sec in rep.sections:
            for f in sec.figures:
                if f.kind in WIDGETS:  # interactive, HTML only: written into the page, not drawn
                    element = "attention-explorer" if not widgets else f"attention-explorer-{s}-{f.name}"
                    widgets[(s, f.name)] = WIDGETS[f.kind](f, element)
                    continue
                jobs[prefix + f.name] = f
                where[prefix + f.name] = (s, f.name)
        key = answer_figure(rep)
        if key is not None:  # the first screen's figure, beside the answer
            jobs[prefix + key.name] = key
            where[prefix + key.name] = (s, ANSWER)
    pngs = draw_all(jobs, out / "figures", vector=vector)
    figs = {where[stem]: png for stem, png in pngs.items()}
    figs.update(widgets)
    put_file(out / "claims.csv", claims_table(report).to_csv(index=False))
    written["claims"] = out / "claims.csv"
    tex_files = []
    for rep, _, prefix in parts:
        say(f"tables: {rep.title}")
        for sec in rep.sections:
            for t in sec.tables:
                put_file(out / "tables" / f"{prefix}{t.name}.csv", t.frame.to_csv(index=False))
        if "latex" in formats:
            for t in table_order(rep):  # inputs in the numbering order of the HTML
                put_file(out / "tables" / f"{prefix}{t.name}.tex", latex_table(t, f"tab:{slug(prefix + t.name)}", latex_env()))
                tex_files.append(prefix + t.name)
    if "latex" in formats:
        from reports.latex import latex_text

        put_file(out / "tables" / "tables.tex", latex_env().get_template("tables.tex.j2").render(
            files=tex_files, headline=latex_text(" ".join(report.headline)) if report.headline else ""))
        written["tables"] = out / "tables" / "tables.tex"
    if "markdown" in formats:
        put_file(out / "report.md", markdown(report))
        written["markdown"] = out / "report.md"
    if "html" in formats:
        say("HTML")
        put_file(out / "report.html", html_env().get_template("report.html.j2").render(**build_context(report, figs)))
        written["html"] = out / "report.html"
    (out / "figures").mkdir(exist_ok=True)
    written["figures"] = out / "figures"
    return written
