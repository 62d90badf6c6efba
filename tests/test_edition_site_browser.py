"""The Hindi site in a real headless Chromium: what test_book_browser checks on every chapter page of both sites
(figures drawn and aligned, no clipped or overlapping text), and what only an edition needs: its pages declare
lang="hi", the Devanagari font the site serves is loaded and used (by the body, the headings and the figures' SVG
text), every page links its English twin, a Devanagari word typed in the search box finds its pages, and no request
leaves the machine.
"""
from urllib.parse import quote, urljoin

import pytest

import test_book_browser as book

EDITION, FAMILY = "hi", "Noto Sans Devanagari"
HI = book.SITE / EDITION
HI_PAGES = sorted(p.relative_to(book.SITE).as_posix() for p in [*HI.glob("*.html"), *HI.glob("notebooks/*.html")]
                  if p.name not in ("genindex.html", "search.html", "index.html")) if HI.exists() else []   # index: a redirect
needs_hindi_site = pytest.mark.skipif(not (HI / "index.html").exists(), reason="build the book first: make book")


@pytest.fixture(scope="module")
def server():
    with book.serve(book.SITE) as url:
        yield url


@needs_hindi_site
def test_every_hindi_page_declares_hindi_and_links_its_english_twin(server, browser):
    assert "hi/notebooks/10-memory-budget.html" in HI_PAGES and "hi/references.html" in HI_PAGES
    for path in HI_PAGES:
        page, problems = book.open_page(browser, f"{server}/{path}")
        assert page.evaluate("document.documentElement.lang") == "hi", path
        href = page.get_attribute('nav.mic-editions a[hreflang="en"]', "href")
        twin = urljoin(f"{server}/{path}", href).removeprefix(f"{server}/")
        assert twin == path.removeprefix("hi/"), (path, href)
        assert (book.SITE / twin).exists(), twin
        assert not problems, (path, problems)
        page.close()


@needs_hindi_site
def test_english_pages_link_their_hindi_twins(server, browser):
    page, _ = book.open_page(browser, f"{server}/notebooks/03-cache-size.html")
    href = page.get_attribute('nav.mic-editions a[hreflang="hi"]', "href")
    assert urljoin(f"{server}/notebooks/03-cache-size.html", href) == f"{server}/hi/notebooks/03-cache-size.html"
    # the switch names Hindi in Devanagari, in the font this (English) site serves too
    assert used_fonts(page, 'nav.mic-editions a[hreflang="hi"]') == {FAMILY}
    page.close()


def used_fonts(page, selector: str) -> set[str]:
    """The web fonts (the site's @font-face, not the machine's) Chromium drew an element's text with (DevTools'
    "Rendered fonts")."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable"), cdp.send("CSS.enable")
    root = cdp.send("DOM.getDocument", {"depth": -1, "pierce": True})["root"]["nodeId"]
    node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
    assert node, f"nothing matches {selector}"
    fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    return {f["familyName"] for f in fonts if f["glyphCount"] > 0 and f["isCustomFont"]}


@needs_hindi_site
def test_the_served_devanagari_font_is_loaded_and_used(server, browser):
    page, problems = book.open_page(browser, f"{server}/hi/notebooks/03-cache-size.html")
    page.wait_for_function("() => document.querySelectorAll('div.mic-plotly svg.main-svg').length > 0", timeout=30000)
    states = page.evaluate("""(family) => document.fonts.ready.then(() => Array.from(document.fonts)
        .filter(f => f.family.replace(/"/g, '') === family).map(f => f.status))""", FAMILY)
    assert "loaded" in states, states
    page.wait_for_timeout(300)
    # Devanagari in the body, a heading and a figure's title are drawn with the served font, not a system one
    for selector in ("article p", "article h1", "div.mic-plotly svg text.gtitle"):
        assert FAMILY in used_fonts(page, selector), selector
    assert not problems, problems
    page.close()


# Every call of Plotly.newPlot, with whether the edition's font was loaded at that moment.
RECORD_DRAWS_JS = """(family) => {
  window.__micDraws = [];
  let plotly;
  Object.defineProperty(window, "Plotly", {configurable: true, get: () => plotly, set: p => {
    const newPlot = p.newPlot;
    p.newPlot = function() {
      window.__micDraws.push(document.fonts.check(`16px "${family}"`));
      return newPlot.apply(this, arguments);
    };
    plotly = p;
  }});
}"""


@needs_hindi_site
def test_figures_are_drawn_once_the_font_is_loaded(server, browser):
    """plotly.js measures a figure's text once, when it draws: drawn while the font is still on its way, a dropdown
    is sized for a fallback font and its arrow then covers the label (seen in CI). Here the font arrives a second
    after plotly.js: every figure waits for it."""
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    page.add_init_script(f"({RECORD_DRAWS_JS})({FAMILY!r})")
    held = []
    page.route("**/_static/fonts/*", lambda route: held.append(route))
    page.goto(f"{server}/hi/notebooks/03-cache-size.html", wait_until="domcontentloaded")
    n = page.locator("div.mic-plotly").count()
    page.wait_for_function("() => window.Plotly !== undefined", timeout=60_000)
    page.wait_for_timeout(1000)
    assert held, "the page never asked for its font"
    for route in held:
        route.continue_()
    page.wait_for_function(f"() => window.__micDraws.length >= {n}", timeout=60_000)
    assert page.evaluate("window.__micDraws") == [True] * n
    page.close()


@needs_hindi_site
def test_no_request_leaves_the_machine(server, browser):
    for path in ("hi/index.html", "hi/notebooks/02-prefill-decode.html", "hi/search.html?q=cache"):
        page = browser.new_page()
        asked = []
        page.on("request", lambda r: asked.append(r.url))
        page.goto(f"{server}/{path}", wait_until="networkidle")
        away = [u for u in asked if not u.startswith((server, "data:", "blob:"))]
        assert not away, (path, away)
        assert any(u.endswith("_static/fonts/hi.ttf") for u in asked), "the page never asked for its own font"
        page.close()


@needs_hindi_site
def test_a_devanagari_word_finds_its_pages(server, browser):
    word = "हिसाब"                                   # "calculation": notebook 3's cache calculator, ि inside
    page, problems = book.open_page(browser, f"{server}/hi/search.html?q={quote(word)}")
    # the search box's splitter keeps vowel signs in the word, as the index does (Sphinx's default cuts at them)
    assert page.evaluate("(q) => splitQuery(q)", f"{word} लगाने।") == [word, "लगाने"]
    page.wait_for_function("() => Search._index !== null")
    assert page.evaluate("(w) => w in Search._index.terms", word)
    page.wait_for_selector("#search-results ul.search li", timeout=30000)
    hits = page.eval_on_selector_all("#search-results ul.search li a", "els => els.map(e => e.href)")
    assert any("03-cache-size" in h for h in hits), hits
    assert not problems, problems
    page.close()
