"""The glossary (issue 41): its page in each edition, the notebooks' links to it, and how the links read where no
glossary page is (JupyterLab, the instructor view). Fast: nothing is built or executed; the site's build (warnings
as errors) checks again that every link resolves."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import jupytext
import pytest
import yaml
from jinja2 import Environment
from nbconvert.filters import markdown2html

from mic_tools import glossary
from mic_tools.glossary import EDITIONS, ROLE, glossary_markdown, linked, plain, role_targets, term_name, terms

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = [("en", p) for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.md"))]
NOTEBOOKS += [(ed, p) for ed in ("hi", "ur") for p in sorted((ROOT / "notebooks" / ed).glob("[0-9][0-9]-*.md"))]
IDS = [f"{ed}/{p.stem}" for ed, p in NOTEBOOKS]


def page_terms(edition: str) -> list[str]:
    """The term lines of the edition's generated glossary (unindented lines inside the directive)."""
    body = glossary_markdown(edition).split("\n")[2:-2]
    return [line for line in body if line and not line.startswith(" ")]


@pytest.mark.parametrize("edition", EDITIONS)
def test_the_page_lists_every_defined_term_once(edition):
    listed = page_terms(edition)
    assert sorted(listed) == sorted(term_name(e, edition) for e in terms())
    assert len({t.lower() for t in listed}) == len(listed), "Sphinx would warn of a duplicate term"
    assert len(listed) == sum(len(v) for v in glossary.groups().values())      # (every entry has a definition)


@pytest.mark.parametrize("edition", EDITIONS)
def test_each_term_has_its_definition_spelling_and_section_in_the_edition(edition):
    page = glossary_markdown(edition)
    for entry in terms():
        assert entry["define"][edition] in page
        assert (glossary.KEPT[edition] if entry["keep"] else glossary.spellings(entry)) in page
    assert page.count("{doc}`/notebooks/01-kv-cache`") == sum(e.get("section") == "01" for e in terms())


def test_avoided_words_are_not_on_any_page():
    avoid = yaml.safe_load(glossary.GLOSSARY.read_text(encoding="utf8"))["avoid"]
    forms = {f for entries in avoid.values() for entry in entries for f in entry["forms"]}
    for edition in EDITIONS:
        assert not set(page_terms(edition)) & forms


@pytest.mark.parametrize("edition, path", NOTEBOOKS, ids=IDS)
def test_every_link_names_a_term_of_its_editions_page(edition, path):
    names = {term_name(e, edition).lower() for e in terms()}
    text = path.read_text(encoding="utf8")
    unknown = [t for t in role_targets(text) if t.lower() not in names]
    assert not unknown, f"{path.name}: {{term}} links to no term of the {edition} glossary: {unknown}"


@pytest.mark.parametrize("edition, path", NOTEBOOKS, ids=IDS)
def test_each_technical_term_is_linked_at_its_first_use_only(edition, path):
    nb = jupytext.read(path)
    again = copy.deepcopy(nb)
    links = linked(again, edition)
    assert [c.source for c in again.cells] == [c.source for c in nb.cells], \
        f"{path.name}: the links are not at the terms' first uses: run scripts/link-glossary"
    targets = [t.lower() for c in nb.cells for t in role_targets(c.source)]
    assert len(targets) == links and len(set(targets)) == len(targets), f"{path.name}: a term is linked twice"
    assert links > 10
    text = path.read_text(encoding="utf8")
    in_math = [m for m in re.findall(r"\$\$.*?\$\$|\$[^$]+\$", text, re.S) if "{term}" in m]
    assert not in_math, f"{path.name}: a link inside math: {in_math[0][:120]}"
    in_html = [m for m in re.findall(r"<div\b[^>]*>.*?</div>", text, re.S) if "{term}" in m]
    assert not in_html, f"{path.name}: a link inside an HTML block, which JupyterLab leaves unresolved"


def test_links_stay_out_of_code_math_headings_options_and_links():
    md = ("# The KV cache\n\n:label: cache\n\nThe `cache` and $cache\nand cache$ and [cache](x.md) and "
          "{cite}`cache`; the cache holds tokens.\n\n```python\ncache\n```")
    nb = jupytext.reads(md, fmt="md:myst")
    assert linked(nb, "en") == 2
    assert nb.cells[0].source == md.replace("the cache holds tokens",
                                            "the {term}`cache` holds {term}`tokens <token>`")


def test_a_role_reads_as_its_text():
    assert plain("the {term}`KV cache` of {term}`layers <layer>`, {cite}`x`") == "the KV cache of layers, {cite}`x`"
    assert ROLE.sub("", "{term}`सही (correct)`") == ""


def room_macro():
    """The instructor view's ``plain_terms`` macro, from its template (instructor/voila/templates/room)."""
    template = (ROOT / "instructor/voila/templates/room/index.html.j2").read_text(encoding="utf8")
    macro = re.search(r"\{%- macro plain_terms.*?\{%- endmacro -%\}", template, re.S).group(0)
    return Environment().from_string(macro + "{{ plain_terms(text) }}")


@pytest.mark.parametrize("edition, path", NOTEBOOKS, ids=IDS)
def test_the_instructor_view_shows_no_raw_role(edition, path):
    """Voila renders Markdown with nbconvert's markdown2html, after the room template's macro."""
    macro = room_macro()
    for cell in jupytext.read(path).cells:
        if cell.cell_type == "markdown":
            shown = markdown2html(macro.render(text=cell.source))
            assert "{term}" not in shown, shown[:300]
            if "{term}" in cell.source:
                assert macro.render(text=cell.source) == plain(cell.source)
