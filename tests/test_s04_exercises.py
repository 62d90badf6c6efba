"""Section 4's checkers against the section's own helpers: the right answers are what the simulator and the
block allocator measure, on workloads and prefixes the notebook's run does not happen to produce."""
from __future__ import annotations

import dataclasses

import pytest

from helpers import s04_paged as paged
from helpers import s04_scheduling as scheduling
from helpers.s04_exercises import EXERCISES, shortest_first


def _saved_by_sharing(lengths, block, stored_prefix):
    trace = [{r: n for r, n in enumerate(lengths)}]
    return (paged.replay(trace, block).used_blocks[0]
            - paged.replay(trace, block, shared_prefix=stored_prefix).used_blocks[0])


@pytest.mark.parametrize("prefix, block", [(52, 16), (48, 16), (5, 16), (40, 1), (100, 32)])
def test_4_4_blocks_saved_is_what_the_allocator_saves_under_either_rule(prefix, block):
    """Our allocator stores the whole prefix, its partly filled last block included, and copies that block on
    write; vLLM's prefix cache stores full blocks only, which is our allocator sharing a prefix rounded down to
    whole blocks (each request then writes the tail into a block of its own, and nothing is copied)."""
    lengths = [prefix + extra for extra in (1, 7, 16, 30, 33, 64)]
    facts = dict(requests=len(lengths), prefix=prefix, block=block)
    ours = _saved_by_sharing(lengths, block, prefix)
    vllm = _saved_by_sharing(lengths, block, prefix // block * block)
    assert EXERCISES["4.4"].answer(**facts, keeps_partial_block=True) == ours
    assert EXERCISES["4.4"].answer(**facts, keeps_partial_block=False) == vllm
    assert EXERCISES.verdict("4.4", ours, **facts, keeps_partial_block=True).right
    assert EXERCISES.verdict("4.4", vllm, **facts, keeps_partial_block=False).right
    if prefix % block:            # a partly filled last block: the two rules differ by exactly that block
        assert ours == vllm - 1
        assert not EXERCISES.verdict("4.4", vllm, **facts, keeps_partial_block=True).right


@pytest.mark.parametrize("keeps", [True, False])
def test_4_4_each_mistake_gets_its_own_hint_under_either_rule(keeps):
    """The issue's case (8 requests, a 52-token prefix, blocks of 16): 20 under our rule, 21 under vLLM's; each
    answer is right under its own rule and, under the other, named as reading the rule wrong."""
    ex = EXERCISES["4.4"]
    facts = dict(ex.example, keeps_partial_block=keeps)
    assert ex.answer(**facts) == (20 if keeps else 21)
    rule = ex.mistakes[0]
    assert EXERCISES.verdict("4.4", 21 if keeps else 20, **facts).sentence.endswith(rule.hint)
    for mistake in ex.mistakes:
        wrong = mistake.answer(**facts)
        assert wrong != ex.answer(**facts)
        v = EXERCISES.verdict("4.4", wrong, **facts)
        assert not v.right and v.sentence.endswith(mistake.hint.format(**facts)), (mistake.hint, wrong)


@pytest.mark.parametrize("seed, slots", [(0, 8), (1, 4), (2, 1)])
def test_4_3_is_the_simulated_gain_with_the_prefills_added_to_both(seed, slots):
    lengths = scheduling.chapter_lengths(seed=seed)[:20]
    cost = lambda n: 0.05 + 0.01 * n                    # noqa: E731 (a step cost that grows with the batch)
    runs = {p: scheduling.simulate(lengths, slots, p, cost) for p in scheduling.POLICIES}
    prefills = 3.0
    gain = scheduling.compare(*(dataclasses.replace(runs[p], makespan=runs[p].makespan + prefills)
                                for p in scheduling.POLICIES))["throughput_x"]
    facts = dict(static_s=runs["static"].makespan, continuous_s=runs["continuous"].makespan, prefill_s=prefills)
    assert EXERCISES.verdict("4.3", gain, **facts).right


def test_4_5_shortest_first_admits_the_shortest_waiting_request_and_lowers_the_mean_wait():
    lengths = scheduling.chapter_lengths(seed=0)
    for cost in (lambda n: 1.0, lambda n: 0.1 + 0.02 * n):
        waits = shortest_first(lengths, 8, cost)
        arrival = scheduling.simulate(lengths, 8, "continuous", cost).latency
        assert sum(waits) < sum(arrival)
        assert max(range(len(lengths)), key=lambda i: waits[i]) == max(range(len(lengths)), key=lambda i: lengths[i])
    assert shortest_first([2, 1], 1, lambda n: 1.0) == [3.0, 1.0]         # one slot: the 1-token request goes first
