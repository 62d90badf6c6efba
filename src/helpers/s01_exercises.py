"""Section 1's exercises and their checkers: MACs per token by hand, what arithmetic saved buys, MACs per step, a
chunk of tokens against the cache.

Notebook 01 ends with these; ``check("1.2", answer, **facts)`` judges an answer against the right one,
computed from the facts the notebook passes in (:mod:`helpers.infra.exercises`).

* 1.1 predict, then measure: the multiply-accumulates of one token through every weight matrix of the model.
* 1.2 explain: how many times more MACs per second the naive loop did than the cached one, in the timed run.
* 1.3 change the code: ``macs_step``, the MACs of one step at a given context, with and without a cache.
* 1.4 change the code: ``chunk_step``, one attention head taking several new tokens at once against its cache.
"""
from __future__ import annotations

import torch

from .infra.exercises import CODE, EXPLAIN, PREDICT, Exercise, ExerciseSet, Mistake
from .s01_attention import Dims, causal_attention, macs_step

# the default model's geometry (SmolLM2-135M): the facts the unit tests check the checkers with
SMOLLM2 = dict(layers=30, hidden=576, heads=9, kv_heads=3, head_dim=64, mlp=1536, vocab=49_152)


def _weight_macs(**dims) -> int:
    return Dims(**dims).weight_macs_per_token


# --------------------------------------------------------------------------- 1.3: MACs of one step


def _cases_1_3(**_):
    qwen = Dims(layers=24, hidden=896, heads=14, kv_heads=2, head_dim=64, mlp=4864, vocab=151_936)
    smol = Dims(**SMOLLM2)
    tiny = Dims(layers=6, hidden=64, heads=2, kv_heads=1, head_dim=32, mlp=192, vocab=2048)
    return [(dims, n, cached) for dims in (qwen, smol, tiny) for n in (1, 2, 48, 4096) for cached in (True, False)]


def _macs_with(pairs, tokens=lambda n, cached: 1 if cached else n):
    """A ``macs_step`` that sends ``tokens(n, cached)`` tokens through the weights and counts ``pairs(n, cached)``
    query-key pairs: a mistake's version of the reference."""
    return lambda d, n, cached: (tokens(n, cached) * d.weight_macs_per_token
                                 + pairs(n, cached) * d.attention_macs_per_pair)


def _triangle(n, cached):
    return n if cached else n * (n + 1) // 2


# --------------------------------------------------------------------------- 1.4: a chunk of new tokens


def chunk_step(x_new: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, wq, wk, wv) -> torch.Tensor:
    """The reference for 1.4: the outputs (m, d) of ``m`` new positions ``x_new`` (m, d) against ``n`` cached keys and
    values (n, d). New position i sits at index n + i: it sees every cached key and the new ones up to itself."""
    q = x_new @ wq
    k, v = torch.cat([k_cache, x_new @ wk]), torch.cat([v_cache, x_new @ wv])
    return causal_attention(q, k, v)


def _cases_1_4(**_):
    g = torch.Generator().manual_seed(1)
    d = 8
    w = [torch.randn(d, d, generator=g, dtype=torch.float64) / d ** 0.5 for _ in range(3)]
    cases = []
    for m, n in ((1, 5), (4, 0), (4, 6), (3, 1), (6, 10)):
        x, past = (torch.randn(rows, d, generator=g, dtype=torch.float64) for rows in (m, n))
        cases.append((x, past @ w[1], past @ w[2], *w))
    return cases


def _attend(q, k, v, mask=None, scale=True):
    scores = q @ k.T / (q.shape[-1] ** 0.5 if scale else 1.0)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _chunk_variant(mask: str = "end", scale: bool = True, with_cache: bool = True):
    """``chunk_step`` as a mistake writes it: the mask aligned to the "end" (right), the "start", or "none"."""
    def step(x_new, k_cache, v_cache, wq, wk, wv):
        q = x_new @ wq
        k_new, v_new = x_new @ wk, x_new @ wv
        k, v = (torch.cat([k_cache, k_new]), torch.cat([v_cache, v_new])) if with_cache else (k_new, v_new)
        m, n = q.shape[0], k.shape[0]
        offset = {"end": n - m, "start": 0}.get(mask)
        future = None if offset is None else torch.arange(n)[None, :] > torch.arange(offset, offset + m)[:, None]
        return _attend(q, k, v, future, scale)
    return step


EXERCISES = ExerciseSet(
    Exercise(
        "1.1", PREDICT, answer=_weight_macs, example=SMOLLM2, rel=1e-9,
        hint="Add up every matrix one token passes through: q, k, v and o in each layer, the MLP, the output layer.",
        mistakes=[
            Mistake("The output layer is a matrix too: {hidden} x {vocab} multiply-adds per token.",
                    lambda hidden, vocab, **f: _weight_macs(hidden=hidden, vocab=vocab, **f) - hidden * vocab),
            Mistake("The input embedding is a lookup of one row, not a matrix product: it costs no MACs.",
                    lambda hidden, vocab, **f: _weight_macs(hidden=hidden, vocab=vocab, **f) + hidden * vocab),
            Mistake("The keys and values have {kv_heads} heads, not {heads}: the query heads share them.",
                    lambda heads, kv_heads, **f: _weight_macs(heads=heads, kv_heads=heads, **f)),
            Mistake("That counts FLOPs; a multiply-accumulate is one MAC (it is two FLOPs).",
                    lambda **f: 2 * _weight_macs(**f)),
        ]),
    Exercise(
        "1.2", EXPLAIN, answer=lambda arithmetic_ratio, time_ratio: arithmetic_ratio / time_ratio, rel=0.06,
        example=dict(arithmetic_ratio=35.0, time_ratio=3.4),
        hint="A rate is MACs divided by seconds: compare the two loops' rates.",
        mistakes=[
            Mistake("That is the cached loop's rate over the naive loop's: which loop did more MACs per second?",
                    lambda arithmetic_ratio, time_ratio: time_ratio / arithmetic_ratio),
            Mistake("That is the arithmetic alone; the naive loop also took {time_ratio:.1f}x the time.",
                    lambda arithmetic_ratio, time_ratio: arithmetic_ratio),
            Mistake("A rate divides the MACs by the time; it does not multiply them.",
                    lambda arithmetic_ratio, time_ratio: arithmetic_ratio * time_ratio),
        ]),
    Exercise(
        "1.3", CODE, answer=lambda **f: macs_step, example={}, cases=_cases_1_3,
        hint="Cached: one token through the weights and one row of scores. Uncached: every token, and the triangle.",
        mistakes=[
            Mistake("Causal attention scores a triangle: query i meets i keys, n(n + 1)/2 pairs in all, not n x n.",
                    lambda **f: _macs_with(lambda n, cached: n if cached else n * n)),
            Mistake("A cached step still scores its one query against every key it attends to.",
                    lambda **f: _macs_with(lambda n, cached: 0 if cached else _triangle(n, cached))),
            Mistake("Without a cache every one of the n tokens goes through the weights again, not only the last.",
                    lambda **f: _macs_with(_triangle, tokens=lambda n, cached: 1)),
            Mistake("The new token attends to itself too: a context of n tokens gives a row of n scores.",
                    lambda **f: _macs_with(lambda n, cached: n - 1 if cached else _triangle(n, cached))),
        ]),
    Exercise(
        "1.4", CODE, answer=lambda **f: chunk_step, example={}, cases=_cases_1_4,
        hint="Project the new positions, append their keys and values to the cache, then mask what lies ahead.",
        mistakes=[
            Mistake("A new position must not see the new positions after it: mask the scores ahead of it.",
                    lambda **f: _chunk_variant(mask="none")),
            Mistake("The cached keys come first: new position i sits at index n + i and sees all n cached keys.",
                    lambda **f: _chunk_variant(mask="start")),
            Mistake("Scale the scores by 1/sqrt(d) before the softmax, as the one-token step does.",
                    lambda **f: _chunk_variant(scale=False)),
            Mistake("The new positions attend to the cached keys too, not only to each other.",
                    lambda **f: _chunk_variant(with_cache=False)),
        ]),
)
check, verdict = EXERCISES.check, EXERCISES.verdict
