"""Pretrained Hugging Face models, loaded offline and switched to the capture seam.

:func:`load_model` reads a local transformers folder or a folder holding one GGUF file;
:func:`prepare_model` checks a loaded model before anything is captured from it: its family
(:mod:`runners.pretrained.families`), a fast tokenizer, and a probe forward showing that the seam sees
every layer and that its baseline attention equals the model's own eager attention bit for bit.
"""

from __future__ import annotations

import functools
import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch

from routestats.errors import RoutestatsError
from routestats.rundir.identity import identity_of_files

from runners.pretrained.families import Family, discover, layers_of, output_weight, refusal
from runners.pretrained.seam import IMPLEMENTATION, Pass, capture_pass, register_seam

__all__ = ["Checkpoint", "Loaded", "read_checkpoint", "text_part", "load_model", "prepare_model", "WEIGHT_SUFFIXES"]

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")


@dataclass
class Loaded:
    """A model switched to the capture seam (or, ``observed``, one whose own returned weights are captured),
    its tokenizer, family and provenance."""

    model: object
    tokenizer: object
    family: Family
    folder: Path | None
    weight_files: list[Path] = field(default_factory=list)
    gguf: str | None = None
    quantisation: dict | None = None
    input_names: tuple[str, ...] = ("input_ids", "attention_mask")
    no_value_norms: str = ""  # why value norms cannot be computed (no output projection found), or ""
    head_type: str = "softmax"  # "sink" when the probe's rows sum to less than 1 (learned attention sinks)
    observed: str = ""  # why no intervention is possible (attention outside the interface): its own weights only
    attention_layers: tuple[int, ...] = ()  # a hybrid's softmax-attention layers (model numbers); () = every layer

    @property
    def causal(self) -> bool:
        return self.family.causal

    @property
    def layers(self) -> tuple[int, ...]:
        """The model's layer numbers that have an attention matrix, in the order capture stacks them."""
        return self.attention_layers or tuple(range(self.n_layers))

    @property
    def no_attention_matrix(self) -> list[int]:
        """A hybrid's other layers (linear attention, state-space blocks): no attention matrix to capture."""
        return sorted(set(range(self.n_layers)) - set(self.layers))

    def ablation(self, ablate) -> dict[int, tuple[int, ...]]:
        """``(layer, head)`` pairs (model layer numbers) as the seam keys them: call index -> heads."""
        call = {layer: i for i, layer in enumerate(self.layers)}
        out: dict[int, tuple[int, ...]] = {}
        for li, h in ablate:
            out[call[li]] = tuple(sorted(set(out.get(call[li], ())) | {h}))
        return out

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
        return int(v) if v and int(v) > 0 else None  # XLNet's -1: no limit

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
                "layers": self.n_layers, "heads": self.n_heads, "head_type": self.head_type,
                **({"attention_layers": list(self.layers)} if self.attention_layers else {}),
                "dtype": str(self.model.dtype).replace("torch.", ""),
                "weights_id": self.weights_id, "gguf_file": self.gguf, "quantisation": self.quantisation,
                **({"observed": self.observed} if self.observed else {})}


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


@dataclass(frozen=True)
class Checkpoint:
    """A pretrained model read from a local folder, before any check: what capture and regime share."""

    model: object
    tokenizer: object
    folder: Path
    weight_files: tuple[Path, ...]
    gguf: str | None = None
    quantisation: dict | None = None


MAX_LAYERS = MAX_HEADS = 4096  # far above any released model; a config beyond them is not a model to build


def _size_of(cfg, *names) -> int:
    for n in names:
        v = getattr(cfg, n, None)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return 0


def size_refusal(cfg, memory: int | None = None) -> str | None:
    """Why a configuration is too large to build here, or None: more than :data:`MAX_LAYERS` layers or
    :data:`MAX_HEADS` heads, or an estimated float32 size (layers x (4 d^2 + 3 d ff) + vocabulary x d parameters)
    above ``memory`` (default: this machine's physical memory), checked before any weight is allocated.

    >>> size_refusal(type("C", (), {"num_hidden_layers": 1_000_000, "hidden_size": 32})())
    'describes 1000000 layers, more than the 4096 any model routestats builds has; refused before building it'
    >>> size_refusal(type("C", (), {"num_hidden_layers": 4, "hidden_size": 32, "vocab_size": 100})()) is None
    True
    """
    layers = _size_of(cfg, "num_hidden_layers", "n_layer", "num_layers")
    heads = _size_of(cfg, "num_attention_heads", "n_head", "num_heads")
    if layers > MAX_LAYERS or heads > MAX_HEADS:
        what, n = ("layers", layers) if layers > MAX_LAYERS else ("heads", heads)
        return f"describes {n} {what}, more than the {MAX_LAYERS} any model routestats builds has; refused before building it"
    d = _size_of(cfg, "hidden_size", "n_embd", "d_model")
    ff = _size_of(cfg, "intermediate_size", "n_inner", "d_ff", "ffn_dim") or 4 * d
    params = layers * (4 * d * d + 3 * d * ff) + _size_of(cfg, "vocab_size") * d
    if memory is None:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if 4 * params > memory:
        return (f"describes about {params / 1e9:,.1f} G parameters ({layers} layers, hidden size {d}): "
                f"{4 * params / 2**30:,.0f} GiB in float32, more than this machine's {memory / 2**30:,.0f} GiB of "
                "memory; refused before building it")
    return None


def model_class(cfg):
    """The class a folder's config loads as: its ``*ForCausalLM`` with the language-model head, the ``*EncoderModel``
    it names (a T5 text encoder saved as ``T5EncoderModel``), else the bare model (``AutoModel``)."""
    import transformers
    from transformers import AutoModel, AutoModelForCausalLM

    archs = [str(a) for a in (getattr(cfg, "architectures", None) or ())]
    if any(a.endswith("ForCausalLM") for a in archs):
        return AutoModelForCausalLM
    encoder_only = next((getattr(transformers, a, None) for a in archs if a.endswith("EncoderModel")), None)
    return encoder_only or AutoModel


def read_checkpoint(folder: str | Path, *, attn_implementation: str = "eager", dtype=None,
                    refuse_listed: bool = True) -> Checkpoint:
    """Read a local transformers folder, a folder with one GGUF file, or a GGUF file (offline; the one loader of pretrained
    checkpoints, shared by capture and the regime operators).

    A ``*ForCausalLM`` architecture loads with its language-model head, an ``*EncoderModel`` (a T5 text encoder's
    save) as that class, anything else as the bare model, of which
    :func:`text_part` keeps the part that reads text; ``dtype`` (e.g. ``torch.float64``) converts the weights. Refused in one line: a folder that
    is not a model, more than one GGUF file, a configuration listed in :data:`runners.pretrained.families.REFUSALS`
    (when ``refuse_listed``), and transformers' own refusals (remote code, unsafe pickles, bad config.json).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise RoutestatsError("pretrained models need transformers: pip install -e '.[capture]'") from None
    folder = Path(folder)
    ggufs = [folder] if folder.suffix == ".gguf" and folder.is_file() else None
    if ggufs:
        folder = folder.parent
    elif not folder.is_dir():
        raise RoutestatsError(f"{folder}: not a model folder")
    ggufs = ggufs or sorted(folder.glob("*.gguf"))
    quant = None
    try:
        if ggufs:
            if len(ggufs) > 1:
                raise RoutestatsError(f"{folder}: holds {len(ggufs)} GGUF files; name one folder per model")
            g = ggufs[0].name
            quant = _gguf_quantisation(ggufs[0])
            tok = AutoTokenizer.from_pretrained(folder, gguf_file=g)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=g, attn_implementation=attn_implementation)
            weights = ggufs
        else:
            if not (folder / "config.json").is_file():
                raise RoutestatsError(f"{folder}: no config.json and no .gguf file: not a model folder")
            cfg = AutoConfig.from_pretrained(folder)
            too_large = size_refusal(cfg)
            if too_large:  # refused before anything is built
                raise RoutestatsError(f"{folder}: config.json {too_large}")
            g = None
            why = refusal(getattr(cfg, "model_type", None) or "?", cfg) if refuse_listed else ""
            if why:  # refused before the weights load
                raise RoutestatsError(f"{folder}: the model {why}")
            model = model_class(cfg).from_pretrained(folder, attn_implementation=attn_implementation)
            tok = AutoTokenizer.from_pretrained(folder)
            weights = sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES)
        model = text_part(model)
        if dtype is not None:
            model = model.to(dtype)
    except RoutestatsError:
        raise
    except Exception as exc:  # transformers' own refusals (remote code, unsafe pickles, bad config.json, ...)
        raise RoutestatsError(f"{folder}: cannot load the model: {first_line(exc)}") from None
    return Checkpoint(model.eval(), tok, folder, tuple(weights), g, quant)


def text_part(model):
    """The part of a loaded model that reads the text and holds the attention routestats records: an
    encoder-decoder's encoder (T5, BART: its decoder needs decoder inputs and attends across), an image-text
    model's language model (Gemma 3, Mistral 3, Qwen3-VL: ``model.language_model``), else the model itself.
    The load probe then decides whether that part is captured."""
    if getattr(model.config, "is_encoder_decoder", False) and callable(getattr(model, "get_encoder", None)):
        enc = model.get_encoder()
        return enc if hasattr(enc, "config") else model  # an encoder without its config is not a model to probe
    for owner in (getattr(model, "model", None), model):
        lm = getattr(owner, "language_model", None) if owner is not None else None
        if isinstance(lm, torch.nn.Module) and hasattr(lm, "config"):
            return lm
    return model


def load_model(folder: str | Path) -> Loaded:
    """Load a local transformers folder or a folder with one GGUF file, switched to the capture seam.

    Refused in one line, before anything is written: a folder that is not a model, a configuration
    whose attention the probe cannot certify (:data:`runners.pretrained.families.REFUSALS`), a model whose attention
    does not pass through the seam in every layer, or whose baseline attention through the seam differs
    from its own eager attention. Any other model is accepted: the probe, not a list of names, decides.
    """
    ck = read_checkpoint(folder)
    return prepare_model(ck.model, ck.tokenizer, folder=ck.folder, weight_files=list(ck.weight_files), gguf=ck.gguf,
                         quantisation=ck.quantisation)


def _attention_rows(weights, name: str) -> str:
    """'sink' or 'softmax' from a probe's attention rows; refused when a row sums to more than 1."""
    rows = [w.to(torch.float64).sum(-1) for w in weights]
    high, low = max(float(r.max()) for r in rows), min(float(r.min()) for r in rows)
    least = min(float(w.min()) for w in weights)
    if least < 0 or not all(bool(torch.isfinite(w).all()) for w in weights):
        raise RoutestatsError(f"{name}: its attention weights include {least:.3g} (or non-finite values); these are "
                              "not attention probabilities")
    if high > 1 + 1e-4:
        raise RoutestatsError(f"{name}: its attention rows sum to as much as {high:.6g}, more than 1; "
                              "these are not attention probabilities")
    return "sink" if low < 1 - 1e-4 else "softmax"


def observed_model(model, tok, own, outside: str, *, folder=None, weight_files=(), gguf=None, quantisation=None,
                   names=("input_ids",)) -> Loaded:
    """A model whose attention is outside the interface, captured by observation: the weights its own eager forward
    returns with ``output_attentions=True`` (on the probe: one per layer, probabilities), no intervention and no
    value norms. Refused in one line when the forward returns no weights for some layer."""
    n_layers = int(model.config.num_hidden_layers)
    if own is None or len(own) != n_layers or any(a is None for a in own):
        got = 0 if own is None else sum(a is not None for a in own)
        raise RoutestatsError(f"{outside}; nor does its own forward return attention weights for every layer "
                              f"({got} of {n_layers}) to observe")
    if not all(isinstance(a, torch.Tensor) for a in own):  # Pegasus-X: a dict of global and local blocks a layer
        raise RoutestatsError(f"{outside}; nor does its own forward return one attention tensor a layer to observe")
    n = own[0].shape[-2] if own[0].dim() == 4 else -1
    odd = next((tuple(a.shape) for a in own if a.dim() != 4 or tuple(a.shape[-2:]) != (n, n)), None)
    if odd is not None:  # keys padded to a window (LED, Longformer) or a block layout: not n x n over its positions
        raise RoutestatsError(f"{outside}; nor does its own forward return n x n attention over its positions to "
                              f"observe (a layer returns shape {odd})")
    head_type = _attention_rows(own, type(model).__name__)
    fam = discover(model, (), own)
    return Loaded(model, tok, fam, folder, list(weight_files), gguf, quantisation, names,
                  "observed: no attention modules are called through the seam, so no output projection is known",
                  head_type, outside)


def _input_names(model, tok) -> tuple[str, ...]:
    """The tokenizer's outputs the model's forward takes (input_ids among them); a slow tokenizer is refused."""
    if not getattr(tok, "is_fast", False):
        raise RoutestatsError(f"{type(tok).__name__} is not a fast tokenizer; capture needs its offsets and "
                              "sequence ids")
    params = inspect.signature(model.forward).parameters
    names = tuple(n for n in tok.model_input_names if n in params)
    if "input_ids" not in names:
        raise RoutestatsError(f"{type(model).__name__}.forward takes no input_ids")
    return names


def prepare_model(model, tok, *, folder: Path | None = None, weight_files=(), gguf=None, quantisation=None) -> Loaded:
    """Switch a loaded model to the capture seam and check it (see :func:`load_model`); what capture needs to
    know of the model (causal or not, where its output projections are) is found from the probe."""
    cfg = model.config
    why = refusal(getattr(cfg, "model_type", None) or "?", cfg)
    if why:
        raise RoutestatsError(f"{type(model).__name__} {why}")
    names = _input_names(model, tok)
    register_seam()
    ids = tok("a b c d e", add_special_tokens=True, return_tensors="pt")
    probe = {k: v for k, v in ids.items() if k in names}
    with torch.no_grad():
        try:
            own = model(**probe, output_attentions=True).attentions
        except Exception as exc:  # a model that cannot run its own eager forward on the probe
            raise RoutestatsError(f"{type(model).__name__}: its own forward failed on the probe: "
                                  f"{first_line(exc)}") from None
        why = _switch_to_seam(model)
        if model.config._attn_implementation != IMPLEMENTATION:
            outside = (f"{type(model).__name__} does not route its attention through transformers' "
                       f"AttentionInterface; capture cannot add an intervention to its own scores{why}")
            return observed_model(model, tok, own, outside, folder=folder, weight_files=weight_files, gguf=gguf,
                                  quantisation=quantisation, names=names)
        try:
            with capture_pass(Pass(keep_values=True)) as p:
                model(**probe)
        except RoutestatsError:
            raise
        except Exception as exc:
            raise RoutestatsError(f"{type(model).__name__}: its forward through the attention seam failed: "
                                  f"{first_line(exc)}") from None
    n_layers = int(model.config.num_hidden_layers)
    layers = tuple(range(n_layers)) if len(p.weights) == n_layers else \
        layers_of(model, p.modules, n_layers) if len(p.weights) < n_layers else None
    if layers is None and not p.weights:  # the seam is registered but no layer calls it: its own weights, observed
        outside = (f"{type(model).__name__} computes its attention without calling transformers' AttentionInterface "
                   "(the seam saw none of its layers); capture cannot add an intervention to its own scores")
        return observed_model(model, tok, own, outside, folder=folder, weight_files=weight_files, gguf=gguf,
                              quantisation=quantisation, names=names)
    if layers is None:
        raise RoutestatsError(f"{type(model).__name__}: the attention seam saw {len(p.weights)} of "
                              f"{n_layers} layers; capture would miss layers")
    own = _own_weights(model, own, layers, n_layers)
    differ = [layers[i] for i, (a, b) in enumerate(zip(own, p.weights)) if not torch.equal(a, b)]
    if differ:
        raise RoutestatsError(f"{type(model).__name__}: attention through the seam differs from the model's own "
                              f"eager attention (layer {differ[0]}); refusing to capture it")
    # rows below 1: mass outside the sequence (learned attention sinks); stored as it is, the rest is the sink mass
    head_type = _attention_rows(p.weights, type(model).__name__)
    fam = discover(model, p.modules, p.weights)
    no_norms = _why_no_value_norms(model, fam, [v.shape[-1] for v in p.values])
    return Loaded(model, tok, fam, folder, list(weight_files), gguf, quantisation, names, no_norms, head_type,
                  attention_layers=layers if len(layers) < n_layers else ())


def _switch_to_seam(model) -> str:
    """Set the model's attention implementation to the seam; transformers' reason when it refuses (a model outside
    the interface), in parentheses, else "". Its own warning is silenced: our one line says it."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model.set_attn_implementation(IMPLEMENTATION)
    except Exception as exc:  # transformers refuses models outside the interface; its words follow ours
        return f" ({first_line(exc)[:120]})"
    finally:
        hf_logging.set_verbosity(level)
    return ""


def _own_weights(model, own, layers: tuple[int, ...], n_layers: int) -> list:
    """The model's own eager attention of its attention ``layers``: a hybrid returns one matrix per attention
    layer (Qwen3-Next), or one per layer, the others not n x n probabilities (MiniMax's linear layers)."""
    name = type(model).__name__
    if own is None or any(a is None for a in own):
        raise RoutestatsError(f"{name} returned no attention weights from its eager path")
    if len(own) == len(layers):
        return list(own)
    if len(own) == n_layers:
        return [own[i] for i in layers]
    raise RoutestatsError(f"{name}: its own forward returned {len(own)} attention matrices for {len(layers)} "
                          f"attention layers of {n_layers}; refusing to capture it")


def _why_no_value_norms(model, fam, head_sizes: Sequence[int]) -> str:
    """Why value norms cannot be stored (no output projection of the expected shape in some layer), or ""."""
    try:
        for layer, size in enumerate(head_sizes):
            w = output_weight(model, fam, layer)
            width = int(model.config.num_attention_heads) * int(size)
            if w.dim() != 2 or w.shape[1] != width:
                raise RoutestatsError(f"{type(model).__name__}: the output projection found for layer {layer} has "
                                      f"shape {tuple(w.shape)}, not [d_model, {width}] (heads x head size)")
    except RoutestatsError as exc:
        return str(exc)
    return ""


