"""Tests for helpers.s02_roofline (bandwidth, bytes and FLOPs of a step) on tiny random-init models."""
import copy
import warnings

import pytest
import torch

from helpers import s02_roofline as roofline
from helpers.infra.measure import Timing
from helpers.infra.model import weight_bytes
from helpers.s01_attention import Dims

from test_phases import HEADS, HIDDEN, KV_HEADS, LAYERS, tiny   # the same tiny Llama


@pytest.fixture(scope="module")
def model():
    return tiny()


def test_weights_read_tied_is_every_weight_once(model):
    assert roofline.weights_read_per_step(model) == weight_bytes(model)


def test_weights_read_untied_reads_one_embedding_row():
    m = tiny(tied=False)
    emb = m.get_input_embeddings().weight
    expected = weight_bytes(m) - emb.numel() * 4 + HIDDEN * 4
    assert roofline.weights_read_per_step(m) == expected


def test_weights_read_halves_in_bf16(model):
    half = copy.deepcopy(model).to(torch.bfloat16)
    assert 2 * roofline.weights_read_per_step(half) == roofline.weights_read_per_step(model)


def test_weights_read_dynamic_int8_counts_one_byte_per_weight(model):
    quantize_dynamic = getattr(getattr(torch, "ao", None), "quantization", None)
    if quantize_dynamic is None or not hasattr(quantize_dynamic, "quantize_dynamic"):
        pytest.skip("this torch has no torch.ao.quantization.quantize_dynamic")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = quantize_dynamic.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8)
    linear_weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    other = sum(p.numel() for n, p in model.named_parameters() if "norm" in n) * 4   # RMSNorm gains stay fp32
    assert roofline.weights_read_per_step(q) == linear_weights + other + HIDDEN * 4   # + one embedding row
    assert len(roofline.linear_layers(q)) == len(roofline.linear_layers(model))


def test_roofline_known_values():
    assert roofline.roofline_seconds(10**9, 10.0) == pytest.approx(0.1)
    assert roofline.gb_per_s(10**9, 0.2) == pytest.approx(5.0)
    assert roofline.gflop_per_s(3 * 10**9, 0.5) == pytest.approx(6.0)
    assert roofline.bandwidth_fraction(10**9, 0.2, 10.0) == pytest.approx(0.5)
    # the fraction is the roofline time over the measured time
    assert roofline.bandwidth_fraction(3 * 10**8, 0.07, 20.0) == pytest.approx(
        roofline.roofline_seconds(3 * 10**8, 20.0) / 0.07)


@pytest.mark.parametrize("fn,args", [
    (roofline.roofline_seconds, (100, 0.0)), (roofline.roofline_seconds, (-1, 1.0)),
    (roofline.gb_per_s, (100, 0.0)), (roofline.gb_per_s, (-1, 1.0)), (roofline.gflop_per_s, (100, 0.0)),
    (roofline.gflop_per_s, (-1, 1.0)), (roofline.bandwidth_fraction, (100, 1.0, 0.0)),
])
def test_roofline_rejects_bad_input(fn, args):
    with pytest.raises(ValueError):
        fn(*args)


@pytest.mark.parametrize("kind", ["sum", "gemv"])
def test_stream_bandwidth_reports_the_bytes_it_read(kind):
    bw = roofline.stream_bandwidth(1 << 20, kind=kind, repeats=2)
    assert bw.nbytes == 1 << 20            # 1 MiB is a whole number of 4096-float rows
    assert bw.kind == kind
    assert bw.gb_per_s == pytest.approx(bw.nbytes / bw.seconds / 1e9)


@pytest.mark.parametrize("kw", [dict(kind="copy"), dict(nbytes=100)])
def test_stream_bandwidth_rejects_bad_input(kw):
    args = dict(nbytes=1 << 20, kind="sum") | kw
    with pytest.raises(ValueError):
        roofline.stream_bandwidth(**args)


def test_linear_layers_are_every_matrix(model):
    layers = roofline.linear_layers(model)
    assert len(layers) == LAYERS * 7 + 1   # q, k, v, o, gate, up, down per layer, plus the output head
    assert sum(m.weight.numel() for m in layers) * 4 + HIDDEN * 4 * (2 * LAYERS + 1) == weight_bytes(model)


def test_matmul_chain_runs_every_linear_layer_once(model, monkeypatch):
    calls = []
    for m in roofline.linear_layers(model):
        monkeypatch.setattr(m, "forward", lambda x, m=m: calls.append(m) or x)
    roofline.matmul_chain(model)()
    assert calls == roofline.linear_layers(model)


def test_prefill_is_the_work_of_p_cached_steps(model):
    d = Dims.from_config(model.config)
    assert roofline.prefill_flops(d, 1) == roofline.decode_flops(d, 0)
    for p in (2, 7, 33):
        assert roofline.prefill_flops(d, p) == sum(roofline.decode_flops(d, c) for c in range(p))


def test_decode_flops_known_value():
    d = Dims(layers=2, hidden=8, heads=2, kv_heads=1, head_dim=4, mlp=16, vocab=10)
    weights = 2 * (8 * 4 * (2 * 2 + 2 * 1) + 3 * 8 * 16) + 8 * 10     # 2 layers of attention + MLP, the head
    per_key = 2 * 2 * 2 * 4                                             # layers x heads x (q.k + p.v) x head_dim
    assert roofline.decode_flops(d, 5) == 2 * (weights + 6 * per_key)


def test_roofline_min_and_intensity():
    assert roofline.arithmetic_intensity(100, 400) == 0.25
    assert roofline.attainable_gflops(0.5, 300.0, 20.0) == 10.0       # bandwidth-bound
    assert roofline.attainable_gflops(100.0, 300.0, 20.0) == 300.0    # compute-bound
    with pytest.raises(ValueError):
        roofline.arithmetic_intensity(1, 0)
    with pytest.raises(ValueError):
        roofline.attainable_gflops(1.0, 0.0, 20.0)


def test_matmul_peak_counts_flops():
    c = roofline.matmul_peak(64, repeats=2)
    assert c.flops == 2 * 64 ** 3
    assert c.gflop_per_s == pytest.approx(c.flops / c.seconds / 1e9)
    with pytest.raises(ValueError):
        roofline.matmul_peak(4)


def test_tiny_twin_same_structure_far_fewer_bytes(model):
    twin = roofline.tiny_twin(model, head_dim=2, vocab=16)
    assert type(twin) is type(model)
    assert twin.config.num_hidden_layers == LAYERS
    assert twin.config.num_attention_heads == HEADS and twin.config.num_key_value_heads == KV_HEADS
    assert len(roofline.linear_layers(twin)) == len(roofline.linear_layers(model))
    assert roofline.weights_read_per_step(twin) * 20 < roofline.weights_read_per_step(model)
    with pytest.raises(ValueError):
        roofline.tiny_twin(model, head_dim=0)


def test_limits_keep_the_best_repeat(monkeypatch):
    monkeypatch.setattr(roofline, "interleaved_medians",
                        lambda cases, repeats, warmup: {k: Timing(2.0, [3.0, 1.0, 2.0]) for k in cases})
    assert roofline.stream_bandwidth(1 << 20).seconds == 1.0
    assert roofline.matmul_peak(64).seconds == 1.0


@pytest.mark.parametrize("kind", ["sum", "gemv"])
def test_stream_reader_reads_the_bytes_it_reports(kind):
    fn, nbytes = roofline.stream_reader(3 << 20, kind)
    assert nbytes == 3 << 20
    out = fn()
    # a buffer of ones: the sum is its length, each row of the product is the row length
    assert float(out.sum() if kind == "gemv" else out) == nbytes // 4



def test_gap_checks_known_values():
    from test_phases import _fields_used
    parts = {"stream": Timing(0.06, [0.06, 0.05]), "matmuls": Timing(0.07, [0.06, 0.07]),
             "step": Timing(0.1, [0.09, 0.1])}
    checks = roofline.gap_checks(parts, 10**9, 11 * 10**8)          # 20 GB/s: the roofline is 55 ms
    assert checks["roof"][0] and checks["step"][0] and all(_fields_used(c) for c in checks.values())
    assert checks["roof"][3]["roof_ms"] == pytest.approx(55.0) and checks["roof"][3]["matmuls_ms"] == pytest.approx(60)
    faster = {**parts, "matmuls": Timing(0.04, [0.04])}             # 40 ms: under 80 % of the roofline
    assert not roofline.gap_checks(faster, 10**9, 11 * 10**8)["roof"][0]
    slower = {**parts, "matmuls": Timing(0.095, [0.095])}           # the products alone slower than the step
    assert not roofline.gap_checks(slower, 10**9, 11 * 10**8)["step"][0]
