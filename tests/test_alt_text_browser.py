"""What a screen reader announces for a figure (issue 41), read from Chromium's accessibility tree, not the DOM: one
figure named by the text alternative, and nothing of plotly's SVG (title, ticks, legend, hover label) beside it; only
its toolbar's named buttons. One page,
two figures as the renderer draws them: an English one and its Urdu re-rendering (mic_tools.rerender)."""
from __future__ import annotations

import shutil

import nbformat

from helpers.infra import alt_text, plotting
from mic_tools import accessibility, rerender
from test_alt_text import aria_label, head_figure
from test_book_browser import serve

PAGE = """<!DOCTYPE html>
<html lang="en" data-content_root="./"><head><meta charset="utf-8"><title>figures</title></head>
<body><main><h1>Figures</h1>{figures}</main></body></html>"""


def accessible_nodes(page) -> list[dict]:
    """Every node of the page's full accessibility tree that assistive technology is given (not ignored)."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("Accessibility.enable")
    nodes = cdp.send("Accessibility.getFullAXTree")["nodes"]
    return [n for n in nodes if not n.get("ignored")]


def name_of(node: dict) -> str:
    return (node.get("name") or {}).get("value", "")


def test_a_screen_reader_hears_each_figure_once_by_its_text_alternative(browser, tmp_path):
    english = plotting.MicRenderer().to_mimebundle(head_figure().to_dict())
    shown = nbformat.v4.new_output("display_data", data=english)
    urdu = rerender.rerendered_output(shown, "ur")["data"]
    (tmp_path / "index.html").write_text(PAGE.format(figures=english["text/html"] + urdu["text/html"]), "utf8")
    shutil.copy(plotting.plotly_js_path(), tmp_path / plotting.PLOTLY_JS_NAME)
    with serve(tmp_path) as url:
        page = browser.new_page(viewport={"width": 1000, "height": 1200})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{url}/index.html", wait_until="load")
        page.wait_for_function("document.querySelectorAll('.mic-plotly .main-svg').length >= 2", timeout=20_000)
        page.hover(".mic-plotly")                  # the toolbar shows, and a hover label is drawn: still not heard
        figures = accessibility.figures_heard(page)
        nodes = accessible_nodes(page)
        page.close()
    assert not errors, errors
    assert [(label, role, name) for label, role, name, _ in figures] == [
        (aria_label(english), "figure", aria_label(english)), (aria_label(urdu), "figure", aria_label(urdu))]
    assert aria_label(english) == alt_text.describe(head_figure().to_dict())
    assert aria_label(english).startswith("One attention head, one step. Line chart")
    # inside a figure, only the toolbar's named buttons; no "Share chart..." (it would upload the figure)
    buttons = [name for *_, inside in figures for role, name in inside if role == "button"]
    assert {role for *_, inside in figures for role, _ in inside} <= accessibility.TOOLBAR_ROLES
    assert "Download plot as a PNG" in buttons and "Zoom" in buttons and all(buttons)
    assert not any("Share" in name for name in buttons)
    # nothing plotly drew is announced anywhere: no tick label, legend entry, title or image
    # (plotly's own SVG for measuring text, #js-plotly-tester, was an unnamed image before the loader hid it)
    said = {name_of(n) for n in nodes if name_of(n)} - {label for label, *_ in figures} - set(buttons)
    assert said == {"figures", "Figures"}, said                  # the page's title and heading, nothing else
    roles = {n["role"]["value"] for n in nodes}
    assert not roles & {"image", "link", "graphics-document", "graphics-symbol", "SvgRoot"}, roles
