"""Prefill vs decode: the two phases of generation, timed, and the memory bus that explains them.

* **Prefill** runs the whole prompt through the model in one pass: every weight
  matrix multiplies a block of ``P`` token vectors (matrix x matrix), so each
  weight fetched from memory is used ``P`` times.
* **Decode** feeds one token against the cache: every weight matrix multiplies
  a single vector (matrix x vector), so each weight fetched is used once. The
  step cannot be faster than the time to stream all the weights over the
  memory bus: that floor is the *roofline* of a decode step.

The functions here measure both phases (:func:`prefill_sweep`,
:func:`decode_sweep`), the machine's streaming bandwidth
(:func:`stream_bandwidth`), the bytes a decode step must read
(:func:`decode_bytes`) and the fraction of the bandwidth a step achieves
(:func:`bandwidth_fraction`), and stream a reply token by token to time the two
numbers every serving system reports, time to first token and tokens per
second (:func:`stream_reply`, :func:`ttft_sweep`).

Timings are interleaved: every round times each case once, in turn, so a burst
of load from another process hits all cases alike and the *ratios* between
them survive a noisy machine. Rows report the median and the fastest repeat:
noise only ever adds time, so on a shared machine the fastest repeat is the
least disturbed estimate, and the one to compare against a physical limit.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import torch

from . import kv_cache
from .measure import Timing

# --------------------------------------------------------------------------- timing many cases fairly


def interleaved_medians(cases: Mapping[object, Callable[[], object]], repeats: int = 5,
                        warmup: int = 1) -> dict[object, Timing]:
    """Time every case ``repeats`` times in interleaved rounds (after ``warmup`` untimed rounds).

    Returns ``{key: Timing}`` with each case's median. Interleaving makes the
    ratios between cases robust to load that comes and goes.
    """
    if not cases:
        raise ValueError("interleaved_medians needs at least one case to time.")
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats} and {warmup}.")
    for _ in range(warmup):
        for fn in cases.values():
            fn()
    times: dict[object, list[float]] = {k: [] for k in cases}
    for _ in range(repeats):
        for k, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: Timing(statistics.median(v), v, warmup) for k, v in times.items()}


# --------------------------------------------------------------------------- prompts of a given length


def prompt_of_length(base_ids: torch.Tensor, n: int) -> torch.Tensor:
    """Exactly ``n`` token ids (1, n): ``base_ids`` repeated as often as needed, then cut."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"a prompt needs a positive whole number of tokens, got {n!r}.")
    base = base_ids.reshape(1, -1)
    if base.shape[1] == 0:
        raise ValueError("base_ids is empty: pass at least one token id to repeat.")
    reps = -(-n // base.shape[1])
    return base.repeat(1, reps)[:, :n].clone()


def _check_lengths(values: Sequence[int], what: str) -> list[int]:
    values = list(values)
    if not values or any(not isinstance(v, int) or v < 1 for v in values):
        raise ValueError(f"{what} must be a non-empty list of positive whole numbers, got {values!r}.")
    if len(set(values)) != len(values):
        raise ValueError(f"{what} must not repeat a value, got {values!r}.")
    return values


# --------------------------------------------------------------------------- the two phases, timed


@dataclass(frozen=True)
class PrefillRow:
    tokens: int            # P, the prompt length
    seconds: float         # median time of one prefill pass over all P tokens
    spread: float          # (max - min) / median of the repeats
    fastest: float         # the fastest repeat (s)

    @property
    def ms_per_token(self) -> float:
        return 1e3 * self.seconds / self.tokens

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds


def prefill_sweep(model, base_ids: torch.Tensor, lengths: Sequence[int], repeats: int = 3,
                  warmup: int = 1) -> list[PrefillRow]:
    """Table A: one prefill pass over ``P`` tokens for each ``P`` in ``lengths``."""
    lengths = _check_lengths(lengths, "lengths")
    prompts = {p: prompt_of_length(base_ids, p) for p in lengths}
    cases = {p: (lambda ids=ids: kv_cache.prefill(model, ids)) for p, ids in prompts.items()}
    timed = interleaved_medians(cases, repeats=repeats, warmup=warmup)
    return [PrefillRow(p, timed[p].median, timed[p].spread, timed[p].min) for p in lengths]


@dataclass(frozen=True)
class DecodeRow:
    context: int           # C, tokens in the cache when the first timed step ran
    seconds: float         # median time of one decode step (one new token)
    spread: float
    steps: int             # decode steps run against this cache (warm-up included): C grew by this much
    cache_bytes: int       # bytes the cache held at context C
    fastest: float         # the fastest repeat (s)

    @property
    def ms(self) -> float:
        return 1e3 * self.seconds

    @property
    def tokens_per_second(self) -> float:
        return 1.0 / self.seconds


def decode_stepper(model, base_ids: torch.Tensor, context: int):
    """Prefill a cache of ``context`` tokens (untimed) and return ``(step, state)``.

    ``step()`` runs one real decode step: it feeds back the token the previous
    step produced, so the cache grows by one token per call. ``state`` is
    ``[next_token, cache]`` as it stands after the latest step.
    """
    _check_lengths([context], "context")
    state = list(kv_cache.prefill(model, prompt_of_length(base_ids, context)))

    def step():
        state[0], state[1] = kv_cache.decode_step(model, state[0], state[1])

    return step, state


def decode_sweep(model, base_ids: torch.Tensor, contexts: Sequence[int], repeats: int = 5,
                 warmup: int = 1) -> list[DecodeRow]:
    """Table B: one decode step against a cache of ``C`` tokens, for each ``C`` in ``contexts``.

    Each context gets its own cache (prefilled, untimed); each timed step is a
    real decode step that feeds back the token it produced, so the cache grows
    by one token per step (``warmup + repeats`` tokens in all, reported in ``steps``).
    """
    contexts = _check_lengths(contexts, "contexts")
    steppers = {c: decode_stepper(model, base_ids, c) for c in contexts}
    sizes = {c: kv_cache.cache_nbytes(st[1][1]) for c, st in steppers.items()}
    timed = interleaved_medians({c: st[0] for c, st in steppers.items()}, repeats=repeats, warmup=warmup)
    return [DecodeRow(c, timed[c].median, timed[c].spread, warmup + repeats, sizes[c], timed[c].min)
            for c in contexts]


# --------------------------------------------------------------------------- the roofline


@dataclass(frozen=True)
class Bandwidth:
    nbytes: int            # bytes read per repetition
    seconds: float         # fastest time to read them once (the best rate is the limit)
    kind: str              # 'sum' (reduce a vector) or 'gemv' (matrix x vector)

    @property
    def gb_per_s(self) -> float:
        return self.nbytes / self.seconds / 1e9


def stream_reader(nbytes: int, kind: str = "gemv") -> tuple[Callable[[], object], int]:
    """A function that reads about ``nbytes`` of fp32 once per call, and the exact bytes it reads.

    ``kind='sum'`` reduces one long vector (the purest read); ``kind='gemv'``
    multiplies a matrix of that size by one vector, which is exactly what a
    decode step does to every weight matrix. Time it next to other work (with
    :func:`interleaved_medians`) to compare them under the same load.
    """
    if kind not in ("sum", "gemv"):
        raise ValueError(f"kind must be 'sum' or 'gemv', got {kind!r}.")
    if not isinstance(nbytes, int) or nbytes < 4096:
        raise ValueError(f"nbytes must be a whole number of at least 4096 bytes, got {nbytes!r}.")
    cols = 4096
    if kind == "sum":
        buf = torch.ones(nbytes // 4)
        return buf.sum, buf.numel() * 4
    buf = torch.ones(max(1, nbytes // (4 * cols)), cols)
    vec = torch.ones(cols)
    return (lambda: torch.mv(buf, vec)), buf.numel() * 4


def stream_bandwidth(nbytes: int, kind: str = "sum", repeats: int = 5, warmup: int = 1) -> Bandwidth:
    """How fast this machine can stream ``nbytes`` of fp32 from memory: the best of ``repeats``.

    A limit is a best case, so (like the STREAM benchmark) we keep the fastest
    repeat; a slower one only means something else was using the machine.
    Buffers larger than the last-level cache measure main memory; smaller ones
    measure the cache.
    """
    fn, real = stream_reader(nbytes, kind)
    timed = interleaved_medians({0: fn}, repeats=repeats, warmup=warmup)[0]
    return Bandwidth(real, timed.min, kind)


def _tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _quantized_linears(model):
    """Modules that hold packed (quantized) weights, e.g. torch's dynamic int8 Linear."""
    for m in model.modules():
        if hasattr(m, "_packed_params") and callable(getattr(m, "weight", None)):
            yield m


def weights_read_per_step(model: torch.nn.Module) -> int:
    """Bytes of weights one decode step must read: every matrix once.

    The input embedding is the exception: a step looks up one row of it. When
    the embedding is tied to the output head (as in SmolLM2) the head reads the
    whole matrix anyway, so it counts once, in full. Quantized (packed) weights
    count at their stored size: codes plus scales.
    """
    params = {id(p): p for p in model.parameters()}
    total = sum(_tensor_bytes(p) for p in params.values())
    for m in _quantized_linears(model):
        w = m.weight()
        total += w.numel() * w.element_size()
        if w.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
            total += _tensor_bytes(w.q_per_channel_scales()) + _tensor_bytes(w.q_per_channel_zero_points())
        # a per-tensor scheme stores one scale and one zero point per matrix: negligible, not counted
        b = m.bias()
        if b is not None:
            total += _tensor_bytes(b)
    emb = model.get_input_embeddings()
    head = model.get_output_embeddings()
    tied = isinstance(head, torch.nn.Linear) and head.weight is emb.weight
    if not tied:  # only one row of the embedding is read per token
        total -= _tensor_bytes(emb.weight) - emb.weight.shape[1] * emb.weight.element_size()
    return total


@dataclass(frozen=True)
class DecodeBytes:
    weights: int           # weights streamed once per step
    cache: int             # keys and values the new token attends to

    @property
    def total(self) -> int:
        return self.weights + self.cache


def decode_bytes(model: torch.nn.Module, cache=None) -> DecodeBytes:
    """Bytes one decode step must read: all the weights, plus the cache it attends over."""
    return DecodeBytes(weights_read_per_step(model), 0 if cache is None else kv_cache.cache_nbytes(cache))


def roofline_seconds(nbytes: int, gb_per_s: float) -> float:
    """The least time a step that must read ``nbytes`` can take at ``gb_per_s`` GB/s."""
    if nbytes < 0 or gb_per_s <= 0:
        raise ValueError(f"bytes must be >= 0 and bandwidth > 0 GB/s, got {nbytes} and {gb_per_s}.")
    return nbytes / (gb_per_s * 1e9)


def achieved_bandwidth(nbytes: int, seconds: float) -> float:
    """GB/s a step achieved if it read ``nbytes`` in ``seconds``."""
    if nbytes < 0 or seconds <= 0:
        raise ValueError(f"bytes must be >= 0 and the time > 0 s, got {nbytes} and {seconds}.")
    return nbytes / seconds / 1e9


def bandwidth_fraction(nbytes: int, seconds: float, gb_per_s: float) -> float:
    """Achieved bandwidth as a fraction of the limit: roofline time / measured time (1.0 = at the roofline)."""
    if gb_per_s <= 0:
        raise ValueError(f"the bandwidth limit must be > 0 GB/s, got {gb_per_s}.")
    return achieved_bandwidth(nbytes, seconds) / gb_per_s


# --------------------------------------------------------------------------- arithmetic: the other side of the roofline


@dataclass(frozen=True)
class Compute:
    flops: int             # floating-point operations per repetition (a multiply-add counts 2)
    seconds: float

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9


def matmul_peak(n: int = 1024, dtype: torch.dtype = torch.float32, repeats: int = 5, warmup: int = 1) -> Compute:
    """Arithmetic rate of a square matrix product (``n x n`` times ``n x n``), best of ``repeats``: the compute roof."""
    if not isinstance(n, int) or n < 16:
        raise ValueError(f"n must be a whole number of at least 16, got {n!r}.")
    a, b = torch.ones(n, n, dtype=dtype), torch.ones(n, n, dtype=dtype)
    timed = interleaved_medians({0: lambda: a @ b}, repeats=repeats, warmup=warmup)[0]
    return Compute(2 * n ** 3, timed.min)


def prefill_flops(dims, tokens: int) -> int:
    """FLOPs of one prefill pass over ``tokens`` tokens (``dims``: :class:`helpers.attention.Dims`).

    Every token goes through every weight matrix, and token ``i`` attends to
    ``i`` keys (the causal triangle): exactly the work of ``tokens`` cached
    steps, done in one pass.
    """
    if tokens < 1:
        raise ValueError(f"a prefill needs at least 1 token, got {tokens}.")
    pairs = tokens * (tokens + 1) // 2
    return 2 * (tokens * dims.weight_macs_per_token + pairs * dims.attention_macs_per_pair)


def decode_flops(dims, context: int) -> int:
    """FLOPs of one decode step whose new token attends to ``context`` cached tokens and itself."""
    from .attention import macs_step
    if context < 0:
        raise ValueError(f"context must be >= 0 cached tokens, got {context}.")
    return 2 * macs_step(dims, context + 1, cached=True)


def arithmetic_intensity(flops: int, nbytes: int) -> float:
    """FLOPs done per byte read from memory: what decides which roof a computation hits."""
    if nbytes <= 0 or flops < 0:
        raise ValueError(f"bytes must be > 0 and FLOPs >= 0, got {nbytes} and {flops}.")
    return flops / nbytes


def attainable_gflops(intensity: float, peak_gflops: float, gb_per_s: float) -> float:
    """The roofline: the best rate at this intensity is the lower of the compute roof and bandwidth x intensity."""
    if peak_gflops <= 0 or gb_per_s <= 0 or intensity < 0:
        raise ValueError("peak and bandwidth must be > 0 and intensity >= 0.")
    return min(peak_gflops, gb_per_s * intensity)


# --------------------------------------------------------------------------- what the gap is made of


def linear_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Every matrix-vector product of a decode step: the model's Linear layers (plain or quantized)."""
    out = []
    for m in model.modules():
        if isinstance(m, torch.nn.Linear) or hasattr(m, "_packed_params"):
            if hasattr(m, "in_features"):
                out.append(m)
    return out


def tiny_twin(model: torch.nn.Module, head_dim: int = 8, vocab: int = 256) -> torch.nn.Module:
    """A random-init model of the same class, depth and head layout, with tiny matrices.

    It runs the same sequence of operations per step (same layers, norms,
    attention, cache, Python) but has almost no bytes to read, so its decode
    step time is the fixed cost of *running* a step, whatever the weights.
    """
    import copy
    if head_dim < 1 or vocab < 2:
        raise ValueError(f"head_dim must be >= 1 and vocab >= 2, got {head_dim} and {vocab}.")
    cfg = copy.deepcopy(model.config)
    heads = cfg.num_attention_heads
    cfg.head_dim = head_dim
    cfg.hidden_size = heads * head_dim
    cfg.intermediate_size = 2 * cfg.hidden_size
    cfg.vocab_size = vocab
    for name in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
        if isinstance(getattr(cfg, name, None), int) and getattr(cfg, name) >= vocab:
            setattr(cfg, name, 0)
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    torch.manual_seed(0)
    twin = type(model)(cfg).eval()
    return twin.to(next(model.parameters()).dtype)


def matmul_chain(model: torch.nn.Module) -> Callable[[], None]:
    """A function that runs just the decode step's matrix-vector products, one after another.

    Each Linear layer multiplies one vector of its input size; norms,
    attention, rotary embeddings, the cache and the Python around them are left
    out. Timed next to a whole decode step, the difference is what those cost.
    """
    layers = linear_layers(model)
    if not layers:
        raise ValueError("the model has no Linear layers to run.")
    dtype = next(model.parameters()).dtype
    inputs = [torch.randn(1, 1, m.in_features, dtype=dtype if isinstance(m, torch.nn.Linear) else torch.float32)
              for m in layers]

    @torch.inference_mode()
    def chain():
        for m, x in zip(layers, inputs):
            m(x)

    return chain


def matmul_only_seconds(model: torch.nn.Module, repeats: int = 5, warmup: int = 1) -> Timing:
    """Median time of :func:`matmul_chain`: all of a decode step's weight reads, and nothing else."""
    return interleaved_medians({0: matmul_chain(model)}, repeats=repeats, warmup=warmup)[0]


# --------------------------------------------------------------------------- TTFT and tokens per second


@dataclass
class Stream:
    """One reply generated token by token: ``times[i]`` is when token ``i`` was ready (s after the request)."""
    prompt_tokens: int
    tokens: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    @property
    def ttft(self) -> float:
        """Time to first token: the prefill, plus picking the token."""
        if not self.times:
            raise ValueError("the stream produced no token, so it has no time to first token.")
        return self.times[0]

    @property
    def gaps(self) -> list[float]:
        """Seconds between consecutive tokens: one decode step each."""
        return [b - a for a, b in zip(self.times, self.times[1:])]

    @property
    def tokens_per_second(self) -> float:
        """Steady rate after the first token: decode steps per second (median gap, robust to a hiccup)."""
        if len(self.times) < 2:
            raise ValueError("a rate needs at least two tokens: ask for n_new >= 2.")
        return 1.0 / statistics.median(self.gaps)


@torch.inference_mode()
def stream_reply(model, prompt_ids: torch.Tensor, n_new: int, on_token: Callable[[int, float], None] | None = None,
                 stop_ids: Sequence[int] = ()) -> Stream:
    """Greedy generation that reports every token the moment it exists (``on_token(id, seconds)``).

    Stops after ``n_new`` tokens or at a token in ``stop_ids`` (which is kept).
    """
    if not isinstance(n_new, int) or n_new < 1:
        raise ValueError(f"n_new must be a positive whole number of tokens, got {n_new!r}.")
    if prompt_ids.ndim != 2 or prompt_ids.shape[0] != 1 or prompt_ids.shape[1] < 1:
        raise ValueError(f"prompt_ids must be shaped (1, P) with P >= 1, got {tuple(prompt_ids.shape)}.")
    s = Stream(prompt_tokens=int(prompt_ids.shape[1]))
    stop = set(int(t) for t in stop_ids)
    t0 = time.perf_counter()
    nxt, cache = kv_cache.prefill(model, prompt_ids)
    while True:
        t = time.perf_counter() - t0
        tid = int(nxt)
        s.tokens.append(tid)
        s.times.append(t)
        if on_token is not None:
            on_token(tid, t)
        if len(s.tokens) >= n_new or tid in stop:
            return s
        nxt, cache = kv_cache.decode_step(model, nxt, cache)


@dataclass
class TTFTRow:
    """Replies streamed after one prompt length, ``repeats`` times."""
    prompt_tokens: int
    streams: list[Stream]

    @property
    def ttft(self) -> float:
        """Median time to first token over the repeats."""
        return statistics.median(s.ttft for s in self.streams)

    @property
    def fastest_ttft(self) -> float:
        return min(s.ttft for s in self.streams)

    @property
    def gaps(self) -> list[float]:
        """Every decode step of every repeat."""
        return [g for s in self.streams for g in s.gaps]

    @property
    def tokens_per_second(self) -> float:
        """Median steady rate: one over the median gap between tokens, over all repeats."""
        if not self.gaps:
            raise ValueError("a rate needs at least two tokens per reply: ask for n_new >= 2.")
        return 1.0 / statistics.median(self.gaps)

    @property
    def fastest_tokens_per_second(self) -> float:
        """One over the shortest gap: the rate of the least disturbed decode step."""
        if not self.gaps:
            raise ValueError("a rate needs at least two tokens per reply: ask for n_new >= 2.")
        return 1.0 / min(self.gaps)

    @property
    def typical(self) -> Stream:
        """The repeat with the median time to first token (the one to draw)."""
        return sorted(self.streams, key=lambda s: s.ttft)[(len(self.streams) - 1) // 2]


def ttft_sweep(model, base_ids: torch.Tensor, prompt_lengths: Sequence[int], n_new: int = 16,
               repeats: int = 1, warmup: bool = True) -> list[TTFTRow]:
    """Stream ``n_new`` tokens after prompts of each length; TTFT grows with the prompt, the rate barely moves.

    With ``repeats > 1`` the lengths are run in interleaved rounds.
    """
    prompt_lengths = _check_lengths(prompt_lengths, "prompt_lengths")
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive whole number, got {repeats!r}.")
    if warmup:
        stream_reply(model, prompt_of_length(base_ids, min(prompt_lengths)), 2)
    rows = {p: TTFTRow(p, []) for p in prompt_lengths}
    for _ in range(repeats):
        for p in prompt_lengths:
            rows[p].streams.append(stream_reply(model, prompt_of_length(base_ids, p), n_new))
    return [rows[p] for p in prompt_lengths]
