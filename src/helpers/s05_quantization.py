"""Weight quantization, section 5 (notebooks/05-weight-quantization.md): each weight in a few bits, plus bookkeeping.

Every scheme in the chapter is the same three moves: cut the tensor into *blocks* that share one scale, map each
weight to the nearest of a few *levels*, keep the level indices (the codes) and the scales. They differ in how big a
block is (granularity) and where the levels sit.

Granularity (the ``axis`` and ``group_size`` keywords, the same everywhere)

* ``axis=None, group_size=None``: one scale for the whole tensor (per-tensor);
* ``axis=-1``: one scale per row, i.e. per output channel of a ``Linear`` weight (per-row). ``axis`` is the axis the
  maximum is taken over, so ``axis=0`` on activations shaped (tokens, dims) gives one scale per dimension;
* ``axis=-1, group_size=g``: groups of ``g`` consecutive weights inside each row; ``g`` must divide the row;
* ``axis=None, group_size=g``: blocks of ``g`` consecutive weights of the flattened tensor, the way bitsandbytes and
  GGUF lay blocks out in memory; ``g`` must divide the number of weights. When ``g`` divides the row the two agree
  exactly. (A row 576 wide, as in SmolLM2's q_proj, is not a multiple of 128: the chapter's "group of 128" therefore
  uses flat blocks.)

Schemes

* :func:`absmax_quantize` / :func:`dequantize`: symmetric, integer codes in ``[-2**(bits-1), 2**(bits-1)-1]``,
  ``w ~ q * scale``, 2 to 8 bits;
* :func:`asymmetric_quantize`: unsigned codes and an integer zero point, ``w ~ (q - zero_point) * scale``;
* :func:`nf4_levels`, :func:`nf4_quantize`: NormalFloat4 (QLoRA), 16 levels at quantiles of the normal distribution,
  absmax-scaled blocks (64 by default);
* GGML's Q4_1, our reference's format (blocks of 32, ``w ~ q * d + m``, 5 bits per weight), is defined with the
  other GGUF block formats in :mod:`helpers.s05_gguf`; a :class:`Scheme` of kind ``"q4_1"`` uses it;
* :func:`bits_per_weight`: the bookkeeping (bytes at those bits: :func:`helpers.infra.model.weight_bytes_at`);
* :func:`relative_error`: ``||W - W_hat|| / ||W||``;
* :class:`Scheme`, :func:`projection_weights`, :func:`relative_errors`, :func:`quantized_projections`: apply a
  scheme to every projection matrix of a model.
"""
from __future__ import annotations

import contextlib
import math
import numbers
from dataclasses import dataclass
from typing import Iterator

import torch

from .infra.messages import message
from .s05_gguf import Q4_1_BLOCK, q4_1_dequantize, q4_1_quantize
from .s05_quant_blocks import Layout, apply_blockwise, check_bits, check_weights


# --------------------------------------------------------------------------- symmetric absmax


def absmax_quantize(w: torch.Tensor, bits: int = 8, axis: int | None = None, group_size: int | None = None):
    """Symmetric absmax quantization: returns (integer codes as int8, scale).

    ``scale = max|w| / (2**(bits-1) - 1)`` per block, ``q = round(w / scale)``;
    ``dequantize(q, scale)`` reconstructs. The scale has one entry per block
    (see the module docstring for ``axis`` and ``group_size``). A block of
    zeros gets scale 0 and codes 0.
    """
    check_bits(bits)
    w = check_weights(w)
    lay = Layout(w.shape, axis, group_size)
    qmax = 2 ** (bits - 1) - 1
    b = lay.to_blocks(w)
    scale = b.abs().amax(dim=1, keepdim=True) / qmax
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = (b / safe).round_().clamp_(-qmax - 1, qmax)
    return lay.from_blocks(q.to(torch.int8)), lay.stat_from_blocks(scale)


def dequantize(q: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None = None) -> torch.Tensor:
    """Codes back to fp32: ``q * scale``, or ``(q - zero_point) * scale`` for asymmetric codes."""
    qf = q.to(torch.float32, copy=True)
    if zero_point is not None:
        qf = apply_blockwise(qf, zero_point, lambda a, z: a - z.to(torch.float32))
    return apply_blockwise(qf, scale, lambda a, s: a.mul_(s))


# --------------------------------------------------------------------------- asymmetric (zero point)


def asymmetric_quantize(w: torch.Tensor, bits: int = 8, axis: int | None = None, group_size: int | None = None):
    """Asymmetric (affine) quantization: returns (codes as uint8, scale, zero_point as int32).

    The range ``[min(w, 0), max(w, 0)]`` of each block is split into ``2**bits - 1``
    steps; ``zero_point`` is the code that stands for 0.0 (so zero stays exact,
    as in PyTorch's observers). ``dequantize(q, scale, zero_point)`` reconstructs.
    """
    check_bits(bits)
    w = check_weights(w)
    lay = Layout(w.shape, axis, group_size)
    qmax = 2 ** bits - 1
    b = lay.to_blocks(w)
    lo = b.amin(dim=1, keepdim=True).clamp(max=0)
    hi = b.amax(dim=1, keepdim=True).clamp(min=0)
    scale = (hi - lo) / qmax
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    zero = torch.round(-lo / safe).clamp(0, qmax)
    q = (torch.round(b / safe) + zero).clamp(0, qmax)
    return (lay.from_blocks(q.to(torch.uint8)), lay.stat_from_blocks(scale),
            lay.stat_from_blocks(zero.to(torch.int32)))


# --------------------------------------------------------------------------- codebooks: NF4 and friends

# The NF4 table as published with QLoRA (Dettmers et al. 2023, appendix E) and shipped in bitsandbytes.
NF4_PUBLISHED = (
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
)
# The outermost quantile: halfway between 1 - 1/(2*15) and 1 - 1/(2*16) (the quantile 1.0 itself is infinite).
NF4_OFFSET = 0.5 * ((1 - 1 / (2 * 15)) + (1 - 1 / (2 * 16)))


def nf4_levels(offset: float = NF4_OFFSET) -> torch.Tensor:
    """The 16 NF4 levels, computed from quantiles of the standard normal distribution.

    Eight positive levels at quantiles evenly spaced in probability from 0.5 to
    ``offset``, seven negative ones the same way, and an exact zero; divided by
    the largest so they span [-1, 1]. Dense near zero, where most weights are.
    """
    if not 0.5 < offset < 1.0:
        raise ValueError(message("offset must lie strictly between 0.5 and 1, got {offset}.", offset=offset))
    pos = torch.special.ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64))[:-1]
    neg = -torch.special.ndtri(torch.linspace(offset, 0.5, 8, dtype=torch.float64))[:-1]
    v = torch.cat([neg, torch.zeros(1, dtype=torch.float64), pos]).sort().values
    return (v / v.max()).to(torch.float32)


def uniform_levels(bits: int) -> torch.Tensor:
    """The levels of symmetric absmax at ``bits``, as a codebook on [-1, 1]: k / (2**(bits-1) - 1)."""
    check_bits(bits)
    qmax = 2 ** (bits - 1) - 1
    return torch.arange(-qmax - 1, qmax + 1, dtype=torch.float32) / qmax


def codebook_quantize(w: torch.Tensor, levels: torch.Tensor, axis: int | None = None,
                      group_size: int | None = 64):
    """Absmax-scaled blocks rounded to the nearest of arbitrary ``levels`` on [-1, 1].

    Returns (level indices as uint8, absmax per block). NF4 is this with
    :func:`nf4_levels`; symmetric absmax is this with :func:`uniform_levels`.
    """
    w = check_weights(w)
    levels = torch.as_tensor(levels, dtype=torch.float32, device=w.device)
    if levels.ndim != 1 or not 2 <= levels.numel() <= 256:
        raise ValueError(message("levels must be a 1-d list of 2 to 256 values, got shape {shape}.",
                                 shape=tuple(levels.shape)))
    if not torch.all(levels[1:] > levels[:-1]):
        raise ValueError(message("levels must be sorted in increasing order with no repeats."))
    lay = Layout(w.shape, axis, group_size)
    b = lay.to_blocks(w)
    absmax = b.abs().amax(dim=1, keepdim=True)
    safe = torch.where(absmax > 0, absmax, torch.ones_like(absmax))
    mid = (levels[1:] + levels[:-1]) / 2          # nearest level = how many midpoints lie below x
    x = b / safe
    if mid.numel() <= 32:                           # a few comparisons beat a binary search here
        idx = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
        above = torch.empty(x.shape, dtype=torch.bool, device=x.device)
        for m in mid.tolist():
            idx.add_(torch.gt(x, m, out=above).view(torch.uint8))
    else:
        idx = torch.bucketize(x, mid).to(torch.uint8)
    return lay.from_blocks(idx), lay.stat_from_blocks(absmax)


def codebook_dequantize(idx: torch.Tensor, absmax: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    levels = torch.as_tensor(levels, dtype=torch.float32, device=idx.device)
    vals = levels.index_select(0, idx.reshape(-1).int()).reshape(idx.shape)   # a table lookup per weight
    return apply_blockwise(vals, absmax, lambda a, s: a.mul_(s))


def nf4_quantize(w: torch.Tensor, group_size: int | None = 64, axis: int | None = None):
    """NF4: absmax blocks (64 weights by default) rounded to the nearest NF4 level; returns (indices, absmax)."""
    return codebook_quantize(w, nf4_levels(), axis=axis, group_size=group_size)


def nf4_dequantize(idx: torch.Tensor, absmax: torch.Tensor) -> torch.Tensor:
    return codebook_dequantize(idx, absmax, nf4_levels())


# --------------------------------------------------------------------------- bookkeeping and error


def bits_per_weight(bits: int, group_size: int | None = None, scale_bits: int = 16, zero_bits: int = 0) -> float:
    """Storage cost per weight: the code plus its block's share of the scale (and zero point / minimum).

    ``bits_per_weight(4, 128) == 4.125``; NF4 blocks of 64: 4.25; Q4_1:
    ``bits_per_weight(4, 32, zero_bits=16) == 5.0``. ``group_size=None`` means
    the bookkeeping is negligible (one scale for a whole tensor).
    """
    check_bits(bits, 1, 32)
    if group_size is None:
        return float(bits)
    if isinstance(group_size, bool) or not isinstance(group_size, numbers.Integral) or group_size < 1:
        raise ValueError(message("group_size must be a positive integer or None, got {group_size!r}.",
                                 group_size=group_size))
    return bits + (scale_bits + zero_bits) / group_size


def relative_error(w: torch.Tensor, w_hat: torch.Tensor) -> float:
    """``||W - W_hat|| / ||W||`` (Frobenius norms): 0 is perfect, 1 is as bad as replacing W by zeros."""
    if w.shape != w_hat.shape:
        raise ValueError(message("Shapes differ: {w_shape} vs {w_hat_shape}; compare a tensor with its own "
                                 "reconstruction.", w_shape=tuple(w.shape), w_hat_shape=tuple(w_hat.shape)))
    w = w.float()
    norm = torch.linalg.vector_norm(w)
    if norm == 0:
        raise ValueError(message("The reference tensor is all zeros, so a relative error is undefined."))
    return float(torch.linalg.vector_norm(w - w_hat.float()) / norm)


# --------------------------------------------------------------------------- schemes over a model

KINDS = ("absmax", "asymmetric", "nf4", "q4_1")


@dataclass(frozen=True)
class Scheme:
    """One way to quantize a weight matrix, by name: ``Scheme('int4 g128', 'absmax', 4, None, 128)``."""
    name: str
    kind: str = "absmax"
    bits: int = 8
    axis: int | None = None
    group_size: int | None = None
    scale_bits: int = 16

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(message("kind must be one of {kinds}, got {kind!r}.", kinds=KINDS, kind=self.kind))
        if self.kind in ("nf4", "q4_1") and self.bits != 4:
            raise ValueError(message("{kind} is a 4-bit format: set bits to 4.", kind=self.kind.upper()))
        check_bits(self.bits)

    def fake_quantize(self, w: torch.Tensor) -> torch.Tensor:
        """Quantize and dequantize: the fp32 weights a model would compute with."""
        if self.kind == "absmax":
            return dequantize(*absmax_quantize(w, self.bits, self.axis, self.group_size))
        if self.kind == "asymmetric":
            return dequantize(*asymmetric_quantize(w, self.bits, self.axis, self.group_size))
        if self.kind == "nf4":
            return nf4_dequantize(*nf4_quantize(w, self.group_size, self.axis))
        return q4_1_dequantize(*q4_1_quantize(w))

    def weights_per_scale(self, shape) -> int:
        shape = torch.Size(shape)
        if self.kind == "q4_1":
            return Q4_1_BLOCK
        if self.group_size is not None:
            return self.group_size
        if self.axis is None:
            return shape.numel()
        return shape[self.axis]

    def bits_per_weight(self, shape) -> float:
        zero = {"asymmetric": self.bits, "q4_1": 16}.get(self.kind, 0)
        return bits_per_weight(self.bits, self.weights_per_scale(shape), self.scale_bits, zero)


def chapter_schemes() -> list[Scheme]:
    """The rows of the chapter's error table, plus the 'third row' (uniform int4 at NF4's block size)."""
    return [
        Scheme("int8 per-tensor", "absmax", 8),
        Scheme("int8 per-row", "absmax", 8, axis=-1),
        Scheme("int4 per-tensor", "absmax", 4),
        Scheme("int4 per-row", "absmax", 4, axis=-1),
        Scheme("int4 group-128", "absmax", 4, group_size=128),
        Scheme("int4 group-64", "absmax", 4, group_size=64),
        Scheme("NF4 block-64", "nf4", 4, group_size=64),
    ]


PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def projection_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every attention and MLP projection matrix, by parameter name, in layer order (no copies)."""
    out = {}
    for name, p in model.named_parameters():
        if name.endswith(".weight") and any(f".{proj}." in name for proj in PROJECTIONS):
            out[name] = p.detach()
    if not out:
        raise ValueError(message("Found no q/k/v/o/gate/up/down projection weights: is this a Llama-style model?"))
    return out


def relative_errors(weights: dict[str, torch.Tensor], scheme: Scheme) -> torch.Tensor:
    """The relative error of ``scheme`` on every matrix of ``weights`` (a tensor, in the dict's order)."""
    errs = []
    with torch.no_grad():
        for w in weights.values():
            errs.append(relative_error(w, scheme.fake_quantize(w)))
    return torch.tensor(errs, dtype=torch.float64)


def outlier_stats(w: torch.Tensor, sigmas: float = 6.0) -> dict:
    """Mean |w|, std, max |w|, max/std and how many weights lie beyond ``sigmas`` standard deviations."""
    w = check_weights(w).reshape(-1)
    std = float(w.std())
    mx = float(w.abs().max())
    beyond = int((w.abs() > sigmas * std).sum())
    # what a normal distribution with this std would put there
    expected = w.numel() * math.erfc(sigmas / math.sqrt(2))
    return {"numel": w.numel(), "mean_abs": float(w.abs().mean()), "std": std, "max_abs": mx,
            "max_over_std": mx / std, "beyond": beyond, "beyond_frac": beyond / w.numel(),
            "beyond_if_normal": expected}


@contextlib.contextmanager
def quantized_projections(model: torch.nn.Module, scheme: Scheme,
                          originals: dict[str, torch.Tensor] | None = None) -> Iterator[torch.nn.Module]:
    """Inside the ``with`` block every projection matrix holds its fake-quantized weights; restored on exit.

    ``originals``: copies of the model's projection weights as they are now (``{n: w.clone() for n, w in
    projection_weights(model).items()}``), kept by the caller across many schemes: each matrix is quantized from
    and restored from its original, and nothing is cloned. Names, shapes and dtypes are checked, the values are
    not (:func:`helpers.s07_quality.applied` checks the restore, so each entry is the previous exit, compared).
    """
    weights = projection_weights(model)
    if originals is not None:
        _check_originals(weights, originals)
    saved = {}
    try:
        with torch.no_grad():
            for name, w in weights.items():
                saved[name] = w.clone() if originals is None else originals[name]
                w.copy_(scheme.fake_quantize(saved[name]).to(w.dtype))
        yield model
    finally:
        with torch.no_grad():
            for name, w in saved.items():
                weights[name].copy_(w)


def _check_originals(weights: dict[str, torch.Tensor], originals: dict[str, torch.Tensor]) -> None:
    if set(originals) != set(weights):
        missing = sorted(set(weights) - set(originals)) or sorted(set(originals) - set(weights))
        raise ValueError(message("originals must hold exactly the model's projection weights; {missing} differs: "
                                 "build them from projection_weights(model).", missing=missing[0]))
    for name, w in weights.items():
        o = originals[name]
        if o.shape != w.shape or o.dtype != w.dtype:
            raise ValueError(message("originals[{name!r}] is {shape} {dtype}, the model's weight {weight_shape} "
                                     "{weight_dtype}: pass copies of the model's own weights.", name=name,
                                     shape=tuple(o.shape), dtype=o.dtype, weight_shape=tuple(w.shape),
                                     weight_dtype=w.dtype))
        if o.untyped_storage().data_ptr() == w.untyped_storage().data_ptr():
            raise ValueError(message("originals[{name!r}] is the model's own weight, not a copy: quantizing in place "
                                     "would overwrite it; pass w.clone().", name=name))
