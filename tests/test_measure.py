import pytest
import torch

from helpers.infra import measure


def test_time_it_median_and_repeats():
    calls = []
    t = measure.time_it(lambda: calls.append(1), repeats=5, warmup=2)
    assert len(calls) == 7 and len(t.times) == 5 and min(t.times) <= t.median <= max(t.times)
    with pytest.raises(ValueError):
        measure.time_it(lambda: None, repeats=0)


def test_peak_memory_counts_exact_tensor_bytes():
    def work():
        a = torch.ones(1000)            # 4,000 bytes
        b = torch.ones(500)             # 2,000 more: 6,000 alive at once
        del a, b
        c = torch.ones(1200)            # 4,800 after both died
        return c.sum()
    assert measure.peak_memory(work, device="cpu").extra_bytes == 6000


def test_peak_memory_views_count_once_and_temporaries_are_freed():
    def work():
        x = torch.ones(1000)            # 4,000
        v = x[::2]                      # a view: no new storage
        for _ in range(5):
            y = x * 2                   # 4,000 each, freed when y is rebound (after the next is made)
        return v.sum() + y.sum()
    assert measure.peak_memory(work, device="cpu").extra_bytes == 4000 + 2 * 4000   # x and two y at once


def test_peak_memory_does_not_count_what_existed_before():
    keep = torch.ones(1_000_000)
    assert measure.peak_memory(lambda: keep.sum(), device="cpu").extra_bytes == 4


def test_peak_memory_sees_a_growing_kv_cache(tiny_llama):
    from helpers import s01_kv_cache as kv_cache
    ids = torch.randint(0, 97, (1, 10))
    # 2 layers x K,V x 2 kv heads x 16 dims x 4 bytes = 512 bytes per token; 10 + 9 tokens at the end
    store = {}
    def run():
        store["toks"] = kv_cache.generate_cached(tiny_llama, ids, 10)
    peak = measure.peak_memory(run, device="cpu").extra_bytes
    assert peak >= 19 * 512


def test_pooled_timings_keep_every_repeat():
    from helpers.infra.measure import Timing
    a, b = Timing(2.0, [3.0, 2.0, 1.0]), Timing(5.0, [5.0, 0.5])
    p = a.pooled(b)
    assert (p.times, p.median, p.min) == ([3.0, 2.0, 1.0, 5.0, 0.5], 2.0, 0.5)


def test_interleaved_medians_order_and_medians(monkeypatch):
    clock = {"t": 0.0}
    monkeypatch.setattr(measure, "now", lambda: clock["t"])
    calls = []
    durations = {"a": iter([9.0, 1.0, 2.0, 3.0]), "b": iter([9.0, 10.0, 30.0, 20.0])}

    def make(k):
        def fn():
            calls.append(k)
            clock["t"] += next(durations[k])
        return fn

    out = measure.interleaved_medians({"a": make("a"), "b": make("b")}, repeats=3, warmup=1)
    assert calls == ["a", "b"] * 4                      # warm-up round, then 3 interleaved rounds
    assert out["a"].times == [1.0, 2.0, 3.0] and out["a"].median == 2.0
    assert out["b"].times == [10.0, 30.0, 20.0] and out["b"].median == 20.0


@pytest.mark.parametrize("kw", [dict(repeats=0), dict(warmup=-1)])
def test_interleaved_medians_rejects_bad_counts(kw):
    with pytest.raises(ValueError):
        measure.interleaved_medians({0: lambda: None}, **kw)


def test_interleaved_medians_rejects_no_cases():
    with pytest.raises(ValueError, match="at least one case"):
        measure.interleaved_medians({})
