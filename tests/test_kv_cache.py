import pytest
import torch

from conftest import TINY
from helpers import s01_kv_cache as kv_cache


def prompt(n=7, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, TINY["vocab_size"], (1, n), generator=g)


def test_cached_and_naive_emit_identical_tokens(tiny_llama):
    p = prompt()
    a = kv_cache.generate_naive(tiny_llama, p, 20)
    b = kv_cache.generate_cached(tiny_llama, p, 20)
    assert a.shape == (1, 20)
    assert torch.equal(a, b)


def test_matches_transformers_generate(tiny_llama):
    p = prompt(5, seed=3)
    ref = tiny_llama.generate(p, attention_mask=torch.ones_like(p), max_new_tokens=12, min_new_tokens=12,
                              do_sample=False, pad_token_id=0, eos_token_id=None)
    assert torch.equal(ref[:, p.shape[1]:], kv_cache.generate_cached(tiny_llama, p, 12))


def test_timed_generate_same_tokens_and_one_time_per_step(tiny_llama):
    p = prompt()
    for cached in (True, False):
        toks, times = kv_cache.timed_generate(tiny_llama, p, 9, cached)
        assert torch.equal(toks, kv_cache.generate_cached(tiny_llama, p, 9))
        assert len(times) == 9 and all(t > 0 for t in times)


def test_adapter_shapes_bytes_and_crop(tiny_llama):
    cfg = tiny_llama.config
    p = prompt(11)
    _, cache = kv_cache.prefill(tiny_llama, p)
    assert kv_cache.cache_length(cache) == 11
    assert kv_cache.num_cache_layers(cache) == cfg.num_hidden_layers
    k, v = kv_cache.layer_kv(cache, 0)
    assert k.shape == v.shape == (1, cfg.num_key_value_heads, 11, cfg.head_dim)
    # 2 (K and V) x layers x kv heads x head dim x 4 bytes, per token
    assert kv_cache.cache_nbytes(cache) == 11 * 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 4
    kv_cache.crop_cache(cache, 4)
    assert kv_cache.cache_length(cache) == 4
    assert kv_cache.layer_kv(cache, 1)[0].shape[2] == 4


def test_decode_step_extends_cache_by_one(tiny_llama):
    nxt, cache = kv_cache.prefill(tiny_llama, prompt(6))
    _, cache = kv_cache.decode_step(tiny_llama, nxt, cache)
    assert kv_cache.cache_length(cache) == 7


def test_cached_logits_match_uncached(tiny_llama):
    p = prompt(10)
    full, _ = kv_cache.forward(tiny_llama, p)
    _, cache = kv_cache.forward(tiny_llama, p[:, :9], cache=kv_cache.new_cache(tiny_llama))
    last, _ = kv_cache.forward(tiny_llama, p[:, 9:], cache=cache)
    assert torch.allclose(full[:, -1], last[:, -1], atol=1e-5)


@pytest.mark.parametrize("bad", [0, -3, 2.5])
def test_bad_lengths_raise_one_sentence(tiny_llama, bad):
    with pytest.raises(ValueError, match="positive whole number"):
        kv_cache.generate_cached(tiny_llama, prompt(), bad)
    with pytest.raises(ValueError):
        kv_cache.crop_cache(kv_cache.new_cache(tiny_llama), -1)


def test_step_line_reads_a_straight_line_and_ignores_step_zero():
    steps = [100.0] + [1.0 + 0.1 * i for i in range(1, 11)]        # step 0 (a prefill) is far off the line
    line = kv_cache.step_line(steps)
    assert line.first == pytest.approx(1.1) and line.last == pytest.approx(2.0)
    assert line.per_step == pytest.approx(0.1) and line.growth == pytest.approx(2.0 / 1.1)
    flat = kv_cache.step_line([5.0, 2.0, 2.0, 2.0])
    assert flat.growth == pytest.approx(1.0) and flat.per_step == pytest.approx(0.0)
    with pytest.raises(ValueError, match="at least 3 steps"):
        kv_cache.step_line([1.0, 2.0])


def test_log_log_slope_recovers_the_exponent():
    n = [256, 512, 1024, 2048]
    assert kv_cache.log_log_slope(n, [k ** 2 * 3e-9 for k in n]) == pytest.approx(2.0)
    assert kv_cache.log_log_slope(n, [k * 1e-6 for k in n]) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        kv_cache.log_log_slope([1], [1.0])


def test_timed_runs_time_both_loops_in_turn_and_refuse_other_tokens(tiny_llama):
    p = prompt()
    expected = kv_cache.generate_cached(tiny_llama, p, 9)
    naive, cached = kv_cache.timed_runs(tiny_llama, p, 9, expected, repeats=2)
    assert naive.shape == cached.shape == (2, 9) and (naive > 0).all() and (cached > 0).all()
    pooled = kv_cache.pool_runs((naive, cached), (naive[:1], cached[:1]))
    assert pooled[0].shape == pooled[1].shape == (3, 9) and torch.equal(pooled[0][2], naive[0])
    with pytest.raises(AssertionError, match="other tokens"):
        kv_cache.timed_runs(tiny_llama, p, 9, expected + 1, repeats=1)


def test_fastest_steps_take_the_least_disturbed_run_of_every_step():
    runs = torch.tensor([[1.0, 5.0, 3.0], [2.0, 4.0, 3.5]])
    assert torch.equal(kv_cache.fastest_steps(runs), torch.tensor([1.0, 4.0, 3.0]))


def _runs(steps):
    return torch.tensor([steps, [s * 1.5 for s in steps]])      # a second, slower run of every step


def test_timing_checks_hold_on_a_growing_naive_loop_and_a_flat_cached_one():
    n = 48
    naive = _runs([0.1 + 0.01 * i for i in range(n)])              # 1 ms more per token of context
    cached = _runs([0.05] + [0.02 + 0.0001 * i for i in range(1, n)])
    checks = kv_cache.timing_checks(naive, cached)
    assert {name: c[0] for name, c in checks.items()} == {"speed-up": True, "naive": True, "cached": True}
    s = (naive[0].cumsum(0) / cached[0].cumsum(0))
    assert checks["speed-up"][3] == dict(s8=pytest.approx(s[7].item()), s_n=pytest.approx(s[-1].item()), n=n)
    assert checks["naive"][3]["growth"] == pytest.approx((0.1 + 0.47) / 0.11)
    assert checks["cached"][3] == dict(naive_ms=pytest.approx(10.0), cached_ms=pytest.approx(0.1))


def test_timing_checks_fail_where_the_cache_buys_nothing():
    flat = _runs([0.02] * 48)
    checks = kv_cache.timing_checks(flat, flat)
    assert not any(c[0] for c in checks.values())
    # a cached loop whose steps grow as fast as the naive loop's: its per-token cost is no smaller
    growing = _runs([0.1 + 0.01 * i for i in range(48)])
    assert not kv_cache.timing_checks(growing, growing)["cached"][0]
    with pytest.raises(ValueError, match="8 or more steps"):
        kv_cache.timing_checks(flat[:, :5], flat[:, :5])


def test_the_memory_watchers_count_the_same_tokens_and_cache_as_the_loop(tiny_llama):
    p = prompt(12)
    n = 10
    full = kv_cache.cached_loop_peak(tiny_llama, p, n, "all")
    ends = kv_cache.cached_loop_peak(tiny_llama, p, n, "ends")
    assert torch.equal(full["tokens"], kv_cache.generate_cached(tiny_llama, p, n)) and full["last"] is None
    assert torch.equal(ends["tokens"], full["tokens"])
    _, cache = kv_cache.prefill(tiny_llama, torch.cat([p, full["tokens"][:, :-1]], dim=1))
    assert full["cache"] == ends["cache"] == kv_cache.cache_nbytes(cache)
    assert ends["last"] >= ends["cache"] and 0 < ends["peak"] <= full["peak"]
    # the shortcut: stand-in tokens fill the cache to the same length, and the last two steps need the same bytes
    skip = kv_cache.cached_loop_peak(tiny_llama, p, n, "ends", skip_with=prompt(20, seed=5))
    assert skip["tokens"].shape == (1, n) and skip["cache"] == ends["cache"]
    assert skip["last"] == pytest.approx(ends["last"], rel=0.05)
    assert kv_cache.naive_tail_peak(tiny_llama, p, full["tokens"][:, :n - 2]) > 0
    with pytest.raises(ValueError, match="at least 4 tokens"):
        kv_cache.cached_loop_peak(tiny_llama, p, 3, "ends")
    with pytest.raises(ValueError):
        kv_cache.cached_loop_peak(tiny_llama, p, n, "all", skip_with=prompt(20))
