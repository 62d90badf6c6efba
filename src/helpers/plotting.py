"""One figure style for the whole chapter, and a plotly renderer that works live and in the static book.

Importing this module (every notebook does, through ``helpers``) registers the
``mic`` template and makes ``mic`` the default renderer. The renderer emits two
representations of every figure:

* ``application/vnd.plotly.v1+json``: what JupyterLab draws, live;
* ``text/html``: a ``<div>`` plus a tiny loader that fetches one local copy of
  ``plotly.min.js`` from the site root. The Jupyter Book build picks this one
  (see ``book/_config.yml``), so pages stay small and need no CDN.

``slider_figure`` is the static half of the chapter's control pattern: a
plotly slider that switches between precomputed traces, which works on a page
with no kernel. The live half (ipywidgets) is in :mod:`helpers.controls`.
"""
from __future__ import annotations

import json
import uuid
from typing import Callable, Iterable, Sequence

import plotly.graph_objects as go
import plotly.io as pio

PALETTE = ["#1f5fa8", "#d1495b", "#2e933c", "#edae49", "#6c4f9e", "#00798c", "#8d6a4f", "#555555"]
NAIVE, CACHED = PALETTE[1], PALETTE[0]   # the same colours mean the same thing in every notebook

pio.templates["mic"] = go.layout.Template(layout=go.Layout(
    font=dict(family="Inter, Helvetica, Arial, sans-serif", size=14, color="#222"),
    colorway=PALETTE,
    title=dict(x=0.0, xanchor="left", font=dict(size=17)),
    margin=dict(l=70, r=30, t=70, b=60),
    hovermode="x unified",
    legend=dict(bgcolor="rgba(255,255,255,0.7)"),
    height=430,
))
pio.templates.default = "plotly_white+mic"

PLOTLY_JS_NAME = "plotly.min.js"

_LOADER = """<div id="{id}" class="mic-plotly" style="width:100%;height:{height}px;"></div>
<script type="text/javascript">
(function() {{
  var spec = {spec};
  function draw() {{ Plotly.newPlot("{id}", spec.data, spec.layout, {config}); }}
  if (window.Plotly) {{ draw(); return; }}
  window.__micQueue = window.__micQueue || [];
  window.__micQueue.push(draw);
  if (window.__micLoading) return;
  window.__micLoading = true;
  var root = document.documentElement.getAttribute("data-content_root");
  if (root === null) root = "../";
  var s = document.createElement("script");
  s.src = root + "{js}";
  s.charset = "utf-8";
  s.onload = function() {{ window.__micQueue.forEach(function(f) {{ f(); }}); }};
  document.head.appendChild(s);
}})();
</script>"""


class MicRenderer(pio.base_renderers.MimetypeRenderer):
    """Plotly JSON for JupyterLab plus a self-loading HTML div for static pages."""

    def to_mimebundle(self, fig_dict):
        fig = go.Figure(fig_dict)
        spec = fig.to_json()
        height = (fig_dict.get("layout", {}) or {}).get("height") or 430
        html = _LOADER.format(id=f"mic-{uuid.uuid4().hex[:12]}", height=int(height), spec=spec,
                              config=json.dumps({"responsive": True, "displaylogo": False}), js=PLOTLY_JS_NAME)
        return {"application/vnd.plotly.v1+json": json.loads(spec), "text/html": html}


pio.renderers["mic"] = MicRenderer()
pio.renderers.default = "mic"


def plotly_js_path() -> str:
    """The plotly.js bundled with the installed plotly package (copied into the book at build time)."""
    from importlib.resources import files
    return str(files("plotly") / "package_data" / PLOTLY_JS_NAME)


def figure(title: str = "", x: str = "", y: str = "", **layout) -> go.Figure:
    """An empty figure in the chapter's style."""
    fig = go.Figure()
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, **layout)
    return fig


def slider_figure(values: Sequence, make_traces: Callable[[object], Iterable[go.BaseTraceType]],
                  label: str, title: str | Callable[[object], str] = "", x: str = "", y: str = "",
                  active: int = 0, fmt: Callable[[object], str] = str, **layout) -> go.Figure:
    """A figure with a slider over precomputed ``values``; works on a page with no kernel.

    ``make_traces(v)`` returns the traces to show for value ``v``. Every value's
    traces are built up front; the slider toggles which are visible (and the
    title, if ``title`` is a function of the value).
    """
    values = list(values)
    if not values:
        raise ValueError("slider_figure needs at least one value to slide over.")
    if not 0 <= active < len(values):
        raise ValueError(f"active must index one of the {len(values)} values, got {active}.")
    fig = figure(title="", x=x, y=y, **layout)
    groups = []
    for v in values:
        traces = list(make_traces(v))
        start = len(fig.data)
        for t in traces:
            fig.add_trace(t)
        groups.append(range(start, len(fig.data)))
    n = len(fig.data)
    title_of = title if callable(title) else (lambda v: title)
    steps = []
    for i, (v, g) in enumerate(zip(values, groups)):
        vis = [j in g for j in range(n)]
        steps.append(dict(method="update", label=fmt(v), args=[{"visible": vis}, {"title.text": title_of(v)}]))
    for j in range(n):
        fig.data[j].visible = j in groups[active]
    fig.update_layout(
        title_text=title_of(values[active]),
        sliders=[dict(active=active, currentvalue=dict(prefix=f"{label}: "), pad=dict(t=50), steps=steps)],
        margin=dict(b=110),
        height=layout.get("height", 500),
    )
    return fig
