"""Section 5's figures and controls (notebooks/05-weight-quantization.md): what quantization does to a matrix, drawn.

Thin layers over :mod:`helpers.s05_quantization`: the notebook computes the errors and the histograms it
interprets, these functions draw them (the live ones recompute for any matrix a reader picks).

* :func:`scheme_for`: a scheme named the way the controls name it (levels, bits, weights per scale);
* :func:`per_matrix_figure`: every matrix's error under each scheme, by layer and kind of projection;
* :func:`histogram_slider`, :func:`dissect`: a matrix's weights before and after quantization, with the levels;
* :func:`normalized_figure`, :func:`normalized_one`: weights divided by their block's absmax, both sets of levels;
* :func:`sweep_figure`, :func:`granularity_errors`, :func:`granularity_figure`, :func:`granularity_one`: the
  error against the number of weights that share a scale;
* :func:`kernel_figure`: bytes read per decode step against time per token, one point per kernel;
* :func:`short`, :func:`readable`: a matrix's name and a number as the tables print them.
"""
from __future__ import annotations

import torch
import plotly.graph_objects as go

from .infra.messages import message
from .infra.plotting import PALETTE, figure, slider_figure
from .s05_quantization import PROJECTIONS, Scheme, nf4_levels, relative_error, uniform_levels

GRANULARITIES = ("tensor", "row", "512", "256", "128", "64", "32")     # weights per scale, the largest first
BY_BLOCK = tuple(reversed(GRANULARITIES))                               # the smallest first: the x axis
BINS = 501                    # histogram bins over [-max|w|, max|w|]
NORMALIZED_BINS = 201         # histogram bins over [-1, 1] for weights divided by their block's absmax


def short(name: str) -> str:
    """'model.layers.27.mlp.gate_proj.weight' -> 'layers.27.mlp.gate_proj'."""
    return name.removeprefix("model.").removesuffix(".weight")


def readable(v):
    """A number as a table shows it: whole numbers with thousands separators, others to 4 significant digits."""
    if isinstance(v, int) or (isinstance(v, float) and v >= 1000):
        return f"{v:,.0f}"
    return f"{v:.4g}"


def scheme_for(levels: str = "uniform", bits: int = 4, granularity: str = "tensor") -> Scheme:
    """A scheme as the controls describe it: ``levels`` 'uniform' or 'NF4', ``granularity`` one of
    :data:`GRANULARITIES` ('tensor', 'row' or a block size)."""
    if levels not in ("uniform", "NF4"):
        raise ValueError(message("levels must be 'uniform' or 'NF4', got {levels!r}.", levels=levels))
    if granularity not in GRANULARITIES:
        raise ValueError(message("weights per scale must be one of {granularities}, got {granularity!r}.",
                                 granularities=", ".join(GRANULARITIES), granularity=granularity))
    axis = -1 if granularity == "row" else None
    group = None if granularity in ("tensor", "row") else int(granularity)
    where = {"tensor": message("one scale per tensor"), "row": message("one scale per row")}.get(
        granularity) or message("blocks of {g}", g=granularity)
    what = message("NF4") if levels == "NF4" else message("uniform {bits}-bit", bits=bits)
    quantizer = "nf4" if levels == "NF4" else "absmax"
    return Scheme(message("{what}, {where}", what=what, where=where), quantizer, bits, axis, group)


# --------------------------------------------------------------------------- every matrix, every scheme


def _layer_and_kind(name: str) -> tuple[int, str]:
    parts = name.split(".")
    return int(parts[parts.index("layers") + 1]), parts[-2]


def per_matrix_figure(errors: dict[str, torch.Tensor], names: list[str], active: int = 2):
    """A slider over schemes; each step shows every matrix's relative error by layer, one colour per projection."""
    where = [_layer_and_kind(n) for n in names]
    kinds = [p.split(".")[-1] for p in PROJECTIONS]

    def traces(scheme_name):
        e = errors[scheme_name]
        for i, kind in enumerate(kinds):
            idx = [j for j, (_, k) in enumerate(where) if k == kind]
            yield go.Scatter(x=[where[j][0] for j in idx], y=e[idx].tolist(), mode="markers", name=kind,
                             marker=dict(color=PALETTE[i % len(PALETTE)], size=7),
                             hovertemplate=message("{kind} layer %{{x}}: %{{y:.4f}}<extra></extra>", kind=kind))

    return slider_figure(list(errors), traces, label="scheme", x="layer", y="relative error ‖W − Ŵ‖ / ‖W‖",
                         title=lambda k: message("{scheme}: mean {mean:.4f}, worst {worst:.4f}", scheme=k,
                                                 mean=float(errors[k].mean()), worst=float(errors[k].max())),
                         active=active, yaxis_type="log", hovermode="closest")


# --------------------------------------------------------------------------- one matrix, before and after


def _level_lines(values, color, name, low, high, width=1.5):
    """Vertical lines at ``values`` from ``low`` to ``high`` (one trace, gaps between the lines)."""
    return go.Scatter(x=[v for x in values for v in (x, x, None)], y=[y for _ in values for y in (low, high, None)],
                      mode="lines", line=dict(color=color, width=width), name=name, hoverinfo="skip")


def histogram_traces(w: torch.Tensor, scheme: Scheme, bins: int = BINS):
    """The weights' histogram, the quantized weights' histogram, and the levels when one scale covers them all."""
    top = float(w.abs().max()) * 1.001
    centers = [round(c, 5) for c in (torch.linspace(-top, top, bins + 1)[:-1] + top / bins).tolist()]
    w_hat = scheme.fake_quantize(w)
    yield go.Bar(x=centers, y=torch.histc(w, bins, -top, top).int().tolist(), name="weights",
                 marker_color=PALETTE[0], opacity=0.55)
    yield go.Bar(x=centers, y=torch.histc(w_hat, bins, -top, top).int().tolist(), name="after quantization",
                 marker_color=PALETTE[1], opacity=0.75)
    if scheme.group_size is None and scheme.axis is None and scheme.kind == "absmax":
        qmax = 2 ** (scheme.bits - 1) - 1
        step = float(w.abs().max()) / qmax
        yield _level_lines([k * step for k in range(-qmax, qmax + 1)], "rgba(80,80,80,0.35)", "levels", 0.5,
                           w.numel(), width=1)


def histogram_title(name: str, w: torch.Tensor, scheme: Scheme) -> str:
    w_hat = scheme.fake_quantize(w)
    return message("{matrix}, {scheme}: error {err:.3f}, {zeros:.1%} of weights become 0", matrix=short(name),
                   scheme=scheme.name, err=relative_error(w, w_hat), zeros=float((w_hat == 0).float().mean()))


_HISTOGRAM = dict(x="weight value", y="weights per bin (log)", yaxis_type="log", barmode="overlay", bargap=0,
                  hovermode="closest")


def histogram_slider(name: str, w: torch.Tensor, by: str = "bits"):
    """``by='bits'``: uniform levels with one scale per tensor, 2 to 8 bits; ``by='block'``: 4 bits, every
    number of weights per scale."""
    if by not in ("bits", "block"):
        raise ValueError(message("by must be 'bits' or 'block', got {by!r}.", by=by))
    values = list(range(2, 9)) if by == "bits" else list(GRANULARITIES)
    scheme_of = (lambda b: scheme_for("uniform", b)) if by == "bits" else (lambda g: scheme_for("uniform", 4, g))
    titles = {v: histogram_title(name, w, scheme_of(v)) for v in values}
    return slider_figure(values, lambda v: histogram_traces(w, scheme_of(v)),
                         label="bits" if by == "bits" else "weights per scale", title=lambda v: titles[v],
                         active=2 if by == "bits" else 0, **_HISTOGRAM)


def dissect(weights: dict[str, torch.Tensor], matrix: str, levels: str, bits: int, granularity: str):
    """The live version of :func:`histogram_slider`: any matrix, levels, bits and weights per scale."""
    w = weights[matrix]
    scheme = scheme_for(levels, bits, granularity)
    fig = figure("{title}", _HISTOGRAM["x"], _HISTOGRAM["y"], fields=dict(title=histogram_title(matrix, w, scheme)),
                 **{k: v for k, v in _HISTOGRAM.items() if k not in ("x", "y")})
    for t in histogram_traces(w, scheme):
        fig.add_trace(t)
    return fig


# --------------------------------------------------------------------------- weights / their block's absmax


def normalized_centers(bins: int = NORMALIZED_BINS) -> list[float]:
    return (torch.linspace(-1, 1, bins + 1)[:-1] + 1 / bins).tolist()


def _normalized_traces(h: torch.Tensor):
    centers, top = normalized_centers(h.numel()), float(h.max())
    yield go.Bar(x=centers, y=h.tolist(), name="w / block absmax", marker_color=PALETTE[0], opacity=0.6)
    yield _level_lines(uniform_levels(4).tolist()[1:], PALETTE[3], "uniform int4 levels", 0, top)
    yield _level_lines(nf4_levels().tolist(), PALETTE[1], "NF4 levels", 0, top * 0.8)


def normalized_figure(histograms: dict[int, torch.Tensor], active: int = 1):
    """A slider over block sizes: the share of weights at each value of w / (its block's absmax), both levels drawn."""
    return slider_figure(list(histograms), lambda g: _normalized_traces(histograms[g]), label="block size",
                         active=active, x="weight / its block's absmax", y="fraction of weights",
                         title=lambda g: message("Weights scaled by their block's absmax, blocks of {g}", g=g),
                         barmode="overlay", bargap=0, hovermode="closest")


def normalized_one(weights: dict[str, torch.Tensor], matrix: str, block: int):
    """The live version of :func:`normalized_figure` for one matrix, with NF4's and uniform int4's errors."""
    w = weights[matrix]
    nf4, uniform = Scheme("", "nf4", 4, None, block), Scheme("", "absmax", 4, None, block)
    w_hat = nf4.fake_quantize(w)                 # raises a one-line error if the block does not divide the matrix
    b = w.reshape(-1, block)
    h = torch.histc(b / b.abs().amax(dim=1, keepdim=True).clamp_min(1e-30), NORMALIZED_BINS, -1, 1)
    fig = figure("{matrix}: blocks of {block}; NF4 error {nf4:.4f}, uniform int4 error {uniform:.4f}",
                 "weight / its block's absmax", "weights",
                 fields=dict(matrix=short(matrix), block=block, nf4=relative_error(w, w_hat),
                             uniform=relative_error(w, uniform.fake_quantize(w))),
                 barmode="overlay", bargap=0, hovermode="closest")
    for t in _normalized_traces(h):
        fig.add_trace(t)
    return fig


# --------------------------------------------------------------------------- error against weights per scale


def sweep_figure(sweep: dict[str, dict[str, float]]):
    """Mean error over all matrices against weights per scale, one line per kind of levels."""
    fig = figure("Mean relative error over all projection matrices, 4 bits", "weights per scale",
                 "mean relative error (log)", yaxis_type="log", hovermode="closest")
    for i, (levels, vals) in enumerate(sweep.items()):
        xs = [g for g in BY_BLOCK if g in vals]
        fig.add_trace(go.Scatter(x=xs, y=[vals[g] for g in xs], mode="lines+markers", name=levels,
                                 line=dict(color=(PALETTE[3], PALETTE[1])[i % 2]),
                                 hovertemplate="%{x}: %{y:.4f}<extra>" + levels + "</extra>"))
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=list(BY_BLOCK))
    return fig


def granularity_errors(w: torch.Tensor, bits: int, levels: str = "uniform") -> list[float]:
    """The relative error of ``w`` at every number of weights per scale, in :data:`BY_BLOCK` order."""
    return [relative_error(w, scheme_for(levels, bits, g).fake_quantize(w)) for g in BY_BLOCK]


def _granularity_traces(bits, errs, nf4=None):
    yield go.Scatter(x=list(BY_BLOCK), y=errs, mode="lines+markers", line=dict(color=PALETTE[3]),
                     name=message("uniform {bits}-bit", bits=bits))
    if nf4 is not None:
        yield go.Scatter(x=list(BY_BLOCK), y=nf4, mode="lines+markers", name="NF4", line=dict(color=PALETTE[1]))


def granularity_figure(name: str, by_bits: dict[int, list[float]], nf4: list[float]):
    """A slider over bits: one matrix's error against weights per scale (and NF4's at 4 bits)."""
    fig = slider_figure(list(by_bits), lambda b: _granularity_traces(b, by_bits[b], nf4 if b == 4 else None),
                        label="bits", active=list(by_bits).index(4), x="weights per scale",
                        y="relative error (log)", yaxis_type="log", hovermode="closest",
                        title=lambda b: message("{matrix}: relative error at {bits} bits", matrix=short(name), bits=b))
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=list(BY_BLOCK))
    return fig


def granularity_one(weights: dict[str, torch.Tensor], matrix: str, bits: int):
    """The live version of :func:`granularity_figure`: any matrix, any bits."""
    w = weights[matrix]
    nf4 = granularity_errors(w, 4, "NF4") if bits == 4 else None
    fig = figure("{matrix}: relative error at {bits} bits", "weights per scale", "relative error (log)",
                 fields=dict(matrix=short(matrix), bits=bits), yaxis_type="log", hovermode="closest")
    for t in _granularity_traces(bits, granularity_errors(w, bits), nf4):
        fig.add_trace(t)
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=list(BY_BLOCK))
    return fig


# --------------------------------------------------------------------------- real kernels


def kernel_figure(step_mb: dict[str, float], ms: dict[str, float], llama_ms: float | None = None):
    """One point per kernel: MB read per decode step against ms per token; ``llama_ms`` a dashed line."""
    fig = figure("Bytes read per decode step against time per token, per real kernel", "MB read per decode step",
                 "decode time per token (ms)", hovermode="closest")
    for i, k in enumerate(ms):
        fig.add_trace(go.Scatter(x=[step_mb[k]], y=[ms[k]], mode="markers", name=k,    # named in the legend:
                                 marker=dict(size=14, color=PALETTE[i % len(PALETTE)]),  # near points meet
                                 hovertemplate=message("{kernel}: %{{x:.0f}} MB per step, %{{y:.1f}} ms per token"
                                                       "<extra></extra>", kernel=k)))
    if llama_ms is not None:
        fig.add_hline(y=llama_ms, line_dash="dash", line_color="#555",
                      annotation_text=message("llama.cpp, same Q4_1 file: {ms} ms<br>(our earlier measurement, "
                                              "not run here)", ms=llama_ms))
    fig.update_layout(yaxis_rangemode="tozero", xaxis_rangemode="tozero")
    return fig
