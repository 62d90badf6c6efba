"""Sphinx extension: the glossary page of each edition, generated from ``locale/glossary.yml`` (issue 41).

``book/glossary.md`` (and ``book/<edition>/glossary.md``) holds the page's heading and opening sentence only; the
terms are added here as the page is read, in the edition the build is (``language``), by
:func:`mic_tools.glossary.glossary_markdown`: a MyST ``{glossary}``, so every term is in the index and the
notebooks link it with ``{term}``. Nothing of it is typed by hand, so the page cannot drift from the file.
"""
from __future__ import annotations

from mic_tools.glossary import glossary_markdown

PAGE = "glossary"


def _add_terms(app, docname, source):
    if docname == PAGE:
        source[0] = source[0].rstrip() + "\n\n" + glossary_markdown(app.config.language or "en")


def _reread_page(app, env, added, changed, removed):
    """The page is read again on every build: its terms live in another file, which Sphinx does not watch."""
    return [PAGE] if PAGE in env.found_docs else []


def setup(app):
    app.connect("source-read", _add_terms)
    app.connect("env-get-outdated", _reread_page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
