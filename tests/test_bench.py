"""scripts/bench.py's arithmetic: the share of CPU time a shared machine's host took away."""
import importlib.util
import math
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("bench", Path(__file__).resolve().parents[1] / "scripts" / "bench.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_stolen_percent_is_the_share_of_new_ticks():
    assert bench.stolen_percent((10, 100), (30, 300)) == pytest.approx(10.0)
    assert bench.stolen_percent((5, 100), (5, 200)) == 0.0


@pytest.mark.parametrize("before, after", [(None, (1, 2)), ((1, 2), None), ((1, 100), (1, 100))])
def test_stolen_percent_without_a_reading_is_nan(before, after):
    assert math.isnan(bench.stolen_percent(before, after))


def test_cpu_ticks_reads_steal_within_all_ticks():
    ticks = bench.cpu_ticks()
    if ticks is None:
        pytest.skip("no /proc/stat here")
    stolen, total = ticks
    assert 0 <= stolen <= total and total > 0
