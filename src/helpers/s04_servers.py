"""Static and continuous batching for real: servers over a slot batch, and transformers' engine beside them.

Section 4 (notebooks/04-batching.md), part 2, for real. :func:`serve` runs the static or the continuous
policy over a :class:`helpers.s04_slots.SlotBatch` on the real model and returns a
:class:`helpers.s04_scheduling.Schedule`; :func:`serve_side_by_side` interleaves two servers so that a
busy machine slows both alike, and runs each request's prefill (:class:`helpers.s04_slots.Prefill`) once
for both, each server's own time kept by a :class:`WorkClock`. :func:`run_transformers_cb` gives the same
requests to transformers' own continuous-batching engine for comparison.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
from transformers import GenerationConfig

from . import s04_slots as slot_batch
from .infra.measure import now
from .infra.messages import message
from .s04_scheduling import POLICIES, Schedule, check_workload


class WorkClock:
    """Seconds of work done by one server: it runs while the server works and stops while it waits for its turn."""

    def __init__(self, clock: Callable[[], float] = now):
        self.clock, self.spent, self.since = clock, 0.0, None

    def start(self) -> None:
        self.since = self.clock()

    def stop(self) -> None:
        self.spent += self.clock() - self.since
        self.since = None

    def __call__(self) -> float:
        return self.spent + (self.clock() - self.since if self.since is not None else 0.0)

    def charge(self, seconds: float) -> None:
        """Count work done elsewhere as this server's own: a prefill another server ran for both."""
        self.spent += seconds


def _your_turn_is_over(clock: WorkClock):
    clock.stop()
    yield
    clock.start()


def serving(model, prompts: Sequence[torch.Tensor], lengths: Sequence[int], slots: int, policy: str,
            bar=None, clock: WorkClock | None = None, prefills: dict | None = None):
    """The scheduler as a generator: it pauses (yields) after every admission and every batched step.

    Drive it with :func:`serve` (one server) or :func:`serve_side_by_side`
    (several servers taking turns). Its :class:`WorkClock` only runs while it
    works, so its times are those of the work alone. Returns a :class:`Schedule`
    (as the generator's return value).

    ``prefills``, a dict shared with other servers (keyed by :func:`helpers.s04_slots.prompt_key`):
    a request whose prefill is already there is admitted from it, and the
    prefill's measured seconds are charged to this server's clock as if it had
    run it; otherwise the prefill runs here and is stored for the others.
    Without it, every admission runs its own prefill.
    """
    check_workload(list(lengths), slots, policy, None)
    if len(prompts) != len(lengths):
        raise ValueError(message("give one output length per prompt ({prompts}), got {lengths}.",
                                 prompts=len(prompts), lengths=len(lengths)))
    n = len(prompts)
    admit, finish, release, slot_of = [0.0] * n, [0.0] * n, [0.0] * n, [0] * n
    outputs: dict[int, list[int]] = {}
    batch = slot_batch.SlotBatch(model)
    row_req: list[int] = []        # request held by each row
    row_slot: list[int] = []
    log: list[dict] = []
    now = clock or WorkClock()
    now.start()
    steps = padded = 0
    nxt = 0

    def admit_one(s: int):
        nonlocal nxt
        i = nxt
        nxt += 1
        admit[i], slot_of[i] = now(), s
        stored = None
        if prefills is not None:
            key = slot_batch.prompt_key(prompts[i])
            stored = prefills.get(key)
            if stored is None:          # the first server to admit it runs it, on its own clock
                stored = prefills[key] = slot_batch.prefill_alone(model, prompts[i])
            else:                       # another server ran it: the same work, so the same time
                now.charge(stored.seconds)
        outputs[i] = [batch.add(prompts[i], stored)]
        row_req.append(i)
        row_slot.append(s)
        if bar is not None:
            bar.update(1)
        if lengths[i] == 1:
            finish[i] = now()

    def done(i):
        return len(outputs[i]) >= lengths[i]

    def decode():
        nonlocal steps, padded
        rows_before = batch.rows
        live = sum(not done(i) for i in row_req)
        width = batch.width
        tokens = batch.step()
        steps += 1
        padded += rows_before - live
        for r, i in enumerate(row_req):
            if not done(i):
                outputs[i].append(int(tokens[r]))
                if bar is not None:
                    bar.update(1)
                if done(i):
                    finish[i] = now()
        log.append(dict(t=now(), rows=rows_before, active=live, width=width + 1,
                        padded_bytes=batch.nbytes(), real_tokens=batch.real_tokens(),
                        held={i: int(batch.length[r]) for r, i in enumerate(row_req)}))

    def release_done():
        stay = [r for r, i in enumerate(row_req) if not done(i)]
        for i in row_req:
            if done(i):
                release[i] = finish[i]      # answered the moment its last token exists
        if len(stay) < len(row_req):
            batch.keep(stay)
            row_req[:] = [row_req[r] for r in stay]
            row_slot[:] = [row_slot[r] for r in stay]

    if policy == "static":
        while nxt < n:
            for s in range(min(slots, n - nxt)):
                admit_one(s)
                yield from _your_turn_is_over(now)
            while not all(done(i) for i in row_req):
                decode()
                yield from _your_turn_is_over(now)
            t = now()
            for i in row_req:
                release[i] = t
            batch.keep([])
            row_req.clear()
            row_slot.clear()
    else:
        while nxt < n or row_req:
            busy = set(row_slot)
            for s in range(slots):
                if s not in busy and nxt < n:
                    admit_one(s)
                    yield from _your_turn_is_over(now)
            release_done()                 # a one-token request is done by its prefill
            if row_req:
                decode()
                release_done()
                yield from _your_turn_is_over(now)
    makespan = now()
    now.stop()
    return Schedule(policy, slots, list(lengths), [0.0] * n, admit, finish, release, slot_of, makespan, steps,
                    padded, outputs=outputs, step_log=log)


def serve(model, prompts: Sequence[torch.Tensor], lengths: Sequence[int], slots: int, policy: str,
          progress: Callable | None = None) -> Schedule:
    """Serve real requests with a slot batch. All arrive at time 0, in order; request i stops after lengths[i] tokens.

    * ``static``: take the next ``slots`` requests, prefill each, decode all
      rows together until the longest is done (finished rows keep computing,
      as padding), answer them all, take the next group.
    * ``continuous``: before every step, free slots admit the next queued
      requests (prefill, then a new row); a request is answered and leaves the
      batch the step it is done, and its slot is reused on the next step.

    Greedy decoding; the fixed lengths stand in for the moment the model would
    emit its end token. Returns a :class:`Schedule` with the generated tokens
    in ``outputs`` and one ``step_log`` entry per batched step.
    """
    bar = progress(total=sum(lengths)) if progress else None
    gen = serving(model, prompts, lengths, slots, policy, bar)
    try:
        while True:
            next(gen)
    except StopIteration as stop:
        return stop.value
    finally:
        if bar is not None:
            bar.close()


def serve_side_by_side(model, prompts: Sequence[torch.Tensor], lengths: Sequence[int], slots: int,
                       policies: Sequence[str] = POLICIES, progress: Callable | None = None,
                       prefills: dict | None = None) -> dict[str, Schedule]:
    """Run several policies on the same requests, taking turns one admission or step at a time.

    Each server's clock runs only during its own turns. On a machine where
    other programs come and go, a slow spell then lands on both servers' turns
    alike instead of on whichever happened to be running, so their ratio
    survives it. Each turn is still a real, wall-clock-timed piece of work.

    A request's prefill runs alone, so it is the same computation under every
    policy: it runs once, on whichever server admits the request first, and its
    measured time is charged to every server's clock (see :func:`serving`).
    Pass a dict as ``prefills`` to keep them (keyed by :func:`helpers.s04_slots.prompt_key`).
    """
    if len(policies) == 0:
        raise ValueError(message("give at least one policy to run."))
    prefills = {} if prefills is None else prefills
    bar = progress(total=sum(lengths) * len(policies)) if progress else None
    running = {p: serving(model, prompts, lengths, slots, p, bar, prefills=prefills) for p in policies}
    results: dict[str, Schedule] = {}
    try:
        while running:
            for p in list(running):
                try:
                    next(running[p])
                except StopIteration as stop:
                    results[p] = stop.value
                    del running[p]
    finally:
        if bar is not None:
            bar.close()
    return {p: results[p] for p in policies}


def run_transformers_cb(model, prompts: Sequence[torch.Tensor], lengths: Sequence[int], slots: int,
                        pad_token_id=None, timeout: float = 300.0):
    """The same requests through transformers' own continuous-batching engine, greedy, no end token.

    Returns (generated token lists, each request's finish time in seconds, total seconds); the times
    include starting the engine.
    """
    # Imported here, on purpose: the class lives in an internal module of transformers, which may move within the
    # releases pyproject accepts. The comparison is optional, so a missing class must fail this one call (the
    # notebook reports it), not the import of the servers the rest of the notebook needs.
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    gen = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=pad_token_id, max_new_tokens=max(lengths))
    cbc = ContinuousBatchingConfig(num_blocks=256, block_size=16, max_batch_tokens=512, max_requests_per_batch=slots)
    t0 = now()
    with model.continuous_batching_context_manager(generation_config=gen, continuous_batching_config=cbc,
                                                   warmup=False) as manager:
        for i, (p, n) in enumerate(zip(prompts, lengths)):
            manager.add_request(p[0].tolist(), request_id=f"r{i}", max_new_tokens=n)
        done = {}
        while len(done) < len(prompts):
            r = manager.get_result(timeout=timeout)
            if r is None:
                raise RuntimeError(message("transformers' manager returned nothing for {timeout:.0f} s",
                                           timeout=timeout))
            if r.status.name == "FINISHED":
                done[r.request_id] = r
    outs = [done[f"r{i}"].generated_tokens for i in range(len(prompts))]
    ends = [done[f"r{i}"].lifespan[1] - t0 for i in range(len(prompts))]
    return outs, ends, now() - t0
