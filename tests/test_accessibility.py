"""axe-core on every page of the three built sites (English, Hindi, Urdu): no critical or serious violation (issue 41).

Needs the sites (`make book` builds them) and Debian's chromium. One browser opens every page in turn
(mic_tools.accessibility); a failure prints every rule broken, with its pages, elements per edition and a few
elements. `python -m mic_tools.accessibility` prints the same report, moderate and minor findings included.
"""
import os
import re
import sys
from pathlib import Path

import pytest

from mic_tools import accessibility

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "_ext"))
from mic_accessibility import citations_as_list_items  # noqa: E402
from mic_editions import SCRIPT_RUNS, mark_languages  # noqa: E402

# MIC_BOOK_SITE audits a site built (or copied) elsewhere, as in tests/test_book_browser.py
SITE = Path(os.environ.get("MIC_BOOK_SITE") or accessibility.SITE)
BLOCKING = ("critical", "serious")


SCRIPT = {"hi": re.compile(r"[\u0900-\u097F]"), "ur": re.compile(r"[\u0600-\u06FF]")}


@pytest.fixture(scope="module")
def audited(browser):
    """The audit of every page of the three sites, with what each page's figures are called (DOM, accessibility tree)."""
    if not (SITE / "intro.html").exists():
        pytest.skip("build the book first: make book")
    figures = {}
    return accessibility.audit(browser, SITE, figures), figures


def test_no_page_of_any_edition_has_a_critical_or_serious_violation(audited):
    found, _ = audited
    editions = {accessibility.edition(path) for path in found}
    assert editions == {"en", "hi", "ur"}, f"the audit saw the editions {sorted(editions)} only"
    print(f"{len(found)} pages audited\n{accessibility.summary(found)}")     # pytest shows it when the test fails
    table = accessibility.counts(found)
    blocking = {impact: dict(table[impact]) for impact in BLOCKING if table[impact]}
    assert not blocking, (f"axe-core finds {blocking} on the built sites:\n"
                          + accessibility.summary(found, impacts=BLOCKING))


def test_citations_are_items_of_their_list():
    body = '<div role="list" class="citation-list">\n<div class="citation" id="id4" role="doc-biblioentry">'
    assert citations_as_list_items(body) == body.replace("doc-biblioentry", "listitem")


def test_the_summary_names_each_rule_with_its_elements_per_edition():
    hit = {"id": "region", "impact": "moderate", "help": "All page content should be contained by landmarks",
           "nodes": [{"html": "<div>"}, {"html": "<p>"}]}
    found = {"intro.html": [hit], "ur/intro.html": [hit], "hi/search.html": []}
    text = accessibility.summary(found)
    assert "region: All page content should be contained by landmarks — 4 elements on 2 pages (en: 2, ur: 2)" in text
    assert accessibility.counts(found)["moderate"] == {"region": 4}
    assert accessibility.summary(found, impacts=("critical", "serious")) == "no violations"


def test_every_figure_of_every_edition_is_heard_by_its_text_alternative_and_nothing_plotly_drew(audited):
    """Read from Chromium's accessibility tree: each figure is one figure named by its text alternative; inside it a
    screen reader meets only the toolbar's named buttons, nothing plotly.js drew; every text alternative goes past
    the title and the kind of chart (a heatmap without a colour bar: title, kind, takeaway; at least three
    sentences); an edition's figures are said in its script, as many as on the English twin."""
    _, figures = audited
    assert sum(len(heard) for path, heard in figures.items() if accessibility.edition(path) == "en") >= 40
    ends = re.compile(r"[.\u0964\u06d4](\s|$)")
    for path, heard in figures.items():
        wrong = [h[:3] for h in heard if h[1:3] != ("figure", h[0])]
        assert not wrong, f"{path}: figures a screen reader does not hear by their text alternative: {wrong[:2]}"
        drawn = [pair for *_, inside in heard for pair in inside
                 if pair[0] not in accessibility.TOOLBAR_ROLES or (pair[0] == "button" and not pair[1])]
        assert not drawn, f"{path}: a screen reader hears what plotly drew inside a figure: {drawn[:5]}"
        short = [label for label, *_ in heard if len(ends.findall(label)) < 3]
        assert not short, f"{path}: figures without their whole text alternative: {short[:2]}"
        ed = accessibility.edition(path)
        if ed != "en":
            twin = path.split("/", 1)[1]
            assert len(heard) == len(figures.get(twin, [])), f"{path}: not as many figures as {twin}"
            assert all(SCRIPT[ed].search(label) for label, *_ in heard), f"{path}: a figure not said in {ed}"


def test_another_editions_script_is_marked_with_its_language_outside_tags_and_scripts():
    body = ('<p>English: right · हिंदी: सही · اردو: درست ہے</p><script>var s = "درست"; if (a < b) {}</script>'
            '<a lang="ur" href="ur/">اردو</a>')
    assert mark_languages(body, "en") == (
        '<p>English: right · <span lang="hi">हिंदी</span>: <span lang="hi">सही</span> · <span lang="ur">اردو</span>: '
        '<span lang="ur">درست ہے</span></p><script>var s = "درست"; if (a < b) {}</script><a lang="ur" href="ur/">اردو</a>')
    assert mark_languages(body, "ur").count('lang="ur"') == 1 and mark_languages(body, "hi").count('lang="hi"') == 0


@pytest.mark.skipif(not (SITE / "glossary.html").exists(), reason="build the book first: make book")
@pytest.mark.parametrize("edition", ["en", "hi", "ur"])
def test_on_each_glossary_page_every_run_of_another_script_says_its_language(edition):
    """The glossary page writes every term in all three scripts: on each site, each run of another edition's script
    is in an element of that language (lang decides how Nastaliq shapes Urdu), read from the built page."""
    from bs4 import BeautifulSoup
    page = SITE / ("glossary.html" if edition == "en" else f"{edition}/glossary.html")
    soup = BeautifulSoup(page.read_text(encoding="utf8"), "html.parser")
    runs = 0
    for text in soup.find_all(string=True):
        if text.parent.name in ("script", "style", "title"):
            continue
        for code, pattern in SCRIPT_RUNS.items():
            if code != edition and pattern.search(text):
                runs += 1
                holder = text.find_parent(attrs={"lang": True})
                assert holder is not None and holder["lang"] == code, f"{code} run {text!r} in {holder and holder.name}"
    assert runs >= 100, f"only {runs} runs of another script on {page}"         # 58 terms in three scripts
