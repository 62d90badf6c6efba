"""Section 5's exercises: what the checkers compute is what the section's code does."""
from __future__ import annotations

import torch

from conftest import make_tiny_llama
from helpers import s05_kernels as K
from helpers import s05_quantization as Q
from helpers.s05_exercises import EXERCISES, int6_per_row


def test_5_1_counts_the_bytes_the_int4_kernel_really_holds():
    model = make_tiny_llama(hidden_size=128, intermediate_size=256)
    weights = sum(w.numel() for w in Q.projection_weights(model).values())
    held = K.linear_bytes(K.with_kernel(model, K.KERNELS[-1]))
    assert abs(EXERCISES["5.1"].answer(weights=weights, group_size=K.INT4_GROUP) * 1e6 - held) < 1e-6 * held


def test_5_2_is_half_the_step_the_helper_uses_in_standard_deviations():
    w = torch.randn(64, 96, generator=torch.Generator().manual_seed(0))
    w[3, 7] = 12.0
    _, scale = Q.absmax_quantize(w, 4)
    stats = Q.outlier_stats(w)
    got = EXERCISES["5.2"].answer(max_over_std=stats["max_over_std"], bits=4)
    assert abs(got - float(scale) / 2 / stats["std"]) < 1e-5 * got


def test_5_4_reference_is_the_int6_per_row_scheme_and_keeps_zero_rows():
    w = torch.randn(6, 40, generator=torch.Generator().manual_seed(1))
    w[2] = 0
    out = int6_per_row(w)
    assert torch.equal(out, Q.Scheme("int6 per-row", "absmax", 6, axis=-1).fake_quantize(w))
    assert torch.equal(out[2], torch.zeros(40))
    codes = out / (w.abs().amax(dim=1, keepdim=True).clamp_min(1e-30) / 31)
    assert codes.round().abs().max() <= 32 and len(out.unique()) > 40
