"""What a screen reader announces for a figure (issue 41), read from Chromium's accessibility tree, not the DOM: one
image named by the text alternative, and nothing of plotly's SVG (title, ticks, legend, modebar) beside it. One page,
two figures as the renderer draws them: an English one and its Urdu re-rendering (mic_tools.rerender)."""
from __future__ import annotations

import shutil

import nbformat

from helpers.infra import alt_text, plotting
from mic_tools import rerender
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
        nodes = accessible_nodes(page)
        page.close()
    assert not errors, errors
    images = [n for n in nodes if n["role"]["value"] == "image"]
    assert [name_of(n) for n in images] == [aria_label(english), aria_label(urdu)]
    assert aria_label(english) == alt_text.describe(head_figure().to_dict())
    assert aria_label(english).startswith("One attention head, one step. Line chart")
    # nothing plotly drew is announced beside it: no tick label, legend entry, title or modebar button
    # (plotly's own SVG for measuring text, #js-plotly-tester, was an unnamed image before the loader hid it)
    said = {name_of(n) for n in nodes if n not in images and name_of(n)}
    assert said == {"figures", "Figures"}, said                  # the page's title and heading, nothing else
    roles = {n["role"]["value"] for n in nodes}
    assert not roles & {"button", "link", "graphics-document", "graphics-symbol", "SvgRoot", "group"}, roles
