"""Section 1's exercise checkers against the section's own helpers: 1.4's reference is notebook 1's cached step
for one new token and its uncached step for a whole chunk against an empty cache; 1.1 and 1.3 answer what the
MAC counts of :mod:`helpers.s01_attention` say."""
import torch

from helpers import s01_attention as attention
from helpers.s01_exercises import EXERCISES, SMOLLM2, chunk_step


def test_a_chunk_of_one_is_the_cached_step_and_a_chunk_from_empty_the_uncached_one():
    torch.manual_seed(0)
    d = 16
    wq, wk, wv = (torch.randn(d, d) / d ** 0.5 for _ in range(3))
    x = torch.randn(9, d)
    k, v = x[:-1] @ wk, x[:-1] @ wv
    assert torch.allclose(chunk_step(x[-1:], k, v, wq, wk, wv), attention.step_cached(x[-1:], k, v, wq, wk, wv)[0],
                          atol=1e-6)
    empty = torch.empty(0, d)
    whole = chunk_step(x, empty, empty, wq, wk, wv)
    assert torch.allclose(whole[-1:], attention.step_uncached(x, wq, wk, wv), atol=1e-6)
    # a chunk split in two against the cache gives the same outputs as the whole chunk at once
    first = chunk_step(x[:4], empty, empty, wq, wk, wv)
    rest = chunk_step(x[4:], x[:4] @ wk, x[:4] @ wv, wq, wk, wv)
    assert torch.allclose(torch.cat([first, rest]), whole, atol=1e-6)


def test_the_mac_exercises_agree_with_the_section():
    dims = attention.Dims(**SMOLLM2)
    assert EXERCISES.verdict("1.1", dims.weight_macs_per_token, **SMOLLM2).right
    assert EXERCISES.verdict("1.3", lambda d, n, cached: attention.macs_step(d, n, cached)).right
    # an uncached step at context n does the work of n cached steps at contexts 1 to n: the triangle, counted twice
    assert attention.macs_step(dims, 48, False) == sum(attention.macs_step(dims, n, True) for n in range(1, 49))
