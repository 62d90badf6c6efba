"""Section 2's exercises and their checkers: a decode step's floor, where a step's time goes, where prefill meets
the ridge, the roofline of a batch.

Notebook 02 ends with these; ``check("2.1", answer, **facts)`` judges an answer against the right one,
computed from the facts the notebook passes in (:mod:`helpers.infra.exercises`).

* 2.1 predict, then measure: the least time a decode step at 1,024 tokens of context can take on this machine.
* 2.2 explain: where a decode step's time above its roofline goes, and what would win it back (a letter).
* 2.3 predict: the prompt length at which a prefill's arithmetic intensity reaches this machine's ridge.
* 2.4 change the code: ``decode_floor_ms``, the roofline of one decode step for a batch of users.
"""
from __future__ import annotations

from .infra.exercises import CODE, EXPLAIN, PREDICT, Exercise, ExerciseSet, Mistake
from .s02_roofline import roofline_seconds

# the default model's facts for the unit tests: its weights as a step reads them (fp32, the tied embedding once),
# its cache at 1,024 tokens, its MACs per token; the bandwidth and the peak of a run on our 2-core machines
FLOOR_EXAMPLE = dict(weights_bytes=538_060_032, cache_bytes=47_185_920, bandwidth=13.7)
RIDGE_EXAMPLE = dict(peak=148.0, bandwidth=13.7, weights_bytes=538_060_032, weight_macs=134_479_872)


def _floor_ms(weights_bytes, cache_bytes, bandwidth):
    return 1e3 * roofline_seconds(weights_bytes + cache_bytes, bandwidth)


def _where_the_gap_goes(roofline_ms, matmuls_ms, step_ms):
    """2.2's letter: (c) when the step takes at most 1.25x its roofline; else the larger part of the time above it:
    (a) the matrix-vector kernels' shortfall (matmuls - roofline), (b) everything else (step - matmuls)."""
    if step_ms <= 1.25 * roofline_ms:
        return "c"
    return "a" if matmuls_ms - roofline_ms > step_ms - matmuls_ms else "b"


def _ridge_tokens(peak, bandwidth, weights_bytes, weight_macs):
    """2.3: the prompt length P whose prefill, 2 x weight_macs FLOPs per token on weights read once, reaches
    peak / bandwidth FLOPs per byte (attention left out)."""
    return (peak / bandwidth) / (2 * weight_macs / weights_bytes)


def decode_floor_ms(batch, weights_bytes, cache_bytes, flops, peak_gflops, bandwidth_gbps):
    """The reference for 2.4: the least time (ms) of one decode step for ``batch`` users, each with ``cache_bytes`` of
    cache and ``flops`` of arithmetic for their token. The step reads the weights once for all of them and every
    user's own cache; it takes at least the longer of its arithmetic time and its reading time."""
    compute = batch * flops / (peak_gflops * 1e9)
    memory = (weights_bytes + batch * cache_bytes) / (bandwidth_gbps * 1e9)
    return 1e3 * max(compute, memory)


def _cases_2_4(**_):
    ours = (538_060_032, 11_796_480, 287_000_000, 150.0, 9.3)       # memory-bound at 1 user, not at 512
    gpu = (988_065_536, 3_145_728, 1_000_000_000, 20_000.0, 256.0)
    return [(b, *ours) for b in (1, 8, 64, 512)] + [(b, *gpu) for b in (1, 32, 1024)] + \
           [(4, 1_000_000_000, 0, 2_000_000_000, 100.0, 50.0)]


def _floor_variant(combine=max, weights_per_user=False, shared_cache=False, unit=1e3):
    def floor(batch, weights_bytes, cache_bytes, flops, peak_gflops, bandwidth_gbps):
        compute = batch * flops / (peak_gflops * 1e9)
        nbytes = (batch if weights_per_user else 1) * weights_bytes + (1 if shared_cache else batch) * cache_bytes
        return unit * combine(compute, nbytes / (bandwidth_gbps * 1e9))
    return floor


EXERCISES = ExerciseSet(
    Exercise(
        "2.1", PREDICT, answer=_floor_ms, example=FLOOR_EXAMPLE, rel=0.03,
        hint="A step reads every weight once and the whole cache; divide those bytes by the bandwidth.",
        mistakes=[
            Mistake("The step reads the cache too, not only the weights.",
                    lambda weights_bytes, cache_bytes, bandwidth: _floor_ms(weights_bytes, 0, bandwidth)),
            Mistake("The cache's bytes already hold the keys and the values: count them once.",
                    lambda weights_bytes, cache_bytes, bandwidth: _floor_ms(weights_bytes, 2 * cache_bytes, bandwidth)),
            Mistake("That is in seconds; the question asks for milliseconds.",
                    lambda **f: _floor_ms(**f) / 1e3),
        ]),
    Exercise(
        "2.2", EXPLAIN, answer=_where_the_gap_goes, choices="abc",
        example=dict(roofline_ms=24.5, matmuls_ms=38.0, step_ms=62.0),
        hint="Read the gap table: the roofline, then the two parts of the time above it.",
        mistakes=[
            Mistake("Compare the two parts of the gap table above the roofline: which of them is longer?",
                    lambda **f: "a"),
            Mistake("Hold the whole step against the roofline: does it take at most 1.25 times as long?",
                    lambda **f: "c"),
        ]),
    Exercise(
        "2.3", PREDICT, answer=_ridge_tokens, example=RIDGE_EXAMPLE, rel=0.05, abs=1.0,
        hint="A prefill of P tokens does P times a token's FLOPs on the same weight bytes: find P at the ridge.",
        mistakes=[
            Mistake("The weights here are fp32, 4 bytes each, not the chapter's 2 bytes of fp16.",
                    lambda weights_bytes, **f: _ridge_tokens(weights_bytes=weights_bytes / 2, **f)),
            Mistake("A multiply-add is two FLOPs: one weight gives a token two FLOPs, not one.",
                    lambda weight_macs, **f: _ridge_tokens(weight_macs=weight_macs / 2, **f)),
            Mistake("The prompt multiplies the intensity: divide the ridge by one token's intensity, don't multiply.",
                    lambda **f: (f["peak"] / f["bandwidth"]) ** 2 / _ridge_tokens(**f)),
        ]),
    Exercise(
        "2.4", CODE, answer=lambda **f: decode_floor_ms, example={}, cases=_cases_2_4,
        hint="The floor is the longer of two times: the batch's FLOPs at the peak, its bytes at the bandwidth.",
        mistakes=[
            Mistake("The roofline takes the larger of the two times, not their sum: reading and arithmetic overlap.",
                    lambda **f: _floor_variant(combine=lambda a, b: a + b)),
            Mistake("One step reads each weight once for the whole batch, not once per user.",
                    lambda **f: _floor_variant(weights_per_user=True)),
            Mistake("Every user attends to their own cache: the bytes of the caches add up.",
                    lambda **f: _floor_variant(shared_cache=True)),
            Mistake("That is in seconds; the function returns milliseconds.",
                    lambda **f: _floor_variant(unit=1.0)),
        ]),
)
check, verdict = EXERCISES.check, EXERCISES.verdict
