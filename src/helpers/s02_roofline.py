"""Section 2 (notebooks/02-prefill-decode.md): why decode is slow: the memory bus, the bytes a step reads, and
the roofline.

A decode step multiplies every weight matrix by a single vector, so each
weight fetched from memory is used once. The step cannot be faster than the
time to stream all the weights (and the cache) over the memory bus: that floor
is the *roofline* of a decode step. This module measures the machine's
streaming bandwidth (:func:`stream_bandwidth`) and peak arithmetic
(:func:`matmul_peak`), counts the bytes a step must read (:func:`decode_bytes`)
and its FLOPs (:func:`decode_flops`, :func:`prefill_flops`), and takes the gap
between the roofline and a real step apart (:func:`matmul_chain`, :func:`tiny_twin`;
:func:`gap_checks` reads the claims off those timings). The two yardsticks every
section reads a measurement against are defined once, here: :func:`gb_per_s` and
:func:`gflop_per_s`.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Mapping

import torch

from . import s01_kv_cache as kv_cache
from .infra.model import weight_bytes
from .infra.measure import Timing, interleaved_medians
from .infra.messages import message
from .s01_attention import macs_step

# --------------------------------------------------------------------------- the two yardsticks


def gb_per_s(nbytes: int, seconds: float) -> float:
    """The rate, in GB/s (10**9 bytes per second), of reading ``nbytes`` in ``seconds``."""
    if nbytes < 0 or seconds <= 0:
        raise ValueError(message("bytes must be >= 0 and the time > 0 s, got {nbytes} and {seconds}.",
                                 nbytes=nbytes, seconds=seconds))
    return nbytes / seconds / 1e9


def gflop_per_s(flops: int, seconds: float) -> float:
    """The rate, in GFLOP/s (10**9 floating-point operations per second), of doing ``flops`` in ``seconds``."""
    if flops < 0 or seconds <= 0:
        raise ValueError(message("FLOPs must be >= 0 and the time > 0 s, got {flops} and {seconds}.",
                                 flops=flops, seconds=seconds))
    return flops / seconds / 1e9


# --------------------------------------------------------------------------- the roofline


@dataclass(frozen=True)
class Bandwidth:
    nbytes: int            # bytes read per repetition
    seconds: float         # fastest time to read them once (the best rate is the limit)
    kind: str              # 'sum' (reduce a vector) or 'gemv' (matrix x vector)

    @property
    def gb_per_s(self) -> float:
        return gb_per_s(self.nbytes, self.seconds)


def stream_reader(nbytes: int, kind: str = "gemv") -> tuple[Callable[[], object], int]:
    """A function that reads about ``nbytes`` of fp32 once per call, and the exact bytes it reads.

    ``kind='sum'`` reduces one long vector (the purest read); ``kind='gemv'``
    multiplies a matrix of that size by one vector, which is exactly what a
    decode step does to every weight matrix. Time it next to other work (with
    :func:`interleaved_medians`) to compare them under the same load.
    """
    if kind not in ("sum", "gemv"):
        raise ValueError(message("kind must be 'sum' or 'gemv', got {kind!r}.", kind=kind))
    if not isinstance(nbytes, int) or nbytes < 4096:
        raise ValueError(message("nbytes must be a whole number of at least 4096 bytes, got {nbytes!r}.",
                                 nbytes=nbytes))
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
    total = weight_bytes(model)
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


def roofline_seconds(nbytes: int, bandwidth: float) -> float:
    """The least time a step that must read ``nbytes`` can take at ``bandwidth`` GB/s."""
    if nbytes < 0 or bandwidth <= 0:
        raise ValueError(message("bytes must be >= 0 and bandwidth > 0 GB/s, got {nbytes} and {bandwidth}.",
                                 nbytes=nbytes, bandwidth=bandwidth))
    return nbytes / (bandwidth * 1e9)


def bandwidth_fraction(nbytes: int, seconds: float, limit: float) -> float:
    """Achieved bandwidth as a fraction of the ``limit`` (GB/s): roofline time / measured time (1.0 = at the
    roofline)."""
    if limit <= 0:
        raise ValueError(message("the bandwidth limit must be > 0 GB/s, got {limit}.", limit=limit))
    return gb_per_s(nbytes, seconds) / limit


# --------------------------------------------------------------------------- arithmetic: the other side of the roofline


@dataclass(frozen=True)
class Compute:
    flops: int             # floating-point operations per repetition (a multiply-add counts 2)
    seconds: float

    @property
    def gflop_per_s(self) -> float:
        return gflop_per_s(self.flops, self.seconds)


def matmul_peak(n: int = 1024, dtype: torch.dtype = torch.float32, repeats: int = 5, warmup: int = 1) -> Compute:
    """Arithmetic rate of a square matrix product (``n x n`` times ``n x n``), best of ``repeats``: the compute roof."""
    if not isinstance(n, int) or n < 16:
        raise ValueError(message("n must be a whole number of at least 16, got {n!r}.", n=n))
    a, b = torch.ones(n, n, dtype=dtype), torch.ones(n, n, dtype=dtype)
    timed = interleaved_medians({0: lambda: a @ b}, repeats=repeats, warmup=warmup)[0]
    return Compute(2 * n ** 3, timed.min)


def prefill_flops(dims, tokens: int) -> int:
    """FLOPs of one prefill pass over ``tokens`` tokens (``dims``: :class:`helpers.s01_attention.Dims`).

    Every token goes through every weight matrix, and token ``i`` attends to
    ``i`` keys (the causal triangle): exactly the work of ``tokens`` cached
    steps, done in one pass.
    """
    if tokens < 1:
        raise ValueError(message("a prefill needs at least 1 token, got {tokens}.", tokens=tokens))
    pairs = tokens * (tokens + 1) // 2
    return 2 * (tokens * dims.weight_macs_per_token + pairs * dims.attention_macs_per_pair)


def decode_flops(dims, context: int) -> int:
    """FLOPs of one decode step whose new token attends to ``context`` cached tokens and itself."""
    if context < 0:
        raise ValueError(message("context must be >= 0 cached tokens, got {context}.", context=context))
    return 2 * macs_step(dims, context + 1, cached=True)


def arithmetic_intensity(flops: int, nbytes: int) -> float:
    """FLOPs done per byte read from memory: what decides which roof a computation hits."""
    if nbytes <= 0 or flops < 0:
        raise ValueError(message("bytes must be > 0 and FLOPs >= 0, got {nbytes} and {flops}.",
                                 nbytes=nbytes, flops=flops))
    return flops / nbytes


def attainable_gflops(intensity: float, peak_gflops: float, bandwidth: float) -> float:
    """The roofline: the best rate at this intensity is the lower of the compute roof (GFLOP/s) and
    ``bandwidth`` (GB/s) x intensity."""
    if peak_gflops <= 0 or bandwidth <= 0 or intensity < 0:
        raise ValueError(message("peak and bandwidth must be > 0 and intensity >= 0."))
    return min(peak_gflops, bandwidth * intensity)


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
    if head_dim < 1 or vocab < 2:
        raise ValueError(message("head_dim must be >= 1 and vocab >= 2, got {head_dim} and {vocab}.",
                                 head_dim=head_dim, vocab=vocab))
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
        raise ValueError(message("the model has no Linear layers to run."))
    dtype = next(model.parameters()).dtype
    inputs = [torch.randn(1, 1, m.in_features, dtype=dtype if isinstance(m, torch.nn.Linear) else torch.float32)
              for m in layers]

    @torch.inference_mode()
    def chain():
        for m, x in zip(layers, inputs):
            m(x)

    return chain



def gap_checks(parts: Mapping[str, Timing], stream_bytes: int, step_bytes: int, floor: float = 0.8) -> dict:
    """The claims read off the gap's timings (``{"stream", "matmuls", "step"}``, fastest repeats), for
    :func:`helpers.measure_checked`: the bandwidth is the best rate ``stream`` read its ``stream_bytes`` at, the
    roofline a step's ``step_bytes`` at that rate. The matrix-vector products alone take over ``floor`` of the
    roofline (they cannot beat the bus), and a whole step takes longer than its matrix-vector products."""
    roof = roofline_seconds(step_bytes, gb_per_s(stream_bytes, parts["stream"].min))
    ms = {k: 1e3 * parts[k].min for k in ("matmuls", "step")}
    return {"roof": (ms["matmuls"] > floor * 1e3 * roof, "the model's matrix-vector products take over {floor:.0%} "
                     "of the roofline: they cannot read the weights faster than the bus allows",
                     "{matmuls_ms:.1f} ms against a roofline of {roof_ms:.1f} ms",
                     dict(floor=floor, matmuls_ms=ms["matmuls"], roof_ms=1e3 * roof)),
            "step": (ms["step"] > ms["matmuls"], "a whole step costs more than its matrix-vector products",
                     "{step_ms:.1f} ms against {matmuls_ms:.1f} ms",
                     dict(step_ms=ms["step"], matmuls_ms=ms["matmuls"]))}
