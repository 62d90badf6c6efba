"""Section 1 (notebooks/01-kv-cache.md): attention with and without the cache, and the arithmetic it costs.

A single attention head of dimension ``d`` makes the scaling visible without
the rest of the transformer: one generation step at context ``n`` either
recomputes the whole ``n x n`` score matrix (no cache) or one ``1 x n`` row
against stored keys and values (cache).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from .infra.messages import message
from . import s01_kv_cache as kv_cache


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Softmax(q k^T / sqrt(d)) v with a causal mask aligned to the end: query i sees keys <= its position."""
    nq, nk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scores = q @ k.transpose(-2, -1) / d ** 0.5
    if nq > 1:
        pos_q = torch.arange(nk - nq, nk).unsqueeze(1)
        mask = torch.arange(nk).unsqueeze(0) > pos_q
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def step_uncached(x: torch.Tensor, wq, wk, wv) -> torch.Tensor:
    """One step without a cache: project every position, build the n x n scores, keep the last row."""
    q, k, v = x @ wq, x @ wk, x @ wv
    return causal_attention(q, k, v)[-1:]


def step_cached(x_new: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, wq, wk, wv):
    """One step with a cache: project the new position only and attend with a 1 x n row.

    Returns (output, k_cache, v_cache) with the new key and value appended."""
    q = x_new @ wq
    k_cache = torch.cat([k_cache, x_new @ wk])
    v_cache = torch.cat([v_cache, x_new @ wv])
    return causal_attention(q, k_cache, v_cache), k_cache, v_cache


def score_matrix_bytes(n: int, cached: bool, bytes_per_element: int = 4) -> int:
    """Memory of the attention scores one step materialises: n x n without a cache, 1 x n with one."""
    if n < 1:
        raise ValueError(message("context n must be at least 1 token, got {n}.", n=n))
    return (n if cached else n * n) * bytes_per_element


# --------------------------------------------------------------------------- counting MACs


@dataclass(frozen=True)
class Dims:
    """What a decoder's arithmetic depends on."""
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp: int
    vocab: int

    @classmethod
    def from_config(cls, cfg) -> "Dims":
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        return cls(cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads,
                   getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
                   head_dim, cfg.intermediate_size, cfg.vocab_size)

    @property
    def weight_macs_per_token(self) -> int:
        """MACs of every matrix a token passes through: q, k, v, o, gated MLP (3 matrices), LM head."""
        attn = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = 3 * self.hidden * self.mlp
        return self.layers * (attn + mlp) + self.hidden * self.vocab

    @property
    def attention_macs_per_pair(self) -> int:
        """MACs for one (query, key) pair over all layers: q.k plus weight x value, every query head."""
        return self.layers * self.heads * 2 * self.head_dim


def macs_step(d: Dims, context: int, cached: bool) -> int:
    """MACs to produce the next token when ``context`` tokens exist (the new one included).

    Cached: one token through the weights, one row of ``context`` scores: linear in context.
    Uncached: every token through the weights again and the causal triangle of scores: quadratic.
    """
    if context < 1:
        raise ValueError(message("context must be at least 1 token, got {context}.", context=context))
    if cached:
        return d.weight_macs_per_token + context * d.attention_macs_per_pair
    pairs = context * (context + 1) // 2
    return context * d.weight_macs_per_token + pairs * d.attention_macs_per_pair


def macs_generation(d: Dims, tokens: int, cached: bool) -> int:
    """Total MACs to generate ``tokens`` tokens from a cold start (context grows 1, 2, ..., T)."""
    if tokens < 1:
        raise ValueError(message("tokens must be at least 1, got {tokens}.", tokens=tokens))
    return sum(macs_step(d, n, cached) for n in range(1, tokens + 1))


# --------------------------------------------------------------------------- counting on the real model


@dataclass(frozen=True)
class CountedFlops:
    """FLOPs PyTorch counted for one forward pass (a multiply-add counts 2)."""
    weights: int          # matrix products with the weight matrices (aten.mm / addmm)
    attention: int        # query x key and weights x value products (aten.bmm / matmul in attention)

    @property
    def total(self) -> int:
        return self.weights + self.attention


def counted_flops(model, ids: torch.Tensor, cache=None) -> CountedFlops:
    """Run one forward pass of ``ids`` (against ``cache``, if given) and count its FLOPs with
    ``torch.utils.flop_counter.FlopCounterMode``.

    The model runs its plain ("eager") attention for the count, whose matrix products the counter sees
    (a fused CPU attention kernel is invisible to it); its implementation is restored afterwards.
    """
    previous = model.config._attn_implementation
    counter = FlopCounterMode(display=False)
    try:
        model.set_attn_implementation("eager")
        with counter:
            kv_cache.forward(model, ids, cache=cache)
    finally:
        model.set_attn_implementation(previous)
    ops = {str(op): n for op, n in counter.get_flop_counts().get("Global", {}).items()}
    weights = ops.pop("aten.mm", 0) + ops.pop("aten.addmm", 0)
    return CountedFlops(weights, sum(ops.values()))
