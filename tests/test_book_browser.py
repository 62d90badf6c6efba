"""Open the built book in a real headless Chromium and check that the figures draw and the sliders work.

Needs `make book` first (the `make test` target builds it) and Debian's chromium.
"""
import functools
import http.server
import threading
from pathlib import Path

import pytest

SITE = Path(__file__).resolve().parents[1] / "book" / "_build" / "html"
PAGES = sorted(p.relative_to(SITE).as_posix() for p in (SITE / "notebooks").glob("*.html")) if SITE.exists() else []

pytestmark = pytest.mark.skipif(not SITE.exists(), reason="build the book first: make book")


@pytest.fixture(scope="module")
def server():
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(SITE))
    handler.log_message = lambda *a, **k: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


# pydata-sphinx-theme logs this when no colour mode was stored yet; it is not an error of ours.
BENIGN_CONSOLE = {"Got invalid theme mode: . Resetting to auto."}


def open_page(browser, url):
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    problems = []
    page.on("pageerror", lambda e: problems.append(f"JavaScript error: {e}"))
    page.on("console", lambda m: problems.append(f"console error: {m.text}")
            if m.type == "error" and m.text not in BENIGN_CONSOLE
            and not m.text.startswith("Failed to load resource") else None)   # reported with its URL below
    page.on("requestfailed", lambda r: problems.append(f"failed request: {r.url}"))
    # the browser asks for /favicon.ico on its own; the site has none
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}")
            if r.status >= 400 and not r.url.endswith("/favicon.ico") else None)
    page.goto(url, wait_until="load")
    return page, problems


def test_every_chapter_page_was_built():
    assert "notebooks/01-kv-cache.html" in PAGES


@pytest.mark.parametrize("path", PAGES)
def test_figures_draw_without_errors(server, browser, path):
    page, problems = open_page(browser, f"{server}/{path}")
    n = page.locator("div.mic-plotly").count()
    assert n > 0, f"{path} has no figures"
    drawn_js = """() => Array.from(document.querySelectorAll('div.mic-plotly')).map(
        d => d.querySelectorAll('svg.main-svg g.trace, svg.main-svg g.hm, svg.main-svg image').length)"""
    try:
        page.wait_for_function(f"() => ({drawn_js})().every(k => k > 0)", timeout=60_000)
    except Exception:
        pass
    drawn = page.evaluate(drawn_js)
    assert len(drawn) == n and all(k > 0 for k in drawn), f"figures without drawn traces on {path}: {drawn}"
    external = page.evaluate("""() => Array.from(document.querySelectorAll('script[src], link[href]'))
        .map(e => e.src || e.href).filter(u => u && !u.startsWith(location.origin))""")
    assert not external, f"the page asks the internet for {external}"
    # maths is typeset by the site's own MathJax
    if page.locator("span.math, div.math").count():
        page.wait_for_function("() => document.querySelectorAll('mjx-container').length > 0", timeout=60_000)
    # plotly.js came from the site itself, once
    scripts = page.evaluate("() => Array.from(document.scripts).map(s => s.src).filter(s => s.includes('plotly'))")
    assert len(scripts) == 1 and scripts[0].startswith(server), scripts
    assert not problems, problems
    page.close()


# Every visible text element of every figure, with its box, in page pixels.
FIGURE_TEXTS_JS = """() => Array.from(document.querySelectorAll('div.mic-plotly')).map(div => {
  const fig = div.getBoundingClientRect();
  const texts = Array.from(div.querySelectorAll('svg.main-svg text')).filter(t => {
    if (!t.textContent.trim() || t.closest('.hoverlayer, .modebar')) return false;
    const st = getComputedStyle(t);
    if (st.display === 'none' || st.visibility === 'hidden' || parseFloat(st.opacity) === 0) return false;
    if (/rgba\\(.*,\\s*0\\)$/.test(st.fill)) return false;          // transparent: drawn but not seen
    for (let e = t; e && e !== div; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.display === 'none' || parseFloat(s.opacity) === 0) return false;
    }
    const r = t.getBoundingClientRect();
    return r.width > 0 && r.height > 0;
  }).map(t => { const r = t.getBoundingClientRect(), m = t.getScreenCTM();
                return {text: t.textContent.trim().slice(0, 60), l: r.left, r: r.right, t: r.top, b: r.bottom,
                        rotated: !!m && Math.abs(m.b) > 1e-3}; });
  return {id: div.id, box: {l: fig.left, r: fig.right, t: fig.top, b: fig.bottom}, texts};
})"""


def text_problems(figure: dict, slack: float = 2.0) -> list[str]:
    """Texts that stick out of their figure, or that overlap each other by more than ``slack`` pixels."""
    box, texts, found = figure["box"], figure["texts"], []
    for a in texts:
        if a["l"] < box["l"] - slack or a["r"] > box["r"] + slack or a["t"] < box["t"] - slack or a["b"] > box["b"] + slack:
            found.append(f"clipped: {a['text']!r}")
    for i, a in enumerate(texts):
        for b in texts[i + 1:]:
            if a.get("rotated") and b.get("rotated"):
                continue      # slanted tick labels: their boxes overlap though the glyphs do not
            w = min(a["r"], b["r"]) - max(a["l"], b["l"])
            h = min(a["b"], b["b"]) - max(a["t"], b["t"])
            if w > slack and h > slack:
                found.append(f"overlap: {a['text']!r} and {b['text']!r}")
    return found


def test_text_problems_finds_overlap_and_clipping():
    fig = {"box": {"l": 0, "r": 100, "t": 0, "b": 100}, "texts": [
        {"text": "a", "l": 10, "r": 40, "t": 10, "b": 20}, {"text": "b", "l": 30, "r": 60, "t": 12, "b": 22},
        {"text": "c", "l": 90, "r": 130, "t": 50, "b": 60}, {"text": "d", "l": 10, "r": 40, "t": 30, "b": 40}]}
    assert text_problems(fig) == ["clipped: 'c'", "overlap: 'a' and 'b'"]


@pytest.mark.parametrize("path", PAGES)
def test_figure_texts_neither_clip_nor_overlap(server, browser, path):
    """Titles cut at the right edge, labels drawn over each other, sliders over axis titles: all fail here."""
    page, _ = open_page(browser, f"{server}/{path}")
    page.wait_for_function("() => Array.from(document.querySelectorAll('div.mic-plotly'))"
                           ".every(d => d.querySelector('svg.main-svg'))", timeout=60_000)
    page.wait_for_timeout(500)
    figures = page.evaluate(FIGURE_TEXTS_JS)
    bad = {f["id"]: problems for f in figures if (problems := text_problems(f))}
    assert not bad, f"{path}: figure text clipped or overlapping: {bad}"
    page.close()


def test_no_widget_state_or_widget_views_on_static_pages():
    """A progress bar or control built during the book build would embed widget state and CDN loaders."""
    for rel in PAGES:
        html = (SITE / rel).read_text(encoding="utf-8")
        for marker in ("application/vnd.jupyter.widget-state+json", "application/vnd.jupyter.widget-view+json",
                       "require.min.js", "embed-amd.js"):
            assert marker not in html, f"{rel} carries {marker}"


@pytest.mark.parametrize("path", PAGES)
def test_sliders_change_the_figure(server, browser, path):
    page, problems = open_page(browser, f"{server}/{path}")
    page.wait_for_function("() => document.querySelectorAll('div.mic-plotly svg.main-svg').length > 0",
                           timeout=60_000)
    ids = page.evaluate("""() => Array.from(document.querySelectorAll('div.mic-plotly'))
        .filter(d => d.querySelector('.slider-container')).map(d => d.id)""")
    if not ids:
        pytest.skip(f"{path} has no slider figures")
    for fig_id in ids:
        state = f"""() => {{ const gd = document.getElementById('{fig_id}');
            return JSON.stringify([gd.data.map(t => [t.visible, t.x, t.y, t.z]),
                                   gd.layout.title && gd.layout.title.text]); }}"""
        before = page.evaluate(state)
        rail = page.locator(f"#{fig_id} .slider-container .slider-rail-rect")
        rail.scroll_into_view_if_needed()
        box = rail.bounding_box()
        # click the far end of the rail, then the start: at least one of them moves the slider
        page.mouse.click(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2)
        page.wait_for_timeout(300)
        after = page.evaluate(state)
        if after == before:
            page.mouse.click(box["x"] + 2, box["y"] + box["height"] / 2)
            page.wait_for_timeout(300)
            after = page.evaluate(state)
        assert after != before, f"moving the slider of {fig_id} on {path} changed nothing"
    assert not problems, problems
    page.close()
