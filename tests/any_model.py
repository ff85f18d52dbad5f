"""A sweep over every model type of the installed transformers (issue [any-model]).

For each ``model_type`` in transformers' base-model mapping (the list is read from
``transformers.models.auto``, never written by hand) a tiny random-weight config is built (hidden size
32, 2 layers, 4 heads, 2 key/value heads, head size 8, 4 experts where the type has experts) with a
word-level tokenizer (:mod:`tests.tiny_models`). Then the model is either

* **captured**: :func:`runners.pretrained.load.prepare_model` accepts it (its probe proves the seam sees every
  layer and equals the model's own eager attention), and :func:`check_capture` compares the captured
  runs with the model's own ``output_attentions`` on the tokenizer's full encoding; or
* **refused** in one line, with the reason the probe or the load gives; or
* left out of the sweep as **not a text model** (a composite image/audio-text config: its language model
  is wrapped, and capture loads text models) or **no tiny model** (transformers cannot build it at this
  size, or it has over 25 M parameters at this size).

Each captured model is also run through chunked attention (:func:`chunk_outcome`: per-query reductions in
blocks of query rows, as long records are captured), which it reproduces or falls back from to eager attention.
Each built model also goes through the regime adapter (:func:`regime_outcome`): every attention sublayer
rebuilt in float64 and proven at the last of 12 tokens (analytic vs autograd, the model's own output and its
own Jacobian), or refused in one line.

``python -m tests.any_model`` prints the section of docs/real-models.md that holds the table (with the transformers
version it ran on and its counts); ``python -m tests.any_model --write docs/real-models.md`` replaces it there.
"""

from __future__ import annotations

import copy
import sys
import warnings
from dataclasses import dataclass

MAX_PARAMETERS = 25_000_000
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, num_key_value_heads=2,
             head_dim=8, max_position_embeddings=64, rotary_dim=8, partial_rotary_factor=1.0, num_experts=4,
             num_local_experts=4, n_routed_experts=4, moe_intermediate_size=32, num_experts_per_tok=2, top_k=2,
             moe_topk=2, n_group=1, topk_group=1)
COMPOSITE = ("vision_config", "audio_config", "text_config", "encoder", "decoder", "speech_config")


@dataclass
class Outcome:
    model_type: str
    outcome: str  # captured | refused | not a text model | no tiny model
    reason: str = ""
    causal: bool | None = None
    model: object = None
    own: object = None
    loaded: object = None
    regime: tuple = ()  # (certified | refused, errors or reason), when the sweep asks for it
    observed: bool = False  # captured by observation: attention outside the interface, its own returned weights
    chunked: tuple = ()  # (chunked | eager, agreement or reason), for a captured model when the sweep asks for it


def model_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return sorted(MODEL_MAPPING_NAMES)


def build(model_type: str, tok, ids: dict) -> Outcome:
    """The tiny model of ``model_type`` prepared for capture, or why not."""
    import torch
    import transformers as T

    from routestats.errors import RoutestatsError
    from runners.pretrained.load import prepare_model, text_part

    try:
        cfg = T.AutoConfig.for_model(model_type)
    except Exception as exc:
        return Outcome(model_type, "no tiny model", f"no config: {str(exc).splitlines()[0][:80]}")
    subs = getattr(cfg, "sub_configs", None) or {}
    if any(k in subs for k in COMPOSITE):
        return Outcome(model_type, "not a text model", "a composite config (" + ", ".join(sorted(subs)) + ")")
    for k, v in {**SMALL, "vocab_size": len(tok) + 8, "pad_token_id": ids["pad"], "bos_token_id": ids["bos"],
                 "eos_token_id": ids["eos"], **hybrid_pattern(cfg)}.items():
        try:
            setattr(cfg, k, v)
        except Exception:
            pass
    try:
        with torch.device("meta"):
            size = sum(p.numel() for p in T.AutoModel.from_config(cfg, attn_implementation="eager").parameters())
        if size > MAX_PARAMETERS:
            return Outcome(model_type, "no tiny model", f"{size:,} parameters at this size")
        torch.manual_seed(0)
        model = text_part(T.AutoModel.from_config(cfg, attn_implementation="eager").eval())  # as the loader does
    except Exception as exc:
        return Outcome(model_type, "no tiny model", (str(exc).splitlines() or [type(exc).__name__])[0][:100])
    own = copy.deepcopy(model)  # the model run its own way, untouched by the seam
    try:
        loaded = prepare_model(model, tok)
    except RoutestatsError as exc:
        if "takes no input_ids" in str(exc):
            return Outcome(model_type, "not a text model", str(exc))
        return Outcome(model_type, "refused", str(exc), own=own)  # regime may still rebuild what capture refuses
    return Outcome(model_type, "captured", "", loaded.causal, model, own, loaded, observed=bool(loaded.observed))


NO_MATRIX = ("linear_attention", "mamba", "conv", "recurrent")  # layer types of hybrids without an attention matrix


def hybrid_pattern(cfg) -> dict:
    """Config values that put a softmax-attention layer second among a hybrid's two tiny layers (the first stays
    linear attention or a state-space block): a hybrid's default pattern at full size (every 4th, 6th or 8th layer)
    leaves two layers without any attention, and its own forward fails. Read from the config's own pattern fields;
    {} for a model that is not a hybrid.

    >>> hybrid_pattern(type("C", (), {"layer_types": ["linear_attention", "linear_attention", "full_attention"]})())
    {'layer_types': ['linear_attention', 'full_attention']}
    >>> hybrid_pattern(type("C", (), {"layer_types": ["full_attention", "sliding_attention"]})())  # not a hybrid
    {}
    >>> hybrid_pattern(type("C", (), {"attn_layer_period": 8, "attn_layer_offset": 4})())
    {'attn_layer_period': 2, 'attn_layer_offset': 1}
    """
    out = {}
    for name in ("layer_types", "layers_block_type", "block_types"):
        types = getattr(cfg, name, None)
        other = [t for t in types if t in NO_MATRIX] if isinstance(types, list) else []
        if other:
            softmax = [t for t in types if t not in NO_MATRIX and t not in ("moe", "mlp")] or ["full_attention"]
            out[name] = [other[0], softmax[0]]
    if isinstance(getattr(cfg, "attn_layer_period", None), int):
        out.update(attn_layer_period=2, attn_layer_offset=1)
    if hasattr(cfg, "attn_layer_indices"):
        out["attn_layer_indices"] = [1]
    if hasattr(cfg, "hybrid_layer_ids"):
        out["hybrid_layer_ids"] = [1]
    if out and hasattr(cfg, "mamba_d_state"):  # a hybrid's state-space blocks at the tiny width: 4 heads of 16
        out.update(mamba_n_heads=4, mamba_d_head=16, mamba_headdim=16, n_mamba_heads=4, mamba_n_groups=1,
                   mamba_ngroups=1, mamba_d_state=8, mamba_chunk_size=8, mamba_dt_rank=4, attention_hidden_size=64,
                   attention_head_dim=16)
    return out


REGIME_IDS = list(range(3, 15))  # 12 tokens


def regime_outcome(model) -> tuple[str, str]:
    """("certified", worst errors) when the regime adapter rebuilds every attention sublayer of ``model`` (float64)
    and every check holds at the last token, else ("refused", the one-line reason)."""
    import torch

    from routestats.errors import RoutestatsError
    from runners.regime.sublayer import operating_point
    from runners.regime.pretrained import PretrainedStack, refusing

    r, worst = len(REGIME_IDS) - 1, {"J": 0.0, "forward": 0.0, "own": 0.0}
    try:
        with refusing(""):  # the table names the model type
            stack = PretrainedStack(model.to(torch.float64), None)
            for layer in range(stack.n_layer):
                sub, X, ref, own = stack.point(REGIME_IDS, layer)
                e = operating_point(sub, X, r, ref(r), own=own(r))["errors"]
                worst["J"] = max(worst["J"], *(v for k, v in e.items() if k.startswith("J_")))
                worst["forward"] = max(worst["forward"], e["forward"] / max(1.0, float(ref(r).abs().max())))
                worst["own"] = max(worst["own"], e["own_jacobian"])
    except RoutestatsError as exc:
        return "refused", str(exc)
    return "certified", f"J {worst['J']:.0e}, forward {worst['forward']:.0e}, own J {worst['own']:.0e}"


def chunk_outcome(loaded, texts=("alpha beta gamma delta", "epsilon zeta eta theta alpha beta gamma")) -> tuple:
    """("chunked", agreement) when chunked attention reproduces the eager path on a record of ``texts`` in blocks
    of a third of its rows, baseline and bias w = 1 (:func:`runners.pretrained.probe.chunk_probe`), else
    ("eager", the reason capture falls back)."""
    from runners.corpora import Record
    from runners.pretrained.capture import plan_capture
    from runners.pretrained.seam import Condition
    from runners.pretrained.probe import chunk_probe

    plan = plan_capture(loaded, [Record("0", (("title", texts[0]), ("content", texts[1])))], fields=None, cap=24,
                        special="unnamed", truncation="only-last")
    got = [chunk_probe(loaded, plan.encoded[0], c, n_fields=len(plan.names))
           for c in (Condition("baseline"), Condition("bias", bias=1.0))]
    bad = [g for g in got if not g.ok]
    if bad:
        return "eager", bad[0].reason
    return "chunked", (f"reductions {max(g.reductions_max for g in got):.0e}, "
                       f"output {max(g.output_rel for g in got):.0e}")


def sweep(types=None, texts=("alpha beta gamma delta epsilon zeta eta theta",)):
    """Every model type's :class:`Outcome`, in name order (a generator: one model in memory at a time), with a
    word-level tokenizer over the words of ``texts``."""
    import torch

    from tests.tiny_models import tokenizer, words_of

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    tok, ids = tokenizer(words_of(texts), "plain")
    for mt in types or model_types():
        yield build(mt, tok, ids)


HEADING = "## Sweep of model types"
EXPLAINED = """\
"capture": accepted by the load probe and captured bitwise, or refused with its reason. "long context": the
chunked path reproduces the eager one (the worst agreement), or capture falls back to eager attention and why.
"regime": every attention sublayer rebuilt by `runners regime` and proven at the last of 12 tokens (the worst
analytic − autograd error, the relative forward error against the model's own layer, the error of J_T + J_Q + J_K
against autograd of the model's own layer), or refused with its reason. This section is written by
`python -m tests.any_model --write docs/real-models.md` from the sweep itself; the counts below are the table's.
For regime, the encoders of pre-LN encoder-decoders such as mBART are certified (the first list of layers is the
encoder's). Its refusals: post-LN encoders and layers without a norm before the attention (BERT family, OLMo 2/3),
attention and MLP in parallel (Phi, Cohere, GPT-J), projections fused per head (GPT-NeoX, Falcon, Persimmon), norms
of another form (Nemotron's LayerNorm1P, full-width QK-norm in OLMoE), and arithmetic the rebuilt sublayer does not
reproduce, caught by the forward check (interleaved partial RoPE in GLM, ERNIE 4.5, Helium; GPT-OSS's attention
sinks, whose closed forms are not derived).
"""


def counts(outcomes) -> dict:
    """How many types fall under each outcome, and how many of the captured are chunked and regime-certified."""
    every = {k: sum(o.outcome == k for o in outcomes) for k in ("captured", "refused", "not a text model",
                                                                 "no tiny model")}
    every["chunked"] = sum(bool(o.chunked) and o.chunked[0] == "chunked" for o in outcomes)
    every["observed"] = sum(o.observed for o in outcomes)
    every["certified"] = sum(bool(o.regime) and o.regime[0] == "certified" for o in outcomes)
    return every


def markdown(outcomes) -> str:
    rows = ["| model type | capture | reason | long context | regime |", "|---|---|---|---|---|"]
    for o in outcomes:
        why = o.reason.replace("|", "/")
        reg = f"{o.regime[0]}: {o.regime[1]}".replace("|", "/") if o.regime else ""
        chunk = f"{o.chunked[0]}: {o.chunked[1]}".replace("|", "/") if o.chunked else ""
        how = ", ".join(x for x in ("causal" if o.causal else "", "observed" if o.observed else "") if x)
        rows.append(f"| `{o.model_type}` | {o.outcome}{f' ({how})' if how else ''} | {why} | {chunk} | {reg} |")
    return "\n".join(rows)


def section(outcomes, version: str) -> str:
    """The docs section of the sweep: heading with the transformers version it ran on, counts, table."""
    c = counts(outcomes)
    shown = [o for o in outcomes if o.outcome in ("captured", "refused")]
    return (f"{HEADING} (transformers {version}, tiny configs)\n\n{EXPLAINED}\n"
            f"With transformers {version}: **{c['captured']} types captured** ({c['chunked']} of them chunked, "
            f"{c['observed']} observed: attention outside the interface, their own weights, no intervention), "
            f"**{c['refused']} refused** in one line, {c['not a text model']} not text models and "
            f"{c['no tiny model']} without a tiny model (left out); {c['certified']} certified for regime.\n\n"
            f"{markdown(shown)}\n")


def full_sweep() -> list:
    """Every type's outcome with its long-context and regime verdicts, models freed as it goes."""
    every = []
    for o in sweep():
        if o.outcome == "captured":
            o.chunked = ("eager", "observed: its own eager weights") if o.observed else chunk_outcome(o.loaded)
        if o.own is not None:
            o.regime = regime_outcome(o.own)
        o.model = o.own = o.loaded = None
        every.append(o)
    return every


def write_section(path, text: str) -> None:
    """Replace the sweep section (from its heading to the end of the file) of the page at ``path``."""
    from pathlib import Path

    page = Path(path).read_text(encoding="utf-8")
    at = page.find("\n" + HEADING)
    page = (page if at < 0 else page[:at]).rstrip("\n") + "\n\n" + text
    Path(path).write_text(page, encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover - prints (or writes) the docs section
    import transformers

    text = section(full_sweep(), transformers.__version__)
    if sys.argv[1:2] == ["--write"]:
        write_section(sys.argv[2], text)
    else:
        print(text)
