"""One figure style for the whole chapter, and a plotly renderer that works live and in the static book (infrastructure).

Importing this module (every notebook does, through ``helpers``) registers the ``mic`` template and makes ``mic``
the default renderer. The renderer emits three representations of every figure:

* ``application/vnd.plotly.v1+json``: what JupyterLab draws, live;
* ``text/html``: a ``<div>`` named by the figure's text alternative (:mod:`helpers.infra.alt_text`) and a loader of
  the site's one ``plotly.min.js``, which the book build picks (``book/_config.yml``): small pages, no CDN. After every
  draw it checks that each subplot's data sits on its axes, and draws again where plotly.js left it (issue 25);
* the figure before its layout, for the editions (:mod:`helpers.infra.outputs`).

``slider_figure`` is the static half of the chapter's control pattern: a plotly slider that switches between
precomputed traces, which works on a page with no kernel. The live half (ipywidgets): :mod:`helpers.infra.controls`.
"""
from __future__ import annotations

import html as html_lib
import json
import math
import sys
import uuid
from importlib.resources import files
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

# plotly.io imports nbformat, which imports jsonschema, which compiles a grammar for checking IRIs (rfc3987_syntax)
# as it is imported: a second or more of every notebook's start, for a check nothing in a kernel makes.
sys.modules.setdefault("rfc3987_syntax", None)

import plotly.graph_objects as go  # noqa: E402  (after the line above, on purpose)
import plotly.io as pio  # noqa: E402

from .alt_text import as_numbers, describe, takeaway  # noqa: E402,F401  (takeaway: for notebooks, plotting.takeaway)
from .messages import catalog, direction, edition, fields_of, font_family, isolate_rtl, message  # noqa: E402
from .outputs import figure_source  # noqa: E402

PALETTE = ["#1f5fa8", "#d1495b", "#2e933c", "#edae49", "#6c4f9e", "#00798c", "#8d6a4f", "#555555"]
NAIVE, CACHED = PALETTE[1], PALETTE[0]   # the same colours mean the same thing in every notebook

BASE_FONT = "Inter, Helvetica, Arial, sans-serif"    # after the edition's script font, if it has one
AXIS = dict(automargin=True, title=dict(standoff=12))
pio.templates["mic"] = go.layout.Template(layout=go.Layout(
    font=dict(family=font_family(BASE_FONT), size=14, color="#222"), colorway=PALETTE,
    # indented from the page edge (where a normal plot starts; a plot with long category labels starts later,
    # and a title aligned with it would run off the right edge), wrapped by the renderer (see wrap_title),
    # and the top margin grows to fit it (automargin), however many lines it has
    title=dict(x=0.0, xref="container", xanchor="left", y=1.0, yref="paper", yanchor="bottom",
               pad=dict(b=24, l=60), automargin=True, font=dict(size=17)),
    margin=dict(l=70, r=40, t=40, b=70, pad=4),
    hovermode="x unified",
    legend=dict(bgcolor="rgba(255,255,255,0.7)"),
    height=430,
    xaxis=AXIS, yaxis=AXIS,
    yaxis2=dict(automargin=True, tickmode="auto", showgrid=False),   # round ticks on a secondary axis
))
pio.templates.default = "plotly_white+mic"

TITLE_CHARS = 56          # a title line longer than this is wrapped: at 17 px it would clip in a narrow page


def wrap_title(text: str, width: int = TITLE_CHARS) -> str:
    """Break a long title into lines of at most ``width`` characters (plotly never wraps titles itself)."""
    if not text or "<br" in text or len(text) <= width:
        return text
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "<br>".join(lines + [line])


def _axis_values(fig_dict: dict, axis: str) -> list[float]:
    """Every positive finite value plotted on layout axis ``axis`` ('xaxis', 'yaxis2', ...)."""
    letter, suffix = axis[0], axis[5:]
    values = []
    for trace in go.Figure(data=fig_dict.get("data", [])).data:
        if (getattr(trace, f"{letter}axis", None) or letter) != letter + suffix:
            continue
        arr = as_numbers(getattr(trace, letter, None))     # categories or dates: none, not a log axis anyway
        values.extend(arr[np.isfinite(arr) & (arr > 0)].tolist())
    return values


def round_log_ticks(fig_dict: dict) -> None:
    """Label log axes with round values: powers of ten over wide ranges, 1-2-5 over narrow ones.

    Plotly's own choice over one to three decades labels minor ticks as bare digits ("2 5 2 5"),
    which crowd and read as nonsense. Axes that set their own ticks are left alone.
    """
    layout = fig_dict.setdefault("layout", {})
    for name, axis in list(layout.items()):
        if not (name.startswith(("xaxis", "yaxis")) and isinstance(axis, dict) and axis.get("type") == "log"):
            continue
        if any(k in axis for k in ("tickvals", "dtick", "tickmode")):
            continue
        values = _axis_values(fig_dict, name)
        if not values:
            continue
        lo, hi = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
        mantissas = (1,) if hi - lo > 3 else (1, 2, 5)
        ticks = [m * 10.0 ** e for e in range(lo, hi + 1) for m in mantissas
                 if min(values) / 1.5 <= m * 10.0 ** e <= max(values) * 1.5]
        if len(ticks) >= 2:
            axis.update(tickmode="array", tickvals=ticks, ticktext=[f"{t:,.0f}" if t >= 1 else f"{t:g}" for t in ticks])


def _wrap_step_titles(layout: dict) -> None:
    for control in (layout.get("sliders") or []) + (layout.get("updatemenus") or []):
        for step in control.get("steps", []) or control.get("buttons", []) or []:
            for arg in (step.get("args") or [])[1:2]:
                if not isinstance(arg, dict):
                    continue
                if isinstance(arg.get("title.text"), str):
                    arg["title.text"] = wrap_title(arg["title.text"])
                if isinstance(arg.get("title"), dict) and isinstance(arg["title"].get("text"), str):
                    arg["title"]["text"] = wrap_title(arg["title"]["text"])
                if isinstance(arg.get("title"), str):
                    arg["title"] = wrap_title(arg["title"])


def edition_labels(fig_dict: dict) -> None:
    """Labels written straight into a trace or the layout, in the edition's words.

    :func:`figure` looks its titles up itself; a trace's ``name="cached"``, a subplot's title, ``title_text=`` or
    ``yaxis2=dict(title="speed-up")`` reach plotly as plain strings, so they are looked up here, as the same templates
    (without fields) that ``scripts/extract-messages`` collects. A label formatted by ``message(...)`` stays as it is.
    """
    words = catalog(edition())
    if not words:
        return
    layout = fig_dict.get("layout", {})
    for trace in fig_dict.get("data", []):
        if isinstance(trace.get("name"), str):
            trace["name"] = words.get(trace["name"], trace["name"])
    axes = [v for k, v in layout.items() if k.startswith(("xaxis", "yaxis")) and isinstance(v, dict)]
    titled = [layout.get("title")] + [a.get("title") for a in axes] + [a for a in layout.get("annotations", []) or []]
    for item in titled:
        if isinstance(item, dict) and isinstance(item.get("text"), str):
            item["text"] = words.get(item["text"], item["text"])


def tidy(fig_dict: dict) -> dict:
    """The chapter's layout rules, applied to every figure as it is rendered (live and static).

    Long titles wrap; a title clears subplot titles and legends that start at the top of the plot;
    colour-bar titles sit beside the bar rather than on its top tick; log axes get round ticks.
    """
    layout = fig_dict.setdefault("layout", {})
    edition_labels(fig_dict)
    title = layout.get("title")
    if isinstance(title, str):
        title = layout["title"] = {"text": title}
    if isinstance(title, dict) and title.get("text"):
        title["text"] = wrap_title(title["text"])
        tops = [a for a in layout.get("annotations", []) or []
                if a.get("yref", "paper") == "paper" and (a.get("y") or 0) >= 0.98]
        pad = title.setdefault("pad", {})
        pad["b"] = max(pad.get("b", 0), 40 if tops else 24)
        for menu in layout.get("updatemenus", []) or []:      # a dropdown above the plot: the title goes over it
            y = menu.get("y", 1.0)
            if menu.get("yanchor") == "bottom" and y >= 1:      # (a menu's own pad lifts it that much more)
                pad["b"] = max(pad["b"], int(64 + 400 * (y - 1) + (menu.get("pad") or {}).get("b", 0)))
    _wrap_step_titles(layout)
    for trace in fig_dict.get("data", []):
        bar = trace.get("colorbar") if isinstance(trace, dict) else None
        if isinstance(bar, dict) and bar.get("title"):
            if isinstance(bar["title"], str):
                bar["title"] = {"text": bar["title"]}
            bar["title"].setdefault("side", "right")
    round_log_ticks(fig_dict)
    return isolate_rtl(fig_dict) if direction() == "rtl" else fig_dict


PLOTLY_JS_NAME = "plotly.min.js"

# To assistive technology a figure is one figure named by its text alternative; what plotly.js draws (every SVG) is
# hidden after each draw, its toolbar's buttons stay (role="img" around them: axe-core's nested-interactive).
_LOADER = """<div class="mic-figure" role="figure" aria-label="{alt}">
<div id="{id}" class="mic-plotly" style="width:100%;height:{height}px;"></div>
</div>
<script type="text/javascript">
(function() {{
  var spec = {spec};
  // plotly.js draws the traces' layer before it knows the title's height when a legend or a slider also
  // moves the margins (plotly.js issue 7750): the axes move down, the data stays. Wherever a subplot's
  // layer is away from its axes after a draw (the first, or one a slider asks for), draw once more: the
  // margins are known by then.
  window.__micRealign = window.__micRealign || function(gd) {{
    var plots = (gd._fullLayout && gd._fullLayout._plots) || {{}};
    var away = Object.keys(plots).some(function(k) {{
      var p = plots[k], node = p.plot && p.plot.node && p.plot.node();
      var t = node && node.transform.baseVal.consolidate();
      return !!(t && p.xaxis && p.yaxis) &&
        (Math.abs(t.matrix.e - p.xaxis._offset) > 0.5 || Math.abs(t.matrix.f - p.yaxis._offset) > 0.5);
    }});
    if (!away) {{ gd.__micRedraws = 0; return; }}
    gd.__micRedraws = (gd.__micRedraws || 0) + 1;
    if (gd.__micRedraws <= 2) Plotly.redraw(gd);
  }};
  // plotly.js measures text when it draws (a dropdown's width, a legend's, the margins) and never again: drawn
  // while a web font the figure names is still loading, the text is measured in a fallback font and shown in the
  // real one, wider or narrower. So draw once the faces the figure's text needs are loaded (3 s at most).
  function fontsLoaded() {{
    if (!document.fonts || !document.fonts.load) return Promise.resolve();
    var families = {{}}, loads = [];
    var text = JSON.stringify(spec, function(k, v) {{ if (k === "family") families[v] = 1; return v; }});
    Object.keys(families).forEach(function(family) {{
      loads.push(document.fonts.load("16px " + family, text), document.fonts.load("bold 16px " + family, text));
    }});
    var loaded = Promise.all(loads.map(function(p) {{ return p.catch(function() {{}}); }}));
    return Promise.race([loaded, new Promise(function(done) {{ setTimeout(done, 3000); }})]);
  }}
  function hideDrawing(gd) {{ gd.querySelectorAll("svg, .gl-container").forEach(function(e) {{
    e.setAttribute("aria-hidden", "true"); }}); }}
  function draw() {{
    var gd = document.getElementById("{id}");
    fontsLoaded().then(function() {{
      return Plotly.newPlot(gd, spec.data, spec.layout, {config});
    }}).then(function() {{
      var tester = document.getElementById("js-plotly-tester");     // plotly's SVG for measuring text: no image
      if (tester) tester.setAttribute("aria-hidden", "true");
      hideDrawing(gd);
      gd.on("plotly_afterplot", function() {{ hideDrawing(gd); window.__micRealign(gd); }});
      window.__micRealign(gd);
    }});
  }}
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


# No logo, and no "Share chart...", which uploads the figure to Plotly's cloud: the site never sends anything.
CONFIG = {"responsive": True, "displaylogo": False, "modeBarButtonsToRemove": ["sendChartToCloud"]}


class MicRenderer(pio.base_renderers.MimetypeRenderer):
    """Plotly JSON for JupyterLab plus a self-loading HTML div for static pages."""

    def to_mimebundle(self, fig_dict):
        source = figure_source(pio.to_json(fig_dict))      # before the layout: what an edition draws again
        edition_labels(fig_dict)
        alt = html_lib.escape(describe(fig_dict))           # in the edition's words, before Urdu's isolates
        fig = go.Figure(tidy(fig_dict))
        spec = fig.to_json()
        height = (fig_dict.get("layout", {}) or {}).get("height") or 430
        html = _LOADER.format(id=f"mic-{uuid.uuid4().hex[:12]}", height=int(height), spec=spec, alt=alt,
                              config=json.dumps(CONFIG), js=PLOTLY_JS_NAME)
        return {"application/vnd.plotly.v1+json": json.loads(spec), "text/html": html, **source}


pio.renderers["mic"] = MicRenderer()
pio.renderers.default = "mic"


def plotly_js_path() -> str:
    """The plotly.js bundled with the installed plotly package (copied into the book at build time)."""
    return str(files("plotly") / "package_data" / PLOTLY_JS_NAME)


def figure(title: str = "", x: str = "", y: str = "", fields: Mapping[str, object] | None = None,
           **layout) -> go.Figure:
    """An empty figure in the chapter's style.

    ``title``, ``x`` and ``y`` (the axis titles) are message templates (:mod:`helpers.infra.messages`),
    their named fields given in ``fields``: ``figure("Batch {b}", "tokens", "ms", fields=dict(b=b))``.
    """
    fields = fields or {}

    def text(template: str) -> str:
        return message(template, **{k: v for k, v in fields.items() if k in fields_of(template)})
    unused = fields.keys() - fields_of(title) - fields_of(x) - fields_of(y)
    if unused:
        raise ValueError(f"figure() was given fields its titles do not use: {sorted(unused)}.")
    fig = go.Figure()
    fig.update_layout(title=text(title), xaxis_title=text(x), yaxis_title=text(y), **layout)
    return fig


def slider_figure(values: Sequence, make_traces: Callable[[object], Iterable[go.BaseTraceType]],
                  label: str, title: str | Callable[[object], str] = "", x: str = "", y: str = "",
                  active: int = 0, fmt: Callable[[object], str] = str, fields: Mapping[str, object] | None = None,
                  **layout) -> go.Figure:
    """A figure with a slider over precomputed ``values``; works on a page with no kernel.

    ``make_traces(v)`` returns the traces to show for value ``v``. Every value's
    traces are built up front; the slider toggles which are visible (and the
    title, if ``title`` is a function of the value, which returns a :func:`message`).
    ``x`` and ``y`` are templates, filled from ``fields`` as in :func:`figure`; ``label``, the slider's name, is
    a template without fields.
    """
    values = list(values)
    if not values:
        raise ValueError("slider_figure needs at least one value to slide over.")
    if not 0 <= active < len(values):
        raise ValueError(f"active must index one of the {len(values)} values, got {active}.")
    fig = figure("", x, y, fields=fields, **layout)
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
        sliders=[slider(steps, label, active)],
        title_pad_b=SLIDER_HEIGHT,          # the title sits above the slider
        margin_t=SLIDER_HEIGHT + 50,
        height=layout.get("height", 560),
    )
    return fig


SLIDER_HEIGHT = 118        # pixels the slider takes above the plotting area (current value, rail, labels)


def slider(steps: list, label: str, active: int = 0) -> dict:
    """A plotly slider placed between the title and the plot, where it can never cover axis labels.

    Below the plot it collides with the x-axis title and with rotated category labels, whose height
    plotly only knows at draw time. With more than a dozen steps the step labels would overlap each
    other, so they are hidden and the current value alone names the position.
    """
    crowded = len(steps) > 12
    return dict(active=active, steps=steps, x=0, len=1, y=1.0, yanchor="bottom", pad=dict(t=0, b=12),
                font=dict(color="rgba(0,0,0,0)") if crowded else dict(size=12),
                currentvalue=dict(prefix=message("{label}: ", label=message(label)), font=dict(size=14, color="#222")))
