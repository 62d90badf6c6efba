"""Three sites, one execution (issue 39): the Hindi and Urdu pages show the English run's measurements, digit for
digit, in their own words.

Read from the built sites (``make book``): each notebook page's code cells, in order, on the English site and on
each edition's (the code cells are the same, byte for byte, so the n-th output cell is the same output). The
English build's executed notebooks (``book/_build/jupyter_execute``) say which outputs are sentences and figures.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import nbformat
import pytest
from bs4 import BeautifulSoup

from helpers.infra.messages import catalog, render
from helpers.infra.outputs import FIGURE_MIME, SAY_MIME

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "book" / "_build" / "html"
EXECUTED = ROOT / "book" / "_build" / "jupyter_execute" / "notebooks"
EDITIONS = ["hi", "ur"]
NAMES = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]-*.md"))
SCRIPT = {"hi": re.compile(r"[\u0900-\u097F]{2,}"), "ur": re.compile(r"[\u0600-\u06FF]{2,}")}
# a number as printed: not part of a name (fp32, Q4_1) and not an ordinal in a label (2nd dim)
NUMBER = re.compile(r"(?<![A-Za-z_\d.,])\d+(?:[.,]\d+)*(?!\d|st\b|nd\b|rd\b|th\b)")
SPEC = re.compile(r"^\s*var spec = (.*);\s*$", re.M)

needs_sites = pytest.mark.skipif(not all((SITE / ed / "notebooks").is_dir() for ed in EDITIONS) or not EXECUTED.is_dir(),
                                 reason="build the three sites first: make book")


def output_cells(page: Path) -> list[dict]:
    """Each code cell of a built page: its outputs' text (figures' scripts left out) and its figures' specs."""
    soup = BeautifulSoup(page.read_text(encoding="utf8"), "html.parser")
    cells = []
    for cell in soup.select("div.cell"):
        out = cell.select_one("div.cell_output")
        figures, text = [], ""
        if out is not None:
            for script in out.find_all("script"):
                found = SPEC.search(script.string or "")
                if found:
                    figures.append(json.loads(found.group(1)))
                script.decompose()
            text = out.get_text(" ")
        cells.append({"text": text, "figures": figures})
    return cells


def numbers_in(item) -> list[float]:
    """Every number in a figure's data (strings, which an edition translates, left out), in order."""
    if isinstance(item, bool) or item is None or isinstance(item, str):
        return []
    if isinstance(item, (int, float)):
        return [item]
    values = item.values() if isinstance(item, dict) else item
    return [n for v in values for n in numbers_in(v)]


def executed_cells(name: str) -> list:
    nb = nbformat.read(EXECUTED / f"{name}.ipynb", as_version=4)
    return [c for c in nb.cells if c.cell_type == "code" and "remove-cell" not in c.metadata.get("tags", [])]


@needs_sites
@pytest.mark.parametrize("edition", EDITIONS)
@pytest.mark.parametrize("name", NAMES)
def test_every_number_of_an_english_output_is_in_the_same_edition_output(edition, name):
    english = output_cells(SITE / "notebooks" / f"{name}.html")
    theirs = output_cells(SITE / edition / "notebooks" / f"{name}.html")
    assert len(english) == len(theirs), f"{name}: {len(english)} code cells in English, {len(theirs)} in {edition}"
    compared = 0
    for i, (en, ed) in enumerate(zip(english, theirs)):
        missing = Counter(NUMBER.findall(en["text"])) - Counter(NUMBER.findall(ed["text"]))
        assert not missing, f"{name}, cell {i}: {edition} lacks {dict(missing)} of {en['text'][:200]!r}"
        assert [numbers_in(f["data"]) for f in en["figures"]] == [numbers_in(f["data"]) for f in ed["figures"]], \
            f"{name}, cell {i}: the {edition} figure's data differ from the English one's"
        compared += len(NUMBER.findall(en["text"])) + sum(len(numbers_in(f["data"])) for f in en["figures"])
    assert compared > 20, f"{name}: only {compared} numbers to compare: is the page empty?"


def script_word(text: str, edition: str) -> str | None:
    """The longest word in the edition's script in ``text`` (None when it has none)."""
    words = SCRIPT[edition].findall(text)
    return max(words, key=len) if words else None


@needs_sites
@pytest.mark.parametrize("edition", EDITIONS)
@pytest.mark.parametrize("name", NAMES)
def test_the_edition_pages_sentences_and_figure_labels_are_in_its_language(edition, name):
    """Each sentence ``say`` printed shows, on the edition's page, in the words of its translated template; each
    figure's title and axis titles are in the edition's script wherever its catalog's translation is."""
    pages = output_cells(SITE / edition / "notebooks" / f"{name}.html")
    words = catalog(edition)
    said = labelled = 0
    for i, cell in enumerate(executed_cells(name)):
        figures = [o["data"][FIGURE_MIME] for o in cell.outputs if FIGURE_MIME in o.get("data", {})]
        for o in cell.outputs:
            rec = o.get("data", {}).get(SAY_MIME)
            word = script_word(render(rec, edition), edition) if rec else None
            if word:
                assert word in pages[i]["text"], f"{name}, cell {i}: {word!r} missing from {pages[i]['text'][:200]!r}"
                said += 1
        for kept, drawn in zip(figures, pages[i]["figures"]):
            layout, shown = kept["figure"].get("layout", {}), drawn.get("layout", {})
            for key in ("title", "xaxis", "yaxis"):
                label = layout.get(key, {}) if key == "title" else layout.get(key, {}).get("title", {})
                label = label.get("text") if isinstance(label, dict) else label
                if not label:
                    continue
                rec = kept["texts"].get(label)
                expected = render(rec, edition) if rec else words.get(label, label)
                if script_word(expected, edition):
                    on_page = shown.get(key, {}) if key == "title" else shown.get(key, {}).get("title", {})
                    on_page = on_page.get("text", "") if isinstance(on_page, dict) else on_page or ""
                    assert script_word(on_page, edition), f"{name}, cell {i}: {key} {on_page!r} is not in {edition}"
                    labelled += 1
    assert said + labelled > 0, f"{name}: no sentence or label to check"
