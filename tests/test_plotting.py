import json

import plotly.graph_objects as go
import plotly.io as pio
import pytest

from helpers.infra import plotting


def test_renderer_emits_plotly_json_and_self_loading_html():
    fig = plotting.figure("t", "x", "y")
    fig.add_scatter(x=[1, 2], y=[3, 4])
    bundle = pio.renderers["mic"].to_mimebundle(fig.to_dict())
    assert bundle["application/vnd.plotly.v1+json"]["data"][0]["type"] == "scatter"
    html = bundle["text/html"]
    assert "plotly.min.js" in html and "cdn" not in html.lower() and "data-content_root" in html
    assert pio.renderers.default == "mic"


def test_slider_figure_toggles_one_group_at_a_time():
    values = [1, 2, 3]
    fig = plotting.slider_figure(values, lambda v: [go.Scatter(x=[0, 1], y=[0, v]), go.Bar(x=[0], y=[v])],
                                 "k", title=lambda v: f"k={v}", active=1)
    assert len(fig.data) == 6
    assert [t.visible for t in fig.data] == [False, False, True, True, False, False]
    steps = fig.layout.sliders[0].steps
    assert [s.label for s in steps] == ["1", "2", "3"]
    assert steps[2].args[0]["visible"] == [False, False, False, False, True, True]
    assert steps[0].args[1]["title.text"] == "k=1" and fig.layout.title.text == "k=2"
    json.loads(fig.to_json())


def test_slider_figure_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one value"):
        plotting.slider_figure([], lambda v: [], "k")
    with pytest.raises(ValueError, match="active"):
        plotting.slider_figure([1], lambda v: [], "k", active=3)


def test_plotly_js_is_available_offline():
    import os
    assert os.path.getsize(plotting.plotly_js_path()) > 1_000_000


def test_static_figures_are_drawn_again_when_plotly_leaves_the_data_off_the_axes():
    """plotly.js can leave the traces' layer at the first top margin while the axes move down (plotly.js
    issue 7750; issue 25 here): the loader checks every subplot after each draw and redraws a misplaced one.
    tests/test_book_browser.py checks the result in a browser, point by point."""
    fig = plotting.figure("a title long enough to be wrapped onto a second line by the chapter's renderer", "x", "y")
    fig.add_scatter(x=[1, 2], y=[3, 4], name="a")
    html = pio.renderers["mic"].to_mimebundle(fig.to_dict())["text/html"]
    assert "plotly_afterplot" in html and "Plotly.redraw(gd)" in html and "_offset" in html
    assert html.count("Plotly.newPlot(") == 1
