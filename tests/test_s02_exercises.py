"""Section 2's exercise checkers against the section's own helpers: 2.1's floor is the roofline of a decode step,
2.2's letter follows the gap's timings, 2.3's prompt length is where the section's prefill intensity meets the
ridge, 2.4's batch of one is 2.1's floor."""
import math

from helpers import s01_attention as attention, s02_roofline as roofline
from helpers.s01_exercises import SMOLLM2
from helpers.s02_exercises import EXERCISES, FLOOR_EXAMPLE, RIDGE_EXAMPLE, decode_floor_ms


def test_the_floor_is_the_roofline_and_a_batch_of_one_is_the_floor():
    f = FLOOR_EXAMPLE
    floor = 1e3 * roofline.roofline_seconds(f["weights_bytes"] + f["cache_bytes"], f["bandwidth"])
    assert EXERCISES.verdict("2.1", floor, **f).right
    tiny_flops = 1          # memory-bound: the arithmetic takes no time worth counting
    assert math.isclose(decode_floor_ms(1, f["weights_bytes"], f["cache_bytes"], tiny_flops, 100.0, f["bandwidth"]),
                        floor)
    # enough users turn the step compute-bound: the floor then grows in proportion to the batch
    big = [decode_floor_ms(b, f["weights_bytes"], f["cache_bytes"], 3e9, 100.0, f["bandwidth"]) for b in (4096, 8192)]
    assert math.isclose(big[1], 2 * big[0])


def test_the_ridge_length_is_where_the_sections_prefill_meets_the_ridge():
    f = RIDGE_EXAMPLE
    dims = attention.Dims(**SMOLLM2)
    assert f["weight_macs"] == dims.weight_macs_per_token
    ridge = f["peak"] / f["bandwidth"]
    first = next(p for p in range(1, 10_000)
                 if roofline.arithmetic_intensity(roofline.prefill_flops(dims, p), f["weights_bytes"]) >= ridge)
    assert EXERCISES.verdict("2.3", first, **f).right          # attention included, whole tokens: within a token
    assert EXERCISES.verdict("2.3", 2 * ridge, **f).right      # two FLOPs per four-byte weight, by hand


def test_the_letter_of_2_2_follows_the_run():
    e = EXERCISES["2.2"].example                       # 24.5 ms roofline, 13.5 ms of kernels' shortfall, 24 ms else
    assert EXERCISES.verdict("2.2", "b", **e).right
    assert EXERCISES.verdict("2.2", "a", **{**e, "matmuls_ms": 50.0}).right          # 25.5 ms shortfall, 12 ms else
    assert EXERCISES.verdict("2.2", "c", **{**e, "step_ms": 1.25 * e["roofline_ms"]}).right    # at the limit: c
    assert not EXERCISES.verdict("2.2", "c", **{**e, "step_ms": 1.26 * e["roofline_ms"]}).right
