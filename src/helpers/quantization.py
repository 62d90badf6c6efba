"""Weight quantization: absmax (symmetric) at any bit width and granularity.

(Stub written with the skeleton so other modules can rely on the signatures below;
the quantization section extends this module.)
"""
from __future__ import annotations

import torch


def absmax_quantize(w: torch.Tensor, bits: int = 8):
    """Symmetric absmax with one scale for the whole tensor: returns (integer codes, scale)."""
    if not 2 <= bits <= 8:
        raise ValueError(f"bits must be between 2 and 8, got {bits}.")
    qmax = 2 ** (bits - 1) - 1
    scale = w.abs().max() / qmax
    q = torch.round(w / scale).clamp(-qmax - 1, qmax)
    return q.to(torch.int8), scale


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.to(torch.float32) * scale
