"""GGUF block formats: our unpacking of Q4_0, Q4_1 and Q8_0 against the gguf package, and the bit accounting."""
import numpy as np
import pytest
import torch

from helpers import s05_gguf as G
from helpers import s05_quantization as Q

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
    from helpers.infra.model import ModelNotAvailable, embedded_gguf_path
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


@pytest.fixture(scope="module")
def embedded_path():
    from helpers.infra.model import ModelNotAvailable, embedded_gguf_path
    try:
        return str(embedded_gguf_path())
    except ModelNotAvailable:
        pytest.skip("embedded model not installed")


def test_our_tensor_directory_matches_ggufs_reader(embedded_path):
    from gguf import GGUFReader
    theirs = GGUFReader(embedded_path).tensors                   # slow (seconds): what our reader avoids
    ours = G.tensor_directory(embedded_path)
    assert list(ours) == [t.name for t in theirs]
    for t in theirs:
        mine = ours[t.name]
        assert mine.type_name == t.tensor_type.name
        assert mine.dims == tuple(int(d) for d in t.shape)        # GGUF's order, as the package gives it
        assert (mine.offset, mine.n_elements, mine.n_bytes) == (t.data_offset, int(t.n_elements), int(t.n_bytes))
    by_type = {}
    for t in theirs:                                             # one tensor of each format, and the first
        by_type.setdefault(t.tensor_type.name, t)
    for t in [theirs[0], *by_type.values()]:
        raw = G.read_tensor_bytes(ours[t.name], embedded_path)
        assert raw.numpy().tobytes() == t.data.tobytes()
    fmt, raw, shape = G.stored_blocks("model.layers.3.self_attn.q_proj.weight", embedded_path)
    t = next(t for t in theirs if t.name == "blk.3.attn_q.weight")
    assert fmt == t.tensor_type.name and shape == (int(t.shape[1]), int(t.shape[0]))
    assert raw.numpy().tobytes() == t.data.tobytes()


def test_tensor_directory_rejects_bad_files_with_a_clear_error(embedded_path, tmp_path):
    with open(embedded_path, "rb") as f:
        head = f.read(1 << 16)
    cases = {
        "empty.gguf": b"",
        "garbage.gguf": bytes(range(256)) * 64,
        "big-endian.gguf": b"GGUF" + (3).to_bytes(4, "big") + head[8:],
        "future-version.gguf": b"GGUF" + (99).to_bytes(4, "little") + head[8:],
        "cut-in-the-header.gguf": head,                           # the vocabulary alone is longer than this
    }
    expected = {"empty.gguf": "empty", "garbage.gguf": "not a GGUF file", "big-endian.gguf": "big-endian",
                "future-version.gguf": "version 99", "cut-in-the-header.gguf": "truncated"}
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(ValueError, match=expected[name]):
            G.tensor_directory(str(path))
    # a whole header whose data stops short: cut the file one byte into the tensor that ends last
    last = max(G.tensor_directory(embedded_path).values(), key=lambda t: t.offset + t.n_bytes)
    cut = tmp_path / "cut-in-the-data.gguf"
    with open(embedded_path, "rb") as f:
        cut.write_bytes(f.read(last.offset + 1))
    with pytest.raises(ValueError, match="truncated"):
        G.tensor_directory(str(cut))
