"""Section 5's exercises and their checkers: a kernel's bytes, the zero bin, the bytes-only time, an int6 scheme.

Notebook 05 ends with these; ``check("5.2", answer, **facts)`` judges an answer against the right one,
computed from the facts the notebook passes in (:mod:`helpers.infra.exercises`).

* 5.1 predict, then measure: the MB our projections take in the int4 weight-only kernel's format.
* 5.2 explain: half a step of int4 per-tensor on the worst matrix, in standard deviations (why its bulk rounds to 0).
* 5.3 predict, then measure: the decode time of the int8 weight-only kernel if the bytes read set it alone.
* 5.4 change the code: int6 with one scale per row, whose error joins the section's table.
"""
from __future__ import annotations

import torch

from .infra.exercises import CODE, EXPLAIN, PREDICT, Exercise, ExerciseSet, Mistake
from .s05_quantization import absmax_quantize, dequantize

MIB = 2 ** 20


# 5.1: the int4 kernel keeps 4-bit codes and, per group along a row, a scale and a zero as fp32 numbers
def _kernel_mb(weights, group_size, bookkeeping_bits=64, code_bits=4):
    return weights * (code_bits + bookkeeping_bits / group_size) / 8 / 1e6


# 5.2: symmetric absmax maps the largest weight to the largest positive code, 2**(bits-1) - 1
def _half_step_sigmas(max_over_std, bits, qmax=None):
    return max_over_std / (2 * (2 ** (bits - 1) - 1 if qmax is None else qmax))


# 5.3: a step that only streams bytes, at fp32's rate of bytes per millisecond
def _bytes_only_ms(fp32_ms, fp32_mb, kernel_mb, **_):
    return fp32_ms * kernel_mb / fp32_mb


def int6_per_row(w: torch.Tensor) -> torch.Tensor:
    """The reference for 5.4: ``w`` fake-quantized by symmetric absmax to 6 bits with one scale per row."""
    return dequantize(*absmax_quantize(w, 6, axis=-1))


def _per_row_with(qmax, reduce=lambda a: a.amax(dim=1, keepdim=True), rounding=torch.round, codes_only=False):
    """A wrong int6 the way a typical mistake writes it (never dividing by zero: the cases have no zero rows)."""
    def int6(w):
        scale = reduce(w.abs()) / qmax
        q = rounding(w / scale).clamp(-qmax - 1, qmax)
        return q if codes_only else q * scale
    return int6


def _cases_5_4(**_):
    g = torch.Generator().manual_seed(5)
    plain = torch.randn(8, 64, generator=g)
    sizes = torch.randn(16, 32, generator=g) * torch.logspace(-2, 1, 16).unsqueeze(1)   # rows of unlike sizes
    outlier = sizes.clone()
    outlier[3, 5] = 40.0                                                 # one weight far out, in one row
    return [(plain,), (sizes,), (outlier,), (torch.randn(1, 5, generator=g),), (torch.randn(5, 3, generator=g),)]


EXERCISES = ExerciseSet(
    Exercise(
        "5.1", PREDICT, answer=lambda weights, group_size: _kernel_mb(weights, group_size), rel=0.01,
        example=dict(weights=106_168_320, group_size=64),
        mistakes=[
            Mistake("The codes are not all: each group of {group_size} weights also stores its scale and zero.",
                    lambda weights, group_size: _kernel_mb(weights, group_size, bookkeeping_bits=0)),
            Mistake("This kernel keeps both the scale and the zero of a group as fp32 numbers, 32 bits each.",
                    lambda weights, group_size: _kernel_mb(weights, group_size, bookkeeping_bits=32)),
            Mistake("MB here are 10^6 bytes, not MiB (2^20 bytes).",
                    lambda weights, group_size: _kernel_mb(weights, group_size) * 1e6 / MIB),
            Mistake("That counts bits; divide by 8 for bytes.",
                    lambda weights, group_size: _kernel_mb(weights, group_size) * 8),
        ]),
    Exercise(
        "5.2", EXPLAIN, answer=lambda max_over_std, bits: _half_step_sigmas(max_over_std, bits), rel=0.01,
        example=dict(max_over_std=51.311, bits=4),
        hint="A weight rounds to 0 when it lies within half a step of 0; the step is set by the largest weight.",
        mistakes=[
            Mistake("That is a whole step; a weight rounds to 0 when it lies within half a step of 0.",
                    lambda max_over_std, bits: 2 * _half_step_sigmas(max_over_std, bits)),
            Mistake("Code 2^(bits-1) exists only on the negative side: absmax maps the largest weight to the "
                    "largest positive code.",
                    lambda max_over_std, bits: _half_step_sigmas(max_over_std, bits, qmax=2 ** (bits - 1))),
            Mistake("Symmetric absmax puts 0 in the middle: only the positive codes lie between 0 and the largest "
                    "weight, not all 2^{bits} levels.",
                    lambda max_over_std, bits: max_over_std / (2 ** bits - 1)),
        ]),
    Exercise(
        "5.3", PREDICT, answer=lambda **f: _bytes_only_ms(**f), rel=0.05,
        example=dict(fp32_ms=309.4, fp32_mb=538.1, kernel_mb=220.2, fp32_projection_mb=424.7,
                     kernel_projection_mb=106.8, kernel_ms=559.5),
        mistakes=[
            Mistake("A step reads more than the projections: the embedding and the output matrix stay fp32 in every "
                    "kernel. Use the MB read per step.",
                    lambda fp32_ms, fp32_projection_mb, kernel_projection_mb, **_:
                    fp32_ms * kernel_projection_mb / fp32_projection_mb),
            Mistake("Fewer bytes take less time at the same rate, not more: the ratio is upside down.",
                    lambda fp32_ms, fp32_mb, kernel_mb, **_: fp32_ms * fp32_mb / kernel_mb),
            Mistake("That is the measured time ({answer} ms); the exercise asks what the bytes alone predict.",
                    lambda kernel_ms, **_: kernel_ms),
        ]),
    Exercise(
        "5.4", CODE, answer=lambda **f: int6_per_row, example={}, cases=_cases_5_4,
        hint="Per row: scale = the row's largest |w| divided by the largest positive 6-bit code; round; multiply back.",
        mistakes=[
            Mistake("63 is the largest *unsigned* 6-bit code; symmetric codes run from -32 to 31.",
                    lambda **f: _per_row_with(63)),
            Mistake("One scale per row: take the largest |w| of each row, not of the whole matrix.",
                    lambda **f: _per_row_with(31, reduce=lambda a: a.amax())),
            Mistake("A row is an output channel, w[i, :]: its maximum runs along dim=1, not down a column.",
                    lambda **f: _per_row_with(31, reduce=lambda a: a.amax(dim=0, keepdim=True))),
            Mistake("Round to the nearest level; int() and torch.trunc cut toward zero.",
                    lambda **f: _per_row_with(31, rounding=torch.trunc)),
            Mistake("Return the weights the model computes with, codes times their row's scale, not the codes.",
                    lambda **f: _per_row_with(31, codes_only=True)),
        ]),
)
check, verdict = EXERCISES.check, EXERCISES.verdict
