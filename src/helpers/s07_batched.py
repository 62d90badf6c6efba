"""Padded batches, section 7 (notebooks/07-quality.md): many prompts of different lengths in one forward pass.

Agreement (:mod:`helpers.s07_quality`) and the battery (:mod:`helpers.s07_battery`) both score several prompts
at once. A batch is rectangular, so shorter prompts are padded and an attention mask hides the padding:

* :func:`left_padded`: padding on the left, so every prompt ends in the last column;
* :func:`prefix_padded`: the prompts' common opening first (:func:`shared_prefix_length`), then the padding, so
  the opening can be computed once for all rows (:func:`padded_prefill`) where the model allows it
  (:func:`can_share_prefix`);
* :func:`greedy_batch`: greedy replies to several chat prompts in one ``generate`` call;
* :func:`last_logits_only`, :func:`pad_id_of`: the small questions a batch asks of a model and its tokenizer.
"""
from __future__ import annotations

import inspect
from typing import Sequence

import torch

from . import s01_kv_cache as kv_cache
from .infra.model import chat_prompt


def left_padded(prompts: Sequence[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack (1, P_i) prompts into (B, max P) with padding on the left, and the attention mask."""
    width = max(p.shape[1] for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - p.shape[1]:] = p[0]
        mask[i, width - p.shape[1]:] = 1
    return ids, mask


def shared_prefix_length(prompts: Sequence[torch.Tensor]) -> int:
    """How many leading tokens every prompt has in common (at most the shortest prompt's length minus one,
    so that every prompt keeps a token of its own)."""
    rows = [p.reshape(-1) for p in prompts]
    n = min(r.numel() for r in rows) - 1
    first = rows[0]
    for r in rows[1:]:
        differ = (r[:n] != first[:n]).nonzero()
        n = int(differ[0]) if differ.numel() else n
    return max(n, 0)


def prefix_padded(prompts: Sequence[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Like :func:`left_padded`, but the prompts' common prefix comes first and the padding sits after it.

    Returns (ids, attention mask, shared): every row starts with the same ``shared`` tokens, so a batch can
    compute them once (:func:`helpers.s07_battery.greedy_with_penalties`). Position ids follow the mask
    (``cumsum - 1``), so each token sits at the position it has in its own prompt and attends to exactly its
    own prompt's tokens: the padding in the middle changes nothing but the shape.
    """
    shared = shared_prefix_length(prompts)
    ids, mask = left_padded([p[:, shared:] for p in prompts], pad_id)
    head = prompts[0][:, :shared].expand(len(prompts), shared)
    return torch.cat([head, ids], 1), torch.cat([torch.ones_like(head), mask], 1), shared


def can_share_prefix(model) -> bool:
    """Whether a padded batch may compute its rows' common opening once (:func:`prefix_padded`).

    Only with full attention in every layer: a sliding window counts cache columns, so padding after the
    opening would push real tokens out of a row's window. And not through torch's dynamic int8 layers: they
    pick one activation scale for everything in a forward pass, so what a row gets depends on what else is in
    the pass.
    """
    if any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules()):
        return False
    cfg = getattr(model, "config", None)
    types = getattr(cfg, "layer_types", None)
    if types is not None:
        return all(t == "full_attention" for t in types)
    return cfg is not None and getattr(cfg, "sliding_window", None) is None


def last_logits_only(model) -> dict:
    """``logits_to_keep=1`` where the model takes it: a prefill needs only the last position's next-token scores."""
    try:
        return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    except (TypeError, ValueError):
        return {}


def pad_id_of(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


@torch.inference_mode()
def greedy_batch(model, tokenizer, texts: Sequence[str], n_new: int, repetition_penalty: float = 1.0,
                 force_length: bool = False) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Greedy replies to several chat prompts in one batch. Returns (sequences, attention mask, prompt width)."""
    ids, mask = left_padded([chat_prompt(tokenizer, t) for t in texts], pad_id_of(tokenizer))
    extra = {"min_new_tokens": n_new} if force_length else {}
    out = model.generate(ids, attention_mask=mask, max_new_tokens=n_new, do_sample=False, top_p=None, top_k=None,
                         temperature=None, repetition_penalty=repetition_penalty, pad_token_id=pad_id_of(tokenizer),
                         **extra)
    new_mask = torch.ones((len(texts), out.shape[1] - ids.shape[1]), dtype=torch.long)
    return out, torch.cat([mask, new_mask], dim=1), ids.shape[1]


def padded_prefill(model, ids: torch.Tensor, mask: torch.Tensor, shared: int = 0, **kwargs):
    """Run a padded batch with a cache; the first ``shared`` columns (the same tokens in every row) once, for
    one row, then copied to every row (:func:`helpers.s01_kv_cache.repeat_rows`). Returns (logits of the rest, cache). Positions follow the mask."""
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = kv_cache.new_cache(model)
    if shared:
        _, cache = kv_cache.forward(model, ids[:1, :shared], cache=cache, position_ids=pos[:1, :shared],
                                    **last_logits_only(model))
        b = ids.shape[0]
        cache = kv_cache.repeat_rows(model, cache, b)
    return kv_cache.forward(model, ids[:, shared:], cache=cache, attention_mask=mask, position_ids=pos[:, shared:],
                            **kwargs)
