"""The slot batch: requests of different lengths decoding together, each row as if alone.

Section 4 (notebooks/04-batching.md), part 2, for real. :class:`SlotBatch` holds every active request's keys
and values in one padded tensor per layer, with a mask and per-row positions so that each row computes
what it would alone; a request joins it from its :class:`Prefill`, run alone (:func:`prefill_alone`).
The servers that run static or continuous batching over it are :mod:`helpers.s04_servers`; whether a
batched reply is what the request produces alone is checked in :mod:`helpers.s04_solo`.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Sequence

import torch

from . import s01_kv_cache as kc
from .infra.measure import now
from .infra.messages import message


@dataclass(frozen=True)
class Prefill:
    """One request's prompt, run through the model alone: what admitting it to a slot batch starts from.

    A prefill runs at batch 1, whatever the policy and whoever else is in the
    batch, so it is the same computation with the same result every time the
    same prompt is admitted. Kept, it can be reused instead of run again.
    """
    first: int                                       # the first greedy token of the reply
    logits: torch.Tensor                             # (vocab,) the last prompt position's logits, which chose it
    kv: list[tuple[torch.Tensor, torch.Tensor]]      # its cache, as kv_cache.cache_to_kv gives it
    seconds: float                                   # how long the prefill took, measured


@torch.inference_mode()
def prefill_alone(model, prompt_ids: torch.Tensor) -> Prefill:
    """Run one prompt (1, tokens) alone and time it.

    Only the last position's logits are computed (``logits_to_keep=1``): they
    pick the first token, and the earlier positions' logits over the whole
    vocabulary would be thrown away.
    """
    t0 = now()
    logits, cache = kc.forward(model, prompt_ids, cache=kc.new_cache(model), logits_to_keep=1)
    first = int(kc.greedy(logits))
    kv = kc.cache_to_kv(cache)
    return Prefill(first, logits[0, -1], kv, now() - t0)


def prompt_key(prompt_ids: torch.Tensor) -> tuple[int, ...]:
    """A prompt's tokens as a dictionary key: requests with the same prompt have the same prefill."""
    return tuple(prompt_ids.reshape(-1).tolist())


class SlotBatch:
    """Requests of different lengths decoding together in one padded batch.

    Row ``r`` holds one request's keys and values right-aligned in a
    (rows, kv_heads, L, head_dim) tensor per layer, with left padding where it
    is shorter than the longest row. Three things keep every row's arithmetic
    its own (the same values as a solo run; only the order of some sums may
    change with the batch's shape, see :func:`helpers.s04_solo.off_greedy`):

    * ``mask`` (rows, L): 1 on real cached tokens, 0 on padding, so attention
      never looks at another row's padding;
    * ``length`` (rows,): how many real tokens the row holds, which is the
      position of the next token (rotary embeddings need the true position, not
      the padded column);
    * admitting a request copies its own prefill cache into a new row; removing
      one drops its row and trims columns that became padding for every row.
    """

    reuse: dict | None = None       # prefills to take instead of running them again: see reusing_prefills

    def __init__(self, model):
        self.model = model
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.mask: torch.Tensor | None = None
        self.length = torch.zeros(0, dtype=torch.long)
        self.last = torch.zeros(0, 1, dtype=torch.long)
        self._cache = None

    @property
    def rows(self) -> int:
        return int(self.length.shape[0])

    @property
    def width(self) -> int:
        return 0 if self.mask is None else int(self.mask.shape[1])

    def nbytes(self) -> int:
        """Bytes of the padded K/V rectangle (padding included)."""
        if self.kv is None:
            return 0
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.kv)

    def real_tokens(self) -> int:
        return int(self.length.sum())

    @torch.inference_mode()
    def add(self, prompt_ids: torch.Tensor, prefill: Prefill | None = None) -> int:
        """Prefill one request alone and join it as a new row. Returns its first greedy token.

        ``prefill``: this prompt's :class:`Prefill`, already run; then it is not run again.
        """
        if prompt_ids.dim() != 2 or prompt_ids.shape[0] != 1 or prompt_ids.shape[1] < 1:
            raise ValueError(message("add() takes one prompt shaped (1, tokens) with at least one token."))
        if prefill is None and self.reuse is not None:
            prefill = self.reuse.get(prompt_key(prompt_ids))
        if prefill is None:
            prefill = prefill_alone(self.model, prompt_ids)
        first = torch.tensor([[prefill.first]], device=prompt_ids.device)
        new = prefill.kv
        p = prompt_ids.shape[1]
        if self.kv is None or self.rows == 0:
            self.kv = new
            self.mask = torch.ones(1, p, dtype=torch.long, device=prompt_ids.device)
        else:
            width = max(self.width, p)
            old = [(_left_pad(k, width), _left_pad(v, width)) for k, v in self.kv]
            mask = _left_pad(self.mask, width, dim=1)
            row = [(_left_pad(k, width), _left_pad(v, width)) for k, v in new]
            self.kv = [(torch.cat([ko, kn]), torch.cat([vo, vn])) for (ko, vo), (kn, vn) in zip(old, row)]
            row_mask = torch.zeros(1, width, dtype=torch.long, device=mask.device)
            row_mask[0, width - p:] = 1
            self.mask = torch.cat([mask, row_mask])
        self.length = torch.cat([self.length.to(prompt_ids.device), torch.tensor([p], device=prompt_ids.device)])
        self.last = torch.cat([self.last.to(prompt_ids.device), first])
        self._cache = None
        return int(first)

    def keep(self, rows: Sequence[int]) -> None:
        """Keep only these rows (in this order) and trim columns that are padding in every remaining row."""
        idx = torch.tensor(list(rows), dtype=torch.long)
        if len(idx) == 0:
            self.kv, self.mask = None, None
            self.length = self.length[:0]
            self.last = self.last[:0]
            self._cache = None
            return
        mask = self.mask[idx]
        used = mask.any(0).nonzero()
        start = int(used[0]) if len(used) else mask.shape[1]
        self.kv = [(k[idx, :, start:], v[idx, :, start:]) for k, v in self.kv]
        self.mask = mask[:, start:]
        self.length, self.last = self.length[idx], self.last[idx]
        self._cache = None

    @torch.inference_mode()
    def step(self) -> torch.Tensor:
        """One decode step for every row: feeds each row's last token, returns the next ones (rows, 1)."""
        if self.rows == 0:
            raise ValueError(message("the batch is empty: add a request before stepping."))
        if self._cache is None:
            self._cache = kc.cache_from_kv(self.model, self.kv)
        ones = torch.ones(self.rows, 1, dtype=self.mask.dtype, device=self.mask.device)
        mask = torch.cat([self.mask, ones], dim=1)
        logits, self._cache = kc.forward(self.model, self.last, cache=self._cache,
                                         attention_mask=mask, position_ids=self.length[:, None])
        self.kv = kc.cache_to_kv(self._cache)
        self.mask = mask
        self.length = self.length + 1
        self.last_logits = logits[:, -1]
        self.last = kc.greedy(logits)
        return self.last


@contextmanager
def reusing_prefills(prefills: dict):
    """Inside this block, :meth:`SlotBatch.add` takes a prompt's prefill from ``prefills`` (keyed by
    :func:`prompt_key`) when it is there, instead of running it again.

    For checking code that admits requests through :class:`SlotBatch` (the
    notebook's own short loops) on prompts that a run before it already
    prefilled: a prefill runs alone, so it would compute the same thing again,
    and what is being checked is the batching that follows it.
    """
    before, SlotBatch.reuse = SlotBatch.reuse, prefills
    try:
        yield prefills
    finally:
        SlotBatch.reuse = before


def padded_rows_are_exact(config) -> bool:
    """Whether :class:`SlotBatch` reproduces every request's solo output exactly on this architecture.

    True when every layer attends to its whole cache. With sliding-window layers the padded rows are not
    guaranteed to see the same window as a solo run (observed: requests joining a wide batch late can
    differ), so the notebook reports exactness there instead of asserting it.
    """
    types = getattr(config, "layer_types", None)
    if types:
        return all(t == "full_attention" for t in types)
    return not getattr(config, "use_sliding_window", False)


def _left_pad(t: torch.Tensor, width: int, dim: int = 2) -> torch.Tensor:
    missing = width - t.shape[dim]
    if missing <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([torch.zeros(shape, dtype=t.dtype, device=t.device), t], dim=dim)
