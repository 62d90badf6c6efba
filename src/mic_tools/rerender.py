"""An edition's notebooks with the English run's outputs, said again in the edition's words (issue 39).

``make book`` executes each notebook once, in the English build. An edition's site is built from its own Markdown
and the English execution's outputs (``book/_build/jupyter_execute``): every code cell is the English one, byte for
byte, so its outputs are the English cell's. What they say is said again through the edition's catalog, from what
each output keeps beside what it shows (:mod:`helpers.infra.outputs`):

* a sentence of ``say``: formatted again from its template and fields;
* a figure: its labels said again, then laid out and drawn by the same renderer as in a kernel of the edition;
* a table: each header, row label or cell that is a template (or was formatted from one) replaced in its HTML.

The numbers are the English run's, digit for digit: a reader who switches editions sees the same measurement.
"""
from __future__ import annotations

import copy
import html
import os
import re
from contextlib import contextmanager
from pathlib import Path

import nbformat

from helpers.infra import plotting
from helpers.infra.messages import EDITION_ENV, catalog, font_family, render
from helpers.infra.outputs import FIGURE_MIME, SAY_MIME, TABLE_MIME, said_markdown

CELL = re.compile(r"(<t[hd][^>]*>)(.*?)(</t[hd]>)", re.S)


@contextmanager
def edition(name: str):
    """Within: this process formats and lays out as a kernel of edition ``name`` does."""
    before = os.environ.get(EDITION_ENV)
    os.environ[EDITION_ENV] = name
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(EDITION_ENV, None)
        else:
            os.environ[EDITION_ENV] = before


def said_again(text: str, texts: dict, name: str) -> str:
    """A label in edition ``name``: from its record if it was formatted from a template, else as the catalog has it."""
    if text in texts:
        return render(texts[text], name)
    return catalog(name).get(text, text)


def relabelled(item, texts: dict, name: str):
    """A figure's dict (or any part of it) with every string said again in edition ``name``."""
    if isinstance(item, str):
        return said_again(item, texts, name) if item in texts else item
    if isinstance(item, dict):
        return {k: relabelled(v, texts, name) for k, v in item.items()}
    if isinstance(item, list):
        return [relabelled(v, texts, name) for v in item]
    return item


def figure_again(kept: dict, name: str) -> dict:
    """The bundle of a figure drawn again in edition ``name`` (the renderer looks plain labels up itself), in the
    edition's font, as the chapter's template gives it in a kernel of that edition."""
    fig = relabelled(copy.deepcopy(kept["figure"]), kept["texts"], name)
    font = fig.get("layout", {}).get("template", {}).get("layout", {}).get("font")
    if isinstance(font, dict):
        font["family"] = font_family(plotting.BASE_FONT, name)
    with edition(name):
        bundle = plotting.MicRenderer().to_mimebundle(fig)
    bundle[FIGURE_MIME] = kept
    return bundle


def table_again(table_html: str, texts: dict, name: str) -> str:
    """A table's HTML with each header, row label or cell that is a template said again in edition ``name``."""
    def cell(m):
        text = html.unescape(m.group(2))
        again = said_again(text.strip(), texts, name) if text.strip() else text
        return m.group(1) + (html.escape(again) if again != text.strip() else m.group(2)) + m.group(3)
    return CELL.sub(cell, table_html)


def rerendered_output(output: dict, name: str) -> dict:
    """One output of the English run, as an edition's page shows it."""
    data = output.get("data")
    if not data:
        return output
    out = copy.deepcopy(output)
    if SAY_MIME in data:
        out["data"]["text/markdown"] = said_markdown(data[SAY_MIME], name)
    if FIGURE_MIME in data:
        out["data"] = figure_again(data[FIGURE_MIME], name)
    elif "text/html" in data and (TABLE_MIME in data or "<table" in data["text/html"]):
        texts = (data.get(TABLE_MIME) or {}).get("texts", {})
        out["data"]["text/html"] = table_again(data["text/html"], texts, name)
    return out


def with_english_outputs(edition_nb, english_executed, name: str):
    """The edition's notebook, each code cell with the English execution's outputs, said again in ``name``.

    The code cells are the English ones, in order (scripts/sync-editions); an English run without the solutions
    (``make book SOLUTIONS=no``) has fewer, so each edition cell takes the next English cell with its source.
    ``name`` "en" keeps the outputs as they are: the English sources' Markdown with their own run's outputs."""
    code_en = iter([c for c in english_executed.cells if c.cell_type == "code"])
    out = copy.deepcopy(edition_nb)
    for mine in (c for c in out.cells if c.cell_type == "code"):
        theirs = next((c for c in code_en if c.source == mine.source), None)
        if theirs is None:
            raise ValueError(f"The {name} notebook's code cells are not the English ones: run scripts/sync-editions"
                             " and build the English site first.")
        mine.outputs = [nbformat.from_dict(o if name == "en" else rerendered_output(o, name))
                        for o in theirs.get("outputs", [])]
        mine.execution_count = theirs.get("execution_count")
    out.metadata = copy.deepcopy(english_executed.metadata)
    return out


def executed_path(executed: Path, notebook: Path) -> Path:
    """Where myst-nb left the English execution of ``notebook`` (``<build>/jupyter_execute/notebooks/NN.ipynb``)."""
    return executed / "notebooks" / (notebook.stem + ".ipynb")
