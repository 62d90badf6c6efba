"""Real low-bit kernels on this CPU: does a smaller weight decode faster? (section 5, "Fewer bits, faster
decode?"; section 8 uses the int8 one as a draft).

Fake quantization (:mod:`helpers.s05_quantization`) tells us what fewer bits do to *quality*: the model still
multiplies fp32 numbers. Speed needs kernels that read the small codes and compute with them. PyTorch ships
three that run on a CPU:

* :func:`dynamic_int8`: ``torch.ao.quantization.quantize_dynamic``. Weights int8 with one scale per matrix;
  each activation is quantized to int8 on the fly, also with one scale per tensor; an int8 x int8 matmul;
* :class:`Int8WeightOnlyLinear`: ``torch._weight_int8pack_mm``, int8 weights with one scale per row,
  activations stay fp32 (a prompt of more than :data:`PREFILL_ROWS` rows shares one dequantized matmul);
* :class:`Int4WeightOnlyLinear`: ``torch._weight_int4pack_mm_for_cpu``, 4-bit codes in groups along each row
  with a scale and a zero per group (codes from :func:`helpers.s05_quantization.asymmetric_quantize`).

:func:`with_kernel` returns a copy of the model whose projection matrices use one of them; the embedding and
the tied output matrix stay fp32. :func:`linear_bytes` counts what the projections occupy. :func:`build_all`
builds every kernel a model allows (and says why any other is missing), :data:`WEIGHT_ONLY_SCHEMES` names the
fake-quantized scheme each weight-only kernel computes exactly, and :func:`faster_check` is the claim read off
the timings.
"""
from __future__ import annotations

import copy
import warnings

import torch
from torch.ao.nn.quantized.dynamic import Linear as DynLinear

from .infra.messages import message
from . import s05_quantization as Q

KERNELS = ("fp32", "int8 dynamic (torch.ao)", "int8 weight-only", "int4 weight-only g64")
DYNAMIC = KERNELS[1]
INT4_GROUP = 64
PREFILL_ROWS = 8          # more rows than this at once: a prompt being read, not a decode step


class Int8WeightOnlyLinear(torch.nn.Module):
    """``y = x @ (q * scale).T + b`` from int8 codes, one scale per row.

    Decode steps and verifications (up to :data:`PREFILL_ROWS` rows) run on ``torch._weight_int8pack_mm``,
    which reads the int8 codes directly. On this CPU that kernel does each row's work separately, about as
    slow per row as per step, so a prompt read through it costs one decode step per token. More rows than
    that are a prompt: the matrix is dequantized once and all rows share one fp32 matmul (unpack once,
    share across rows: the usual remedy for a prefill through compressed weights). The arithmetic is the
    same either way; only the rounding order differs.
    """

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        q, scale = Q.absmax_quantize(linear.weight.detach(), 8, axis=-1)
        self.register_buffer("codes", q.contiguous())
        self.register_buffer("scales", scale.reshape(-1).float().contiguous())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone())

    def forward(self, x):
        rows = x.reshape(-1, x.shape[-1])
        if rows.shape[0] > PREFILL_ROWS:
            y = rows @ (self.codes.to(rows.dtype) * self.scales[:, None]).T
        else:
            y = torch._weight_int8pack_mm(rows, self.codes, self.scales)
        y = y.reshape(*x.shape[:-1], -1)
        return y if self.bias is None else y + self.bias


class Int4WeightOnlyLinear(torch.nn.Module):
    """4-bit codes packed two per byte for ``torch._weight_int4pack_mm_for_cpu``; groups of 64 along each row.

    The kernel reads a weight as ``(q - 8) * scale + zero``; our asymmetric codes mean ``(q - zp) * scale``,
    so ``zero = (8 - zp) * scale``.
    """

    def __init__(self, linear: torch.nn.Linear, group_size: int = INT4_GROUP):
        super().__init__()
        w = linear.weight.detach()
        if w.shape[1] % group_size:
            raise ValueError(message("group_size {group_size} does not divide the {inputs} inputs: pick 32 or 64.",
                                     group_size=group_size, inputs=w.shape[1]))
        q, scale, zp = Q.asymmetric_quantize(w, 4, axis=-1, group_size=group_size)
        scale = scale.float()
        zero = (8 - zp.float()) * scale
        self.group_size = group_size
        self.register_buffer("packed", torch._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 1))
        self.register_buffer("scales_zeros", torch.stack([scale, zero], -1).transpose(0, 1).contiguous())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone())

    def forward(self, x):
        y = torch._weight_int4pack_mm_for_cpu(x.reshape(-1, x.shape[-1]).contiguous(), self.packed,
                                              self.group_size, self.scales_zeros)
        y = y.reshape(*x.shape[:-1], -1)
        return y if self.bias is None else y + self.bias


def _projection_linears(model):
    names = {n.removesuffix(".weight") for n in Q.projection_weights(model)}
    return [(n, m) for n, m in model.named_modules() if n in names and isinstance(m, torch.nn.Linear)]


def with_kernel(model: torch.nn.Module, kernel: str) -> torch.nn.Module:
    """A copy of ``model`` whose projection matrices run on ``kernel`` (one of :data:`KERNELS`)."""
    if kernel not in KERNELS:
        raise ValueError(message("kernel must be one of {kernels}, got {kernel!r}.", kernels=KERNELS, kernel=kernel))
    if kernel == "fp32":
        return copy.deepcopy(model)
    # the projections are about to be replaced: the copy starts out sharing their fp32 weights with ``model``
    # (read, never written) instead of copying them only to throw them away
    shared = {id(p): p for name, lin in _projection_linears(model) for p in lin.parameters()}
    m = copy.deepcopy(model, memo=shared)
    targets = _projection_linears(m)
    if kernel.startswith("int8 dynamic"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")            # torch.ao's deprecation notices
            return torch.ao.quantization.quantize_dynamic(m, {n for n, _ in targets}, dtype=torch.qint8,
                                                          inplace=True)      # m is already our own copy
    make = Int8WeightOnlyLinear if kernel == "int8 weight-only" else Int4WeightOnlyLinear
    for name, lin in targets:
        parent, _, child = name.rpartition(".")
        setattr(m.get_submodule(parent), child, make(lin))
    return m


# the arithmetic each weight-only kernel does, as a scheme of :mod:`helpers.s05_quantization` (fake quantization)
WEIGHT_ONLY_SCHEMES = {
    "int8 weight-only": Q.Scheme("int8 per-row", "absmax", 8, axis=-1),
    "int4 weight-only g64": Q.Scheme("int4 g64 asymmetric", "asymmetric", 4, axis=-1, group_size=INT4_GROUP),
}


def build_all(model: torch.nn.Module, kernels=KERNELS[1:]) -> tuple[dict, dict]:
    """({kernel: a copy of ``model`` on it}, {kernel: why it could not be built}); ``model`` itself is fp32's."""
    built, missing = {"fp32": model}, {}
    for k in kernels:
        try:
            built[k] = with_kernel(model, k)
        except (ValueError, RuntimeError) as e:        # e.g. a row the int4 kernel's groups do not divide
            missing[k] = str(e).splitlines()[0]
    return built, missing


def faster_check(timed: dict) -> dict:
    """The claim read off the timings (``{kernel: Timing}``), for :func:`helpers.measure_checked`: the int8
    dynamic kernel's fastest step beats fp32's by at least 10 % (the fastest, since other programs only add time).
    No claim when that kernel could not be built."""
    if DYNAMIC not in timed:
        return {}
    ours, base = timed[DYNAMIC].min * 1e3, timed["fp32"].min * 1e3
    return {"int8": (ours < 0.9 * base, "fewer bits give a faster decode when the kernel exists: torch's int8 "
                     "dynamic kernel beats fp32 by 10 %", "fastest steps {ours:.1f} vs {base:.1f} ms per token",
                     dict(ours=ours, base=base))}


def linear_bytes(model: torch.nn.Module) -> int:
    """Bytes the projection layers occupy: codes, scales, zeros and biases, however they are stored."""
    total = 0
    for name, mod in model.named_modules():
        if isinstance(mod, DynLinear):
            w, b = mod._packed_params._weight_bias()
            total += w.int_repr().numel() + 8 + (0 if b is None else b.numel() * 4)   # codes + fp64 scale
        elif isinstance(mod, (Int8WeightOnlyLinear, Int4WeightOnlyLinear)):
            total += sum(t.numel() * t.element_size() for t in list(mod.buffers()) + list(mod.parameters()))
        elif isinstance(mod, torch.nn.Linear) and any(name.endswith(p) for p in Q.PROJECTIONS):
            total += sum(p.numel() * p.element_size() for p in mod.parameters())
    return total
