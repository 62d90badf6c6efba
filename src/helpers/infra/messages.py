"""The sentences the code prints, as templates with named fields (infrastructure).

Every sentence a notebook prints, every claim statement and every figure title is written as a
template and formatted here::

    say("The cache holds {tokens:,} tokens in {mb:.1f} MB.", tokens=n, mb=size / 1e6)
    fig = figure(message("Decode step at batch {b}", b=b))

never as an f-string. An f-string is formatted before anything can look it up; a template reaches
:func:`message` whole, so an edition of the chapter (Hindi, Urdu) can look it up in its message
catalog first and format its own sentence with the same fields. Fields are named, so a translation
may put them in any order. Literal braces in a template are doubled (``{{`` and ``}}``), as in
:meth:`str.format`.
"""
from __future__ import annotations

import string


def fields_of(template: str) -> set[str]:
    """The named fields a template uses: ``fields_of("{n:,} tokens in {s:.1f} s") == {"n", "s"}``."""
    names = set()
    for _, name, _, _ in string.Formatter().parse(template):
        if name is None:
            continue
        if name == "" or name.isdigit():
            raise ValueError(f"A message template names its fields ({{tokens}}, not {{}} or {{0}}): {template!r}.")
        names.add(name.split(".")[0].split("[")[0])
    return names


def message(template: str, **fields) -> str:
    """The sentence ``template`` says with these ``fields``: the one place a printed sentence is formatted.

    A field the template uses but that is not given, or one given but unused, is refused in one
    sentence: both are the typo a translation must not inherit.
    """
    if not isinstance(template, str):
        raise TypeError(f"A message template is a string, got {type(template).__name__}.")
    wanted = fields_of(template)
    missing, unused = wanted - fields.keys(), fields.keys() - wanted
    if missing or unused:
        raise ValueError(f"The template {template!r} uses the fields {sorted(wanted)}; "
                         f"missing {sorted(missing)}, unused {sorted(unused)}.")
    return template.format(**fields)
