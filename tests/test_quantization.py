"""Weight quantization helpers: exact agreement with the chapter's formulas, known values, properties,
and cross-checks against the reference implementations (gguf's Q4_1, bitsandbytes' NF4 and int8)."""
import math

import numpy as np
import pytest
import torch
from conftest import make_tiny_llama

from helpers import s05_gguf as G
from helpers.infra.model import weight_bytes_at
from helpers import s05_quantization as Q


def weights(*shape, seed=0, outlier=None):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(*shape, generator=g) * 0.02
    if outlier is not None:
        w.view(-1)[123] = outlier
    return w


# --------------------------------------------------------------------------- absmax


@pytest.mark.parametrize("bits", range(2, 9))
def test_absmax_per_tensor_is_the_chapters_three_lines(bits):
    W = weights(64, 96, outlier=0.4)
    qmax = 2 ** (bits - 1) - 1
    scale = W.abs().max() / qmax
    Wq = torch.round(W / scale).clamp(-qmax - 1, qmax)
    W_hat = Wq * scale
    q, s = Q.absmax_quantize(W, bits)
    assert q.dtype == torch.int8 and s.shape == ()
    assert torch.equal(q.float(), Wq) and torch.equal(s, scale)
    assert torch.equal(Q.dequantize(q, s), W_hat)


def test_absmax_known_values():
    q, s = Q.absmax_quantize(torch.tensor([-1.0, -0.5, 0.0, 0.25, 1.0]), 8)
    assert math.isclose(float(s), 1 / 127, rel_tol=1e-6)
    assert q.tolist() == [-127, -64, 0, 32, 127]          # -63.5 rounds half to even, 31.75 up
    q, s = Q.absmax_quantize(torch.tensor([0.1, -0.7, 0.35]), 4)
    assert math.isclose(float(s), 0.1, rel_tol=1e-6)
    assert q.tolist() == [1, -7, 4]


def test_per_row_scales_each_row_by_its_own_maximum():
    W = weights(8, 32, outlier=1.0)
    q, s = Q.absmax_quantize(W, 4, axis=-1)
    assert s.shape == (8, 1)
    assert torch.equal(q.abs().amax(dim=1), torch.full((8,), 7, dtype=torch.int8))
    for r in range(8):
        qr, sr = Q.absmax_quantize(W[r], 4)
        assert torch.equal(q[r], qr) and torch.equal(s[r, 0], sr)


def test_groups_in_rows_equal_flat_blocks_when_the_group_divides_the_row():
    W = weights(12, 256)
    for g in (32, 64, 128, 256):
        q_row, s_row = Q.absmax_quantize(W, 4, axis=-1, group_size=g)
        q_flat, s_flat = Q.absmax_quantize(W, 4, group_size=g)
        assert s_row.shape == (12, 256 // g) and s_flat.shape == (12 * 256 // g,)
        assert torch.equal(q_row, q_flat) and torch.equal(s_row.reshape(-1), s_flat)
        assert torch.equal(Q.dequantize(q_row, s_row), Q.dequantize(q_flat, s_flat))
        # and a group is exactly a tiny per-tensor quantization
        q0, s0 = Q.absmax_quantize(W[0, :g], 4)
        assert torch.equal(q_row[0, :g], q0) and torch.equal(s_row[0, 0], s0)


def test_flat_blocks_cross_rows_when_the_group_does_not_divide_the_row():
    W = weights(4, 96)                                   # 96 = 1.5 blocks of 64
    q, s = Q.absmax_quantize(W, 4, group_size=64)
    assert s.shape == (6,)
    q1, s1 = Q.absmax_quantize(W.reshape(-1)[64:128], 4)  # the block straddling rows 0 and 1
    assert torch.equal(q.reshape(-1)[64:128], q1) and torch.equal(s[1], s1)
    with pytest.raises(ValueError, match="does not divide the row length 96"):
        Q.absmax_quantize(W, 4, axis=-1, group_size=64)


def test_axis_zero_gives_one_scale_per_column():
    X = weights(10, 16, outlier=3.0)
    q, s = Q.absmax_quantize(X, 8, axis=0)
    assert s.shape == (1, 16)
    qt, st = Q.absmax_quantize(X.T.contiguous(), 8, axis=-1)
    assert torch.equal(q, qt.T) and torch.equal(s, st.T)
    assert torch.equal(Q.dequantize(q, s), Q.dequantize(qt, st).T)


@pytest.mark.parametrize("kw", [dict(), dict(axis=-1), dict(group_size=32), dict(axis=-1, group_size=16)])
@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_rounding_error_is_at_most_half_a_step(kw, bits):
    W = weights(16, 64, outlier=0.5)
    q, s = Q.absmax_quantize(W, bits, **kw)
    step = Q.dequantize(torch.ones_like(q), s)            # each weight's own scale
    assert torch.all((W - Q.dequantize(q, s)).abs() <= step / 2 * (1 + 1e-6))


def test_finer_granularity_lowers_the_error_when_one_outlier_sets_the_scale():
    W = weights(64, 256, outlier=0.6)                    # 30 sigma
    e = [Q.relative_error(W, Q.dequantize(*Q.absmax_quantize(W, 4, **kw)))
         for kw in (dict(), dict(axis=-1), dict(group_size=64))]
    assert e[0] > 0.9                                    # the collapse: almost everything rounds to 0
    assert e[1] < 0.25 * e[0] and e[2] < 0.9 * e[1]


def test_a_block_of_zeros_gets_scale_zero_and_no_nan():
    W = torch.zeros(2, 8)
    W[1] = torch.linspace(-1, 1, 8)
    q, s = Q.absmax_quantize(W, 4, axis=-1)
    assert s[0, 0] == 0 and torch.all(q[0] == 0)
    assert torch.isfinite(Q.dequantize(q, s)).all()


@pytest.mark.parametrize("bits", [1, 9, 0, 4.0, True, "4"])
def test_bad_bits_raise_one_clear_error(bits):
    with pytest.raises(ValueError, match="bits must be an integer from 2 to 8"):
        Q.absmax_quantize(weights(4, 4), bits)
    with pytest.raises(ValueError, match="bits must be an integer"):
        Q.asymmetric_quantize(weights(4, 4), bits)


def test_numpy_integers_are_accepted_as_bits_and_group_sizes():
    W = weights(4, 64)
    a = Q.absmax_quantize(W, np.int64(4), group_size=np.int64(32))
    b = Q.absmax_quantize(W, 4, group_size=32)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_bad_tensors_and_groups_raise_one_clear_error():
    with pytest.raises(ValueError, match="empty tensor"):
        Q.absmax_quantize(torch.empty(0), 8)
    with pytest.raises(ValueError, match="floating-point"):
        Q.absmax_quantize(torch.arange(8), 8)
    with pytest.raises(ValueError, match="does not divide the 30 weights"):
        Q.absmax_quantize(weights(5, 6), 4, group_size=4)
    with pytest.raises(ValueError, match="last axis"):
        Q.absmax_quantize(weights(4, 8), 4, axis=0, group_size=2)
    with pytest.raises(ValueError, match="group_size must be a positive integer"):
        Q.absmax_quantize(weights(4, 8), 4, group_size=0)
    with pytest.raises(ValueError, match="axis"):
        Q.absmax_quantize(weights(4, 8), 4, axis=2)
    with pytest.raises(ValueError, match="does not match codes"):
        Q.dequantize(torch.zeros(4, 8, dtype=torch.int8), torch.ones(3))


def test_dequantize_does_not_modify_float_codes_in_place():
    q = torch.tensor([1.0, 2.0, 3.0])
    Q.dequantize(q, torch.tensor(2.0))
    assert q.tolist() == [1.0, 2.0, 3.0]


# --------------------------------------------------------------------------- asymmetric


def test_asymmetric_codes_range_zero_is_exact_and_error_is_half_a_step():
    W = weights(8, 64) + 0.01
    W[0, 0] = 0.0
    for bits in (2, 4, 8):
        q, s, z = Q.asymmetric_quantize(W, bits, axis=-1)
        assert q.dtype == torch.uint8 and int(q.max()) <= 2 ** bits - 1
        assert z.dtype == torch.int32 and s.shape == z.shape == (8, 1)
        W_hat = Q.dequantize(q, s, z)
        assert W_hat[0, 0] == 0.0
        assert torch.all((W - W_hat).abs() <= s / 2 * (1 + 1e-5) + 1e-7)


def test_asymmetric_beats_symmetric_on_one_sided_data():
    X = torch.rand(1000, generator=torch.Generator().manual_seed(1))   # all positive, like post-ReLU values
    q, s, z = Q.asymmetric_quantize(X, 4)
    assert int(z) == 0                                   # min is clamped to 0, which is code 0
    e_asym = Q.relative_error(X, Q.dequantize(q, s, z))
    e_sym = Q.relative_error(X, Q.dequantize(*Q.absmax_quantize(X, 4)))
    assert e_asym < 0.6 * e_sym                          # 15 steps over the data instead of 7


# --------------------------------------------------------------------------- NF4 and codebooks


def test_nf4_levels_from_normal_quantiles_match_the_published_table():
    lv = Q.nf4_levels()
    pub = torch.tensor(Q.NF4_PUBLISHED)
    assert lv.shape == (16,) and lv[0] == -1 and lv[-1] == 1 and lv[7] == 0
    assert int((lv > 0).sum()) == 8 and int((lv < 0).sum()) == 7
    assert float((lv - pub).abs().max()) < 1e-6
    gaps = lv.diff()
    assert gaps[7] < gaps[0] and gaps[7] < gaps[-1]     # dense near zero, sparse in the tails


def test_nf4_rounds_to_the_nearest_level_of_each_block():
    W = weights(8, 128, outlier=0.3)
    idx, absmax = Q.nf4_quantize(W, 64)
    assert idx.dtype == torch.uint8 and absmax.shape == (16,)
    x = W.reshape(-1, 64) / absmax[:, None]
    brute = (x[..., None] - Q.nf4_levels()).abs().argmin(-1)
    assert torch.equal(idx.reshape(-1, 64).long(), brute)
    W_hat = Q.nf4_dequantize(idx, absmax)
    assert torch.equal(W_hat, (Q.nf4_levels()[brute] * absmax[:, None]).reshape(W.shape))


def test_codebook_with_uniform_levels_is_absmax():
    W = weights(16, 64, outlier=0.2)
    for bits in (3, 4, 8):
        idx, absmax = Q.codebook_quantize(W, Q.uniform_levels(bits), group_size=32)
        via_codebook = Q.codebook_dequantize(idx, absmax, Q.uniform_levels(bits))
        via_absmax = Q.dequantize(*Q.absmax_quantize(W, bits, group_size=32))
        step = absmax / (2 ** (bits - 1) - 1)
        differ = (via_codebook - via_absmax).abs().reshape(-1, 32)
        assert torch.all((differ < 1e-6 * absmax[:, None]) | ((differ - step[:, None]).abs() < 1e-5 * absmax[:, None]))
        assert float((differ > 1e-6).float().mean()) < 0.01   # only exact ties may round the other way


def test_codebook_rejects_unsorted_levels():
    with pytest.raises(ValueError, match="sorted"):
        Q.codebook_quantize(weights(4, 64), torch.tensor([0.0, -1.0, 1.0]))


def test_nf4_matches_bitsandbytes_exactly():
    F = pytest.importorskip("bitsandbytes.functional")
    W = weights(96, 128, outlier=0.25)
    packed, state = F.quantize_4bit(W, blocksize=64, quant_type="nf4")
    theirs = F.dequantize_4bit(packed, state)
    idx, absmax = Q.nf4_quantize(W, 64)
    assert torch.equal(absmax, state.absmax)
    u = packed.reshape(-1)
    their_idx = torch.stack([u >> 4, u & 0x0F], dim=1).reshape(W.shape)   # two codes per byte, high first
    assert torch.equal(idx, their_idx)
    # our levels come from the normal quantiles, theirs from the table: equal to float32 precision
    assert torch.allclose(Q.nf4_dequantize(idx, absmax), theirs, rtol=1e-6, atol=0)
    assert torch.allclose(state.code, Q.nf4_levels(), atol=1e-6)


def test_per_row_int8_matches_bitsandbytes_up_to_ties():
    F = pytest.importorskip("bitsandbytes.functional")
    W = weights(64, 256, outlier=0.3)
    theirs, row_absmax, _ = F.int8_vectorwise_quant(W)
    ours, scale = Q.absmax_quantize(W, 8, axis=-1)
    assert torch.allclose(row_absmax, scale.squeeze(1) * 127, rtol=1e-6)
    diff = (ours.int() - theirs.int()).abs()
    assert int(diff.max()) <= 1 and float((diff > 0).float().mean()) < 1e-3


def test_blockwise_int8_matches_bitsandbytes_up_to_ties():
    F = pytest.importorskip("bitsandbytes.functional")
    W = weights(64, 256, outlier=0.3)
    theirs, _ = F.quantize_blockwise(W, code=Q.uniform_levels(8), blocksize=128)
    ours, _ = Q.absmax_quantize(W, 8, group_size=128)
    diff = ((theirs.int() - 128) - ours.int()).abs()
    assert int(diff.max()) <= 1 and float((diff > 0).float().mean()) < 0.01


def test_nf4_bits_as_bitsandbytes_stores_them():
    F = pytest.importorskip("bitsandbytes.functional")
    W = weights(64, 256, outlier=0.3)
    packed, state = F.quantize_4bit(W, blocksize=64, quant_type="nf4")
    stored = (packed.numel() + state.absmax.numel() * state.absmax.element_size()) * 8 / W.numel()
    assert stored == Q.bits_per_weight(4, 64, scale_bits=32) == 4.5


# --------------------------------------------------------------------------- Q4_1


def test_q4_1_known_block_and_bits():
    w = torch.arange(32, dtype=torch.float32) / 31         # 0..1 in 31 steps onto 15 steps
    q, d, m = G.q4_1_quantize(w)
    assert float(m) == 0.0 and float(d) == float(torch.tensor(1 / 15).half())
    assert q[0] == 0 and q[-1] == 15
    assert Q.bits_per_weight(4, G.Q4_1_BLOCK, zero_bits=16) == 5.0


def test_q4_1_of_q4_1_weights_is_the_identity():
    """Weights that already sit on a Q4_1 grid (like our reference) come back unchanged."""
    W = weights(16, 64, outlier=0.3)
    once = G.q4_1_dequantize(*G.q4_1_quantize(W))
    q2, d2, m2 = G.q4_1_quantize(once)
    assert torch.equal(G.q4_1_dequantize(q2, d2, m2), once)
    assert Q.relative_error(W, once) > 0.01


def test_q4_1_error_estimate_predicts_the_measured_error_on_gaussian_weights():
    for shape, std in (((256, 576), 1.0), ((64, 1536), 0.02)):
        W = torch.randn(*shape, generator=torch.Generator().manual_seed(2)) * std
        measured = Q.relative_error(W, G.q4_1_dequantize(*G.q4_1_quantize(W)))
        assert G.q4_1_error_estimate(W) == pytest.approx(measured, rel=0.02)


def test_q4_1_refuses_rows_that_do_not_split_into_blocks():
    with pytest.raises(ValueError, match="does not divide"):
        G.q4_1_quantize(weights(3, 10))


# --------------------------------------------------------------------------- bookkeeping


def test_bits_per_weight_and_bytes_known_values():
    assert Q.bits_per_weight(4, 128) == 4.125
    assert Q.bits_per_weight(4, 64) == 4.25
    assert Q.bits_per_weight(8, 32) == 8.5                # GGML Q8_0
    assert Q.bits_per_weight(4, 64, scale_bits=32) == 4.5 # bitsandbytes keeps fp32 absmax
    assert Q.bits_per_weight(8) == 8.0
    n = 494_032_768                                       # Qwen2.5-0.5B
    assert [round(weight_bytes_at(n, b) / 1e9, 2) for b in (32, 16, 8)] == [1.98, 0.99, 0.49]
    with pytest.raises(ValueError):
        Q.bits_per_weight(4, 0)


def test_relative_error_known_value_and_errors():
    assert Q.relative_error(torch.tensor([3.0, 4.0]), torch.tensor([3.0, 0.0])) == pytest.approx(0.8)
    assert Q.relative_error(torch.tensor([3.0, 4.0]), torch.zeros(2)) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="all zeros"):
        Q.relative_error(torch.zeros(3), torch.zeros(3))
    with pytest.raises(ValueError, match="Shapes differ"):
        Q.relative_error(torch.zeros(3), torch.zeros(4))


def test_outlier_stats_known_values():
    w = torch.cat([torch.tensor([1.0, -1.0] * 500), torch.tensor([40.0])])
    st = Q.outlier_stats(w)
    assert st["numel"] == 1001 and st["max_abs"] == 40.0 and st["beyond"] == 1
    assert st["max_over_std"] == pytest.approx(40.0 / float(w.std()))
    assert st["beyond_if_normal"] == pytest.approx(1001 * 1.973e-9, rel=1e-3)


# --------------------------------------------------------------------------- schemes over a model


def tiny_llama():
    return make_tiny_llama(vocab_size=64, max_position_embeddings=64)


def test_schemes_bits_and_fake_quantize():
    s = {x.name: x for x in Q.chapter_schemes()}
    assert s["int4 group-128"].bits_per_weight((576, 576)) == 4.125
    assert s["NF4 block-64"].bits_per_weight((576, 576)) == 4.25
    assert s["int8 per-row"].bits_per_weight((576, 1536)) == pytest.approx(8 + 16 / 1536)
    assert Q.Scheme("q4_1", "q4_1", 4).bits_per_weight((10, 64)) == 5.0
    W = weights(32, 128)
    assert torch.equal(s["int4 per-row"].fake_quantize(W), Q.dequantize(*Q.absmax_quantize(W, 4, axis=-1)))
    assert torch.equal(s["NF4 block-64"].fake_quantize(W), Q.nf4_dequantize(*Q.nf4_quantize(W, 64)))
    with pytest.raises(ValueError, match="4-bit format"):
        Q.Scheme("bad", "nf4", 8)
    with pytest.raises(ValueError, match="kind must be one of"):
        Q.Scheme("bad", "fp8", 8)


def test_projection_weights_and_quantized_projections_restore_exactly():
    model = tiny_llama()
    W = Q.projection_weights(model)
    assert len(W) == 2 * 7 and all(".layers." in n for n in W)
    before = {n: w.clone() for n, w in W.items()}
    scheme = Q.Scheme("int4 per-tensor", "absmax", 4)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        ref = model(ids).logits
        with Q.quantized_projections(model, scheme):
            for n, w in W.items():
                assert torch.equal(w, scheme.fake_quantize(before[n]))
            changed = model(ids).logits
        assert not torch.allclose(changed, ref)
        assert torch.equal(model(ids).logits, ref)
    for n, w in W.items():
        assert torch.equal(w, before[n])
    errs = Q.relative_errors(W, scheme)
    assert errs.shape == (14,) and torch.all(errs > 0)
    with pytest.raises(RuntimeError):
        with Q.quantized_projections(model, scheme):
            raise RuntimeError("boom")
    assert all(torch.equal(w, before[n]) for n, w in W.items())


def test_quantized_projections_from_given_originals_quantizes_them_and_restores_them_bit_for_bit():
    model = tiny_llama()
    W = Q.projection_weights(model)
    originals = {n: w.clone() for n, w in W.items()}
    scheme = Q.Scheme("int4 group-32", "absmax", 4, group_size=32)
    with torch.no_grad():
        with Q.quantized_projections(model, scheme) as m:          # the copying path, for comparison
            cloned = {n: w.clone() for n, w in Q.projection_weights(m).items()}
        for _ in range(2):                                          # reusable: nothing of it is consumed
            with Q.quantized_projections(model, scheme, originals=originals):
                for n, w in W.items():
                    assert torch.equal(w, cloned[n]) and torch.equal(w, scheme.fake_quantize(originals[n]))
                    assert not torch.equal(w, originals[n])
            assert all(torch.equal(w, originals[n]) for n, w in W.items())
        with pytest.raises(RuntimeError):                           # restored when the block raises, too
            with Q.quantized_projections(model, scheme, originals=originals):
                raise RuntimeError("boom")
        assert all(torch.equal(w, originals[n]) for n, w in W.items())
        assert all(o.data_ptr() != w.data_ptr() for o, w in zip(originals.values(), W.values()))


def test_quantized_projections_refuses_originals_that_are_not_separate_copies_of_its_weights():
    model = tiny_llama()
    W = Q.projection_weights(model)
    scheme = Q.Scheme("int8", "absmax", 8)
    originals = {n: w.clone() for n, w in W.items()}
    first = next(iter(W))
    bad_sets = [({n: w for n, w in originals.items() if n != first}, "exactly the model's projection"),
                ({**originals, first: originals[first].reshape(-1).clone()}, "pass copies"),
                ({**originals, first: originals[first].double()}, "pass copies"),
                (dict(W), "not a copy")]
    for bad, match in bad_sets:
        with pytest.raises(ValueError, match=match):
            with Q.quantized_projections(model, scheme, originals=bad):
                pass
        assert all(torch.equal(w, originals[n]) for n, w in W.items())     # refused before touching anything
