"""The editions' sites (Hindi, Urdu) in a real headless Chromium: what test_book_browser checks on every chapter page
of every site (figures drawn and aligned, no clipped or overlapping text), and what only an edition needs: its pages
declare their language, the font the site serves for its script is loaded and used (by the body, the headings and
the figures' SVG text), every page links its English twin, a word typed in its script in the search box finds its
pages, and no request leaves the machine. The Urdu site also runs right to left: its prose does, code, outputs and
figures do not, the navigation sits on the right, and no two lines of a paragraph overlap.
"""
import re
from urllib.parse import quote, urljoin

import pytest

import test_book_browser as book
from helpers.infra.messages import FIGURE_FONTS, SCRIPT_FONTS

# edition: a word of its prose that search must find in notebook 3 (each with a combining mark or a letter
# Sphinx's default splitter cuts at), and the text after it in the query, which a splitter must separate
WORDS = {"hi": ("हिसाब", "लगाने।"), "ur": ("حساب", "لگانے۔")}
EDITIONS = [e for e in WORDS if (book.SITE / e / "index.html").exists()]
PAGES = {e: sorted(p.relative_to(book.SITE).as_posix() for p in [*(book.SITE / e).glob("*.html"),
                                                                  *(book.SITE / e).glob("notebooks/*.html")]
                   if p.name not in ("genindex.html", "search.html", "index.html")) for e in EDITIONS}  # index: a redirect
needs_sites = pytest.mark.skipif(not EDITIONS, reason="build the book first: make book")
RTL = [e for e in EDITIONS if e == "ur"]


@pytest.fixture(scope="module")
def server():
    with book.serve(book.SITE) as url:
        yield url


def test_every_edition_site_was_built():
    if book.SITE.exists():
        assert EDITIONS == list(WORDS), f"built: {EDITIONS}; make book builds {list(WORDS)}"


@needs_sites
@pytest.mark.parametrize("edition", EDITIONS)
def test_every_page_declares_its_language_and_links_its_english_twin(server, browser, edition):
    assert f"{edition}/notebooks/10-memory-budget.html" in PAGES[edition] and f"{edition}/references.html" in PAGES[edition]
    for path in PAGES[edition]:
        page, problems = book.open_page(browser, f"{server}/{path}")
        assert page.evaluate("document.documentElement.lang") == edition, path
        assert page.evaluate("document.documentElement.dir") == ("rtl" if edition in RTL else ""), path
        href = page.get_attribute('nav.mic-editions a[hreflang="en"]', "href")
        twin = urljoin(f"{server}/{path}", href).removeprefix(f"{server}/")
        assert twin == path.removeprefix(f"{edition}/"), (path, href)
        assert (book.SITE / twin).exists(), twin
        assert not problems, (path, problems)
        page.close()


@needs_sites
@pytest.mark.parametrize("edition", EDITIONS)
def test_english_pages_link_their_edition_twins(server, browser, edition):
    page, _ = book.open_page(browser, f"{server}/notebooks/03-cache-size.html")
    href = page.get_attribute(f'nav.mic-editions a[hreflang="{edition}"]', "href")
    assert urljoin(f"{server}/notebooks/03-cache-size.html", href) == f"{server}/{edition}/notebooks/03-cache-size.html"
    # the switch names the edition in its own script, in the font this (English) site serves too
    assert used_fonts(page, f'nav.mic-editions a[hreflang="{edition}"]') == {SCRIPT_FONTS[edition]}
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


@needs_sites
@pytest.mark.parametrize("edition", EDITIONS)
def test_the_served_fonts_are_loaded_and_used(server, browser, edition):
    page, problems = book.open_page(browser, f"{server}/{edition}/notebooks/03-cache-size.html")
    page.wait_for_function("() => document.querySelectorAll('div.mic-plotly svg.main-svg').length > 0", timeout=30000)
    for family in {SCRIPT_FONTS[edition], FIGURE_FONTS[edition]}:
        states = page.evaluate("""(family) => document.fonts.ready.then(() => Array.from(document.fonts)
            .filter(f => f.family.replace(/"/g, '') === family).map(f => f.status))""", family)
        assert "loaded" in states, (family, states)
    page.wait_for_timeout(300)
    # the script in the body, a heading and a figure's title is drawn with the served font, not a system one
    for selector, family in (("article p", SCRIPT_FONTS), ("article h1", SCRIPT_FONTS),
                             ("div.mic-plotly svg text.gtitle", FIGURE_FONTS)):
        assert family[edition] in used_fonts(page, selector), selector
    assert not problems, problems
    page.close()


# Every call of Plotly.newPlot, with whether the edition's figure font was loaded at that moment for its script.
RECORD_DRAWS_JS = """([family, sample]) => {
  window.__micDraws = [];
  let plotly;
  Object.defineProperty(window, "Plotly", {configurable: true, get: () => plotly, set: p => {
    const newPlot = p.newPlot;
    p.newPlot = function() {
      window.__micDraws.push(document.fonts.check(`16px "${family}"`, sample));
      return newPlot.apply(this, arguments);
    };
    plotly = p;
  }});
}"""


@needs_sites
@pytest.mark.parametrize("edition", EDITIONS)
def test_figures_are_drawn_once_their_font_is_loaded(server, browser, edition):
    """plotly.js measures a figure's text once, when it draws: drawn while the font is still on its way, a dropdown
    is sized for a fallback font and its arrow then covers the label (seen in CI). Here the font arrives a second
    after plotly.js: every figure waits for it."""
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    page.add_init_script(f"({RECORD_DRAWS_JS})({[FIGURE_FONTS[edition], WORDS[edition][0]]!r})")
    held = []
    page.route("**/_static/fonts/*", lambda route: held.append(route))
    page.goto(f"{server}/{edition}/notebooks/03-cache-size.html", wait_until="domcontentloaded")
    n = page.locator("div.mic-plotly").count()
    page.wait_for_function("() => window.Plotly !== undefined", timeout=60_000)
    page.wait_for_timeout(1000)
    assert held, "the page never asked for its font"
    for route in held:
        route.continue_()
    page.wait_for_function(f"() => window.__micDraws.length >= {n}", timeout=60_000)
    assert page.evaluate("window.__micDraws") == [True] * n
    page.close()


@needs_sites
@pytest.mark.parametrize("edition", EDITIONS)
def test_no_request_leaves_the_machine(server, browser, edition):
    font = SCRIPT_FONTS[edition].replace(" ", "-").lower()
    for path in ("index.html", "notebooks/02-prefill-decode.html", "search.html?q=cache"):
        page = browser.new_page()
        asked = []
        page.on("request", lambda r: asked.append(r.url))
        page.goto(f"{server}/{edition}/{path}", wait_until="networkidle")
        away = [u for u in asked if not u.startswith((server, "data:", "blob:"))]
        assert not away, (path, away)
        assert any(f"_static/fonts/{font}" in u for u in asked), f"{path} never asked for its own font"
        page.close()


@needs_sites
@pytest.mark.parametrize("edition", EDITIONS)
def test_a_word_in_the_editions_script_finds_its_pages(server, browser, edition):
    word, then = WORDS[edition]                      # "calculation": notebook 3's cache calculator
    page, problems = book.open_page(browser, f"{server}/{edition}/search.html?q={quote(word)}")
    # the search box's splitter keeps combining marks in the word, as the index does (Sphinx's default cuts at them)
    assert page.evaluate("(q) => splitQuery(q)", f"{word} {then}") == [word, then[:-1]]
    page.wait_for_function("() => Search._index !== null")
    assert page.evaluate("(w) => w in Search._index.terms", word)
    page.wait_for_selector("#search-results ul.search li", timeout=30000)
    hits = page.eval_on_selector_all("#search-results ul.search li a", "els => els.map(e => e.href)")
    assert any("03-cache-size" in h for h in hits), hits
    assert not problems, problems
    page.close()


# A term of the glossary in its three spellings ("times": गुना, گنا), each with a combining mark or a letter Sphinx's
# default splitter cuts at in Devanagari.
TERM = {"en": "times", "hi": "गुना", "ur": "گنا"}


@needs_sites
@pytest.mark.parametrize("site", ["en", *EDITIONS])
@pytest.mark.parametrize("spelling", list(TERM))
def test_a_term_is_found_on_the_glossary_page_by_any_of_its_spellings(server, browser, site, spelling):
    """Each site's glossary page writes every term in English, Hindi and Urdu (mic_tools.glossary, issue 41)."""
    root = "" if site == "en" else f"{site}/"
    page, problems = book.open_page(browser, f"{server}/{root}search.html?q={quote(TERM[spelling])}")
    page.wait_for_selector("#search-results p.search-summary", timeout=30000)      # every hit listed
    hits = page.eval_on_selector_all("#search-results ul.search li a", "els => els.map(e => e.href)")
    assert any(h.startswith(f"{server}/{root}glossary.html") for h in hits), hits
    assert not problems, problems
    page.close()


SCRIPT = {"hi": r"[\u0900-\u097F]", "ur": r"[\u0600-\u06FF]"}


@needs_sites
@pytest.mark.parametrize("edition", EDITIONS)
def test_what_the_sites_scripts_write_is_in_the_editions_language(server, browser, edition):
    """Sphinx's search page and sphinx-copybutton write their sentences from JavaScript tables that lack Urdu (and
    misspell Hindi): the site's own catalog (theme.po) fills them in."""
    page, problems = book.open_page(browser, f"{server}/{edition}/search.html?q={quote(WORDS[edition][0])}")
    page.wait_for_selector("#search-results p.search-summary", timeout=30000)
    page.wait_for_load_state("networkidle")      # the search still fetches its hits' pages for their excerpts
    for selector in ("#search-results h2", "#search-results p.search-summary"):
        text = page.inner_text(selector)
        assert re.search(SCRIPT[edition], text) and "Search" not in text, (selector, text)
    assert not problems, problems
    page.close()
    page, problems = book.open_page(browser, f"{server}/{edition}/notebooks/03-cache-size.html")
    tip = page.get_attribute("button.copybtn", "data-tooltip")
    assert tip and re.search(SCRIPT[edition], tip), tip
    assert not problems, problems
    page.close()


# ------------------------------------------------------------------ right to left (Urdu)

DIRECTIONS_JS = """() => {
  const dirs = sel => Array.from(document.querySelectorAll(sel)).map(e => getComputedStyle(e).direction);
  const box = sel => { const e = document.querySelector(sel); if (!e) return null;
                       const r = e.getBoundingClientRect(); return [r.left, r.right]; };
  return {body: dirs('body'), prose: dirs('article p'), headings: dirs('article h1, article h2'),
          code: dirs('.cell_input pre'), outputs: dirs('.cell_output'), figures: dirs('div.mic-plotly'),
          math: dirs('.math, mjx-container'), nav: box('.bd-sidebar-primary'), toc: box('.bd-sidebar-secondary'),
          article: box('article.bd-article'), width: innerWidth};
}"""

# The lines of each paragraph, heading and navigation entry, as the browser laid them out: the boxes of its text (a Range over each text node
# gives one box per line it spans, as tall as its font's ascent and descent), grouped into lines by their middles
# (a quarter of the line height apart at least); returns each line's [top, bottom].
LINES_JS = """() => Array.from(document.querySelectorAll('article :is(p, h1, h2, h3), nav.bd-links li')).slice(0, 80).map(p => {
  const style = getComputedStyle(p);
  const spacing = parseFloat(style.lineHeight) || 1.2 * parseFloat(style.fontSize);
  const rects = [];
  const walker = document.createTreeWalker(p, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (!n.textContent.trim() || n.parentElement.closest('code, mjx-container, .math')) continue;
    const r = document.createRange(); r.selectNodeContents(n);
    for (const b of r.getClientRects()) if (b.width > 0) rects.push([b.top, b.bottom]);
  }
  const lines = [];
  for (const [t, b] of rects.sort((x, y) => (x[0] + x[1]) - (y[0] + y[1]))) {
    const last = lines[lines.length - 1];
    if (last && (t + b) / 2 - last[2] < spacing / 4) { last[0] = Math.min(last[0], t); last[1] = Math.max(last[1], b); }
    else lines.push([t, b, (t + b) / 2]);
  }
  return lines.map(l => l.slice(0, 2));
})"""


@needs_sites
@pytest.mark.parametrize("edition", RTL)
@pytest.mark.parametrize("name", ["intro.html", "notebooks/03-cache-size.html", "notebooks/08-speculative-decoding.html"])
def test_prose_runs_right_to_left_and_code_left_to_right(server, browser, edition, name):
    page, problems = book.open_page(browser, f"{server}/{edition}/{name}")
    seen = page.evaluate(DIRECTIONS_JS)
    assert set(seen["body"] + seen["prose"] + seen["headings"]) == {"rtl"}, seen
    assert set(seen["code"] + seen["outputs"] + seen["figures"] + seen["math"]) <= {"ltr"}, seen
    if name.startswith("notebooks/"):
        assert seen["code"] and seen["outputs"] and seen["figures"], seen
    # the layout mirrors: the chapter's navigation on the right, "on this page" on the left of the text
    assert seen["nav"][0] > seen["article"][0] and seen["nav"][1] > seen["width"] * 0.7, seen
    if seen["toc"] and seen["toc"][1] > seen["toc"][0]:
        assert seen["toc"][1] <= seen["article"][0] + 1, seen
    assert not problems, problems
    page.close()


@needs_sites
@pytest.mark.parametrize("edition", RTL)
def test_nastaliq_is_used_and_no_two_lines_overlap(server, browser, edition):
    for path in PAGES[edition]:
        page, _ = book.open_page(browser, f"{server}/{path}")
        page.evaluate("document.fonts.ready")
        if path.endswith("03-cache-size.html"):
            assert SCRIPT_FONTS[edition] in used_fonts(page, "article section > p")
        for i, lines in enumerate(page.evaluate(LINES_JS)):
            overlaps = [(a, b) for a, b in zip(lines, lines[1:]) if b[0] < a[1] - 1]
            assert not overlaps, f"{path}, paragraph {i}: lines overlap {overlaps[:2]}"
        page.close()


def test_the_line_check_sees_lines_that_overlap(browser):
    page = browser.new_page()
    page.set_content('<article><p style="width:200px;line-height:0.4">' + "word " * 60 + "</p>"
                     '<p style="width:200px">' + "word " * 60 + "</p></article>")
    first, second = page.evaluate(LINES_JS)
    assert any(b[0] < a[1] - 1 for a, b in zip(first, first[1:]))
    assert len(second) > 3 and not any(b[0] < a[1] - 1 for a, b in zip(second, second[1:]))
    page.close()
