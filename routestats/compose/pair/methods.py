"""The words of the one-pair report's methods paragraph, generated from the
finished :class:`~routestats.report.Report` (its tables) and the pair's typed context, never from a side channel."""

from __future__ import annotations

from typing import TYPE_CHECKING

from routestats.compose.claims import layers_phrase
from routestats.report import Report
from routestats.settings import AnalysisSettings

if TYPE_CHECKING:  # the context's type, for the annotation only
    from routestats.compose.pair.context import PairContext

__all__ = ["pair_methods", "capture_sentences", "frame_of"]


def frame_of(report: Report, name: str):
    """A table's frame of the finished report, or None when the report has no such table."""
    return report.frame(name) if name in report.tables() else None


_SETS = {"all": "every evaluated example", "primary": "the primary examples", "length_sample": "the length sample",
         "test_sample": "the untouched test sample"}


def _protocol_sentence(report: Report, s: AnalysisSettings) -> str:
    """Which examples each family of tables uses (METHODS 3.7 protocol)."""
    paired = f"The paired tables use {_SETS[s.examples]} ({report.facts['n_examples']})"
    la = frame_of(report, "length_adjusted")
    if la is None:
        return paired + "."
    if s.length_examples == s.examples:
        return paired + ", as do the length analyses."
    return paired + f"; the length analyses use {_SETS[s.length_examples]} ({int(la['n'].max())})."


def capture_sentences(base: dict | None, variant: dict | None, n_examples: int) -> str:
    """What a reader of a paper needs to know about how a pretrained model's attention was captured."""
    if not base:
        return ""
    out = []
    model = base["class"] or "the model"
    fam = f" ({base['family']} family, model type {base['model_type']})" if base["family"] and base["model_type"] else ""
    if base["path"] == "attention-interface":
        out.append(f"Attention was captured from {model}{fam} through transformers' AttentionInterface: each "
                   "layer's own eager attention computed the weights, with the masks the model builds itself "
                   "(causal, sliding-window and padding, where it has them), and the intervention was added to "
                   "that mask.")
    elif base["path"] == "observed":
        out.append(f"Attention was observed from {model}{fam}: its attention lies outside transformers' "
                   "AttentionInterface, so the weights are those its own eager forward returns "
                   "(output_attentions=True), with its own masks; no intervention on its scores was possible, and "
                   "any difference between the runs comes from what differs between them (another checkpoint).")
    elif base["path"]:
        out.append(f"Attention was captured from {model}{fam} ({base['path']}).")
    if base["inputs"]:
        out.append(f"The model received everything its tokenizer returns ({', '.join(base['inputs'])}).")
    if base["special_tokens"]:
        out.append("Special tokens and separators " + ("belong to no field (field 0): they are no field's keys, so "
                                                       "their attention counts as unnamed mass."
                                                       if base["special_tokens"] == "unnamed" else
                                                       "were attached to their neighbouring field."))
    if base["truncation"] and base["cap"] is not None and base["examples_truncated"] is not None:
        cut = ", ".join(f"{k} {v:,}" for k, v in base["tokens_cut"].items())
        rule = ("the last field is cut first" if base["truncation"] == "only-last" else
                "tokens are removed from the longest field first")
        fb = (f"; {base['fallbacks']} fell back to longest-first because the first field alone filled the cap"
              if base["fallbacks"] else "")
        out.append(f"Records were cut to the {base['cap']}-token cap ({rule}): {base['examples_truncated']} of "
                   f"{n_examples} examples were truncated (tokens cut: {cut}){fb}.")
    if base.get("layers_renumbered"):
        out.append(f"Only layers {', '.join(map(str, base['layers_stored']))} were stored, by a capture written "
                   "before runs kept the model's layer numbers: tables and figures number them 0 to "
                   f"{len(base['layers_stored']) - 1}.")
    elif base.get("no_attention_matrix"):
        none = base["no_attention_matrix"]
        out.append(f"The model is a hybrid: {layers_phrase(none)} {'have' if len(none) > 1 else 'has'} no attention "
                   f"matrix (linear attention or state-space blocks), so {layers_phrase(base['layers_stored'] or [])} "
                   "were stored; tables and figures label them by the model's own layer numbers, and measures that "
                   "need every layer (rollout) are not computed.")
    elif base.get("layers_stored"):
        of = f" of its {base['model_layers']}" if base.get("model_layers") else ""
        out.append(f"Only layers {', '.join(map(str, base['layers_stored']))}{of} were stored; tables and figures "
                   "label them by the model's own layer numbers.")
    q = base["quantisation"]
    if q and q.get("file_type"):
        out.append(f"The weights are {q.get('format', '').upper()} {q['file_type']} (quantised), dequantised to "
                   f"{q.get('dequantised_to') or 'float32'} for the forward passes.")
    elif base["dtype"]:
        out.append(f"The forward passes ran in {base['dtype']}.")
    if variant and variant.get("pairing_reason"):
        out.append(f"The variant is a second checkpoint of the same architecture and tokenizer, on the same "
                   f"records ({variant['pairing_reason']}).")
    return " " + " ".join(out)


def pair_methods(report: Report, s: AnalysisSettings, ctx: "PairContext") -> str:
    """A methods paragraph generated from the finished report's tables, the settings and the pair's context (its
    typed fields, not the report's ``facts`` by name)."""
    names = ", ".join(dict(ctx.pair.baseline.named_fields).values())
    mode = {"shared": "one generator whose bootstrap indices and sign patterns are shared across layers",
            "numpy": "the reference implementation's per-layer NumPy procedure",
            "python-random": "the reference implementation's per-layer Python random procedure"}[s.mode]
    when = ("from the pretrained model as it is and under the intervention (no training; the intervention acts at "
            "inference time)" if ctx.pretrained else f"at training step {ctx.step}")
    causal = (f" The models attend causally: a query sees only earlier keys, the opportunity O_i counts visible keys, "
              f"and queries whose visible named keys all lie in their own field (SFM 1 whatever the model does) "
              f"are {'excluded' if ctx.trivial == 'exclude' else 'included'}." if ctx.causal else
              (" Trivial queries (all visible keys in their own field) are excluded." if ctx.trivial == "exclude"
               else ""))
    keys = " SFM is renormalised over the named keys, S / (1 − U)." if s.keys == "named" else ""
    return (
        f"Attention was recorded {when}, {ctx.n_layers} layers × {ctx.n_heads} heads. "
        f"{_protocol_sentence(report, s)} "
        f"Same-field attention mass (SFM) is the attention a valid query places on valid keys of its own field "
        f"(named fields: {names}), averaged over valid queries, then heads, then examples, without renormalisation; "
        f"entropy is −Σ p ln(p + 1e-10) over all keys, averaged the same way. Paired differences (variant − baseline, "
        f"per example) are summarised by their mean with a {100 * s.confidence:.0f}% percentile bootstrap "
        f"confidence interval ({s.resamples:,} resamples) and tested with a two-sided sign-flip permutation test on "
        f"the absolute mean ({s.permutations:,} random sign patterns, p = (count + 1)/(P + 1)); p-values are "
        f"Holm-adjusted across the {ctx.n_layers} layers, and d_z = mean/SD (ddof 1). Random procedures use seed "
        f"{s.seed} ({mode}). Opportunity-adjusted SFM is (SFM − O_e)/(1 − O_e) with "
        + ("O_e the mean over valid queries of O_i = (visible keys in the query's field)/(visible keys), the causal "
           "chance level, excluding examples where O_e = 1. " if ctx.causal else
           "O_e = Σ_f n_f²/N², excluding examples with a single visible field. ")
        + f"Field-to-field means count examples lacking the source field as "
        f"{'zero' if s.missing_fields == 'zero' else 'missing'}"
        + ("; a source field none of whose queries is counted (every one trivial) has no value (shown –)."
           if ctx.trivial == "exclude" else ".")
        + (f" Gradient ratios are means of per-step ratios over up to {s.gradient_window} steps ending at each "
           "checkpoint." if "gradients" in report.tables() else "") + f"{causal}{keys}"
        + capture_sentences(ctx.pair.baseline.capture, ctx.pair.variant.capture, ctx.n_examples)
    )
