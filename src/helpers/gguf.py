"""Reading a GGUF file's weights: which block formats it holds, and the exact numbers they store (section 5).

A GGUF file (llama.cpp's format) stores each matrix in one of GGML's *block
formats*: the weights are cut into blocks of consecutive values, and each
block keeps a few scales and one small integer code per weight. Section 5
needs two things from that:

* the **bits per weight** of every format the file holds, for the accounting
  (:func:`format_table`, :func:`bits_per_weight_of`): the byte sizes come from
  the ``gguf`` package's table of block sizes, so every format it knows is
  covered, K-quants included;
* the **exact stored numbers** of one matrix, unpacked by hand for the simple
  formats (:data:`UNPACKED`: Q4_0, Q4_1, Q8_0) and cross-checked against the
  ``gguf`` package's own dequantizer (:func:`reference_dequantize`). Other
  formats (K-quants and the rest) are read through ``gguf`` only, and a model
  that is not a GGUF file has no stored blocks at all: :func:`stored_blocks`
  says so instead of guessing.

Q4_1 also appears here as a quantizer (:func:`q4_1_quantize`), because our
reference weights are stored in it; :mod:`helpers.quantization` re-exports it.
"""
from __future__ import annotations

import functools
import math

import torch

from .quant_blocks import _check_weights, _Layout

# The three simple formats we unpack ourselves: (weights per block, bytes per block).
Q4_0_BLOCK, Q4_0_BYTES = 32, 2 + 16          # fp16 d, 32 four-bit codes:  w = (q - 8) * d
Q4_1_BLOCK, Q4_1_BYTES = 32, 2 + 2 + 16      # fp16 d, fp16 m, 32 codes:   w = q * d + m
Q8_0_BLOCK, Q8_0_BYTES = 32, 2 + 32          # fp16 d, 32 int8 codes:       w = q * d
UNPACKED = ("Q4_0", "Q4_1", "Q8_0")

# --------------------------------------------------------------------------- Q4_1 as a quantizer (our reference's format)



def q4_1_quantize(w: torch.Tensor):
    """GGML Q4_1: blocks of 32 consecutive weights, ``w ~ q * d + m`` with q in 0..15.

    Returns (codes uint8 shaped like ``w``, d fp16 per block, m fp16 per block).
    Rounds exactly like llama.cpp's reference (codes from fp32 ``d`` and ``min``,
    both stored in fp16).
    """
    w = _check_weights(w)
    lay = _Layout(w.shape, None, Q4_1_BLOCK)
    b = lay.to_blocks(w)
    mn = b.amin(dim=1, keepdim=True)
    d = (b.amax(dim=1, keepdim=True) - mn) / 15
    inv = torch.where(d == 0, torch.zeros_like(d), 1 / d)
    q = torch.trunc((b - mn) * inv + 0.5).clamp(0, 15)
    return lay.from_blocks(q.to(torch.uint8)), d.reshape(-1).half(), mn.reshape(-1).half()


def q4_1_dequantize(q: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    if d.numel() * Q4_1_BLOCK != q.numel() or m.numel() != d.numel():
        raise ValueError(f"Q4_1 needs one d and one m per {Q4_1_BLOCK} codes: got {q.numel()} codes, "
                         f"{d.numel()} d and {m.numel()} m.")
    b = q.reshape(-1, Q4_1_BLOCK).to(torch.float32)
    return (d.float().reshape(-1, 1) * b + m.float().reshape(-1, 1)).reshape(q.shape)


def q4_1_error_estimate(w: torch.Tensor) -> float:
    """Estimated relative error Q4_1 causes on ``w``, from the block steps ``d`` alone.

    Inside a block the minimum and the maximum are stored exactly (codes 0 and
    15); each of the other 30 weights is off by a rounding error spread evenly
    over one step, whose mean square is ``d**2 / 12``. For weights that already
    sit on a Q4_1 grid (our reference) this estimates how far the grid is from
    the unknown weights it was rounded from.
    """
    w = _check_weights(w)
    _, d, _ = q4_1_quantize(w)
    norm = float(torch.linalg.vector_norm(w))
    if norm == 0:
        raise ValueError("The tensor is all zeros, so a relative error is undefined.")
    return math.sqrt(float((d.double() ** 2).sum()) * (Q4_1_BLOCK - 2) / 12) / norm


GGUF_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down"}


def gguf_name(name: str) -> str:
    """'model.layers.12.mlp.down_proj.weight' -> 'blk.12.ffn_down.weight' (the name inside a GGUF file)."""
    parts = name.split(".")
    try:
        i = parts.index("layers")
        layer, sub = int(parts[i + 1]), ".".join(parts[i + 2:i + 4])
        return f"blk.{layer}.{GGUF_NAMES[sub]}.weight"
    except (ValueError, IndexError, KeyError):
        raise ValueError(f"{name!r} is not a projection matrix of a decoder layer "
                         f"(expected e.g. 'model.layers.12.mlp.down_proj.weight').") from None


def model_gguf_path(setting: str | None = None) -> str | None:
    """The GGUF file the current model was loaded from, or None when it is not a GGUF (a folder, a hub id)."""
    from .model import resolve_source
    kind, location = resolve_source(setting)
    return location if kind in ("embedded", "gguf") else None


@functools.lru_cache(maxsize=2)
def _reader(path: str):
    import gguf
    return gguf.GGUFReader(path)   # parsing the header (and its vocabulary) takes a few seconds


def bits_per_weight_of(type_name: str) -> float:
    """Bits one weight costs in a GGML format, scales included: 8 x bytes per block / weights per block."""
    import gguf
    try:
        block, nbytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]]
    except KeyError:
        raise ValueError(f"{type_name!r} is not a GGML format name (e.g. 'Q4_1', 'Q4_K', 'Q8_0').") from None
    return 8 * nbytes / block


def format_table(path: str) -> list[dict]:
    """One row per block format in the file: tensors, weights, bits per weight, bytes (largest first)."""
    rows: dict[str, dict] = {}
    for t in _reader(path).tensors:
        name = t.tensor_type.name
        r = rows.setdefault(name, dict(format=name, tensors=0, weights=0, bytes=0))
        r["tensors"] += 1
        r["weights"] += int(t.n_elements)
        r["bytes"] += int(t.n_bytes)
    for r in rows.values():
        r["bits / weight"] = bits_per_weight_of(r["format"])
        r["unpacked here"] = r["format"] in UNPACKED
    return sorted(rows.values(), key=lambda r: -r["bytes"])


def stored_blocks(name: str, path: str):
    """(format name, raw bytes as uint8, (rows, cols)) of one matrix of the file, by its transformers name."""
    target = gguf_name(name)
    for t in _reader(path).tensors:
        if t.name == target:
            rows, cols = int(t.shape[1]), int(t.shape[0])    # GGUF lists the fastest axis first
            return t.tensor_type.name, torch.from_numpy(t.data.copy()).reshape(-1).view(torch.uint8), (rows, cols)
    raise ValueError(f"No tensor {target} in {path}: pick a projection matrix the file holds.")


def _blocks(raw: torch.Tensor, nbytes: int, fmt: str) -> torch.Tensor:
    raw = torch.as_tensor(raw).reshape(-1)
    if raw.dtype != torch.uint8 or raw.numel() % nbytes:
        raise ValueError(f"{fmt} data must be uint8 bytes in blocks of {nbytes}, got {raw.dtype} x {raw.numel()}.")
    return raw.reshape(-1, nbytes)


def _fp16(cols: torch.Tensor) -> torch.Tensor:
    return cols.contiguous().view(torch.float16).reshape(-1)


def _nibbles(qs: torch.Tensor) -> torch.Tensor:
    """16 bytes -> 32 codes: low nibbles are weights 0..15, high nibbles weights 16..31."""
    return torch.cat([qs & 0x0F, qs >> 4], dim=1)


def unpack_q4_1(raw) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Raw Q4_1 bytes (20 per block) -> (codes (n_blocks, 32) uint8, d fp16, m fp16); ``w = q * d + m``."""
    b = _blocks(raw, Q4_1_BYTES, "Q4_1")
    return _nibbles(b[:, 4:]), _fp16(b[:, 0:2]), _fp16(b[:, 2:4])


def unpack_q4_0(raw) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw Q4_0 bytes (18 per block) -> (codes (n_blocks, 32) uint8, d fp16); ``w = (q - 8) * d``."""
    b = _blocks(raw, Q4_0_BYTES, "Q4_0")
    return _nibbles(b[:, 2:]), _fp16(b[:, 0:2])


def unpack_q8_0(raw) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw Q8_0 bytes (34 per block) -> (codes (n_blocks, 32) int8, d fp16); ``w = q * d``."""
    b = _blocks(raw, Q8_0_BYTES, "Q8_0")
    return b[:, 2:].contiguous().view(torch.int8), _fp16(b[:, 0:2])


def dequantize_blocks(fmt: str, raw, shape: tuple[int, int]) -> torch.Tensor:
    """Our own unpacking of a Q4_0, Q4_1 or Q8_0 matrix to fp32, shaped ``shape``."""
    if fmt == "Q4_1":
        q, d, m = unpack_q4_1(raw)
        w = q.float() * d.float()[:, None] + m.float()[:, None]
    elif fmt == "Q4_0":
        q, d = unpack_q4_0(raw)
        w = (q.float() - 8) * d.float()[:, None]
    elif fmt == "Q8_0":
        q, d = unpack_q8_0(raw)
        w = q.float() * d.float()[:, None]
    else:
        raise ValueError(f"We unpack only {', '.join(UNPACKED)} by hand; read {fmt} with reference_dequantize().")
    return w.reshape(shape)


def reference_dequantize(fmt: str, raw, shape: tuple[int, int]) -> torch.Tensor:
    """The ``gguf`` package's own dequantizer (``gguf.quants.dequantize``), for any format it supports."""
    import gguf
    import numpy as np
    data = np.asarray(torch.as_tensor(raw).reshape(-1).numpy(), dtype=np.uint8)
    out = gguf.quants.dequantize(data, gguf.GGMLQuantizationType[fmt])
    return torch.from_numpy(np.asarray(out, dtype=np.float32).copy()).reshape(shape)


def read_q4_1(name: str, path: str | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The stored (codes, d, m) of one Q4_1 matrix (the embedded model's by default); codes shaped like the matrix."""
    from .model import embedded_gguf_path
    path = str(path or embedded_gguf_path())
    fmt, raw, shape = stored_blocks(name, path)
    if fmt != "Q4_1":
        raise ValueError(f"{gguf_name(name)} is stored as {fmt}, not Q4_1.")
    codes, d, m = unpack_q4_1(raw)
    return codes.reshape(shape), d, m
