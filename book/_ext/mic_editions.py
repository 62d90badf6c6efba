"""Sphinx extension: a language switch on every page, linking the same page in every edition (issue 28).

The English site is the root of ``book/_build/html``; each edition's site sits in a folder named by its code
(``hi/``). Each page gets, above its content, links to itself in the other editions, each marked with its
``lang`` so that the browser shapes it in its own script. ``language`` (``hi``) says which edition a build is.
"""
from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

from sphinx.search.en import SearchEnglish

from helpers.infra.messages import LOCALE, SCRIPT_FONTS
from mic_tools.editions import FONT_PACKAGES, font_file

EDITIONS = {"en": "English", "hi": "हिंदी"}          # code: the edition's name in its own language; Urdu joins here
FONT_CSS = "mic-editions.css"
# Every site serves the fonts of all editions (mic_tools.editions.FONT_PACKAGES), not only its own: the switch
# names each edition in its own script.

class SearchHindi(SearchEnglish):
    """Search for the Hindi site: a Devanagari word is kept whole, English words are stemmed as on the English site.

    Sphinx's default splitter cuts words at every character that is not a letter or a digit, and Devanagari's
    vowel signs and virama (हिंदी: ि, ं) are combining marks, so "हिंदी" would be indexed as "ह", "द". Here the
    index (Python) and the search box (JavaScript) both keep combining marks inside a word; a danda (।) still
    ends one. Hindi words pass the English stemmer unchanged, so both sides agree on them.
    """
    lang = "hi"
    language_name = "Hindi"
    _word_re = re.compile(r"[\w\u0900-\u0963\u0966-\u097F]+")    # Devanagari without its dandas (U+0964, U+0965)
    js_splitter_code = """
function splitQuery(query) {
  return query.split(/[^\\p{Letter}\\p{Mark}\\p{Number}_]+/gu).filter(term => term);
}
"""


def _theme_strings(app, config):
    """The themes' interface strings in the edition's language, from ``locale/<edition>/LC_MESSAGES/theme.po``.

    Sphinx has Hindi and Urdu for its own strings (search, "previous"), but sphinx-book-theme and
    pydata-sphinx-theme have none for these languages: their strings ("Contents", "On this page", "Skip to main
    content") would stay English. The catalog is compiled here (no compiled file is kept in the repository) and
    added to both themes' gettext domains, after Sphinx's own translations.
    """
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po
    from sphinx import locale

    edition = config.language or "en"
    po_file = LOCALE / edition / "LC_MESSAGES" / "theme.po"
    if edition == "en" or not po_file.exists():
        return
    with po_file.open("rb") as f:
        po = read_po(f, locale=edition)
    folder = Path(app.doctreedir) / "mic-locale"
    (folder / edition / "LC_MESSAGES").mkdir(parents=True, exist_ok=True)
    for domain in ("sphinx", "booktheme"):
        with (folder / edition / "LC_MESSAGES" / f"{domain}.mo").open("wb") as f:
            write_mo(f, po)
        locale.init([str(folder)], edition, domain)
    options = dict(config.html_theme_options or {})
    options["search_bar_text"] = dict((m.id, m.string) for m in po if m.id)["Search this book..."]
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
    return '<nav class="mic-editions" aria-label="Language / भाषा">' + " · ".join(links) + "</nav>"


def _add_switch(app, pagename, templatename, context, doctree):
    if doctree is None or "body" not in context:
        return
    edition = app.config.language or "en"
    context["body"] = switch_html(pagename, edition if edition in EDITIONS else "en",
                                  site_root(context["pathto"])) + context["body"]


def _write_font_css(app, exception):
    """Copy the editions' fonts into the site and write the stylesheet that uses them (and styles the switch)."""
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    (static / "fonts").mkdir(parents=True, exist_ok=True)
    css = [".mic-editions { font-size: 0.9em; margin-bottom: 1em; text-align: end; }",
           ".mic-edition-current { font-weight: 600; }"]
    for code in FONT_PACKAGES:
        family = SCRIPT_FONTS[code]
        shutil.copyfile(font_file(code), static / "fonts" / f"{code}.ttf")
        css += [f'@font-face {{ font-family: "{family}"; src: url("fonts/{code}.ttf") format("truetype"); '
                f"font-weight: 100 900; font-display: swap; }}",
                f'.mic-editions [lang="{code}"] {{ font-family: "{family}", sans-serif; }}']
    edition = app.config.language or "en"
    if edition in FONT_PACKAGES:                        # the edition's pages: body and headings in its font
        family = SCRIPT_FONTS[edition]
        css.append(f'html[lang="{edition}"] {{ --pst-font-family-base: "{family}", var(--pst-font-family-base-system); '
                   f'--pst-font-family-heading: "{family}", var(--pst-font-family-base-system); }}')
    (static / FONT_CSS).write_text("\n".join(css) + "\n", encoding="utf8")

def setup(app):
    app.add_search_language(SearchHindi)
    app.connect("config-inited", _theme_strings)
    app.connect("html-page-context", _add_switch)
    app.connect("build-finished", _write_font_css)
    app.add_css_file(FONT_CSS)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
