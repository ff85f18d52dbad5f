"""Attention sublayers of a transformers checkpoint as :class:`~runners.regime.sublayer.Sublayer`, proven at each point.

The regime operators of a pretrained model are built from the *transformers* module itself, read by
the loader capture uses (:func:`runners.pretrained.load.read_checkpoint`) and converted to float64. What
the sublayer is made of is found from the loaded layer, not from a list of model names:

* the list of layers: the ``ModuleList`` of ``num_hidden_layers`` blocks that hold an attention module
  (``q_proj``/``k_proj``/``v_proj``, or one projection of rows [queries; keys; values]: GPT-2's ``c_attn``
  (a transposed ``Conv1D``), Phi-3's ``qkv_proj``) and an output projection;
* the norms by the order in which the layer calls its children: the norm called last before the
  attention is the pre-norm; one norm between the attention and the next block is the pre-MLP norm,
  two are a sandwich post-attention norm (Gemma 2/3) and the pre-MLP norm. Each norm's kind (LayerNorm,
  RMSNorm with weight gamma or with 1 + gamma as in Gemma) and epsilon are proven on random inputs;
* the attention's own ``scaling``, ``attn_logit_softcapping``, ``sliding_window``, ``is_causal``,
  QK-norm (``q_norm``/``k_norm``) and grouped heads; RoPE from the ``position_embeddings`` (cos, sin)
  the model hands that layer, so any RoPE scaling or partial rotary width is the model's own.

The proof is the model's own arithmetic, at every operating point (METHODS B.3 pseudocode): the
residual entering the pre-MLP norm, recorded from the layer's own forward, must equal the pathway-split
forward F(x_r, x_r, x_r) within :data:`runners.regime.sublayer.FORWARD_TOLERANCE` relative to its size, and autograd of the
layer's own forward with respect to x_r gives J_full to compare with J_T + J_Q + J_K
(``errors["own_jacobian"]``). A layer that fails is refused in one line naming the layer and the check.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from routestats.errors import RoutestatsError

from runners.pretrained.load import first_line
from runners.regime.sublayer import Sublayer

__all__ = ["PretrainedStack", "load_stack", "refusing"]

Q_NAMES, K_NAMES, V_NAMES = ("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value")
FUSED_NAMES = ("c_attn", "qkv_proj")  # one projection whose rows are [queries; keys; values]
OUT_NAMES = ("o_proj", "out_proj", "c_proj", "dense", "out_lin")


@contextlib.contextmanager
def refusing(where: str):
    """Turn any failure to rebuild a pretrained layer into a one-line refusal that names ``where`` and the failure:
    the adapter reads structures it was not written for, and what it cannot rebuild it refuses."""
    lead = f"{where}: " if where else ""
    try:
        yield
    except RoutestatsError as exc:
        raise RoutestatsError(f"{lead}{exc}") from None
    except Exception as exc:
        raise RoutestatsError(f"{lead}regime cannot rebuild this model's attention sublayer "
                              f"({type(exc).__name__}: {first_line(exc)})") from None


class _Stop(Exception):
    """Raised by a hook to end a forward once what it records is recorded."""


def _weight(m: torch.nn.Module) -> torch.Tensor:
    """[out, in] weight of a Linear, or of GPT-2's Conv1D (stored [in, out])."""
    w = m.weight.detach()
    return w.T if type(m).__name__ == "Conv1D" else w


def _bias(m: torch.nn.Module):
    b = getattr(m, "bias", None)
    return None if b is None else b.detach()


def _is_norm(m: torch.nn.Module) -> bool:
    return "norm" in type(m).__name__.lower() and getattr(m, "weight", None) is not None


def _norm_form(m: torch.nn.Module, d: int, where: str) -> dict:
    """The norm's kind, gamma, beta and epsilon, proven on random inputs against the module itself."""
    eps = next((float(getattr(m, k)) for k in ("eps", "variance_epsilon") if getattr(m, k, None) is not None), None)
    w = m.weight.detach().double()
    if eps is None or w.shape != (d,):
        raise RoutestatsError(f"{where}: {type(m).__name__} is not a per-feature norm of width {d} with an epsilon")
    b = _bias(m)
    x = torch.randn(4, d, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 2 + 0.3
    with torch.no_grad():
        y = m(x.to(m.weight.dtype)).double()
    mu = x.mean(-1, keepdim=True)
    ln = (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + eps)
    rms = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    forms = [("layernorm", w, None if b is None else b.double(), ln * w + (0 if b is None else b.double())),
             ("rmsnorm", w, None, rms * w), ("rmsnorm", 1 + w, None, rms * (1 + w))]
    for kind, gamma, beta, ref in forms:
        if float((ref - y).abs().max()) <= 1e-5 * max(1.0, float(y.abs().max())):
            return {"kind": kind, "gamma": gamma, "beta": beta, "eps": eps}
    raise RoutestatsError(f"{where}: {type(m).__name__} is neither a LayerNorm nor an RMSNorm (with gamma or 1 + gamma)")


def _child(m: torch.nn.Module, names) -> torch.nn.Module | None:
    return next((getattr(m, n) for n in names if isinstance(getattr(m, n, None), torch.nn.Module)), None)


def _attention_child(layer: torch.nn.Module) -> tuple[str, torch.nn.Module] | None:
    for name, m in layer.named_children():
        if (_child(m, Q_NAMES) is not None or _child(m, FUSED_NAMES) is not None) and _child(m, OUT_NAMES) is not None:
            return name, m
    return None


@dataclass
class _LayerPass:
    """What one forward records of a layer: its input, its call arguments, its children in call order and their inputs."""

    args: tuple
    kwargs: dict
    order: list
    inputs: dict


class PretrainedStack:
    """A transformers model (float64) whose attention sublayers are built and proven at operating points.

    Parameters
    ----------
    model, tokenizer
        As :func:`runners.pretrained.load.read_checkpoint` returns them (``dtype=torch.float64``).
    weight_files
        The files the weights came from (the model's identity in the operator index).
    """

    def __init__(self, model, tokenizer, weight_files=()):
        self.model, self.tokenizer, self.weight_files = model, tokenizer, list(weight_files)
        cfg = model.config
        self.n_layer = int(cfg.num_hidden_layers)
        self.n_head = int(cfg.num_attention_heads)
        self.d = int(cfg.hidden_size)
        self.layers = self._find_layers()
        try:  # mixture-of-experts layers: the per-expert loop runs in float64 (grouped matmuls do not)
            model.set_experts_implementation("eager")
        except Exception:  # a model without experts has nothing to switch
            pass

    def _find_layers(self):
        for _, m in self.model.named_modules():
            if isinstance(m, torch.nn.ModuleList) and len(m) == self.n_layer and all(_attention_child(x) for x in m):
                return m
        raise RoutestatsError(f"{type(self.model).__name__}: no list of {self.n_layer} layers with an attention module "
                              "(separate q/k/v or fused c_attn/qkv_proj projections and an output projection) was found")

    def encode(self, text: str) -> list[int]:
        """The tokenizer's ids of ``text`` with its own special tokens."""
        return list(self.tokenizer(text)["input_ids"])

    def _record(self, ids, layer: int) -> _LayerPass:
        lyr = self.layers[layer]
        rec = _LayerPass((), {}, [], {})
        hooks = [lyr.register_forward_pre_hook(lambda m, a, k: rec.__setattr__("args", a) or rec.kwargs.update(k),
                                               with_kwargs=True)]
        for name, ch in lyr.named_children():
            def pre(m, a, k, name=name):
                if name not in rec.inputs:
                    rec.order.append(name)
                    rec.inputs[name] = a[0] if a else next(iter(k.values()))
            hooks.append(ch.register_forward_pre_hook(pre, with_kwargs=True))

        def stop(*_):
            raise _Stop

        hooks.append(lyr.register_forward_hook(stop))
        try:
            with torch.no_grad():
                self.model(input_ids=torch.as_tensor([ids], dtype=torch.long), use_cache=False)
        except _Stop:
            pass
        finally:
            for h in hooks:
                h.remove()
        return rec

    def point(self, ids, layer: int) -> tuple[Sublayer, torch.Tensor, Callable, Callable]:
        """(sublayer, X entering ``layer``, r -> the layer's own output at r, r -> x_r -> the same, differentiable)."""
        if not 0 <= layer < self.n_layer:
            raise RoutestatsError(f"layer {layer} is out of range: the model has {self.n_layer}")
        where = f"layer {layer}"
        rec = self._record(ids, layer)
        lyr = self.layers[layer]
        attn_name, attn = _attention_child(lyr)
        order = rec.order
        if attn_name not in order:
            raise RoutestatsError(f"{where}: the layer's forward never called its attention module {attn_name!r}")
        i = order.index(attn_name)
        norm = lambda n: _is_norm(getattr(lyr, n))  # noqa: E731
        if not (i and norm(order[i - 1])):
            raise RoutestatsError(f"{where}: no norm is called before the attention; regime covers pre-norm residual "
                                  "layers (METHODS B.3)")
        after = []
        for n in order[i + 1:]:  # children without parameters (dropout) are not blocks
            if norm(n):
                after.append(n)
            elif any(True for _ in getattr(lyr, n).parameters()):
                break
        if len(after) not in (1, 2):
            raise RoutestatsError(f"{where}: {len(after)} norms follow the attention before the next block; regime covers "
                                  "pre-norm layers with an optional sandwich norm (METHODS B.3)")
        pre = _norm_form(getattr(lyr, order[i - 1]), self.d, f"{where} {order[i - 1]}")
        post = _norm_form(getattr(lyr, after[0]), self.d, f"{where} {after[0]}") if len(after) == 2 else None
        if post is not None and post["kind"] != pre["kind"]:
            raise RoutestatsError(f"{where}: its pre-norm is a {pre['kind']} and its post-attention norm a {post['kind']}")
        sub = self._sublayer(attn, pre, post, rec, where)
        X = (rec.args[0] if rec.args else rec.kwargs["hidden_states"])[0].detach().double()
        Y = rec.inputs[after[-1]].detach().double().reshape(-1, self.d)  # one sequence (OPT flattens its tokens)
        own = self._own(layer, rec, after[-1])
        return sub, X, (lambda r: Y[r]), own

    def _sublayer(self, attn, pre: dict, post: dict | None, rec: _LayerPass, where: str) -> Sublayer:
        H = self.n_head
        fused = _child(attn, FUSED_NAMES)
        dh = int(getattr(attn, "head_dim", None) or self.d // H)
        if fused is not None:  # rows [H heads; kv heads; kv heads]: the key/value head count from the shape
            W, b = _weight(fused).double(), _bias(fused)
            kv = (W.shape[0] // dh - H) // 2
            sizes = [H * dh, kv * dh, kv * dh]
            if kv < 1 or W.shape[0] != sum(sizes):
                raise RoutestatsError(f"{where}: a fused query/key/value projection of {W.shape[0]} rows is not "
                                      f"{H} query heads and as many key as value heads of {dh}")
            Ws = W.split(sizes)
            bs = b.double().split(sizes) if b is not None else (None,) * 3
        else:
            mods = [_child(attn, names) for names in (Q_NAMES, K_NAMES, V_NAMES)]
            if any(m is None for m in mods):
                raise RoutestatsError(f"{where}: the attention has no separate query, key and value projections")
            Ws = [_weight(m).double() for m in mods]
            bs = [None if _bias(m) is None else _bias(m).double() for m in mods]
            kv = Ws[1].shape[0] // dh
        o = _child(attn, OUT_NAMES)
        if Ws[0].shape[0] != H * dh or Ws[1].shape[0] != kv * dh or kv < 1 or H % kv or _weight(o).shape[1] != H * dh:
            raise RoutestatsError(f"{where}: projections of {Ws[0].shape[0]}/{Ws[1].shape[0]} rows do not split into "
                                  f"{H} query and {kv} key/value heads of {dh}")
        qk = {}
        for key, names in (("q_gamma", ("q_norm", "q_layernorm")), ("k_gamma", ("k_norm", "k_layernorm"))):
            m = _child(attn, names)
            if m is not None:
                f = _norm_form(m, dh, f"{where} {names[0]}")
                if f["kind"] != "rmsnorm":
                    raise RoutestatsError(f"{where}: its {names[0]} is a {f['kind']}; regime covers per-head RMS QK-norm")
                qk[key], qk["qk_eps"] = f["gamma"], f["eps"]
        pe = rec.kwargs.get("position_embeddings")
        cos = sin = None
        if pe is not None:
            cos, sin = (t.detach().double().reshape(-1, t.shape[-1]) for t in pe)
        cfg = self.model.config
        softcap = getattr(attn, "attn_logit_softcapping", None) or getattr(cfg, "attn_logit_softcapping", None)
        return Sublayer(norm=pre["kind"], gamma=pre["gamma"], beta=pre["beta"], eps=pre["eps"],
                        W_Q=Ws[0], W_K=Ws[1], W_V=Ws[2], b_Q=bs[0], b_K=bs[1], b_V=bs[2],
                        W_O=_weight(o).double(), b_O=None if _bias(o) is None else _bias(o).double(),
                        n_head=H, n_kv_head=kv, causal=bool(getattr(attn, "is_causal", True)),
                        scale=getattr(attn, "scaling", None), softcap=float(softcap) if softcap else None,
                        window=getattr(attn, "sliding_window", None) or None,
                        post_gamma=None if post is None else post["gamma"],
                        post_beta=None if post is None else post["beta"], post_eps=post["eps"] if post else 1e-5,
                        rope_cos=cos, rope_sin=sin, **qk)

    def _own(self, layer: int, rec: _LayerPass, target: str) -> Callable:
        """r -> (x_r -> the residual entering the pre-MLP norm at r, from the layer's own forward), differentiable."""
        lyr, tgt = self.layers[layer], getattr(self.layers[layer], target)
        X0 = (rec.args[0] if rec.args else rec.kwargs["hidden_states"]).detach()

        def at(r: int) -> Callable:
            def f(x):
                got = []

                def grab(m, a, k):
                    got.append(a[0] if a else next(iter(k.values())))
                    raise _Stop

                X = torch.cat([X0[:, :r], x.to(X0.dtype)[None, None], X0[:, r + 1:]], dim=1)
                h = tgt.register_forward_pre_hook(grab, with_kwargs=True)
                try:
                    if rec.args:
                        lyr(X, *rec.args[1:], **rec.kwargs)
                    else:
                        lyr(**{**rec.kwargs, "hidden_states": X})
                except _Stop:
                    pass
                finally:
                    h.remove()
                return got[0].reshape(-1, X0.shape[-1])[r].double()
            return f
        return at


def load_stack(folder: Path) -> PretrainedStack:
    """A transformers folder (or GGUF folder) read by the shared loader, in float64, for the regime operators.

    Eager attention where the model soft-caps its scores (SDPA cannot), SDPA otherwise (float64 end to end).
    """
    from transformers import AutoConfig

    from runners.pretrained.load import read_checkpoint

    softcap = False
    if (Path(folder) / "config.json").is_file():
        try:
            softcap = bool(getattr(AutoConfig.from_pretrained(folder), "attn_logit_softcapping", None))
        except Exception:  # read_checkpoint refuses a bad config.json in its own words
            pass
    ck = read_checkpoint(folder, attn_implementation="eager" if softcap else "sdpa", dtype=torch.float64,
                         refuse_listed=False)
    return PretrainedStack(ck.model, ck.tokenizer, ck.weight_files)
