"""Section 4's exercises and their checkers: throughput from latency, padding, prefills, shared pages, shortest first.

Notebook 04 ends with these; ``check("4.2", answer, **facts)`` judges an answer against the right one,
computed from the facts the notebook passes in (:mod:`helpers.infra.exercises`).

* 4.1 explain: the throughput gain at a batch size, from the latency growth alone.
* 4.2 predict, then measure: the row-steps one static batch spends on requests that have already finished.
* 4.3 explain: the paper model's throughput gain once the prefills, paid by both servers, are counted.
* 4.4 predict, then measure: the blocks a shared prefix saves at the busiest step, under the allocator's rule for
  the prefix's partly filled last block (the fact ``keeps_partial_block``: ours stores it with the prefix and
  copies it on write; vLLM's prefix cache stores full blocks only).
* 4.5 change the code: continuous batching that admits the shortest waiting request first; the waits.
"""
from __future__ import annotations

from . import s04_scheduling as scheduling
from .infra.chapter import S4_KNEE, S4_LATENCY_1_TO_16, S4_SLOTS
from .infra.exercises import CODE, EXPLAIN, PREDICT, Exercise, ExerciseSet, Mistake


def _padding(lengths):
    return sum(max(lengths) - n for n in lengths)


def _with_prefills(static_s, continuous_s, prefill_s):
    return (static_s + prefill_s) / (continuous_s + prefill_s)


def _blocks_saved(requests, prefix, block, keeps_partial_block):
    """Every request stops holding the prefix's full blocks, and each still holds a block of its own for the
    prefix's partly filled tail (copied on write, or never shared). The stored prefix holds its full blocks, and
    its partly filled last block too where the allocator keeps it (``keeps_partial_block``)."""
    stored = -(-prefix // block) if keeps_partial_block else prefix // block
    return requests * (prefix // block) - stored


def _other_rule(keeps_partial_block, **facts):
    return _blocks_saved(keeps_partial_block=not keeps_partial_block, **facts)


def shortest_first(lengths, slots, step_cost):
    """The reference for 4.5: each request's wait (seconds from time 0 to its answer), in request order, under
    continuous batching where a free slot admits the waiting request with the fewest tokens (ties: the earlier one).

    With every request queued at time 0, that is the simulator's queue sorted by length."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    waits = scheduling.simulate([lengths[i] for i in order], slots, "continuous", step_cost).latency
    out = [0.0] * len(lengths)
    for position, i in enumerate(order):
        out[i] = waits[position]
    return out


def _one_second(active):
    return 1.0


def _grows_with_rows(active):
    return 0.02 + 0.004 * active


def _cases_4_5(**_):
    skewed = scheduling.chapter_lengths(seed=1)[:20]
    return [([3, 1, 2], 1, _one_second), ([5, 1, 4, 2, 2], 2, _one_second), ([5, 1, 4, 2, 2], 2, _grows_with_rows),
            ([7, 3, 3, 1, 9, 2, 6, 4], 3, _grows_with_rows), ([2, 2, 2], 4, _grows_with_rows), ([1], 1, _one_second),
            (skewed, 4, _grows_with_rows)]


def _fifo(lengths, slots, step_cost):
    return scheduling.simulate(lengths, slots, "continuous", step_cost).latency


def _longest_first(lengths, slots, step_cost):
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    waits = scheduling.simulate([lengths[i] for i in order], slots, "continuous", step_cost).latency
    return [waits[order.index(i)] for i in range(len(lengths))]


def _in_admission_order(lengths, slots, step_cost):
    return sorted(shortest_first(lengths, slots, step_cost))


def _every_slot_costs(lengths, slots, step_cost):
    return shortest_first(lengths, slots, lambda active: step_cost(slots))


EXERCISES = ExerciseSet(
    Exercise(
        "4.1", EXPLAIN, answer=lambda batch, latency_x: batch / latency_x, rel=0.02,
        example=dict(batch=S4_KNEE, latency_x=S4_LATENCY_1_TO_16),
        hint="Throughput is the tokens one step delivers divided by the step's time.",
        mistakes=[
            Mistake("Extra requests are not free: each one waited {latency_x:.2f}x as long as alone, so the server's "
                    "rate did not grow {batch}x.", lambda batch, latency_x: batch),
            Mistake("That is how much longer each user waited; the server's throughput is tokens per step over the "
                    "step's time.", lambda batch, latency_x: latency_x),
            Mistake("A slower step delivers its tokens later: divide the tokens per step by the step's time, don't "
                    "multiply.", lambda batch, latency_x: batch * latency_x),
            Mistake("That is the time per token, relative to batch 1; throughput is tokens per second, its inverse.",
                    lambda batch, latency_x: latency_x / batch),
        ]),
    Exercise(
        "4.2", PREDICT, answer=lambda lengths: _padding(lengths), rel=0, abs=1e-9,
        example=dict(lengths=scheduling.chapter_lengths(seed=0)[:S4_SLOTS]),
        hint="A finished row keeps its slot, and is computed, until the batch's longest request is done.",
        mistakes=[
            Mistake("That counts every row-step of the batch; padding is only the steps a row computes after its own "
                    "last token.", lambda lengths: len(lengths) * max(lengths)),
            Mistake("That counts the useful tokens; padding is the steps a finished row keeps being computed.",
                    lambda lengths: sum(lengths)),
            Mistake("That is how many steps the batch runs; count row-steps: every finished row pads each step that "
                    "remains.", lambda lengths: max(lengths)),
        ]),
    Exercise(
        "4.3", EXPLAIN, answer=lambda **f: _with_prefills(**f), rel=0.02,
        example=dict(static_s=17.455, continuous_s=8.333, prefill_s=19.291),
        hint="Add the prefills' seconds to each server's time, then compare the two times.",
        mistakes=[
            Mistake("That is the paper model's own ratio, without the prefills: each server also pays them, "
                    "{prefill_s:.3f} s in all.", lambda static_s, continuous_s, prefill_s: static_s / continuous_s),
            Mistake("A request's prefill is the same work under both policies: both servers pay it, not only static "
                    "batching.", lambda static_s, continuous_s, prefill_s: (static_s + prefill_s) / continuous_s),
            Mistake("A throughput gain is static batching's time over continuous batching's: the same tokens in less "
                    "time.", lambda **f: 1 / _with_prefills(**f)),
        ]),
    Exercise(
        "4.4", PREDICT, answer=lambda **f: _blocks_saved(**f), rel=0, abs=1e-9,
        example=dict(requests=8, prefix=52, block=16, keeps_partial_block=True),
        hint="Count the blocks each request holds without sharing and with it, and the blocks of the stored prefix.",
        mistakes=[
            Mistake("Read the question's rule again: does the stored prefix keep its partly filled last block, or "
                    "only its full blocks?", lambda **f: _other_rule(**f)),
            Mistake("The prefix's partly filled last block saves nothing: every request writes its own tokens after "
                    "the prefix, so each needs a block of its own there.",
                    lambda requests, prefix, block, **_: (requests - 1) * -(-prefix // block)),
            Mistake("The prefix is stored once, in blocks of its own: those are not saved.",
                    lambda requests, prefix, block, **_: requests * (prefix // block)),
            Mistake("The question counts blocks of {block} tokens, not tokens.",
                    lambda **f: f["block"] * _blocks_saved(**f)),
        ]),
    Exercise(
        "4.5", CODE, answer=lambda **f: shortest_first, example={}, cases=_cases_4_5,
        hint="Before every step, fill each free slot with the shortest waiting request; a step costs "
             "step_cost(active rows) and gives each of them one token.",
        mistakes=[
            Mistake("A free slot takes the waiting request with the fewest tokens to produce, not the next one in the "
                    "queue.", lambda **f: _fifo),
            Mistake("Shortest first: the waiting request with the fewest tokens, not the most.",
                    lambda **f: _longest_first),
            Mistake("Return the waits in request order (request i's wait at position i), not in the order the "
                    "requests were admitted.", lambda **f: _in_admission_order),
            Mistake("A step costs step_cost of the rows active in it, not of all the slots.",
                    lambda **f: _every_slot_costs),
        ]),
)
check, verdict = EXERCISES.check, EXERCISES.verdict
