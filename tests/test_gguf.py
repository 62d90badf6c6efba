"""GGUF block formats: our unpacking of Q4_0, Q4_1 and Q8_0 against the gguf package, and the bit accounting."""
import numpy as np
import pytest
import torch

from helpers import gguf as G
from helpers import quantization as Q

gq = pytest.importorskip("gguf.quants")
from gguf import GGMLQuantizationType as T  # noqa: E402


def weights(rows=8, cols=96, seed=0):
    w = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)) * 0.02
    w[0, 5] = 0.3                                         # one outlier
    return w


@pytest.mark.parametrize("fmt", G.UNPACKED)
def test_our_unpacking_matches_ggufs_dequantizer_bit_for_bit(fmt):
    W = weights()
    raw = torch.from_numpy(gq.quantize(W.numpy(), T[fmt]).reshape(-1).view(np.uint8).copy())
    ours = G.dequantize_blocks(fmt, raw, tuple(W.shape))
    assert torch.equal(ours, G.reference_dequantize(fmt, raw, tuple(W.shape)))
    assert Q.relative_error(W, ours) < 0.2


def test_q4_1_codes_match_our_q4_1_quantizer():
    W = weights()
    raw = torch.from_numpy(gq.quantize(W.numpy(), T.Q4_1).reshape(-1).view(np.uint8).copy())
    codes, d, m = G.unpack_q4_1(raw)
    q, d2, m2 = Q.q4_1_quantize(W)
    assert torch.equal(q.reshape(-1, 32), codes) and torch.equal(d, d2) and torch.equal(m, m2)


def test_bits_per_weight_of_the_common_formats():
    expected = {"Q4_0": 4.5, "Q4_1": 5.0, "Q8_0": 8.5, "Q2_K": 2.625, "Q3_K": 3.4375, "Q4_K": 4.5,
                "Q5_K": 5.5, "Q6_K": 6.5625, "F16": 16.0, "F32": 32.0}
    assert {f: G.bits_per_weight_of(f) for f in expected} == expected
    assert G.bits_per_weight_of("Q4_1") == Q.bits_per_weight(4, 32, zero_bits=16)
    with pytest.raises(ValueError, match="not a GGML format"):
        G.bits_per_weight_of("Q4_Z")


def test_names_and_bad_input():
    assert G.gguf_name("model.layers.12.mlp.down_proj.weight") == "blk.12.ffn_down.weight"
    assert G.gguf_name("model.layers.3.self_attn.o_proj.weight") == "blk.3.attn_output.weight"
    with pytest.raises(ValueError, match="not a projection matrix"):
        G.gguf_name("model.embed_tokens.weight")
    with pytest.raises(ValueError, match="blocks of 20"):
        G.unpack_q4_1(torch.zeros(30, dtype=torch.uint8))
    with pytest.raises(ValueError, match="unpack only"):
        G.dequantize_blocks("Q4_K", torch.zeros(144, dtype=torch.uint8), (1, 256))


def test_the_embedded_gguf_is_on_a_q4_1_grid():
    from helpers.model import ModelNotAvailable, embedded_gguf_path
    try:
        path = str(embedded_gguf_path())
        codes, d, m = G.read_q4_1("model.layers.0.mlp.down_proj.weight")
    except ModelNotAvailable:
        pytest.skip("embedded model not installed")
    assert codes.shape == (576, 1536) and d.numel() == 576 * 1536 // 32
    ref = Q.q4_1_dequantize(codes, d, m)
    q2, d2, m2 = Q.q4_1_quantize(ref)
    assert torch.equal(Q.q4_1_dequantize(q2, d2, m2), ref)
    fmt, raw, shape = G.stored_blocks("model.layers.0.mlp.down_proj.weight", path)
    assert torch.equal(G.reference_dequantize(fmt, raw, shape), ref)
    table = {r["format"]: r for r in G.format_table(path)}
    assert "Q4_1" in table and table["Q4_1"]["bits / weight"] == 5.0
    assert sum(r["bytes"] for r in table.values()) == sum(r["weights"] * r["bits / weight"] / 8 for r in table.values())
