"""``python -m runners``: train paired SAAB studies and build the bundled data.

Examples::

    python -m runners saab --preset tiny --seed 1001 --out runs/seed1001
    python -m runners saab --preset tiny --seed 1001 --conditions baseline,saab,wf=0.5,wf=2,shuffled --out runs/s1001
    python -m runners bundled --out data
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Train paired Transformer runs and write them as routestats run directories.")


@app.command()
def saab(
    out: Path = typer.Option(..., help="Output run tree: one run per condition under OUT/<condition>."),
    preset: str = typer.Option("tiny", help="Model/training preset: tiny (CPU), paper (GPU), smoke (tests)."),
    seed: int = typer.Option(1001, help="Run seed: init, data order and masks."),
    conditions: str = typer.Option("baseline,saab", help="Comma list: baseline, saab, wf=X, last-only, not-last, layers=..., shuffled."),
    data: str = typer.Option("bundled-dbpedia", help="bundled-dbpedia, bundled-pubmed, dbpedia:DIR or pubmed:DIR."),
    depth: Optional[int] = typer.Option(None, help="Number of layers (default: the preset's)."),
    max_steps: Optional[int] = typer.Option(None, help="Override the preset's optimizer steps."),
    device: str = typer.Option("auto", help="auto (CUDA if present), cpu or cuda[:N]."),
    attention: str = typer.Option("explicit", help="Training attention path: explicit or fused (SDPA)."),
    threads: Optional[int] = typer.Option(None, help="torch CPU threads (default: torch's)."),
    keep_checkpoints: str = typer.Option("last", help="Checkpoint files kept when a run completes: all, last, none."),
    study: str = typer.Option("saab", help="Study name recorded in each manifest."),
) -> None:
    """Train a paired condition set (baseline, SAAB variants) from one seed into a run tree."""
    import torch
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from routestats.errors import RoutestatsError

    from .data import resolve
    from .presets import get_preset, parse_condition
    from .train import train_study

    if threads:
        torch.set_num_threads(threads)
    try:
        p = get_preset(preset, depth=depth, max_steps=max_steps)
        conds = [parse_condition(c, p.model["num_layers"]) for c in conditions.split(",") if c.strip()]
        spec = resolve(data)
    except (ValueError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), TimeRemainingColumn()) as bar:
        tasks = {}

        def progress(run_id, step, total):
            if run_id not in tasks:
                tasks[run_id] = bar.add_task(run_id, total=total)
            bar.update(tasks[run_id], completed=step)

        try:
            paths = train_study(out, data=spec, preset=p, conditions=conds, seed=seed, study=study, device=device,
                                attention_impl=attention, keep_checkpoints=keep_checkpoints, progress=progress)
        except RoutestatsError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2)
    for path in paths:
        typer.echo(f"run complete: {path}")


@app.command()
def demo(out: Path = typer.Option(Path("data/demo_run"), help="Where to write the demo run tree."),
         threads: int = typer.Option(2, help="torch CPU threads.")) -> None:
    """Regenerate the recorded demo run: tiny preset, baseline + SAAB, seed 1001, bundled DBpedia-format data.

    32 primary examples; per-query reductions at steps 1..300 (trajectories) and full matrices
    at step 500; no checkpoint files, so it stays small enough to commit.
    """
    import shutil
    from dataclasses import replace

    import torch

    from .data import resolve
    from .presets import get_preset, parse_condition
    from .train import train_study

    torch.set_num_threads(threads)
    p = get_preset("tiny")
    p = replace(p, train=replace(p.train, eval_examples=32, final_forms=("matrices",)))
    if out.exists():
        shutil.rmtree(out)
    paths = train_study(out, data=resolve("bundled-dbpedia"), preset=p,
                        conditions=[parse_condition(c, 4) for c in ("baseline", "saab")], seed=1001, study="demo",
                        device="cpu", keep_checkpoints="none")
    for path in paths:
        typer.echo(f"run complete: {path}")


@app.command()
def bundled(out: Path = typer.Option(Path("data"), help="Output folder."),
            check: bool = typer.Option(False, help="Rebuild in a temporary folder and compare bytes.")) -> None:
    """Build the bundled docstring corpora (see runners/bundled.py)."""
    from .bundled import main

    raise typer.Exit(main(["--out", str(out)] + (["--check"] if check else [])))


if __name__ == "__main__":
    app()
