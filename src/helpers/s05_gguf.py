"""Reading a GGUF file's weights: which block formats it holds, and the exact numbers they store (section 5).

A GGUF file (llama.cpp's format) stores each matrix in one of GGML's *block formats*: the weights are cut into
blocks of consecutive values, and each block keeps a few scales and one small integer code per weight. Section 5
needs two things from that:

* the **bits per weight** of every format the file holds, for the accounting (:func:`format_table`,
  :func:`bits_per_weight_of`): the byte sizes come from the ``gguf`` package's table of block sizes, so every format
  it knows is covered, K-quants included;
* the **exact stored numbers** of one matrix, unpacked by hand for the simple formats (:data:`UNPACKED`: Q4_0, Q4_1,
  Q8_0) and cross-checked against the ``gguf`` package's own dequantizer (:func:`reference_dequantize`). Other
  formats (K-quants and the rest) are read through ``gguf`` only, and a model that is not a GGUF file has no stored
  blocks at all: :func:`stored_blocks` says so instead of guessing.

Both find a matrix through the file's tensor directory, read by :func:`tensor_directory` with ``struct``: the
``gguf`` package's own reader also unpacks every metadata value, the whole vocabulary included, which takes seconds
for the few hundred entries we need.

Q4_1 also appears here as a quantizer (:func:`q4_1_quantize`), because our reference weights are stored in it;
:class:`helpers.s05_quantization.Scheme` uses it.
"""
from __future__ import annotations

import functools
import math
import mmap
import struct
from dataclasses import dataclass

import numpy as np
import torch

from .infra.model import embedded_gguf_path, resolve_source
from .infra.messages import message
from .s05_quant_blocks import Layout, check_weights

# The three simple formats we unpack ourselves: (weights per block, bytes per block).
Q4_0_BLOCK, Q4_0_BYTES = 32, 2 + 16          # fp16 d, 32 four-bit codes:  w = (q - 8) * d
Q4_1_BLOCK, Q4_1_BYTES = 32, 2 + 2 + 16      # fp16 d, fp16 m, 32 codes:   w = q * d + m
Q8_0_BLOCK, Q8_0_BYTES = 32, 2 + 32          # fp16 d, 32 int8 codes:       w = q * d
UNPACKED = ("Q4_0", "Q4_1", "Q8_0")

# --------------------------------------------------------------------------- Q4_1 as a quantizer (our reference's format)


def _q4_1_steps(w: torch.Tensor):
    """Q4_1's blocks of ``w`` and their layout, each block's minimum and its step ``d = (max - min) / 15`` (fp32)."""
    w = check_weights(w)
    lay = Layout(w.shape, None, Q4_1_BLOCK)
    b = lay.to_blocks(w)
    mn = b.amin(dim=1, keepdim=True)
    return lay, b, mn, (b.amax(dim=1, keepdim=True) - mn) / 15


def q4_1_quantize(w: torch.Tensor):
    """GGML Q4_1: blocks of 32 consecutive weights, ``w ~ q * d + m`` with q in 0..15.

    Returns (codes uint8 shaped like ``w``, d fp16 per block, m fp16 per block).
    Rounds exactly like llama.cpp's reference (codes from fp32 ``d`` and ``min``,
    both stored in fp16).
    """
    lay, b, mn, d = _q4_1_steps(w)
    inv = torch.where(d == 0, torch.zeros_like(d), 1 / d)
    q = torch.trunc((b - mn) * inv + 0.5).clamp(0, 15)
    return lay.from_blocks(q.to(torch.uint8)), d.reshape(-1).half(), mn.reshape(-1).half()


def q4_1_dequantize(q: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    if d.numel() * Q4_1_BLOCK != q.numel() or m.numel() != d.numel():
        raise ValueError(message("Q4_1 needs one d and one m per {block} codes: got {codes} codes, {scales} d and "
                                 "{minimums} m.", block=Q4_1_BLOCK, codes=q.numel(), scales=d.numel(),
                                 minimums=m.numel()))
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
    w = check_weights(w)
    d = _q4_1_steps(w)[3].reshape(-1).half()      # the steps as stored; the codes are not needed
    norm = float(torch.linalg.vector_norm(w))
    if norm == 0:
        raise ValueError(message("The tensor is all zeros, so a relative error is undefined."))
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
        raise ValueError(message("{name!r} is not a projection matrix of a decoder layer (expected e.g. "
                                 "'model.layers.12.mlp.down_proj.weight').", name=name)) from None


def model_gguf_path(setting: str | None = None) -> str | None:
    """The GGUF file the current model was loaded from, or None when it is not a GGUF (a folder, a hub id)."""
    kind, location = resolve_source(setting)
    return location if kind in ("embedded", "gguf") else None


# --------------------------------------------------------------------------- the file's tensor directory
#
# A GGUF file is a header, then the tensors' bytes. The header holds, in order: the magic b"GGUF", a version,
# the number of tensors and of metadata entries, the metadata (key, type, value: the tokenizer's whole
# vocabulary is in there), and one directory entry per tensor (name, dimensions, GGML type, offset). The data
# starts at the next multiple of ``general.alignment`` (32 unless the metadata says otherwise). The gguf
# package's GGUFReader builds numpy views of every metadata value, some 100,000 of them for the vocabulary,
# which takes seconds; we step over the metadata and keep only the directory.

_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUFValueType: bytes
_UINT32, _STRING, _ARRAY = 4, 8, 9
_VERSIONS = (2, 3)
_DEFAULT_ALIGNMENT = 32


@dataclass(frozen=True)
class StoredTensor:
    """One entry of a GGUF file's tensor directory, with its size worked out from the GGML type."""
    name: str
    type_name: str            # the GGML format, e.g. 'Q4_1'
    dims: tuple[int, ...]     # in GGUF's order: the fastest-varying axis first, the reverse of torch's
    offset: int               # where its bytes start, from the beginning of the file
    n_elements: int
    n_bytes: int


def _skip_value(buf, pos: int, vtype: int) -> int:
    """The position just after a metadata value of GGUF type ``vtype`` that starts at ``pos``."""
    if vtype in _SCALAR_BYTES:
        return pos + _SCALAR_BYTES[vtype]
    if vtype == _STRING:                                    # u64 length, then the bytes
        return pos + 8 + struct.unpack_from("<Q", buf, pos)[0]
    if vtype == _ARRAY:                                     # u32 element type, u64 count, the elements
        itype, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if itype in _SCALAR_BYTES:
            return pos + count * _SCALAR_BYTES[itype]
        if itype == _STRING:                                # e.g. the vocabulary: one length at a time
            for _ in range(count):
                pos += 8 + struct.unpack_from("<Q", buf, pos)[0]
            return pos
        for _ in range(count):                              # arrays of arrays
            pos = _skip_value(buf, pos, itype)
        return pos
    raise ValueError(message("unknown GGUF value type {vtype} at byte {pos}", vtype=vtype, pos=pos))


def _parse_directory(buf, path: str) -> dict[str, StoredTensor]:
    import gguf  # here, not at the top: importing gguf takes about a second, paid only when a file is read
    if len(buf) < 24 or bytes(buf[:4]) != b"GGUF":
        raise ValueError(message("{path} is not a GGUF file (it does not start with the bytes 'GGUF').", path=path))
    version, n_tensors, n_meta = struct.unpack_from("<IQQ", buf, 4)
    if version & 0xFFFF == 0:
        raise ValueError(message("{path} is a big-endian GGUF file; we read little-endian files only.", path=path))
    if version not in _VERSIONS:
        raise ValueError(message("{path} is GGUF version {version}; we read versions {versions}.",
                                 path=path, version=version, versions=", ".join(map(str, _VERSIONS))))
    pos, alignment = 24, _DEFAULT_ALIGNMENT
    for _ in range(n_meta):
        klen = struct.unpack_from("<Q", buf, pos)[0]
        key = bytes(buf[pos + 8:pos + 8 + klen])
        vtype = struct.unpack_from("<I", buf, pos + 8 + klen)[0]
        pos += 12 + klen
        if key == b"general.alignment" and vtype == _UINT32:
            alignment = struct.unpack_from("<I", buf, pos)[0]
        pos = _skip_value(buf, pos, vtype)
    if alignment == 0 or alignment & (alignment - 1):
        raise ValueError(message("{path}: general.alignment must be a power of two, got {alignment}.",
                                 path=path, alignment=alignment))
    entries = []
    for _ in range(n_tensors):
        nlen = struct.unpack_from("<Q", buf, pos)[0]
        name = bytes(buf[pos + 8:pos + 8 + nlen]).decode("utf-8")
        pos += 8 + nlen
        n_dims = struct.unpack_from("<I", buf, pos)[0]
        dims = struct.unpack_from(f"<{n_dims}Q", buf, pos + 4)
        raw_type, rel_offset = struct.unpack_from("<IQ", buf, pos + 4 + 8 * n_dims)
        pos += 4 + 8 * n_dims + 12
        try:
            ggml_type = gguf.GGMLQuantizationType(raw_type)
        except ValueError:
            raise ValueError(message("{path}: tensor {name} has GGML type {raw_type}, which this gguf package does "
                                     "not know; upgrade the gguf package.",
                                     path=path, name=name, raw_type=raw_type)) from None
        entries.append((name, ggml_type, dims, rel_offset))
    if pos > len(buf):
        raise ValueError(message("{path} is truncated: its header runs past the end of the file.", path=path))
    data_start = -(-pos // alignment) * alignment            # round up to the alignment
    directory = {}
    for name, ggml_type, dims, rel_offset in entries:
        block, type_bytes = gguf.GGML_QUANT_SIZES[ggml_type]
        n_elements = math.prod(dims)
        t = StoredTensor(name, ggml_type.name, tuple(dims), data_start + rel_offset, n_elements,
                         n_elements * type_bytes // block)
        if t.offset + t.n_bytes > len(buf):
            raise ValueError(message("{path} is truncated: tensor {name} would end at byte {end:,} of a {size:,}-byte "
                                     "file.", path=path, name=name, end=t.offset + t.n_bytes, size=len(buf)))
        if name in directory:
            raise ValueError(message("{path} lists tensor {name} twice.", path=path, name=name))
        directory[name] = t
    return directory


@functools.lru_cache(maxsize=2)
def tensor_directory(path: str) -> dict[str, StoredTensor]:
    """Every tensor a GGUF file stores, by its GGUF name, in file order (read once per path, then cached)."""
    with open(path, "rb") as f:
        try:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)   # only the pages we touch are read
        except ValueError:                                               # an empty file cannot be mapped
            raise ValueError(message("{path} is not a GGUF file (it is empty).", path=path)) from None
    with buf:
        try:
            return _parse_directory(buf, path)
        except (struct.error, OverflowError):       # a length or count pointed past the end of the file
            raise ValueError(message("{path} is truncated or not a GGUF file: its header runs past the end.",
                                     path=path)) from None


def read_tensor_bytes(t: StoredTensor, path: str) -> torch.Tensor:
    """The raw bytes of one stored tensor, as a uint8 tensor of ``t.n_bytes`` (read from the file)."""
    with open(path, "rb") as f:
        f.seek(t.offset)
        data = bytearray(f.read(t.n_bytes))
    if len(data) != t.n_bytes:
        raise ValueError(message("{path} is truncated: {tensor} has {got} of its {expected} bytes.",
                                 path=path, tensor=t.name, got=len(data), expected=t.n_bytes))
    return torch.frombuffer(data, dtype=torch.uint8)


def bits_per_weight_of(type_name: str) -> float:
    """Bits one weight costs in a GGML format, scales included: 8 x bytes per block / weights per block."""
    import gguf  # here, not at the top: importing gguf takes about a second, paid only when a file is read
    try:
        block, nbytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]]
    except KeyError:
        raise ValueError(message("{type_name!r} is not a GGML format name (e.g. 'Q4_1', 'Q4_K', 'Q8_0').",
                                 type_name=type_name)) from None
    return 8 * nbytes / block


def format_table(path: str) -> list[dict]:
    """One row per block format in the file: tensors, weights, bits per weight, bytes (largest first)."""
    rows: dict[str, dict] = {}
    for t in tensor_directory(path).values():
        r = rows.setdefault(t.type_name, dict(format=t.type_name, tensors=0, weights=0, bytes=0))
        r["tensors"] += 1
        r["weights"] += t.n_elements
        r["bytes"] += t.n_bytes
    for r in rows.values():
        r["bits / weight"] = bits_per_weight_of(r["format"])
        r["unpacked here"] = r["format"] in UNPACKED
    return sorted(rows.values(), key=lambda r: -r["bytes"])


def stored_blocks(name: str, path: str):
    """(format name, raw bytes as uint8, (rows, cols)) of one matrix of the file, by its transformers name."""
    target = gguf_name(name)
    t = tensor_directory(path).get(target)
    if t is None:
        raise ValueError(message("No tensor {target} in {path}: pick a projection matrix the file holds.",
                                 target=target, path=path))
    rows, cols = t.dims[1], t.dims[0]                     # GGUF lists the fastest axis first
    return t.type_name, read_tensor_bytes(t, path), (rows, cols)


def _blocks(raw: torch.Tensor, nbytes: int, fmt: str) -> torch.Tensor:
    raw = torch.as_tensor(raw).reshape(-1)
    if raw.dtype != torch.uint8 or raw.numel() % nbytes:
        raise ValueError(message("{fmt} data must be uint8 bytes in blocks of {nbytes}, got {dtype} x {count}.",
                                 fmt=fmt, nbytes=nbytes, dtype=raw.dtype, count=raw.numel()))
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
        raise ValueError(message("We unpack only {unpacked} by hand; read {fmt} with reference_dequantize().",
                                 unpacked=", ".join(UNPACKED), fmt=fmt))
    return w.reshape(shape)


def reference_dequantize(fmt: str, raw, shape: tuple[int, int]) -> torch.Tensor:
    """The ``gguf`` package's own dequantizer (``gguf.quants.dequantize``), for any format it supports."""
    import gguf  # here, not at the top: importing gguf takes about a second, paid only when a file is read
    data = np.asarray(torch.as_tensor(raw).reshape(-1).numpy(), dtype=np.uint8)
    out = gguf.quants.dequantize(data, gguf.GGMLQuantizationType[fmt])
    return torch.from_numpy(np.asarray(out, dtype=np.float32).copy()).reshape(shape)


def read_q4_1(name: str, path: str | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The stored (codes, d, m) of one Q4_1 matrix (the embedded model's by default); codes shaped like the matrix."""
    path = str(path or embedded_gguf_path())
    fmt, raw, shape = stored_blocks(name, path)
    if fmt != "Q4_1":
        raise ValueError(message("{tensor} is stored as {fmt}, not Q4_1.", tensor=gguf_name(name), fmt=fmt))
    codes, d, m = unpack_q4_1(raw)
    return codes.reshape(shape), d, m
