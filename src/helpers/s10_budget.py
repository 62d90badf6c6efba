"""The memory budget, section 10 (notebooks/10-memory-budget.md): everything is a sum.

A model being served holds its weights and, for every resident token of every
concurrent request, one token's worth of KV cache. On top of that the runtime
keeps some memory for itself. So a card of ``M`` bytes serves

    tokens that fit = (M - overhead - weights) // bytes per token,

where the tokens are summed over all users. Bytes per token come from
:func:`helpers.s03_cache_size.kv_bytes_per_token` (section 3), weight bytes from
:func:`helpers.infra.model.weight_bytes_at` with section 5's
:func:`helpers.s05_quantization.bits_per_weight`; this module only adds the overhead and the division.

The chapter's tables (8, 16 and 24 GB cards; 7B, 13B and 70B models; fp16,
int8 and int4 weights) are reproduced *exactly* by these assumptions, which the
unit tests pin down (and show that the obvious alternatives miss):

* a card of "16 GB" has 16 GiB (16 x 2**30 bytes);
* the runtime keeps a fixed 1.5 GiB (CUDA context, activation workspace, allocator slack);
* parameters are the nominal counts: 7.0e9, 13.0e9, 70.0e9;
* fp16 is 16 bits per weight, int8 is 8, int4 is 4.125 (4 bits plus one 16-bit scale per group of 128,
  the accounting of section 5);
* the KV cache stays in fp16 whatever the weights are stored in;
* a partial token does not fit: round down.

Bad input (a card size given as text, NaN, a negative overhead, an unknown format) raises ``ValueError`` with one
sentence.
"""
from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass

import plotly.graph_objects as go

from .infra import chapter
from .infra.messages import message
from .infra.model import weight_bytes_at
from .infra.plotting import PALETTE, figure
from .s03_cache_size import KVArchitecture, SEVEN_B_CLASS, human_bytes
from .s05_quantization import bits_per_weight

GiB = 2 ** 30
RUNTIME_OVERHEAD = 3 * GiB // 2                 # 1.5 GiB the runtime keeps for itself
WEIGHT_BITS = {"fp32": 32, "fp16": 16, "int8": 8,
               "int4": bits_per_weight(4, group_size=128)}   # int4: group-128 with an fp16 scale: 4.125
KV_FORMATS = ("fp32", "fp16", "int8")           # bytes per cached number: 4, 2, 1
CHAPTER_KV_FORMAT = "fp16"

# The chapter's three model classes (section 10); the 7B is section 3's 7B class.
MODELS = {"7B": SEVEN_B_CLASS,
          "13B": KVArchitecture(**chapter.THIRTEEN_B),
          "70B": KVArchitecture(**chapter.SEVENTY_B)}

# What real "7B" models have, against the nominal 7.0e9 the chapter's tables use: the weights of Llama 2 7B and
# Mistral 7B v0.1, counted from their published shapes (the unit tests count them again).
REAL_7B_PARAMS = {"Llama 2 7B": 6_738_415_616, "Mistral 7B": 7_241_732_096}


def _check_format(fmt: str, known) -> str:
    if not isinstance(fmt, str) or fmt not in known:
        raise ValueError(message("Unknown format {fmt!r}: use one of {known}.", fmt=fmt, known=", ".join(known)))
    return fmt


# what each amount must be, a whole sentence for each (an edition translates sentences, not their parts)
AMOUNTS = {"params": "The parameter count must be a non-negative whole number of weights, got {value!r}.",
           "memory": "The memory must be a non-negative whole number of bytes, got {value!r}.",
           "weights": "The weights must be a non-negative whole number of bytes, got {value!r}.",
           "overhead": "The runtime overhead must be a non-negative whole number of bytes, got {value!r}.",
           "bytes_per_token": "bytes_per_token must be a positive whole number of bytes, got {value!r}.",
           "card_gb": "The card's memory must be a positive number of GB, got {value!r}."}


def _check_amount(value, what: str, whole: bool = False, zero: bool = False) -> None:
    """Raise ``ValueError`` (the sentence ``AMOUNTS[what]``) unless ``value`` is a finite number (a whole one if
    ``whole``; ints, not bools or text) above zero, or at least zero if ``zero``."""
    ok = (not isinstance(value, bool) and isinstance(value, numbers.Integral if whole else numbers.Real)
          and math.isfinite(value) and (value >= 0 if zero else value > 0))
    if not ok:
        raise ValueError(message(AMOUNTS[what], value=value))


def weight_bytes(params: int, weight_format: str) -> int:
    """Bytes of ``params`` weights stored in ``weight_format`` (rounded up to a whole byte)."""
    _check_amount(params, "params", whole=True, zero=True)
    return math.ceil(weight_bytes_at(params, WEIGHT_BITS[_check_format(weight_format, WEIGHT_BITS)]))


def tokens_that_fit(memory_bytes: int, weights: int, bytes_per_token: int, overhead: int = RUNTIME_OVERHEAD) -> int:
    """Resident tokens (over all users) whose cache fits beside the weights; negative when the weights do not fit."""
    for value, what in ((memory_bytes, "memory"), (weights, "weights"), (overhead, "overhead")):
        _check_amount(value, what, whole=True, zero=True)
    _check_amount(bytes_per_token, "bytes_per_token", whole=True)
    return (memory_bytes - overhead - weights) // bytes_per_token


@dataclass(frozen=True)
class Fit:
    """One cell of the budget table."""
    memory: int           # bytes on the card
    weights: int          # bytes of weights
    bytes_per_token: int  # of KV cache
    tokens: int           # resident tokens that fit (negative: the weights alone do not fit)

    @property
    def fits(self) -> bool:
        return self.tokens >= 0


def fit(card_gb: float, model: str, weight_format: str, kv_format: str = CHAPTER_KV_FORMAT,
        overhead: int = RUNTIME_OVERHEAD) -> Fit:
    """How many tokens of context fit on a card of ``card_gb`` GB (GiB) for one of :data:`MODELS`."""
    if not isinstance(model, str) or model not in MODELS:
        raise ValueError(message("Unknown model {model!r}: use one of {models}.", model=model,
                                 models=", ".join(MODELS)))
    _check_amount(card_gb, "card_gb")
    arch = MODELS[model]
    memory = int(card_gb * GiB)
    w = weight_bytes(arch.params, weight_format)
    bpt = arch.bytes_per_token(_check_format(kv_format, KV_FORMATS))
    return Fit(memory, w, bpt, tokens_that_fit(memory, w, bpt, overhead))


def budget_table(cards=chapter.S10_CARDS_GB, models=tuple(MODELS), formats=("fp16", "int8", "int4"),
                 kv_format: str = CHAPTER_KV_FORMAT) -> list[dict]:
    """The chapter's tables: one row per (card, model, weight format)."""
    return [dict(card_gb=c, model=m, weight_format=w, **vars(fit(c, m, w, kv_format)))
            for c in cards for m in models for w in formats]


def quoted_numbers(gb: int = GiB, overhead: int = RUNTIME_OVERHEAD, int4_bits: float = WEIGHT_BITS["int4"],
                   params_7b: int | None = None) -> tuple[int, int, int]:
    """The chapter's three quoted numbers under these assumptions: tokens that fit for the 13B in int4 on 8 GB, and
    for the 7B and the 13B in int8 on 16 GB. The defaults are the assumptions that reproduce them; change one
    (decimal GB, another overhead, int4 as 4.0 bits, a real 7B's parameter count) to see what it gives instead."""
    def tokens(card_gb, model, bits, params=None):
        arch = MODELS[model]
        weights = math.ceil(weight_bytes_at(params or arch.params, bits))
        return tokens_that_fit(card_gb * gb, weights, arch.bytes_per_token(CHAPTER_KV_FORMAT), overhead)

    return tokens(8, "13B", int4_bits), tokens(16, "7B", WEIGHT_BITS["int8"], params_7b), tokens(16, "13B", WEIGHT_BITS["int8"])


def users_served(card_gb: float, model: str, weight_format: str, kv_format: str, context: int,
                 overhead: int = RUNTIME_OVERHEAD) -> int:
    """How many users, each holding ``context`` tokens, one card serves at once (the calculator)."""
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise ValueError(message("The context per user must be a positive whole number of tokens, got {context!r}.",
                                 context=context))
    f = fit(card_gb, model, weight_format, kv_format, overhead)
    if not f.fits:
        raise ValueError(message("{card_gb} GB is smaller than the {model} weights in {weight_format} ({weights}) "
                                 "plus {overhead} of runtime: choose a larger card or fewer bits per weight.",
                                 card_gb=card_gb, model=model, weight_format=weight_format,
                                 weights=human_bytes(f.weights), overhead=human_bytes(overhead)))
    return f.tokens // context


def frontier(card_gb: float, model: str, weight_format: str, kv_format: str, contexts) -> list[int]:
    """Users served at each context length: the users-against-context frontier (0 where not even one fits)."""
    return [users_served(card_gb, model, weight_format, kv_format, c) for c in contexts]


def frontier_figure(cards, contexts, card: float = 16, kv_format: str = CHAPTER_KV_FORMAT,
                    formats=("fp16", "int8", "int4")) -> go.Figure:
    """Users served against context per user, one line per (model, weight format), on a log-log plot; two menus
    that never undo each other: the card (which lines are visible) and the KV cache's format (their y values).
    Works without a kernel. A line stops where not one user of that context fits."""
    combos = [(m, w) for m in MODELS for w in formats]
    dashes = {"fp16": "dot", "int8": "dash", "int4": "solid"}

    def users(c, m, w, kv):
        f = fit(c, m, w, kv)
        return [f.tokens // n if f.fits and f.tokens >= n else None for n in contexts]

    ys = {kv: [users(c, m, w, kv) for c in cards for m, w in combos] for kv in KV_FORMATS}
    fig = figure("Users served against context per user", x="context per user (tokens; k = 1,024)",
                 y="users served at once")
    for i, (c, (m, w)) in enumerate((c, combo) for c in cards for combo in combos):
        fig.add_trace(go.Scatter(x=list(contexts), y=ys[kv_format][i], mode="lines+markers", visible=c == card,
                                 name=message("{model}, {w} weights", model=m, w=w),
                                 line=dict(color=PALETTE[list(MODELS).index(m)], dash=dashes[w]),
                                 hovertemplate="%{y} users at %{x:,} tokens<extra>%{fullData.name}</extra>"))
    card_menu = [dict(label=message("card: {c} GB", c=c), method="restyle",
                      args=[{"visible": [k // len(combos) == j for k in range(len(cards) * len(combos))]}])
                 for j, c in enumerate(cards)]
    kv_menu = [dict(label=message("KV cache: {kv}", kv=kv), method="restyle", args=[{"y": ys[kv]}])
               for kv in KV_FORMATS]
    fig.update_layout(
        xaxis=dict(type="log", tickvals=list(contexts),
                   ticktext=[f"{n // 1024}k" if n >= 1024 else str(n) for n in contexts]),
        yaxis=dict(type="log", range=[0, 3.5]), height=560, hovermode="closest",
        updatemenus=[dict(type="dropdown", x=0.0, xanchor="left", y=1.08, yanchor="bottom",
                          active=list(cards).index(card), buttons=card_menu),
                     dict(type="dropdown", x=1.0, xanchor="right", y=1.08, yanchor="bottom",
                          active=KV_FORMATS.index(kv_format), buttons=kv_menu)])
    return fig


def memory_bar(card_gb: float, f: Fit, cache_bytes: int) -> go.Figure:
    """One card's memory as a stacked bar: weights, runtime, the users' KV cache and what is left (the calculator)."""
    fig = figure("{gb} GB: where the memory goes", x="GiB", y="", fields=dict(gb=card_gb))
    parts = [(message("weights"), f.weights, PALETTE[7]), (message("runtime"), RUNTIME_OVERHEAD, PALETTE[3]),
             (message("KV cache of the users"), cache_bytes, PALETTE[0]),
             (message("left over"), f.memory - f.weights - RUNTIME_OVERHEAD - cache_bytes, "#dddddd")]
    for name, b, colour in parts:
        fig.add_trace(go.Bar(orientation="h", y=[""], x=[b / GiB], marker_color=colour,
                             name=message("{part}: {size}", part=name, size=human_bytes(b))))
    fig.update_layout(barmode="stack", height=220, margin=dict(t=50, b=30), hovermode="closest")
    return fig


def machine_tokens(memory_bytes: int, weights: int, bytes_per_token: int, overhead: int = RUNTIME_OVERHEAD) -> int:
    """This machine's row: tokens of context that fit in ``memory_bytes`` of RAM beside ``weights``."""
    n = tokens_that_fit(memory_bytes, weights, bytes_per_token, overhead)
    if n < 0:
        raise ValueError(message("{memory} cannot hold {weights} of weights plus {overhead} of runtime: use a "
                                 "smaller model or fewer bits per weight.",
                                 memory=human_bytes(memory_bytes), weights=human_bytes(weights),
                                 overhead=human_bytes(overhead)))
    return n


def physical_memory() -> int:
    """Bytes of RAM on this machine (POSIX), or 0 when the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0
