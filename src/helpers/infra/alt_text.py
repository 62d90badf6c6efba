"""A figure's text alternative: what a screen reader announces in place of the plot (infrastructure; issue 41).

The renderer (:mod:`helpers.infra.plotting`) gives every static figure an accessible name, assembled here from
the figure itself, sentence by sentence, each a template (:mod:`helpers.infra.messages`) in the edition's words::

    One attention head, one step. Line chart of milliseconds per step against context n (tokens).
    2 series: no cache: n x n scores; cache: 1 x n scores. milliseconds per step: from 0.012 to 38.4.

that is: the title; the kind of chart and its axes' titles; the series shown; the range of each titled value axis,
from this run's numbers. A notebook may add what the reader should take from it, one sentence with named fields::

    plotting.takeaway(fig, "The uncached step's lead grows from {a:.0f}x to {b:,.0f}x.", a=r[0], b=r[-1])

It is kept in the figure's ``layout.meta`` as a sentence :func:`~helpers.infra.messages.message` formatted, so the
editions' sites say it again from its record (:mod:`mic_tools.rerender`), as they do every other label; the
generic part needs no record: it is assembled again, in the edition's words, when the figure is drawn again.
"""
from __future__ import annotations

import base64
import re

import numpy as np
import plotly.graph_objects as go

from .messages import fields_of, message

# Whole sentences, one per kind of chart: with both axes titled, and without.
AGAINST = {
    "line": "Line chart of {y} against {x}.",
    "bar": "Bar chart of {y} against {x}.",
    "scatter": "Scatter plot of {y} against {x}.",
    "histogram": "Histogram of {y} against {x}.",
    "heatmap": "Heatmap over {x} and {y}.",
    "chart": "Chart of {y} against {x}.",
}
BARE = {"line": "Line chart.", "bar": "Bar chart.", "scatter": "Scatter plot.", "histogram": "Histogram.",
        "heatmap": "Heatmap.", "chart": "Chart."}
SERIES = {"one named": "One series: {names}.", "named": "{n} series: {names}.",
          "one": "One series.", "many": "{n} series."}
ONE_AXIS = {"x": "Horizontal axis: {axis}.", "y": "Vertical axis: {axis}."}
PANELS = "{n} panels."
PANEL = {"titled": "Panel {i}, {title}:", "untitled": "Panel {i}:"}
RANGE = {"titled": "{axis}: from {low} to {high}.", "untitled": "Values from {low} to {high}."}
TITLE = "{title}."
LIST = "{earlier}; {name}"                # a list of names, one at a time: names may hold commas ("7B, int4")
ENDS = (".", "?", "!", "\u0964", "\u06d4")   # a title that ends a sentence itself (। and ۔ too)
TAKEAWAY_KEY = "mic_takeaway"             # where takeaway() keeps its sentence in layout.meta


def said(template: str, **fields) -> str:
    """``message`` given only the fields this template uses (a dict of cases shares one set of fields)."""
    return message(template, **{k: v for k, v in fields.items() if k in fields_of(template)})


def plain(text) -> str:
    """A label as a sentence reads it: plotly's line breaks as spaces, its other tags dropped."""
    text = re.sub(r"<br\s*/?>", " ", str(text or ""), flags=re.I)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", text)).strip()


def plain_number(v: float) -> str:
    """A number as a listener hears it best: 12,345 | 38.4 | 0.0123 (three significant digits, never 1e-05)."""
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return np.format_float_positional(v, precision=3, unique=False, fractional=False, trim="-")


def kind_of(traces) -> str:
    """'line', 'bar', 'scatter', 'histogram', 'heatmap' (a heatmap, with any lines drawn over it), or 'chart' for a
    mix or any other trace type."""
    kinds = set()
    for t in traces:
        if t.type in ("scatter", "scattergl"):
            kinds.add("scatter" if (t.mode or "lines") == "markers" else "line")
        else:
            kinds.add(t.type if t.type in ("bar", "histogram", "heatmap") else "chart")
    if "heatmap" in kinds:
        return "heatmap"
    return kinds.pop() if len(kinds) == 1 else "chart"


def _title(item) -> str:
    if isinstance(item, dict):
        item = item.get("text")
    return plain(item) if isinstance(item, str) else ""


def as_numbers(data) -> np.ndarray:
    """Plotted values as a flat array of floats (plotly's base64 typed arrays decoded); empty for categories."""
    if isinstance(data, dict) and "bdata" in data:
        data = np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"])
    try:
        return np.asarray(data if data is not None else [], dtype=float).ravel()
    except (TypeError, ValueError):
        return np.array([])


def _values(trace) -> np.ndarray:
    """The finite numbers a trace plots on its value axis (y; x for a horizontal bar; z for a heatmap)."""
    letter = "z" if trace.type == "heatmap" else "x" if getattr(trace, "orientation", None) == "h" else "y"
    arr = as_numbers(getattr(trace, letter, None))
    return arr[np.isfinite(arr)]


def series_sentence(names: list[str], n: int) -> str:
    """How many series are shown, and their names (legend order)."""
    if not names:
        return said(SERIES["one" if n == 1 else "many"], n=n)
    listed = names[0]
    for name in names[1:]:
        listed = message(LIST, earlier=listed, name=name)
    return said(SERIES["one named" if n == 1 else "named"], n=n, names=listed)


def _axis_title(layout: dict, ref: str) -> str:
    """The title of layout axis ``ref`` as a trace names it ('x', 'y2', ...)."""
    return _title((layout.get(ref[0] + "axis" + ref[1:]) or {}).get("title"))


def range_sentences(traces, layout: dict) -> list[str]:
    """For each value axis with numbers on it, the range those numbers span (lowest, highest). A heatmap's values
    are its colours: their range is said under the colour bar's title, and not at all where no colour bar is shown
    (the cells' own text then carries the numbers, and the colours may be any transform of them); lines drawn over
    a heatmap are on its axes, not values."""
    out = []
    for t in traces:
        if t.type == "heatmap" and t.showscale is not False and _values(t).size:
            title = _title(t.colorbar.title.text if t.colorbar.title else None)
            out.append(said(RANGE["titled" if title else "untitled"], axis=title,
                            low=plain_number(_values(t).min()), high=plain_number(_values(t).max())))
    if kind_of(traces) == "heatmap":
        return out
    for axis in dict.fromkeys((getattr(t, "yaxis", None) or "y") for t in traces):
        shown = [t for t in traces if (getattr(t, "yaxis", None) or "y") == axis]
        horizontal = getattr(shown[0], "orientation", None) == "h"
        title = "" if horizontal else _axis_title(layout, axis)     # a horizontal bar's values are not on y
        values = np.concatenate([_values(t) for t in shown])
        if values.size:
            out.append(said(RANGE["titled" if title else "untitled"], axis=title,
                            low=plain_number(values.min()), high=plain_number(values.max())))
    return out


def chart_sentences(traces, layout: dict, x: str, y: str) -> list[str]:
    """The kind of chart with its axes' titles, the series shown, and the range of each value axis."""
    kind = kind_of(traces)
    sentences = [said(AGAINST[kind], x=x, y=y) if x and y else message(BARE[kind])]
    if bool(x) != bool(y):                   # one axis titled: say which
        sentences.append(said(ONE_AXIS["x" if x else "y"], axis=x or y))
    series = [t for t in traces if t.type != "heatmap"]     # a heatmap is no series; lines over it are
    if series:
        names = [plain(t.name) for t in series
                 if getattr(t, "name", None) and getattr(t, "showlegend", None) is not False]
        sentences.append(series_sentence(names, len(names) or len(series)))   # a legend's entries, if named
    return sentences + range_sentences(traces, layout)


def _axis(layout: dict, ref: str) -> dict:
    return layout.get(ref[0] + "axis" + ref[1:]) or {}


def panel_titles(layout: dict, xrefs: list[str], yrefs: list[str]) -> dict[str, str]:
    """Each panel's title (``make_subplots(subplot_titles=...)``): the annotation centred over its x axis's domain,
    at the top of its y axis's."""
    titles = {}
    for xref, yref in zip(xrefs, yrefs):
        (x0, x1), (_, y1) = (_axis(layout, xref).get("domain") or (0, 1), _axis(layout, yref).get("domain") or (0, 1))
        for note in layout.get("annotations") or ():
            if (note.get("xref") == "paper" and note.get("yref") == "paper" and note.get("text")
                    and abs(note.get("x", -1) - (x0 + x1) / 2) < 1e-6 and abs(note.get("y", -1) - y1) < 1e-6):
                titles[xref] = plain(note["text"])
    return titles


def x_title(layout: dict, ref: str) -> str:
    """A panel's x axis title; stacked panels that share their x axis (``matches``) title only one of them."""
    title = _axis_title(layout, ref)
    if not title:
        twins = {_axis(layout, ref).get("matches")} | {k[0] + k[5:] for k, v in layout.items()
                                                        if k.startswith("xaxis") and isinstance(v, dict)
                                                        and v.get("matches") == ref}
        title = next((_axis_title(layout, twin) for twin in sorted(t for t in twins if t)
                      if _axis_title(layout, twin)), "")
    return title


def describe(fig_dict: dict) -> str:
    """The text alternative of a figure (its dict, labels in the edition's words): the generic sentences, then the
    takeaway a notebook gave it. A figure of several panels (subplots) is described panel by panel."""
    layout = fig_dict.get("layout", {}) or {}
    fig = go.Figure(data=fig_dict.get("data", []))          # traces with their defaults (as_numbers decodes)
    traces = [t for t in fig.data if getattr(t, "visible", None) in (None, True)]
    sentences = []
    title = _title(layout.get("title"))
    if title:
        sentences.append(title if title.endswith(ENDS) else message(TITLE, title=title))
    xrefs = list(dict.fromkeys((getattr(t, "xaxis", None) or "x") for t in traces))
    if len(xrefs) < 2:
        x, y = (_title((layout.get(a) or {}).get("title")) for a in ("xaxis", "yaxis"))
        sentences += chart_sentences(traces, layout, x, y)
    else:
        sentences.append(message(PANELS, n=len(xrefs)))
        panels = {ref: [t for t in traces if (getattr(t, "xaxis", None) or "x") == ref] for ref in xrefs}
        yrefs = [getattr(shown[0], "yaxis", None) or "y" for shown in panels.values()]
        titles = panel_titles(layout, xrefs, yrefs)
        for i, ((ref, shown), yref) in enumerate(zip(panels.items(), yrefs), 1):
            sentences.append(said(PANEL["titled" if ref in titles else "untitled"], i=i, title=titles.get(ref, "")))
            sentences += chart_sentences(shown, layout, x_title(layout, ref), _axis_title(layout, yref))
    meta = layout.get("meta")
    if isinstance(meta, dict) and meta.get(TAKEAWAY_KEY):
        sentences.append(str(meta[TAKEAWAY_KEY]))
    return " ".join(sentences)


def takeaway(fig: go.Figure, template: str, **fields) -> go.Figure:
    """Add what the reader should take from ``fig`` to its text alternative: one sentence, a template whose named
    fields are this run's numbers. Returns the figure."""
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    fig.update_layout(meta={**meta, TAKEAWAY_KEY: message(template, **fields)})
    return fig
