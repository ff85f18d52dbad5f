"""Untouched-test confirmation (METHODS 3.7, Table 10 last row): evaluate trained runs on a
deterministic reservoir sample of a held-out split, fixed before any model output is seen.

For a folder holding a baseline and its variant run(s), ``evaluate_split``:

1. draws the sample (Algorithm R, ``random.Random(sample_seed)``, sorted indices) from the
   held-out file and writes ``OUT/test_manifest.json`` -- source file and checkpoint SHA-256,
   seed, size and the sorted indices -- *before* any model is evaluated;
2. rebuilds each model from its manifest and final checkpoint and writes a new run
   ``OUT/<condition>`` (same init and data-order ids, factor ``split = test``,
   ``parent_run_id``) whose examples are the sample, flagged ``in_test_sample``.

The new runs pair like the originals, so ``routestats report OUT --mode numpy`` gives the raw
and opportunity-adjusted confirmation statistics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from routestats.rundir import schema as S
from routestats.rundir.atomic import sha256_file, write_json_atomic
from routestats.errors import RoutestatsError
from routestats.rundir.collection import load_runs
from routestats.rundir.read import is_bias_off, load_run
from routestats.rundir.write import RunWriter, software_versions
from routestats.rundir.sampling import reservoir_indices

from runners.checkpoints import load_checkpoint
from runners.training.data import resolve
from runners.training.model import EncoderConfig, SAABEncoder
from runners.training.msm import encode_record, load_tokenizer
from runners.outputs import check_replaceable
from runners.training.dumps import cut_example, dump_attention, pick_device

_NAMES = {"docstrings-dbpedia": "bundled-dbpedia", "docstrings-pubmed": "bundled-pubmed"}


def _final_checkpoint(run) -> Path:
    steps = [e["path"] for e in run.manifest["files"] if e["path"].startswith(S.CHECKPOINT_DIR + "/")]
    if not steps:
        raise RoutestatsError(f"{run.run_id}: no checkpoint file kept; train with --keep-checkpoints last")
    return run.path / sorted(steps)[-1]


def evaluate_split(pair_dir: Path, out: Path, *, sample_size: int = 2336, sample_seed: int = 1001,
                   batch_size: int = 16, device: str = "auto", cap: int | None = None, include_bias_off: bool = False,
                   progress: Callable[[str], None] | None = None, force: bool = False) -> list[Path]:
    """Evaluate the trained runs under ``pair_dir`` on the test sample; returns the new run paths.

    The pair (baseline and variant(s)) is evaluated; a bias-off evaluation beside it only with
    ``include_bias_off`` (its copy is then the bias-off evaluation of the variant's copy, so the folder's report
    splits direct from learned on the test sample too). Every copy names the run whose weights it evaluates in
    ``source_run`` (a bias-off copy: the variant's copy, as ``evaluate --bias off`` does).

    A test sample recorded in ``out`` is never redrawn silently: another sample (size, seed, source file or
    runs) into the same ``out`` is refused unless ``force`` (the sample is chosen before any model output is
    seen; redrawing it after seeing results must leave a trace: the new manifest then records the old one's
    SHA-256 as ``replaces``). The same sample again re-evaluates in place.
    """
    say = progress or (lambda msg: None)
    pair_dir, out = Path(pair_dir), Path(out)
    every = load_runs(pair_dir)
    runs = [r for r in every if include_bias_off or not is_bias_off(r)]
    first = runs[0]
    ds = first.manifest.get("dataset") or {}
    spec, tok_path = _study_data(first, pair_dir)
    say(f"reading the held-out split ({spec.test.name})")
    records = spec.load_test()
    idx = reservoir_indices(len(records), sample_size, sample_seed)
    ckpts = _checkpoints_of(runs, every, pair_dir)
    cap = cap or (first.manifest.get("evaluation") or {}).get("cap") or spec.max_length
    manifest = {
        "split": "test",
        "source_file": str(spec.test.name),
        "source_sha256": sha256_file(spec.test),
        "records": len(records),
        "sample_size": sample_size,
        "sample_seed": sample_seed,
        "method": "Algorithm R, random.Random(seed), sorted indices",
        "indices": idx,
        "checkpoints": {rid: {"path": str(p.relative_to(pair_dir)), "sha256": sha256_file(p)} for rid, p in ckpts.items()},
        "tokenizer_sha256": sha256_file(tok_path),
        "cap": cap,
        "runs": [r.run_id for r in runs],
    }
    _keep_sample(out, manifest, force)
    write_json_atomic(out / "test_manifest.json", manifest)  # fixed before any model output exists
    say(f"encoding {len(idx)} test records")
    examples, recs = _test_examples(load_tokenizer(tok_path), records, idx, spec, cap)
    dev = pick_device(device)
    say(f"test sample: {len(idx)} of {len(records)} held-out records (seed {sample_seed}), recorded in "
        f"{out / 'test_manifest.json'}")
    left = [r.run_id for r in every if r not in runs]
    if left:
        say(f"not evaluated: {', '.join(left)} (bias-off evaluations; --include-bias-off adds them)")
    paths = []
    for i, run in enumerate(runs, 1):
        say(f"[{i}/{len(runs)}] {run.run_id}: {len(idx)} test examples")
        paths.append(_evaluate_run(run, ckpts[run.run_id], out, examples, recs, idx, batch_size, dev, ds, cap, manifest,
                                   sample_seed, every_seconds(say, f"  {run.run_id}")))
    return paths


def _checkpoints_of(runs, every, pair_dir: Path) -> dict:
    """run id -> the final checkpoint whose weights it evaluates (a bias-off evaluation has none of its own: its
    source run's)."""
    by_id = {r.run_id: r for r in every}

    def weights_of(r):
        src = r.manifest.get("source_run") if r.factors.get("eval_bias") == "off" else None
        if src is None:
            return r
        if src not in by_id:
            raise RoutestatsError(f"{r.run_id}: its source run {src} is not under {pair_dir}")
        return by_id[src]

    return {r.run_id: _final_checkpoint(weights_of(r)) for r in runs}


def _test_examples(tok, records, idx, spec, cap: int) -> tuple[pd.DataFrame, list]:
    """The sampled test records encoded: their examples table and the model inputs cut at ``cap``."""
    enc = [encode_record(tok, records[i], spec.field_ids, spec.max_length) for i in idx]
    rows = []
    for i, (e, n_prep) in zip(idx, enc):
        k = min(len(e.input_ids), cap)
        rows.append({"example_id": i, "split": "test", "source_index": i, "row_id": f"row_{i}", "label": e.label,
                     "prepared_length": min(n_prep, spec.max_length), "cap": cap, "field_ids": e.field_ids[:k],
                     "tokens": e.tokens[:k], "word_ids": e.word_ids[:k], "in_test_sample": True})
    return pd.DataFrame(rows), [cut_example(e, cap) for e, _ in enc]


SAMPLE_KEYS = ("source_sha256", "sample_size", "sample_seed", "indices", "runs", "cap")


def _keep_sample(out: Path, manifest: dict, force: bool) -> None:
    """Refuse (one line) to replace the test sample recorded in ``out`` by another one without ``force``; with
    it, the new manifest names the replaced one (``replaces``: its SHA-256)."""
    from routestats.rundir.manifest import read_json

    old_path = out / "test_manifest.json"
    if not old_path.exists():
        return
    try:
        old = read_json(old_path)
    except RoutestatsError:
        old = None
    same = isinstance(old, dict) and all(old.get(k) == manifest[k] for k in SAMPLE_KEYS)
    if same:
        return
    if not force:
        was = (f"{old.get('sample_size')} records, seed {old.get('sample_seed')}" if isinstance(old, dict)
               else "unreadable")
        raise RoutestatsError(f"{old_path}: records another test sample ({was}); a new sample would replace it and "
                              "its results after they were seen: pass --force to redraw it (the new manifest names "
                              "the old one), or choose another --out")
    manifest["replaces"] = sha256_file(old_path)


def _study_data(first, pair_dir: Path):
    """(data spec, tokenizer path) of the study the runs were trained on, checked against the manifest."""
    ds = first.manifest.get("dataset") or {}
    spec_str = ds.get("spec") or _NAMES.get(ds.get("name", ""))
    if not spec_str:
        raise RoutestatsError(f"{first.run_id}: the manifest does not say which data set it was trained on")
    spec = resolve(spec_str, max_length=ds.get("max_length"))
    tok_path = pair_dir / "tokenizer.json"
    if not tok_path.is_file():
        raise RoutestatsError(f"{tok_path}: the study's tokenizer is missing")
    if sha256_file(tok_path) != ds.get("tokenizer_sha256"):
        raise RoutestatsError(f"{tok_path}: tokenizer differs from the one the runs were trained with")
    return spec, tok_path


def every_seconds(say: Callable[[str], None], label: str, seconds: float = 4.0):
    """A ``progress(done, total)`` that says ``label: done/total examples`` at most every ``seconds`` (and at the
    end): a line a phase, also when the output is a file."""
    import time

    last = [time.monotonic()]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= seconds or done == total:
            last[0] = now
            say(f"{label}: {done}/{total} examples")

    return progress


def _evaluate_run(run, ckpt: Path, out: Path, examples, recs, idx, batch_size, dev, ds, cap, manifest,
                  sample_seed, progress=None) -> Path:
    """One run's final weights on the test sample, as the run ``out/<its folder name>``."""
    model = SAABEncoder(EncoderConfig(**run.manifest["model"]))
    ck = load_checkpoint(ckpt)
    model.load_state_dict(ck["model"])
    model.to(dev)
    check_replaceable(out / run.path.name)
    w = RunWriter(out / run.path.name, run_id=f"{run.run_id}-test", study=run.study,
                  factors={**run.factors, "split": "test"}, seed=run.seed, init_id=run.init_id,
                  data_order_id=run.data_order_id, fields=run.manifest["fields"], overwrite=True)
    w.write_examples(examples)
    with w.attention(int(ck["step"]), dtype=(run.manifest["attention"].get("dtype") or "float16"),
                     forms=(S.FORM_MATRICES, S.FORM_REDUCTIONS), value_norms=True) as sink:
        dump_attention(model, recs, sink, batch_size, dev, idx, progress=progress)
    src = f"{run.manifest['source_run']}-test" if run.factors.get("eval_bias") == "off" else run.run_id
    return w.finalize(
        parent_run_id=run.run_id, source_run=src, model=run.manifest["model"], dataset=ds,
        **{k: run.manifest[k] for k in ("training", "recipe") if k in run.manifest},
        evaluation={"split": "test", "examples": len(idx), "records": manifest["records"], "cap": cap,
                    "selection": manifest["method"],
                    "sample_seed": sample_seed, "test_manifest_sha256": sha256_file(out / "test_manifest.json"),
                    "checkpoint_sha256": manifest["checkpoints"][run.run_id]["sha256"]},
        software=software_versions(("torch", "tokenizers")))


def evaluate_bias_off(run_dir: Path, out: Path | None = None, *, batch_size: int = 16, device: str = "auto",
                      progress: Callable[[str], None] | None = None) -> Path:
    """Evaluate a trained SAAB run's final weights with the bias removed (w_f = 0 in every layer) on its
    own evaluation examples (METHODS 3.4b); returns the new run (factor ``eval_bias: off``).

    The new run keeps the source run's init and data-order identity and names it in ``source_run``,
    so the report can split the total effect into direct (bias on - bias off, same weights) and
    learned (bias off - baseline).
    """
    from runners.training.msm import Encoded

    run = load_run(run_dir)
    cfg = dict(run.manifest.get("model") or {})
    if cfg.get("variant") != "saab":
        raise RoutestatsError(f"{run.run_id}: bias-off evaluation applies to a SAAB run (model variant "
                              f"{cfg.get('variant')!r})")
    tok_path = run.path.parent / "tokenizer.json"
    ds = run.manifest.get("dataset") or {}
    if not tok_path.is_file():
        raise RoutestatsError(f"{tok_path}: the study's tokenizer is missing")
    if ds.get("tokenizer_sha256") and sha256_file(tok_path) != ds["tokenizer_sha256"]:
        raise RoutestatsError(f"{tok_path}: tokenizer differs from the one the run was trained with")
    tok = load_tokenizer(tok_path)
    ck = load_checkpoint(_final_checkpoint(run))
    step = int(ck["step"])
    model = SAABEncoder(EncoderConfig(**{**cfg, "saab_field_weight": 0.0}))
    model.load_state_dict(ck["model"])
    dev = pick_device(device)
    model.to(dev)
    ex = run.examples()
    if step not in run.attention_steps:
        raise RoutestatsError(f"{run.run_id}: no attention stored at the checkpoint step {step}")
    recs = []
    for row in ex.itertuples(index=False):
        ids = [tok.token_to_id(t) for t in row.tokens]
        if any(i is None for i in ids):
            raise RoutestatsError(f"{run.run_id}: example {row.example_id} holds a token the tokenizer does not know")
        recs.append(Encoded(input_ids=ids, field_ids=[int(g) for g in row.field_ids], tokens=list(row.tokens),
                            word_ids=[int(w) for w in row.word_ids], label=str(row.label)))
    out = Path(out) if out is not None else run.path.parent / f"{run.path.name}-bias-off"
    check_replaceable(out)
    w = RunWriter(out, run_id=f"{run.run_id}-bias-off", study=run.study,
                  factors={**run.factors, "variant": "saab_bias_off", "eval_bias": "off"}, seed=run.seed,
                  init_id=run.init_id, data_order_id=run.data_order_id, fields=run.manifest["fields"], overwrite=True)
    keep = [c for c in ex.columns if c not in ("length", "content_sha256")]
    w.write_examples(ex[keep])
    with w.attention(step, dtype=run.manifest["attention"].get("dtype") or "float16",
                     forms=run.attention_forms(step), value_norms=True) as sink:
        dump_attention(model, recs, sink, batch_size, dev, ex["example_id"].tolist(),
                       progress=every_seconds(progress, f"{run.run_id} without its bias") if progress else None)
    return w.finalize(source_run=run.run_id, model={**cfg, "saab_field_weight": 0.0}, dataset=ds,
                      evaluation={"kind": "bias-off", "source_run": run.run_id, "step": step},
                      software=software_versions(("torch", "tokenizers")))
