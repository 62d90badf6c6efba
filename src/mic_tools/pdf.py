"""A PDF of each edition, for reading offline and printing (issue 41): ``make pdf``.

    python -m mic_tools.pdf [--no-solutions] [--site book/_build/html] [--out book/_build/pdf] [EDITION ...]

writes ``making-inference-cheap-<edition>.pdf`` (en, hi, ur) from the sites ``make book`` built, executing nothing.

The built pages are concatenated into one page per edition, in the table of contents' order, and Debian's Chromium
prints it. Concatenating the built pages, rather than a second Sphinx build (``singlehtml``), prints exactly what
the site shows: the same executed outputs, each edition's outputs said again in its language (which a new build
of an edition would redo), the same figures and the same stylesheets, fonts included, in seconds. Each page keeps
its own anchors, prefixed with its name, so links between sections work inside the PDF.

The page is served to the browser from the site's folder through Playwright's request routing (no server, no
network) at a made-up origin, so every stylesheet, font, plotly.js and MathJax load as they do on the site. The
figures are drawn by plotly.js at the printed width (the window is as wide as the page's printable area) and the
PDF is printed once every figure and formula is drawn. With ``--no-solutions`` (``make pdf SOLUTIONS=no``) every
solution, its prose and its code, is removed from the pages before printing.
"""
from __future__ import annotations

import argparse
import json
import mimetypes
import posixpath
import re
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import yaml
from bs4 import BeautifulSoup

from mic_tools.editions import FONT_FACES, font_faces

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "book" / "_build" / "html"
OUT = ROOT / "book" / "_build" / "pdf"
EDITIONS = ("en", "hi", "ur")
CHROMIUM = "/usr/bin/chromium"
ORIGIN = "http://making-inference-cheap.invalid"      # the made-up origin the site is served at (never looked up)
PRINT_PAGE = "_print.html"                            # the concatenated page's name, at the edition's root

# The paper: A4, with margins a printer keeps clear of, and the window as wide as the printable area (in CSS
# pixels, 96 to the inch) so plotly.js draws each figure at the width it is printed at.
PAPER = "A4"
MARGIN_MM = {"top": 16, "bottom": 18, "left": 15, "right": 15}
PAPER_WIDTH_MM = 210
PRINT_WIDTH_PX = int((PAPER_WIDTH_MM - MARGIN_MM["left"] - MARGIN_MM["right"]) / 25.4 * 96)
FOOTER = ('<div style="width:100%; font-size:8px; color:#666; text-align:center;">'
          '<span class="pageNumber"></span> / <span class="totalPages"></span></div>')


def pdf_name(edition: str) -> str:
    return f"making-inference-cheap-{edition}.pdf"


def page_names(book: Path = ROOT / "book") -> list[str]:
    """The site's pages in the order of the table of contents: ``intro``, ``notebooks/01-kv-cache``, ...."""
    toc = yaml.safe_load((book / "_toc.yml").read_text(encoding="utf8"))
    return [toc["root"], *(chapter["file"] for chapter in toc["chapters"])]


def edition_site(site: Path, edition: str) -> Path:
    """The folder of an edition's site: the English one is the root, each other edition's is its ``<code>/``."""
    return site if edition == "en" else site / edition


# What the printed book does not need from a page: the language switch, the "#" beside each heading, thebe's
# configuration, and, left out of the page around the articles, the navigation, sidebars, header and footer.
DROPPED_IN_ARTICLE = ["nav.mic-editions", "a.headerlink", 'script[type="text/x-thebe-config"]']
DROPPED_AROUND = [".bd-header", ".bd-sidebar-primary", ".bd-sidebar-secondary", ".bd-header-article",
                  "footer", ".bd-footer-article", "#pst-skip-link", "#pst-back-to-top", "#searchbox",
                  ".search-button__wrapper", "dialog", "#jb-print-docs-body"]
SOLUTIONS = ["div.solution", "div.tag_solution"]   # sphinx-exercise's boxes, and the cells tagged solution


def anchor(page: str, fragment: str = "") -> str:
    """The id a page's anchor gets in the printed book: ``notebooks/03-cache-size`` and ``x`` give
    ``notebooks-03-cache-size--x`` (the page's own top: no fragment)."""
    slug = page.replace("/", "-")
    return f"{slug}--{fragment}" if fragment else slug


def resolve(page: str, url: str) -> str:
    """A relative URL of ``page`` made relative to its site's root (``../_images/a.png`` from ``notebooks/x``:
    ``_images/a.png``); absolute URLs and fragments are left as they are."""
    if not url or url.startswith(("#", "data:", "mailto:")) or urlsplit(url).scheme or url.startswith("/"):
        return url
    return posixpath.normpath(posixpath.join(posixpath.dirname(page), url))


def link_within(page: str, href: str, pages: set[str]) -> str:
    """Where a link of ``page`` points in the printed book: an anchor for a link to any of its pages."""
    if href.startswith("#"):
        return "#" + anchor(page, href[1:])
    target = resolve(page, href)
    path, _, fragment = target.partition("#")
    name = path.removesuffix(".html")
    return "#" + anchor(name, fragment) if path.endswith(".html") and name in pages else target


def article(html: str, page: str, pages: set[str], solutions: bool):
    """The content of one built page, ready to sit beside the others: its anchors prefixed with its name, its links
    between pages turned into links within the book, its images and files found from the site's root."""
    soup = BeautifulSoup(html, "html.parser")
    body = soup.select_one("article.bd-article")
    for selector in DROPPED_IN_ARTICLE + ([] if solutions else SOLUTIONS):
        for element in body.select(selector):
            element.decompose()
    for element in body.select("[id]"):
        if not element["id"].startswith("mic-"):       # a figure's id is its loader's: kept as it is
            element["id"] = anchor(page, element["id"])
    for element in body.select("a[href]"):
        element["href"] = link_within(page, element["href"], pages)
    for element in body.select("[src]"):
        element["src"] = resolve(page, element["src"])
    wrapper = soup.new_tag("div", attrs={"class": "mic-print-page", "id": anchor(page)})
    wrapper.extend(list(body.contents))
    return wrapper


# The printed page. The theme's print rules hide each page's first heading (Jupyter Book prints one page, under
# its own title) and indent the content: here every section's title shows and the text uses the page's width.
# Each section starts a page. The article is padded on every page (its padding cloned at each break): a line's ink
# reaches past its box (Devanagari's marks above, Nastaliq's climbing words, the stroke of a keheh that starts an
# Urdu line), and ink past the top of a page's first line would also be printed at the foot of the page before.
# Code wraps instead of running past the margin, and outputs are not boxed in a scrolling area. A code cell is not
# split from its box; a solution's box may be. Solutions, folded on the site, are open. The references, English
# in every edition, are set left to right in the Latin font on the Urdu pages too.
PRINT_CSS = """
@media print {
  html, body { background: white !important; }
  .bd-main .bd-content { margin: 0 !important; }
  .bd-main .bd-content .bd-article h1:first-of-type { display: block; }
  .bd-container, .bd-container__inner, .bd-main, .bd-content, .bd-article-container, .bd-article {
    max-width: none !important; width: 100% !important; padding: 0 !important; margin: 0 !important; }
  .bd-main .bd-content .bd-article { padding: 3mm 1.5mm 0 !important; box-decoration-break: clone; }
  html[dir="rtl"] .bd-main .bd-content .bd-article { padding-inline-start: 5mm !important; }
  .mic-print-page + .mic-print-page { break-before: page; }
  pre, .highlight pre { white-space: pre-wrap !important; overflow-wrap: anywhere; overflow: visible !important;
    font-size: 8.5pt; }
  .cell_output, .output, div.highlight { max-height: none !important; overflow: visible !important; }
  table { max-width: 100%; font-size: 8.5pt; }
  td, th { overflow-wrap: anywhere; }
  .mic-plotly, div.cell_input { break-inside: avoid; }
  .admonition, div.admonition { break-inside: auto; }
  .admonition.toggle-hidden .admonition-title ~ * { display: block !important; }
  .toggle-button, .copybtn, .toggle-details__summary { display: none !important; }
  .admonition.toggle .admonition-title { padding-right: 0.6rem; }     /* the room the hidden button had */
  html[dir="rtl"] div.citation-list { direction: ltr; text-align: left; line-height: 1.6;
    font-family: var(--pst-font-family-base-system); }
}
"""


def print_page(site: Path, edition: str, solutions: bool, book: Path = ROOT / "book") -> str:
    """The edition's whole book as one HTML page: its home page with every page's article in it, in order."""
    root = edition_site(site, edition)
    names = page_names(book)
    home = BeautifulSoup((root / f"{names[0]}.html").read_text(encoding="utf8"), "html.parser")
    for selector in DROPPED_AROUND:
        for element in home.select(selector):
            element.decompose()
    container = home.select_one("article.bd-article")
    container.clear()
    for name in names:
        container.append(article((root / f"{name}.html").read_text(encoding="utf8"), name, set(names), solutions))
    home.title.string = home.title.string.rpartition(" \u2014 ")[2]    # "page — book": the book's title
    style = home.new_tag("style")
    style.string = PRINT_CSS
    home.head.append(style)
    return str(home)


# Chromium prints a variable font (the Devanagari one: every weight from 100 to 900 in one file) as drawings of its
# glyphs, with no font behind them: no name, no font a reader's PDF tool can list or copy text with. The printed
# page gets static instances of such a face instead, one file a weight, made with fontTools and kept in
# ``<out>/fonts``; the site's stylesheet is served with them in place of the variable face.
STATIC_WEIGHTS = (400, 500, 600, 700)          # body text, the theme's headings, bold
FONTS_URL = "/_print-fonts/"                     # where the printed page finds them (served from <out>/fonts)


def static_instances(folder: Path) -> list[tuple[str, int, Path]]:
    """(family, weight, file) of a static instance, at each weight the page uses, of every variable face."""
    from fontTools.ttLib import TTFont
    from fontTools.varLib import instancer

    folder.mkdir(parents=True, exist_ok=True)
    faces = []
    for code in FONT_FACES:
        for family, weights, path, name in font_faces(code):
            if " " not in weights:                 # "400": a static face already
                continue
            for weight in STATIC_WEIGHTS:
                file = folder / f"{family.replace(' ', '')}-{weight}{path.suffix}"
                if not file.exists() or file.stat().st_mtime < path.stat().st_mtime:
                    font = TTFont(path)
                    axes = {a.axisTag: weight if a.axisTag == "wght" else a.defaultValue for a in font["fvar"].axes}
                    instancer.instantiateVariableFont(font, axes, inplace=True, updateFontNames=True)
                    font.save(file)
                faces.append((family, weight, file))
    return faces


def with_static_faces(css: str, faces: list[tuple[str, int, Path]]) -> str:
    """The site's font stylesheet with each variable face's @font-face rule replaced by its static instances'."""
    for family in {f for f, _, _ in faces}:
        rules = [f'@font-face {{ font-family: "{family}"; src: url("{FONTS_URL}{file.name}") format("truetype"); '
                 f"font-weight: {weight}; }}" for f, weight, file in faces if f == family]
        css = re.sub(rf'@font-face {{ font-family: "{family}";[^}}]*font-weight: \d+ \d+;[^}}]*}}',
                     lambda _: "\n".join(rules), css)
    return css


def serve_site(page, site: Path, html: str, url: str, faces: list[tuple[str, int, Path]]) -> None:
    """Answer the browser's every request from the site's folder, ``url`` with the concatenated page, and the font
    stylesheet with the static faces."""
    fonts = {FONTS_URL + file.name: file for _, _, file in faces}

    def answer(route):
        path = unquote(urlsplit(route.request.url).path)
        if route.request.url.split("?")[0] == url:
            return route.fulfill(status=200, content_type="text/html; charset=utf-8", body=html)
        if path in fonts:
            return route.fulfill(status=200, content_type="font/ttf", body=fonts[path].read_bytes())
        if path.endswith("/_static/mic-editions.css"):
            css = (site / path.lstrip("/")).read_text(encoding="utf8")
            return route.fulfill(status=200, content_type="text/css", body=with_static_faces(css, faces))
        file = (site / path.lstrip("/")).resolve()
        if urlsplit(route.request.url).netloc != urlsplit(ORIGIN).netloc or not file.is_file() \
                or site.resolve() not in file.parents:
            return route.fulfill(status=404, body="")
        kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        route.fulfill(status=200, content_type=kind, body=file.read_bytes())
    page.route("**/*", answer)


# Printed once every figure has its traces drawn, every formula is typeset and every font the page uses is loaded.
READY_JS = """() => {
  const figs = Array.from(document.querySelectorAll('div.mic-plotly'));
  const drawn = figs.every(d => d.querySelector('svg.main-svg g.trace, svg.main-svg g.hm, svg.main-svg image'));
  const maths = document.querySelectorAll('span.math, div.math').length;
  const typeset = !maths || document.querySelectorAll('mjx-container').length >= maths;
  return drawn && typeset && document.fonts.status === 'loaded';
}"""


def launch(pw):
    return pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
        "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync"])


def print_pdf(browser, site: Path, edition: str, html: str, out: Path, faces) -> list[str]:
    """Print the concatenated page to ``out``; returns the errors the page raised (none expected)."""
    url = f"{ORIGIN}/{'' if edition == 'en' else edition + '/'}{PRINT_PAGE}"
    page = browser.new_page(viewport={"width": PRINT_WIDTH_PX, "height": 1000}, color_scheme="light")
    problems = []
    page.on("pageerror", lambda e: problems.append(f"JavaScript error: {e}"))
    page.emulate_media(media="print")           # laid out, and the figures drawn, as they are printed
    serve_site(page, site, html, url, faces)
    page.goto(url, wait_until="load")
    page.evaluate("() => document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'))")
    page.wait_for_function(READY_JS, timeout=180_000, polling=500)
    page.wait_for_timeout(500)                  # a figure's second draw (mic_plotly's realignment), if it needs one
    out.parent.mkdir(parents=True, exist_ok=True)
    page.pdf(path=str(out), format=PAPER, print_background=True, outline=True, tagged=True,
             margin={side: f"{mm}mm" for side, mm in MARGIN_MM.items()},
             display_header_footer=True, header_template="<span></span>", footer_template=FOOTER)
    page.close()
    return problems


def record_build(out: Path, edition: str, solutions: bool) -> None:
    """Note in ``<out>/built.json`` whether an edition's PDF holds the solutions (tests/test_pdf.py reads it)."""
    record = out / "built.json"
    built = json.loads(record.read_text()) if record.exists() else {}
    built[edition] = {"solutions": solutions}
    record.write_text(json.dumps(built, indent=1) + "\n")


def build(editions=EDITIONS, solutions: bool = True, site: Path = SITE, out: Path = OUT) -> list[Path]:
    """Print each edition's PDF into ``out``; returns their paths."""
    from playwright.sync_api import sync_playwright

    written, faces = [], static_instances(out / "fonts")
    with sync_playwright() as pw:
        browser = launch(pw)
        for edition in editions:
            start = time.perf_counter()
            if not (edition_site(site, edition) / "index.html").exists():
                raise SystemExit(f"No {edition} site in {edition_site(site, edition)}: build it first (make book).")
            path = out / pdf_name(edition)
            problems = print_pdf(browser, site, edition, print_page(site, edition, solutions), path,
                                  faces)
            if problems:
                raise SystemExit(f"{edition}: the page raised errors while printing: {problems}")
            record_build(out, edition, solutions)
            print(f"{path} ({path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - start:.0f} s)")
            written.append(path)
        browser.close()
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("editions", nargs="*", help=f"any of {', '.join(EDITIONS)} (default: all)")
    parser.add_argument("--no-solutions", action="store_true", help="leave every solution out")
    parser.add_argument("--site", type=Path, default=SITE)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if set(args.editions) - set(EDITIONS):
        parser.error(f"no edition {sorted(set(args.editions) - set(EDITIONS))}: choose from {EDITIONS}")
    build(args.editions or EDITIONS, not args.no_solutions, args.site, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
