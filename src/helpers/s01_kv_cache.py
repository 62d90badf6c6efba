"""Section 1 (notebooks/01-kv-cache.md): the KV cache: the naive loop, the cached loop, and one adapter over
transformers' cache API.

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

from .infra.measure import now

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
        raise ValueError(f"a cache row is repeated a positive whole number of times, got {times!r}.")
    return cache_from_kv(model, [(k.repeat(times, 1, 1, 1), v.repeat(times, 1, 1, 1)) for k, v in cache_to_kv(cache)])


def crop_cache(cache, keep: int) -> None:
    """Keep only the first ``keep`` tokens of every layer (in place)."""
    if keep < 0:
        raise ValueError(f"keep must be >= 0 tokens, got {keep}.")
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
        raise ValueError(f"n_new must be a positive whole number of tokens, got {n_new!r}.")


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
        raise ValueError(f"a fitted line needs at least 3 steps, got {len(y) + 1}.")
    x = torch.arange(1, len(y) + 1, dtype=torch.float64)
    slope = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()
    first, last = y.mean() + slope * (x[0] - x.mean()), y.mean() + slope * (x[-1] - x.mean())
    return StepLine(first.item(), last.item(), slope.item())


def log_log_slope(sizes, seconds) -> float:
    """The exponent ``k`` of the best power law ``seconds ~ size ** k`` (a straight line on a log-log plot)."""
    x = torch.log(torch.as_tensor(sizes, dtype=torch.float64))
    y = torch.log(torch.as_tensor(seconds, dtype=torch.float64))
    if len(x) < 2 or len(x) != len(y):
        raise ValueError("log_log_slope needs at least two (size, time) pairs of equal length.")
    return (((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()).item()
