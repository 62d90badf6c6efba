"""Sphinx extension: a language switch on every page, linking the same page in every edition (issue 28).

The English site is the root of ``book/_build/html``; each edition's site sits in a folder named by its code
(``hi/``). Each page gets, above its content, links to itself in the other editions, each marked with its
``lang`` so that the browser shapes it in its own script. ``language`` (``hi``) says which edition a build is.
"""
from __future__ import annotations

import html
import shutil
from pathlib import Path

EDITIONS = {"en": "English", "hi": "हिंदी"}          # code: the edition's name in its own language; Urdu joins here
FONT_CSS = "mic-editions.css"
# The font each edition's script needs, served by the site itself (nothing is fetched from the internet, and a
# machine without Indic fonts still shapes the text): (family, Python package holding it, CSS font stack).
FONTS = {"hi": ("Noto Sans Devanagari", "fontpkg_noto_sans_devanagari")}


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


def _font_file(package: str) -> Path:
    import importlib

    files = sorted((Path(importlib.import_module(package).__file__).parent / "files").glob("*.ttf"))
    if not files:
        raise FileNotFoundError(f"The font package {package} holds no .ttf file.")
    return files[0]


def _write_font_css(app, exception):
    """Copy the edition's font into the site and write the stylesheet that uses it (and styles the switch)."""
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    css = [".mic-editions { font-size: 0.9em; margin-bottom: 1em; text-align: end; }",
           ".mic-edition-current { font-weight: 600; }"]
    edition = app.config.language or "en"
    if edition in FONTS:
        family, package = FONTS[edition]
        source = _font_file(package)
        (static / "fonts").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, static / "fonts" / "edition.ttf")
        css += [f'@font-face {{ font-family: "{family}"; src: url("fonts/edition.ttf") format("truetype"); '
                f"font-weight: 100 900; font-display: swap; }}",
                f'html[lang="{edition}"] {{ --pst-font-family-base: "{family}", var(--pst-font-family-base-system); '
                f'--pst-font-family-heading: "{family}", var(--pst-font-family-base-system); }}']
    for code, (family, _) in FONTS.items():                 # the switch names each edition in its own script
        css.append(f'.mic-editions [lang="{code}"] {{ font-family: "{family}", sans-serif; }}')
    (static / FONT_CSS).write_text("\n".join(css) + "\n", encoding="utf8")


def setup(app):
    app.connect("html-page-context", _add_switch)
    app.connect("build-finished", _write_font_css)
    app.add_css_file(FONT_CSS)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
