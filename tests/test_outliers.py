"""Tests for helpers.s06_outliers: exact values, identities, and behaviour on a tiny random Llama."""
import math

import pytest
import torch
from conftest import make_tiny_llama

from helpers import s06_int8_matmuls as M
from helpers import s06_outliers as O
from helpers.s05_quantization import absmax_quantize


TINY_OUTLIERS = dict(hidden_size=32, intermediate_size=64, max_position_embeddings=64)


@pytest.fixture(scope="module")
def tiny():
    model = make_tiny_llama(**TINY_OUTLIERS)
    ids = torch.randint(0, 97, (1, 9))
    return model, ids


# --------------------------------------------------------------------------- capturing


def test_residual_stream_matches_hidden_states_and_is_pre_norm(tiny):
    model, ids = tiny
    stream = O.residual_stream(model, ids)
    assert stream.shape == (3, 9, 32)                       # embeddings + 2 blocks
    with torch.inference_mode():
        hs = model(ids, output_hidden_states=True, use_cache=False).hidden_states
    assert torch.equal(stream[0], hs[0][0])                 # the embeddings
    assert torch.equal(stream[1], hs[1][0])                 # after block 1
    # transformers applies the final norm to its last hidden state; we keep the raw stream
    assert torch.allclose(model.model.norm(stream[2]), hs[2][0], atol=1e-5)
    assert not torch.allclose(stream[2], hs[2][0], atol=1e-3)


def test_linear_inputs_cover_every_linear_with_its_width(tiny):
    model, ids = tiny
    xs = O.linear_inputs(model, ids)
    assert len(xs) == 2 * 7 + 1                             # q k v o gate up down per block, and lm_head
    assert xs["model.layers.0.mlp.down_proj"].shape == (9, 64)
    assert xs["lm_head"].shape == (9, 32)
    one = O.linear_inputs(model, ids, ["model.layers.1.self_attn.v_proj"])
    assert list(one) == ["model.layers.1.self_attn.v_proj"]
    assert torch.equal(one["model.layers.1.self_attn.v_proj"], xs["model.layers.1.self_attn.v_proj"])
    with pytest.raises(ValueError):
        O.linear_inputs(model, ids, ["model.layers.0.mlp"])
    with pytest.raises(ValueError):
        O.linear_inputs(model, ids, ["model.layers.0.mlp", "model.layers.0.mlp.down_proj"])
    assert not any(m._forward_hooks for m in model.modules() if isinstance(m, torch.nn.Linear))   # none left behind
    with pytest.raises(ValueError):
        O.residual_stream(model, ids[0])


# --------------------------------------------------------------------------- measuring


def test_dimension_maxima_and_top_dimensions():
    h = torch.tensor([[1.0, -5.0, 0.5], [-2.0, 3.0, 0.25]])
    assert torch.equal(O.dimension_maxima(h), torch.tensor([2.0, 5.0, 0.5]))
    v, i = O.top_dimensions(O.dimension_maxima(h), 2)
    assert i.tolist() == [1, 0] and v.tolist() == [5.0, 2.0]
    with pytest.raises(ValueError):
        O.top_dimensions(torch.ones(3), 4)


def test_log2_histogram_known_counts():
    edges, counts = O.log2_histogram(torch.tensor([0.0, 0.5, 1.0, 1.9, 2.0, 3.99, 100.0]))
    assert edges == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]
    assert counts == [2, 2, 2, 0, 0, 0, 0, 1]
    assert sum(counts) == 7
    assert O.log2_histogram(torch.tensor([0.2, 0.9]))[1] == [2]          # everything below 1
    e, c = O.log2_histogram(torch.rand(1000) * 5000)
    assert sum(c) == 1000 and e[-1] > 4999
    with pytest.raises(ValueError):
        O.log2_histogram(torch.tensor([-1.0]))
    with pytest.raises(ValueError):
        O.log2_histogram(torch.tensor([]))
    with pytest.raises(ValueError):
        O.log2_histogram(torch.tensor([5.0]), edges=[0.0, 1.0, 2.0])


def test_octave_labels_median_bin_and_empty_octaves_known_values():
    assert O.octave_labels([0.0, 1.0, 2.0, 1024.0, 2048.0, 32768.0]) == ["0-1", "1-2", "2-1k", "1k-2k", "2k-32k"]
    assert O.median_bin([0, 3, 1, 1]) == 1 and O.median_bin([1, 1, 1, 1]) == 1 and O.median_bin([0, 0, 5]) == 2
    edges = [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    assert O.empty_octaves_below_top(edges, [4, 2, 0, 0, 0, 1]) == 3          # 4-8, 8-16, 16-32 empty
    assert O.empty_octaves_below_top(edges, [4, 2, 1, 0, 0, 0]) == 0          # neighbours
    assert O.empty_octaves_below_top(edges, [0, 0, 0, 0, 0, 1]) == 0          # one occupied bin
    # the chapter's histogram: one wide bin 128-1024 (three octaves), then its giant at 1024-4096
    chapter = [0.0, 1, 2, 4, 8, 16, 32, 64, 128, 1024, 4096]
    assert O.empty_octaves_below_top(chapter, [254, 283, 226, 93, 18, 9, 7, 5, 0, 1]) == 3
    with pytest.raises(ValueError):
        O.median_bin([0, 0])
    with pytest.raises(ValueError):
        O.empty_octaves_below_top(edges, [1, 2])


def test_dissect_input_finds_the_peak_and_counts_tokens_above_the_bar():
    x = torch.full((6, 4), 0.5)
    x[:, 0] = torch.tensor([1.0, -2.0, 0.5, 3.0, 0.1, 0.2])
    x[2, 3] = -40.0                                         # the peak: token 2, dimension 3
    x[4, 3] = 6.0
    d = O.dissect_input(x)
    assert (d["peak"], d["dim"], d["token"], d["tokens"]) == (40.0, 3, 2, 6)
    assert d["median"] == 0.5
    # the median dimension's max is 0.5 (dims 1 and 2) or 3 (dim 0): median of [3, .5, .5, 40] is .5
    assert d["above"] == 2                                  # |x_3| > 5 on tokens 2 and 4 only
    assert O.dissect_input(x, bar=100)["above"] == 0
    with pytest.raises(ValueError):
        O.dissect_input(torch.ones(3))


def test_levels_used_and_per_dimension():
    codes = torch.tensor([[0, 1, 5], [0, -1, 5], [0, 1, 6]], dtype=torch.int8)
    assert O.levels_used(codes) == 5                                      # -1 0 1 5 6
    assert O.levels_per_dimension(codes).tolist() == [1, 2, 2]
    with pytest.raises(ValueError):
        O.levels_used(torch.tensor([]))


def test_one_outlier_dimension_collapses_levels_and_excluding_it_restores_them():
    torch.manual_seed(1)
    h = torch.randn(64, 16)
    h[:, 3] *= 1000                                          # one outlier feature
    codes, scale = absmax_quantize(h, 8)
    per_dim = O.levels_per_dimension(codes)
    assert per_dim[torch.arange(16) != 3].max() <= 3        # ordinary dims crushed to a few levels
    r = O.exclude_top_dimensions(h, 1)
    assert r["excluded"].tolist() == [3]
    assert torch.isclose(r["scale"], torch.cat([h[:, :3], h[:, 4:]], 1).abs().max() / 127)
    assert scale / r["scale"] > 300
    assert (r["codes"][:, 3] == 0).all()
    assert O.levels_per_dimension(r["codes"])[0] > 20
    assert torch.equal(O.exclude_top_dimensions(h, 0)["codes"], codes)
    with pytest.raises(ValueError):
        O.exclude_top_dimensions(h, 16)


# --------------------------------------------------------------------------- INT8 matmuls


def test_errors_known_values():
    exact = torch.tensor([[3.0, 4.0], [100.0, 0.0]])
    approx = torch.tensor([[3.0, 4.0], [100.0, 0.0]])
    approx[0, 0] += 5.0                                      # token 0 off by its whole norm
    assert math.isclose(M.token_error(approx, exact), 0.5)   # (1 + 0) / 2
    with pytest.raises(ValueError):
        M.token_error(torch.zeros(2, 2), torch.zeros(2, 2))
    with pytest.raises(ValueError):
        M.token_error(torch.ones(2, 2), torch.zeros(2, 2))


def test_int8_matmul_is_exact_on_representable_inputs():
    torch.manual_seed(2)
    qx = torch.randint(-127, 128, (5, 8)).double()
    qw = torch.randint(-127, 128, (4, 8)).double()
    qx[0, 0], qw[0, 0] = 127, 127                            # pin the absmax so the scale is exact
    x, w = (qx * 0.5).float(), (qw * 0.25).float()
    exact = x.double() @ w.double().T
    assert torch.equal(M.int8_matmul(x, w).double(), exact.float().double())
    with pytest.raises(ValueError):
        M.int8_matmul(x, w, x_per="row")
    with pytest.raises(ValueError):
        M.int8_matmul(x, w.T)


def test_per_token_scales_rescue_a_token_outlier():
    torch.manual_seed(3)
    x, w = torch.randn(32, 64), torch.randn(48, 64) * 0.05
    x[0] *= 2000                                             # one huge token
    y = x.double() @ w.double().T
    one = M.token_error(M.int8_matmul(x, w), y)
    per_token = M.token_error(M.int8_matmul(x, w, "token", "channel"), y)
    assert one > 0.5 and per_token < 0.02


def test_llm_int8_limits():
    torch.manual_seed(4)
    x, w = torch.randn(16, 32), torch.randn(24, 32)
    x[:, 5] *= 50                                            # one outlier feature
    y = x.double() @ w.double().T
    high, dims = M.llm_int8_matmul(x, w, threshold=1e6)      # nothing is an outlier: plain vector-wise INT8
    assert dims.numel() == 0
    assert torch.allclose(high, M.int8_matmul(x, w, "token", "channel"))
    low, dims = M.llm_int8_matmul(x, w, threshold=1e-9)      # everything is: full precision
    assert dims.numel() == 32 and torch.allclose(low.double(), y, rtol=1e-5, atol=1e-4)
    mid, dims = M.llm_int8_matmul(x, w, threshold=20.0)
    assert dims.tolist() == [5]
    assert M.token_error(mid, y) < M.token_error(high, y) / 3
    with pytest.raises(ValueError):
        M.llm_int8_matmul(x, w, threshold=0.0)


def test_smoothquant_migration_is_an_identity_and_flattens_activations():
    torch.manual_seed(5)
    x, w = torch.randn(16, 32), torch.randn(24, 32)
    x[:, 7] *= 100
    s = M.smooth_scales(O.dimension_maxima(x), w, alpha=0.5)
    assert torch.allclose((x.double() / s) @ (w.double() * s).T, x.double() @ w.double().T, atol=1e-8)
    s1 = M.smooth_scales(O.dimension_maxima(x), w, alpha=1.0)
    assert torch.allclose(O.dimension_maxima(x.double() / s1), torch.ones(32, dtype=torch.float64))
    y = x.double() @ w.double().T
    assert M.token_error(M.smoothquant_matmul(x, w, 0.5), y) < M.token_error(M.int8_matmul(x, w), y) / 2
    with pytest.raises(ValueError):
        M.smooth_scales(O.dimension_maxima(x), w, alpha=1.5)
    with pytest.raises(ValueError):
        M.smooth_scales(torch.ones(3), w)


def test_weight_only_error_is_small():
    torch.manual_seed(6)
    x, w = torch.randn(8, 64), torch.randn(16, 64)
    assert M.token_error(M.weight_only_matmul(x, w), x.double() @ w.double().T) < 0.01


# --------------------------------------------------------------------------- whole models


def test_emulated_linears_replace_and_restore(tiny):
    model, ids = tiny
    with torch.inference_mode():
        before = model(ids).logits
        with M.emulated_linears(model, "weight-only INT8") as n:
            assert n == 15
            during = model(ids).logits
        after = model(ids).logits
    assert torch.equal(before, after)                        # the layers' own forward is back
    assert not torch.equal(before, during)
    assert torch.allclose(before, during, atol=0.05 * before.abs().max().item())
    with pytest.raises(ValueError):
        with M.emulated_linears(model, "int3"):
            pass


def test_greedy_agreement_with_itself_and_real_kernel(tiny):
    model, ids = tiny
    from helpers.s01_kv_cache import generate_cached
    prompt = ids[:, :4]
    ref = generate_cached(model, prompt, 5)                  # the model's own greedy continuation
    ref_lp = M.teacher_forced_logprobs(model, prompt, ref)
    assert ref_lp.shape == (5, 97) and torch.equal(ref_lp.argmax(-1), ref[0])   # it picks what it wrote
    assert M.greedy_agreement(model, model, prompt, ref) == 1.0
    assert M.greedy_agreement(ref_lp, model, prompt, ref) == 1.0
    other = make_tiny_llama(seed=1, **TINY_OUTLIERS)         # another random model picks other tokens
    assert M.greedy_agreement(ref_lp, other, prompt, ref) < 1.0
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"]
    q = M.quantize_linears_dynamic(model, names)
    assert all(isinstance(m, torch.nn.Linear) for n, m in model.named_modules() if n in names)  # original intact
    kinds = {type(q.get_submodule(n)).__name__ for n in names}
    assert kinds == {"Linear"} and not isinstance(q.get_submodule(names[0]), torch.nn.Linear)
    assert isinstance(q.lm_head, torch.nn.Linear)
    with torch.inference_mode():
        a, b = model(ids).logits, q(ids).logits
    assert torch.allclose(a, b, atol=0.1 * a.abs().max().item())
    with pytest.raises(ValueError):
        M.quantize_linears_dynamic(q, names[:1])              # already quantized


def test_integer_matmul_exact_in_both_paths():
    torch.manual_seed(7)
    small_x = torch.randint(-3, 4, (6, 50)).double()              # bound far below 2**24: float32 path
    small_w = torch.randint(-127, 128, (5, 50)).double()
    big_x = torch.full((2, 2000), 127.0, dtype=torch.float64)      # bound above 2**24: float64 path
    big_x[0, 0] = 126.0
    big_w = torch.full((3, 2000), -128.0, dtype=torch.float64)
    for qx, qw in ((small_x, small_w), (big_x, big_w)):
        exact = (qx.long() @ qw.long().T).double()
        assert torch.equal(M.integer_matmul(qx, qw), exact)


def test_attention_to_first_token_known_value_and_restores(tiny):
    import copy
    model, ids = tiny
    impl = model.config._attn_implementation
    a = O.attention_to_first_token(model, ids)
    assert a.shape == (2,) and ((a > 0) & (a < 1)).all()
    assert model.config._attn_implementation == impl
    flat = copy.deepcopy(model)                  # zero queries: every score equal, attention uniform
    for layer in flat.model.layers:
        layer.self_attn.q_proj.weight.data.zero_()
    uniform = (1.0 / torch.arange(2, ids.shape[1] + 1, dtype=torch.float64)).mean()
    assert torch.allclose(O.attention_to_first_token(flat, ids).double(), uniform.expand(2), atol=1e-6)
    with pytest.raises(ValueError):
        O.attention_to_first_token(model, ids[:, :1])


def test_dynamic_int8_linear_reports_its_activation_bits():
    lin = torch.nn.Sequential(torch.nn.Linear(8, 4))
    q = M.quantize_linears_dynamic(lin, ["0"])
    expected = 7 if torch.backends.quantized.engine in ("x86", "fbgemm") else 8
    assert M.dynamic_activation_bits(q[0]) == expected
    with pytest.raises(ValueError):
        M.dynamic_activation_bits(lin[0])
