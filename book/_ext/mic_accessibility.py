"""Sphinx extension: what axe-core found on the built sites, fixed where the markup is made (issue 41).

``tests/test_accessibility.py`` runs axe-core on every page of the three sites (``mic_tools.accessibility``). Its
critical and serious findings, and the moderate one whose markup we choose, are fixed here:

- ``aria-required-children`` (critical): docutils writes the references page's citations as
  ``<div role="list">`` holding ``<div role="doc-biblioentry">``; ARIA 1.2 deprecates that role and a list may hold
  only list items. Each citation becomes a ``role="listitem"`` (:func:`citations_as_list_items`).
- ``label-content-name-mismatch`` (serious): the themes' search button is named "Search" (its aria-label) but shows
  "Search Ctrl+K"; the colour-mode button, named "Color mode", shows an icon that Font Awesome draws as an SVG holding
  the icon's title ("Light") as text. Our copies of those two components (``templates/``) let the search button be
  named by what it shows (its title still names it where only the icon shows), and drop the icons' titles.
- ``region`` (moderate): the book's title, a link home at the top of the sidebar, was outside every landmark;
  ``templates/navbar-logo.html`` wraps the theme's own template (``components/navbar-logo.html``) in a navigation
  landmark named "Home".

The templates are found before the themes' own (``templates_path``); each one says what it changes.
"""
from __future__ import annotations

from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent / "templates"


def citations_as_list_items(body: str) -> str:
    """The page's citations as items of the list that holds them (docutils writes a deprecated ARIA role)."""
    return body.replace(' role="doc-biblioentry"', ' role="listitem"')


def _add_templates(app, config):
    config.templates_path = [str(TEMPLATES), *config.templates_path]


def _fix_body(app, pagename, templatename, context, doctree):
    if "body" in context:
        context["body"] = citations_as_list_items(context["body"])


def setup(app):
    app.connect("config-inited", _add_templates)
    app.connect("html-page-context", _fix_body)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
