"""Section 3 (notebooks/03-cache-size.md): how big the KV cache is: bytes per token, per user, per batch, for
any architecture.

For every token it has seen, every layer keeps one key vector and one value vector per key-value head, so

    kv_bytes_per_token = 2 (K and V) x layers x kv_heads x head_dim x bytes per element.

Nothing else about the model (hidden size, MLP width, vocabulary, the number of query heads) appears in that
product. A batch holds ``users x tokens`` such tokens, and the cache is that count times the bytes per token: it
depends only on how many tokens are resident, not on how they are shared out among users.

The pure functions here compute; :func:`measure_cache` and :func:`describe_cache` read the real cache a forward pass
left behind (through :mod:`helpers.s01_kv_cache`), so the notebook can hold the formula against the allocator.

Sizes are reported in binary units (1 KiB = 1,024 bytes), which is also what the source chapter means when it writes
"KB", "MB" and "GB".

**Sliding windows.** A layer with *sliding-window* attention lets a new token see only itself and the ``window - 1``
tokens before it, so its cache stops growing there (transformers' growing cache keeps exactly ``window - 1`` tokens
per such layer). A hybrid model (Gemma 3, Mistral's early models, Qwen2 with ``use_sliding_window``) mixes such
layers with full-attention ones; :meth:`KVArchitecture.cache_bytes` adds the two kinds up. The calculator lives in
:mod:`helpers.s03_cache_calculator`.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Iterable

import torch
from transformers import AutoModelForCausalLM

from .infra import chapter
from .infra.messages import message
from . import s01_kv_cache as kv_cache
from .s01_attention import Dims

# --------------------------------------------------------------------------- element sizes

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8": 1, "int8": 1}
_ALIASES = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16",
            "fp8": "float8", "float8_e4m3fn": "float8", "float8_e5m2": "float8"}


def dtype_name(dtype) -> str:
    """The canonical name (``float32``, ``float16``, ``bfloat16``, ``float8``, ``int8``) of a dtype or its alias."""
    if isinstance(dtype, torch.dtype):
        key = str(dtype).removeprefix("torch.")
    elif isinstance(dtype, str):
        key = dtype.strip().lower().removeprefix("torch.")
    else:
        key = None
    key = _ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        raise ValueError(message("Unknown dtype {dtype!r}: use one of {dtypes}.",
                                 dtype=dtype, dtypes=", ".join(DTYPE_BYTES)))
    return key


def bytes_per_element(dtype) -> int:
    """Bytes one cached number takes in ``dtype`` (a name such as ``'fp16'`` or a ``torch.dtype``)."""
    return DTYPE_BYTES[dtype_name(dtype)]


# _whole's sentences: one for each argument whose reason is worth saying, else one for each lower bound
WHOLE = {"bytes_per_element": "{name} must be a positive whole number or a dtype name such as 'fp16', got {value}.",
         "kv_heads": "{name} must be at least 1, got {value}: every attention layer keeps at least one key-value head.",
         "query_heads": "{name} must be at least 1, got {value}: a model needs at least one query head.",
         "window": "{name} must be at least 2 tokens, got {value}: the new token and at least one before it.",
         0: "{name} must be zero or more, got {value}.", 1: "{name} must be a positive whole number, got {value}."}


def _whole(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValueError(message("{name} must be a whole number, got {value!r}.", name=name, value=value))
    if value < minimum:
        raise ValueError(message(WHOLE[name if name in WHOLE else minimum], name=name, value=value))
    return value


def _element_bytes(b) -> int:
    if isinstance(b, (str, torch.dtype)):
        return bytes_per_element(b)
    return _whole("bytes_per_element", b, 1)


# --------------------------------------------------------------------------- the formula


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, bytes_per_element) -> int:
    """2 (K and V) x layers x KV heads x head dim x bytes per element.

    ``bytes_per_element`` is a whole number of bytes or a dtype (``'fp16'``, ``torch.float32`` ...).
    """
    layers = _whole("layers", layers, 1)
    kv_heads = _whole("kv_heads", kv_heads, 1)
    head_dim = _whole("head_dim", head_dim, 1)
    return 2 * layers * kv_heads * head_dim * _element_bytes(bytes_per_element)


def cache_bytes(bytes_per_token: int, users: int, tokens: int) -> int:
    """Bytes of cache for ``users`` sequences of ``tokens`` tokens each: users x tokens x bytes per token."""
    bytes_per_token = _whole("bytes_per_token", bytes_per_token, 1)
    users = _whole("users", users, 0)
    tokens = _whole("tokens", tokens, 0)
    return users * tokens * bytes_per_token


def context_to_exceed(limit_bytes: int, bytes_per_token: int, users: int = 1) -> int:
    """The smallest context (tokens per user) at which ``users`` caches together hold more than ``limit_bytes``."""
    limit_bytes = _whole("limit_bytes", limit_bytes, 0)
    bytes_per_token = _whole("bytes_per_token", bytes_per_token, 1)
    users = _whole("users", users, 1)
    return limit_bytes // (users * bytes_per_token) + 1


def shape_table(bytes_per_token: int, shapes: Iterable[tuple[int, int]]) -> list[dict]:
    """One row per (users, tokens each): resident tokens and cache bytes."""
    return [dict(users=u, tokens=t, resident=u * t, bytes=cache_bytes(bytes_per_token, u, t)) for u, t in shapes]


def human_bytes(n: int | float) -> str:
    """Binary units, as the chapter uses them: 12288 -> '12 KiB', 805306368 -> '768 MiB'."""
    if n < 0:
        raise ValueError(message("a size in bytes cannot be negative, got {n}.", n=n))
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
    k, v = 0, float(n)
    while v >= 1024 and k < len(units) - 1:
        v /= 1024
        k += 1
    if v == int(v):
        return f"{int(v):,} {units[k]}"
    return f"{v:.2f} {units[k]}" if v < 10 else f"{v:.1f} {units[k]}" if v < 100 else f"{v:.0f} {units[k]}"


# --------------------------------------------------------------------------- architectures


@dataclass(frozen=True)
class KVArchitecture:
    """What the cache depends on: layers, KV heads, head dim; the query heads (MHA/GQA/MQA); the sliding
    window, if any, and on how many of the layers; and a parameter count (for the weights)."""
    name: str
    layers: int
    query_heads: int
    kv_heads: int
    head_dim: int
    params: int | None = None        # for the weights the cache is compared with
    window: int | None = None        # sliding window (tokens a query sees, itself included), if any
    window_layers: int = 0           # how many of the layers use it; the others keep every token

    def __post_init__(self):
        _whole("layers", self.layers, 1)
        _whole("query_heads", self.query_heads, 1)
        _whole("kv_heads", self.kv_heads, 1)
        _whole("head_dim", self.head_dim, 1)
        if self.query_heads % self.kv_heads:
            divisors = ", ".join(str(d) for d in range(1, self.query_heads + 1) if self.query_heads % d == 0)
            raise ValueError(message("kv_heads ({kv_heads}) must divide query_heads ({query_heads}) evenly, because "
                                     "each key-value head serves a whole group of query heads; try one of {divisors}.",
                                     kv_heads=self.kv_heads, query_heads=self.query_heads, divisors=divisors))
        if self.params is not None:
            _whole("params", self.params, 1)
        _whole("window_layers", self.window_layers, 0)
        if self.window_layers > self.layers:
            raise ValueError(message("window_layers ({window_layers}) cannot exceed the {layers} layers.",
                                     window_layers=self.window_layers, layers=self.layers))
        if self.window_layers and self.window is None:
            raise ValueError(message("Sliding-window layers need a window: pass window= (tokens a query can see)."))
        if self.window is not None:
            _whole("window", self.window, 2)

    @property
    def group_size(self) -> int:
        """Query heads that share one key-value head."""
        return self.query_heads // self.kv_heads

    @property
    def attention(self) -> str:
        """'MHA' (one KV head per query head), 'MQA' (one KV head in all) or 'GQA' (in between)."""
        if self.kv_heads == self.query_heads:
            return "MHA"
        return "MQA" if self.kv_heads == 1 else "GQA"

    def bytes_per_token(self, dtype) -> int:
        """Bytes each token adds while it is inside every window: the full formula over all layers."""
        return kv_bytes_per_token(self.layers, self.kv_heads, self.head_dim, dtype)

    def bytes_per_token_past_window(self, dtype) -> int:
        """Bytes each token adds once the windows are full: only the full-attention layers still grow."""
        full = self.layers - self.window_layers
        return 0 if full == 0 else kv_bytes_per_token(full, self.kv_heads, self.head_dim, dtype)

    def kept_tokens(self, tokens: int) -> tuple[int, int]:
        """Tokens each layer holds at a context of ``tokens``: (full-attention layer, sliding-window layer)."""
        tokens = _whole("tokens", tokens, 0)
        return tokens, (tokens if self.window is None else min(tokens, self.window - 1))

    def cache_bytes(self, dtype, users: int, tokens: int) -> int:
        """Bytes of cache for ``users`` sequences of ``tokens`` tokens: full layers keep all, windowed ones cap."""
        full, windowed = self.kept_tokens(tokens)
        per_layer_token = kv_bytes_per_token(1, self.kv_heads, self.head_dim, dtype)
        layer_tokens = (self.layers - self.window_layers) * full + self.window_layers * windowed
        return _whole("users", users, 0) * layer_tokens * per_layer_token

    def weight_bytes(self, dtype) -> int:
        if self.params is None:
            raise ValueError(message("{name} has no parameter count: pass params= when you build it.", name=self.name))
        return self.params * bytes_per_element(dtype)

    def with_kv_heads(self, kv_heads: int) -> "KVArchitecture":
        """The same model with a different number of key-value heads (the parameter count is kept as is)."""
        return replace(self, kv_heads=kv_heads)

    def with_window(self, window: int | None, window_layers: int | None = None) -> "KVArchitecture":
        """The same model with a sliding window on ``window_layers`` layers (default: all; ``None``: no window)."""
        if window is None:
            return replace(self, window=None, window_layers=0)
        return replace(self, window=window, window_layers=self.layers if window_layers is None else window_layers)

    def variants(self) -> dict[str, "KVArchitecture"]:
        """MHA, this model's own grouping (if different) and MQA: same layers, query heads, head dim, windows."""
        out = {"MHA": self.with_kv_heads(self.query_heads)}
        if self.attention == "GQA":
            out["GQA"] = self
        out["MQA"] = self.with_kv_heads(1)
        return out

    @classmethod
    def from_config(cls, config, name: str | None = None, params: int | None = None) -> "KVArchitecture":
        """Read layers, heads, head dim and sliding windows from a transformers config."""
        windows = layer_windows(config)
        sizes = {w for w in windows if w is not None}
        if len(sizes) > 1:
            raise ValueError(message("This config has sliding windows of several sizes {sizes}; the formula here "
                                     "handles one window size.", sizes=sorted(sizes)))
        d = Dims.from_config(config)
        return cls(name or getattr(config, "model_type", "model"), d.layers, d.heads, d.kv_heads, d.head_dim, params,
                   window=sizes.pop() if sizes else None, window_layers=sum(w is not None for w in windows))


def layer_windows(config) -> list[int | None]:
    """Each layer's sliding window (``None``: the layer keeps every token), read as transformers reads it."""
    n = config.num_hidden_layers
    types = getattr(config, "layer_types", None)
    window = getattr(config, "sliding_window", None)
    if types is None:       # older configs (Mistral): a window on the config means every layer slides
        return [window] * n if window is not None and getattr(config, "use_sliding_window", True) else [None] * n
    unknown = set(types) - {"full_attention", "sliding_attention"}
    if unknown:
        raise ValueError(message("This config has {unknown} layers; the cache formula here covers full and "
                                 "sliding-window attention layers only.", unknown=sorted(unknown)))
    return [window if t == "sliding_attention" else None for t in types]


def kv_bytes_per_token_from_config(config, dtype=None) -> int:
    """Bytes per token of cache for a transformers config (all layers; sliding windows stop growing later).

    ``dtype`` (a name, a ``torch.dtype`` or a whole number of bytes) defaults to the config's own.
    """
    if dtype is None:
        dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
        if dtype is None:
            raise ValueError(message("This config does not say its dtype: pass dtype= (e.g. 'fp16')."))
    return KVArchitecture.from_config(config).bytes_per_token(dtype)


def _from_chapter(geometry: dict) -> KVArchitecture:
    return KVArchitecture(geometry["name"], geometry["layers"], geometry["query_heads"], geometry["kv_heads"],
                          geometry["head_dim"], geometry["params"])


# The chapter's two reference architectures (their numbers live in helpers.infra.chapter).
CHAPTER_MODEL = _from_chapter(chapter.QWEN25)
SEVEN_B_CLASS = _from_chapter(chapter.SEVEN_B)


def shrunk_config(config, mlp: int, vocab: int, kv_heads: int | None = None):
    """``config`` with an MLP ``mlp`` wide and ``vocab`` tokens (neither enters the cache: a random model of it
    has the same cache in a fraction of the parameters) and, if given, ``kv_heads`` key-value heads."""
    config = copy.deepcopy(config)
    config.intermediate_size = _whole("mlp", mlp, 1)
    config.vocab_size = _whole("vocab", vocab, 1)
    if kv_heads is not None:
        config.num_key_value_heads = _whole("kv_heads", kv_heads, 1)
    return config


def random_model(config, dtype=torch.float16, seed: int = 0):
    """A model with random weights built from ``config`` (no download), in eval mode."""
    torch.manual_seed(seed)
    with torch.device("cpu"):      # drawn in fp32 (drawing in fp16 on a CPU is several times slower), then cast
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.to(getattr(torch, dtype_name(dtype))).eval()


# --------------------------------------------------------------------------- measuring the real cache


@dataclass(frozen=True)
class CacheMeasurement:
    users: int
    tokens: int
    layers: int
    layer_shape: tuple          # shape of one layer's K (and V): (users, kv_heads, tokens, head_dim)
    dtype: str
    nbytes: int                 # numel x element size of every K and V (helpers.s01_kv_cache.cache_nbytes)
    storage_bytes: int          # bytes of the distinct storages the allocator handed out for them

    @property
    def resident_tokens(self) -> int:
        return self.users * self.tokens

    @property
    def bytes_per_token(self) -> int | Fraction:
        """Bytes per resident token: a whole number when the cache is what the formula says, a fraction otherwise."""
        f = Fraction(self.nbytes, self.resident_tokens)
        return int(f) if f.denominator == 1 else f


def describe_cache(cache) -> CacheMeasurement:
    """Read a filled cache: its per-layer shape and dtype, and the bytes it holds."""
    n_layers = kv_cache.num_cache_layers(cache)
    if n_layers == 0 or kv_cache.cache_length(cache) == 0:
        raise ValueError(message("The cache is empty: run a forward pass with it first."))
    k0, _ = kv_cache.layer_kv(cache, 0)
    storages = {}
    for i in range(n_layers):
        for t in kv_cache.layer_kv(cache, i):
            s = t.untyped_storage()
            storages[s.data_ptr()] = s.nbytes()
    return CacheMeasurement(users=k0.shape[0], tokens=kv_cache.cache_length(cache), layers=n_layers,
                            layer_shape=tuple(k0.shape), dtype=dtype_name(k0.dtype),
                            nbytes=kv_cache.cache_nbytes(cache), storage_bytes=sum(storages.values()))


@torch.inference_mode()
def measure_cache(model, users: int, tokens: int, seed: int = 0) -> CacheMeasurement:
    """Prefill ``users`` sequences of ``tokens`` random token ids in one batch and measure the cache it leaves."""
    users, tokens = _whole("users", users, 1), _whole("tokens", tokens, 1)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (users, tokens), generator=g)
    device = next(model.parameters()).device
    _, cache = kv_cache.forward(model, ids.to(device), cache=kv_cache.new_cache(model), logits_to_keep=1)
    return describe_cache(cache)
