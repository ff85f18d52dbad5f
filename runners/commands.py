"""The bodies of ``python -m runners`` commands: plain functions over parsed options, each testable
without the command line. User errors raise :class:`~routestats.errors.RoutestatsError` (the CLI
prints one line and exits 2); ``echo`` prints a result line on standard output.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable

from routestats.errors import RoutestatsError
from routestats.rundir import schema as S

from runners.launch import make_launcher
from runners.progress import job_reporter, progress_bars
from runners.threads import set_threads

Echo = Callable[[str], None]


def _int_list(text: str, option: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise RoutestatsError(f"{option} {text!r}: expected whole numbers separated by commas") from None


def _preset_and_conditions(preset, conditions, *, depth=None, max_steps=None, checkpoint_steps=None, **train):
    from runners.training.presets import get_preset, parse_condition

    try:
        p = get_preset(preset, depth=depth, max_steps=max_steps,
                       checkpoint_steps=None if checkpoint_steps is None else _int_list(checkpoint_steps,
                                                                                      "--checkpoint-steps"))
        if train:
            p = replace(p, train=replace(p.train, **train))
        return p, [parse_condition(c, p.model["num_layers"]) for c in conditions.split(",") if c.strip()]
    except ValueError as exc:
        raise RoutestatsError(str(exc)) from None


def _data(spec: str):
    from runners.training.data import resolve

    try:
        return resolve(spec)
    except (ValueError, FileNotFoundError) as exc:
        raise RoutestatsError(str(exc)) from None


def saab(*, out: Path, preset, seed, conditions, data, depth, max_steps, device, attention, threads, keep_checkpoints,
         study, examples, length_sample, sample_seed, checkpoint_steps, echo: Echo) -> None:
    """Train a paired condition set from one seed into a run tree."""
    from runners.training.train import train_study

    set_threads(threads)
    train = {"length_sample": length_sample, "sample_seed": sample_seed,
             **({"eval_examples": examples} if examples is not None else {})}
    p, conds = _preset_and_conditions(preset, conditions, depth=depth, max_steps=max_steps,
                                      checkpoint_steps=checkpoint_steps, **train)
    spec = _data(data)
    with progress_bars() as (_, progress):
        paths = train_study(out, data=spec, preset=p, conditions=conds, seed=seed, study=study, device=device,
                            attention_impl=attention, keep_checkpoints=keep_checkpoints, progress=progress)
    for path in paths:
        echo(f"run complete: {path}")


def sweep(*, out: Path, seeds, conditions, preset, data, depth, max_steps, device, threads, keep_checkpoints, study,
          launcher, slurm_partition, timeout_min, gpus_per_node, echo: Echo) -> int:
    """Train seeds x conditions (one job per seed); returns the exit code (1 when a seed failed)."""
    from runners.training.sweep import run_sweep

    set_threads(threads)
    p, conds = _preset_and_conditions(preset, conditions, depth=depth, max_steps=max_steps)
    seed_list, spec = _int_list(seeds, "--seeds"), _data(data)
    runner = make_launcher(launcher, out, timeout_min=timeout_min, slurm_partition=slurm_partition,
                           gpus_per_node=gpus_per_node)
    with progress_bars() as (bar, progress):
        res = run_sweep(out, seeds=seed_list, conditions=conds, preset=p, data=spec, study=study, device=device,
                        keep_checkpoints=keep_checkpoints, progress=progress if runner is None else None,
                        on_run=bar.console.log, launcher=runner, threads=threads)
    echo(f"{len(res.complete)} trained, {len(res.skipped)} already complete, {len(res.failed)} seed(s) failed")
    for seed, log in res.failed.items():
        bar.console.log(f"seed {seed} failed: see {log}")
    return 1 if res.failed else 0


def evaluate(*, pair: Path, out, bias, sample_size, sample_seed, batch_size, device, threads, echo: Echo,
             include_bias_off: bool = False, force: bool = False) -> None:
    """A test-sample evaluation of a pair, or a bias-off evaluation of a SAAB run (``bias="off"``)."""
    from runners.training.evaluate import evaluate_bias_off, evaluate_split

    set_threads(threads)
    if bias not in ("on", "off"):
        raise RoutestatsError(f"--bias must be on or off, got {bias!r}")
    if bias == "off":
        echo(f"run complete: {evaluate_bias_off(pair, out, batch_size=batch_size, device=device, progress=echo)}")
        return
    if out is None:
        raise RoutestatsError("--out is required for the test-sample evaluation")
    try:
        paths = evaluate_split(pair, out, sample_size=sample_size, sample_seed=sample_seed, batch_size=batch_size,
                               device=device, include_bias_off=include_bias_off, progress=echo, force=force)
    except FileNotFoundError as exc:
        raise RoutestatsError(str(exc)) from None
    for p in paths:
        echo(f"run complete: {p}")
    echo(f"next: routestats report {out}")


MOFA_PRESETS = {"tiny": dict(steps=300, n_ctx=64, n_layer=4, n_head=4, d_model=128),
                "paper": dict(steps=50_000, n_ctx=1024, n_layer=12, n_head=12, d_model=768)}


def mofa(*, out: Path, seeds, sigmoid_heads, domains_dir: Path, preset, steps, n_ctx, n_layer, n_head, d_model,
         concat_scope, separator, sigmoid_bias, device, threads, echo: Echo) -> None:
    """Train MoFA GPTs (ratios x seeds), score every domain, dump head entropies."""
    from runners.training.domains import docstrings_domain, read_domain
    from runners.training.mofa import GPTConfig, MoFATrain, train_mofa_run

    set_threads(threads)
    files = sorted(p for p in domains_dir.iterdir() if p.suffix in (".jsonl", ".parquet", ".txt")) \
        if domains_dir.is_dir() else []
    if not files:
        raise RoutestatsError(f"no domain files in {domains_dir} (run: python -m runners domains)")
    if preset not in MOFA_PRESETS:
        raise RoutestatsError(f"unknown preset {preset!r}: {', '.join(MOFA_PRESETS)}")
    try:
        bias = float(sigmoid_bias)
    except ValueError:
        bias = sigmoid_bias
    given = dict(steps=steps, n_ctx=n_ctx, n_layer=n_layer, n_head=n_head, d_model=d_model)
    c = {**MOFA_PRESETS[preset], **{k: v for k, v in given.items() if v is not None}}
    doms, train_text = {p.stem: read_domain(p) for p in files}, docstrings_domain("train")
    runs = [(seed, k) for seed in _int_list(seeds, "--seeds") for k in _int_list(sigmoid_heads, "--sigmoid-heads")]
    with progress_bars() as (_, progress):
        for i, (seed, k) in enumerate(runs, 1):  # "run i of n: seed<S>/ratio-..." with the job's ETA
            cfg = GPTConfig(n_ctx=c["n_ctx"], n_layer=c["n_layer"], n_head=c["n_head"], d_model=c["d_model"],
                            n_sigmoid=k, sigmoid_bias=bias)
            target = out / f"seed{seed}" / f"ratio-{c['n_head'] - k}-{k}"
            kept = (target / S.MANIFEST).is_file()
            train_mofa_run(target, cfg=cfg, train_text=train_text,
                           domains=doms, seed=seed, device=device, progress=job_reporter(progress, i, len(runs)),
                           tc=MoFATrain(steps=c["steps"], concat_scope=concat_scope, separator=separator))
            if kept:  # reached only when its settings are these (otherwise refused, naming what differs)
                echo(f"{target}: complete with these settings; kept")
    echo(f"runs under {out}")


def regime(*, run, layers, examples, token, domain_file, out, max_tokens, lattice, eps_rel, seed, threads,
           echo: Echo, depths: int | None = None, force: bool = False) -> None:
    """Operators over a grid of operating points, validated, into RUN/operators/ (several pretrained checkpoints:
    OUT/<model name>/operators/ each)."""
    from runners.regime.grid import is_pretrained, model_name, write_operators

    set_threads(threads)
    if (layers is None) == (depths is None):
        raise RoutestatsError("name the layers (--layers 0,3) or the number of normalised depths (--depths 7), not both")
    ls, es = (_int_list(layers, "--layers") if layers else None), _int_list(examples, "--examples")
    runs = [Path(r) for r in ([run] if isinstance(run, (str, Path)) else run)]
    missing = [r for r in runs if not r.exists()]
    if missing:
        raise RoutestatsError(f"{missing[0]}: no such file or directory")
    targets = [(r, out) for r in runs]
    if len(runs) > 1:
        if out is None or not all(is_pretrained(r) for r in runs):
            raise RoutestatsError("several models are compared as pretrained checkpoints with --out: each goes to "
                                  "OUT/<model name>/operators/")
        names = [model_name(r) for r in runs]
        if len(set(names)) < len(names):
            raise RoutestatsError(f"two checkpoints share a name ({', '.join(names)}); give each its own folder name")
        targets = [(r, Path(out) / n) for r, n in zip(runs, names)]
    total = len(ls or range(depths)) * len(es) * len(targets)
    written = []
    with progress_bars() as (_, bar):
        started = []

        def say(label):
            bar("operators", len(started), total)
            started.append(label)

        for r, o in targets:
            written.append(write_operators(r, ls, es, token, depths=depths, domain_file=domain_file, lattice=lattice,
                                           eps_rel=eps_rel, seed=seed, out=o, max_tokens=max_tokens, progress=say,
                                           force=force))
        bar("operators", total, total)
    for idx in written:
        pts = json.loads(idx.read_text())["points"]
        worst = max(max(v for k, v in p["errors"].items() if k.startswith("J_")) for p in pts)
        echo(f"{len(pts)} operating points in {idx}; max |analytic - autograd| = {worst:.2e}")
    if len(targets) > 1:
        echo(f"compare them: routestats regime {out} -o {Path(out).name}-report")


def clear_written(out: Path, echo: Echo) -> None:
    """Remove from ``out`` only what its runs wrote (their manifests' files, unchanged); anything else stays."""
    from routestats.rundir.ownership import written_by_runs
    from routestats.rundir.replace import describe_paths, remove_written

    if out.exists():
        left = remove_written(out, written_by_runs(out))
        if left:
            echo(f"{out}: kept {len(left)} file(s) no run wrote, in place ({describe_paths(left)})")


def demo(*, out: Path, threads, echo: Echo) -> None:
    """Regenerate the recorded demo run (tiny preset, baseline + SAAB, seed 1001, 32 examples)."""
    from runners.training.train import train_study

    set_threads(threads)
    p, conds = _preset_and_conditions("tiny", "baseline,saab", eval_examples=32, final_forms=("matrices",))
    from runners.outputs import check_replaceable

    check_replaceable(out)  # the runs of an earlier demo only: never a folder holding anything else
    clear_written(out, echo)
    with progress_bars() as (_, progress):
        paths = train_study(out, data=_data("bundled-dbpedia"), preset=p, conditions=conds, seed=1001, study="demo",
                            device="cpu", keep_checkpoints="none", progress=progress)
    for path in paths:
        echo(f"run complete: {path}")


def demo_study(*, out: Path, seeds, threads, echo: Echo) -> None:
    """Regenerate the recorded demo study (tiny preset, baseline + SAAB for each seed, reductions only)."""
    from runners.training.sweep import run_sweep

    set_threads(threads)
    p, conds = _preset_and_conditions("tiny", "baseline,saab", eval_examples=32, final_forms=("reductions",))
    p = replace(p, train=replace(p.train, checkpoint_steps=(1, 500)))
    from runners.outputs import check_replaceable

    check_replaceable(out)  # the runs of an earlier demo only: never a folder holding anything else
    clear_written(out, echo)
    with progress_bars() as (_, progress):
        res = run_sweep(out, seeds=_int_list(seeds, "--seeds"), conditions=conds, preset=p,
                        data=_data("bundled-dbpedia"), study="demo", device="cpu", keep_checkpoints="none",
                        progress=progress)
    if res.failed:
        raise RoutestatsError(f"seeds {sorted(res.failed)} failed; logs: {', '.join(res.failed.values())}")
    for path in res.complete:
        echo(f"run complete: {path}")


# the extras of pyproject.toml and the modules each installs; a missing module's hint names the extra of the
# running command when that extra installs it (capture: torch comes with .[capture]), else the first here
EXTRA_MODULES = {"train": ("torch", "tokenizers", "submitit"), "capture": ("torch", "transformers", "accelerate", "gguf"),
                 "datasets": ("datasets",)}
EXTRAS = {m: name for name, mods in reversed(EXTRA_MODULES.items()) for m in mods}


@contextlib.contextmanager
def extra(name: str):
    """Inside, a missing module that the extra ``name`` installs gets ``pip install -e '.[name]'`` as its hint
    (capture needs torch too, but ``.[capture]`` brings it: ``.[train]`` would be a wrong first step)."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in EXTRA_MODULES[name] and not hasattr(exc, "extra"):
            exc.extra = name
        raise


def _fail(message: str, code: int = 2):
    print(message, file=sys.stderr)
    raise SystemExit(code)


# what an interrupted command leaves that its rerun keeps (runners/__main__.py's commands by name)
KEPT_ON_INTERRUPT = {
    "saab": "each run resumes from its last checkpoint and complete runs are skipped",
    "sweep": "each run resumes from its last checkpoint and complete runs are skipped",
    "capture": "finished capture shards are kept (a capture without --shards starts again)",
    "mofa": "complete runs of the same settings and inputs are kept (an unfinished run is trained again)",
    "regime": "operating points already written are kept",
}


def interrupted(command: str | None) -> None:
    """Ctrl-C of a runners command: one line saying what is kept and the command that goes on, exit 130."""
    import shlex

    kept = KEPT_ON_INTERRUPT.get(command or "", "nothing of this command is half-written (every file is written "
                                                "whole or not at all)")
    again = "python -m runners " + shlex.join(sys.argv[1:]) if len(sys.argv) > 1 else "the same command"
    _fail(f"interrupted: {kept}; to go on, run again: {again}", 130)


@contextlib.contextmanager
def one_line_errors():
    """What the runners CLI does with an exception: a user error (:class:`RoutestatsError`), a missing
    optional dependency or a failed file operation -> one line, exit 2; Ctrl-C -> exit 130; anything
    else (a bug) -> one line, exit 1, unless ``ROUTESTATS_DEBUG=1`` asks for the traceback."""
    try:
        yield
    except RoutestatsError as exc:
        _fail(f"error: {exc}")
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0] or exc.name  # transformers.utils -> transformers, the package
        needed = getattr(exc, "extra", None) or EXTRAS.get(top)
        hint = f"pip install -e '.[{needed}]'" if needed else f"pip install {top}"
        _fail(f"error: this command needs {top}, which is not installed: {hint}")
    except OSError as exc:  # permissions, a full disk, a vanished file
        _fail(f"error: {(exc.filename + ': ') if getattr(exc, 'filename', None) else ''}{exc.strerror or exc}")
    except KeyboardInterrupt:
        interrupted(sys.argv[1] if len(sys.argv) > 1 else None)
    except Exception as exc:  # a bug: still one line
        if os.environ.get("ROUTESTATS_DEBUG"):
            raise
        first = str(exc).splitlines()[0] if str(exc) else ""
        _fail(f"internal error: {type(exc).__name__}: {first} (a routestats bug; rerun with ROUTESTATS_DEBUG=1 for "
              "the traceback)", 1)
