"""Section 2 (notebooks/02-prefill-decode.md): prefill vs decode, the two phases of generation, timed.

* **Prefill** runs the whole prompt through the model in one pass: every weight matrix multiplies a block of ``P``
  token vectors (matrix x matrix), so each weight fetched from memory is used ``P`` times.
* **Decode** feeds one token against the cache: every weight matrix multiplies a single vector (matrix x vector), so
  each weight fetched is used once.

:func:`prefill_sweep` and :func:`decode_sweep` time both phases (tables A and B); :func:`stream_reply` and
:func:`ttft_sweep` stream a reply token by token to time the two numbers every serving system reports, time to first
token and tokens per second. The ``*_checks`` functions read the section's claims off those timings, for
:func:`helpers.measure_checked`. Why the phases differ, the memory bus and the roofline, is
:mod:`helpers.s02_roofline`.

Timings are interleaved (:func:`helpers.infra.measure.interleaved_medians`): each round times every case once, so a
burst of load hits all alike and their *ratios* survive a noisy machine. Rows report the median and the fastest
repeat: noise only adds time, so the fastest repeat is the least disturbed. Clocks read
:func:`helpers.infra.measure.now`, which waits for a GPU to finish first.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import torch

from . import s01_kv_cache as kv_cache
from .infra.measure import Timing, interleaved_medians, now
from .infra.messages import message

# --------------------------------------------------------------------------- prompts of a given length


def prompt_of_length(base_ids: torch.Tensor, n: int) -> torch.Tensor:
    """Exactly ``n`` token ids (1, n): ``base_ids`` repeated as often as needed, then cut."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(message("a prompt needs a positive whole number of tokens, got {n!r}.", n=n))
    base = base_ids.reshape(1, -1)
    if base.shape[1] == 0:
        raise ValueError(message("base_ids is empty: pass at least one token id to repeat."))
    reps = -(-n // base.shape[1])
    return base.repeat(1, reps)[:, :n].clone()


def _check_lengths(values: Sequence[int], what: str) -> list[int]:
    values = list(values)
    if not values or any(not isinstance(v, int) or v < 1 for v in values) or len(set(values)) != len(values):
        raise ValueError(message("{argument} must be a non-empty list of distinct positive whole numbers, got "
                                 "{values!r}.", argument=what, values=values))
    return values


# --------------------------------------------------------------------------- the two phases, timed


@dataclass(frozen=True)
class PrefillRow:
    tokens: int            # P, the prompt length
    seconds: float         # median time of one prefill pass over all P tokens
    spread: float          # (max - min) / median of the repeats
    fastest: float         # the fastest repeat (s)
    times: tuple[float, ...] = ()   # every timed repeat (s), so that a fresh measurement can be pooled in

    @property
    def ms_per_token(self) -> float:
        """Median pass, per prompt token (ms)."""
        return 1e3 * self.seconds / self.tokens

    @property
    def fastest_ms_per_token(self) -> float:
        """Fastest pass, per prompt token (ms): the least disturbed estimate on a shared machine."""
        return 1e3 * self.fastest / self.tokens

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds

    def pooled(self, other: "PrefillRow") -> "PrefillRow":
        """This row's repeats and ``other``'s (a fresh measurement of the same length, taken later) as one row."""
        if other.tokens != self.tokens:
            raise ValueError(message("only rows of the same prompt length pool, got {tokens} and {other_tokens}.",
                                     tokens=self.tokens, other_tokens=other.tokens))
        if not self.times or not other.times:
            raise ValueError(message("a row without its repeats (times) cannot be pooled: measure it with "
                                     "prefill_sweep."))
        return _prefill_row(self.tokens, Timing(statistics.median(self.times + other.times),
                                                list(self.times + other.times)))


def _prefill_row(tokens: int, timed: Timing) -> PrefillRow:
    return PrefillRow(tokens, timed.median, timed.spread, timed.min, tuple(timed.times))


def pool_prefill_rows(earlier: Sequence[PrefillRow], fresh: Sequence[PrefillRow]) -> list[PrefillRow]:
    """Pool two sweeps over the same lengths, row by row (``combine`` for :func:`helpers.measure_checked`)."""
    if [r.tokens for r in earlier] != [r.tokens for r in fresh]:
        raise ValueError(message("only sweeps over the same prompt lengths, in the same order, pool."))
    return [a.pooled(b) for a, b in zip(earlier, fresh)]


def prefill_sweep(model, base_ids: torch.Tensor, lengths: Sequence[int], repeats: int = 3,
                  warmup: int = 1) -> list[PrefillRow]:
    """Table A: one prefill pass over ``P`` tokens for each ``P`` in ``lengths``."""
    lengths = _check_lengths(lengths, "lengths")
    prompts = {p: prompt_of_length(base_ids, p) for p in lengths}
    cases = {p: (lambda ids=ids: kv_cache.prefill(model, ids)) for p, ids in prompts.items()}
    timed = interleaved_medians(cases, repeats=repeats, warmup=warmup)
    return [_prefill_row(p, timed[p]) for p in lengths]


@dataclass(frozen=True)
class DecodeRow:
    context: int           # C, tokens in the cache when the first timed step ran
    seconds: float         # median time of one decode step (one new token)
    spread: float
    steps: int             # decode steps run against this cache (warm-up included): C grew by this much
    cache_bytes: int       # bytes the cache held at context C
    fastest: float         # the fastest repeat (s)

    @property
    def ms(self) -> float:
        return 1e3 * self.seconds

    @property
    def tokens_per_second(self) -> float:
        return 1.0 / self.seconds


def decode_stepper(model, base_ids: torch.Tensor, context: int, prefilled=None):
    """Prefill a cache of ``context`` tokens (untimed) and return ``(step, state)``.

    ``step()`` runs one real decode step: it feeds back the token the previous
    step produced, so the cache grows by one token per call. ``state`` is
    ``[next_token, cache]`` as it stands after the latest step. ``prefilled``, a
    ``(next_token, cache)`` pair that :func:`kv_cache.prefill` already returned for
    this prompt, is used instead of prefilling again when its cache holds exactly
    ``context`` tokens (steps grow it in place, so a used one is prefilled afresh).
    """
    _check_lengths([context], "context")
    if prefilled is not None and kv_cache.cache_length(prefilled[1]) == context:
        state = list(prefilled)
    else:
        state = list(kv_cache.prefill(model, prompt_of_length(base_ids, context)))

    def step():
        state[0], state[1] = kv_cache.decode_step(model, state[0], state[1])

    return step, state


def decode_sweep(model, base_ids: torch.Tensor, contexts: Sequence[int], repeats: int = 5,
                 warmup: int = 1, prefilled: Mapping[int, tuple] | None = None) -> list[DecodeRow]:
    """Table B: one decode step against a cache of ``C`` tokens, for each ``C`` in ``contexts``.

    Each context gets its own cache (prefilled, untimed, or taken from ``prefilled[C]``, the
    ``kv_cache.prefill`` result of the same prompt, e.g. a prefill sweep's warm-up); each timed step is a
    real decode step that feeds back the token it produced, so the cache grows
    by one token per step (``warmup + repeats`` tokens in all, reported in ``steps``).
    """
    contexts = _check_lengths(contexts, "contexts")
    prefilled = prefilled or {}
    steppers = {c: decode_stepper(model, base_ids, c, prefilled.get(c)) for c in contexts}
    sizes = {c: kv_cache.cache_nbytes(st[1][1]) for c, st in steppers.items()}
    timed = interleaved_medians({c: st[0] for c, st in steppers.items()}, repeats=repeats, warmup=warmup)
    return [DecodeRow(c, timed[c].median, timed[c].spread, warmup + repeats, sizes[c], timed[c].min)
            for c in contexts]


# --------------------------------------------------------------------------- TTFT and tokens per second


@dataclass
class Stream:
    """One reply generated token by token: ``times[i]`` is when token ``i`` was ready (s after the request)."""
    prompt_tokens: int
    tokens: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    @property
    def ttft(self) -> float:
        """Time to first token: the prefill, plus picking the token."""
        if not self.times:
            raise ValueError(message("the stream produced no token, so it has no time to first token."))
        return self.times[0]

    @property
    def gaps(self) -> list[float]:
        """Seconds between consecutive tokens: one decode step each."""
        return [b - a for a, b in zip(self.times, self.times[1:])]

    @property
    def tokens_per_second(self) -> float:
        """Steady rate after the first token: decode steps per second (median gap, robust to a hiccup)."""
        if len(self.times) < 2:
            raise ValueError(message("a rate needs at least two tokens: ask for n_new >= 2."))
        return 1.0 / statistics.median(self.gaps)


@torch.inference_mode()
def stream_reply(model, prompt_ids: torch.Tensor, n_new: int, on_token: Callable[[int, float], None] | None = None,
                 stop_ids: Sequence[int] = ()) -> Stream:
    """Greedy generation that reports every token the moment it exists (``on_token(id, seconds)``).

    Stops after ``n_new`` tokens or at a token in ``stop_ids`` (which is kept).
    """
    if not isinstance(n_new, int) or n_new < 1:
        raise ValueError(message("n_new must be a positive whole number of tokens, got {n_new!r}.", n_new=n_new))
    if prompt_ids.ndim != 2 or prompt_ids.shape[0] != 1 or prompt_ids.shape[1] < 1:
        raise ValueError(message("prompt_ids must be shaped (1, P) with P >= 1, got {shape}.",
                                 shape=tuple(prompt_ids.shape)))
    s = Stream(prompt_tokens=int(prompt_ids.shape[1]))
    stop = set(int(t) for t in stop_ids)
    t0 = now()
    nxt, cache = kv_cache.prefill(model, prompt_ids)
    while True:
        t = now() - t0
        tid = int(nxt)
        s.tokens.append(tid)
        s.times.append(t)
        if on_token is not None:
            on_token(tid, t)
        if len(s.tokens) >= n_new or tid in stop:
            return s
        nxt, cache = kv_cache.decode_step(model, nxt, cache)


@dataclass
class TTFTRow:
    """Replies streamed after one prompt length, ``repeats`` times."""
    prompt_tokens: int
    streams: list[Stream]

    @property
    def ttft(self) -> float:
        """Median time to first token over the repeats."""
        return statistics.median(s.ttft for s in self.streams)

    @property
    def fastest_ttft(self) -> float:
        return min(s.ttft for s in self.streams)

    @property
    def gaps(self) -> list[float]:
        """Every decode step of every repeat."""
        return [g for s in self.streams for g in s.gaps]

    @property
    def tokens_per_second(self) -> float:
        """Median steady rate: one over the median gap between tokens, over all repeats."""
        if not self.gaps:
            raise ValueError(message("a rate needs at least two tokens per reply: ask for n_new >= 2."))
        return 1.0 / statistics.median(self.gaps)

    @property
    def fastest_tokens_per_second(self) -> float:
        """One over the shortest gap: the rate of the least disturbed decode step."""
        if not self.gaps:
            raise ValueError(message("a rate needs at least two tokens per reply: ask for n_new >= 2."))
        return 1.0 / min(self.gaps)

    @property
    def typical(self) -> Stream:
        """The repeat with the median time to first token (the one to draw)."""
        return sorted(self.streams, key=lambda s: s.ttft)[(len(self.streams) - 1) // 2]


def prefill_agreement(prefill_rows: Sequence[PrefillRow], ttft_rows: Sequence[TTFTRow]) -> dict[int, float]:
    """How well two measurements of the same prefill agree, at every prompt length both of them timed.

    A time to first token *is* a prefill of the prompt (plus picking one token), so a prefill table and a TTFT table
    timed at different moments imply the same cost per prompt token, unless one of them was disturbed. Returns
    ``{P: larger / smaller}`` of the two per-token costs, each read off its fastest run (1.0 = perfect agreement).
    """
    ttft = {r.prompt_tokens: r.fastest_ttft for r in ttft_rows}
    shared = {r.tokens: r.fastest for r in prefill_rows if r.tokens in ttft}
    if not shared:
        raise ValueError(message("the two tables share no prompt length: time both at one length at least."))
    return {p: max(t, ttft[p]) / min(t, ttft[p]) for p, t in shared.items()}


def ttft_sweep(model, base_ids: torch.Tensor, prompt_lengths: Sequence[int], n_new: int = 16,
               repeats: int = 1, warmup: bool = True) -> list[TTFTRow]:
    """Stream ``n_new`` tokens after prompts of each length; TTFT grows with the prompt, the rate barely moves.

    With ``repeats > 1`` the lengths are run in interleaved rounds.
    """
    prompt_lengths = _check_lengths(prompt_lengths, "prompt_lengths")
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(message("repeats must be a positive whole number, got {repeats!r}.", repeats=repeats))
    if warmup:
        stream_reply(model, prompt_of_length(base_ids, min(prompt_lengths)), 2)
    rows = {p: TTFTRow(p, []) for p in prompt_lengths}
    for _ in range(repeats):
        for p in prompt_lengths:
            rows[p].streams.append(stream_reply(model, prompt_of_length(base_ids, p), n_new))
    return [rows[p] for p in prompt_lengths]


# --------------------------------------------------------------------------- the claims read off the timings
# Each returns {name: (holds, statement, evidence, fields)} for helpers.measure_checked, read off the fastest runs.


def split_checks(split: Mapping[str, Timing], prompt_tokens: int) -> dict[str, tuple]:
    """The fast run's phases timed in turns (``{"prefill": ..., "decode": ...}``): a step costs over 3 prompt tokens."""
    ratio = split["decode"].min / (split["prefill"].min / prompt_tokens)
    return {"split": (ratio > 3, "a decode step costs several times (over 3x) a prompt token",
                      "{ratio:.1f}x on the fastest repeats", dict(ratio=ratio))}


def prefill_checks(result: tuple[Sequence[PrefillRow], Sequence[TTFTRow]], agree: float = 1.5,
                   keep: float = 2 / 3) -> dict[str, tuple]:
    """Table A and the streamed replies (:func:`prefill_sweep`, :func:`ttft_sweep`): the per-token cost falls over
    1.5x from the shortest prompt to the cheapest; the two imply the same per-token cost within ``agree``; TTFT grows
    over 3x from the shortest prompt to the longest, while the rate keeps over ``keep`` of its pace."""
    rows, streamed = result
    per_token = [r.fastest_ms_per_token for r in rows]
    apart = prefill_agreement(rows, streamed)
    worst = max(apart, key=apart.get)
    low, high = streamed[0], streamed[-1]
    growth = high.fastest_ttft / low.fastest_ttft
    rate = high.fastest_tokens_per_second / low.fastest_tokens_per_second
    ends = dict(low=low.prompt_tokens, high=high.prompt_tokens)
    return {"falls": (per_token[0] > 1.5 * min(per_token), "per-token prefill cost falls over 1.5x from {shortest:,} "
                      "tokens to the cheapest length", "{first:.2f} ms per token at {shortest:,}, {best:.2f} at best",
                      dict(shortest=rows[0].tokens, first=per_token[0], best=min(per_token))),
            "agree": (apart[worst] < agree, "Table A and the time to first token imply the same prefill cost per "
                      "prompt token, within {agree}x", "{apart:.2f}x apart at {p:,} tokens, fastest runs",
                      dict(agree=agree, apart=apart[worst], p=worst)),
            "ttft": (growth > 3, "time to first token grows over 3x from {low:,} to {high:,} prompt tokens",
                     "{growth:.0f}x", dict(growth=growth, **ends)),
            "rate": (rate > keep, "the streaming rate keeps over {keep:.0%} of its pace from {low:,} to {high:,} "
                     "prompt tokens", "{rate:.2f}x on the fastest steps", dict(keep=keep, rate=rate, **ends))}


def pool_prefill_and_stream(earlier: tuple, fresh: tuple) -> tuple[list[PrefillRow], list[TTFTRow]]:
    """Pool two ``(prefill rows, TTFT rows)`` measurements (``combine`` for :func:`prefill_checks`'s claims)."""
    if [r.prompt_tokens for r in earlier[1]] != [r.prompt_tokens for r in fresh[1]]:
        raise ValueError(message("only TTFT sweeps over the same prompt lengths, in the same order, pool."))
    return (pool_prefill_rows(earlier[0], fresh[0]),
            [TTFTRow(a.prompt_tokens, a.streams + b.streams) for a, b in zip(earlier[1], fresh[1])])


def decode_checks(rows: Sequence[DecodeRow], flat: float = 1.5) -> dict[str, tuple]:
    """Table B (:func:`decode_sweep`): from the shortest cache to the longest, a step takes under ``flat`` x as long."""
    low, high = rows[0], rows[-1]
    return {"flat": (high.fastest / low.fastest < flat, "a decode step is nearly flat in the context: from {low:,} to "
                     "{high:,} cached tokens it takes less than {flat}x the time",
                     "{t_low:.1f} ms and {t_high:.1f} ms, fastest repeats",
                     dict(low=low.context, high=high.context, flat=flat, t_low=1e3 * low.fastest,
                          t_high=1e3 * high.fastest))}
