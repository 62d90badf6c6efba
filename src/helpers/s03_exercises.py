"""Section 3's exercises and their checkers: the cache formula by hand, a card's users, GQA's saving, windows.

Notebook 03 ends with these; ``check("3.2", answer, **facts)`` judges an answer against the right one,
computed from the facts the notebook passes in (:mod:`helpers.infra.exercises`).

* 3.1 predict, then measure: bytes per token of Qwen2.5-7B's cache in bf16 (a geometry the page has not
  measured: Llama 3 8B's is the 7B class's, whose bytes per token the page prints).
* 3.2 predict: how many users with a given context fit a card's cache memory (GiB, whole users).
* 3.3 explain: by what factor GQA cuts the cache a decode step of the 7B class reads, although its arithmetic
  is MHA's (the page prints the chapter model's factor, not this one).
* 3.4 change the code: the cache bytes of a model with sliding-window layers, for any context.
"""
from __future__ import annotations

from .infra.exercises import CODE, EXPLAIN, PREDICT, Exercise, ExerciseSet, Mistake

GIB = 2 ** 30

# 3.1: Qwen2.5-7B's attention geometry (its config.json: hidden 3,584 = 28 query heads x 128; K and V
# projections 512 wide = 4 KV heads), served in bf16; the cell measures a model built with it. Llama 3 8B's
# geometry, the tests' example, is the 7B class's, whose cache the page prints before the exercises.
QWEN25_7B = dict(layers=28, query_heads=28, kv_heads=4, head_dim=128, element_bytes=2)
LLAMA3_8B = dict(layers=32, query_heads=32, kv_heads=8, head_dim=128, element_bytes=2)


def _bpt(layers, kv_heads, head_dim, element_bytes, **_):
    return 2 * layers * kv_heads * head_dim * element_bytes


def _users(card_gib, tokens, bytes_per_token):
    return (card_gib * GIB) // (tokens * bytes_per_token)


def windowed_cache_bytes(windows, kv_heads, head_dim, element_bytes, tokens):
    """The reference for 3.4: bytes of one user's cache at ``tokens`` tokens. ``windows[i]`` is layer i's sliding
    window (``None``: full attention); a windowed layer keeps the last ``window - 1`` tokens, as transformers does."""
    kept = [tokens if w is None else min(tokens, w - 1) for w in windows]
    return 2 * kv_heads * head_dim * element_bytes * sum(kept)


def _cases_3_4(**_):
    gemma_like = [512] * 5 + [None]                   # five sliding layers, then one full one
    return [(gemma_like * 4, 1, 256, 2, t) for t in (1, 100, 511, 512, 4096)] + \
           [([None] * 24, 2, 64, 2, 300), ([4096] * 32, 8, 128, 2, 10_000)]


EXERCISES = ExerciseSet(
    Exercise(
        "3.1", PREDICT, answer=lambda **f: _bpt(**f), example=LLAMA3_8B, rel=1e-9,
        mistakes=[
            Mistake("Count the keys *and* the values: each layer stores two vectors per KV head.",
                    lambda **f: _bpt(**f) // 2),
            Mistake("Only the key-value heads are stored, not the {query_heads} query heads.",
                    lambda query_heads, **f: _bpt(**{**f, "kv_heads": query_heads})),
            Mistake("That counts bits; the formula counts bytes ({element_bytes} per number in bf16).",
                    lambda **f: _bpt(**f) * 8),
        ]),
    Exercise(
        "3.2", PREDICT, answer=lambda **f: _users(**f), rel=0, abs=1e-9,
        example=dict(card_gib=8, tokens=4096, bytes_per_token=12_288),
        mistakes=[
            Mistake("A card's memory is counted in GiB (2^30 bytes), not GB (10^9).",
                    lambda card_gib, tokens, bytes_per_token: (card_gib * 10 ** 9) // (tokens * bytes_per_token)),
            Mistake("A user who does not fit whole does not fit: round down.",
                    lambda **f: _users(**f) + 1),
            Mistake("{bytes_per_token:,} bytes per token already counts K and V; don't halve it.",
                    lambda card_gib, tokens, bytes_per_token: _users(card_gib, tokens, bytes_per_token // 2)),
        ]),
    Exercise(
        "3.3", EXPLAIN, answer=lambda query_heads, kv_heads: query_heads / kv_heads, rel=1e-6,
        example=dict(query_heads=14, kv_heads=2),
        hint="Compare the bytes each step reads under MHA and under GQA.",
        mistakes=[
            Mistake("Equal arithmetic, but not equal bytes: every step reads the whole cache, and GQA's is smaller.",
                    lambda **f: 1),
            Mistake("The factor is query heads per KV head, not the number of KV heads.",
                    lambda query_heads, kv_heads: kv_heads),
            Mistake("MHA keeps one KV head per query head; GQA keeps {kv_heads}, not one: divide by them.",
                    lambda query_heads, kv_heads: query_heads),
        ]),
    Exercise(
        "3.4", CODE, answer=lambda **f: windowed_cache_bytes, example={}, cases=_cases_3_4,
        hint="Each layer keeps min(tokens, window - 1) tokens, or all of them without a window.",
        mistakes=[
            Mistake("A windowed layer stops growing: it keeps at most window - 1 tokens.",
                    lambda **f: lambda windows, *rest: windowed_cache_bytes([None] * len(windows), *rest)),
            Mistake("Off by one: the window counts the new token, so a layer keeps window - 1 earlier tokens.",
                    lambda **f: lambda windows, *rest: windowed_cache_bytes(
                        [None if w is None else w + 1 for w in windows], *rest)),
            Mistake("Count the keys *and* the values: two vectors per KV head per layer.",
                    lambda **f: lambda *args: windowed_cache_bytes(*args) // 2),
        ]),
)
check, verdict = EXERCISES.check, EXERCISES.verdict
