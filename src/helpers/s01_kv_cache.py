"""Section 1 (notebooks/01-kv-cache.md): the KV cache: the naive loop, the cached loop, both timed and their memory
watched, and one adapter over transformers' cache API.

transformers 5 renamed the forward argument ``past_key_values`` to ``cache``,
replaced ``key_cache``/``value_cache`` lists by ``cache.layers[i].keys`` and
changed ``crop``'s sign convention. Every notebook touches the cache only
through the functions in the "adapter" block below, so the next rename is
fixed here, once. Later sections reach the cache only through this module too.
"""
from __future__ import annotations

import inspect
from typing import NamedTuple

import torch
from transformers import DynamicCache

from .infra.measure import now, peak_memory, progress
from .infra.messages import message

# --------------------------------------------------------------------------- adapter


def _cache_kwarg(model) -> str:
    """Name of the forward() argument that carries the cache in this transformers version."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def new_cache(model=None):
    """An empty dynamic (growing) cache."""
    return DynamicCache(config=model.config) if model is not None else DynamicCache()


def rollback_cache(model=None):
    """An empty cache that can be cropped back (speculative decoding, section 8), sliding-window layers included.

    transformers' sliding-window layers drop tokens older than the window unless told to record them.
    """
    cache = new_cache(model)
    if hasattr(cache, "activate_past_recording"):
        cache.activate_past_recording()
    return cache


@torch.inference_mode()
def forward(model, ids: torch.Tensor, cache=None, **kwargs):
    """One forward pass with no autograd bookkeeping; returns (logits, cache). ``cache=None`` runs without a cache."""
    if cache is None:
        out = model(ids, use_cache=False, **kwargs)
        return out.logits, None
    out = model(ids, use_cache=True, **{_cache_kwarg(model): cache}, **kwargs)
    returned = out.get("cache", None) if hasattr(out, "get") else None
    if returned is None:
        returned = getattr(out, "past_key_values", None)
    return out.logits, returned if returned is not None else cache


def cache_length(cache) -> int:
    """Tokens held in the cache (per sequence)."""
    return int(cache.get_seq_length())


def num_cache_layers(cache) -> int:
    return len(cache.layers)


def layer_kv(cache, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values of layer ``i``, each shaped (batch, kv_heads, tokens, head_dim)."""
    layer = cache.layers[i]
    return layer.keys, layer.values


def cache_nbytes(cache) -> int:
    """Bytes the allocator holds for every K and V tensor in the cache."""
    total = 0
    for i in range(num_cache_layers(cache)):
        for t in layer_kv(cache, i):
            if t is not None and t.numel():
                total += t.numel() * t.element_size()
    return total


def cache_from_kv(model, kv) -> object:
    """A fresh cache holding the given per-layer (K, V) tensors, each (batch, kv_heads, tokens, head_dim)."""
    cache = new_cache(model)
    for i, (k, v) in enumerate(kv):
        cache.update(k, v, i)
    return cache


def cache_to_kv(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every layer's (K, V), in order."""
    return [layer_kv(cache, i) for i in range(num_cache_layers(cache))]


def repeat_rows(model, cache, times: int) -> object:
    """A new cache whose batch is every row of ``cache`` repeated ``times`` times (row order: all of them, then
    all again, as :meth:`torch.Tensor.repeat`): one prefilled prompt serves ``times`` requests without a copy
    per request being computed. The source cache is left as it was."""
    if not isinstance(times, int) or isinstance(times, bool) or times < 1:
        raise ValueError(message("a cache row is repeated a positive whole number of times, got {times!r}.",
                                 times=times))
    return cache_from_kv(model, [(k.repeat(times, 1, 1, 1), v.repeat(times, 1, 1, 1)) for k, v in cache_to_kv(cache)])


def crop_cache(cache, keep: int) -> None:
    """Keep only the first ``keep`` tokens of every layer (in place)."""
    if keep < 0:
        raise ValueError(message("keep must be >= 0 tokens, got {keep}.", keep=keep))
    drop = cache_length(cache) - keep
    if drop <= 0:
        return
    try:
        cache.crop(-drop)      # transformers >= 5: a negative count of tokens to remove
    except ValueError:
        cache.crop(keep)       # transformers 4: the absolute length to keep


# --------------------------------------------------------------------------- the loops


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """Next token (batch, 1) from the last position's logits."""
    return logits[:, -1].argmax(-1, keepdim=True)


@torch.inference_mode()
def prefill(model, prompt_ids: torch.Tensor):
    """Run the whole prompt once; returns (next_token, cache)."""
    logits, cache = forward(model, prompt_ids, cache=new_cache(model))
    return greedy(logits), cache


@torch.inference_mode()
def decode_step(model, token: torch.Tensor, cache):
    """Feed one token per sequence against the cache; returns (next_token, cache)."""
    logits, cache = forward(model, token, cache=cache)
    return greedy(logits), cache


def _check_n(n_new: int) -> None:
    if not isinstance(n_new, int) or n_new < 1:
        raise ValueError(message("n_new must be a positive whole number of tokens, got {n_new!r}.", n_new=n_new))


@torch.inference_mode()
def generate_naive(model, prompt_ids: torch.Tensor, n_new: int) -> torch.Tensor:
    """The slow run: feed the whole sequence every step. Returns the new tokens (batch, n_new)."""
    _check_n(n_new)
    ids = prompt_ids
    for _ in range(n_new):
        logits, _ = forward(model, ids)
        ids = torch.cat([ids, greedy(logits)], dim=1)
    return ids[:, prompt_ids.shape[1]:]


@torch.inference_mode()
def generate_cached(model, prompt_ids: torch.Tensor, n_new: int) -> torch.Tensor:
    """The fast run: prefill once, then one token per step. Returns the new tokens (batch, n_new)."""
    _check_n(n_new)
    nxt, cache = prefill(model, prompt_ids)
    out = [nxt]
    for _ in range(n_new - 1):
        nxt, cache = decode_step(model, nxt, cache)
        out.append(nxt)
    return torch.cat(out, dim=1)


@torch.inference_mode()
def timed_generate(model, prompt_ids: torch.Tensor, n_new: int, cached: bool):
    """Generate greedily and time every step. Returns (new tokens (batch, n_new), seconds per step).

    Step 0 of the cached run is the prefill; the naive run has no such split.
    """
    _check_n(n_new)
    ids, cache, times = prompt_ids, None, []
    nxt = None
    for i in range(n_new):
        t0 = now()
        if cached:
            nxt, cache = prefill(model, prompt_ids) if i == 0 else decode_step(model, nxt, cache)
        else:
            logits, _ = forward(model, ids)
            nxt = greedy(logits)
        times.append(now() - t0)
        ids = torch.cat([ids, nxt], dim=1)
    return ids[:, prompt_ids.shape[1]:], times


class StepLine(NamedTuple):
    """A straight line fitted to a run's step times (seconds): its value at the first and the last step, and
    ``per_step``, what each generated token adds to the next step."""
    first: float
    last: float
    per_step: float

    @property
    def growth(self) -> float:
        """How many times longer the last step is than the first, on the line."""
        return self.last / self.first


def step_line(seconds) -> StepLine:
    """A least-squares line through every step's time but step 0 (in a cached run, the prefill).

    A line over many steps shrugs off the odd slow step that a busy machine throws in; comparing two single
    steps would not.
    """
    y = torch.as_tensor(seconds, dtype=torch.float64)[1:]
    if len(y) < 2:
        raise ValueError(message("a fitted line needs at least 3 steps, got {needed}.", needed=len(y) + 1))
    x = torch.arange(1, len(y) + 1, dtype=torch.float64)
    slope = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()
    first, last = y.mean() + slope * (x[0] - x.mean()), y.mean() + slope * (x[-1] - x.mean())
    return StepLine(first.item(), last.item(), slope.item())


def log_log_slope(sizes, seconds) -> float:
    """The exponent ``k`` of the best power law ``seconds ~ size ** k`` (a straight line on a log-log plot)."""
    x = torch.log(torch.as_tensor(sizes, dtype=torch.float64))
    y = torch.log(torch.as_tensor(seconds, dtype=torch.float64))
    if len(x) < 2 or len(x) != len(y):
        raise ValueError(message("log_log_slope needs at least two (size, time) pairs of equal length."))
    return (((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()).item()


# --------------------------------------------------------------------------- the two loops timed


def timed_runs(model, prompt_ids: torch.Tensor, n_new: int, expected: torch.Tensor, repeats: int = 2):
    """Time both loops step by step, after one warm-up each, taking turns: a burst of work elsewhere slows one run
    of each loop, not both runs of one. Every run's tokens must be ``expected`` (batch, n_new) exactly.

    Returns (naive, cached): seconds per step, each shaped (repeats, n_new)."""
    for cached in (False, True):
        timed_generate(model, prompt_ids, min(4, n_new), cached)           # warm-up
    runs = {False: [], True: []}
    for _ in progress(range(repeats), desc=message("naive and cached, taking turns")):
        for cached in (False, True):
            tokens, seconds = timed_generate(model, prompt_ids, n_new, cached)
            if not torch.equal(tokens, expected):
                raise AssertionError("a timed run generated other tokens than the cached loop")
            runs[cached].append(seconds)
    return torch.tensor(runs[False]), torch.tensor(runs[True])


def pool_runs(earlier, fresh):
    """``measure_checked``'s ``combine`` for :func:`timed_runs`: each loop's fresh runs stacked under its earlier."""
    return tuple(torch.cat([a, b]) for a, b in zip(earlier, fresh))


def fastest_steps(runs: torch.Tensor) -> torch.Tensor:
    """The fastest run of every step (runs, steps) -> (steps,): other programs only ever add time."""
    return runs.min(dim=0).values


def timing_checks(runs_naive: torch.Tensor, runs_cached: torch.Tensor) -> dict:
    """The claims the timed runs must bear out, on the fastest run of every step:
    ``{name: (holds, statement, evidence, fields)}``, for ``measure_checked`` and ``claim``.

    * "speed-up": after n tokens the cache is more than 1.5x faster, and more than 1.25 times its speed-up after 8;
    * "naive": on the fitted line, the last naive step is more than 1.2 times the first;
    * "cached": one more token of context adds to a cached step under a quarter of what it adds to a naive one
      (the lines' slopes: a machine that slows down mid-run tilts both alike).
    """
    naive, cached = fastest_steps(runs_naive), fastest_steps(runs_cached)
    if naive.shape != cached.shape or len(naive) < 8:
        raise ValueError(message("timing_checks needs both loops' runs over the same 8 or more steps, got "
                                 "{naive_shape} and {cached_shape}.",
                                 naive_shape=tuple(naive.shape), cached_shape=tuple(cached.shape)))
    speedup = naive.cumsum(0) / cached.cumsum(0)
    s8, s_n = speedup[7].item(), speedup[-1].item()
    line_naive, line_cached = step_line(naive), step_line(cached)
    return {"speed-up": (s_n > 1.5 and s_n > 1.25 * s8,
                         "after {n} tokens the cache is over 1.5x faster and over 1.25 times its speed-up after 8",
                         "{s8:.1f}x after 8 tokens, {s_n:.1f}x after {n}", dict(s8=s8, s_n=s_n, n=len(speedup))),
            "naive": (line_naive.growth > 1.2, "the last naive step is over 1.2 times the first, on the fitted line",
                      "{growth:.2f}x", dict(growth=line_naive.growth)),
            "cached": (line_cached.per_step < 0.25 * line_naive.per_step,
                       "one more token of context adds under a quarter as much to a cached step as to a naive one",
                       "{naive_ms:+.3f} ms naive, {cached_ms:+.4f} ms cached",
                       dict(naive_ms=line_naive.per_step * 1e3, cached_ms=line_cached.per_step * 1e3))}


# --------------------------------------------------------------------------- the two loops' memory


def naive_tail_peak(model, prompt_ids: torch.Tensor, generated: torch.Tensor) -> int:
    """Peak extra bytes of the naive loop's last two steps, given the tokens it generated before them (the loop
    keeps one step's logits alive while it computes the next ones). Its peak is there: each step frees what the
    step before allocated, and the steps only get bigger."""
    ids = torch.cat([prompt_ids, generated], dim=1)
    return peak_memory(lambda: generate_naive(model, ids, 2)).extra_bytes


def cached_loop_peak(model, prompt_ids: torch.Tensor, n_new: int, watch: str = "all", skip_with=None) -> dict:
    """Generate ``n_new`` tokens with the cache, watching the memory of every step (``watch="all"``) or of the
    prefill and the last two steps only (``"ends"``).

    With ``skip_with`` (token ids, ``"ends"`` only), one prefill of the prompt, the first token and the first
    ``n_new - 4`` of those ids stands in for the unwatched steps in between: a step's memory depends on how many
    tokens the cache holds, not on which. Returns ``peak`` (extra bytes), ``last`` (those of the last two steps;
    None when watching all), ``tokens`` (batch, n_new) and ``cache`` (the finished cache's bytes).
    """
    _check_n(n_new)
    if watch not in ("all", "ends") or (watch == "ends" and n_new < 4) or (skip_with is not None and watch != "ends"):
        raise ValueError(message("watch 'all', or 'ends' over at least 4 tokens (skip_with only with 'ends'); got "
                                 "watch={watch!r} over {n_new} tokens.", watch=watch, n_new=n_new))
    out, state = [], {}

    def steps(k):
        bar = progress(range(k), desc=message("cached, {n} tokens", n=n_new)) if k > 32 else range(k)
        for _ in bar:
            if not out:
                nxt, state["cache"] = prefill(model, prompt_ids)
            else:
                nxt, state["cache"] = decode_step(model, out[-1], state["cache"])
            out.append(nxt)

    if watch == "all":
        peak, last = peak_memory(lambda: steps(n_new)).extra_bytes, None
    else:
        first = peak_memory(lambda: steps(1)).extra_bytes
        if skip_with is None:
            steps(n_new - 3)
        else:                                       # the cache as n_new - 3 more steps would leave it, in one pass
            filler = skip_with[:, :n_new - 4]
            nxt, state["cache"] = prefill(model, torch.cat([prompt_ids, out[0], filler], dim=1))
            out += [filler, nxt]
        last = peak_memory(lambda: steps(2)).extra_bytes
        peak = max(first, last)
    return dict(peak=peak, last=last, tokens=torch.cat(out, dim=1), cache=cache_nbytes(state["cache"]))
