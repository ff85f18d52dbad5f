"""Reports: the numbers behind the templates, the CLI, and real-tool checks (Chromium, pdflatex)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import routestats as rs
from reports.formatting import fmt_ci, fmt_num, fmt_p
from reports.latex import latex_escape
from reports.render import build_context, render
from routestats.cli import app
from routestats.rundir.synthetic import demo_run_dir, synthetic_pair
from routestats.settings import AnalysisSettings
from routestats.compose.pair.build import build_pair_report, select_token_map_example
from tests.conftest import chromium_console, compile_tex, console_errors, need, random_attention, write_run

runner = CliRunner()
QUICK = AnalysisSettings(resamples=300, permutations=300, seed=7)
HOSTILE_ID = r"a_b & \input{x} <script>alert(1)</script> 100% $5 #1 ~^"
HOSTILE_FIELDS = {"named": {"3": "con_tent & $x$", "4": "<b>title</b> \\emph{t}"}, "mask_id": 5, "vocab_size": 6}


@pytest.fixture(scope="module")
def synth_pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("syn")
    b, v = synthetic_pair(d, seed=4, n_examples=10, steps=(10, 20))
    return d, rs.pair(rs.load_run(b), rs.load_run(v))


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    rng = np.random.default_rng(0)
    fields = [[4, 4, 3, 3, 3, 3], [4, 3, 3, 3], [4, 4, 4, 3, 3]]
    att = [random_attention(rng, 2, 2, len(g)) for g in fields]
    att2 = [random_attention(rng, 2, 2, len(g)) for g in fields]
    write_run(d / "b", att, fields, run_id=HOSTILE_ID + " base", fields=HOSTILE_FIELDS)
    write_run(d / "v", att2, fields, run_id=HOSTILE_ID, variant="saab", fields=HOSTILE_FIELDS)
    return d


# ------------------------------------------------------------------ numbers behind the templates
def test_context_numbers_match_the_tables(synth_pair):
    _, p = synth_pair
    rep = build_pair_report(p, QUICK)
    ctx = build_context(rep)
    (pc,) = ctx["parts"]
    eff = rep.frame("effects").set_index("layer")
    blocks = {b["id"]: b for b in pc["blocks"]}
    table = blocks["effects"]["tables"][0]
    assert table["headers"][:4] == ["Layer", "SFM baseline", "SFM variant", "Δ"]
    for row in table["rows"]:
        layer = int(row[0]["text"])
        # each cell is the frame's unrounded value, formatted; data-value keeps the full precision
        assert row[3]["text"] == fmt_num(eff.loc[layer, "mean_diff"])
        assert row[3]["value"] == eff.loc[layer, "mean_diff"]
        assert row[4]["text"] == fmt_ci(eff.loc[layer, "ci_low"], eff.loc[layer, "ci_high"])
        # p at the permutation floor (4 layers x 1/(300 + 1) = 0.01329 after Holm) prints that floor rounded
        # up, 0.014, never below it (as the sentences print it), and says so
        p_holm = eff.loc[layer, "p_holm"]
        want = "0.014 (smallest attainable)" if p_holm <= 4 / 301 * 1.25 else fmt_p(p_holm)
        assert row[7]["text"] == want
    # findings lines quote the same numbers
    (line,) = [f["text"] for f in pc["findings"] if f["text"].startswith("Layer 3:")]
    assert line.startswith(f"Layer 3: SFM {fmt_num(eff.loc[3, 'baseline_mean'])} → {fmt_num(eff.loc[3, 'variant_mean'])}")
    # Table 1: the highest SFM of each model is the bold cell
    lay = blocks["profile"]["tables"][0]
    bold = [(r[0]["text"], r[1]["text"]) for r in lay["rows"] if r[2]["bold"]]
    want = rep.frame("layers").loc[rep.frame("layers").groupby("role")["sfm"].idxmax(), ["role", "layer"]]
    assert bold == [(role, str(layer)) for role, layer in want.itertuples(index=False)]
    # the methods paragraph is generated from the actual settings
    assert "(300 resamples)" in pc["methods"] and "300 random sign patterns" in pc["methods"]
    assert "seed 7" in pc["methods"]
    assert f"The paired tables use every evaluated example ({rep.facts['n_examples']})" in pc["methods"]


def test_report_tables_match_library_calls(synth_pair):
    _, p = synth_pair
    rep = build_pair_report(p, QUICK)
    direct = rs.paired_effects(p, resamples=300, permutations=300, seed=7)
    np.testing.assert_array_equal(rep.frame("effects")["mean_diff"], direct["mean_diff"])
    np.testing.assert_array_equal(rep.frame("effects")["p_holm"], direct["p_holm"])
    f = rep.frame("field_to_field")
    d = f[f.role == "difference"].set_index(["layer", "source", "destination"])["mass"]
    bv = f[f.role == "variant"].set_index(["layer", "source", "destination"])["mass"]
    bb = f[f.role == "baseline"].set_index(["layer", "source", "destination"])["mass"]
    np.testing.assert_allclose(d, bv - bb, atol=0)
    assert rep.frame("trajectory")["step"].unique().tolist() == [10, 20]
    assert rep.facts["profile_distance"] == pytest.approx(
        rs.profile_distance(rep.frame("layers")[rep.frame("layers").role == "baseline"]["sfm"], rep.frame("layers")[rep.frame("layers").role == "variant"]["sfm"]))


def test_token_map_selection_rule(tmp_path):
    # lengths 12, 22 (one field has 3 tokens), 25 (qualifies), 24 (qualifies, later); none uses model output
    fields = [[4] * 4 + [3] * 8, [4] * 3 + [3] * 19, [4] * 5 + [3] * 20, [4] * 4 + [3] * 20]
    att = [np.full((1, 1, len(g), len(g)), 1 / len(g)) for g in fields]
    run = rs.load_run(write_run(tmp_path / "r", att, fields))
    assert select_token_map_example(run, 20, 30, 4) == 2
    assert select_token_map_example(run, 26, 30, 4) is None


# ------------------------------------------------------------------ CLI
def test_report_cli_writes_everything(synth_pair, tmp_path):
    d, _ = synth_pair
    r = runner.invoke(app, ["report", str(d), "-o", str(tmp_path / "out"), "--resamples", "200", "--permutations", "200"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    html = (out / "report.html").read_text()
    # figures embedded: the page's own drawings inline as SVG (at least the profile, paired examples, field-to-field,
    # head SFM, lengths and word map of this pair), each inside its <figure>
    assert html.count("<figure><svg viewBox=") >= 5
    assert "http://" not in html and "https://" not in html  # self-contained
    # the first screen says what SFM is, right under the headline
    top = html.split('id="headline"', 1)[1].split('class="findings"', 1)[0]
    assert "<dt>SFM (same-field attention mass)</dt><dd>the share of a query&#39;s attention" in top
    assert "<dt>Δ</dt><dd>variant − baseline, per example</dd>" in top
    for name in ("layers", "effects", "adjusted", "performance", "entropy_effects", "gradients"):
        assert (out / "tables" / f"{name}.tex").is_file() and (out / "tables" / f"{name}.csv").is_file()
    assert (out / "tables" / "tables.tex").is_file()
    # the page's figures as it embeds them, no PNG or PDF copy unless --figures asks
    assert (out / "figures" / "profile.svg").is_file() and not (out / "figures" / "profile.pdf").exists()
    assert not (out / "figures" / "profile.png").exists()
    # progress with stderr not a terminal: time-stamped stage lines, each run's reading of its attention
    # (most of a large report's time) named before the first table
    stages = [line.split("] ", 1)[1] for line in r.stderr.splitlines() if line.startswith("[")]
    assert stages[0].startswith("reading the baseline's attention (") and stages[0].endswith(" examples)")
    assert stages[1].startswith("reading the variant's attention (") and stages[2] == "layer summary", stages
    assert stages[3] == "paired tests of 6 tables (one pass over their shared draws)", stages  # analysed ahead
    r = runner.invoke(app, ["report", str(d), "-o", str(tmp_path / "pdf"), "--resamples", "200", "--permutations",
                            "200", "--figures", "pdf"])
    assert r.exit_code == 0 and (tmp_path / "pdf" / "figures" / "profile.pdf").is_file()  # for papers, on request
    assert oct((out / "report.html").stat().st_mode & 0o777) != "0o600"


@pytest.mark.parametrize("fmt, needle", [("latex", r"\toprule"), ("csv", "metric,layer,n,excluded"), ("markdown", "| Layer |")])
def test_table_cli_formats(synth_pair, fmt, needle):
    d, _ = synth_pair
    r = runner.invoke(app, ["table", "effects", str(d), "--format", fmt, "--resamples", "100", "--permutations", "100"])
    assert r.exit_code == 0, r.output
    assert needle in r.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["report", "{d}", "--format", "pdf"], "--format takes html, latex and/or markdown"),
        (["report", "{d}", "--mode", "bca"], "mode must be one of shared, numpy, python-random"),
        (["report", "{d}", "--examples", "nonsense"], "examples must be one of protocol, all, primary, length_sample, test_sample"),
        (["report", "{d}", "--step", "999"], "no attention"),
        (["table", "bogus", "{d}"], "unknown table 'bogus'"),
        (["table", "effects", "{d}", "--format", "xlsx"], "--format must be latex, csv or markdown"),
        (["report", "/nonexistent/x"], "no such file or directory"),
    ],
)
def test_report_cli_errors(synth_pair, tmp_path, args, message):
    d, _ = synth_pair
    r = runner.invoke(app, [a.format(d=d) for a in args] + ["-o", str(tmp_path / "o")] if args[0] == "report" else
                      [a.format(d=d) for a in args])
    assert r.exit_code == 2, r.output
    assert message in r.output
    assert "Traceback" not in r.output


# ------------------------------------------------------------------ escaping
def test_latex_escape_neutralises_commands():
    s = latex_escape(HOSTILE_ID)
    assert "\\input{" not in s and r"\textbackslash{}input\{x\}" in s
    assert r"\&" in s and r"\%" in s and r"\$" in s and r"\#" in s


def test_hostile_names_are_harmless_in_html_and_latex(hostile, tmp_path):
    r = runner.invoke(app, ["report", str(hostile), "-o", str(tmp_path / "o"), "--resamples", "100", "--permutations", "100"])
    assert r.exit_code == 0, r.output
    html = (tmp_path / "o" / "report.html").read_text()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>title</b>" not in html
    tex = (tmp_path / "o" / "tables" / "performance.tex").read_text()
    assert "\\input{x}" not in tex and r"\textbackslash{}input\{x\}" in tex
    pdflatex = need("pdflatex")
    compile_tex(pdflatex, tmp_path / "o" / "tables", "tables.tex")  # \input{x} would fail: no file x


# ------------------------------------------------------------------ real tools
PLAIN = ("\\documentclass{{article}}\n\\usepackage[T1]{{fontenc}}\n\\usepackage{{booktabs,graphicx,longtable}}\n"
         "\\begin{{document}}\n{body}\n\\end{{document}}\n")
TWOCOL = PLAIN.replace("{{article}}", "[twocolumn]{{article}}")


def _overfull(log: str) -> list[str]:
    return re.findall(r"Overfull \\hbox \(([\d.]+pt) too wide\)", log)


@pytest.mark.slow  # over ~10 s on 2 cores (CI still runs it)
@pytest.mark.parametrize("layers", [4, 30])
def test_every_exported_table_fits_a_plain_article(tmp_path, layers):
    # was: `Overfull \hbox (83.5pt too wide)` for the effects table at 4 layers, 169 pt at 30 (issue 32); each
    # table is compiled alone in a plain (portrait, one-column) article and, as table*, in a two-column one
    from routestats.rundir.synthetic import synthetic_pair

    pdflatex = need("pdflatex")
    if layers == 4:
        rep = build_pair_report(rs.load_runs(demo_run_dir()).pairs()[0], QUICK)
    else:
        synthetic_pair(tmp_path / "pair", seed=2, n_examples=12, n_layers=30, n_heads=4, length_range=(8, 16),
                       same_field_bias=[0.5] * 30, effect=[0.3] * 30, forms=("matrices", "reductions"))
        rep = rs.analyse(tmp_path / "pair", resamples=100, permutations=100)
    render(rep, tmp_path / "o", formats=("latex",))
    folder = tmp_path / "o" / "tables"
    tables = sorted(t for t in folder.glob("*.tex") if t.name != "tables.tex")
    assert len(tables) >= 6
    too_wide = {}
    for t in tables:
        doc = folder / f"standalone-{t.stem}.tex"
        doc.write_text(PLAIN.format(body="\\input{" + t.name + "}"))
        compile_tex(pdflatex, folder, doc.name)
        if _overfull(doc.with_suffix(".log").read_text(errors="replace")):
            too_wide[t.stem] = _overfull(doc.with_suffix(".log").read_text(errors="replace"))
        if "longtable" not in t.read_text():  # longtables break across pages, in one-column mode
            wide = folder / f"twocol-{t.stem}.tex"
            body = t.read_text().replace("\\begin{table}", "\\begin{table*}").replace("\\end{table}", "\\end{table*}")
            wide.write_text(TWOCOL.format(body=body))
            compile_tex(pdflatex, folder, wide.name)
            if _overfull(wide.with_suffix(".log").read_text(errors="replace")):
                too_wide["two-column " + t.stem] = _overfull(wide.with_suffix(".log").read_text(errors="replace"))
    assert not too_wide, too_wide
    if layers == 30:  # 435 pairwise contrasts and 60 layer rows: longtables, not floats taller than a page
        assert "longtable" in (folder / "layer_contrasts.tex").read_text()
        assert "longtable" in (folder / "layers.tex").read_text()
    compile_tex(pdflatex, folder, "tables.tex")


def test_the_wide_option_is_a_two_column_float():
    rep = build_pair_report(rs.load_runs(demo_run_dir()).pairs()[0], QUICK)
    import reports

    tex = reports.to_latex(rep, "effects", wide=True)
    assert "\\begin{table*}" in tex and "\\end{table*}" in tex
    assert "\\begin{table}" not in reports.to_latex(rep, "effects", wide=True)


def test_html_and_pdf_number_the_tables_alike(tmp_path):
    # one numbering: the compiled PDF's "Table N:" captions (pdftotext) are the HTML's "Table N." in the same order
    import re
    import shutil
    import subprocess

    pdflatex = need("pdflatex")
    pdftotext = shutil.which("pdftotext") or pytest.skip("pdftotext (poppler-utils) is not installed")
    rep = build_pair_report(rs.load_runs(demo_run_dir()).pairs()[0], QUICK)
    render(rep, tmp_path / "o", formats=("html", "latex", "markdown"))
    compile_tex(pdflatex, tmp_path / "o" / "tables", "tables.tex")
    pdf = subprocess.run([pdftotext, str(tmp_path / "o" / "tables" / "tables.pdf"), "-"], capture_output=True,
                         text=True).stdout
    in_pdf = [(int(n), " ".join(c.split())[:30]) for n, c in re.findall(r"Table (\d+): (.{40})", pdf, re.S)]
    html = (tmp_path / "o" / "report.html").read_text()
    in_html = [(int(n), " ".join(c.split())[:30]) for n, c in
               re.findall(r"<strong>Table (\d+)\.</strong> (.{40})", html, re.S)]
    shown = [t for s in rep.sections for t in s.tables if t.shown]
    # every shown table numbered once; the PDF inputs them in number order (the answer's table, effects, first:
    # in the page it stands where its section is)
    assert sorted(n for n, _ in in_html) == list(range(1, len(shown) + 1)) and len(shown) >= 10
    assert [n for n, _ in in_pdf] == list(range(1, len(shown) + 1))
    assert in_html[[n for n, _ in in_html].index(1)][1].startswith("Paired SFM effects")
    # the same caption under each number (letters only: pdftotext drops the fi/ff ligatures)
    letters = lambda c: re.sub(r"[^a-z]", "", re.sub(r"f[fil]", "", c.lower()))[:12]  # noqa: E731
    assert [letters(c) for _, c in in_pdf] == [letters(c) for _, c in sorted(in_html)]
    md = (tmp_path / "o" / "report.md").read_text()
    assert re.findall(r"^Table (\d+)\. ", md, re.M) == [str(n) for n, _ in in_html]


def test_report_opens_in_chromium_without_console_errors(tmp_path):
    chromium = need("chromium")
    p = rs.load_runs(demo_run_dir()).pairs()[0]
    render(build_pair_report(p, QUICK), tmp_path / "o", formats=("html",))
    log = chromium_console(chromium, tmp_path / "o" / "report.html", tmp_path / "shot.png")
    assert (tmp_path / "shot.png").stat().st_size > 10_000
    assert console_errors(log) == [], log[-2000:]
    # the check itself can fail: a page with a script error is caught
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    assert console_errors(chromium_console(chromium, bad, tmp_path / "bad.png"))


def test_python_users_get_the_paper_table(tmp_path):
    # the exact one-liner of the [shape] issue, run from the repository root
    root = Path(__file__).resolve().parents[1]
    code = "import routestats as rs, reports; print(reports.to_latex(rs.analyse('data/demo_run'), 'effects'))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True)
    tex = res.stdout
    assert r"\toprule" in tex and r"Layer & \begin{tabular}[b]{@{}c@{}}SFM\\ baseline\end{tabular}" in tex
    # the same booktabs table as `routestats table effects` prints
    cli = runner.invoke(app, ["table", "effects", str(root / "data" / "demo_run")])
    assert cli.exit_code == 0 and cli.output.strip() == tex.strip()
    # its cells are the effects frame, formatted (expected numbers: the frame of the same call)
    eff = rs.analyse(root / "data" / "demo_run").frame("effects").set_index("layer")
    assert f"0 & {fmt_num(eff.loc[0, 'baseline_mean'])} & {fmt_num(eff.loc[0, 'variant_mean'])}" in tex
    (tmp_path / "effects.tex").write_text(tex)
    (tmp_path / "doc.tex").write_text("\\documentclass{article}\n\\usepackage[T1]{fontenc}\n\\usepackage{booktabs,graphicx}\n"
                                      "\\begin{document}\n\\input{effects.tex}\n\\end{document}\n")
    compile_tex(need("pdflatex"), tmp_path, "doc.tex")


def test_latex_ranges_read_as_ranges_in_the_compiled_pdf(tmp_path):
    # "15–35" must come out as an en dash between two numbers, not "15-−35"
    pdflatex = need("pdflatex")
    pdftotext = shutil.which("pdftotext")
    import pandas as pd

    from reports.latex import latex_table
    from reports.render import latex_env
    from routestats.report import Column, Table

    t = Table("r", pd.DataFrame({"lo": [15], "hi": [35], "x": [-0.25]}), "Ranges.",
              (Column("Lengths", ("lo", "hi"), "range"), Column("x", "x")))
    (tmp_path / "r.tex").write_text(latex_table(t, "tab:r", latex_env()))
    (tmp_path / "d.tex").write_text("\\documentclass{article}\n\\usepackage[T1]{fontenc}\n\\usepackage{booktabs,graphicx}\n"
                                    "\\begin{document}\n\\input{r.tex}\n\\end{document}\n")
    compile_tex(pdflatex, tmp_path, "d.tex")
    if pdftotext is None:
        pytest.skip("pdftotext (poppler-utils) is not installed")
    text = subprocess.run([pdftotext, str(tmp_path / "d.pdf"), "-"], capture_output=True, text=True).stdout
    # pdftotext reports the T1 en dash as its slot 0x15 when the font has no Unicode map
    assert ("15–35" in text or "15\x1535" in text) and "15-" not in text and "−35" not in text
    assert "−0.250" in text or "-0.250" in text


def test_single_run_gets_a_descriptive_report(synth_pair, tmp_path):
    d, p = synth_pair
    r = runner.invoke(app, ["report", str(d / "saab"), "-o", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    html = (tmp_path / "o" / "report.html").read_text()
    assert "(single run)" in html and "no paired statistics" in html and 'id="headline"' in html
    rep = rs.analyse(d / "saab")
    # its layer table is the library's per-run layer summary
    want = rs.layer_summary(p.variant)
    np.testing.assert_array_equal(rep.frame("layers")["sfm"], want["sfm"])


def test_every_figure_exports_as_svg_and_png(tmp_path):
    # `routestats report --figures png,svg`: both copies of every drawn figure (the page's canvas figures and the
    # training figures drawn by matplotlib alike), the SVG well-formed
    import xml.etree.ElementTree as ET

    from routestats.cli import app

    res = CliRunner().invoke(app, ["report", str(demo_run_dir()), "-o", str(tmp_path / "o"), "--format", "html",
                                   "--figures", "png,svg", "--resamples", "100", "--permutations", "100"])
    assert res.exit_code == 0, res.output
    pngs = sorted(p.stem for p in (tmp_path / "o" / "figures").glob("*.png"))
    svgs = sorted(p.stem for p in (tmp_path / "o" / "figures").glob("*.svg"))
    assert pngs == svgs and len(pngs) >= 8 and not list((tmp_path / "o" / "figures").glob("*.pdf"))
    for stem in svgs:
        root = ET.parse(tmp_path / "o" / "figures" / f"{stem}.svg").getroot()
        assert root.tag.endswith("svg")
    bad = CliRunner().invoke(app, ["report", str(demo_run_dir()), "-o", str(tmp_path / "x"), "--figures", "gif"])
    assert bad.exit_code == 2 and "--figures takes png, pdf and/or svg" in bad.output


def test_our_caption_symbols_typeset_in_latex():
    # every non-Latin-1 symbol the core's captions use has a LaTeX form (none falls back to "?")
    from pathlib import Path as _P

    src = "".join(p.read_text() for d in ("routestats/studies", "routestats/regime", "routestats/compose")
                  for p in _P(d).rglob("*.py"))
    src += _P("routestats/report.py").read_text()
    wordpiece = set("ĠĊ▁⏎")  # tokenizer markers, stripped from words before they reach a table
    used = {ch for ch in src if ord(ch) > 255} - wordpiece
    out = latex_escape("".join(sorted(used)))
    assert "?" not in out, sorted(used)
    assert latex_escape("T = Σ_l ‖x‖") == r"T = $\Sigma$\_l $\|$x$\|$"


# ------------------------------------------------------------------ word maps at any length (issue 32)
def test_a_word_map_at_any_cap_by_a_stated_rule(tmp_path):
    # was: no word map on real models (the rule wants 20-30 tokens; none at cap >= 42); now the median-length
    # example, shown as a window of at most 40 words around the first field boundary
    import pandas as pd

    synthetic_pair(tmp_path / "p", seed=4, n_examples=9, n_layers=2, n_heads=2, length_range=(40, 90),
                   same_field_bias=(0.5, 1.0), effect=(0.3, 0.3))
    rep = rs.analyse(tmp_path / "p", resamples=50, permutations=50)
    sec = rep.section("words")
    # the expected example, from examples.parquet read without routestats: lengths sorted with source_index
    ex = pd.read_parquet(tmp_path / "p" / "baseline" / "examples.parquet")
    ok = ex[[min((pd.Series(list(g)) == f).sum() for f in (3, 4)) >= 4 for g in ex["field_ids"]]]
    ranked = sorted(zip(ok["field_ids"].map(len), ok["source_index"], ok["example_id"]))
    want = int(ranked[(len(ranked) - 1) // 2][2])
    assert sec.title == f"Word-level attention, example {want}"
    assert "median length" in sec.text and "around the first field boundary" in sec.text
    wm = rep.frame("word_map")
    assert wm["query_index"].nunique() <= 40 and set(wm["example_id"]) == {want}
    # the user's choice, and a refusal naming the ids there are
    chosen = rs.analyse(tmp_path / "p", resamples=50, permutations=50, word_example=2)
    assert chosen.section("words").title == "Word-level attention, example 2"
    assert "--word-example" in chosen.section("words").text
    bad = rs.analyse(tmp_path / "p", resamples=50, permutations=50, word_example=99)
    assert bad.section("words").skipped.startswith("Not computed: --word-example 99: no such evaluated example")


def test_tables_are_numbered_in_the_order_the_page_shows_them(synth_pair):
    """Issue [first-hour] 8: the HTML showed Tables 2-4 (task performance) before Table 1. The section holding the
    answer's table now comes first, so the numbers read 1, 2, 3, ... down the page, in the HTML and the Markdown."""
    from reports.render import build_context, markdown

    _, p = synth_pair
    rep = build_pair_report(p, QUICK)
    (pc,) = build_context(rep)["parts"]
    seen = [t["number"] for b in pc["blocks"] for t in b["tables"]]
    assert seen == list(range(1, len(seen) + 1)) and len(seen) > 5, seen
    assert pc["blocks"][0]["id"] == "effects"  # the answer's table right below the answer
    md = [int(x) for x in re.findall(r"^Table (\d+)\. ", markdown(rep), flags=re.M)]
    assert md == list(range(1, len(md) + 1)), md
