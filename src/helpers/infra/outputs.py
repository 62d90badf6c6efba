"""What an output carries so that an edition's site can say it again without executing the chapter (infrastructure;
issue 39).

The book executes every notebook once, in English. Each output that holds words keeps, beside what it shows, what
they were made from, under a MIME type of our own that a page never renders:

* a sentence ``say`` printed (:data:`SAY_MIME`): its template and fields (:func:`helpers.infra.messages.record`);
* a figure (:data:`FIGURE_MIME`): the figure as it was before :func:`~helpers.infra.plotting.tidy` laid it out, and
  the template and fields of each label formatted from one;
* a table (:data:`TABLE_MIME`): the template and fields of each header, row label or cell formatted from one.

``mic_tools.rerender`` reads them to write each edition's outputs, in its words, from the English run's numbers.
Labels that are templates themselves (``name="cached"``, a table's header) need no record: an edition looks them up.
"""
from __future__ import annotations

import json

from .messages import LeftToRight, direction, edition, record, remembered, render

SAY_MIME = "application/vnd.mic.say+json"
FIGURE_MIME = "application/vnd.mic.figure+json"
TABLE_MIME = "application/vnd.mic.table+json"


def said_markdown(rec: dict, name: str | None = None) -> str:
    """The Markdown ``say`` shows for a recorded sentence in edition ``name`` (default: this kernel's). In a
    right-to-left edition it is a ``dir="rtl"`` block whose fields that are not Urdu run left to right."""
    name = name or edition()
    if direction(name) == "rtl":
        return f'<div dir="rtl" lang="{name}">\n\n{render(rec, name, wrap=LeftToRight)}\n\n</div>'
    return render(rec, name)


def say_bundle(said: str) -> dict:
    """What ``say`` displays: the Markdown, and its record."""
    rec = record(said)
    return {"text/markdown": said_markdown(rec), SAY_MIME: rec}


def strings_in(item) -> list[str]:
    """Every string in a figure's (or any) nested dicts and lists."""
    if isinstance(item, str):
        return [item]
    values = item.values() if isinstance(item, dict) else item if isinstance(item, (list, tuple)) else ()
    return [s for v in values for s in strings_in(v)]


def sentences(strings) -> dict[str, dict]:
    """{string: record} of those strings that :func:`helpers.infra.messages.message` formatted."""
    return {s: record(t) for s in dict.fromkeys(strings) if (t := remembered(s)) is not None}


def figure_source(fig_json: str) -> dict:
    """The bundle entry that keeps a figure (its JSON, before layout) and its formatted labels' records."""
    source = json.loads(fig_json)
    return {FIGURE_MIME: {"figure": source, "texts": sentences(strings_in(source))}}


def table_texts(df) -> dict:
    """The bundle entry of a DataFrame: the records of its labels and cells formatted from templates."""
    names = [*map(str, df.columns), *map(str, df.index), df.index.name, df.columns.name]
    texts = sentences([s for s in names if isinstance(s, str)]
                      + [v for col in df.columns for v in df[col].tolist() if isinstance(v, str)])
    return {TABLE_MIME: {"texts": texts}} if texts else {}


def register_table_formatter() -> None:
    """In a kernel, every DataFrame shown carries :data:`TABLE_MIME` beside its HTML (nothing elsewhere)."""
    try:
        from IPython import get_ipython
        from IPython.core.formatters import BaseFormatter
        import pandas as pd
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or TABLE_MIME in shell.display_formatter.formatters:
        return

    class TableFormatter(BaseFormatter):
        format_type = TABLE_MIME
        _return_type = dict

    formatter = TableFormatter(parent=shell.display_formatter)
    formatter.for_type(pd.DataFrame, lambda df: table_texts(df).get(TABLE_MIME))
    formatter.for_type_by_name("pandas.io.formats.style", "Styler",          # (imported when first used)
                               lambda st: table_texts(st.data).get(TABLE_MIME))
    shell.display_formatter.formatters[TABLE_MIME] = formatter
