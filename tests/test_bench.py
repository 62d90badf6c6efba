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


def test_stolen_percent_without_time_passing_is_nan():
    assert math.isnan(bench.stolen_percent((1, 100), (1, 100)))


def test_cpu_ticks_reads_steal_within_all_ticks():
    stolen, total = bench.cpu_ticks()
    assert 0 <= stolen <= total and total > 0


def _row(name, seconds=40.0, peak=1500.0, error=""):
    return dict(name=name, seconds=seconds, peak=peak, error=error)


def test_a_notebook_over_4_gb_is_marked_in_the_table_and_named_at_the_end():
    assert bench.BUDGET_PEAK_MIB == pytest.approx(3814.7, abs=0.1)
    under, over = _row("03-cache-size", peak=3814.0), _row("09-distillation", peak=6871.0)
    assert bench.flags(under) == "" and "MEMORY over 4 GB" in bench.flags(over) and "6,871 MiB" in bench.flags(over)
    assert bench.over_memory([under]) == ""
    line = bench.over_memory([under, over])
    assert "09-distillation (6,871 MiB)" in line and "03-cache-size" not in line and line.endswith(".")


def test_every_budget_a_notebook_passes_is_in_its_note():
    note = bench.flags(_row("09", seconds=95.0, peak=5000.0, error="AssertionError: claim"))
    assert note.startswith("FAILED AssertionError") and "over 90 s" in note and "MEMORY over 4 GB" in note
    assert bench.flags(_row("01", peak=float("nan"))) == ""        # no reading: no mark
    assert "2 notebooks" in bench.over_memory([_row("a", peak=4000.0), _row("b", peak=9000.0)])
