"""Batching: exact outputs under ragged batching, the schedulers' known timelines, the workload, the knee."""
import statistics

import numpy as np
import pytest
import torch
from conftest import make_tiny_llama

from helpers import s04_batching as bt
from helpers import s04_scheduling as sc
from helpers import s04_servers as sv
from helpers import s04_slots as sl
from helpers import s04_solo as so
from helpers import s01_kv_cache as kc
from helpers.infra import chapter


@pytest.fixture(scope="module")
def tiny():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)          # a tiny model is all overhead: one thread is fastest, and immune to busy CPUs
    yield make_tiny_llama(vocab_size=256, max_position_embeddings=512)     # token ids 0..255 in the prompts below
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def ragged():
    g = torch.Generator().manual_seed(1)
    sizes = [7, 1, 15, 3, 11, 2, 19, 5, 9, 4]
    prompts = [torch.randint(0, 256, (1, p), generator=g) for p in sizes]
    lengths = [6, 1, 14, 3, 9, 20, 2, 1, 12, 5]
    return prompts, lengths


def alone(model, prompt, n_new):
    """What one request produces alone: prefill, then batch-1 decode steps (the reference for exactness)."""
    return kc.generate_cached(model, prompt, n_new)[0].tolist()


@pytest.fixture(scope="module")
def solo(tiny, ragged):
    return [alone(tiny, p, n) for p, n in zip(*ragged)]


# --------------------------------------------------------------------------- the real scheduler


@pytest.mark.parametrize("policy", sc.POLICIES)
@pytest.mark.parametrize("slots", [1, 4])
def test_serve_gives_every_request_its_solo_output(tiny, ragged, solo, policy, slots):
    prompts, lengths = ragged
    s = sv.serve(tiny, prompts, lengths, slots, policy)
    for i, n in enumerate(lengths):
        assert s.outputs[i] == solo[i], f"request {i} differs from its solo run"
        assert len(s.outputs[i]) == n


def test_static_pays_padding_continuous_does_not(tiny, ragged, solo):
    prompts, lengths = ragged
    st = sv.serve(tiny, prompts, lengths, 3, "static")
    co = sv.serve(tiny, prompts, lengths, 3, "continuous")
    assert all(st.outputs[i] == co.outputs[i] == solo[i] for i in range(len(lengths)))
    groups = [lengths[i:i + 3] for i in range(0, len(lengths), 3)]
    # the first token of every request comes from its prefill, the rest from batched steps
    assert st.steps == sum(max(g) - 1 for g in groups)
    assert st.padded_steps == sum(max(g) - n for g in groups for n in g)
    assert co.padded_steps == 0
    assert co.steps < st.steps
    # static answers a whole group at once; continuous answers each request when it is done
    for g in range(0, len(lengths), 3):
        assert len({st.release[i] for i in range(g, min(g + 3, len(lengths)))}) == 1
    assert co.release == co.finish


def test_side_by_side_gives_the_same_schedules_as_separate_runs(tiny, ragged, solo):
    prompts, lengths = ragged
    both = sv.serve_side_by_side(tiny, prompts, lengths, 3)
    for policy, s in both.items():
        alone = sv.serve(tiny, prompts, lengths, 3, policy)
        assert s.outputs == alone.outputs and s.steps == alone.steps and s.slot == alone.slot
        assert all(s.outputs[i] == solo[i] for i in range(len(lengths)))
        assert 0 < s.makespan and all(0 <= a <= f <= r <= s.makespan for a, f, r in zip(s.admit, s.finish, s.release))


def test_work_clock_stops_while_waiting():
    ticks = iter([0.0, 1.0, 5.0, 6.5, 7.0])
    c = sv.WorkClock(lambda: next(ticks))
    c.start()      # 0
    c.stop()       # 1: one second of work
    c.start()      # 5: four seconds waiting, not counted
    assert c() == pytest.approx(1.0 + 1.5)   # 6.5
    c.stop()       # 7
    assert c.spent == pytest.approx(3.0)


def _two_rows(tiny, p1, p2):
    b = sl.SlotBatch(tiny)
    first = [b.add(p1), b.add(p2)]
    return b, first


def test_slot_batch_rows_match_solo_and_broken_masks_or_positions_do_not(tiny):
    g = torch.Generator().manual_seed(5)
    p1, p2 = torch.randint(0, 256, (1, 3), generator=g), torch.randint(0, 256, (1, 12), generator=g)
    solo = [alone(tiny, p, 8) for p in (p1, p2)]
    # the short row's logits after one batched step, against its own next step alone
    nxt, cache = kc.prefill(tiny, p1)
    with torch.inference_mode():
        solo_logits, _ = kc.forward(tiny, nxt, cache=cache)

    def run(break_with=None):
        b, first = _two_rows(tiny, p1, p2)
        outs = [[first[0]], [first[1]]]
        logits = None
        for _ in range(7):
            if break_with == "mask":
                b.mask = torch.ones_like(b.mask)               # let the short row attend to its padding
            if break_with == "positions":
                b.length = torch.full_like(b.length, b.width)  # the padded column instead of the true position
            nxt = b.step()
            logits = b.last_logits[0] if logits is None else logits
            outs[0].append(int(nxt[0]))
            outs[1].append(int(nxt[1]))
        return outs, (logits - solo_logits[0, -1]).abs().max().item()

    outs, err = run()
    assert outs == solo and err < 1e-5
    for broken in ("mask", "positions"):
        _, err = run(broken)
        assert err > 1e-3, f"a wrong {broken} should change the short row's logits"


def test_slot_batch_keep_trims_shared_padding(tiny):
    g = torch.Generator().manual_seed(2)
    b, _ = _two_rows(tiny, torch.randint(0, 256, (1, 4), generator=g), torch.randint(0, 256, (1, 10), generator=g))
    assert b.width == 10 and b.real_tokens() == 14
    b.keep([0])                          # drop the long row: 6 columns were padding for the short one
    assert b.width == 4 and b.rows == 1
    assert b.nbytes() == 2 * 2 * (1 * 2 * 4 * 16) * 4   # layers x (K,V) x (rows*kv_heads*tokens*head_dim) x fp32


def test_cache_round_trip(tiny):
    """The slot batch keeps its rows as (K, V) tensors and rebuilds a cache from them: nothing may change."""
    _, cache = kc.prefill(tiny, torch.arange(9)[None])
    kv = kc.cache_to_kv(cache)
    again = kc.cache_to_kv(kc.cache_from_kv(tiny, kv))
    assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(kv, again))


def test_serve_rejects_bad_input(tiny, ragged):
    prompts, lengths = ragged
    with pytest.raises(ValueError, match="slots"):
        sv.serve(tiny, prompts, lengths, 0, "continuous")
    with pytest.raises(ValueError, match="empty"):
        sv.serve(tiny, [], [], 2, "static")
    with pytest.raises(ValueError, match="policy"):
        sv.serve(tiny, prompts, lengths, 2, "greedy")
    with pytest.raises(ValueError, match="one output length per prompt"):
        sv.serve(tiny, prompts, lengths[:-1], 2, "static")


# --------------------------------------------------------------------------- the paper model


def test_simulate_known_timelines():
    unit = lambda n: 1.0   # noqa: E731
    st = sc.simulate([5, 1, 1, 1], 2, "static", unit)
    assert st.makespan == 6 and st.steps == 6 and st.release == [5, 5, 6, 6] and st.padded_steps == 4
    co = sc.simulate([5, 1, 1, 1], 2, "continuous", unit)
    assert co.makespan == 5 and co.steps == 5
    assert co.release == [5, 1, 2, 3] and co.admit == [0, 0, 1, 2] and co.slot == [0, 1, 1, 1]
    r = sc.compare(st, co)
    assert r["throughput_x"] == pytest.approx(6 / 5)
    assert r["mean_latency_x"] == pytest.approx(statistics.fmean([5, 5, 6, 6]) / statistics.fmean([5, 1, 2, 3]))


def test_simulate_step_cost_depends_on_batch():
    cost = lambda n: 1.0 + n   # noqa: E731
    st = sc.simulate([2, 2, 2], 2, "static", cost)            # [2,2] at cost 3, then [2] at cost 2
    assert st.makespan == 2 * 3 + 2 * 2
    co = sc.simulate([1, 3], 2, "continuous", cost)           # 1 step with 2 active, 2 steps with 1
    assert co.makespan == 3 + 2 * 2


def test_static_without_padding_cost_still_holds_the_slots():
    cost = lambda n: float(n)   # noqa: E731
    padded = sc.simulate([3, 1, 2], 2, "static", cost)
    lean = sc.simulate([3, 1, 2], 2, "static", cost, padding_costs=False)
    assert padded.makespan == 3 * 2 + 2 * 1 and lean.makespan == 2 + 1 + 1 + 2 * 1
    assert lean.release[:2] == [4.0, 4.0] and lean.finish[:2] == [4.0, 2.0]   # answered together all the same


def test_simulate_with_arrivals_waits_for_requests():
    unit = lambda n: 1.0   # noqa: E731
    co = sc.simulate([2, 2], 4, "continuous", unit, arrivals=[0.0, 10.0])
    assert co.admit == [0.0, 10.0] and co.release == [2.0, 12.0] and co.latency == [2.0, 2.0]
    st = sc.simulate([2, 2], 4, "static", unit, arrivals=[0.0, 1.0])   # the engine is busy until 2
    assert st.release == [2.0, 4.0] and st.latency == [2.0, 3.0]


def test_simulate_rejects_bad_input():
    unit = lambda n: 1.0   # noqa: E731
    with pytest.raises(ValueError, match="slots"):
        sc.simulate([3, 4], 0, "static", unit)
    with pytest.raises(ValueError, match="empty"):
        sc.simulate([], 8, "continuous", unit)
    with pytest.raises(ValueError, match="arrival"):
        sc.simulate([3, 4], 2, "continuous", unit, arrivals=[1.0, 0.5])


# --------------------------------------------------------------------------- the workload


def test_chapter_lengths_match_the_chapter():
    lengths = sc.chapter_lengths()
    assert len(lengths) == chapter.S4_REQUESTS and statistics.median(lengths) == chapter.S4_MEDIAN
    assert max(lengths) == chapter.S4_LONGEST and sum(lengths) == chapter.S4_TOTAL


def test_seed_shuffles_order_only_and_skew_zero_is_flat():
    a, b = sc.chapter_lengths(seed=0), sc.chapter_lengths(seed=1)
    assert a != b and sorted(a) == sorted(b)
    assert set(sc.chapter_lengths(skew=0.0)) == {chapter.S4_MEDIAN}
    lo, hi = sc.chapter_lengths(skew=0.5), sc.chapter_lengths(skew=1.5)
    assert max(lo) < chapter.S4_LONGEST < max(hi)
    assert statistics.median(lo) == statistics.median(hi) == chapter.S4_MEDIAN


def test_round_keeping_total():
    vals = [0.4, 0.4, 0.4, 1.9, 2.9]
    ints = sc._round_keeping_total(vals)
    assert sum(ints) == round(sum(vals)) == 6 and all(abs(i - v) < 1 for i, v in zip(ints, vals))


def test_percentile_matches_numpy():
    xs = [3.0, 1.0, 7.0, 2.5, 9.0, 4.0, 4.0]
    for q in (0, 50, 90, 95, 100):
        assert sc.percentile(xs, q) == pytest.approx(np.percentile(xs, q))


# --------------------------------------------------------------------------- the sweep and the knee


def test_knee_known_values():
    # the chapter's table: latency x2.67 at 16, nearly doubling again at 32
    knee, lat = chapter.S4_KNEE, chapter.S4_LATENCY_1_TO_16
    chapters = [1.0, lat, lat * chapter.S4_LATENCY_16_TO_32]
    assert bt.find_knee([1, knee, 2 * knee], chapters, factor=3.0) == knee
    assert bt.find_knee([1, knee, 2 * knee], chapters) == 1
    # step = a + b*B with a = 20 b: the step doubles (a + bB = 2(a + b)) at B = 21, so 16 is the knee
    batches = [1, 2, 4, 8, 16, 32, 64]
    assert bt.find_knee(batches, [20 + b for b in batches]) == 16
    assert bt.find_knee(batches, [20 + b for b in batches], factor=3.5) == 32
    # flat steps never reach the knee inside the sweep
    assert bt.find_knee(batches, [1.0] * 7) == 64
    # one noisy point moves it by at most one size
    noisy = [20 + b for b in batches]
    noisy[3] *= 1.6
    assert bt.find_knee(batches, noisy) == 4
    with pytest.raises(ValueError):
        bt.find_knee([1, 2], [1.0, 2.0], factor=1.0)


def test_per_doubling_gain():
    knee, up_to, beyond = chapter.S4_KNEE, chapter.S4_THROUGHPUT_1_TO_16, chapter.S4_THROUGHPUT_16_TO_32
    assert bt.per_doubling_gain(1, 1.0, knee, up_to) == pytest.approx(up_to ** (1 / 4))    # 1 to 16: four doublings
    assert bt.per_doubling_gain(knee, up_to, 2 * knee, up_to * beyond) == pytest.approx(beyond)     # one
    assert bt.per_doubling_gain(2, 1.0, 8, 4.0) == pytest.approx(2.0)                # free: 2x per doubling
    with pytest.raises(ValueError):
        bt.per_doubling_gain(8, 1.0, 8, 1.0)


def test_step_cost_interpolates():
    cost = bt.step_cost_from_sweep([1, 2, 4, 8], [1.0, 1.2, 1.6, 3.2])
    assert cost(1) == 1.0 and cost(4) == 1.6
    assert cost(3) == pytest.approx(1.4) and cost(6) == pytest.approx(2.4)
    assert cost(16) == pytest.approx(3.2 + 8 * 1.6 / 4)       # extrapolates the last segment
    with pytest.raises(ValueError):
        cost(0)


def test_sweep_times_every_size_in_every_round_and_rejects_bad_sizes(tiny):
    seen = []
    sweep = bt.decode_step_sweep(tiny, [1, 3], context=5, repeats=2, warmup=1,
                                 rounds=lambda r: (seen.append(i) or i for i in r))
    assert list(sweep) == [1, 3] and seen == [0, 1, 2]               # one warm-up round, then two timed
    assert all(len(t.times) == 2 and 0 < t.min <= t.median for t in sweep.values())
    for bad in ([0, 2], [2, 2], []):
        with pytest.raises(ValueError, match="batch_sizes"):
            bt.decode_step_sweep(tiny, bad)


def test_equal_lengths_leave_static_batching_nothing_to_waste():
    cost = bt.step_cost_from_sweep([1, 8], [1.0, 2.0])
    ls = sc.chapter_lengths(skew=0.0)
    r = sc.compare(*(sc.simulate(ls, 8, p, cost) for p in sc.POLICIES))
    assert r["throughput_x"] == pytest.approx(1.0, abs=1e-9)


def test_padded_rows_are_exact_only_without_sliding_windows():
    from types import SimpleNamespace as NS
    assert sl.padded_rows_are_exact(NS(layer_types=["full_attention"] * 3))
    assert not sl.padded_rows_are_exact(NS(layer_types=["sliding_attention", "full_attention"]))
    assert sl.padded_rows_are_exact(NS()) and not sl.padded_rows_are_exact(NS(use_sliding_window=True))


def test_off_greedy_finds_every_token_the_model_alone_would_not_pick_and_by_how_much(tiny, ragged, solo):
    prompts, lengths = ragged
    assert so.off_greedy(tiny, prompts, solo, lengths) == []        # the solo runs are their own greedy picks
    i, k = 2, 5                                    # swap request 2's 6th token for the solo run's runner-up
    ids = torch.cat([prompts[i], torch.tensor([solo[i][:k]])], dim=1)
    with torch.inference_mode():
        logits = tiny(ids).logits[0, -1]
    top2 = logits.topk(2)
    assert top2.indices[0].item() == solo[i][k]
    swapped = [list(o) for o in solo]
    swapped[i][k] = top2.indices[1].item()
    [(req, at, gap)] = so.off_greedy(tiny, prompts, swapped, lengths)
    assert (req, at) == (i, k) and gap >= float(top2.values[0] - top2.values[1]) - 1e-5
    assert gap > so.TIE_GAP                        # a random tiny model's runner-up is no tie
    # after the swap the solo continuation is no longer the greedy pick for that new text: also caught,
    # and the largest shortfall is reported
    with torch.inference_mode():
        full = tiny(torch.cat([prompts[i], torch.tensor([swapped[i]])], dim=1)).logits[0, prompts[i].shape[1] - 1:-1]
    shortfall = full.max(-1).values - full.gather(-1, torch.tensor(swapped[i])[:, None])[:, 0]
    assert gap == pytest.approx(float(shortfall.max()))
    truncated = [list(o) for o in solo]
    truncated[i] = truncated[i][:3]                # a length bug is never mistaken for a tie
    assert so.off_greedy(tiny, prompts, truncated, lengths) == [(i, 3, float("inf"))]
    # a reply checked once, or the start of one, needs no second pass
    seen, starts = {}, [o[:k + 1] for o in swapped]
    assert so.off_greedy(tiny, prompts, swapped, lengths, seen=seen) == [(req, at, gap)]
    calls = []
    hook = tiny.register_forward_hook(lambda *_: calls.append(1))
    try:
        again = so.off_greedy(tiny, prompts, starts, seen=seen)
    finally:
        hook.remove()
    assert calls == [] and again == so.off_greedy(tiny, prompts, starts)
    assert again[0][:2] == (i, k)


def test_around_the_knee_reports_the_gain_and_cost_per_doubling_on_either_side():
    batches = [1, 2, 4, 8, 16]
    steps = [1.0, 1.0, 1.0, 3.0, 9.0]          # free up to 4, then the step triples: knee at 4 (index 2)
    at = bt.around_the_knee(batches, steps)
    assert (at.batch, at.index) == (4, 2) and at.batch == bt.find_knee(batches, steps)
    assert at.gain_below == pytest.approx(2.0) and at.latency_below == pytest.approx(1.0)
    assert at.gain_above == pytest.approx((16 / 9 / 4) ** 0.5) and at.latency_above == pytest.approx(3.0)
    assert at.gain_above < at.gain_below and at.latency_above > at.latency_below
    flat = bt.around_the_knee([1, 2], [1.0, 1.0])                 # never reaches the knee: the last batch
    assert (flat.batch, flat.gain_below, flat.gain_above) == (2, 2.0, 1.0)


def _sweep(steps, batches=(1, 2, 4, 8, 16, 32, 64, 128)):
    from helpers.infra.measure import Timing
    return {b: Timing(s, [s, s * 1.1]) for b, s in zip(batches, steps)}


def test_sweep_checks_hold_on_a_curve_with_the_chapters_shape_and_fail_on_a_flat_one():
    """A step of fixed cost 20 plus 1 per row (the knee at 16, throughput 16 x 21 / 36 = 9.3x there) holds every
    claim; flat steps (a sweep that never reaches the knee) fail exactly the claims that need a knee."""
    batches = [1, 2, 4, 8, 16, 32, 64, 128]
    checks = bt.sweep_checks(batches, knee=16)
    held = checks(_sweep([20 + b for b in batches]))
    assert all(c[0] for c in held.values()), {k: c[3] for k, c in held.items() if not c[0]}
    assert held["1 to 16"][3]["thr"] == pytest.approx(16 * 21 / 36)
    flat = checks(_sweep([1.0] * 8))
    assert {k for k, c in flat.items() if not c[0]} == {"1 to 16", "reached", "beyond", "largest"}
    # a step that grows in proportion to the batch: throughput flat, the knee at batch 2
    linear = checks(_sweep([float(b) for b in batches]))
    assert not linear["1 to 16"][0] and linear["reached"][0] and linear["reached"][3]["knee"] == 2
    with pytest.raises(ValueError):
        bt.sweep_checks([2, 4, 8], knee=4)


def test_sweep_checks_say_what_they_test():
    """Each statement's numbers sit right at its threshold: just above holds, just below does not."""
    batches = [1, 2, 4, 8, 16, 32]
    checks = bt.sweep_checks(batches, knee=16)
    # throughput at 16 exactly twice batch 1's (the step 8x batch 1's): "more than doubles" does not hold
    assert not checks(_sweep([1.0, 1.0, 1.0, 1.0, 8.0, 16.0], batches))["1 to 16"][0]
    assert checks(_sweep([1.0, 1.0, 1.0, 1.0, 7.9, 16.0], batches))["1 to 16"][0]
    # at the largest batch, exactly 3 times the wait of batch 1 is not "more than 3 times"
    assert not checks(_sweep([1.0, 1.0, 1.0, 1.5, 2.5, 3.0], batches))["largest"][0]
    assert checks(_sweep([1.0, 1.0, 1.0, 1.5, 2.5, 3.01], batches))["largest"][0]


def test_summarize_counts_what_off_greedy_found():
    found = [(3, 11, 0.0), (7, 4, 5e-4), (9, 0, 2.5)]          # a tie, a near tie, a real difference
    s = so.summarize(found, 20)
    assert (s.same, s.ties, s.largest_gap, s.where) == (17, 2, 2.5, "3:12 7:5 9:1")
    assert so.summarize([], 20) == so.Parted(20, 0, 0.0, "—")
    assert so.summarize(found, 20, tie=1e-4).ties == 1              # 5e-4 is no tie under a stricter gap
    with pytest.raises(ValueError):
        so.summarize(found, 2)


def test_gains_is_compare_of_the_two_simulated_policies():
    lengths, cost = [5, 1, 4, 2, 2, 9], (lambda n: 0.1 + 0.02 * n)
    arrivals = [0.0, 0.0, 0.1, 0.3, 0.3, 0.5]
    for arr, padding in ((None, True), (arrivals, True), (None, False)):
        st = sc.simulate(lengths, 2, "static", cost, arrivals=arr, padding_costs=padding)
        co = sc.simulate(lengths, 2, "continuous", cost, arrivals=arr)
        assert sc.gains(lengths, 2, cost, arrivals=arr, padding_costs=padding) == sc.compare(st, co)
    # one slot: static and continuous batching are the same schedule
    assert sc.gains(lengths, 1, cost)["throughput_x"] == pytest.approx(1.0)
