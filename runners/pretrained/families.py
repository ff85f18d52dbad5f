"""What capture learns about a Hugging Face model from the model itself -- and the few exceptions.

Capture (:mod:`runners.pretrained.capture`) reaches a model's attention through transformers'
``AttentionInterface``: a model that routes its attention there hands each layer's query, key,
value and *its own* mask (causal, sliding window, padding, already combined) to a module-level
``eager_attention_forward`` that applies the model's own arithmetic (scaling, soft-capping,
grouped-query heads). No list of names decides what is accepted: the load probe
(:func:`runners.pretrained.load.prepare_model`) proves it, on the model as loaded, that the seam sees
every layer and that its baseline attention equals the model's own eager attention bit for bit.
What a per-family table used to say is found from that probe (:func:`discover`):

* ``causal``: every layer's probe attention puts exactly zero weight on later keys (a decoder) or
  not (a bidirectional encoder); this also decides the fielding (:mod:`runners.pretrained.fielding`);
* ``out_proj``: the output projection W_O of each layer, the linear layer that consumes the attention
  output, found beside the module that called the seam (``o_proj``, ``out_proj``, ``c_proj``,
  ``out_lin``, ``dense``, ``wo``, ... in that module, or in its parent's ``output``); value norms need
  its per-head rows W_O^h;
* ``transposed``: GPT-2's ``Conv1D`` stores its weight as [in, out], the transpose of
  ``nn.Linear``'s [out, in] (found from the module's class).

What remains here are the *exceptions*: configurations whose attention the probe cannot certify
(:data:`REFUSALS`, each with its one-line reason).

>>> refusal("gpt2", type("C", (), {"reorder_and_upcast_attn": True})())
'uses reorder_and_upcast_attn, an eager path outside the AttentionInterface'
>>> refusal("llama", object()) is None
True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from routestats.errors import RoutestatsError

__all__ = ["Family", "REFUSALS", "refusal", "discover", "output_weight", "OUT_NAMES", "layers_of"]

# names of the attention output projection, in the order they are tried
OUT_NAMES = ("o_proj", "out_proj", "c_proj", "out_lin", "dense", "wo", "o")


@dataclass(frozen=True)
class Family:
    """What capture found out about one loaded model: its ``model_type`` (``name``), whether it is causal,
    and each layer's output-projection module (found lazily: only value norms need it)."""

    name: str
    causal: bool
    modules: tuple = field(default=(), repr=False, compare=False)  # the module that called the seam, per layer
    parents: dict = field(default_factory=dict, repr=False, compare=False)


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


# model_type -> a configuration the probe cannot certify (the reason, or None)
REFUSALS: dict[str, Callable[[object], str | None]] = {
    **{t: _bert_refuse for t in ("bert", "roberta", "xlm-roberta", "electra", "camembert", "ernie")},
    "albert": _albert_refuse,
    "gpt2": _gpt2_refuse,
}


def refusal(model_type: str, cfg) -> str | None:
    """Why a configuration of ``model_type`` cannot be captured faithfully, or None."""
    fn = REFUSALS.get(model_type)
    return fn(cfg) if fn else None


def discover(model, modules, weights) -> Family:
    """The facts capture needs, found from the loaded model and its probe pass: ``modules`` (the module that
    called the seam, per layer) and ``weights`` (the probe's attention per layer, (batch, heads, n, n))."""
    import torch

    n = weights[0].shape[-1]
    later = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    causal = n > 1 and all(bool((w[..., later] == 0).all()) for w in weights)
    parents = {id(child): mod for mod in model.modules() for child in mod.children()}
    name = getattr(model.config, "model_type", None) or type(model).__name__
    return Family(name, causal, tuple(modules), parents)


def layers_of(model, modules, n_layers: int) -> tuple[int, ...] | None:
    """The model's own layer numbers of the modules that called the seam, in call order: each module's place in
    the model's list of ``n_layers`` layers. A hybrid (softmax attention in some layers, linear attention or a
    state-space block in the others) calls the seam from fewer layers than it has; None when no list of
    ``n_layers`` layers holds the callers one to a layer, in order (a module shared by layers, two calls in one
    layer, a caller outside the layers).

    >>> import torch.nn as nn
    >>> blocks = nn.ModuleList([nn.Sequential(nn.Linear(2, 2)) for _ in range(4)])
    >>> model = nn.Sequential(blocks)
    >>> layers_of(model, [blocks[1][0], blocks[3][0]], 4), layers_of(model, [blocks[3][0], blocks[1][0]], 4)
    ((1, 3), None)
    """
    import torch

    for lst in model.modules():
        if not isinstance(lst, torch.nn.ModuleList) or len(lst) != n_layers:
            continue
        place = {}
        for i, layer in enumerate(lst):
            for m in layer.modules():
                place.setdefault(id(m), i)
        found = [place.get(id(m)) for m in modules]
        if found and None not in found and all(a < b for a, b in zip(found, found[1:])):
            return tuple(found)
    return None


def _out_module(fam: Family, layer: int):
    """The output projection of ``layer``: a child of the attention module named as in :data:`OUT_NAMES`, or
    of its parent (directly, or in the parent's ``output``, as BERT's ``attention.output.dense``)."""
    m = fam.modules[layer]
    places = [m]
    parent = fam.parents.get(id(m))
    if parent is not None:
        places += [parent, getattr(parent, "output", None)]
    for place in places:
        for name in OUT_NAMES:
            cand = getattr(place, name, None) if place is not None else None
            if cand is not None and hasattr(cand, "weight") and getattr(cand.weight, "dim", lambda: 0)() == 2:
                return cand
    return None


def output_weight(model, fam: Family, layer: int):
    """W_O of ``layer`` as a float tensor [d_model, heads * head_dim] (``nn.Linear`` layout), the
    rows of head h being columns h*dh:(h+1)*dh; GPT-2's ``Conv1D`` weight is transposed."""
    mod = _out_module(fam, layer) if layer < len(fam.modules) else None
    if mod is None:
        where = type(fam.modules[layer]).__name__ if layer < len(fam.modules) else "?"
        raise RoutestatsError(f"{type(model).__name__}: no output projection found beside {where} of layer {layer} "
                              f"(looked for {', '.join(OUT_NAMES)}); value norms need it")
    w = mod.weight.detach()
    return w.T if type(mod).__name__ == "Conv1D" else w
