"""Pretrained Hugging Face models, loaded offline and switched to the capture seam.

:func:`load_model` reads a local transformers folder or a folder holding one GGUF file;
:func:`prepare_model` checks a loaded model before anything is captured from it: its family
(:mod:`runners.families`), a fast tokenizer, and a probe forward showing that the seam sees
every layer and that its baseline attention equals the model's own eager attention bit for bit.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch

from routestats.errors import RoutestatsError
from routestats.rundir.atomic import sha256_file

from .families import Family, family_for, family_of
from .seam import IMPLEMENTATION, Pass, capture_pass, register_seam

__all__ = ["Loaded", "load_model", "prepare_model", "identity_of_files", "WEIGHT_SUFFIXES"]

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")


@dataclass
class Loaded:
    """A model switched to the capture seam, its tokenizer, family and provenance."""

    model: object
    tokenizer: object
    family: Family
    folder: Path | None
    weight_files: list[Path] = field(default_factory=list)
    gguf: str | None = None
    quantisation: dict | None = None
    input_names: tuple[str, ...] = ("input_ids", "attention_mask")

    @property
    def causal(self) -> bool:
        return self.family.causal

    @property
    def n_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    @property
    def n_heads(self) -> int:
        return int(self.model.config.num_attention_heads)

    @property
    def max_positions(self) -> int | None:
        cfg = self.model.config
        v = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
        return int(v) if v else None

    @functools.cached_property
    def weights_id(self) -> str:
        """The identity of the weight files (hashed once: a model's files are large)."""
        return identity_of_files(self.weight_files) if self.weight_files else "in-memory"

    @property
    def name(self) -> str:
        if self.gguf:
            return self.gguf.rsplit(".", 2)[0]
        if self.folder:  # a package's "model" subfolder is named after its package
            return self.folder.parent.name if self.folder.name in ("model", "models") else self.folder.name
        return type(self.model).__name__

    def to(self, device) -> "Loaded":
        """Move the model to ``device`` (``cpu`` or ``cuda[:N]``, refused in one line when absent)."""
        dev = str(device)
        if dev.startswith("cuda") and not torch.cuda.is_available():
            raise RoutestatsError(f"--device {dev}: no CUDA device here")
        try:
            self.model.to(torch.device(dev))
        except (RuntimeError, ValueError) as exc:
            raise RoutestatsError(f"--device {dev}: {first_line(exc)}") from None
        return self

    def provenance(self) -> dict:
        return {"name": self.name, "class": type(self.model).__name__,
                "model_type": getattr(self.model.config, "model_type", None), "family": self.family.name,
                "layers": self.n_layers, "heads": self.n_heads, "dtype": str(self.model.dtype).replace("torch.", ""),
                "weights_id": self.weights_id, "gguf_file": self.gguf, "quantisation": self.quantisation}


def identity_of_files(files: Sequence[Path]) -> str:
    """SHA-256 of ``name:sha256`` lines of ``files``, sorted by name (the init_id recipe)."""
    lines = sorted(f"{Path(f).name}:{sha256_file(f)}" for f in files)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _gguf_quantisation(path: Path) -> dict:
    """The GGUF file's weight type (e.g. MOSTLY_Q4_1), as recorded in its header."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    code = int(reader.fields["general.file_type"].contents())
    try:
        kind = gguf.LlamaFileType(code).name
    except ValueError:
        kind = f"file_type {code}"
    return {"format": "gguf", "file_type": kind, "dequantised_to": "float32"}


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def load_model(folder: str | Path) -> Loaded:
    """Load a local transformers folder or a folder with one GGUF file, switched to the capture seam.

    Refused in one line, before anything is written: a folder that is not a model, a model type
    outside :data:`runners.families.FAMILIES`, a configuration a family cannot capture faithfully,
    a model whose attention does not pass through the seam in every layer, or whose baseline
    attention through the seam differs from its own eager attention.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise RoutestatsError("capture needs transformers: pip install -e '.[capture]'") from None
    folder = Path(folder)
    if not folder.is_dir():
        raise RoutestatsError(f"{folder}: not a model folder")
    ggufs = sorted(folder.glob("*.gguf"))
    quant = None
    try:
        if ggufs:
            if len(ggufs) > 1:
                raise RoutestatsError(f"{folder}: holds {len(ggufs)} GGUF files; name one folder per model")
            g = ggufs[0].name
            quant = _gguf_quantisation(ggufs[0])
            tok = AutoTokenizer.from_pretrained(folder, gguf_file=g)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=g, attn_implementation="eager")
            weights = ggufs
        else:
            if not (folder / "config.json").is_file():
                raise RoutestatsError(f"{folder}: no config.json and no .gguf file: not a model folder")
            cfg = AutoConfig.from_pretrained(folder)
            g = None
            fam = family_for(getattr(cfg, "model_type", None) or "?")  # refused before the weights load
            why = fam.refuse(cfg) if fam.refuse else None
            if why:
                raise RoutestatsError(f"{folder}: the model {why}")
            cls = AutoModelForCausalLM if fam.causal else AutoModel
            model = cls.from_pretrained(folder, attn_implementation="eager")
            tok = AutoTokenizer.from_pretrained(folder)
            weights = sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES)
    except RoutestatsError:
        raise
    except Exception as exc:  # transformers' own refusals (remote code, unsafe pickles, bad config.json, ...)
        raise RoutestatsError(f"{folder}: cannot load the model: {first_line(exc)}") from None
    return prepare_model(model.eval(), tok, folder=folder, weight_files=weights, gguf=g, quantisation=quant)


def prepare_model(model, tok, *, folder: Path | None = None, weight_files=(), gguf=None, quantisation=None) -> Loaded:
    """Switch a loaded model to the capture seam and check it (see :func:`load_model`)."""
    fam = family_of(model)
    if not getattr(tok, "is_fast", False):
        raise RoutestatsError(f"{type(tok).__name__} is not a fast tokenizer; capture needs its offsets and "
                              "sequence ids")
    params = inspect.signature(model.forward).parameters
    names = tuple(n for n in tok.model_input_names if n in params)
    if "input_ids" not in names:
        raise RoutestatsError(f"{type(model).__name__}.forward takes no input_ids")
    loaded = Loaded(model, tok, fam, folder, list(weight_files), gguf, quantisation, names)
    register_seam()
    ids = tok("a b c", add_special_tokens=True, return_tensors="pt")
    probe = {k: v for k, v in ids.items() if k in names}
    with torch.no_grad():
        own = model(**probe, output_attentions=True).attentions
        model.set_attn_implementation(IMPLEMENTATION)
        if model.config._attn_implementation != IMPLEMENTATION:
            raise RoutestatsError(f"{type(model).__name__} does not route its attention through transformers' "
                                  "AttentionInterface; capture cannot add an intervention to its own scores")
        with capture_pass(Pass()) as p:
            model(**probe)
    if len(p.weights) != loaded.n_layers:
        raise RoutestatsError(f"{type(model).__name__}: the attention seam saw {len(p.weights)} of "
                              f"{loaded.n_layers} layers; capture would miss layers")
    if own is None or any(a is None for a in own):
        raise RoutestatsError(f"{type(model).__name__} returned no attention weights from its eager path")
    if len(own) != len(p.weights) or not all(torch.equal(a, b) for a, b in zip(own, p.weights)):
        raise RoutestatsError(f"{type(model).__name__}: attention through the seam differs from the model's own "
                              "eager attention; refusing to capture it")
    return loaded


