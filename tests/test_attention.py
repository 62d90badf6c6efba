import pytest
import torch

from helpers import s01_attention as attention, s01_kv_cache as kv_cache
from helpers.infra import chapter as ch


def test_cached_step_equals_uncached_step():
    torch.manual_seed(0)
    d = 8
    wq, wk, wv = (torch.randn(d, d) for _ in range(3))
    x = torch.randn(10, d)
    out_c, K, V = attention.step_cached(x[-1:], x[:-1] @ wk, x[:-1] @ wv, wq, wk, wv)
    assert torch.allclose(attention.step_uncached(x, wq, wk, wv), out_c, atol=1e-5)
    assert K.shape == (10, d) and torch.equal(K[-1:], x[-1:] @ wk)


def test_score_matrix_bytes_chapter_values():
    n = 4096                                                  # the chapter's context for its "67 MB" and "16 KB"
    assert (attention.score_matrix_bytes(n, cached=False), attention.score_matrix_bytes(n, cached=True)) == \
        ch.S1_SCORE_MATRIX_BYTES
    with pytest.raises(ValueError):
        attention.score_matrix_bytes(0, cached=True)


TINY = attention.Dims(layers=2, hidden=4, heads=2, kv_heads=1, head_dim=2, mlp=8, vocab=10)


def test_mac_counts_hand_computed():
    # per token: layers * (hidden*head_dim*(2*heads + 2*kv_heads) + 3*hidden*mlp) + hidden*vocab
    #          = 2 * (4*2*6 + 3*4*8) + 40 = 2 * (48 + 96) + 40 = 328
    assert TINY.weight_macs_per_token == 328
    # per (query, key) pair: layers * heads * 2 * head_dim = 2*2*2*2 = 16
    assert TINY.attention_macs_per_pair == 16
    assert attention.macs_step(TINY, 3, cached=True) == 328 + 3 * 16
    assert attention.macs_step(TINY, 3, cached=False) == 3 * 328 + 6 * 16
    # T = 2 from cold start: contexts 1 and 2
    assert attention.macs_generation(TINY, 2, cached=True) == (328 + 16) + (328 + 32)
    assert attention.macs_generation(TINY, 2, cached=False) == (328 + 16) + (2 * 328 + 3 * 16)


def test_cached_linear_uncached_quadratic_ratio_grows():
    c = [attention.macs_step(TINY, n, True) for n in range(1, 6)]
    assert len({b - a for a, b in zip(c, c[1:])}) == 1                       # linear
    u = [attention.macs_step(TINY, n, False) for n in range(1, 7)]
    d1 = [b - a for a, b in zip(u, u[1:])]
    assert len({b - a for a, b in zip(d1, d1[1:])}) == 1                     # quadratic
    ratios = [attention.macs_generation(TINY, T, False) / attention.macs_generation(TINY, T, True)
              for T in (4, 16, 64, 256)]
    assert all(b > a for a, b in zip(ratios, ratios[1:]))


def test_dims_from_config():
    d = attention.Dims.from_config(ch.qwen25_config())       # head_dim is not in the config: hidden / heads
    q = ch.QWEN25
    assert (d.head_dim, d.heads, d.kv_heads, d.layers, d.hidden, d.mlp, d.vocab) == \
        (q["head_dim"], q["query_heads"], q["kv_heads"], q["layers"], q["hidden"], q["mlp"], q["vocab"])


def test_counted_flops_match_the_mac_count_on_a_real_model(tiny_llama):
    d = attention.Dims.from_config(tiny_llama.config)
    ids = torch.randint(0, tiny_llama.config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(0))
    _, cache = kv_cache.forward(tiny_llama, ids[:, :8], cache=kv_cache.new_cache(tiny_llama))
    step = attention.counted_flops(tiny_llama, ids[:, 8:], cache)
    assert step.total == 2 * attention.macs_step(d, 9, cached=True)
    whole = attention.counted_flops(tiny_llama, ids)          # eager attention computes the full square, masked
    assert whole.weights == 2 * 9 * d.weight_macs_per_token
    assert whole.attention == 2 * 9 * 9 * d.attention_macs_per_pair

