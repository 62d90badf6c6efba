"""How big the KV cache is: bytes per token, per user, per batch, for any architecture.

For every token it has seen, every layer keeps one key vector and one value
vector per key-value head, so

    kv_bytes_per_token = 2 (K and V) x layers x kv_heads x head_dim x bytes per element.

Nothing else about the model (hidden size, MLP width, vocabulary, the number of
query heads) appears in that product. A batch holds ``users x tokens`` such
tokens, and the cache is that count times the bytes per token: it depends only
on how many tokens are resident, not on how they are shared out among users.

The pure functions here compute; :func:`measure_cache` and :func:`describe_cache`
read the real cache a forward pass left behind (through :mod:`helpers.kv_cache`),
so the notebook can hold the formula against the allocator.

Sizes are reported in binary units (1 KiB = 1,024 bytes), which is also what the
source chapter means when it writes "KB", "MB" and "GB".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Iterable, Sequence

import torch

from . import kv_cache
from .attention import Dims

# --------------------------------------------------------------------------- element sizes

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8": 1, "int8": 1}
_ALIASES = {
    "fp32": "float32", "float": "float32",
    "fp16": "float16", "half": "float16",
    "bf16": "bfloat16",
    "fp8": "float8", "float8_e4m3fn": "float8", "float8_e5m2": "float8",
}


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
        raise ValueError(f"Unknown dtype {dtype!r}: use one of {', '.join(DTYPE_BYTES)}.")
    return key


def bytes_per_element(dtype) -> int:
    """Bytes one cached number takes in ``dtype`` (a name such as ``'fp16'`` or a ``torch.dtype``)."""
    return DTYPE_BYTES[dtype_name(dtype)]


def _whole(name: str, value, minimum: int, why: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValueError(f"{name} must be a whole number, got {value!r}.")
    if value < minimum:
        bound = {0: "zero or more", 1: "a positive whole number"}.get(minimum, f"at least {minimum}")
        raise ValueError(f"{name} must be {bound}, got {value}{why}.")
    return value


def _element_bytes(b) -> int:
    if isinstance(b, (str, torch.dtype)):
        return bytes_per_element(b)
    return _whole("bytes_per_element", b, 1, " (or pass a dtype name such as 'fp16')")


# --------------------------------------------------------------------------- the formula


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, bytes_per_element) -> int:
    """2 (K and V) x layers x KV heads x head dim x bytes per element.

    ``bytes_per_element`` is a whole number of bytes or a dtype (``'fp16'``, ``torch.float32`` ...).
    """
    layers = _whole("layers", layers, 1)
    kv_heads = _whole("kv_heads", kv_heads, 1, ": every attention layer keeps at least one key-value head")
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
        raise ValueError(f"a size in bytes cannot be negative, got {n}.")
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
    k = 0
    v = float(n)
    while v >= 1024 and k < len(units) - 1:
        v /= 1024
        k += 1
    if v == int(v):
        return f"{int(v):,} {units[k]}"
    return f"{v:.2f} {units[k]}" if v < 10 else f"{v:.1f} {units[k]}" if v < 100 else f"{v:.0f} {units[k]}"


# --------------------------------------------------------------------------- architectures


@dataclass(frozen=True)
class KVArchitecture:
    """The four numbers the cache depends on, plus the query heads (which decide MHA/GQA/MQA) and a parameter count."""
    name: str
    layers: int
    query_heads: int
    kv_heads: int
    head_dim: int
    params: int | None = None        # for the weights the cache is compared with

    def __post_init__(self):
        _whole("layers", self.layers, 1)
        _whole("query_heads", self.query_heads, 1, ": a model needs at least one query head")
        _whole("kv_heads", self.kv_heads, 1, ": every attention layer keeps at least one key-value head")
        _whole("head_dim", self.head_dim, 1)
        if self.query_heads % self.kv_heads:
            divisors = [d for d in range(1, self.query_heads + 1) if self.query_heads % d == 0]
            raise ValueError(
                f"kv_heads ({self.kv_heads}) must divide query_heads ({self.query_heads}) evenly, because each "
                f"key-value head serves a whole group of query heads; try one of {', '.join(map(str, divisors))}.")
        if self.params is not None:
            _whole("params", self.params, 1)

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
        return kv_bytes_per_token(self.layers, self.kv_heads, self.head_dim, dtype)

    def cache_bytes(self, dtype, users: int, tokens: int) -> int:
        return cache_bytes(self.bytes_per_token(dtype), users, tokens)

    def weight_bytes(self, dtype) -> int:
        if self.params is None:
            raise ValueError(f"{self.name} has no parameter count: pass params= when you build it.")
        return self.params * bytes_per_element(dtype)

    def with_kv_heads(self, kv_heads: int) -> "KVArchitecture":
        """The same model with a different number of key-value heads (the parameter count is kept as is)."""
        return replace(self, kv_heads=kv_heads)

    def variants(self) -> dict[str, "KVArchitecture"]:
        """MHA, this model's own grouping (if different) and MQA: same layers, query heads and head dim."""
        out = {"MHA": self.with_kv_heads(self.query_heads)}
        if self.attention == "GQA":
            out["GQA"] = self
        out["MQA"] = self.with_kv_heads(1)
        return out

    @classmethod
    def from_config(cls, config, name: str | None = None, params: int | None = None) -> "KVArchitecture":
        """Read layers, query heads, KV heads and head dim from a transformers config."""
        types = set(getattr(config, "layer_types", None) or [])
        if types - {"full_attention"}:
            raise ValueError(
                f"This config has {sorted(types - {'full_attention'})} layers, whose cache stops growing at a window; "
                f"the formula here assumes every layer keeps every token.")
        d = Dims.from_config(config)
        return cls(name or getattr(config, "model_type", "model"), d.layers, d.heads, d.kv_heads, d.head_dim, params)


def kv_bytes_per_token_from_config(config, dtype=None) -> int:
    """Bytes per token of cache for a transformers config; ``dtype`` defaults to the config's own."""
    if dtype is None:
        dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
        if dtype is None:
            raise ValueError("This config does not say its dtype: pass dtype= (e.g. 'fp16').")
    return KVArchitecture.from_config(config).bytes_per_token(dtype)


# The chapter measured Qwen2.5-0.5B; 494,032,768 parameters with its tied embedding.
CHAPTER_MODEL = KVArchitecture("Qwen2.5-0.5B (the chapter's model)", layers=24, query_heads=14, kv_heads=2,
                               head_dim=64, params=494_032_768)
CHAPTER_HIDDEN, CHAPTER_MLP, CHAPTER_VOCAB = 896, 4864, 151_936
# The chapter's 7B class: 32 layers, 32 query heads sharing 8 KV heads of dim 128. Its "13.0 GB" of fp16
# weights is a nominal 7.0e9 parameters x 2 bytes in GiB.
SEVEN_B_CLASS = KVArchitecture("7B-class", layers=32, query_heads=32, kv_heads=8, head_dim=128,
                               params=7_000_000_000)


def chapter_config(intermediate_size: int = CHAPTER_MLP, vocab_size: int = CHAPTER_VOCAB, kv_heads: int = 2):
    """A ``Qwen2Config`` with the chapter's attention geometry (24 layers, 14 query heads, head dim 64).

    The MLP width and vocabulary can be shrunk to build a light random model: neither appears in the cache.
    """
    from transformers import Qwen2Config
    a = CHAPTER_MODEL.with_kv_heads(kv_heads)          # validates kv_heads against the 14 query heads
    return Qwen2Config(vocab_size=vocab_size, hidden_size=CHAPTER_HIDDEN, intermediate_size=intermediate_size,
                       num_hidden_layers=a.layers, num_attention_heads=a.query_heads, num_key_value_heads=a.kv_heads,
                       tie_word_embeddings=True, use_sliding_window=False)


def random_model(config, dtype=torch.float16, seed: int = 0):
    """A model with random weights built from ``config`` (no download), in eval mode."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    with torch.device("cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype_name(dtype)))
    return model.eval()


# --------------------------------------------------------------------------- measuring the real cache


@dataclass(frozen=True)
class CacheMeasurement:
    users: int
    tokens: int
    layers: int
    layer_shape: tuple          # shape of one layer's K (and V): (users, kv_heads, tokens, head_dim)
    dtype: str
    nbytes: int                 # numel x element size of every K and V (helpers.kv_cache.cache_nbytes)
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
        raise ValueError("The cache is empty: run a forward pass with it first.")
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
    users = _whole("users", users, 1)
    tokens = _whole("tokens", tokens, 1)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (users, tokens), generator=g)
    device = next(model.parameters()).device
    _, cache = kv_cache.forward(model, ids.to(device), cache=kv_cache.new_cache(model), logits_to_keep=1)
    return describe_cache(cache)


# --------------------------------------------------------------------------- the calculator


def calculator(layers: int, query_heads: int, kv_heads: int, head_dim: int, dtype, users: int,
               tokens: int) -> dict:
    """Everything the cache calculator shows, for one setting of its controls."""
    arch = KVArchitecture("custom", layers, query_heads, kv_heads, head_dim)
    per_token = arch.bytes_per_token(dtype)
    total = cache_bytes(per_token, users, tokens)
    return dict(attention=arch.attention, group_size=arch.group_size, bytes_per_token=per_token,
                bytes_per_user=per_token * tokens, resident_tokens=users * tokens, total_bytes=total,
                mha_bytes=cache_bytes(arch.with_kv_heads(query_heads).bytes_per_token(dtype), users, tokens),
                mqa_bytes=cache_bytes(arch.with_kv_heads(1).bytes_per_token(dtype), users, tokens))


def resident_grid(tokens_min: int, tokens_max: int, users_max: int, per_octave: int = 4) -> list[float]:
    """Resident-token counts, evenly spaced on a log scale, covering ``tokens_min * 1`` to ``tokens_max * users_max``."""
    lo, hi = math.log2(tokens_min), math.log2(tokens_max * users_max)
    n = int(round((hi - lo) * per_octave))
    return [2 ** (lo + i / per_octave) for i in range(n + 1)]


def calculator_figure(archs: Sequence[KVArchitecture], dtypes: Sequence[str], users_values: Sequence[int],
                      tokens_range: tuple[int, int] = (128, 131_072), active_arch: int = 0, active_dtype: int = 0,
                      active_users: int = 0, title: str = "How big the cache is"):
    """The static calculator: cache (GiB) against tokens per user, with the model's weights for scale.

    Three controls that never undo each other, because each changes a different attribute of the traces:
    the architecture dropdown switches *visibility* (one line per MHA/GQA/MQA variant and one for the
    weights), the dtype dropdown rewrites every trace's *y* (bytes scale with the element size), and the
    users slider rewrites every trace's *x*: each trace is drawn over a fixed grid of resident tokens R,
    so with u users the point (R / u, cache(R)) is the cache at R / u tokens per user.
    """
    import plotly.graph_objects as go

    from . import plotting

    if not archs or not dtypes or not users_values:
        raise ValueError("calculator_figure needs at least one architecture, one dtype and one users value.")
    GiB = 2 ** 30
    grid = resident_grid(tokens_range[0], tokens_range[1], max(users_values))
    fig = plotting.figure(x="tokens per user (context length)")
    owner, kinds = [], []   # for each trace: which architecture, and (bytes_per_token by dtype | weights)
    dashes = {"MHA": "dot", "GQA": "solid", "MQA": "dash"}
    colours = {"MHA": plotting.PALETTE[1], "GQA": plotting.PALETTE[0], "MQA": plotting.PALETTE[2]}
    for a_i, arch in enumerate(archs):
        for label, v in arch.variants().items():
            own = " (this model)" if v.kv_heads == arch.kv_heads else ""
            heads = f"{v.kv_heads} KV head" + ("s" if v.kv_heads > 1 else "")
            fig.add_trace(go.Scatter(name=f"cache, {label}: {heads}{own}", mode="lines",
                                     line=dict(color=colours[label], dash=dashes[label], width=3 if own else 2),
                                     hovertemplate="%{y:.3g} GiB<extra>%{fullData.name}</extra>"))
            owner.append(a_i)
            kinds.append(("cache", v))
        if arch.params is not None:
            fig.add_trace(go.Scatter(name="weights", mode="lines", line=dict(color="#555555", width=2),
                                     hovertemplate="%{y:.3g} GiB<extra>weights</extra>"))
            owner.append(a_i)
            kinds.append(("weights", arch))

    def ys(dtype):
        out = []
        for kind, a in kinds:
            if kind == "cache":
                bpt = a.bytes_per_token(dtype)
                out.append([r * bpt / GiB for r in grid])
            else:
                out.append([a.weight_bytes(dtype) / GiB] * len(grid))
        return out

    lo, hi = tokens_range

    def xs(users):   # points outside the axis are left out (None), so the y-axis fits what is visible
        row = [r / users if lo <= r / users <= hi else None for r in grid]
        return [row for _ in kinds]

    def visible(a_i):
        return [o == a_i for o in owner]

    def arch_title(a):
        return (f"{title}: {a.name}, {a.layers} layers, {a.query_heads} query heads, "
                f"head dim {a.head_dim}")

    # One fixed y-range for every setting, so that moving a control moves the lines, not the axis.
    seen = [y for d in dtypes for u in users_values for xr, yr in zip(xs(u), ys(d)) for x, y in zip(xr, yr)
            if x is not None and y > 0]
    y_range = [math.floor(math.log10(min(seen))), math.ceil(math.log10(max(seen)))]
    ticks = [2 ** e for e in range(0, 80, 5) if y_range[0] <= math.log10(2 ** e / GiB) <= y_range[1]]

    x0, y0 = xs(users_values[active_users]), ys(dtypes[active_dtype])
    for j, tr in enumerate(fig.data):
        tr.x, tr.y, tr.visible = x0[j], y0[j], owner[j] == active_arch
    fig.update_layout(
        title_text=arch_title(archs[active_arch]),
        xaxis=dict(type="log", range=[math.log10(tokens_range[0]), math.log10(tokens_range[1])]),
        yaxis=dict(type="log", range=y_range, title_text="cache (and weights)",
                   tickvals=[t / GiB for t in ticks], ticktext=[human_bytes(t) for t in ticks]),
        hovermode="x unified",
        height=580, margin=dict(t=135, b=110),
        title=dict(y=0.97, yanchor="top"),
        legend=dict(x=0.01, y=0.99, xanchor="left", yanchor="top"),
        updatemenus=[
            dict(type="dropdown", x=0.0, xanchor="left", y=1.03, yanchor="bottom", active=active_arch,
                 buttons=[dict(label=f"model: {a.name}", method="update",
                               args=[{"visible": visible(i)}, {"title.text": arch_title(a)}])
                          for i, a in enumerate(archs)]),
            dict(type="dropdown", x=1.0, xanchor="right", y=1.03, yanchor="bottom", active=active_dtype,
                 buttons=[dict(label=f"dtype: {dtype_name(d)} ({bytes_per_element(d)} B)", method="restyle",
                               args=[{"y": ys(d)}]) for d in dtypes]),
        ],
        sliders=[dict(active=active_users, currentvalue=dict(prefix="users: "), pad=dict(t=50),
                      steps=[dict(method="restyle", label=str(u), args=[{"x": xs(u)}]) for u in users_values])],
    )
    return fig
