"""The PDF of each edition (make pdf, mic_tools.pdf): every section and figure of the site, in the edition's script
and fonts, nothing printed outside the page's printable area.

Needs the built sites (make book) and Debian's chromium. The PDFs are printed once per session, by the fixture below,
unless book/_build/pdf already holds ones printed, with solutions, after the site was built.

The text layer is read with poppler's pdftotext (Debian's poppler-utils: scripts/install-system-deps), which puts
right-to-left lines back in reading order; the outline and every character's box with pypdfium2 (a whole PDF in a
few seconds); the fonts with pypdf. Spaces are ignored everywhere: a PDF has no spaces, only gaps a reader guesses.
An English or Hindi sentence must be in its section's text whole. Nastaliq's words climb and overlap, and
where an Urdu line mixes scripts a reader can put its runs in another order, move a letter, or cut a word at the end
of a line: an Urdu sentence (a title, a figure's title) must be there word by word, three words in four, and nine in
ten over the whole sample (on these PDFs 96 % of the sampled words are).
"""
import json
import os
import re
import shutil
import subprocess
import unicodedata
from functools import lru_cache
from pathlib import Path

import pytest

from mic_tools import pdf

SITE = pdf.SITE
OUT = pdf.OUT
EDITIONS = list(pdf.EDITIONS)
PT_PER_MM = 72 / 25.4
SCRIPTS = {"hi": re.compile(r"[\u0900-\u097F]"), "ur": re.compile(r"[\u0600-\u06FF]")}
FONTS = {"hi": "NotoSansDevanagari-Regular", "ur": "NotoNastaliqUrdu-Regular"}
PUNCTUATION = re.compile(r"^[^\w\u0610-\u061A\u064B-\u065F\u0670]+|[^\w\u0610-\u061A\u064B-\u065F\u0670]+$")
BIDI_AND_SPACE = re.compile(r"[\s\u200b-\u200f\u202a-\u202e\u2066-\u2069\u00ad-]+")

needs_sites = pytest.mark.skipif(not all((pdf.edition_site(SITE, ed) / "index.html").exists() for ed in EDITIONS),
                                 reason="build the sites first: make book")


def normal(text: str) -> str:
    """Text as compared here: compatibility forms folded (ligatures: "ﬁ" is "fi"), no spaces, no direction marks, no
    hyphens (pdftotext joins "speed-" and "up" where a line breaks at its hyphen)."""
    return BIDI_AND_SPACE.sub("", unicodedata.normalize("NFKC", text))


def site_newest(edition: str) -> float:
    return max(p.stat().st_mtime for p in pdf.edition_site(SITE, edition).glob("**/*.html")
               if edition != "en" or p.relative_to(SITE).parts[0] not in pdf.EDITIONS)


def fresh(edition: str) -> bool:
    """A PDF printed with the solutions after its site was last built."""
    path, record = OUT / pdf.pdf_name(edition), OUT / "built.json"
    built = json.loads(record.read_text()) if record.exists() else {}
    return (path.exists() and built.get(edition, {}).get("solutions") is True
            and path.stat().st_mtime > site_newest(edition))


@pytest.fixture(scope="module")
def pdfs():
    stale = [ed for ed in EDITIONS if not fresh(ed)]
    if stale:
        if not os.path.exists(pdf.CHROMIUM):
            pytest.fail("Debian's chromium is missing: run scripts/install-system-deps (apt-get install chromium).")
        pdf.build(stale)
    return {ed: OUT / pdf.pdf_name(ed) for ed in EDITIONS}


# ---- the site: what each section shows


def site_pages(edition: str):
    from bs4 import BeautifulSoup

    root = pdf.edition_site(SITE, edition)
    for name in pdf.page_names():
        html = (root / f"{name}.html").read_text(encoding="utf8")
        html = re.sub(r"<pre>.*?</pre>", "<pre></pre>", html, flags=re.S)    # the code, not needed here: 10x faster
        soup = BeautifulSoup(html, "html.parser")
        yield name, soup.select_one("article.bd-article")


def heading(article) -> str:
    h1 = article.select_one("h1")
    for link in h1.select("a.headerlink"):
        link.decompose()
    return h1.get_text()


def figure_titles(article) -> list[str]:
    """The title of every plotly figure of a page, as its loader's spec gives it, a line of it a line here."""
    titles = []
    for div in article.select("div.mic-plotly"):
        script = div.find_next("script").string
        spec = json.loads(re.search(r"var spec = (\{.*?\});\n", script).group(1))
        title = spec["layout"].get("title") or {}
        text = title.get("text", "") if isinstance(title, dict) else title
        titles.append(re.sub(r"<[^>]+>", " ", re.sub(r"<br\s*/?>", "\n", text)))
    return titles


def sample_sentences(article, per_page: int = 3) -> list[str]:
    """The first sentence of the first few paragraphs of prose (no maths, no code output) of a page."""
    found = []
    for p in article.select("p"):
        if p.find_parent(class_=re.compile("cell_output|admonition-title")) or p.select(".math, code"):
            continue
        text = p.get_text(" ", strip=True)
        if len(text) >= 60:
            found.append(re.split(r"(?<=[.!?।۔])\s", text)[0])
        if len(found) == per_page:
            break
    return found


@lru_cache(maxsize=None)
def site_summary(edition: str):
    """Per section, in order: its title, its figures' titles and a few of its sentences."""
    summary = []
    for name, article in site_pages(edition):
        summary.append({"name": name, "title": heading(article), "figures": figure_titles(article),
                        "sentences": sample_sentences(article)})
    return summary


# ---- the PDF: its text, page by page, its outline, its fonts


@lru_cache(maxsize=None)
def page_texts(path: Path) -> tuple[str, ...]:
    if shutil.which("pdftotext") is None:
        pytest.fail("poppler's pdftotext is missing: run scripts/install-system-deps (apt-get install poppler-utils).")
    out = subprocess.run(["pdftotext", "-enc", "UTF-8", str(path), "-"], capture_output=True, text=True, check=True)
    return tuple(out.stdout.split("\f"))


@lru_cache(maxsize=None)
def section_starts(path: Path) -> tuple[tuple[str, int], ...]:
    """(title, first page, from 0) of each top-level entry of the PDF's outline."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(str(path))
    starts = tuple((mark.get_title(), mark.get_dest().get_index()) for mark in doc.get_toc() if mark.level == 0)
    doc.close()
    return starts


@lru_cache(maxsize=None)
def section_texts(path: Path) -> tuple[str, ...]:
    """The normalised text of each section: its pages, from its outline entry to the next one's."""
    texts = page_texts(path)
    starts = [page for _, page in section_starts(path)] + [len(texts)]
    return tuple(normal("".join(texts[a:b])) for a, b in zip(starts, starts[1:]))


def words_found(text: str, where: str) -> float:
    """The share of ``text``'s words (the punctuation around them aside: bidi moves it) found in ``where``."""
    words = [w for w in (PUNCTUATION.sub("", normal(w)) for w in text.split()) if w]
    return sum(w in where for w in words) / max(len(words), 1)


def holds(edition: str, text: str, where: str, share: float = 1.0) -> bool:
    """Whether ``where`` (normalised) holds ``text``: whole, or in Urdu ``share`` of its words."""
    return normal(text) in where if edition != "ur" else words_found(text, where) >= share


# ---- the checks


@needs_sites
@pytest.mark.parametrize("edition", EDITIONS)
def test_every_section_title_is_there_in_order(pdfs, edition):
    expected = [s["title"] for s in site_summary(edition)]
    outline = section_starts(pdfs[edition])
    assert len(outline) == len(expected), f"{edition}: outline {[t for t, _ in outline]}, site {expected}"
    pages = [page for _, page in outline]
    assert pages == sorted(pages) and len(set(pages)) == len(pages), f"{edition}: sections out of order: {outline}"
    texts = section_texts(pdfs[edition])
    for title, (entry, _), text in zip(expected, outline, texts):
        assert holds(edition, title, normal(entry)), f"{edition}: outline says {entry!r} where the site has {title!r}"
        assert holds(edition, title, text[:4000], 0.75), f"{edition}: the title {title!r} is not on its first page"


@needs_sites
@pytest.mark.parametrize("edition", EDITIONS)
def test_text_layer_is_the_sites_words_in_the_editions_script(pdfs, edition):
    texts = page_texts(pdfs[edition])
    letters = sum(ch.isalpha() for t in texts for ch in t)
    if edition in SCRIPTS:
        share = sum(len(SCRIPTS[edition].findall(t)) for t in texts) / letters
        assert share > 0.2, f"{edition}: only {share:.0%} of the letters are in the edition's script"
    sections = section_texts(pdfs[edition])
    missing, shares = [], []
    for section, text in zip(site_summary(edition), sections):
        for sentence in section["sentences"]:
            shares.append(words_found(sentence, text))
            if not holds(edition, sentence, text, 0.75):
                missing.append(f"{section['name']}: {sentence}")
    assert len(shares) >= 20, f"{edition}: only {len(shares)} sentences sampled"
    assert not missing, f"{edition}: {len(missing)} of {len(shares)} sentences not found, e.g. {missing[:3]}"
    mean = sum(shares) / len(shares)
    assert edition != "ur" or mean > 0.9, f"{edition}: {mean:.0%} of the sampled words found"


@needs_sites
@pytest.mark.parametrize("edition", ["hi", "ur"])
def test_the_editions_regular_face_is_embedded(pdfs, edition):
    import pypdf

    names = set()
    for page in pypdf.PdfReader(pdfs[edition]).pages:
        for font in (page.get("/Resources", {}).get("/Font") or {}).values():
            names.add(str(font.get_object().get("/BaseFont", "")).split("+")[-1])
    assert FONTS[edition] in names, f"{edition}: fonts {sorted(names)}"


@needs_sites
@pytest.mark.parametrize("edition", EDITIONS)
def test_every_figure_of_the_site_is_printed(pdfs, edition):
    sections = section_texts(pdfs[edition])
    for section, text in zip(site_summary(edition), sections):
        shown = [title for title in section["figures"]
                 if all(holds(edition, line, text, 0.75) for line in title.splitlines() if line.strip())]
        assert shown == section["figures"], (
            f"{edition} {section['name']}: {len(section['figures'])} figures on the site, "
            f"{len(shown)} in the PDF; missing {[t for t in section['figures'] if t not in shown]}")
    assert sum(len(s["figures"]) for s in site_summary(edition)) > 0


def outside(page_size, boxes, margin_mm=pdf.MARGIN_MM, slack=1.0):
    """The characters whose box leaves the printable area: the page inside its margins, ``slack`` points of ink
    allowed. The page number is the footer's, in the bottom margin. A box bigger than the page is no glyph's: MathJax
    draws a stretched delimiter with a transform pdfium reports as such a box, and those are left out."""
    width, height = page_size
    left, right = margin_mm["left"] * PT_PER_MM - slack, width - margin_mm["right"] * PT_PER_MM + slack
    bottom, top = margin_mm["bottom"] * PT_PER_MM - slack, height - margin_mm["top"] * PT_PER_MM + slack
    footer = 12 * PT_PER_MM
    found = []
    for ch, (l, b, r, t) in boxes:
        if not ch.strip() or r - l > width or t - b > height:
            continue
        if t <= footer and ch in "0123456789/":
            continue
        if l < left or r > right or b < bottom or t > top:
            found.append((ch, round(l), round(b), round(r), round(t)))
    return found


def test_outside_finds_a_character_in_the_margin():
    size = (595, 842)
    boxes = [("a", (100, 400, 106, 410)), ("b", (560, 400, 566, 410)), ("1", (290, 20, 295, 28)),
             ("c", (100, 30, 106, 53)), ("\u2225", (329, -174, 333, 4727))]
    assert outside(size, boxes) == [("b", 560, 400, 566, 410), ("c", 100, 30, 106, 53)]


@needs_sites
@pytest.mark.parametrize("edition", EDITIONS)
def test_no_character_leaves_the_printable_area(pdfs, edition):
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(str(pdfs[edition]))
    bad = {}
    for i in range(len(doc)):
        page = doc[i]
        text = page.get_textpage()
        # First each run of text's box, which holds its characters' boxes (a run in the footer's band taken for the
        # page number), then, on a page where one leaves the area, every character's.
        runs = [("0", text.get_rect(k)) for k in range(text.count_rects())]
        if not outside(page.get_size(), runs):
            continue
        boxes = [(text.get_text_range(k, 1), text.get_charbox(k)) for k in range(text.count_chars())]
        if found := outside(page.get_size(), boxes):
            bad[i + 1] = found[:5]
    doc.close()
    assert not bad, f"{edition}: characters outside the printable area on pages {bad}"


PAGE = """<html><body><article class="bd-article"><nav class="mic-editions">English</nav>
<section id="intro"><h1>One<a class="headerlink" href="#intro">#</a></h1>
<p>See <a href="../references.html#id3">[1]</a>, <a href="02-next.html">the next section</a> and
<a href="#intro">the top</a>; <img src="../_images/a.png"/>.</p>
<div class="exercise admonition" id="ex-1"><p>Try it.</p></div>
<div class="solution dropdown admonition" id="sol-1"><p>The answer.</p></div>
<div class="cell tag_solution docutils container"><pre>answer = 42</pre></div>
<div id="mic-0123456789ab" class="mic-plotly"></div></section></article></body></html>"""


def test_a_page_is_joined_with_its_anchors_and_links_kept_and_its_solutions_removed_on_request():
    pages = {"notebooks/01-one", "notebooks/02-next", "references"}
    kept = str(pdf.article(PAGE, "notebooks/01-one", pages, solutions=True))
    assert 'id="notebooks-01-one"' in kept and 'id="notebooks-01-one--intro"' in kept
    assert 'href="#references--id3"' in kept and 'href="#notebooks-02-next"' in kept
    assert 'href="#notebooks-01-one--intro"' in kept and 'src="_images/a.png"' in kept
    assert 'id="mic-0123456789ab"' in kept, "a figure's loader finds it by its id"
    assert "mic-editions" not in kept and "headerlink" not in kept
    assert "The answer." in kept and "answer = 42" in kept
    left = str(pdf.article(PAGE, "notebooks/01-one", pages, solutions=False))
    assert "Try it." in left and "The answer." not in left and "answer = 42" not in left
