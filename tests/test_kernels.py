"""Section 5's kernel plumbing (helpers.s05_kernels): every kernel built or its absence explained, each weight-only
kernel's scheme, and the timing claim's check. The kernels' arithmetic itself is tested in tests/test_quality.py."""
from __future__ import annotations

import torch

from conftest import make_tiny_llama
from helpers import s05_kernels as K
from helpers import s05_quantization as Q
from helpers.infra.measure import Timing


def test_build_all_builds_every_kernel_and_keeps_the_model_itself_as_fp32():
    model = make_tiny_llama()
    built, missing = K.build_all(model)
    assert list(built) == list(K.KERNELS) and missing == {}
    assert built["fp32"] is model
    assert isinstance(built["int8 weight-only"].model.layers[0].mlp.down_proj, K.Int8WeightOnlyLinear)


def test_build_all_says_why_a_kernel_is_missing_instead_of_failing():
    model = make_tiny_llama(hidden_size=48, intermediate_size=96, num_attention_heads=4,
                            num_key_value_heads=2)       # rows of 48 inputs: groups of 64 do not divide them
    built, missing = K.build_all(model)
    assert "int4 weight-only g64" not in built and set(built) == set(K.KERNELS) - {"int4 weight-only g64"}
    assert "does not divide" in missing["int4 weight-only g64"] and "\n" not in missing["int4 weight-only g64"]


def test_each_weight_only_kernel_computes_exactly_the_scheme_it_is_paired_with():
    torch.manual_seed(3)
    lin = torch.nn.Linear(128, 64, bias=False)
    x = torch.randn(2, 128)
    kernels = {"int8 weight-only": K.Int8WeightOnlyLinear(lin), "int4 weight-only g64": K.Int4WeightOnlyLinear(lin)}
    assert set(K.WEIGHT_ONLY_SCHEMES) == set(kernels) and set(kernels) < set(K.KERNELS)
    for name, kernel in kernels.items():
        expected = x @ K.WEIGHT_ONLY_SCHEMES[name].fake_quantize(lin.weight.detach()).T
        assert (kernel(x) - expected).abs().max() < 1e-4 * expected.abs().max()
    assert isinstance(K.WEIGHT_ONLY_SCHEMES["int8 weight-only"], Q.Scheme)


def _timed(fp32_ms, int8_ms):
    return {"fp32": Timing(0.0, [t / 1e3 for t in fp32_ms]), K.DYNAMIC: Timing(0.0, [t / 1e3 for t in int8_ms])}


def test_the_timing_check_reads_the_fastest_steps_and_needs_ten_percent():
    # the kernel's median (400 ms) is four times fp32's (100 ms), but its fastest step, 80 ms, beats 0.9 x 90 ms
    holds, statement, evidence, fields = K.faster_check(_timed([100, 300, 90], [80, 400, 500]))["int8"]
    assert holds and fields == {"ours": 80.0, "base": 90.0}
    assert "10 %" in statement and "{ours:.1f}" in evidence


def test_the_timing_check_fails_when_the_kernel_is_less_than_ten_percent_faster():
    assert not K.faster_check(_timed([100], [91]))["int8"][0]
    assert K.faster_check(_timed([100], [89]))["int8"][0]


def test_no_timing_check_without_the_dynamic_kernel():
    assert K.faster_check({"fp32": Timing(0.1, [0.1])}) == {}
