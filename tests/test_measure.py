import pytest
import torch

from helpers import measure


def test_time_it_median_and_repeats():
    calls = []
    t = measure.time_it(lambda: calls.append(1), repeats=5, warmup=2)
    assert len(calls) == 7 and len(t.times) == 5 and min(t.times) <= t.median <= max(t.times)
    with pytest.raises(ValueError):
        measure.time_it(lambda: None, repeats=0)


@pytest.mark.skipif(not measure.cpu_peak_supported(), reason="needs Linux /proc/self/clear_refs")
def test_peak_memory_sees_a_temporary_allocation():
    def work():
        x = torch.ones(50_000_000)          # 200 MB, touched, then freed
        return float(x[::1000].sum())
    peak = measure.peak_memory(work, device="cpu").extra_bytes
    assert 0.9 * 200e6 < peak < 1.3 * 200e6


@pytest.mark.skipif(not measure.cpu_peak_supported(), reason="needs Linux /proc/self/clear_refs")
def test_peak_memory_does_not_count_what_was_already_resident():
    keep = torch.ones(50_000_000)
    peak = measure.peak_memory(lambda: float(keep[::1000].sum()), device="cpu").extra_bytes
    assert peak < 20e6
