"""Section 10's exercises and their checkers: tokens on a card, what int4's scales cost, which term to shrink, a card.

Notebook 10 ends with these; ``check("10.1", answer, **facts)`` judges an answer against the right one,
computed from the facts the notebook passes in (:mod:`helpers.infra.exercises`).

* 10.1 predict, then measure: the tokens of context the 70B class in int4 leaves on a 48 GB card.
* 10.2 explain: how many of the 13B's tokens on an 8 GB card the int4 scales cost.
* 10.3 explain: for the 13B on a 16 GB card, whether int4 weights or an int8 cache serves more users.
* 10.4 change the code: the smallest card (whole GiB) that serves a number of users at a context.
"""
from __future__ import annotations

import math

from .infra.exercises import CODE, EXPLAIN, PREDICT, Exercise, ExerciseSet, Mistake
from .s10_budget import MODELS, RUNTIME_OVERHEAD, WEIGHT_BITS, users_served

GiB = 2 ** 30


def _tokens(card_gb, params, weight_bits, layers, kv_heads, head_dim, cache_bytes, overhead, unit=GiB, kv=2):
    """(card - overhead - weights) // bytes per token, the section's sum; ``unit`` and ``kv`` for the mistakes."""
    weights = math.ceil(params * weight_bits / 8)
    return (int(card_gb * unit) - overhead - weights) // (kv * layers * kv_heads * head_dim * cache_bytes)


def _scales_cost(code_bits, weight_bits, **f):
    """Tokens that fit with bare int4 codes, minus those that fit with the scales counted as well."""
    return _tokens(weight_bits=code_bits, **f) - _tokens(weight_bits=weight_bits, **f)


def _shrink(card_gb, model, context):
    """a: int4 weights (fp16 cache) serve more users than an int8 cache (int8 weights); b: the reverse; c: a tie."""
    weights, cache = (users_served(card_gb, model, w, kv, context) for w, kv in (("int4", "fp16"), ("int8", "int8")))
    return "c" if weights == cache else "a" if weights > cache else "b"


def card_needed(weights, bytes_per_token, users, context):
    """The reference for 10.4: the smallest whole number of GiB that holds the runtime's overhead, ``weights``
    bytes of weights and ``users`` caches of ``context`` tokens at ``bytes_per_token`` each."""
    return -(-(RUNTIME_OVERHEAD + weights + users * context * bytes_per_token) // GiB)


def _card(weights, bytes_per_token, users, context, unit=GiB, overhead=RUNTIME_OVERHEAD, up=True):
    """:func:`card_needed` in ``unit``, with another overhead, or rounded down: the mistakes of 10.4."""
    total = overhead + weights + users * context * bytes_per_token
    return -(-total // unit) if up else total // unit


def _cases_10_4(weights, bytes_per_token):
    """The chapter's classes with an fp16 cache, a card filled exactly, and this run's model (``weights`` bytes,
    ``bytes_per_token``) with a few users and with many."""
    w = {(m, f): math.ceil(MODELS[m].params * WEIGHT_BITS[f] / 8) for m in MODELS for f in ("int8", "int4")}
    bpt = {m: MODELS[m].bytes_per_token("fp16") for m in MODELS}
    return [(w["7B", "int8"], bpt["7B"], 16, 4096), (w["7B", "int4"], bpt["7B"], 1, 128_000),
            (w["13B", "int4"], bpt["13B"], 1, 4096), (w["70B", "int4"], bpt["70B"], 8, 8192),
            (w["70B", "int8"], bpt["70B"], 100, 32_768), (GiB // 2, 2 ** 20, 1024, 1),   # exactly 3 GiB
            (weights, bytes_per_token, 4, 91), (weights, bytes_per_token, 64, 8192)]


_SEVENTY = dict(layers=MODELS["70B"].layers, kv_heads=MODELS["70B"].kv_heads, head_dim=MODELS["70B"].head_dim,
                params=MODELS["70B"].params)
_THIRTEEN = dict(layers=MODELS["13B"].layers, kv_heads=MODELS["13B"].kv_heads, head_dim=MODELS["13B"].head_dim,
                 params=MODELS["13B"].params)

EXERCISES = ExerciseSet(
    Exercise(
        "10.1", PREDICT, answer=lambda **f: _tokens(**f), rel=0, abs=1e-9,
        example=dict(card_gb=48, weight_bits=WEIGHT_BITS["int4"], cache_bytes=2, overhead=RUNTIME_OVERHEAD,
                     **_SEVENTY),
        mistakes=[
            Mistake("A \"{card_gb} GB\" card holds {card_gb} GiB (2³⁰ bytes each), as in the section's tables.",
                    lambda **f: _tokens(**f, unit=10 ** 9)),
            Mistake("int4 costs {weight_bits} bits per weight: the 4-bit codes plus their share of the fp16 "
                    "scales.", lambda weight_bits, **f: _tokens(weight_bits=int(weight_bits), **f)),
            Mistake("The runtime keeps {overhead:,} bytes for itself before any cache.",
                    lambda overhead, **f: _tokens(overhead=0, **f)),
            Mistake("Each token stores a key *and* a value per KV head per layer.",
                    lambda **f: _tokens(**f, kv=1)),
        ]),
    Exercise(
        "10.2", EXPLAIN, answer=lambda **f: _scales_cost(**f), rel=0.01,
        example=dict(card_gb=8, code_bits=4, weight_bits=WEIGHT_BITS["int4"], cache_bytes=2,
                     overhead=RUNTIME_OVERHEAD, **_THIRTEEN),
        hint="Work out the tokens that fit twice, with and without the scales, and take the difference.",
        mistakes=[
            Mistake("That is how many tokens fit without the scales; the question asks how many of them the "
                    "scales take away.", lambda code_bits, weight_bits, **f: _tokens(weight_bits=code_bits, **f)),
            Mistake("Each token stores a key *and* a value per KV head per layer.",
                    lambda code_bits, weight_bits, **f: _tokens(weight_bits=code_bits, kv=1, **f)
                    - _tokens(weight_bits=weight_bits, kv=1, **f)),
            Mistake("A scale is an fp16 number: 16 bits shared by the 128 weights of its group.",
                    lambda code_bits, weight_bits, **f: _scales_cost(code_bits, (code_bits + weight_bits) / 2, **f)),
        ]),
    Exercise(
        "10.3", EXPLAIN, choices="abc", answer=lambda **f: _shrink(**f),
        example=dict(card_gb=16, model="13B", context=4096),
        hint="Do the sum for both changes: weights, runtime, and whole users of the cache.",
        mistakes=[
            Mistake("That is the 7B's answer; redo the sum with the {model}'s weights and bytes per token.",
                    lambda card_gb, model, context: _shrink(card_gb, "7B", context)),
            Mistake("The two changes free different amounts of memory: count the whole users each leaves room for.",
                    lambda **f: "c"),
        ]),
    Exercise(
        "10.4", CODE, answer=lambda **_: card_needed, cases=_cases_10_4,
        example=dict(weights=538_060_032, bytes_per_token=46_080),     # the default model, fp32
        hint="Add the runtime, the weights and every user's cache, then convert to GiB.",
        mistakes=[
            Mistake("A card a fraction of a GiB too small is too small: round up.",
                    lambda **_: lambda *args: _card(*args, up=False)),
            Mistake("Cards are counted in GiB (2³⁰ bytes), not GB (10⁹).",
                    lambda **_: lambda *args: _card(*args, unit=10 ** 9)),
            Mistake("The runtime keeps its overhead (budget.RUNTIME_OVERHEAD) on every card, beside the weights "
                    "and the caches.", lambda **_: lambda *args: _card(*args, overhead=0)),
        ]),
)
check, verdict = EXERCISES.check, EXERCISES.verdict
