"""Static and continuous batching for real: a slot batch of requests with different lengths (section 4).

:class:`SlotBatch` holds every active request's keys and values in one padded
tensor per layer, with a mask and per-row positions so that each row computes
exactly what it would alone. :func:`serve` runs the static or the continuous
policy over it on the real model and returns a :class:`helpers.s04_scheduling.Schedule`;
:func:`serve_side_by_side` interleaves two servers so that a busy machine
slows both alike, and runs each request's prefill (:class:`Prefill`) once for
both. :func:`run_transformers_cb` gives the same requests to
transformers' own continuous-batching engine for comparison. Whether a batched
reply is what the request produces alone is checked in :mod:`helpers.s04_solo`.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from . import s01_kv_cache as kc
from .infra.measure import now
from .s04_scheduling import POLICIES, Schedule, check_workload

# --------------------------------------------------------------------------- the real thing


@dataclass(frozen=True)
class Prefill:
    """One request's prompt, run through the model alone: what admitting it to a slot batch starts from.

    A prefill runs at batch 1, whatever the policy and whoever else is in the
    batch, so it is the same computation with the same result every time the
    same prompt is admitted. Kept, it can be reused instead of run again.
    """
    first: int                                       # the first greedy token of the reply
    logits: torch.Tensor                             # (vocab,) the last prompt position's logits, which chose it
    kv: list[tuple[torch.Tensor, torch.Tensor]]      # its cache, as kv_cache.cache_to_kv gives it
    seconds: float                                   # how long the prefill took, measured


@torch.inference_mode()
def prefill_alone(model, prompt_ids: torch.Tensor) -> Prefill:
    """Run one prompt (1, tokens) alone and time it.

    Only the last position's logits are computed (``logits_to_keep=1``): they
    pick the first token, and the earlier positions' logits over the whole
    vocabulary would be thrown away.
    """
    t0 = now()
    logits, cache = kc.forward(model, prompt_ids, cache=kc.new_cache(model), logits_to_keep=1)
    first = int(kc.greedy(logits))
    kv = kc.cache_to_kv(cache)
    return Prefill(first, logits[0, -1], kv, now() - t0)


def prompt_key(prompt_ids: torch.Tensor) -> tuple[int, ...]:
    """A prompt's tokens as a dictionary key: requests with the same prompt have the same prefill."""
    return tuple(prompt_ids.reshape(-1).tolist())


class SlotBatch:
    """Requests of different lengths decoding together in one padded batch.

    Row ``r`` holds one request's keys and values right-aligned in a
    (rows, kv_heads, L, head_dim) tensor per layer, with left padding where it
    is shorter than the longest row. Three things keep every row's arithmetic
    its own (the same values as a solo run; only the order of some sums may
    change with the batch's shape, see :func:`helpers.s04_solo.off_greedy`):

    * ``mask`` (rows, L): 1 on real cached tokens, 0 on padding, so attention
      never looks at another row's padding;
    * ``length`` (rows,): how many real tokens the row holds, which is the
      position of the next token (rotary embeddings need the true position, not
      the padded column);
    * admitting a request copies its own prefill cache into a new row; removing
      one drops its row and trims columns that became padding for every row.
    """

    reuse: dict | None = None       # prefills to take instead of running them again: see reusing_prefills

    def __init__(self, model):
        self.model = model
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.mask: torch.Tensor | None = None
        self.length = torch.zeros(0, dtype=torch.long)
        self.last = torch.zeros(0, 1, dtype=torch.long)
        self._cache = None

    @property
    def rows(self) -> int:
        return int(self.length.shape[0])

    @property
    def width(self) -> int:
        return 0 if self.mask is None else int(self.mask.shape[1])

    def nbytes(self) -> int:
        """Bytes of the padded K/V rectangle (padding included)."""
        if self.kv is None:
            return 0
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.kv)

    def real_tokens(self) -> int:
        return int(self.length.sum())

    @torch.inference_mode()
    def add(self, prompt_ids: torch.Tensor, prefill: Prefill | None = None) -> int:
        """Prefill one request alone and join it as a new row. Returns its first greedy token.

        ``prefill``: this prompt's :class:`Prefill`, already run; then it is not run again.
        """
        if prompt_ids.dim() != 2 or prompt_ids.shape[0] != 1 or prompt_ids.shape[1] < 1:
            raise ValueError("add() takes one prompt shaped (1, tokens) with at least one token.")
        if prefill is None and self.reuse is not None:
            prefill = self.reuse.get(prompt_key(prompt_ids))
        if prefill is None:
            prefill = prefill_alone(self.model, prompt_ids)
        first = torch.tensor([[prefill.first]], device=prompt_ids.device)
        new = prefill.kv
        p = prompt_ids.shape[1]
        if self.kv is None or self.rows == 0:
            self.kv = new
            self.mask = torch.ones(1, p, dtype=torch.long, device=prompt_ids.device)
        else:
            width = max(self.width, p)
            old = [(_left_pad(k, width), _left_pad(v, width)) for k, v in self.kv]
            mask = _left_pad(self.mask, width, dim=1)
            row = [(_left_pad(k, width), _left_pad(v, width)) for k, v in new]
            self.kv = [(torch.cat([ko, kn]), torch.cat([vo, vn])) for (ko, vo), (kn, vn) in zip(old, row)]
            row_mask = torch.zeros(1, width, dtype=torch.long, device=mask.device)
            row_mask[0, width - p:] = 1
            self.mask = torch.cat([mask, row_mask])
        self.length = torch.cat([self.length.to(prompt_ids.device), torch.tensor([p], device=prompt_ids.device)])
        self.last = torch.cat([self.last.to(prompt_ids.device), first])
        self._cache = None
        return int(first)

    def keep(self, rows: Sequence[int]) -> None:
        """Keep only these rows (in this order) and trim columns that are padding in every remaining row."""
        idx = torch.tensor(list(rows), dtype=torch.long)
        if len(idx) == 0:
            self.kv, self.mask = None, None
            self.length = self.length[:0]
            self.last = self.last[:0]
            self._cache = None
            return
        mask = self.mask[idx]
        used = mask.any(0).nonzero()
        start = int(used[0]) if len(used) else mask.shape[1]
        self.kv = [(k[idx, :, start:], v[idx, :, start:]) for k, v in self.kv]
        self.mask = mask[:, start:]
        self.length, self.last = self.length[idx], self.last[idx]
        self._cache = None

    @torch.inference_mode()
    def step(self) -> torch.Tensor:
        """One decode step for every row: feeds each row's last token, returns the next ones (rows, 1)."""
        if self.rows == 0:
            raise ValueError("the batch is empty: add a request before stepping.")
        if self._cache is None:
            self._cache = kc.cache_from_kv(self.model, self.kv)
        ones = torch.ones(self.rows, 1, dtype=self.mask.dtype, device=self.mask.device)
        mask = torch.cat([self.mask, ones], dim=1)
        logits, self._cache = kc.forward(self.model, self.last, cache=self._cache,
                                         attention_mask=mask, position_ids=self.length[:, None])
        self.kv = kc.cache_to_kv(self._cache)
        self.mask = mask
        self.length = self.length + 1
        self.last_logits = logits[:, -1]
        self.last = kc.greedy(logits)
        return self.last


@contextmanager
def reusing_prefills(prefills: dict):
    """Inside this block, :meth:`SlotBatch.add` takes a prompt's prefill from ``prefills`` (keyed by
    :func:`prompt_key`) when it is there, instead of running it again.

    For checking code that admits requests through :class:`SlotBatch` (the
    notebook's own short loops) on prompts that a run before it already
    prefilled: a prefill runs alone, so it would compute the same thing again,
    and what is being checked is the batching that follows it.
    """
    before, SlotBatch.reuse = SlotBatch.reuse, prefills
    try:
        yield prefills
    finally:
        SlotBatch.reuse = before


def padded_rows_are_exact(config) -> bool:
    """Whether :class:`SlotBatch` reproduces every request's solo output exactly on this architecture.

    True when every layer attends to its whole cache. With sliding-window layers the padded rows are not
    guaranteed to see the same window as a solo run (observed: requests joining a wide batch late can
    differ), so the notebook reports exactness there instead of asserting it.
    """
    types = getattr(config, "layer_types", None)
    if types:
        return all(t == "full_attention" for t in types)
    return not getattr(config, "use_sliding_window", False)


def _left_pad(t: torch.Tensor, width: int, dim: int = 2) -> torch.Tensor:
    missing = width - t.shape[dim]
    if missing <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([torch.zeros(shape, dtype=t.dtype, device=t.device), t], dim=dim)


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

    ``prefills``, a dict shared with other servers (keyed by :func:`prompt_key`):
    a request whose prefill is already there is admitted from it, and the
    prefill's measured seconds are charged to this server's clock as if it had
    run it; otherwise the prefill runs here and is stored for the others.
    Without it, every admission runs its own prefill.
    """
    check_workload(list(lengths), slots, policy, None)
    if len(prompts) != len(lengths):
        raise ValueError(f"give one output length per prompt ({len(prompts)}), got {len(lengths)}.")
    n = len(prompts)
    admit, finish, release, slot_of = [0.0] * n, [0.0] * n, [0.0] * n, [0] * n
    outputs: dict[int, list[int]] = {}
    batch = SlotBatch(model)
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
            key = prompt_key(prompts[i])
            stored = prefills.get(key)
            if stored is None:          # the first server to admit it runs it, on its own clock
                stored = prefills[key] = prefill_alone(model, prompts[i])
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
    Pass a dict as ``prefills`` to keep them (keyed by :func:`prompt_key`).
    """
    if len(policies) == 0:
        raise ValueError("give at least one policy to run.")
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
    from transformers import GenerationConfig
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
                raise RuntimeError(f"transformers' manager returned nothing for {timeout:.0f} s")
            if r.status.name == "FINISHED":
                done[r.request_id] = r
    outs = [done[f"r{i}"].generated_tokens for i in range(len(prompts))]
    ends = [done[f"r{i}"].lifespan[1] - t0 for i in range(len(prompts))]
    return outs, ends, now() - t0
