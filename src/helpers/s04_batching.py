"""Batching: many requests per decode step, and where that stops being nearly free (section 4).

Decode is memory-bound: one step streams every weight once to produce one token.
Put several requests in the same step and that one read serves them all.
:func:`decode_step_sweep` times one decode step at several batch sizes,
:func:`find_knee` finds, from the data, where adding requests stops being
nearly free (:func:`around_the_knee` adds what each doubling bought on either
side), and :func:`step_cost_from_sweep` turns the sweep into the step
cost that the scheduling simulator (:mod:`helpers.s04_scheduling`) uses. The real
slot engine that serves requests is :mod:`helpers.s04_slots`.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from . import s01_kv_cache as kc
from .infra.measure import now

# --------------------------------------------------------------------------- the batch-size sweep


@dataclass(frozen=True)
class SweepPoint:
    batch: int
    step_seconds: float        # the fastest round: one decode step for the whole batch
    median_seconds: float      # the median round, for comparison
    spread: float              # (max - min) / median of the rounds: how noisy the machine was

    @property
    def tokens_per_second(self) -> float:
        return self.batch / self.step_seconds


# The cache API stays in the kv_cache adapter; these names are kept for the notebook and tests.
cache_from_kv = kc.cache_from_kv
cache_to_kv = kc.cache_to_kv


@torch.inference_mode()
def decode_step_sweep(model, batch_sizes: Sequence[int], context: int = 64, repeats: int = 5, warmup: int = 1,
                      seed: int = 0, progress: Callable | None = None) -> list[SweepPoint]:
    """Time one decode step for each batch size, every request holding ``context`` tokens of cache.

    The prompt is prefilled once and its keys and values are copied into every
    row (a decode step costs the same whatever the cached numbers are). The
    sizes are timed in interleaved rounds (1, 2, 4, ..., then 1, 2, 4, ...
    again), so a burst of load from another program slows one round of every
    size instead of every repeat of one size. Each size reports its fastest
    round: other programs can only ever add time, so the fastest round is the
    closest to what the step itself costs (the median is kept alongside).
    Each timed call decodes one more token, so the cache grows from ``context``
    to ``context + warmup + repeats``; decode cost hardly depends on context.
    """
    sizes = list(batch_sizes)
    if not sizes or any((not isinstance(b, int)) or b < 1 for b in sizes):
        raise ValueError(f"batch_sizes must be positive whole numbers, got {sizes!r}.")
    if context < 1:
        raise ValueError(f"context must be at least 1 token, got {context}.")
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats} and {warmup}.")
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (1, context), generator=torch.Generator().manual_seed(seed))
    ids = ids.to(next(model.parameters()).device)
    _, one = kc.prefill(model, ids)
    base = cache_to_kv(one)
    # expand() is a view of the one row; building the cache concatenates it, which makes the only copy
    caches = [cache_from_kv(model, [(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1)) for k, v in base])
              for b in sizes]
    tokens = [torch.full((b, 1), int(ids[0, -1]), device=ids.device) for b in sizes]
    times: list[list[float]] = [[] for _ in sizes]
    rounds = range(warmup + repeats)
    for r in (progress(rounds) if progress else rounds):
        for j in range(len(sizes)):
            t0 = now()
            kc.decode_step(model, tokens[j], caches[j])
            if r >= warmup:
                times[j].append(now() - t0)
    points = []
    for b, ts in zip(sizes, times):
        med = statistics.median(ts)
        points.append(SweepPoint(b, min(ts), med, (max(ts) - min(ts)) / med))
    return points


def per_doubling_gain(b1: int, thr1: float, b2: int, thr2: float) -> float:
    """Throughput gain from b1 to b2 expressed per doubling of the batch: 2.0 = free, 1.0 = no gain at all."""
    if not 0 < b1 < b2:
        raise ValueError(f"need 0 < b1 < b2, got {b1} and {b2}.")
    return (thr2 / thr1) ** (1.0 / math.log2(b2 / b1))


def find_knee(batches: Sequence[int], step_seconds: Sequence[float], factor: float = 2.0) -> int:
    """The knee: the largest batch measured before the step takes more than ``factor`` times a lone request's step.

    A decode step costs a fixed part (streaming every weight once, launching
    every kernel) plus a part that grows with the batch (the arithmetic for
    each row). While the fixed part dominates, extra requests ride along almost
    free; the knee is where the growing part has caught up with it, so the step
    takes twice as long as for one request (``factor=2``). Past it, latency grows
    with the batch and each doubling buys less throughput. Each point is
    compared with batch 1 only, so one noisy point (other than batch 1) moves
    the knee by at most one batch size. Returns the largest batch if the sweep
    never reaches the knee.
    """
    b = [int(x) for x in batches]
    s = [float(x) for x in step_seconds]
    if len(b) != len(s) or len(b) < 2:
        raise ValueError("find_knee needs at least two (batch, step time) points of equal count.")
    if sorted(set(b)) != b or b[0] < 1:
        raise ValueError("batch sizes must be positive and strictly increasing, starting from the reference batch.")
    if factor <= 1.0:
        raise ValueError(f"factor must exceed 1 (how many times batch 1's latency marks the knee), got {factor}.")
    for i in range(1, len(b)):
        if s[i] > factor * s[0]:
            return b[i - 1]
    return b[-1]


@dataclass(frozen=True)
class Knee:
    batch: int               # :func:`find_knee`'s answer
    index: int               # its position in the sweep
    gain_below: float        # throughput gain per doubling of the batch, on average up to the knee (2 = free)
    gain_above: float        # ... and from the knee to the largest batch
    latency_below: float     # latency growth per doubling, the same two ways
    latency_above: float


def around_the_knee(batches: Sequence[int], step_seconds: Sequence[float], factor: float = 2.0) -> Knee:
    """The knee of a sweep over doubling batch sizes, and what each doubling bought and cost on either side of it."""
    knee = find_knee(batches, step_seconds, factor)
    b, s = list(batches), [float(x) for x in step_seconds]
    k, last = b.index(knee), len(b) - 1
    thr = [n / t for n, t in zip(b, s)]
    below, above = 1 / max(k, 1), 1 / max(last - k, 1)          # per doubling: batches double at every point
    return Knee(knee, k, (thr[k] / thr[0]) ** below, (thr[-1] / thr[k]) ** above,
                (s[k] / s[0]) ** below, (s[-1] / s[k]) ** above)


def step_cost_from_sweep(batches: Sequence[int], step_seconds: Sequence[float]) -> Callable[[int], float]:
    """Seconds of one decode step for ``n`` active requests: linear between measured points (and beyond them)."""
    b = [int(x) for x in batches]
    s = [float(x) for x in step_seconds]
    if len(b) != len(s) or len(b) < 2 or sorted(set(b)) != b:
        raise ValueError("step_cost_from_sweep needs two or more strictly increasing batch sizes with one time each.")

    def cost(n: int) -> float:
        if n < 1:
            raise ValueError(f"a step needs at least one active request, got {n}.")
        if n <= b[0]:
            return s[0]            # nothing measured below the first batch size: a step costs at least that
        i = 0
        while i < len(b) - 2 and n > b[i + 1]:
            i += 1
        return s[i] + (s[i + 1] - s[i]) * (n - b[i]) / (b[i + 1] - b[i])

    return cost
