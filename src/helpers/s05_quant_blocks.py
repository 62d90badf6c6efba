"""Blocks that share one scale: how a weight tensor is cut up for quantization (section 5's bookkeeping).

Infrastructure for :mod:`helpers.s05_quantization`: :class:`Layout` turns the
``axis`` / ``group_size`` keywords (one scale per tensor, per row, per group
inside a row, or per flat block) into a (blocks, block length) view and back,
and the checks give one-sentence errors for bad bits, weights and sizes.
"""
from __future__ import annotations

import numbers

import torch

from .infra.messages import message

# --------------------------------------------------------------------------- checks


def check_bits(bits, low: int = 2, high: int = 8) -> int:
    if isinstance(bits, bool) or not isinstance(bits, numbers.Integral) or not low <= bits <= high:
        raise ValueError(message("bits must be an integer from {low} to {high}, got {bits!r}.",
                                 low=low, high=high, bits=bits))
    return int(bits)


def check_weights(w) -> torch.Tensor:
    if not isinstance(w, torch.Tensor):
        raise ValueError(message("Expected a torch.Tensor of weights, got {type_name}: wrap it with "
                                 "torch.as_tensor().", type_name=type(w).__name__))
    if w.numel() == 0:
        raise ValueError(message("Cannot quantize an empty tensor: pass a tensor with at least one weight."))
    if not w.is_floating_point():
        raise ValueError(message("Expected floating-point weights, got {dtype}: convert them with .float() first.",
                                 dtype=w.dtype))
    return w.float()


# --------------------------------------------------------------------------- blocks


class Layout:
    """How a tensor is cut into blocks that share one scale, and how to undo it."""

    def __init__(self, shape: torch.Size, axis: int | None, group_size: int | None):
        self.shape = torch.Size(shape)
        ndim, numel = len(self.shape), self.shape.numel()
        if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, numbers.Integral)
                                       or group_size < 1):
            raise ValueError(message("group_size must be a positive integer or None, got {group_size!r}.",
                                     group_size=group_size))
        group_size = None if group_size is None else int(group_size)
        if axis is not None:
            valid = not isinstance(axis, bool) and isinstance(axis, numbers.Integral)
            if not valid or not -max(ndim, 1) <= axis < max(ndim, 1):
                raise ValueError(message("axis must be None or an axis of a {ndim}-d tensor, got {axis!r}.",
                                         ndim=ndim, axis=axis))
            axis = int(axis) % max(ndim, 1)
        self.axis, self.group_size = axis, group_size
        self.moved = False
        if axis is None and group_size is None:                 # per tensor
            self.block = numel
            self.stat_shape: tuple = ()
        elif axis is None:                                      # flat blocks
            if numel % group_size:
                raise ValueError(message("group_size {group_size} does not divide the {numel} weights: pick a "
                                         "divisor of {numel}.", group_size=group_size, numel=numel))
            self.block = group_size
            self.stat_shape = (numel // group_size,)
        elif group_size is None:                                # one scale per slice along `axis`
            self.block = self.shape[axis] if ndim else 1
            self.moved = ndim > 1 and axis != ndim - 1
            self.stat_shape = tuple(1 if d == axis else n for d, n in enumerate(self.shape)) if ndim else (1,)
        else:                                                   # groups inside each row
            if ndim and axis != ndim - 1:
                raise ValueError(message("Groups run along the last axis: use axis=-1 (got axis={axis}).", axis=axis))
            row = self.shape[-1] if ndim else 1
            if row % group_size:
                raise ValueError(message("group_size {group_size} does not divide the row length {row}: pick a "
                                         "divisor of {row}, or axis=None for flat blocks.",
                                         group_size=group_size, row=row))
            self.block = group_size
            self.stat_shape = tuple(self.shape[:-1]) + (row // group_size,)
        self.n_blocks = numel // self.block if self.block else 0

    def to_blocks(self, w: torch.Tensor) -> torch.Tensor:
        if self.moved:
            w = w.movedim(self.axis, -1)
        return w.reshape(-1, self.block)

    def from_blocks(self, b: torch.Tensor) -> torch.Tensor:
        if self.moved:
            moved_shape = tuple(n for d, n in enumerate(self.shape) if d != self.axis) + (self.shape[self.axis],)
            return b.reshape(moved_shape).movedim(-1, self.axis)
        return b.reshape(self.shape)

    def stat_from_blocks(self, s: torch.Tensor) -> torch.Tensor:
        """(n_blocks, 1) per-block statistics -> the shape returned to the caller."""
        if self.moved:
            moved = tuple(n for d, n in enumerate(self.shape) if d != self.axis) + (1,)
            return s.reshape(moved).movedim(-1, self.axis)
        return s.reshape(self.stat_shape)


def _stat_to_blocks(stat: torch.Tensor, shape: torch.Size) -> tuple[torch.Tensor, int]:
    """Infer the block layout from the shapes of the codes and of a per-block statistic.

    Returns (stat as a column of blocks or a broadcastable tensor, block length or 0 for broadcast).
    """
    stat = torch.as_tensor(stat)
    ndim = len(shape)
    if stat.numel() == 1:
        return stat.reshape(()), 0
    if stat.ndim == ndim and all(s in (1, n) for s, n in zip(stat.shape, shape)):
        return stat, 0
    if (stat.ndim == ndim and tuple(stat.shape[:-1]) == tuple(shape[:-1]) and stat.shape[-1]
            and shape[-1] % stat.shape[-1] == 0):
        return stat.reshape(-1, 1), shape[-1] // stat.shape[-1]
    if stat.ndim == 1 and shape.numel() % stat.numel() == 0:
        return stat.reshape(-1, 1), shape.numel() // stat.numel()
    raise ValueError(message("A statistic shaped {stat_shape} does not match codes shaped {block_shape}: pass the "
                             "codes and scales returned by the same quantize call.",
                             stat_shape=tuple(stat.shape), block_shape=tuple(shape)))


def apply_blockwise(q: torch.Tensor, stat: torch.Tensor, fn) -> torch.Tensor:
    s, block = _stat_to_blocks(stat, q.shape)
    if block == 0:
        return fn(q, s)
    return fn(q.reshape(-1, block), s).reshape(q.shape)
