"""Batching: many requests per decode step, and where that stops being nearly free.

Section 4 (notebooks/04-batching.md), part 1. Decode is memory-bound: one step streams every weight once
to produce one token. Put several requests in the same step and that one read serves them all.
:func:`decode_step_sweep` times one decode step at several batch sizes, :func:`find_knee` finds, from the
data, where adding requests stops being nearly free (:func:`around_the_knee` adds what each doubling bought
on either side; :func:`sweep_checks` reads the part's claims off a sweep), and :func:`step_cost_from_sweep` turns the sweep into the step cost that the scheduling
simulator (:mod:`helpers.s04_scheduling`) uses. The real slot engine that serves requests is
:mod:`helpers.s04_slots` with :mod:`helpers.s04_servers`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

import torch

from . import s01_kv_cache as kc
from .infra.chapter import S4_CONTEXT
from .infra.measure import Timing, interleaved_medians
from .infra.messages import message

# --------------------------------------------------------------------------- the batch-size sweep


@torch.inference_mode()
def decode_step_sweep(model, batch_sizes: Sequence[int], context: int = S4_CONTEXT, repeats: int = 5,
                      warmup: int = 1, seed: int = 0,
                      rounds: Callable[[Iterable[int]], Iterable[int]] | None = None) -> dict[int, Timing]:
    """Time one decode step for each batch size, every request holding ``context`` tokens of cache.

    Returns ``{batch: Timing}``: a step's fastest round is ``.min``, its median ``.median``, and how
    noisy the machine was ``.spread``. The prompt is prefilled once and its cache row repeated into
    every row (a decode step costs the same whatever the cached numbers are). The sizes are timed in
    interleaved rounds (1, 2, 4, ..., then 1, 2, 4, ... again; :func:`helpers.infra.measure.interleaved_medians`,
    whose ``rounds`` may wrap them in a progress bar), so a burst of load from another program slows one
    round of every size instead of every repeat of one size. The fastest round is the closest to what
    the step itself costs: other programs can only ever add time. Each timed call decodes one more token,
    so the cache grows from ``context`` to ``context + warmup + repeats``; decode cost hardly depends on context.
    """
    sizes = list(batch_sizes)
    if not sizes or any((not isinstance(b, int)) or b < 1 for b in sizes) or len(set(sizes)) < len(sizes):
        raise ValueError(message("batch_sizes must be distinct positive whole numbers, got {sizes!r}.", sizes=sizes))
    if context < 1:
        raise ValueError(message("context must be at least 1 token, got {context}.", context=context))
    ids = torch.randint(0, model.config.vocab_size, (1, context), generator=torch.Generator().manual_seed(seed))
    ids = ids.to(next(model.parameters()).device)
    _, one = kc.prefill(model, ids)
    caches = {b: kc.repeat_rows(model, one, b) for b in sizes}             # one cache row, b requests
    tokens = {b: torch.full((b, 1), int(ids[0, -1]), device=ids.device) for b in sizes}
    steps = {b: (lambda b=b: kc.decode_step(model, tokens[b], caches[b])) for b in sizes}
    return interleaved_medians(steps, repeats=repeats, warmup=warmup, rounds=rounds)


def per_doubling_gain(b1: int, thr1: float, b2: int, thr2: float) -> float:
    """Throughput gain from b1 to b2 expressed per doubling of the batch: 2.0 = free, 1.0 = no gain at all."""
    if not 0 < b1 < b2:
        raise ValueError(message("need 0 < b1 < b2, got {b1} and {b2}.", b1=b1, b2=b2))
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
        raise ValueError(message("find_knee needs at least two (batch, step time) points of equal count."))
    if sorted(set(b)) != b or b[0] < 1:
        raise ValueError(message("batch sizes must be positive and strictly increasing, starting from the reference "
                                 "batch."))
    if factor <= 1.0:
        raise ValueError(message("factor must exceed 1 (how many times batch 1's latency marks the knee), got "
                                 "{factor}.", factor=factor))
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


def sweep_checks(batches: Sequence[int], knee: int, factor: float = 2.0) -> Callable[[Mapping[int, Timing]], dict]:
    """The claims part 1 reads off a sweep, for :func:`helpers.infra.claims.measure_checked`.

    Returns ``checks(sweep)``: ``{name: (holds, statement, evidence, fields)}`` on each size's fastest round.
    ``knee`` is the chapter's knee (the claim "1 to 16" compares batch 1 with it); the sweep's own knee is found
    with :func:`around_the_knee` and ``factor``. Each statement says exactly what its test checks.
    """
    b = [int(x) for x in batches]
    if knee not in b or b[0] != 1:
        raise ValueError(message("the sweep must start at batch 1 and include the knee {knee}, got {b}.",
                                 knee=knee, b=b))

    def checks(sweep: Mapping[int, Timing]) -> dict:
        s = [sweep[x].min for x in b]
        t = [x / y for x, y in zip(b, s)]
        ik, at = b.index(knee), around_the_knee(b, s, factor)
        return {
            "1 to 16": (t[ik] / t[0] > 2 and s[ik] / s[0] > 1.05,
                        "from 1 to {knee} requests per step, throughput more than doubles and each user waits more "
                        "than 5 % longer", "throughput {thr:.1f}x, latency {lat:.2f}x",
                        dict(knee=knee, thr=t[ik] / t[0], lat=s[ik] / s[0])),
            "reached": (at.batch < b[-1], "the sweep reaches the knee", "knee at batch {knee} of {largest}",
                        dict(knee=at.batch, largest=b[-1])),
            "up to": (t[at.index] / t[0] > 0.4 * at.batch,
                      "at the knee, throughput is more than 0.4 times the batch size times batch 1's",
                      "{thr:.1f}x at batch {knee}", dict(thr=t[at.index] / t[0], knee=at.batch)),
            "beyond": (at.gain_above < at.gain_below and at.latency_above > at.latency_below,
                       "beyond the knee a doubling buys less throughput and costs more latency than before it",
                       "throughput {gain_below:.2f}x then {gain_above:.2f}x, latency {lat_below:.2f}x then "
                       "{lat_above:.2f}x per doubling", dict(gain_below=at.gain_below, gain_above=at.gain_above,
                                                            lat_below=at.latency_below, lat_above=at.latency_above)),
            "largest": (s[-1] / s[0] > 3, "at the largest batch each user waits more than 3 times as long as alone",
                        "{lat:.1f}x", dict(lat=s[-1] / s[0]))}

    return checks


def step_cost_from_sweep(batches: Sequence[int], step_seconds: Sequence[float]) -> Callable[[int], float]:
    """Seconds of one decode step for ``n`` active requests: linear between measured points (and beyond them)."""
    b = [int(x) for x in batches]
    s = [float(x) for x in step_seconds]
    if len(b) != len(s) or len(b) < 2 or sorted(set(b)) != b:
        raise ValueError(message("step_cost_from_sweep needs two or more strictly increasing batch sizes with one "
                                 "time each."))

    def cost(n: int) -> float:
        if n < 1:
            raise ValueError(message("a step needs at least one active request, got {n}.", n=n))
        if n <= b[0]:
            return s[0]            # nothing measured below the first batch size: a step costs at least that
        i = 0
        while i < len(b) - 2 and n > b[i + 1]:
            i += 1
        return s[i] + (s[i + 1] - s[i]) * (n - b[i]) / (b[i + 1] - b[i])

    return cost
