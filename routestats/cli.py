"""The ``routestats`` command line: a thin shell over the library.

Each command parses its options, makes one library call and prints or writes the result.
User errors (bad paths, broken runs, bad options) exit with code 2 and one line on stderr.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Statistics of attention routing in paired Transformer runs.",
    pretty_exceptions_enable=False,
)


# Options shared by the analysis commands (one definition each).
RESAMPLES = typer.Option(10_000, help="Bootstrap resamples.")
PERMUTATIONS = typer.Option(20_000, help="Sign-flip draws.")
SEED = typer.Option(1001, help="Seed of the random procedures.")
MODE = typer.Option("shared", help="RNG procedure: shared, numpy or python-random (reference modes).")
EXAMPLES = typer.Option("all", help="Examples analysed: all, primary, length_sample or test_sample.")
STEP = typer.Option(None, help="Checkpoint step (default: the final one).")
FACTOR = typer.Option("variant", help="Factor whose levels form the pairs.")
BASELINE = typer.Option("baseline", help="Level of FACTOR that is the baseline.")


def _fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code=2)


def _report_formats(text: str) -> list[str]:
    """The --format list of report commands: html and/or latex."""
    formats = [f.strip() for f in text.split(",") if f.strip()]
    if not formats or set(formats) - {"html", "latex"}:
        _fail(f"--format takes html and/or latex, got {text!r}")
    return formats


def command(fn):
    """Register ``fn`` as a command whose user errors become one line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from routestats.errors import RoutestatsError

        try:
            return fn(*args, **kwargs)
        except RoutestatsError as exc:
            _fail(str(exc))
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(code=130)

    return app.command()(wrapper)


def _load(path: Path):
    """A Run when ``path`` holds run.json, else a RunCollection of the tree."""
    from routestats.rundir.read import load_run, load_runs
    from routestats.rundir.schema import MANIFEST

    if not path.exists():
        _fail(f"{path}: no such file or directory")
    if (path / MANIFEST).is_file():
        return load_run(path)
    return load_runs(path)


def _console():
    from rich.console import Console

    return Console()


def _frame_table(df, title: str, floatfmt: str = "{:.4f}"):
    from rich.table import Table

    t = Table(title=title, show_lines=False)
    for c in df.columns:
        t.add_column(str(c), justify="right" if df[c].dtype.kind in "fiu" else "left")
    for row in df.itertuples(index=False):
        t.add_row(*[floatfmt.format(v) if isinstance(v, float) else str(v) for v in row])
    return t


@command
def info(path: Path = typer.Argument(..., help="A run directory or a tree of runs.")) -> None:
    """Say what a run or a run tree holds."""
    from routestats.rundir.read import Run

    obj = _load(path)
    con = _console()
    runs = [obj] if isinstance(obj, Run) else list(obj)
    import pandas as pd

    rows = []
    for r in runs:
        rows.append(
            {
                "run_id": r.run_id,
                "study": r.study,
                "seed": r.seed,
                **{k: str(v) for k, v in r.factors.items()},
                "examples": len(r.examples(["example_id"])),
                "steps": ",".join(map(str, r.attention_steps)),
                "final forms": ",".join(r.attention_forms()) if r.attention_steps else "",
                "init": r.init_id[:10],
            }
        )
    con.print(_frame_table(pd.DataFrame(rows), f"{len(runs)} run(s) under {path}"))


@command
def validate(
    path: Path = typer.Argument(..., help="A run directory or a tree of runs."),
    quick: bool = typer.Option(False, "--quick", help="Skip file and content hashes."),
) -> None:
    """Check runs against the run-directory contract (every file, hash and value)."""
    from routestats.rundir.read import Run

    obj = _load(path)
    runs = [obj] if isinstance(obj, Run) else list(obj)
    for r in runs:
        checks = r.validate(deep=not quick)
        typer.echo(f"ok  {r.run_id}: " + "; ".join(checks))


@command
def summary(
    path: Path = typer.Argument(..., help="A run directory, a pair, or a tree of runs."),
    resamples: int = RESAMPLES,
    permutations: int = PERMUTATIONS,
    seed: int = SEED,
    factor: str = FACTOR,
    baseline: str = BASELINE,
) -> None:
    """Print per-layer SFM/entropy per run and paired effects for every pair."""
    from routestats.studies.effects import paired_effects
    from routestats.rundir.read import Run, RunCollection
    from routestats.metrics.routing import layer_summary

    obj = _load(path)
    con = _console()
    runs = [obj] if isinstance(obj, Run) else list(obj)
    for r in runs:
        t = layer_summary(r)[["layer", "sfm", "entropy", "n_examples"]]
        con.print(_frame_table(t, f"{r.run_id} (step {r.final_step})"))
    if isinstance(obj, RunCollection) and factor in obj.index.columns:
        for p in obj.pairs(factor=factor, baseline=baseline):
            e = paired_effects(p, resamples=resamples, permutations=permutations, seed=seed)
            cols = ["layer", "baseline_mean", "variant_mean", "mean_diff", "ci_low", "ci_high", "dz", "p_holm"]
            con.print(_frame_table(e[cols], f"paired SFM: {p.variant.run_id} - {p.baseline.run_id}"))


def _pairs_of(obj, factor: str, baseline: str):
    from routestats.errors import RoutestatsError
    from routestats.rundir.read import Run

    if isinstance(obj, Run):
        raise RoutestatsError(
            f"{obj.path} is a single run; give the folder holding the baseline and variant runs"
        )
    pairs = obj.pairs(factor=factor, baseline=baseline)
    if not pairs:
        raise RoutestatsError(f"no {factor}={baseline} baseline with a paired variant found")
    return pairs


def _settings(resamples, permutations, seed, mode, examples, step):
    from routestats.studies.pair_report import ReportSettings
    from routestats.stats.inference import MODES

    if mode not in MODES:
        _fail(f"--mode must be one of {', '.join(MODES)}")
    return ReportSettings(resamples=resamples, permutations=permutations, seed=seed, mode=mode, examples=examples,
                          step=step)


@command
def report(
    path: Path = typer.Argument(..., help="A folder holding a baseline and its variant run(s), or a tree of such pairs."),
    out: Path = typer.Option(Path("report"), "-o", "--out", help="Output folder."),
    format: str = typer.Option("html,latex", "--format", help="Comma list of html, latex."),
    resamples: int = RESAMPLES,
    permutations: int = PERMUTATIONS,
    seed: int = SEED,
    mode: str = MODE,
    examples: str = EXAMPLES,
    step: Optional[int] = STEP,
    factor: str = FACTOR,
    baseline: str = BASELINE,
    init_probe: Optional[Path] = typer.Option(None, help="Init-probe folder (default: PATH/init_probe when present)."),
    workers: int = typer.Option(2, help="Processes that reduce the attention of many runs in parallel (through the "
                                        "on-disk cache; 1 = in this process)."),
    pairs: str = typer.Option("auto", "--pairs", help="Per-pair sections: auto (only for a single pair), "
                                                     "reference (standard SAAB pairs), all, none."),
) -> None:
    """Write OUT/report.html (self-contained), OUT/tables/*.tex|csv and OUT/figures/*.png|pdf.

    A tree with several pairs gets a study section (seeds, sweeps, placement, shuffled control,
    depth, data sets, across-seed inference) before any per-pair sections."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from routestats.studies.pair_report import build_pair_report

    formats = _report_formats(format)
    settings = _settings(resamples, permutations, seed, mode, examples, step)
    if pairs not in ("auto", "reference", "all", "none"):
        _fail(f"--pairs must be auto, reference, all or none, got {pairs!r}")
    obj = _load(path)
    import reports

    from routestats.rundir.read import RunCollection
    from routestats.metrics.routing import warm_cache

    if isinstance(obj, RunCollection) and workers > 1:
        warm_cache(obj, workers=workers)

    if isinstance(obj, RunCollection) and "ratio" in obj.index.columns and factor not in obj.index.columns:
        from routestats.studies.mofa_report import build_mofa_report

        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=True) as bar:
            task = bar.add_task("loading", total=None)
            say = lambda label: bar.update(task, description=label)  # noqa: E731
            written = reports.render([build_mofa_report(obj, progress=say)], out, formats, progress=say)
        for name, p in written.items():
            typer.echo(f"{name}: {p}")
        return
    found = _pairs_of(obj, factor, baseline)

    from routestats.studies.study_report import StudySettings, build_study_report

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=True) as bar:
        task = bar.add_task("loading", total=None)
        say = lambda label: bar.update(task, description=label)  # noqa: E731
        built = []
        if len(found) > 1:
            probe = init_probe or (path / "init_probe" if (path / "init_probe" / "probe.json").is_file() else None)
            lengths_dir = path / "lengths" if (path / "lengths").is_dir() else None
            built.append(build_study_report(obj, StudySettings(resamples=resamples, seed=seed,
                                                               examples=examples, step=step), progress=say,
                                            init_probe=probe, lengths=lengths_dir))
        mode_pairs = ("all" if len(found) == 1 else "none") if pairs == "auto" else pairs
        if mode_pairs == "reference":
            found = [p for p in found if p.variant.factors.get("variant") == "saab"
                     and float(p.variant.factors.get("w_f", 1.0)) == 1.0
                     and p.variant.factors.get("bias_layers", "all") == "all"]
        if mode_pairs != "none":
            built += [build_pair_report(p, settings, progress=say) for p in found]
        written = reports.render(built, out, formats, progress=say)
    for name, p in written.items():
        typer.echo(f"{name}: {p}")


TABLES = ("performance", "layers", "effects", "entropy_effects", "adjusted", "field_to_field", "head_sfm",
          "trajectory", "gradients", "word_map")


@command
def table(
    name: str = typer.Argument(..., help=f"One of: {', '.join(TABLES)}."),
    path: Path = typer.Argument(..., help="A folder holding a baseline and its variant run."),
    format: str = typer.Option("latex", "--format", help="latex, csv or markdown."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Write to this file instead of standard output."),
    resamples: int = RESAMPLES,
    permutations: int = PERMUTATIONS,
    seed: int = SEED,
    mode: str = MODE,
    examples: str = EXAMPLES,
    step: Optional[int] = STEP,
) -> None:
    """Print (or write) one table of the report for a single pair."""
    from routestats.rundir.atomic import write_text_atomic
    from routestats.studies.pair_report import build_pair_report

    if name not in TABLES:
        _fail(f"unknown table {name!r}; choose from {', '.join(TABLES)}")
    if format not in ("latex", "csv", "markdown"):
        _fail(f"--format must be latex, csv or markdown, got {format!r}")
    pairs = _pairs_of(_load(path), "variant", "baseline")
    if len(pairs) != 1:
        _fail(f"{path} holds {len(pairs)} pairs; point at one pair's folder")
    rep = build_pair_report(pairs[0], _settings(resamples, permutations, seed, mode, examples, step))
    tables = rep.tables()
    if name not in tables:
        _fail(f"table {name!r} is not available for this pair (no data for it)")
    from reports.formatting import report_specs
    from reports.render import table_text

    spec = report_specs(rep).get(name)
    try:
        text = table_text(tables[name], spec, format)
    except ValueError as exc:
        _fail(str(exc))
    if out is None:
        typer.echo(text, nl=False)
    else:
        write_text_atomic(out, text)
        typer.echo(f"wrote {out}")


@command
def regime(
    source: Path = typer.Argument(..., help="A run directory with operators/ (python -m runners regime) or one .npz "
                                            "with J_T, J_Q, J_K."),
    layer: Optional[int] = typer.Option(None, help="Only this layer (default: every stored layer)."),
    example: Optional[int] = typer.Option(None, help="Only this example (default: every stored example)."),
    token: Optional[int] = typer.Option(None, help="Only this query token (default: every stored token)."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Report folder: report.html, tables (CSV, LaTeX), figures."),
    probes: int = typer.Option(512, help="Random directions inside S and in the ambient space per point."),
    format: str = typer.Option("html,latex", help="Report formats: html and/or latex."),
    seed: int = SEED,
) -> None:
    """Spectral certification of gating-induced regime switching at one operating point or over a grid."""
    from routestats.regime.report import build_regime_report

    if not source.exists():
        _fail(f"{source}: no such file or directory")
    formats = _report_formats(format)
    con = _console()
    rep = build_regime_report(source, layer, example, token, probes=probes, seed=seed)
    cols = ["layer", "example", "token", "dim_S", "lambda_max", "d_sw", "tau_cert", "tau_max_dual", "max_error"]
    summ = rep.frames["summary"]
    short = lambda df: df.map(lambda v: f"{v:.4g}" if isinstance(v, float) else str(v))  # noqa: E731
    con.print(_frame_table(short(summ[[c for c in cols if c in summ]]), f"regime switching: {source.name}"))
    if "regimes" in rep.frames:
        counts = (rep.frames["regimes"].pivot_table(index=["layer", "example", "token", "source"], columns="regime",
                                                    values="count", sort=False, dropna=False, aggfunc="sum")
                  .fillna(0).astype(int).reset_index())
        con.print(_frame_table(counts.astype(str), "regime counts by direction set"))
    if "search" in rep.frames:
        con.print(_frame_table(short(rep.frames["search"]), "search quality: blind ambient vs oracle in S vs spectral"))
    if out is not None:
        import reports

        written = reports.render([rep], out, formats)
        for name, p in written.items():
            typer.echo(f"{name}: {p}")


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
