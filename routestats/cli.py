"""The ``routestats`` command line: a thin shell over the library.

Each command parses its options, makes one library call and prints or writes the result.
User errors (bad paths, broken runs, bad options) exit with code 2 and one line on stderr.
Heavy modules (pandas, pyarrow, matplotlib) are imported inside the commands, so ``--help``
starts fast.
"""

from __future__ import annotations

import functools
import sys
import textwrap
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer

from routestats.table_names import table_help
from routestats.settings import AnalysisSettings
from routestats.usage import version_option

D = AnalysisSettings()  # the one set of defaults; options left out take these
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Statistics of attention routing in paired Transformer runs.",
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: rich's help renderer alone costs ~0.1 s CPU per --help
)

version_option(app, "routestats")

# Options shared by the analysis commands (one definition each; defaults from AnalysisSettings).
RESAMPLES = typer.Option(None, help=f"Bootstrap resamples [default: {D.resamples}].")
PERMUTATIONS = typer.Option(None, help=f"Sign-flip draws [default: {D.permutations}].")
SEED = typer.Option(None, help=f"Seed of the random procedures [default: {D.seed}].")
MODE = typer.Option(None, help=f"RNG procedure: shared, numpy or python-random (reference modes) [default: {D.mode}].")
EXAMPLES = typer.Option(None, help="Examples of the paired tables: protocol (primary when the run also holds a "
                                   "length sample, else all), all, primary, length_sample or test_sample "
                                   f"[default: {D.examples}].")
LENGTH_EXAMPLES = typer.Option(None, "--length-examples", help="Examples of the length analyses: protocol (the "
                                                               "length sample when flagged, else all), all, primary, "
                                                               f"length_sample or test_sample [default: {D.length_examples}].")
STEP = typer.Option(None, help="Checkpoint step [default: the final one].")
FACTOR = typer.Option(None, help=f"Factor whose levels form the pairs [default: {D.factor}].")
BASELINE = typer.Option(None, help=f"Level of FACTOR that is the baseline [default: {D.baseline}].")
FORMAT = typer.Option("html,latex", "--format", help="Comma list of html, latex, markdown.")
SKIP = typer.Option(False, "--skip-incomplete", help="Leave out runs without run.json (still training or killed).")
STUDY = typer.Option(None, "--study", help="The study to analyse in a tree that holds several.")
FORCE = typer.Option(False, "--force", help="Replace an existing report folder (or write inside an input tree).")


def tune_process_memory() -> dict:
    """Process-wide memory settings for a command-line run; return what is in use.

    * **pyarrow's pool: jemalloc** (unless the user chose one with ``ARROW_DEFAULT_MEMORY_POOL``, or this
      pyarrow lacks it). Decoded row groups are freed as the pass goes; jemalloc hands their pages back
      to the system where mimalloc (pyarrow's default) keeps them: peak RSS of ``routestats report`` on
      a 2 x 10,000 pair 601-629 -> 523 MB, the same CPU.
    * **glibc keeps freed large arrays for reuse** (``mallopt``: blocks up to 256 MB come from the heap,
      and the heap is not trimmed on every free; unless the user set ``MALLOC_MMAP_THRESHOLD_`` or
      ``MALLOC_TRIM_THRESHOLD_``, or the C library is not glibc). By default every array above 32 MB --
      a chunk of 2,048 sign patterns over 2,336 examples is 38 MB -- is a fresh ``mmap`` whose pages
      fault in one by one and are unmapped on free. 2 x 2,336 report: 7-12 % less CPU (system time
      halved), the same peak RSS; :func:`release_unused_memory` still hands freed pages back after
      each metric pass, and the CLI calls it at the start of each report stage.

    The CLI calls this; the library leaves a caller's process alone. Returns
    ``{"arrow_pool": backend name, "heap_reuse": bool}``.
    """
    import os

    import pyarrow as pa

    from routestats.rundir.memory import HEAP_BLOCK, M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, libc

    if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        try:
            pa.set_memory_pool(pa.jemalloc_memory_pool())
        except NotImplementedError:  # a pyarrow built without jemalloc keeps its default
            pass
    heap = False
    if not (os.environ.get("MALLOC_MMAP_THRESHOLD_") or os.environ.get("MALLOC_TRIM_THRESHOLD_")):
        c = libc()
        if c and hasattr(c, "mallopt"):
            mapped = c.mallopt(M_MMAP_THRESHOLD, HEAP_BLOCK)  # mallopt returns 1 on success
            trimmed = c.mallopt(M_TRIM_THRESHOLD, HEAP_BLOCK)
            heap = bool(mapped and trimmed)
    return {"arrow_pool": pa.default_memory_pool().backend_name, "heap_reuse": heap}


BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread() -> bool:
    """Run numpy's and scipy's BLAS on one thread in this process, unless the user chose a thread count (any of
    :data:`BLAS_THREAD_VARIABLES` set) or numpy is already loaded (the library leaves a caller's process alone).

    The statistics multiply tall matrices by a few columns (sign patterns by layers), where a second BLAS thread
    saves no wall time but spins while it waits: ``routestats report`` of a 2 x 2,336 pair, three runs each
    interleaved, 10.8-14.1 s CPU with two threads against 8.7-11.6 s with one, wall 7.8-9.9 s against 7.7-10.3 s.
    The figures are drawn in forked processes meanwhile, so both cores still work. Returns whether it was set.
    """
    import os

    if "numpy" in sys.modules or any(os.environ.get(v) for v in BLAS_THREAD_VARIABLES):
        return False
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    return True


def _fail(msg: str) -> None:
    from routestats.usage import printable  # a run id or path in the message may hold terminal escapes

    typer.echo(f"error: {printable(msg)}", err=True)
    raise typer.Exit(code=2)


def command(fn):
    """Register ``fn`` as a command whose user errors become one line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import os

        from routestats.errors import RoutestatsError

        try:
            from routestats.settings import check_environment

            one_blas_thread()  # before anything loads numpy
            check_environment()
            return fn(*args, **kwargs)
        except RoutestatsError as exc:
            _fail(str(exc))
        except BrokenPipeError:  # `routestats info ... | head`: the reader left; stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(code=0)
        except OSError as exc:  # permissions, a full disk, a vanished file: the user's to mend, in one line
            where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
            _fail(f"{where}{exc.strerror or exc}")
        except KeyboardInterrupt:  # every output of routestats is written whole or not at all
            import shlex

            typer.echo("interrupted: nothing was written (a report, table, figure or plan appears whole or not at "
                       f"all); to go on, run again: routestats {shlex.join(sys.argv[1:])}", err=True)
            raise typer.Exit(code=130)
        except (typer.Exit, SystemExit):
            raise
        except Exception as exc:  # a bug: still one line (ROUTESTATS_DEBUG=1 shows the traceback)
            if os.environ.get("ROUTESTATS_DEBUG"):
                raise
            first = str(exc).splitlines()[0] if str(exc) else ""
            typer.echo(f"internal error: {type(exc).__name__}: {first} (a routestats bug; rerun with "
                       "ROUTESTATS_DEBUG=1 for the traceback)", err=True)
            raise typer.Exit(code=1)

    return app.command()(wrapper)


def _settings(**given) -> AnalysisSettings:
    """AnalysisSettings from the options a user gave (None: the library default)."""
    return AnalysisSettings.of(**{k: v for k, v in given.items() if v is not None})


def _formats(text: str) -> list[str]:
    formats = [f.strip() for f in text.split(",") if f.strip()]
    if not formats or set(formats) - {"html", "latex", "markdown"}:
        _fail(f"--format takes html, latex and/or markdown, got {text!r}")
    return formats


def print_tables(frames: list) -> None:
    """Print (title, frame) pairs fitted to the terminal (:func:`reports.terminal.print_tables`)."""
    from reports.terminal import print_tables as show

    show(frames)


@contextmanager
def _progress():
    """``say(label)``: a spinner on a terminal, plain time-stamped lines on stderr otherwise."""
    from routestats.usage import printable  # labels name run ids

    if sys.stderr.isatty():
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=True) as bar:
            task = bar.add_task("loading", total=None)
            yield lambda label: bar.update(task, description=printable(label))
        return
    t0 = time.monotonic()
    yield lambda label: typer.echo(f"[{time.monotonic() - t0:6.1f} s] {printable(label)}", err=True)


@command
def info(path: Path = typer.Argument(..., help="A run directory or a tree of runs."), skip_incomplete: bool = SKIP,
         study: Optional[str] = STUDY) -> None:
    """Say what a run or a run tree holds (runs still being written are listed as such)."""
    from routestats.rundir.collection import describe, scan_runs
    from routestats.studies.discover import load

    from routestats.rundir import schema as S

    complete, left = scan_runs(path) if path.is_dir() and not (path / S.MANIFEST).is_file() else ([str(path)], [])
    busy = (f"incomplete (no run.json yet, or one that is not a file: still being written, or killed): "
            f"{', '.join(left)}") if left else ""
    if not complete and left:
        typer.echo(f"no complete run under {path}; {busy}")
        return
    title, df = describe(load(path, _settings(skip_incomplete=skip_incomplete or bool(left), study=study)))
    from reports.terminal import runs_text

    typer.echo(runs_text(f"{title} under {path}", df, busy))


@command
def validate(
    path: Path = typer.Argument(..., help="A run directory or a tree of runs."),
    quick: bool = typer.Option(False, "--quick", help="Skip file and content hashes."),
    skip_incomplete: bool = SKIP, study: Optional[str] = STUDY,
) -> None:
    """Check runs against the run-directory contract (every file, hash and value)."""
    from routestats.studies.discover import load

    import shutil
    import textwrap

    obj = load(path, _settings(skip_incomplete=skip_incomplete, study=study))
    width = max(60, shutil.get_terminal_size((100, 24)).columns - 1)
    for r in [obj] if hasattr(obj, "manifest") else list(obj):  # one run a paragraph, wrapped to the terminal
        typer.echo(textwrap.fill(f"ok  {r.run_id}: " + "; ".join(r.validate(deep=not quick)), width=width,
                                 subsequent_indent="    ", break_on_hyphens=False, break_long_words=False))


@command
def summary(
    path: Path = typer.Argument(..., help="A run directory, a pair, or a tree of runs."),
    resamples: Optional[int] = RESAMPLES, permutations: Optional[int] = PERMUTATIONS, seed: Optional[int] = SEED,
    factor: Optional[str] = FACTOR, baseline: Optional[str] = BASELINE, skip_incomplete: bool = SKIP,
    study: Optional[str] = STUDY,
) -> None:
    """Print per-layer SFM/entropy per run and paired effects for every pair."""
    from routestats.analysis import summary_tables
    tune_process_memory()

    print_tables(summary_tables(path, _settings(resamples=resamples, permutations=permutations, seed=seed, factor=factor,
                                          baseline=baseline, skip_incomplete=skip_incomplete, study=study)))


def _analysis(path, s, init_probe, workers):
    """The report's analysis as the renderer's cache asks for it (``compute(progress)``), with the process's memory
    settings and the freed memory handed back before each stage."""

    def compute(say):
        from routestats.analysis import analyse  # (pandas, scipy): not needed for a report from the cache
        from routestats.rundir.memory import release_unused_memory

        tune_process_memory()

        def stage(label):
            """Hand back what the last stage freed before the next begins: the heap keeps freed blocks for reuse
            within a stage (tune_process_memory), and the runs' metric frames are free by the figures."""
            release_unused_memory()
            say(label)

        return analyse(path, s, progress=stage, init_probe=init_probe, workers=workers)

    return compute


@command
def report(
    path: Path = typer.Argument(..., help="A pair folder (baseline + variants), a study or MoFA tree, or a run with "
                                          "regime operators."),
    out: Path = typer.Option(Path("report"), "-o", "--out", help="Output folder."),
    format: str = FORMAT,
    resamples: Optional[int] = RESAMPLES, permutations: Optional[int] = PERMUTATIONS, seed: Optional[int] = SEED,
    mode: Optional[str] = MODE, examples: Optional[str] = EXAMPLES, length_examples: Optional[str] = LENGTH_EXAMPLES,
    step: Optional[int] = STEP, factor: Optional[str] = FACTOR, baseline: Optional[str] = BASELINE,
    init_probe: Optional[Path] = typer.Option(None, help="Init-probe folder [default: PATH/init_probe when present]."),
    workers: int = typer.Option(2, help="Processes that reduce the runs of a tree in parallel (1 = in this process)."),
    pairs: Optional[str] = typer.Option(None, "--pairs", help="Per-pair parts of a tree report: auto (only for a "
                                                             "single pair), reference (standard SAAB pairs), all, none "
                                                             f"[default: {D.pairs}]."),
    skip_incomplete: bool = SKIP, study: Optional[str] = STUDY, force: bool = FORCE,
    flow: Optional[str] = typer.Option(None, "--flow", help="Norm-weighted and rollout SFM from the full matrices: on, "
                                                            f"off or auto (when they total at most "
                                                            f"{D.flow_max_mb} MB) [default: {D.flow}]."),
    figures: Optional[str] = typer.Option(None, "--figures", help="Comma list of copies of every figure "
                                                                  "besides the page's own (SVG for a pair, PNG "
                                                                  "otherwise): png, pdf, svg [default: none]."),
    word_example: Optional[int] = typer.Option(None, "--word-example", help="The example_id of the word-level map "
                                               "and explorer [default: the stated rule's choice]."),
) -> None:
    """Write OUT/report.html (self-contained), OUT/tables/*.tex|csv and OUT/figures/*.png|pdf|svg.

    A tree with several pairs gets a study report (seeds, sweeps, placement, shuffled control, depth, data sets,
    across-seed inference) before any per-pair parts."""
    from reports import publish

    formats = _formats(format)
    vector = None
    if figures is not None:
        vector = [f.strip() for f in figures.split(",") if f.strip()]
        if set(vector) - {"png", "pdf", "svg"}:
            _fail(f"--figures takes png, pdf and/or svg, got {figures!r}")
    s = _settings(resamples=resamples, permutations=permutations, seed=seed, mode=mode, examples=examples,
                  length_examples=length_examples, step=step, factor=factor, baseline=baseline, pairs=pairs,
                  skip_incomplete=skip_incomplete, study=study, flow=flow, word_example=word_example)
    inputs = [path] + ([init_probe] if init_probe is not None else [])
    with _progress() as say:  # the renderer decides whether its cache holds the report (one call)
        written = publish(_analysis(path, s, init_probe, workers), out, inputs, s.to_dict(), formats, vector, force,
                          progress=say, notice=lambda line: typer.echo(line, err=True))
    for name, p in written.items():
        typer.echo(f"{name}: {p}")


@command
def table(
    name: str = typer.Argument(..., help="A table name: any CSV file name a report writes. A study report also holds "
                                         "its pairs' tables when it shows them. " + table_help() + "."),
    path: Path = typer.Argument(..., help="What `routestats report` takes: a pair folder, a tree, a regime run."),
    format: str = typer.Option("latex", "--format", help="latex, csv or markdown."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Write to this file instead of standard output."),
    resamples: Optional[int] = RESAMPLES, permutations: Optional[int] = PERMUTATIONS, seed: Optional[int] = SEED,
    mode: Optional[str] = MODE, examples: Optional[str] = EXAMPLES, length_examples: Optional[str] = LENGTH_EXAMPLES,
    step: Optional[int] = STEP, skip_incomplete: bool = SKIP, study: Optional[str] = STUDY,
    flow: Optional[str] = typer.Option(None, "--flow", help="Norm-weighted and rollout SFM (norm_effects, "
                                                            "rollout_effects): on, off or auto [default: auto]."),
    wide: bool = typer.Option(False, "--wide", help="With --format latex: a float across both columns of a "
                                                    "two-column paper (table*)."),
) -> None:
    """Print (or write) one table of the report of PATH."""
    from routestats.analysis import analyse
    tune_process_memory()

    if format not in ("latex", "csv", "markdown"):
        _fail(f"--format must be latex, csv or markdown, got {format!r}")
    from routestats.table_names import REPORT_TABLES, unknown_table

    known = sorted({t for names in REPORT_TABLES.values() for t in names})
    said = unknown_table(name, known)
    if name not in known and not name.endswith("_effects") and "did you mean" in said:
        _fail(said)  # a typo of a table name is named before the analysis, not after it
    s = _settings(resamples=resamples, permutations=permutations, seed=seed, mode=mode, examples=examples,
                  length_examples=length_examples, step=step, skip_incomplete=skip_incomplete, study=study, flow=flow)
    import reports

    text = reports.table_text(analyse(path, s), name, format, wide=wide)
    if out is None:
        return typer.echo(text, nl=False)
    from routestats.rundir.atomic import write_text_atomic

    write_text_atomic(out, text)
    typer.echo(f"wrote {out}")


@command
def figure(
    name: str = typer.Argument(..., help="A figure of the report: answer (its first screen's), profile, flow, "
                                         "head_sfm, field_to_field, ... (a mistyped name lists them)."),
    path: Path = typer.Argument(..., help="What `routestats report` takes: a pair folder, a tree, a regime run."),
    out: Path = typer.Option(..., "-o", "--out", help="The file: .pdf (vector, for LaTeX), .svg or .png (300 dpi)."),
    width: Optional[str] = typer.Option(None, "--width", help="column (3.3 in), wide (7 in, both columns) or inches "
                                                              "[default: column for one panel, wide for several]."),
    height: Optional[float] = typer.Option(None, "--height", help="Inches [default: the figure's own aspect]."),
    resamples: Optional[int] = RESAMPLES, permutations: Optional[int] = PERMUTATIONS, seed: Optional[int] = SEED,
    mode: Optional[str] = MODE, examples: Optional[str] = EXAMPLES, length_examples: Optional[str] = LENGTH_EXAMPLES,
    step: Optional[int] = STEP, skip_incomplete: bool = SKIP, study: Optional[str] = STUDY,
    force: bool = typer.Option(False, "--force", help="Replace the file OUT when it exists."),
) -> None:
    """Write one figure of the report of PATH for a paper: a column's width, 8-9 pt text, vector PDF."""
    from routestats.analysis import analyse
    tune_process_memory()

    from reports.paper import checked_output, find, write_figure

    inches = checked_output(out, width, height, force)  # before the analysis, not after it
    s = _settings(resamples=resamples, permutations=permutations, seed=seed, mode=mode, examples=examples,
                  length_examples=length_examples, step=step, skip_incomplete=skip_incomplete, study=study)
    fig = find(analyse(path, s), name)
    typer.echo(f"wrote {write_figure(fig, out, inches, height)}")


@command
def plan(
    pilot: Path = typer.Argument(..., help="A pilot pair (what `routestats report` takes), or a tree of several seeds of "
                                           "the standard pair (then: how many seeds)."),
    delta: Optional[float] = typer.Option(None, "--delta", help="The true change of SFM to detect, every layer."),
    delta_per_layer: Optional[str] = typer.Option(None, "--delta-per-layer", help="Comma list: one change per layer."),
    power: float = typer.Option(0.8, "--power", help="The power to reach (of the hardest layer)."),
    alpha: Optional[float] = typer.Option(None, "--alpha", help=f"The report's alpha [default: {D.alpha}]."),
    spread: str = typer.Option("upper", "--spread", help="The pilot's spread to plan from: upper (its upper "
                                                         "confidence bound: 85% for a pair's layers, 80% for a "
                                                         "study's seeds), pilot (as observed, the power averaged "
                                                         "over its uncertainty) or a multiple of it."),
    sims: int = typer.Option(1000, "--sims", help="Simulated samples per size."),
    max_examples: int = typer.Option(4096, "--max-examples", help="The largest number of examples tried."),
    max_seeds: int = typer.Option(30, "--max-seeds", help="The largest number of seeds tried."),
    out: Path = typer.Option(Path("plan"), "-o", "--out", help="Output folder."),
    format: str = FORMAT, resamples: Optional[int] = RESAMPLES, permutations: Optional[int] = PERMUTATIONS,
    seed: Optional[int] = SEED, force: bool = FORCE,
) -> None:
    """How many examples (or seeds) the report's own test needs to see a true change, from a pilot."""
    from reports.folder import check_output

    formats = _formats(format)
    if (delta is None) == (delta_per_layer is None):
        _fail("give the change to detect: --delta D, or --delta-per-layer D0,D1,...")
    try:
        change = delta if delta is not None else tuple(float(v) for v in delta_per_layer.split(","))
    except ValueError:
        _fail(f"--delta-per-layer takes a comma list of numbers, one per layer, got {delta_per_layer!r}")
    try:
        how = spread if spread in ("upper", "pilot") else float(spread)
    except ValueError:
        _fail(f"--spread takes upper, pilot or a multiple of the pilot's spread, got {spread!r}")
    from routestats.compose.plan import PlanQuestion, build_plan_report

    q = PlanQuestion(delta=change, power=power, spread=how, sims=sims, max_examples=max_examples, max_seeds=max_seeds)
    s = _settings(resamples=resamples, permutations=permutations, seed=seed, alpha=alpha)
    check_output(out, force, [pilot])
    with _progress() as say:
        rep = build_plan_report(pilot, q, s, progress=say)
    from routestats.usage import printable

    for line in rep.headline + rep.findings:
        typer.echo(textwrap.fill(printable(line), width=100))
    import reports

    for name, p in reports.write(rep, out, formats, force=force, inputs=[pilot]).items():
        typer.echo(f"{name}: {p}")


@command
def regime(
    source: Path = typer.Argument(..., help="A run directory with operators/ (python -m runners regime), one .npz "
                                            "with J_T, J_Q, J_K, or a folder of several models' operator folders "
                                            "(the cross-architecture comparison by normalised depth)."),
    layer: Optional[int] = typer.Option(None, help="Only this layer [default: every stored layer]."),
    example: Optional[int] = typer.Option(None, help="Only this example [default: every stored example]."),
    token: Optional[int] = typer.Option(None, help="Only this query token [default: every stored token]."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Report folder: report.html, tables (CSV, LaTeX), figures."),
    probes: Optional[int] = typer.Option(None, help="Random directions inside S and in the ambient space per point "
                                                    f"[default: {D.probes}]."),
    every: bool = typer.Option(False, "--all", help="Print every point and the regime counts and search quality "
                                                    "tables too [default: the answer and up to 20 points]."),
    format: str = FORMAT,
    seed: Optional[int] = SEED,
    force: bool = FORCE,
) -> None:
    """Spectral certification of gating-induced regime switching at one operating point or over a grid."""
    from reports.folder import check_output
    from routestats.compose.regime.build import build_regime_report, terminal_summary

    if not source.exists():
        _fail(f"{source}: no such file or directory")
    formats = _formats(format)
    if out is not None:
        check_output(out, force, [source])
    settings = _settings(layer=layer, example=example, token=token, probes=probes, seed=seed)
    from routestats.rundir.manifest import model_folders

    if source.is_dir() and not (source / "operators").is_dir() and model_folders(source):
        from routestats.compose.regime.compare import build_comparison_report, comparison_terminal_tables

        if any(v is not None for v in (layer, example, token)):
            _fail(f"{source} holds several models' operators; --layer, --example and --token select points of one "
                  "model: give its folder")
        rep = build_comparison_report(source, settings)
        print_tables(comparison_terminal_tables(rep))
    else:
        rep = build_regime_report(source, settings)
        import shutil

        head, tables, tail = terminal_summary(rep, every, min(100, shutil.get_terminal_size((100, 24)).columns))
        from routestats.usage import printable

        typer.echo("\n".join(printable(line) for line in head))
        print_tables(tables)
        typer.echo("\n".join(printable(line) for line in tail))
    import reports

    for name, p in (reports.write(rep, out, formats, force=force, inputs=[source]) if out is not None else {}).items():
        typer.echo(f"{name}: {p}")


def main() -> None:
    """Console entry point (usage errors in one line: :func:`routestats.usage.run_console`)."""
    from routestats.usage import run_console

    run_console(app)


if __name__ == "__main__":  # pragma: no cover
    main()
