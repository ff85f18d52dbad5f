"""Tiny random-weight Hugging Face models of every supported family, built in-process (no download).

Each family gets a config of hidden size 32, 2 layers, 4 heads (2 key/value heads where the family
has grouped-query attention; a sliding window of 8 where it has one) and a word-level tokenizer
built with ``tokenizers`` over the bundled records' words, with the family's own special-token
template: ``[CLS] a [SEP] b [SEP]`` with token type ids (BERT, ALBERT, ELECTRA), the same without
token types (DistilBERT), ``<s> a </s></s> b </s>`` (RoBERTa, XLM-RoBERTa), a leading BOS (Llama,
Mistral, Gemma 2, Phi-3) or nothing (GPT-2, GPT-NeoX, Qwen2, Phi). :func:`save_tiny` writes the
model and tokenizer as a transformers folder, so capture loads it as any local model.

The last two dicts hold the independent test-side knowledge of where each family's value vectors
and output projection live (hooked in the tests, never taken from :mod:`runners.pretrained.families`).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
import transformers as T
from tokenizers import Tokenizer, models, pre_tokenizers, processors

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
WINDOW = 8

BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
DECODER_SPECIALS = ["<pad>", "<unk>", "<s>", "</s>"]

# family -> (config factory taking vocab size and special ids, tokenizer style, model input names)
STYLES = {
    "bert": "bert", "electra": "bert", "albert": "bert", "distilbert": "bert-notypes",
    "roberta": "roberta", "xlm-roberta": "roberta",
    "gpt2": "plain", "gpt_neox": "plain", "qwen2": "plain", "phi": "plain",
    "llama": "bos", "mistral": "bos", "gemma2": "bos", "phi3": "bos",
}


def config(name: str, vocab: int, ids: dict):
    """The tiny config of family ``name`` for a vocabulary of ``vocab`` tokens."""
    sp = dict(pad_token_id=ids["pad"], bos_token_id=ids.get("bos", ids["pad"]), eos_token_id=ids.get("eos", ids["pad"]))
    gqa = dict(num_key_value_heads=2)
    if name == "bert":
        return T.BertConfig(vocab_size=vocab, **SMALL, pad_token_id=ids["pad"])
    if name == "electra":
        return T.ElectraConfig(vocab_size=vocab, **SMALL, embedding_size=16, pad_token_id=ids["pad"])
    if name == "albert":
        return T.AlbertConfig(vocab_size=vocab, **SMALL, embedding_size=16, **sp)
    if name == "distilbert":
        return T.DistilBertConfig(vocab_size=vocab, dim=32, n_layers=2, n_heads=4, hidden_dim=64, pad_token_id=ids["pad"])
    if name == "roberta":
        return T.RobertaConfig(vocab_size=vocab, **SMALL, **sp)
    if name == "xlm-roberta":
        return T.XLMRobertaConfig(vocab_size=vocab, **SMALL, **sp)
    if name == "gpt2":
        return T.GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=64, **sp)
    if name == "gpt_neox":
        return T.GPTNeoXConfig(vocab_size=vocab, **SMALL, max_position_embeddings=64, **sp)
    if name == "llama":
        return T.LlamaConfig(vocab_size=vocab, **SMALL, **gqa, max_position_embeddings=64, **sp)
    if name == "qwen2":
        return T.Qwen2Config(vocab_size=vocab, **SMALL, **gqa, max_position_embeddings=64, **sp)
    if name == "mistral":
        return T.MistralConfig(vocab_size=vocab, **SMALL, **gqa, sliding_window=WINDOW, max_position_embeddings=64, **sp)
    if name == "gemma2":  # layer 0 sliding, layer 1 full; attention logits soft-capped at 50
        return T.Gemma2Config(vocab_size=vocab, **SMALL, **gqa, head_dim=8, sliding_window=WINDOW,
                              layer_types=["sliding_attention", "full_attention"], attn_logit_softcapping=5.0,
                              max_position_embeddings=64, **sp)
    if name == "phi":
        return T.PhiConfig(vocab_size=vocab, **SMALL, max_position_embeddings=64, **sp)
    if name == "phi3":
        return T.Phi3Config(vocab_size=vocab, **SMALL, **gqa, max_position_embeddings=64, **sp)
    raise KeyError(name)


def tokenizer(words, style: str):
    """A word-level fast tokenizer over ``words`` with the special-token template of ``style``."""
    specials = {"bert": BERT_SPECIALS, "bert-notypes": BERT_SPECIALS, "roberta": ROBERTA_SPECIALS}.get(style,
                                                                                                      DECODER_SPECIALS)
    vocab = {t: i for i, t in enumerate(specials + sorted(set(words) - set(specials)))}
    unk = "[UNK]" if style.startswith("bert") else "<unk>"
    tk = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    kw = dict(unk_token=unk)
    if style.startswith("bert"):
        tk.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
        kw.update(pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
        names = ["input_ids", "token_type_ids", "attention_mask"] if style == "bert" else ["input_ids", "attention_mask"]
    elif style == "roberta":
        tk.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
            special_tokens=[("<s>", vocab["<s>"]), ("</s>", vocab["</s>"])])
        kw.update(pad_token="<pad>", bos_token="<s>", eos_token="</s>", cls_token="<s>", sep_token="</s>")
        names = ["input_ids", "attention_mask"]
    else:
        if style == "bos":
            tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
        kw.update(pad_token="<pad>", bos_token="<s>", eos_token="</s>")
        names = ["input_ids", "attention_mask"]
    tok = T.PreTrainedTokenizerFast(tokenizer_object=tk, model_input_names=names, **kw)
    ids = {"pad": tok.pad_token_id, "bos": tok.convert_tokens_to_ids(kw.get("bos_token", kw.get("cls_token", unk))),
           "eos": tok.convert_tokens_to_ids(kw.get("eos_token", kw.get("sep_token", unk)))}
    return tok, ids


def words_of(texts) -> list[str]:
    """The pre-tokenizer's pieces of ``texts`` (runs of word characters, runs of punctuation)."""
    return sorted({w for t in texts for w in re.findall(r"\w+|[^\w\s]+", t)})


def save_tiny(name: str, folder: Path, texts, seed: int = 0) -> Path:
    """Write the tiny model of family ``name`` and its tokenizer to ``folder`` (a transformers folder)."""
    tok, ids = tokenizer(words_of(texts), STYLES[name])
    cfg = config(name, len(tok), ids)
    torch.manual_seed(seed)
    model = T.AutoModel.from_config(cfg, attn_implementation="eager")
    if cfg.architectures is None:
        cfg.architectures = [type(model).__name__]
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


# Test-side knowledge for the independent checks (hooks on the model's own modules).
# value: module whose output holds the value vectors, and how to take them from it (kv heads x head dim)
VALUE_MODULE = {
    "bert": ("encoder.layer.{i}.attention.self.value", "v"),
    "electra": ("encoder.layer.{i}.attention.self.value", "v"),
    "roberta": ("encoder.layer.{i}.attention.self.value", "v"),
    "xlm-roberta": ("encoder.layer.{i}.attention.self.value", "v"),
    "distilbert": ("transformer.layer.{i}.attention.v_lin", "v"),
    "albert": ("encoder.albert_layer_groups.0.albert_layers.0.attention.value", "v"),
    "gpt2": ("h.{i}.attn.c_attn", "last-third"),
    "gpt_neox": ("layers.{i}.attention.query_key_value", "neox"),
    "llama": ("layers.{i}.self_attn.v_proj", "v"),
    "qwen2": ("layers.{i}.self_attn.v_proj", "v"),
    "mistral": ("layers.{i}.self_attn.v_proj", "v"),
    "gemma2": ("layers.{i}.self_attn.v_proj", "v"),
    "phi": ("layers.{i}.self_attn.v_proj", "v"),
    "phi3": ("layers.{i}.self_attn.qkv_proj", "phi3"),
}
OUT_MODULE = {
    "bert": "encoder.layer.{i}.attention.output.dense", "electra": "encoder.layer.{i}.attention.output.dense",
    "roberta": "encoder.layer.{i}.attention.output.dense", "xlm-roberta": "encoder.layer.{i}.attention.output.dense",
    "distilbert": "transformer.layer.{i}.attention.out_lin",
    "albert": "encoder.albert_layer_groups.0.albert_layers.0.attention.dense",
    "gpt2": "h.{i}.attn.c_proj", "gpt_neox": "layers.{i}.attention.dense",
    "llama": "layers.{i}.self_attn.o_proj", "qwen2": "layers.{i}.self_attn.o_proj",
    "mistral": "layers.{i}.self_attn.o_proj", "gemma2": "layers.{i}.self_attn.o_proj",
    "phi": "layers.{i}.self_attn.dense", "phi3": "layers.{i}.self_attn.o_proj",
}


def submodule(model, path: str):
    return model.get_submodule(path)
