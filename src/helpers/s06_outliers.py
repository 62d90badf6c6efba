"""Activation outlier features: finding them in the residual stream, and what they do to one INT8 scale (section 6).

A trained transformer's residual stream is not a cloud of similar numbers. A
handful of its dimensions can reach magnitudes hundreds or thousands of times
the typical one. With one INT8 scale per tensor, that handful sets the step
size for everything else. This module

* captures the residual stream at every layer (:func:`residual_stream`), the
  input of every linear layer (:func:`linear_inputs`) and the attention paid to
  the first token (:func:`attention_to_first_token`);
* measures it: per-dimension maxima (:func:`dimension_maxima`), the top
  dimensions (:func:`top_dimensions`), a log2-binned histogram
  (:func:`log2_histogram`), INT8 levels actually used (:func:`levels_used`,
  :func:`levels_per_dimension`), the scale left when the top-k dimensions are
  set aside (:func:`exclude_top_dimensions`, with section 5's
  :func:`helpers.s05_quantization.absmax_quantize`);
* reads the histogram (:func:`octave_labels`, :func:`median_bin`, :func:`empty_octaves_below_top`) and a linear
  layer's input (:func:`dissect_input`: where its largest value sits, and on how many tokens its top dimension
  clears a bar).

The INT8 matmuls that cope with outliers are in :mod:`helpers.s06_int8_matmuls`.
"""
from __future__ import annotations

import math
from typing import Iterable

import torch

from .infra.model import decoder_layers
from .infra.messages import message
from .s05_quantization import absmax_quantize

# --------------------------------------------------------------------------- capturing


def check_ids(ids: torch.Tensor) -> None:
    if ids.dim() != 2 or ids.shape[0] != 1 or ids.shape[1] < 1:
        raise ValueError(message("ids must be one sequence shaped (1, tokens), got shape {shape}.",
                                 shape=tuple(ids.shape)))


@torch.inference_mode()
def residual_stream(model, ids: torch.Tensor) -> torch.Tensor:
    """The residual stream at every layer for one sequence: shape (layers + 1, tokens, hidden).

    Row 0 is the token embeddings; row ``l`` is the output of block ``l`` (1-based), i.e.
    the stream after ``l`` blocks, *before* the final norm (unlike ``hidden_states[-1]``).
    """
    check_ids(ids)
    _, layers = decoder_layers(model)
    captured: list[torch.Tensor] = []

    def grab_input(module, args, kwargs):
        x = args[0] if args else kwargs["hidden_states"]
        captured.append(x.detach()[0].clone())

    def grab_output(module, args, output):
        h = output[0] if isinstance(output, (tuple, list)) else output
        captured.append(h.detach()[0].clone())

    hooks = [layers[0].register_forward_pre_hook(grab_input, with_kwargs=True)]
    hooks += [layer.register_forward_hook(grab_output) for layer in layers]
    try:
        model(ids, use_cache=False, logits_to_keep=1)       # nobody reads the logits: compute one position's
    finally:
        for h in hooks:
            h.remove()
    return torch.stack(captured)


@torch.inference_mode()
def linear_inputs(model, ids: torch.Tensor, names: Iterable[str] | None = None) -> dict[str, torch.Tensor]:
    """What every ``nn.Linear`` (or those in ``names``) receives for one sequence: {name: (tokens, in_features)}.

    Unless the output head is one of them, the model computes the logits of the last position only:
    the head's input is the one capture that would change, and nothing else reads the logits.
    """
    check_ids(ids)
    wanted = None if names is None else set(names)
    captured: dict[str, torch.Tensor] = {}
    hooks, hooked = [], []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and (wanted is None or name in wanted):
            hooked.append(mod)
            hooks.append(mod.register_forward_hook(
                lambda m, a, o, name=name: captured.__setitem__(name, a[0].detach()[0].clone())))
    if wanted is not None and len(hooks) != len(wanted):
        for h in hooks:
            h.remove()
        raise ValueError(message("Some requested names are not nn.Linear modules of this model; list them with [n "
                                 "for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]."))
    head = model.get_output_embeddings()
    keep = {} if any(m is head for m in hooked) else {"logits_to_keep": 1}
    try:
        model(ids, use_cache=False, **keep)
    finally:
        for h in hooks:
            h.remove()
    return captured


@torch.inference_mode()
def attention_to_first_token(model, ids: torch.Tensor) -> torch.Tensor:
    """Per block, the mean attention weight that tokens 1.. put on token 0 (averaged over heads): (layers,).

    Runs one forward pass with the eager attention implementation (the only one that returns its
    weights) and restores the model's own implementation afterwards. Uniform attention would give
    ``mean(1 / (t + 1))`` over the positions t = 1..n-1.
    """
    check_ids(ids)
    if ids.shape[1] < 2:
        raise ValueError(message("Need at least two tokens to measure attention to the first one."))
    before = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        att = model(ids, output_attentions=True, use_cache=False, logits_to_keep=1).attentions   # logits unused
    finally:
        model.set_attn_implementation(before)
    return torch.stack([a[0, :, 1:, 0].mean() for a in att])


# --------------------------------------------------------------------------- measuring


def dimension_maxima(h: torch.Tensor) -> torch.Tensor:
    """Largest |value| each hidden dimension reaches over the tokens: (..., tokens, hidden) -> (..., hidden)."""
    if h.dim() < 2 or h.shape[-2] == 0:
        raise ValueError(message("h must be shaped (..., tokens, hidden) with at least one token, got {shape}.",
                                 shape=tuple(h.shape)))
    return h.abs().amax(dim=-2)


def top_dimensions(maxima: torch.Tensor, k: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest per-dimension maxima of each row: returns (values, dimensions), each (..., k)."""
    if not 1 <= k <= maxima.shape[-1]:
        raise ValueError(message("k must be between 1 and the hidden size {hidden}, got {k}.",
                                 hidden=maxima.shape[-1], k=k))
    top = maxima.topk(k, dim=-1)
    return top.values, top.indices


def log2_bin_edges(max_value: float) -> list[float]:
    """Bin edges 0, 1, 2, 4, ... up to the first power of two above ``max_value`` (at least [0, 1])."""
    if not math.isfinite(max_value) or max_value < 0:
        raise ValueError(message("max_value must be a finite non-negative number, got {max_value}.",
                                 max_value=max_value))
    top = max(0, math.floor(math.log2(max_value)) + 1) if max_value >= 1 else 0
    return [0.0] + [float(2 ** e) for e in range(0, top + 1)]


def log2_histogram(values: torch.Tensor, edges: list[float] | None = None) -> tuple[list[float], list[int]]:
    """Count values in octave bins [0, 1), [1, 2), [2, 4), ...: returns (edges, counts), len(counts) = len(edges) - 1.

    Every value lands in exactly one bin, so the counts sum to ``values.numel()``.
    """
    v = values.detach().flatten().double()
    if v.numel() == 0:
        raise ValueError(message("log2_histogram needs at least one value."))
    if (v < 0).any() or not torch.isfinite(v).all():
        raise ValueError(message("log2_histogram bins magnitudes: pass non-negative finite values (e.g. h.abs())."))
    if edges is None:
        edges = log2_bin_edges(float(v.max()))
    if len(edges) < 2 or v.max() >= edges[-1]:
        raise ValueError(message("the edges must end above the largest value {largest:g}.", largest=float(v.max())))
    idx = torch.bucketize(v, torch.tensor(edges[1:], dtype=torch.float64), right=True)
    counts = torch.bincount(idx, minlength=len(edges) - 1)
    return list(edges), [int(c) for c in counts]


def octave_labels(edges: list[float]) -> list[str]:
    """Short labels of the bins between ``edges``: [0, 1, 2, 1024, 2048] -> ['0-1', '1-2', '2-1k', '1k-2k']."""
    def short(v: float) -> str:
        return f"{v / 1024:g}k" if v >= 1024 else f"{v:g}"
    return [f"{short(a)}-{short(b)}" for a, b in zip(edges[:-1], edges[1:])]


def median_bin(counts: list[int]) -> int:
    """Index of the bin that holds the median value: the first bin where the running count reaches half."""
    if not counts or min(counts) < 0 or sum(counts) == 0:
        raise ValueError(message("counts must be non-negative bin counts with at least one value."))
    half, run = sum(counts) / 2, 0
    for i, n in enumerate(counts):
        run += n
        if run >= half:
            return i
    raise AssertionError("unreachable: the running count reaches the total")


def empty_octaves_below_top(edges: list[float], counts: list[int]) -> float:
    """How many octaves of empty bins separate the top occupied bin from the next occupied one below it.

    ``log2(lower edge of the top bin / upper edge of the next occupied bin)``: with octave bins this is the
    number of empty bins between them, and a wider bin (the chapter's 128-1024) counts as the octaves it spans.
    0 when the two are neighbours or only one bin is occupied.
    """
    if len(edges) != len(counts) + 1:
        raise ValueError(message("need one more edge than counts, got {edges} edges and {counts} counts.",
                                 edges=len(edges), counts=len(counts)))
    occupied = [i for i, c in enumerate(counts) if c]
    if len(occupied) < 2:
        return 0.0
    top, below = occupied[-1], occupied[-2]
    return math.log2(edges[top] / edges[below + 1])


def dissect_input(x: torch.Tensor, bar: float = 10.0) -> dict:
    """Where a linear layer's input ``x`` (tokens, in) holds its largest value, and how widely its top dimension does.

    Returns {'peak': max |x|, 'dim': the dimension that reaches it, 'token': the token where it does,
    'median': median |x|, 'above': tokens on which that dimension exceeds ``bar`` times the median dimension's
    maximum, 'tokens': the number of tokens}. Many tokens above the bar: a dimension outlier; a few: an outlier
    carried by those tokens.
    """
    if x.dim() != 2 or x.numel() == 0:
        raise ValueError(message("x must be a non-empty (tokens, in) tensor, got shape {shape}.", shape=tuple(x.shape)))
    a = x.abs()
    m = a.amax(dim=0)
    dim = int(m.argmax())
    return {"peak": float(m[dim]), "dim": dim, "token": int(a[:, dim].argmax()), "median": float(a.median()),
            "above": int((a[:, dim] > bar * m.median()).sum()), "tokens": x.shape[0]}


def levels_used(codes: torch.Tensor) -> int:
    """How many distinct integer levels a quantized tensor actually uses (out of 256 for INT8)."""
    if codes.numel() == 0:
        raise ValueError(message("levels_used needs a non-empty tensor of codes."))
    return int(torch.unique(codes).numel())


def levels_per_dimension(codes: torch.Tensor) -> torch.Tensor:
    """Distinct levels used by each column (hidden dimension) of codes shaped (tokens, hidden)."""
    if codes.dim() != 2 or codes.numel() == 0:
        raise ValueError(message("codes must be a non-empty (tokens, hidden) tensor, got shape {shape}.",
                                 shape=tuple(codes.shape)))
    s, _ = codes.sort(dim=0)
    return 1 + (s[1:] != s[:-1]).sum(dim=0)


def exclude_top_dimensions(h: torch.Tensor, k: int) -> dict:
    """INT8 with one scale after setting the ``k`` largest dimensions aside (kept in high precision).

    Returns {'excluded': dims, 'scale': scale of the rest, 'codes': (tokens, hidden) codes with the
    excluded columns set to 0}. ``k = 0`` is plain per-tensor INT8.
    """
    if h.dim() != 2:
        raise ValueError(message("h must be (tokens, hidden), got shape {shape}.", shape=tuple(h.shape)))
    if not 0 <= k < h.shape[1]:
        raise ValueError(message("k must be between 0 and {largest} (hidden size minus one), got {k}.",
                                 largest=h.shape[1] - 1, k=k))
    excluded = dimension_maxima(h).topk(k).indices if k else torch.empty(0, dtype=torch.long)
    keep = torch.ones(h.shape[1], dtype=torch.bool)
    keep[excluded] = False
    codes = torch.zeros(h.shape, dtype=torch.int8)
    codes[:, keep], scale = absmax_quantize(h[:, keep], 8)        # one INT8 scale for the columns kept
    return {"excluded": excluded, "scale": scale, "codes": codes}
