"""Sphinx extension: a language switch on every page, linking the same page in every edition (issues 28, 29).

The English site is the root of ``book/_build/html``; each edition's site sits in a folder named by its code
(``hi/``, ``ur/``). Each page gets, above its content, links to itself in the other editions, each marked with its
``lang`` so that the browser shapes it in its own script. ``language`` (``hi``) says which edition a build is.
An edition's pages are set in its script's font, served by the site; a right-to-left edition's (Urdu) pages say
``dir="rtl"`` and get the few rules below that sphinx-book-theme lacks (it has no right-to-left mode).
"""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

from sphinx.search.en import SearchEnglish

from helpers.infra.messages import DIRECTIONS, LOCALE, SCRIPT_FONTS
from mic_tools.editions import EDITIONS, FONT_FACES, copy_fonts, font_face_css

# The switch's name for a screen reader, in the page's language (an aria-label cannot mark a part of itself with
# another language's lang, so it holds one language only: the page's).
SWITCH_LABEL = {"en": "Language", "hi": "भाषा", "ur": "زبان"}
FONT_CSS = "mic-editions.css"
# Every site serves the fonts of all editions (mic_tools.editions.FONT_FACES), not only its own: the switch
# names each edition in its own script.


# A word of any edition's script, its combining marks kept inside it: Devanagari (without its dandas, U+0964, U+0965)
# and Urdu's diacritics (zer, zabar, the superscript alef). \w alone cuts a word at every mark.
WORD = re.compile(r"[\w\u0900-\u0963\u0966-\u097F\u0610-\u061A\u064B-\u065F\u0670\u06D6-\u06ED]+")
SPLITTER_JS = """
function splitQuery(query) {
  return query.split(/[^\\p{Letter}\\p{Mark}\\p{Number}_]+/gu).filter(term => term);
}
"""


class SearchEditions(SearchEnglish):
    """Search for the English site: English as Sphinx searches it, and the Hindi and Urdu words of the glossary page
    (every term in all three spellings, issue 41) kept whole, so that a term is found by any of them.

    Sphinx's default splitter cuts words at every character that is not a letter or a digit, and Devanagari's
    vowel signs and virama (हिंदी: ि, ं) are combining marks, so "हिंदी" would be indexed as "ह", "द". Here the
    index (Python) and the search box (JavaScript) both keep combining marks inside a word; a danda (।) or the Urdu
    full stop (۔) and comma (،) still end one. Hindi and Urdu words pass the English stemmer unchanged, so both
    sides agree on them.
    """
    lang = "en"
    _word_re = WORD
    js_splitter_code = SPLITTER_JS


class SearchHindi(SearchEditions):
    """Search for the Hindi site: a Devanagari or Urdu word is kept whole, English words are stemmed as on the
    English site."""
    lang = "hi"
    language_name = "Hindi"


class SearchUrdu(SearchEditions):
    """Search for the Urdu site, as for the Hindi one."""
    lang = "ur"
    language_name = "Urdu"


def theme_catalog(edition: str):
    """The site's interface strings for an edition (``locale/<edition>/LC_MESSAGES/theme.po``), or None."""
    from babel.messages.pofile import read_po

    po_file = LOCALE / edition / "LC_MESSAGES" / "theme.po"
    if edition == "en" or not po_file.exists():
        return None
    with po_file.open("rb") as f:
        return read_po(f, locale=edition)


def theme_strings(edition: str) -> dict[str, str]:
    po = theme_catalog(edition)
    return {m.id: m.string for m in po if m.id and m.string} if po is not None else {}


def _theme_strings(app, config):
    """The themes' interface strings in the edition's language, from ``locale/<edition>/LC_MESSAGES/theme.po``.

    Sphinx has Hindi and Urdu for its own strings (search, "previous"), but sphinx-book-theme and
    pydata-sphinx-theme have none for these languages: their strings ("Contents", "On this page", "Skip to main
    content") would stay English. The catalog is compiled here (no compiled file is kept in the repository) and
    added to both themes' gettext domains, after Sphinx's own translations.
    """
    from babel.messages.mofile import write_mo
    from sphinx import locale

    edition = config.language or "en"
    po = theme_catalog(edition)
    if po is None:
        return
    folder = Path(app.doctreedir) / "mic-locale"
    (folder / edition / "LC_MESSAGES").mkdir(parents=True, exist_ok=True)
    for domain in ("sphinx", "booktheme"):
        with (folder / edition / "LC_MESSAGES" / f"{domain}.mo").open("wb") as f:
            write_mo(f, po)
        locale.init([str(folder)], edition, domain)
    options = dict(config.html_theme_options or {})
    options["search_bar_text"] = theme_strings(edition)["Search this book..."]
    config.html_theme_options = options


def site_root(pathto) -> str:
    """The relative URL from the current page to its site's root ("", "../")."""
    return pathto("index").removesuffix("index.html")


def switch_html(pagename: str, edition: str, root: str) -> str:
    """The links from ``pagename`` of edition ``edition`` to the same page in every edition."""
    english_root = root if edition == "en" else root + "../"
    links = []
    for code, name in EDITIONS.items():
        href = f"{english_root}{'' if code == 'en' else code + '/'}{pagename}.html"
        if code == edition:
            links.append(f'<span class="mic-edition-current" lang="{code}">{html.escape(name)}</span>')
        else:
            links.append(f'<a class="mic-edition-link" href="{html.escape(href)}" lang="{code}" hreflang="{code}">'
                         f'{html.escape(name)}</a>')
    return (f'<nav class="mic-editions" aria-label="{SWITCH_LABEL[edition]}">' + " · ".join(links) + "</nav>")


def _add_switch(app, pagename, templatename, context, doctree):
    if doctree is None or "body" not in context:
        return
    edition = app.config.language or "en"
    edition = edition if edition in EDITIONS else "en"
    context["body"] = switch_html(pagename, edition, site_root(context["pathto"])) + mark_languages(
        context["body"], edition)


# A run of another edition's script in a page's text (a glossary entry's spellings, say): its language decides how
# it is shaped and spoken. Without lang="ur", Urdu on an English or Hindi page is shaped as Arabic, and Nastaliq
# draws the wrong final keheh (notofonts/nastaliq #101); a screen reader reads it in the page's voice.
SCRIPT_RUNS = {"hi": re.compile(r"[\u0900-\u097F]+(?:[\s\u200c\u200d]+[\u0900-\u097F]+)*"),
               "ur": re.compile(r"[\u0600-\u06FF\u0750-\u077F]+"
                                r"(?:[\s\u200c\u200d]+[\u0600-\u06FF\u0750-\u077F]+)*")}
TAG = re.compile(r"(<[^>]*>)")
RAW = re.compile(r"<(/?)(script|style|svg|math|textarea)\b", re.I)


def mark_languages(body: str, edition: str) -> str:
    """``body`` with every run of another edition's script, outside tags, scripts and styles, in a
    ``<span lang="...">`` (one already directly inside an element of that language is left as it is)."""
    out, raw, last_tag = [], None, ""
    for part in TAG.split(body):
        if part.startswith("<"):
            m = RAW.match(part)
            if m and not m.group(1) and raw is None:
                raw = m.group(2).lower()
            elif m and m.group(1) and m.group(2).lower() == raw:
                raw = None
            out.append(part)
            last_tag = part
            continue
        if raw is None:
            for code, runs in SCRIPT_RUNS.items():
                if code != edition and f'lang="{code}"' not in last_tag:
                    part = runs.sub(lambda r, code=code: f'<span lang="{code}">{r.group(0)}</span>', part)
        out.append(part)
    return "".join(out)


def _write_font_css(app, exception):
    """Copy the editions' fonts into the site and write the stylesheet that uses them (and styles the switch)."""
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    copy_fonts(static / "fonts")
    css = [".mic-editions { font-size: 0.9em; margin-bottom: 1em; text-align: end; }",
           ".mic-edition-current { font-weight: 600; }",
           CODE_CSS]
    for code in FONT_FACES:
        css += font_face_css(code, "fonts/")
        css.append(f'.mic-editions [lang="{code}"], span[lang="{code}"] {{ font-family: "{SCRIPT_FONTS[code]}", '
                   'sans-serif; }')
    edition = app.config.language or "en"
    if edition in FONT_FACES:                           # the edition's pages: body and headings in its font
        family = SCRIPT_FONTS[edition]
        css.append(f'html[lang="{edition}"] {{ --pst-font-family-base: "{family}", var(--pst-font-family-base-system); '
                   f'--pst-font-family-heading: "{family}", var(--pst-font-family-base-system); }}')
    if DIRECTIONS.get(edition) == "rtl":
        css.append(RTL_CSS)
        for page in Path(app.outdir).rglob("*.html"):
            text = page.read_text(encoding="utf8")
            page.write_text(text.replace(f'<html lang="{edition}"', f'<html lang="{edition}" dir="rtl"', 1),
                            encoding="utf8")
    (static / FONT_CSS).write_text("\n".join(css) + "\n", encoding="utf8")
    _copy_button_strings(static / "copybutton.js", edition)
    _search_strings(static / "translations.js", edition)


COPY_BUTTON = {"copy": "Copy", "copy_to_clipboard": "Copy to clipboard", "copy_success": "Copied!",
               "copy_failure": "Failed to copy"}


def _copy_button_strings(script: Path, edition: str) -> None:
    """sphinx-copybutton's tooltips in the edition's language: its script keeps them in a table of languages, which
    has neither Hindi nor Urdu, so the edition's entry, from theme.po, is added to that table."""
    words = theme_strings(edition)
    if not words or not script.exists():
        return
    entry = ", ".join(f"{key!r}: {words.get(text, text)!r}" for key, text in COPY_BUTTON.items())
    text = script.read_text(encoding="utf8")
    script.write_text(text.replace("const messages = {", f"const messages = {{\n  '{edition}': {{{entry}}},", 1),
                      encoding="utf8")


SEARCH_PAGE = ("Search Results", "Searching", "Preparing search...", ", in ", "Hide Search Matches",
               "Search finished, found ${resultCount} page(s) matching the search query.",
               "Your search did not match any documents. Please make sure that all words are spelled correctly and "
               "that you've selected enough categories.")


def _search_strings(script: Path, edition: str) -> None:
    """The search page's sentences (written by Sphinx's JavaScript, from ``translations.js``) in the edition's
    language: Sphinx's Urdu has none of them, and its Hindi misspells one."""
    words = theme_strings(edition)
    if not words or not script.exists():
        return
    head, _, rest = script.read_text(encoding="utf8").partition("Documentation.addTranslations(")
    body, _, tail = rest.rpartition(");")
    table = json.loads(body)
    table["messages"].update({k: words[k] for k in SEARCH_PAGE if k in words})
    script.write_text(f"{head}Documentation.addTranslations({json.dumps(table, ensure_ascii=False, indent=1)});{tail}",
                      encoding="utf8")


# Code cells (issue 37): the notebooks' code is written 78 columns wide, and at a 1280 px window the theme's code box
# showed 77.4 columns of its monospace font inside 1 rem of padding on each side. Half a rem leaves room for 79. A
# solution's cells sit inside its dropdown, whose body is indented 1.4 rem and padded 0.6 rem on each side (73
# columns were left): the body is not indented, and the cells reach into the padding.
CODE_CSS = ("div.cell_input pre { padding-inline: 0.5rem; }\n"
            "div.admonition.solution p.admonition-title ~ * { margin-inline: 0; }\n"
            "div.solution div.cell_input { margin-inline: -0.6rem; }")

# A right-to-left edition's pages. With dir="rtl" on <html>, the theme's flex rows mirror by themselves (navigation
# on the right, "on this page" on the left); these rules undo what the theme wrote in left and right, give Nastaliq
# the line height its climbing words need (its glyphs reach 2.5 em from top to bottom: lines 2.6 em apart never
# meet), and keep left to right what must stay so: code cells and their outputs, figures, math, and code spans,
# which are isolated so that bidi cannot reorder them with the Urdu around them, and tables of numbers (book/_ext/
# mic_teaching.py), whose headers still read right to left.
# (plotly.js measures every label in a hidden SVG of its own, #js-plotly-tester, in <body>: measured right to left,
# each tick label's anchor flips and the axis titles land on the ticks.)
RTL_CSS = """
html[dir="rtl"] .bd-article, html[dir="rtl"] .bd-article :is(h1, h2, h3, h4) { line-height: 2.6; }
html[dir="rtl"] :is(.bd-sidebar-primary, .bd-sidebar-secondary) { line-height: 2.6; }
html[dir="rtl"] .bd-sidebar-primary { border-inline-end: 1px solid var(--pst-color-border); border-right: 0; }
html[dir="rtl"] :is(.cell_input, .cell_output, .output, pre, .highlight, .math, mjx-container, .mic-plotly,
  #js-plotly-tester) {
  direction: ltr; text-align: start; line-height: normal; }
html[dir="rtl"] :is(p, li, td, th, dt, dd, h1, h2, h3, h4, a, span, strong, em) > code {
  direction: ltr; unicode-bidi: isolate; }
html[dir="rtl"] table.mic-numbers-table { direction: ltr; }
html[dir="rtl"] table.mic-numbers-table th { direction: rtl; }
"""

def setup(app):
    app.add_search_language(SearchEditions)
    app.add_search_language(SearchHindi)
    app.add_search_language(SearchUrdu)
    app.connect("config-inited", _theme_strings)
    app.connect("html-page-context", _add_switch)
    app.connect("build-finished", _write_font_css)
    app.add_css_file(FONT_CSS)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
