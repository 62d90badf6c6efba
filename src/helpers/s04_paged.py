"""Paged KV memory: the cache in fixed-size blocks, found through a per-sequence block table.

Section 4 (notebooks/04-batching.md), part 3. This is the idea of PagedAttention (vLLM, Kwon et al. 2023),
borrowed from an operating system's virtual memory:

* the cache lives in a pool of *physical blocks*, each holding ``block_size``
  tokens (:class:`BlockAllocator` hands them out and takes them back);
* each sequence has a *block table*: its logical block ``j`` (tokens
  ``j*block_size`` to ``(j+1)*block_size - 1``) lives in physical block
  ``table[j]``. A sequence is physically scattered and logically contiguous;
* a sequence takes a new block only when its last one is full, so at most
  ``block_size - 1`` slots per sequence are wasted (internal fragmentation),
  instead of reserving the longest possible context up front;
* sequences that begin with the same tokens can point at the same blocks
  (:meth:`PagedKVCache.fork`). Blocks are reference-counted; writing into a
  shared block first copies it (copy on write).

:func:`paged_attention` attends through a block table block by block, with the
running (online) softmax a real kernel uses, so no contiguous copy is needed
(the notebook holds it to PyTorch's attention over the contiguous cache).
:func:`replay` runs a whole serving trace through the allocator and reports
the memory each scheme needs at every step; :func:`prefix_saving` replays it
with and without a common prefix shared.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Hashable, Mapping, Sequence

import torch

from .infra.messages import message
from .infra.plotting import PALETTE


class OutOfBlocks(MemoryError):
    """The block pool is exhausted."""


def _check_block_size(block_size) -> None:
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(message("block_size must be a whole number of tokens >= 1, got {block_size!r}.",
                                 block_size=block_size))


class BlockAllocator:
    """A pool of ``num_blocks`` physical blocks with reference counts and a first-in, first-out free list."""

    def __init__(self, num_blocks: int, block_size: int):
        _check_block_size(block_size)
        if not isinstance(num_blocks, int) or num_blocks < 1:
            raise ValueError(message("num_blocks must be a whole number >= 1, got {num_blocks!r}.",
                                     num_blocks=num_blocks))
        self.num_blocks, self.block_size = num_blocks, block_size
        self.free_blocks: deque[int] = deque(range(num_blocks))
        self.refcount = [0] * num_blocks

    @property
    def used(self) -> int:
        return self.num_blocks - len(self.free_blocks)

    def allocate(self) -> int:
        if not self.free_blocks:
            raise OutOfBlocks(f"all {self.num_blocks} KV blocks are in use: free a sequence or make the pool bigger.")
        b = self.free_blocks.popleft()
        self.refcount[b] = 1
        return b

    def share(self, block: int) -> None:
        if self.refcount[block] < 1:
            raise ValueError(message("block {block} is free; only a block in use can be shared.", block=block))
        self.refcount[block] += 1

    def release(self, block: int) -> None:
        if self.refcount[block] < 1:
            raise ValueError(message("block {block} is already free; release each reference once.", block=block))
        self.refcount[block] -= 1
        if self.refcount[block] == 0:
            self.free_blocks.append(block)


class PagedKVCache:
    """Block tables over a :class:`BlockAllocator`, optionally with real storage for one layer's K and V.

    With ``kv_heads`` and ``head_dim`` given, the pool holds tensors shaped
    (num_blocks, block_size, kv_heads, head_dim) and :meth:`append` writes real
    keys and values; without them it only does the bookkeeping (enough to
    count memory).
    """

    def __init__(self, num_blocks: int, block_size: int, kv_heads: int | None = None, head_dim: int | None = None,
                 dtype: torch.dtype = torch.float32):
        self.alloc = BlockAllocator(num_blocks, block_size)
        self.block_size = block_size
        self.tables: dict[Hashable, list[int]] = {}
        self.lengths: dict[Hashable, int] = {}
        self.copies_on_write = 0
        self.pool_k = self.pool_v = None
        if kv_heads is not None and head_dim is not None:
            shape = (num_blocks, block_size, kv_heads, head_dim)
            self.pool_k = torch.zeros(shape, dtype=dtype)
            self.pool_v = torch.zeros(shape, dtype=dtype)

    # -- sequences
    def add_sequence(self, seq: Hashable) -> None:
        if seq in self.tables:
            raise ValueError(message("sequence {seq!r} already exists; free it first or use a new id.", seq=seq))
        self.tables[seq], self.lengths[seq] = [], 0

    def fork(self, parent: Hashable, child: Hashable) -> None:
        """Start ``child`` as a copy of ``parent`` that shares every block (no data is copied)."""
        if parent not in self.tables:
            raise ValueError(message("cannot fork unknown sequence {parent!r}.", parent=parent))
        self.add_sequence(child)
        for b in self.tables[parent]:
            self.alloc.share(b)
        self.tables[child] = list(self.tables[parent])
        self.lengths[child] = self.lengths[parent]

    def free(self, seq: Hashable) -> None:
        if seq not in self.tables:
            raise ValueError(message("cannot free unknown sequence {seq!r}.", seq=seq))
        for b in self.tables.pop(seq):
            self.alloc.release(b)
        del self.lengths[seq]

    def append(self, seq: Hashable, k: torch.Tensor | None = None, v: torch.Tensor | None = None,
               n: int | None = None) -> None:
        """Add tokens to ``seq``: ``k``/``v`` shaped (tokens, kv_heads, head_dim), or just ``n`` tokens of bookkeeping."""
        if seq not in self.tables:
            raise ValueError(message("unknown sequence {seq!r}: add_sequence() or fork() it first.", seq=seq))
        count = k.shape[0] if k is not None else n
        if count is None or count < 0:
            raise ValueError(message("append needs keys and values, or a token count n >= 0."))
        table, bs = self.tables[seq], self.block_size
        for t in range(count):
            pos = self.lengths[seq]
            j, off = divmod(pos, bs)
            if j == len(table):
                table.append(self.alloc.allocate())
            elif self.alloc.refcount[table[j]] > 1:          # shared: copy on write
                old, new = table[j], self.alloc.allocate()
                if self.pool_k is not None:
                    self.pool_k[new, :off] = self.pool_k[old, :off]
                    self.pool_v[new, :off] = self.pool_v[old, :off]
                self.alloc.release(old)
                table[j] = new
                self.copies_on_write += 1
            if k is not None and self.pool_k is not None:
                self.pool_k[table[j], off] = k[t]
                self.pool_v[table[j], off] = v[t]
            self.lengths[seq] = pos + 1

    # -- reading
    def gather(self, seq: Hashable) -> tuple[torch.Tensor, torch.Tensor]:
        """The sequence's K and V as contiguous (tokens, kv_heads, head_dim) tensors, read through its table."""
        if self.pool_k is None:
            raise ValueError(message("this cache only keeps books; create it with kv_heads and head_dim to store K "
                                     "and V."))
        idx = torch.tensor(self.tables[seq], dtype=torch.long)
        n = self.lengths[seq]
        k = self.pool_k[idx].flatten(0, 1)[:n]
        v = self.pool_v[idx].flatten(0, 1)[:n]
        return k, v

    # -- accounting
    @property
    def used_blocks(self) -> int:
        return self.alloc.used

    def allocated_tokens(self) -> int:
        """Token slots in blocks that are in use (each shared block counted once)."""
        return self.alloc.used * self.block_size

    def logical_tokens(self) -> int:
        """Tokens the sequences hold, as if nothing were shared."""
        return sum(self.lengths.values())


# --------------------------------------------------------------------------- attention through a block table


def paged_attention(q: torch.Tensor, pool_k: torch.Tensor, pool_v: torch.Tensor, table: Sequence[int],
                    length: int) -> torch.Tensor:
    """The same attention, reading K and V block by block through ``table`` with a running softmax.

    For each block: scores against its keys, then rescale what was accumulated
    so far by exp(old max - new max) and add this block's share. The n-token
    row of scores is never stored whole, and no contiguous copy of the cache is made.
    """
    heads, d = q.shape
    block_size, kv_heads = pool_k.shape[1], pool_k.shape[2]
    if length < 1 or length > len(table) * block_size:
        raise ValueError(message("length must be between 1 and {capacity} tokens for this table, got {length}.",
                                 capacity=len(table) * block_size, length=length))
    group = heads // kv_heads
    m = torch.full((heads,), float("-inf"), dtype=q.dtype)
    denom = torch.zeros(heads, dtype=q.dtype)
    acc = torch.zeros(heads, d, dtype=q.dtype)
    for j, b in enumerate(table):
        valid = min(block_size, length - j * block_size)
        if valid <= 0:
            break
        kb = pool_k[b, :valid].repeat_interleave(group, dim=1).transpose(0, 1)   # (heads, valid, d)
        vb = pool_v[b, :valid].repeat_interleave(group, dim=1).transpose(0, 1)
        s = (kb @ q.unsqueeze(-1)).squeeze(-1) / math.sqrt(d)                    # (heads, valid)
        m_new = torch.maximum(m, s.max(-1).values)
        rescale = torch.exp(m - m_new)
        p = torch.exp(s - m_new.unsqueeze(-1))
        denom = denom * rescale + p.sum(-1)
        acc = acc * rescale.unsqueeze(-1) + (p.unsqueeze(1) @ vb).squeeze(1)
        m = m_new
    return acc / denom.unsqueeze(-1)


# --------------------------------------------------------------------------- memory over a serving trace


def reserved_tokens(slots: int, max_context: int) -> int:
    """Token slots a server reserves when every slot gets room for the longest possible context."""
    if slots < 1 or max_context < 1:
        raise ValueError(message("slots and max_context must be >= 1, got {slots} and {max_context}.",
                                 slots=slots, max_context=max_context))
    return slots * max_context


def blocks_needed(tokens: int, block_size: int) -> int:
    _check_block_size(block_size)
    return -(-tokens // block_size)


@dataclass
class Replay:
    """Memory at every step of a trace, in tokens' worth of cache slots."""
    block_size: int
    shared_prefix: int
    stored: list[int]       # tokens the sequences hold (shared prefix counted once when shared)
    logical: list[int]      # tokens the sequences hold, nothing shared
    paged: list[int]        # token slots in blocks in use
    used_blocks: list[int]
    copies_on_write: int
    block_owner: list[list[int | None]]   # per step, owner request of every physical block (None = free)
    num_blocks: int

    @property
    def internal_fragmentation(self) -> list[float]:
        """Share of allocated slots holding nothing: the unfilled tail of each sequence's last block."""
        return [1 - s / p if p else 0.0 for s, p in zip(self.stored, self.paged)]


PREFIX = "prefix"


def replay(trace: Sequence[Mapping[int, int]], block_size: int, shared_prefix: int = 0,
           num_blocks: int | None = None) -> Replay:
    """Run a serving trace through a paged cache.

    ``trace[t]`` maps each request holding cache after step ``t`` to the
    tokens it holds (prompt and generated). A request that appears is
    admitted, one that grows appends, one that disappears is freed. With
    ``shared_prefix = p > 0``, the first ``p`` tokens of every request are one
    stored prefix: each request forks from it, sharing its blocks, and the
    first write into a shared, half-filled block copies it (copy on write).
    """
    _check_block_size(block_size)
    if len(trace) == 0:
        raise ValueError(message("the trace is empty: give at least one step."))
    if shared_prefix < 0:
        raise ValueError(message("shared_prefix must be >= 0 tokens, got {shared_prefix}.",
                                 shared_prefix=shared_prefix))
    if num_blocks is None:   # enough for the worst step without sharing, plus copies
        num_blocks = max(sum(blocks_needed(n, block_size) + 1 for n in step.values()) for step in trace) + \
            blocks_needed(shared_prefix, block_size) + 1
    cache = PagedKVCache(num_blocks, block_size)
    if shared_prefix:
        cache.add_sequence(PREFIX)
        cache.append(PREFIX, n=shared_prefix)
    out = Replay(block_size, shared_prefix, [], [], [], [], 0, [], num_blocks)
    for step in trace:
        for r in [r for r in cache.tables if r != PREFIX and r not in step]:
            cache.free(r)
        for r, n in step.items():
            if r not in cache.tables:
                if shared_prefix:
                    if n < shared_prefix:
                        raise ValueError(message("request {r} holds {n} tokens, fewer than the shared prefix "
                                                 "{shared_prefix}.", r=r, n=n, shared_prefix=shared_prefix))
                    cache.fork(PREFIX, r)
                else:
                    cache.add_sequence(r)
            grow = n - cache.lengths[r]
            if grow < 0:
                raise ValueError(message("request {r} shrank from {before} to {n} tokens; a trace only grows.",
                                         r=r, before=cache.lengths[r], n=n))
            cache.append(r, n=grow)
        logical = sum(step.values())
        stored = logical - (len(step) - 1) * shared_prefix if (shared_prefix and step) else logical
        if shared_prefix and not step:
            stored = shared_prefix
        out.logical.append(logical)
        out.stored.append(stored)
        out.paged.append(cache.allocated_tokens())
        out.used_blocks.append(cache.used_blocks)
        owner = [None] * num_blocks
        for r, table in cache.tables.items():
            for b in table:
                owner[b] = -1 if (cache.alloc.refcount[b] > 1 or r == PREFIX) else r
        out.block_owner.append(owner)
    out.copies_on_write = cache.copies_on_write
    return out


def prefix_saving(trace: Sequence[Mapping[int, int]], prefix: int, block_size: int) -> tuple[Replay, Replay, float]:
    """The trace replayed without and with its ``prefix``-token common prefix shared, and the share of the mean
    paged memory that sharing saves."""
    plain, share = replay(trace, block_size), replay(trace, block_size, shared_prefix=prefix)
    return plain, share, 1 - sum(share.paged) / sum(plain.paged)


def common_prefix_length(prompts: Sequence[Sequence[int]]) -> int:
    """How many leading tokens every prompt shares."""
    if not prompts:
        raise ValueError(message("give at least one prompt."))
    n = min(len(p) for p in prompts)
    for i in range(n):
        t = prompts[0][i]
        if any(p[i] != t for p in prompts):
            return i
    return n


def block_owner_grid(block_owner: Sequence[Sequence], colours: int = 7):
    """A replay's block owners as a heat map: (rows used, z values, hover text, a banded colour scale).

    z is -1 for the shared prefix, the request number modulo ``colours`` otherwise and None for a free
    block; the colour scale gives each value one flat band (black for the prefix).
    """
    steps = range(len(block_owner))
    used = [b for b in range(len(block_owner[0]) if block_owner else 0) if any(o[b] is not None for o in block_owner)]
    z = [[None if (o := block_owner[t][b]) is None else -1 if o == -1 else o % colours for t in steps] for b in used]
    text = [[(message("free") if (o := block_owner[t][b]) is None else message("shared prefix") if o == -1 else
              message("request {request}", request=o))
             for t in steps] for b in used]
    scale = []
    for i, c in enumerate(["#1a1a1a"] + PALETTE[:colours]):
        scale += [[max(0.0, (i - 0.5) / colours), c], [min(1.0, (i + 0.5) / colours), c]]
    return used, z, text, scale
