"""Small tables of this run's numbers, their labels in the edition's language (infrastructure).

A measurement that needs many numbers is a table, not a paragraph of fields. Two shapes:

* :func:`table`: columns of values under labelled headers, ``table({"batch": batches, "step (ms)": ms})``, rows
  labelled by the ``index`` column (``table({"scheme": ["int8", "int4"], "error": e}, index="scheme")``);
* :func:`beside_chapter`: one row per quantity, this run's value beside the chapter's::

      beside_chapter({"throughput, batch 1 to {knee}": (thr, chapter.S4_THROUGHPUT_1_TO_16, "{:.1f}x")},
                     knee=16)

Headers and row labels are templates (``scripts/extract-messages`` reads the keys of the dict literal given to
either function), looked up in the edition's catalog; a row label may name fields, given as keywords. Values are
numbers, formatted by the row's format (a ``str.format`` pattern such as ``"{:.2f} ms"``, or a function), or text
as it is; ``None`` shows as a dash, where the chapter quotes no such number.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import pandas as pd

from .messages import catalog, edition, fields_of, message

DASH = "—"


def _label(template: str, fields: Mapping[str, object]) -> str:
    return message(template, **{k: v for k, v in fields.items() if k in fields_of(template)})


def _cell(value, fmt: str | Callable | None) -> str:
    if value is None:
        return DASH
    if isinstance(value, str) or fmt is None:
        return str(value)
    return fmt(value) if callable(fmt) else fmt.format(value)


def table(columns: Mapping[str, Sequence], index: str | Sequence[str] | None = None, **fields) -> pd.DataFrame:
    """A DataFrame whose column headers are templates (translated), indexed by the ``index`` column (or columns).

    An index column's text values are row labels: where the edition's catalog has one, it is shown translated
    (written as a list literal in the call, they are extracted into the catalog; a name such as "7B" stays), and a
    label that names fields (``"first {n} layers"``) is formatted with the keywords.
    """
    df = pd.DataFrame({_label(k, fields): list(v) for k, v in columns.items()})
    if not index:
        return df
    keys = [_label(i, fields) for i in ([index] if isinstance(index, str) else index)]
    found = catalog(edition())
    for key in keys:
        df[key] = [_row_label(v, found, fields) if isinstance(v, str) else v for v in df[key]]
    return df.set_index(keys[0] if isinstance(index, str) else keys)


def _row_label(label: str, found: Mapping[str, str], fields: Mapping[str, object]) -> str:
    if not fields_of(label):
        return found.get(label, label)
    return _label(label, fields)


def beside_chapter(rows: Mapping[str, tuple], **fields) -> pd.DataFrame:
    """This run's numbers beside the chapter's: ``{label: (ours, the chapter's, format)}``, one row each.

    The format may be left out (``(ours, theirs)``): the values are then shown as they are.
    """
    out = {}
    for label, row in rows.items():
        ours, theirs, fmt = (*row, None) if len(row) == 2 else row
        out[_label(label, fields)] = (_cell(ours, fmt), _cell(theirs, fmt))
    unused = set(fields) - {f for label in rows for f in fields_of(label)}
    if unused:
        raise ValueError(f"beside_chapter() was given fields no row label uses: {sorted(unused)}.")
    return pd.DataFrame(list(out.values()), index=list(out), columns=[message("this run"), message("the chapter")])
