"""What routestats knows about each Hugging Face architecture it captures -- the one place.

Capture (:mod:`runners.capture`) reaches a model's attention through transformers'
``AttentionInterface``: every supported family computes attention in a module-level
``eager_attention_forward`` that receives each layer's query, key, value and *its own* mask
(causal, sliding window, padding, already combined) and applies the family's own arithmetic
(scaling, soft-capping, grouped-query heads). That seam is family-independent; what is not, is
listed here and nowhere else:

* ``causal``: a decoder (its query sees earlier keys only) or a bidirectional encoder; this
  also decides the fielding (:mod:`runners.fielding`: a sentence pair for encoders, the fields
  joined by a newline for decoders);
* ``out_proj``: where the attention output projection W_O of layer ``i`` lives, relative to the
  base model (``{i}`` the layer, ``{g}`` ALBERT's shared layer group); value norms need the
  per-head rows W_O^h;
* ``transposed``: GPT-2's ``Conv1D`` stores its weight as [in, out], the transpose of
  ``nn.Linear``'s [out, in];
* ``refuse``: configurations of a family that the seam cannot capture faithfully.

Adding a family: one :class:`Family` entry here and a tiny-config case in
``tests/test_families.py`` (its capture must equal the model's own ``output_attentions``
bitwise). Anything else is refused before anything is written.

>>> family_for("llama").name, family_for("llama").causal
('llama', True)
>>> family_for("mpnet")
Traceback (most recent call last):
...
routestats.errors.RoutestatsError: model type 'mpnet' is not a supported family (supported: albert, bert, distilbert, electra, gemma2, gpt2, gpt_neox, llama, mistral, phi, phi3, qwen2, roberta, xlm-roberta); add it in runners/families.py
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from routestats.errors import RoutestatsError

__all__ = ["Family", "FAMILIES", "family_for", "family_of", "output_weight"]


@dataclass(frozen=True)
class Family:
    """One architecture family: the facts capture needs beyond the attention seam."""

    name: str
    model_types: tuple[str, ...]
    causal: bool
    out_proj: str
    transposed: bool = False
    refuse: Callable[[object], str | None] | None = None


def _bert_refuse(cfg) -> str | None:
    if getattr(cfg, "is_decoder", False) or getattr(cfg, "add_cross_attention", False):
        return "is configured as a decoder (is_decoder / add_cross_attention); capture takes the encoder"
    return None


def _albert_refuse(cfg) -> str | None:
    if int(getattr(cfg, "inner_group_num", 1)) != 1:
        return f"has inner_group_num={cfg.inner_group_num}: its attention runs more than once per layer"
    return None


def _gpt2_refuse(cfg) -> str | None:
    if getattr(cfg, "reorder_and_upcast_attn", False):
        return "uses reorder_and_upcast_attn, an eager path outside the AttentionInterface"
    return None


FAMILIES: tuple[Family, ...] = (
    Family("bert", ("bert", "roberta", "xlm-roberta", "electra"), False, "encoder.layer.{i}.attention.output.dense",
           refuse=_bert_refuse),
    Family("distilbert", ("distilbert",), False, "transformer.layer.{i}.attention.out_lin"),
    Family("albert", ("albert",), False, "encoder.albert_layer_groups.{g}.albert_layers.0.attention.dense",
           refuse=_albert_refuse),
    Family("gpt2", ("gpt2",), True, "h.{i}.attn.c_proj", transposed=True, refuse=_gpt2_refuse),
    Family("gpt_neox", ("gpt_neox",), True, "layers.{i}.attention.dense"),
    Family("llama", ("llama", "qwen2", "mistral", "gemma2", "phi3"), True, "layers.{i}.self_attn.o_proj"),
    Family("phi", ("phi",), True, "layers.{i}.self_attn.dense"),
)

SUPPORTED = sorted(t for f in FAMILIES for t in f.model_types)


def family_for(model_type: str) -> Family:
    """The family of a transformers ``config.model_type``; an unsupported type is refused in one line."""
    for fam in FAMILIES:
        if model_type in fam.model_types:
            return fam
    raise RoutestatsError(f"model type {model_type!r} is not a supported family (supported: {', '.join(SUPPORTED)}); "
                          "add it in runners/families.py")


def family_of(model) -> Family:
    """The family of a loaded model, after its configuration's refusals (one line naming why)."""
    cfg = model.config
    fam = family_for(getattr(cfg, "model_type", None) or type(model).__name__)
    why = fam.refuse(cfg) if fam.refuse else None
    if why:
        raise RoutestatsError(f"{type(model).__name__} {why}")
    return fam


def _base(model):
    return getattr(model, "base_model", model)


def output_weight(model, fam: Family, layer: int):
    """W_O of ``layer`` as a float tensor [d_model, heads * head_dim] (``nn.Linear`` layout), the
    rows of head h being columns h*dh:(h+1)*dh; GPT-2's ``Conv1D`` weight is transposed."""
    cfg = model.config
    groups = int(getattr(cfg, "num_hidden_groups", 1) or 1)
    n_layers = int(cfg.num_hidden_layers)
    path = fam.out_proj.format(i=layer, g=int(layer / (n_layers / groups)))
    mod = _base(model)
    try:
        for part in path.split("."):
            mod = mod[int(part)] if part.isdigit() else getattr(mod, part)
    except (AttributeError, IndexError, TypeError):
        raise RoutestatsError(f"{type(model).__name__}: no output projection at {path} (family {fam.name}); "
                              "value norms need it") from None
    w = mod.weight.detach()
    return w.T if fam.transposed else w
