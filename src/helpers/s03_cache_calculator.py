"""Section 3 (notebooks/03-cache-size.md): the cache calculator, every knob of the cache formula, as numbers
and as a figure.

:func:`calculator` returns what the live (JupyterLab) calculator shows for one
setting of its controls, and :func:`live_view` shows it: a row of numbers and
the bars of MHA, the chosen grouping and MQA. :func:`calculator_figure` is the static one, which
works on the book site with no kernel: an architecture dropdown, a dtype
dropdown and a users slider over precomputed curves. The formula itself lives
in :mod:`helpers.s03_cache_size`.
"""
from __future__ import annotations

import math
from typing import Sequence

import plotly.graph_objects as go
from IPython.display import display

from .infra import plotting, tables
from .infra.messages import message
from .s03_cache_size import KVArchitecture, bytes_per_element, dtype_name, human_bytes

# A real, current pattern for shrinking the cache: Gemma 3 gives 5 of every 6 layers a 1,024-token window.
SLIDING_PATTERN = dict(window=1024, every=6, name="Gemma 3's pattern")
MENU_ROW_PX = 40    # the model menu's height above the dtype menu's: a dropdown is about 30 px tall


def sliding_variant(arch: KVArchitecture) -> KVArchitecture:
    """``arch`` with Gemma 3's pattern: every layer but one in six keeps only a 1,024-token window."""
    return arch.with_window(SLIDING_PATTERN["window"], arch.layers - arch.layers // SLIDING_PATTERN["every"])


def calculator(layers: int, query_heads: int, kv_heads: int, head_dim: int, dtype, users: int,
               tokens: int, window: int | None = None, window_layers: int = 0) -> dict:
    """Everything the cache calculator shows, for one setting of its controls.

    ``window`` and ``window_layers``: a sliding window of that many tokens on that many of the layers.
    """
    arch = KVArchitecture("custom", layers, query_heads, kv_heads, head_dim,
                          window=window if window_layers else None, window_layers=window_layers)
    total = arch.cache_bytes(dtype, users, tokens)
    full = arch.with_window(None)
    return dict(attention=arch.attention, group_size=arch.group_size, bytes_per_token=arch.bytes_per_token(dtype),
                bytes_per_user=arch.cache_bytes(dtype, 1, tokens), resident_tokens=users * tokens,
                total_bytes=total, no_window_bytes=full.cache_bytes(dtype, users, tokens),
                mha_bytes=arch.with_kv_heads(query_heads).cache_bytes(dtype, users, tokens),
                mqa_bytes=arch.with_kv_heads(1).cache_bytes(dtype, users, tokens))


def live_view(layers: int, query_heads: int, kv_heads: int, head_dim: int, window: int | None, window_layers: int,
              dtype, users: int, tokens: int):
    """The live calculator's output for one setting of its controls: shows a row of :func:`calculator`'s numbers
    and returns the bars of the cache as MHA, with ``kv_heads`` and as MQA (a ``ValueError`` for bad input)."""
    c = calculator(layers, query_heads, kv_heads, head_dim, dtype, users, tokens, window, window_layers)
    display(tables.table({
        "attention": [c["attention"]], "query heads per KV head": [c["group_size"]],
        "bytes per token": [format(c["bytes_per_token"], ",")], "one user": [human_bytes(c["bytes_per_user"])],
        "all users": [human_bytes(c["total_bytes"])], "all users, no window": [human_bytes(c["no_window_bytes"])],
    }, index="attention"))
    sizes = [c["mha_bytes"], c["total_bytes"], c["mqa_bytes"]]
    fig = plotting.figure("{users:,} users x {tokens:,} tokens, {dtype}", x="GiB of cache", y="",
                          fields=dict(users=users, tokens=tokens, dtype=dtype))
    fig.add_trace(go.Bar(orientation="h", x=[b / 2 ** 30 for b in sizes], text=[human_bytes(b) for b in sizes],
                         y=[message("MHA ({kv} KV heads)", kv=query_heads), message("yours ({kv})", kv=kv_heads),
                            "MQA (1)"],
                         marker_color=[plotting.PALETTE[1], plotting.PALETTE[0], plotting.PALETTE[2]],
                         textposition="auto"))
    fig.update_layout(height=260, margin=dict(t=50, b=40), hovermode="closest")
    return fig


def users_label(values: Sequence[int]) -> str:
    """The users slider's label. Where each value is the same multiple of the one before (1, 2, 4, ...), the
    steps are logarithmic, and the label says so: the slider's positions are evenly spaced, the numbers not."""
    ratios = {b / a for a, b in zip(values, values[1:])}
    if len(values) > 2 and len(ratios) == 1 and ratios != {1.0}:
        return message("users (logarithmic steps: each x{ratio:g})", ratio=ratios.pop())
    return message("users")


def _lines(arch: KVArchitecture):
    """(label, architecture, is this model's own) for each cache line of one architecture."""
    for label, v in arch.variants().items():
        yield label, v, v.kv_heads == arch.kv_heads
    if arch.window is None:
        yield "window", sliding_variant(arch), False


def _line_name(label: str, v: KVArchitecture, own: bool) -> str:
    """A cache line's name in the legend: "cache, GQA: 2 KV heads (this model)", or the windowed line's."""
    if label == "window":
        return message("cache, {window:,}-token window on {window_layers} of {layers} layers",
                       window=SLIDING_PATTERN["window"], window_layers=v.window_layers, layers=v.layers)
    if own:
        return message("cache, {label}: {kv} KV heads (this model)" if v.kv_heads > 1 else
                       "cache, {label}: {kv} KV head (this model)", label=label, kv=v.kv_heads)
    return message("cache, {label}: {kv} KV heads" if v.kv_heads > 1 else "cache, {label}: {kv} KV head",
                   label=label, kv=v.kv_heads)


def calculator_figure(archs: Sequence[KVArchitecture], dtypes: Sequence[str], users_values: Sequence[int],
                      tokens_range: tuple[int, int] = (128, 131_072), active_arch: int = 0, active_dtype: int = 0,
                      active_users: int = 0, title: str | None = None):
    """The static calculator: cache against tokens per user, with the model's weights for scale.

    Three controls that never undo each other, because each changes a different attribute: the architecture
    dropdown switches trace *visibility*, the users slider rewrites every trace's *y*, and the dtype dropdown
    relabels the *y-axis ticks*. The curves are drawn in numbers stored (elements), which a dtype turns into
    bytes by one factor, so on a log axis a dtype is a relabelling of the same picture.
    """
    if not archs or not dtypes or not users_values:
        raise ValueError(message("calculator_figure needs at least one architecture, one dtype and one users value."))
    title = message("How big the cache is") if title is None else title
    lo, hi = tokens_range
    per_octave = 4
    steps = int(round(math.log2(hi / lo) * per_octave))
    grid = [lo * 2 ** (i / per_octave) for i in range(steps + 1)]
    tokens = [int(round(t)) for t in grid]
    fig = plotting.figure(x="tokens per user (context length)")
    owner, curves = [], []                 # per trace: which architecture; elements as a function of users
    styles = {"MHA": (plotting.PALETTE[1], "dot"), "GQA": (plotting.PALETTE[0], "solid"),
              "MQA": (plotting.PALETTE[2], "dash"), "window": (plotting.PALETTE[3], "dashdot")}
    for a_i, arch in enumerate(archs):
        for label, v, own in _lines(arch):
            name = _line_name(label, v, own)
            colour, dash = styles[label]
            fig.add_trace(go.Scatter(name=name, mode="lines", x=grid, line=dict(color=colour, dash=dash,
                                     width=3 if own else 2), hovertemplate="%{x:,.0f} tokens<extra>%{fullData.name}</extra>"))
            owner.append(a_i)
            curves.append(lambda u, v=v: [v.cache_bytes(1, u, t) for t in tokens])
        if arch.params is not None:
            fig.add_trace(go.Scatter(name="weights", mode="lines", x=grid, line=dict(color="#555555", width=2),
                                     hovertemplate="weights<extra></extra>"))
            owner.append(a_i)
            curves.append(lambda u, a=arch: [a.params] * len(tokens))

    def ys(users):
        return [c(users) for c in curves]

    seen = [y for u in users_values for ycurve in ys(u) for y in ycurve if y > 0]
    y_range = [math.floor(math.log10(min(seen))), math.ceil(math.log10(max(seen)))]

    def ticks(dtype):   # the same positions in elements, labelled in bytes for this dtype
        b = bytes_per_element(dtype)
        vals = [2 ** e / b for e in range(0, 80, 5) if y_range[0] <= math.log10(2 ** e / b) <= y_range[1]]
        return dict(tickvals=vals, ticktext=[human_bytes(int(v * b)) for v in vals])

    def arch_title(a):
        return message("{title}: {name}<br>{layers} layers, {query_heads} query heads, head dim {head_dim}",
                       title=title, name=a.name, layers=a.layers, query_heads=a.query_heads, head_dim=a.head_dim)

    for tr, y, o in zip(fig.data, ys(users_values[active_users]), owner):
        tr.y, tr.visible = y, o == active_arch
    fig.update_layout(
        title_text=arch_title(archs[active_arch]),
        xaxis=dict(type="log", range=[math.log10(lo), math.log10(hi)]),
        yaxis=dict(type="log", range=y_range, title_text="cache (and weights)", **ticks(dtypes[active_dtype])),
        hovermode="x unified", height=640, margin=dict(t=190, b=110),
        legend=dict(x=0.01, y=0.99, xanchor="left", yanchor="top"),
        # The two menus sit one above the other, both from the left edge: side by side, a long model name (a
        # folder's path, say) ran the left one into the right one, at widths that depend on the fonts installed.
        updatemenus=[
            dict(type="dropdown", x=0.0, xanchor="left", y=1.02, yanchor="bottom", active=active_arch,
                 pad=dict(b=MENU_ROW_PX),
                 buttons=[dict(label=message("model: {name}", name=a.name), method="update",
                               args=[{"visible": [o == i for o in owner]}, {"title.text": arch_title(a)}])
                          for i, a in enumerate(archs)]),
            dict(type="dropdown", x=0.0, xanchor="left", y=1.02, yanchor="bottom", active=active_dtype,
                 buttons=[dict(label=message("dtype: {dtype} ({nbytes} B)", dtype=dtype_name(d),
                                               nbytes=bytes_per_element(d)), method="relayout",
                               args=[{f"yaxis.{k}": v for k, v in ticks(d).items()}]) for d in dtypes]),
        ],
        sliders=[dict(active=active_users, currentvalue=dict(prefix=message("{label}: ", label=users_label(users_values))), pad=dict(t=50),
                      steps=[dict(method="restyle", label=str(u), args=[{"y": ys(u)}]) for u in users_values])],
    )
    return fig


__all__ = ["SLIDING_PATTERN", "sliding_variant", "calculator", "live_view", "calculator_figure", "users_label"]
