"""Static against continuous batching on paper: a skewed workload and a step-by-step simulator.

Section 4 (notebooks/04-batching.md), part 2.

* :func:`chapter_lengths` / :func:`skewed_lengths` generate seeded, log-normal
  output lengths with the chapter's median, longest and total;
  :func:`poisson_arrivals` spreads arrivals over time;
* :func:`simulate` plays static or continuous batching step by step, each step
  costing what the measured sweep says (:func:`helpers.s04_batching.step_cost_from_sweep`);
* a :class:`Schedule` records when each request was admitted, finished and
  answered; :func:`summary` and :func:`compare` (:func:`gains` for a workload
  simulated both ways) turn it into throughput and latency, and :func:`gantt_figure` draws its slot timeline. The real engine
  (:mod:`helpers.s04_servers`) returns the same :class:`Schedule`.
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field
from typing import Callable, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .infra.chapter import S4_LONGEST as CHAPTER_LONGEST
from .infra.chapter import S4_MEDIAN as CHAPTER_MEDIAN
from .infra.chapter import S4_REQUESTS as CHAPTER_REQUESTS
from .infra.chapter import S4_TOTAL as CHAPTER_TOTAL
from .infra.messages import message
from .infra.plotting import PALETTE

POLICIES = ("static", "continuous")

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
        raise ValueError(message("n must be a positive number of requests, got {n!r}.", n=n))
    if median < 1 or sigma < 0:
        raise ValueError(message("median must be >= 1 token and sigma >= 0, got {median} and {sigma}.",
                                 median=median, sigma=sigma))
    real = [median * math.exp(sigma * z) for z in _normal_quantiles(n)]
    if longest is not None:
        if longest < real[-2]:
            raise ValueError(message("longest={longest} is shorter than the next-longest request ({previous:.0f}): "
                                     "raise it or lower sigma.", longest=longest, previous=real[-2]))
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
        raise ValueError(message("no log-normal spread gives a total of {total} for {n} requests of median {median}.",
                                 total=total, n=n, median=median))
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
        raise ValueError(message("skew must be >= 0 (0 = all requests equally long), got {skew}.", skew=skew))
    sigma = sigma_for_total(n, median, longest, total)
    top = median * (longest / median) ** skew
    return skewed_lengths(n, median, sigma * skew, longest=max(1, round(top)), seed=seed)


def poisson_arrivals(n: int, rate: float, seed: int = 0) -> list[float]:
    """Arrival times of ``n`` requests at ``rate`` per second (seeded exponential gaps); the first at 0."""
    if rate <= 0:
        raise ValueError(message("rate must be positive (requests per second), got {rate}.", rate=rate))
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
        raise ValueError(message("percentile of an empty list: there is nothing to summarize."))
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summary(s: Schedule) -> dict:
    """Throughput and latency statistics of a schedule."""
    lat = s.latency
    return dict(policy=s.policy, slots=s.slots, requests=len(lat), tokens=s.tokens, makespan_s=s.makespan,
                steps=s.steps, padded_steps=s.padded_steps, throughput_tok_s=s.throughput,
                mean_latency_s=statistics.fmean(lat),
                median_latency_s=statistics.median(lat), p95_latency_s=percentile(lat, 95))


def compare(static: Schedule, continuous: Schedule) -> dict:
    """How many times better continuous batching did: throughput up, latencies down."""
    a, b = summary(static), summary(continuous)
    return dict(throughput_x=b["throughput_tok_s"] / a["throughput_tok_s"],
                mean_latency_x=a["mean_latency_s"] / b["mean_latency_s"],
                median_latency_x=a["median_latency_s"] / b["median_latency_s"],
                p95_latency_x=a["p95_latency_s"] / b["p95_latency_s"])


def gains(lengths: Sequence[int], slots: int, step_cost: Callable[[int], float],
          arrivals: Sequence[float] | None = None, padding_costs: bool = True) -> dict:
    """:func:`compare` of the two policies simulated on one workload (``padding_costs`` for the static one)."""
    return compare(simulate(lengths, slots, "static", step_cost, arrivals, padding_costs),
                   simulate(lengths, slots, "continuous", step_cost, arrivals))


def check_workload(lengths: Sequence[int], slots: int, policy: str, arrivals):
    if not isinstance(slots, int) or slots < 1:
        raise ValueError(message("slots must be a whole number >= 1 (the requests one step can hold), got {slots!r}.",
                                 slots=slots))
    if len(lengths) == 0:
        raise ValueError(message("the request queue is empty: give at least one request."))
    if any((not isinstance(n, int)) or n < 1 for n in lengths):
        raise ValueError(message("every request must ask for at least one whole output token."))
    if policy not in POLICIES:
        raise ValueError(message("policy must be one of {policies}, got {policy!r}.", policies=POLICIES, policy=policy))
    if arrivals is not None:
        if len(arrivals) != len(lengths):
            raise ValueError(message("give one arrival time per request ({requests}), got {arrival_times}.",
                                     requests=len(lengths), arrival_times=len(arrivals)))
        if any(b < a for a, b in zip(arrivals, arrivals[1:])) or arrivals[0] < 0:
            raise ValueError(message("arrival times must start at >= 0 and never decrease (requests queue in order)."))


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
    check_workload(lengths, slots, policy, arrivals)
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


# --------------------------------------------------------------------------- figures (thin layers)


def gantt_traces(s: Schedule, show_legend: bool = True, colors=None):
    """Plotly bar traces of a slot timeline: one row per slot, a bar per request (tokens, then padding)."""
    colors = colors or PALETTE
    work_x, work_base, work_y, work_text, work_color = [], [], [], [], []
    pad_x, pad_base, pad_y = [], [], []
    for i, (a, f, r, sl) in enumerate(zip(s.admit, s.finish, s.release, s.slot)):
        work_base.append(a)
        work_x.append(max(f - a, 1e-9))
        work_y.append(message("slot {slot}", slot=sl))
        work_text.append(message("request {request}: {tokens} tokens, waited {wait:.2f} s", request=i,
                                 tokens=s.lengths[i], wait=r - s.arrival[i]))
        work_color.append(colors[i % len(colors)])
        if r - f > 1e-9:
            pad_base.append(f)
            pad_x.append(r - f)
            pad_y.append(message("slot {slot}", slot=sl))
    traces = [go.Bar(x=work_x, base=work_base, y=work_y, orientation="h", marker=dict(color=work_color),
                     hovertext=work_text, hoverinfo="text", name=message("generating"), showlegend=show_legend)]
    if pad_x:
        traces.append(go.Bar(x=pad_x, base=pad_base, y=pad_y, orientation="h",
                             name=message("finished, holding the slot"),
                             marker=dict(color="rgba(120,120,120,0.35)", pattern=dict(shape="/")),
                             hoverinfo="skip", showlegend=show_legend))
    return traces


def gantt_figure(static: Schedule, continuous: Schedule, title: str = "", unit: str = "s"):
    """The two policies' slot timelines one above the other, on the same time axis.

    ``title`` is a sentence already formatted with :func:`helpers.infra.messages.message`.
    """
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=(message("static: done at {seconds:.2f} {unit}", seconds=static.makespan,
                                                unit=unit),
                                        message("continuous: done at {seconds:.2f} {unit}",
                                                seconds=continuous.makespan, unit=unit)))
    for t in gantt_traces(static):
        fig.add_trace(t, row=1, col=1)
    for t in gantt_traces(continuous, show_legend=False):
        fig.add_trace(t, row=2, col=1)
    fig.update_layout(title=title, barmode="overlay", hovermode="closest",
                      height=max(430, 2 * 24 * static.slots + 200))
    fig.update_xaxes(title_text=message("time ({unit})", unit=unit), row=2, col=1)
    fig.update_yaxes(autorange="reversed")
    return fig
