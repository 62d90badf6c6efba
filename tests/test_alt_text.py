"""A figure's text alternative (issue 41): assembled from the figure with known values, put where assistive
technology reads it, and said again in each edition's words from the English run's numbers.
tests/test_alt_text_browser.py checks, in Chromium's accessibility tree, that it is what a screen reader announces."""
from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
import nbformat
import plotly.graph_objects as go
import pytest

from helpers.infra import alt_text, plotting
from helpers.infra.messages import message
from mic_tools import rerender
from script_module import load

TAKEAWAY = "The uncached step takes {a:.0f}x the cached step's time at the shortest context, {b:,.0f}x at the longest."


def head_figure() -> go.Figure:
    """Notebook 1's one-head figure, with numbers of our own."""
    fig = plotting.figure("One attention head, one step", "context n (tokens)", "milliseconds per step",
                          xaxis_type="log", yaxis_type="log")
    fig.add_scatter(x=[256, 1024, 4096], y=np.array([0.31, 4.2, 38.44]), name="no cache: n x n scores")
    fig.add_scatter(x=[256, 1024, 4096], y=np.array([0.0123, 0.02, 0.05]), name="cache: 1 x n scores")
    return plotting.takeaway(fig, TAKEAWAY, a=25.2, b=768.8)


def aria_label(bundle: dict) -> str:
    return html.unescape(re.search(r'role="figure" aria-label="([^"]*)"', bundle["text/html"]).group(1))


def test_the_text_alternative_says_title_kind_axes_series_range_and_takeaway():
    assert alt_text.describe(head_figure().to_dict()) == (
        "One attention head, one step. Line chart of milliseconds per step against context n (tokens). "
        "2 series: no cache: n x n scores; cache: 1 x n scores. milliseconds per step: from 0.0123 to 38.4. "
        "The uncached step takes 25x the cached step's time at the shortest context, 769x at the longest.")


def test_numbers_read_as_a_listener_hears_them_best():
    assert [alt_text.plain_number(v) for v in (12345.6, 38.44, 4.0, 0.012345, 1e-5, 0.0, -2.5)] == [
        "12,346", "38.4", "4", "0.0123", "0.00001", "0", "-2.5"]


@pytest.mark.parametrize("traces, kind", [
    ([go.Scatter(y=[1, 2])], "line"), ([go.Scatter(y=[1, 2], mode="lines+markers")], "line"),
    ([go.Scatter(y=[1, 2], mode="markers")], "scatter"), ([go.Bar(y=[1])], "bar"),
    ([go.Heatmap(z=[[1, 2]])], "heatmap"), ([go.Bar(y=[1]), go.Scatter(y=[1])], "chart"), ([go.Pie()], "chart")])
def test_the_kind_of_chart_comes_from_its_traces(traces, kind):
    assert alt_text.kind_of(traces) == kind


def test_without_axis_titles_or_names_the_sentences_say_less():
    fig = go.Figure([go.Bar(x=["a", "b"], y=[3, 7]), go.Bar(x=["a", "b"], y=[1, 2], yaxis="y2")])
    fig.update_layout(title="Costs<br>per scheme?", yaxis2=dict(title="speed-up", overlaying="y"))
    assert alt_text.describe(fig.to_dict()) == (
        "Costs per scheme? Bar chart. 2 series. Values from 3 to 7. speed-up: from 1 to 2.")
    horizontal = go.Figure(go.Bar(x=[0.5, 2.0], y=["p", "q"], orientation="h", name="time"))
    horizontal.update_layout(xaxis_title="seconds", yaxis_title="case")
    assert alt_text.describe(horizontal.to_dict()) == (
        "Bar chart of case against seconds. One series: time. Values from 0.5 to 2.")


def test_a_slider_figure_describes_the_traces_it_shows():
    fig = plotting.slider_figure([1, 2, 3], lambda v: [go.Scatter(x=[0, 1], y=[0, 10 * v], name="tokens")], "k",
                                 x="step", y="GMACs", active=1)
    assert alt_text.describe(fig.to_dict()).endswith("One series: tokens. GMACs: from 0 to 20.")


def test_a_takeaway_is_a_template_with_its_fields_and_keeps_other_meta():
    fig = go.Figure(layout=dict(meta={"mine": 1}))
    plotting.takeaway(fig, TAKEAWAY, a=2, b=3000)
    assert fig.layout.meta == {"mine": 1, alt_text.TAKEAWAY_KEY: message(TAKEAWAY, a=2, b=3000)}
    with pytest.raises(ValueError, match="missing"):
        plotting.takeaway(fig, TAKEAWAY, a=2)


def test_the_renderer_names_the_figure_hides_plotlys_svg_and_offers_no_upload():
    fig = head_figure()
    fig.update_layout(title='A "quoted" <b>title</b> & more')
    bundle = plotting.MicRenderer().to_mimebundle(fig.to_dict())
    page = bundle["text/html"]
    assert aria_label(bundle) == alt_text.describe(fig.to_dict())
    assert aria_label(bundle).startswith('A "quoted" title & more. Line chart')
    assert re.search(r'<div class="mic-figure" role="figure" aria-label="[^"]*">\n<div id="mic-[0-9a-f]{12}" '
                     r'class="mic-plotly"', page)
    assert "hideDrawing(gd)" in page and '"sendChartToCloud"' in page      # plotly's SVG hidden; no cloud button


@pytest.mark.parametrize("name, words", [("hi", ("बनाम", "।", "सबसे लंबे पर")),
                                         ("ur", ("کے مقابلے میں", "۔", "سب سے لمبے پر"))])
def test_an_edition_says_the_text_alternative_again_in_its_words(name, words):
    english = plotting.MicRenderer().to_mimebundle(head_figure().to_dict())
    shown = nbformat.v4.new_output("display_data", data=english)
    again = rerender.rerendered_output(shown, name)["data"]
    with rerender.edition(name):
        native = plotting.MicRenderer().to_mimebundle(head_figure().to_dict())
    said = aria_label(again)
    assert said == aria_label(native)
    assert all(w in said for w in words), said
    assert "25x" in said and "769x" in said and "38.4" in said and "0.0123" in said     # the English run's numbers
    assert "against" not in said and "series:" in said                                  # series stays English
    assert "\u2067" not in said                               # no SVG bidi isolates in a sentence read aloud


def test_every_template_of_a_text_alternative_is_extracted_for_the_catalogs():
    found = {t for _, t in load("extract-messages").templates(
        'plotting.takeaway(fig, "The gap grows {r:.0f}x.", r=r)')}
    assert found == {"The gap grows {r:.0f}x."}
    source = (Path(alt_text.__file__)).read_text(encoding="utf8")
    wanted = {*alt_text.AGAINST.values(), *alt_text.BARE.values(), *alt_text.SERIES.values(),
              *alt_text.RANGE.values(), alt_text.TITLE, alt_text.LIST}
    assert wanted <= {t for _, t in load("extract-messages").templates(source)}


def test_a_figure_of_panels_is_described_panel_by_panel_with_its_subplot_titles():
    from plotly.subplots import make_subplots
    fig = make_subplots(rows=1, cols=2, subplot_titles=("the whole pass", "per prompt token"))
    fig.add_scatter(x=[1, 2], y=[3, 4], name="prefill", row=1, col=1)
    fig.add_scatter(x=[1, 2], y=[0.3, 0.4], name="per token", row=1, col=2)
    fig.add_scatter(x=[1, 2], y=[0.5, 0.5], name="decode", row=1, col=2)
    fig.update_xaxes(title_text="prompt length P")
    fig.update_yaxes(title_text="ms", row=1, col=1)
    fig.update_yaxes(title_text="ms per token", row=1, col=2)
    fig.update_layout(title_text="Table A")
    assert alt_text.describe(fig.to_dict()) == (
        "Table A. 2 panels. Panel 1, the whole pass: Line chart of ms against prompt length P. One series: prefill. "
        "ms: from 3 to 4. Panel 2, per prompt token: Line chart of ms per token against prompt length P. "
        "2 series: per token; decode. ms per token: from 0.3 to 0.5.")


def test_stacked_panels_that_share_their_x_axis_read_its_one_title():
    from plotly.subplots import make_subplots
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True)
    fig.add_bar(x=[1, 2], y=["a", "b"], orientation="h", name="request", row=1, col=1)
    fig.add_bar(x=[4, 8], y=["a", "b"], orientation="h", showlegend=False, row=2, col=1)
    fig.update_xaxes(title_text="time (s)", row=2, col=1)
    assert alt_text.describe(fig.to_dict()) == (
        "2 panels. Panel 1: Bar chart. Horizontal axis: time (s). One series: request. Values from 1 to 2. "
        "Panel 2: Bar chart. Horizontal axis: time (s). One series. Values from 4 to 8.")


def test_a_heatmap_says_its_range_under_its_colour_bar_and_none_without_one():
    shown = go.Figure(go.Heatmap(z=[[1, 2.5]], colorbar=dict(title="speed-up")))
    assert alt_text.describe(shown.to_dict()) == "Heatmap. speed-up: from 1 to 2.5."
    hidden = go.Figure(go.Heatmap(z=[[18, 37]], text=[["256 KiB", "128 GiB"]], showscale=False))
    assert alt_text.describe(hidden.to_dict()) == "Heatmap."


def test_a_line_over_a_heatmap_is_a_series_on_its_axes_not_a_value():
    fig = go.Figure([go.Heatmap(x=[0.5, 0.9], y=[1, 8], z=[[1.2, 3.0], [0.5, 12.0]], colorbar=dict(title="speed-up")),
                     go.Scatter(x=[0.5, 0.9], y=[2, 6], name="break-even")])
    fig.update_layout(xaxis_title="acceptance rate α", yaxis_title="draft tokens γ")
    assert alt_text.describe(fig.to_dict()) == (
        "Heatmap over acceptance rate α and draft tokens γ. One series: break-even. speed-up: from 0.5 to 12.")


EXECUTED = Path(__file__).resolve().parents[1] / "book" / "_build" / "jupyter_execute" / "notebooks"


@pytest.mark.skipif(not EXECUTED.is_dir(), reason="build the book first: make book")
def test_every_figure_of_the_run_has_a_takeaway_at_the_end_of_its_text_alternative():
    """Every figure the chapter's run drew (the English build's executed notebooks) was given one sentence of what
    to take from it, filled from the run's numbers, and its text alternative ends with that sentence."""
    figures, without = 0, []
    for path in sorted(EXECUTED.glob("[0-9][0-9]-*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                if "application/vnd.plotly.v1+json" not in data:
                    continue
                figures += 1
                meta = data["application/vnd.plotly.v1+json"].get("layout", {}).get("meta")
                said = meta.get(alt_text.TAKEAWAY_KEY) if isinstance(meta, dict) else None
                if not said or not aria_label(data).endswith(said):
                    without.append(f"{path.stem}: {aria_label(data)[:80]}")
    assert figures >= 40 and not without, f"{figures} figures, {len(without)} without a takeaway: {without[:3]}"
