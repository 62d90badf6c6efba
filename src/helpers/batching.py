"""Batching: many requests per decode step, and how to schedule them.

Decode is memory-bound: one step streams every weight once to produce one token.
Put several requests in the same step and that one read serves them all. This
module measures that and schedules requests three ways:

* :func:`decode_step_sweep` times one decode step at several batch sizes and
  :func:`find_knee` finds, from the data, where adding requests stops being
  nearly free;
* :func:`simulate` plays static and continuous batching on paper, with a
  per-step cost taken from the measured sweep (:func:`step_cost_from_sweep`)
  and request lengths from a seeded, skewed generator (:func:`skewed_lengths`);
* :func:`serve` runs the same two policies for real, over the model, with a
  slot batch (:class:`SlotBatch`) whose requests have different lengths: each
  row carries its own attention mask and positions, so every request's greedy
  output is exactly what it produces alone.

Both :func:`simulate` and :func:`serve` return a :class:`Schedule`, so the same
metrics (:func:`summary`) and the same slot-timeline figure
(:func:`gantt_figure`) apply to the paper model and to the real run.
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from . import kv_cache as kc
from .measure import now

POLICIES = ("static", "continuous")

# The chapter's simulated workload (section 4): 64 requests, eight slots.
CHAPTER_REQUESTS, CHAPTER_MEDIAN, CHAPTER_LONGEST, CHAPTER_TOTAL = 64, 18, 231, 1874


# --------------------------------------------------------------------------- the batch-size sweep


@dataclass(frozen=True)
class SweepPoint:
    batch: int
    step_seconds: float        # the fastest round: one decode step for the whole batch
    median_seconds: float      # the median round, for comparison
    spread: float              # (max - min) / median of the rounds: how noisy the machine was

    @property
    def tokens_per_second(self) -> float:
        return self.batch / self.step_seconds


# The cache API stays in the kv_cache adapter; these names are kept for the notebook and tests.
cache_from_kv = kc.cache_from_kv
cache_to_kv = kc.cache_to_kv


@torch.inference_mode()
def decode_step_sweep(model, batch_sizes: Sequence[int], context: int = 64, repeats: int = 5, warmup: int = 1,
                      seed: int = 0, progress: Callable | None = None) -> list[SweepPoint]:
    """Time one decode step for each batch size, every request holding ``context`` tokens of cache.

    The prompt is prefilled once and its keys and values are copied into every
    row (a decode step costs the same whatever the cached numbers are). The
    sizes are timed in interleaved rounds (1, 2, 4, ..., then 1, 2, 4, ...
    again), so a burst of load from another program slows one round of every
    size instead of every repeat of one size. Each size reports its fastest
    round: other programs can only ever add time, so the fastest round is the
    closest to what the step itself costs (the median is kept alongside).
    Each timed call decodes one more token, so the cache grows from ``context``
    to ``context + warmup + repeats``; decode cost hardly depends on context.
    """
    sizes = list(batch_sizes)
    if not sizes or any((not isinstance(b, int)) or b < 1 for b in sizes):
        raise ValueError(f"batch_sizes must be positive whole numbers, got {sizes!r}.")
    if context < 1:
        raise ValueError(f"context must be at least 1 token, got {context}.")
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats} and {warmup}.")
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (1, context), generator=torch.Generator().manual_seed(seed))
    ids = ids.to(next(model.parameters()).device)
    _, one = kc.prefill(model, ids)
    base = cache_to_kv(one)
    caches = [cache_from_kv(model, [(k.repeat(b, 1, 1, 1), v.repeat(b, 1, 1, 1)) for k, v in base]) for b in sizes]
    tokens = [torch.full((b, 1), int(ids[0, -1]), device=ids.device) for b in sizes]
    times: list[list[float]] = [[] for _ in sizes]
    rounds = range(warmup + repeats)
    for r in (progress(rounds) if progress else rounds):
        for j in range(len(sizes)):
            t0 = now()
            kc.decode_step(model, tokens[j], caches[j])
            if r >= warmup:
                times[j].append(now() - t0)
    points = []
    for b, ts in zip(sizes, times):
        med = statistics.median(ts)
        points.append(SweepPoint(b, min(ts), med, (max(ts) - min(ts)) / med))
    return points


def per_doubling_gain(b1: int, thr1: float, b2: int, thr2: float) -> float:
    """Throughput gain from b1 to b2 expressed per doubling of the batch: 2.0 = free, 1.0 = no gain at all."""
    if not 0 < b1 < b2:
        raise ValueError(f"need 0 < b1 < b2, got {b1} and {b2}.")
    return (thr2 / thr1) ** (1.0 / math.log2(b2 / b1))


def find_knee(batches: Sequence[int], step_seconds: Sequence[float], factor: float = 2.0) -> int:
    """The knee: the largest batch measured before the step takes more than ``factor`` times a lone request's step.

    A decode step costs a fixed part (streaming every weight once, launching
    every kernel) plus a part that grows with the batch (the arithmetic for
    each row). While the fixed part dominates, extra requests ride along almost
    free; the knee is where the growing part has caught up with it, so the step
    takes twice as long as for one request (``factor=2``). Past it, latency grows
    with the batch and each doubling buys less throughput. Each point is
    compared with batch 1 only, so one noisy point (other than batch 1) moves
    the knee by at most one batch size. Returns the largest batch if the sweep
    never reaches the knee.
    """
    b = [int(x) for x in batches]
    s = [float(x) for x in step_seconds]
    if len(b) != len(s) or len(b) < 2:
        raise ValueError("find_knee needs at least two (batch, step time) points of equal count.")
    if sorted(set(b)) != b or b[0] < 1:
        raise ValueError("batch sizes must be positive and strictly increasing, starting from the reference batch.")
    if factor <= 1.0:
        raise ValueError(f"factor must exceed 1 (how many times batch 1's latency marks the knee), got {factor}.")
    for i in range(1, len(b)):
        if s[i] > factor * s[0]:
            return b[i - 1]
    return b[-1]


def step_cost_from_sweep(batches: Sequence[int], step_seconds: Sequence[float]) -> Callable[[int], float]:
    """Seconds of one decode step for ``n`` active requests: linear between measured points (and beyond them)."""
    b = [int(x) for x in batches]
    s = [float(x) for x in step_seconds]
    if len(b) != len(s) or len(b) < 2 or sorted(set(b)) != b:
        raise ValueError("step_cost_from_sweep needs two or more strictly increasing batch sizes with one time each.")

    def cost(n: int) -> float:
        if n < 1:
            raise ValueError(f"a step needs at least one active request, got {n}.")
        if n <= b[0]:
            return s[0]            # nothing measured below the first batch size: a step costs at least that
        i = 0
        while i < len(b) - 2 and n > b[i + 1]:
            i += 1
        return s[i] + (s[i + 1] - s[i]) * (n - b[i]) / (b[i + 1] - b[i])

    return cost


# --------------------------------------------------------------------------- a skewed workload


def _normal_quantiles(n: int) -> list[float]:
    nd = statistics.NormalDist()
    return [nd.inv_cdf((i + 0.5) / n) for i in range(n)]


def _round_keeping_total(values: Sequence[float]) -> list[int]:
    """Integers that round ``values`` one by one yet add up to round(sum(values)) (largest remainder)."""
    floors = [math.floor(v) for v in values]
    short = round(sum(values)) - sum(floors)
    order = sorted(range(len(values)), key=lambda i: floors[i] - values[i])  # biggest fraction first
    for i in order[:max(short, 0)]:
        floors[i] += 1
    return floors


def skewed_lengths(n: int = CHAPTER_REQUESTS, median: float = CHAPTER_MEDIAN, sigma: float = 1.0,
                   longest: int | None = None, seed: int = 0) -> list[int]:
    """``n`` output lengths with a long right tail, in a seeded arrival order.

    The lengths follow a log-normal distribution with the given ``median`` and
    log-spread ``sigma``: a length is the product of many independent factors
    (the question, the style, the moment the model decides to stop), and the
    log of a product is a sum, which is normal. Rather than drawing them at
    random, we take the distribution's ``n`` evenly spaced quantiles, so the
    statistics do not depend on luck; ``longest`` (if given) pins the single
    longest request, the way a real trace has one outlier. Rounding keeps the
    total. The ``seed`` only shuffles the order in which the requests arrive,
    which matters to static batching (who ends up next to the outlier).
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive number of requests, got {n!r}.")
    if median < 1 or sigma < 0:
        raise ValueError(f"median must be >= 1 token and sigma >= 0, got {median} and {sigma}.")
    real = [median * math.exp(sigma * z) for z in _normal_quantiles(n)]
    if longest is not None:
        if longest < real[-2]:
            raise ValueError(f"longest={longest} is shorter than the next-longest request ({real[-2]:.0f}): "
                             f"raise it or lower sigma.")
        real[-1] = float(longest)
    lengths = [max(1, x) for x in _round_keeping_total(real)]
    random.Random(seed).shuffle(lengths)
    return lengths


def sigma_for_total(n: int = CHAPTER_REQUESTS, median: float = CHAPTER_MEDIAN, longest: int = CHAPTER_LONGEST,
                    total: int = CHAPTER_TOTAL) -> float:
    """The log-spread that makes :func:`skewed_lengths` add up to ``total`` (bisection on a monotone sum)."""
    def total_at(s):
        real = [median * math.exp(s * z) for z in _normal_quantiles(n)]
        real[-1] = float(longest)
        return sum(real)
    lo, hi = 0.0, 5.0
    if not total_at(lo) <= total <= total_at(hi):
        raise ValueError(f"no log-normal spread gives a total of {total} for {n} requests of median {median}.")
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if total_at(mid) < total else (lo, mid)
    return (lo + hi) / 2


def chapter_lengths(skew: float = 1.0, n: int = CHAPTER_REQUESTS, median: float = CHAPTER_MEDIAN,
                    longest: int = CHAPTER_LONGEST, total: int = CHAPTER_TOTAL, seed: int = 0) -> list[int]:
    """The chapter's workload (median 18, longest 231, total 1,874 at ``skew=1``).

    ``skew`` multiplies the spread of log-lengths: 0 makes every request the
    median, 1 is the chapter, 2 squares every ratio to the median (the longest
    request too).
    """
    if skew < 0:
        raise ValueError(f"skew must be >= 0 (0 = all requests equally long), got {skew}.")
    sigma = sigma_for_total(n, median, longest, total)
    top = median * (longest / median) ** skew
    return skewed_lengths(n, median, sigma * skew, longest=max(1, round(top)), seed=seed)


def poisson_arrivals(n: int, rate: float, seed: int = 0) -> list[float]:
    """Arrival times of ``n`` requests at ``rate`` per second (seeded exponential gaps); the first at 0."""
    if rate <= 0:
        raise ValueError(f"rate must be positive (requests per second), got {rate}.")
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


# --------------------------------------------------------------------------- schedules and their metrics


@dataclass
class Schedule:
    """Who ran where and when. Times in seconds from the start; one entry per request, in request order."""
    policy: str
    slots: int
    lengths: list[int]        # output tokens of each request
    arrival: list[float]
    admit: list[float]        # took a slot
    finish: list[float]       # produced its last token
    release: list[float]      # answer returned and slot freed (static: when the whole batch ends)
    slot: list[int]
    makespan: float
    steps: int                # batched decode steps run
    padded_steps: int = 0     # row-steps spent on requests that had already finished (static padding)
    outputs: dict[int, list[int]] | None = None
    step_log: list[dict] = field(default_factory=list, repr=False)

    @property
    def latency(self) -> list[float]:
        """What each user waited: from arrival to the answer."""
        return [r - a for r, a in zip(self.release, self.arrival)]

    @property
    def tokens(self) -> int:
        return sum(self.lengths)

    @property
    def throughput(self) -> float:
        """Useful (requested) tokens per second over the whole run."""
        return self.tokens / self.makespan


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    xs = sorted(values)
    if not xs:
        raise ValueError("percentile of an empty list: there is nothing to summarize.")
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summary(s: Schedule) -> dict:
    """Throughput and latency statistics of a schedule."""
    lat = s.latency
    return dict(policy=s.policy, slots=s.slots, requests=len(lat), tokens=s.tokens, makespan_s=s.makespan,
                steps=s.steps, throughput_tok_s=s.throughput, mean_latency_s=statistics.fmean(lat),
                median_latency_s=statistics.median(lat), p95_latency_s=percentile(lat, 95))


def compare(static: Schedule, continuous: Schedule) -> dict:
    """How many times better continuous batching did: throughput up, latencies down."""
    a, b = summary(static), summary(continuous)
    return dict(throughput_x=b["throughput_tok_s"] / a["throughput_tok_s"],
                mean_latency_x=a["mean_latency_s"] / b["mean_latency_s"],
                median_latency_x=a["median_latency_s"] / b["median_latency_s"],
                p95_latency_x=a["p95_latency_s"] / b["p95_latency_s"])


def _check_workload(lengths: Sequence[int], slots: int, policy: str, arrivals):
    if not isinstance(slots, int) or slots < 1:
        raise ValueError(f"slots must be a whole number >= 1 (the requests one step can hold), got {slots!r}.")
    if len(lengths) == 0:
        raise ValueError("the request queue is empty: give at least one request.")
    if any((not isinstance(n, int)) or n < 1 for n in lengths):
        raise ValueError("every request must ask for at least one whole output token.")
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}.")
    if arrivals is not None:
        if len(arrivals) != len(lengths):
            raise ValueError(f"give one arrival time per request ({len(lengths)}), got {len(arrivals)}.")
        if any(b < a for a, b in zip(arrivals, arrivals[1:])) or arrivals[0] < 0:
            raise ValueError("arrival times must start at >= 0 and never decrease (requests queue in order).")


# --------------------------------------------------------------------------- the paper model


def simulate(lengths: Sequence[int], slots: int, policy: str, step_cost: Callable[[int], float],
             arrivals: Sequence[float] | None = None, padding_costs: bool = True) -> Schedule:
    """Play a batching policy on paper. Every decode step gives each request in the batch one token.

    * ``static``: when the engine is free, take up to ``slots`` waiting requests and
      step until the longest is done; finished requests keep their slot as
      padding (and are still computed: the step costs ``step_cost(batch)``); every
      answer is returned when the batch ends.
    * ``continuous``: before every step, free slots admit waiting requests; a
      request leaves (and is answered) the step it finishes; a step costs
      ``step_cost(active requests)``.

    All requests arrive at time 0 unless ``arrivals`` is given (seconds, in queue order).
    With ``padding_costs=False`` a static batch stops computing finished rows
    (each step costs ``step_cost(still running)``), though it still cannot reuse
    their slots. Prefill is left out: both policies would pay the same for it.
    """
    _check_workload(lengths, slots, policy, arrivals)
    n = len(lengths)
    arr = list(arrivals) if arrivals is not None else [0.0] * n
    admit, finish, release, slot_of = [0.0] * n, [0.0] * n, [0.0] * n, [0] * n
    t, steps, padded, nxt = 0.0, 0, 0, 0
    log = []
    if policy == "static":
        while nxt < n:
            t = max(t, arr[nxt])
            group = [i for i in range(nxt, n) if arr[i] <= t][:slots]
            nxt = group[-1] + 1
            longest = max(lengths[i] for i in group)
            for j, i in enumerate(group):
                admit[i], slot_of[i] = t, j
                padded += longest - lengths[i]
            for k in range(longest):
                running = sum(lengths[i] > k for i in group)
                log.append(dict(t=t, rows=len(group), active=running))
                t += step_cost(len(group) if padding_costs else running)
                for i in group:
                    if lengths[i] == k + 1:
                        finish[i] = t
            steps += longest
            for i in group:
                release[i] = t
        return Schedule("static", slots, list(lengths), arr, admit, finish, release, slot_of, t, steps, padded,
                        step_log=log)
    active: dict[int, list[int]] = {}          # slot -> [request, tokens still to produce]
    while nxt < n or active:
        if not active and arr[nxt] > t:
            t = arr[nxt]
        for s in range(slots):
            if s not in active and nxt < n and arr[nxt] <= t:
                active[s] = [nxt, lengths[nxt]]
                admit[nxt], slot_of[nxt] = t, s
                nxt += 1
        log.append(dict(t=t, rows=len(active), active=len(active)))
        t += step_cost(len(active))
        steps += 1
        for s in list(active):
            active[s][1] -= 1
            if active[s][1] == 0:
                i = active.pop(s)[0]
                finish[i] = release[i] = t
    return Schedule("continuous", slots, list(lengths), arr, admit, finish, release, slot_of, t, steps, 0,
                    step_log=log)


# --------------------------------------------------------------------------- the real thing


class SlotBatch:
    """Requests of different lengths decoding together in one padded batch.

    Row ``r`` holds one request's keys and values right-aligned in a
    (rows, kv_heads, L, head_dim) tensor per layer, with left padding where it
    is shorter than the longest row. Three things keep every row's arithmetic
    exactly its own:

    * ``mask`` (rows, L): 1 on real cached tokens, 0 on padding, so attention
      never looks at another row's padding;
    * ``length`` (rows,): how many real tokens the row holds, which is the
      position of the next token (rotary embeddings need the true position, not
      the padded column);
    * admitting a request copies its own prefill cache into a new row; removing
      one drops its row and trims columns that became padding for every row.
    """

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
    def add(self, prompt_ids: torch.Tensor) -> int:
        """Prefill one request alone and join it as a new row. Returns its first greedy token."""
        if prompt_ids.dim() != 2 or prompt_ids.shape[0] != 1 or prompt_ids.shape[1] < 1:
            raise ValueError("add() takes one prompt shaped (1, tokens) with at least one token.")
        logits, cache = kc.forward(self.model, prompt_ids, cache=kc.new_cache(self.model))
        first = kc.greedy(logits)
        new = cache_to_kv(cache)
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
            self._cache = cache_from_kv(self.model, self.kv)
        ones = torch.ones(self.rows, 1, dtype=self.mask.dtype, device=self.mask.device)
        mask = torch.cat([self.mask, ones], dim=1)
        logits, self._cache = kc.forward(self.model, self.last, cache=self._cache,
                                         attention_mask=mask, position_ids=self.length[:, None])
        self.kv = cache_to_kv(self._cache)
        self.mask = mask
        self.length = self.length + 1
        self.last_logits = logits[:, -1]
        self.last = kc.greedy(logits)
        return self.last


def padded_rows_are_exact(config) -> bool:
    """Whether :class:`SlotBatch` reproduces every request's solo output exactly on this architecture.

    True when every layer attends to its whole cache. A sliding-window layer's cache is cut to the window by
    transformers when the padded rows are rebuilt, counting padding columns, so a request that joins a wide
    batch can see a different window than it sees alone.
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


def _your_turn_is_over(clock: WorkClock):
    clock.stop()
    yield
    clock.start()


def serving(model, prompts: Sequence[torch.Tensor], lengths: Sequence[int], slots: int, policy: str,
            bar=None, clock: WorkClock | None = None):
    """The scheduler as a generator: it pauses (yields) after every admission and every batched step.

    Drive it with :func:`serve` (one server) or :func:`serve_side_by_side`
    (several servers taking turns). Its :class:`WorkClock` only runs while it
    works, so its times are those of the work alone. Returns a :class:`Schedule`
    (as the generator's return value).
    """
    _check_workload(list(lengths), slots, policy, None)
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
        outputs[i] = [batch.add(prompts[i])]
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
                       policies: Sequence[str] = POLICIES, progress: Callable | None = None) -> dict[str, Schedule]:
    """Run several policies on the same requests, taking turns one admission or step at a time.

    Each server's clock runs only during its own turns. On a machine where
    other programs come and go, a slow spell then lands on both servers' turns
    alike instead of on whichever happened to be running, so their ratio
    survives it. Each turn is still a real, wall-clock-timed piece of work.
    """
    if len(policies) == 0:
        raise ValueError("give at least one policy to run.")
    bar = progress(total=sum(lengths) * len(policies)) if progress else None
    running = {p: serving(model, prompts, lengths, slots, p, bar) for p in policies}
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


@torch.inference_mode()
def solo_outputs(model, prompt: torch.Tensor, n_new: int) -> list[int]:
    """What one request produces alone: prefill, then batch-1 decode steps (the reference for exactness)."""
    return kc.generate_cached(model, prompt, n_new)[0].tolist()


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


# --------------------------------------------------------------------------- figures (thin layers)


def gantt_traces(s: Schedule, show_legend: bool = True, colors=None):
    """Plotly bar traces of a slot timeline: one row per slot, a bar per request (tokens, then padding)."""
    import plotly.graph_objects as go

    from .plotting import PALETTE
    colors = colors or PALETTE
    work_x, work_base, work_y, work_text, work_color = [], [], [], [], []
    pad_x, pad_base, pad_y = [], [], []
    for i, (a, f, r, sl) in enumerate(zip(s.admit, s.finish, s.release, s.slot)):
        work_base.append(a)
        work_x.append(max(f - a, 1e-9))
        work_y.append(f"slot {sl}")
        work_text.append(f"request {i}: {s.lengths[i]} tokens, waited {r - s.arrival[i]:.2f} s")
        work_color.append(colors[i % len(colors)])
        if r - f > 1e-9:
            pad_base.append(f)
            pad_x.append(r - f)
            pad_y.append(f"slot {sl}")
    traces = [go.Bar(x=work_x, base=work_base, y=work_y, orientation="h", marker=dict(color=work_color),
                     hovertext=work_text, hoverinfo="text", name="generating", showlegend=show_legend)]
    if pad_x:
        traces.append(go.Bar(x=pad_x, base=pad_base, y=pad_y, orientation="h", name="finished, holding the slot",
                             marker=dict(color="rgba(120,120,120,0.35)", pattern=dict(shape="/")),
                             hoverinfo="skip", showlegend=show_legend))
    return traces


def gantt_figure(static: Schedule, continuous: Schedule, title: str = "", unit: str = "s"):
    """The two policies' slot timelines one above the other, on the same time axis."""
    from plotly.subplots import make_subplots
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=(f"static: done at {static.makespan:.2f} {unit}",
                                        f"continuous: done at {continuous.makespan:.2f} {unit}"))
    for t in gantt_traces(static):
        fig.add_trace(t, row=1, col=1)
    for t in gantt_traces(continuous, show_legend=False):
        fig.add_trace(t, row=2, col=1)
    fig.update_layout(title=title, barmode="overlay", hovermode="closest",
                      height=max(430, 2 * 24 * static.slots + 200))
    fig.update_xaxes(title_text=f"time ({unit})", row=2, col=1)
    fig.update_yaxes(autorange="reversed")
    return fig
