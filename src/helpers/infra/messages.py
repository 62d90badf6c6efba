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

Editions. :func:`edition` says which edition a kernel prints: ``MIC_EDITION`` (``en``, ``hi``, ``ur``) when set,
else the folder the notebook runs in (``notebooks/hi/`` prints Hindi), else the edition that folder's
``edition.txt`` records (an nbgrader assignment, whose folder is not named after its edition), else English. An edition's catalog is
``locale/<edition>/LC_MESSAGES/helpers.po`` (gettext, read with Babel; ``scripts/extract-messages`` writes the
template ``locale/helpers.pot`` from the code and the notebooks). A template the catalog lacks, or translates
as empty or fuzzy, prints in English. Numbers are formatted by the template's own format specs, so every
edition groups digits as the English one does (1,234,567), never as the Indian locale (12,34,567).
"""
from __future__ import annotations

import functools
import math
import os
import re
import string
from pathlib import Path

EDITION_ENV = "MIC_EDITION"
MISSING_ENV = "MIC_MISSING_MESSAGES"     # a file: each template an edition printed without a translation, a line each
EDITIONS = ("en", "hi", "ur")
EDITION_FILE = "edition.txt"             # an nbgrader assignment's folder records its edition in it (issue 40)
# The font each edition's script is set in. The site serves it (book/_ext/mic_editions.py), so a reader's machine
# needs no Indic font; figures name it first, so that their SVG text is shaped by the same font as the page.
SCRIPT_FONTS = {"hi": "Noto Sans Devanagari", "ur": "Noto Nastaliq Urdu"}
# Figures set Urdu in Naskh, Nastaliq's upright sibling: Nastaliq's words climb and fall far beyond a line's
# height, and plotly.js sizes a title, a tick or a legend entry by that line height, so they would collide.
FIGURE_FONTS = {**SCRIPT_FONTS, "ur": "Noto Naskh Arabic"}
# The direction each edition's prose runs in: Urdu right to left. Code, numbers and tables stay left to right.
DIRECTIONS = {"ur": "rtl"}
LOCALE = Path(__file__).resolve().parents[3] / "locale"       # the repository's locale/ folder


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


def edition() -> str:
    """The edition this kernel prints: ``MIC_EDITION``, else the notebook's folder (``notebooks/hi``), else the
    edition its folder records in ``edition.txt`` (an nbgrader assignment: mic_tools.assignments), else en."""
    chosen = os.environ.get(EDITION_ENV, "").strip().lower()
    if chosen:
        if chosen not in EDITIONS:
            raise ValueError(f"{EDITION_ENV} must be one of {', '.join(EDITIONS)}; got {chosen!r}.")
        return chosen
    here = Path.cwd()
    if here.name in EDITIONS:
        return here.name
    recorded = here / EDITION_FILE
    if recorded.is_file():
        name = recorded.read_text(encoding="utf8").strip().lower()
        if name in EDITIONS:
            return name
    return "en"


def direction(name: str | None = None) -> str:
    """``"rtl"`` or ``"ltr"``: which way edition ``name``'s (default: this kernel's) sentences run."""
    return DIRECTIONS.get(name or edition(), "ltr")


ARABIC = re.compile(r"[\u0600-\u06FF\u0750-\u077F\uFB50-\uFDFF\uFE70-\uFEFF]")


def isolate_rtl(item):
    """A figure's right-to-left labels (Urdu) made bidi isolates that run right to left, line by line, in place.

    SVG text runs left to right: a label such as "KV cache کا سائز" would show its English term on the left, where
    an Urdu reader ends. Each line between RLI and PDI (U+2067, U+2069) is laid out right to left as one unit; a line
    with no Urdu in it ("32 layers, head dim 64" under an Urdu title) stays as it is, left to right.
    ``item``: a figure's dictionary, or any part of it; returned.
    """
    prefix = item.get("prefix") if isinstance(item, dict) else None
    if isinstance(prefix, str) and ARABIC.search(prefix) and not prefix.startswith("\u2067"):
        # a slider's current value: plotly.js writes prefix + value + suffix as one text, so the isolate opens
        # in the prefix and closes in the suffix, and the value is read where the Urdu label puts it
        item["prefix"], item["suffix"] = "\u2067" + prefix, (item.get("suffix") or "") + "\u2069"
    items = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
    for key, value in items:
        if isinstance(value, str) and ARABIC.search(value):
            item[key] = "<br>".join(f"\u2067{line}\u2069" if ARABIC.search(line) and not line.startswith("\u2067")
                                    else line for line in value.split("<br>"))     # a Latin line stays as it is
        else:
            isolate_rtl(value)
    return item


class LeftToRight:
    """A field of a right-to-left sentence (Urdu): printed in an isolate that runs left to right, unless it is Urdu
    itself. Bidi would otherwise move a neutral character to the far side of the field: the leading slash of
    ``/tmp/model`` at the start of a line of Urdu shows at the line's end."""

    def __init__(self, value):
        self.value = value

    def _isolated(self, text: str) -> str:
        return text if ARABIC.search(text) else f"\u2066{text}\u2069"

    def __format__(self, spec: str) -> str:
        return self._isolated(format(self.value, spec))

    def __str__(self) -> str:
        return self._isolated(str(self.value))

    def __repr__(self) -> str:
        return self._isolated(repr(self.value))

    def __getattr__(self, name):
        return getattr(self.value, name)

    def __getitem__(self, key):
        return self.value[key]


def font_family(base: str, name: str | None = None) -> str:
    """A figure's CSS font stack for edition ``name`` (default: this kernel's): its script's font, then ``base``."""
    font = FIGURE_FONTS.get(name or edition())
    return f'"{font}", {base}' if font else base


@functools.lru_cache(maxsize=None)
def catalog(name: str) -> dict[str, str]:
    """{English template: translated template} of an edition's catalog: complete, non-fuzzy entries only."""
    path = LOCALE / name / "LC_MESSAGES" / "helpers.po"
    if name == "en" or not path.exists():
        return {}
    from babel.messages.pofile import read_po      # here, not at the top: the English edition never needs it

    with path.open("rb") as f:
        po = read_po(f, locale=name)
    return {m.id: m.string for m in po if m.id and m.string and not m.fuzzy}


@functools.lru_cache(maxsize=None)
def _translations(name: str) -> frozenset[str]:
    return frozenset(catalog(name).values())


def translated(template: str, name: str | None = None) -> str:
    """``template`` as edition ``name`` (default: this kernel's) writes it; the English one where it has none.

    A translation must use exactly the template's fields: one that drops or invents a field is refused in one
    sentence, since it would print a wrong number or fail only when that sentence is reached.
    """
    name = name or edition()
    out = catalog(name).get(template, template)
    if (out is template and name != "en" and template.strip() and os.environ.get(MISSING_ENV)
            and template not in _translations(name)):           # a label translated once already is not missing
        with open(os.environ[MISSING_ENV], "a", encoding="utf8") as f:     # for the catalog's completeness test
            f.write(template.replace("\n", "\\n") + "\n")
    if out is not template and fields_of(out) != fields_of(template):
        raise ValueError(f"The {name} translation of {template!r} uses the fields "
                         f"{sorted(fields_of(out))}, not {sorted(fields_of(template))}.")
    return out


class Text(str):
    """A sentence as :func:`message` formatted it, remembering its template and fields: a build that executed the
    chapter once, in English, can say every printed sentence again in an edition's words (issue 39, :func:`record`
    and :func:`render`)."""

    def __new__(cls, text: str, template: str, fields: dict):
        out = super().__new__(cls, text)
        out.template, out.fields = template, fields
        return out

    def __getnewargs__(self):                  # copied and pickled as a Text (plotly deep-copies its labels)
        return str(self), self.template, self.fields


_RECENT: dict[str, Text] = {}            # the sentences formatted lately, by their text: what an output shows
_RECENT_MAX = 20_000


def remembered(text: str) -> Text | None:
    """The :class:`Text` a string was formatted as, if :func:`message` made it lately."""
    return text if isinstance(text, Text) else _RECENT.get(text)


def record(value, _within: tuple = ()):
    """A field's value (or a :class:`Text`) as JSON, from which :func:`render` formats it again: numbers and strings
    as they are, a sentence as its template and fields, an error by its sentence, anything else frozen as printed."""
    if isinstance(value, LeftToRight):
        value = value.value
    if isinstance(value, BaseException) and len(value.args) == 1 and isinstance(value.args[0], str):
        value = value.args[0]                   # an error is said by its sentence
    if isinstance(value, str) and not isinstance(value, Text):
        found = remembered(value)               # str(sentence) is a plain copy of it
        value = found if found is not None and not any(found is w for w in _within) else value
    if isinstance(value, Text):
        inner = (*_within, value)               # ("{line}" says a sentence whose text is its own)
        return {"template": value.template, "fields": {k: record(v, inner) for k, v in value.fields.items()}}
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}            # JSON has no nan or inf
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "item") and not isinstance(value, dict):      # a numpy or torch scalar, or one element
        try:
            return record(value.item())
        except (ValueError, RuntimeError, TypeError):
            pass
    if isinstance(value, (tuple, list)):
        return {"tuple" if isinstance(value, tuple) else "list": [record(v) for v in value]}
    return {"str": str(value), "repr": repr(value)}


class _Frozen:
    """A value :func:`record` kept as printed: formats as its text, and as its repr under ``!r``."""

    def __init__(self, text: str, rep: str):
        self.text, self.rep = text, rep

    def __format__(self, spec: str) -> str:
        return format(self.text, spec)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.rep


def value_of(rec, name: str | None = None):
    """The value :func:`record` describes, with each sentence in it said in edition ``name``."""
    if isinstance(rec, dict):
        if "template" in rec:
            return render(rec, name)
        if "float" in rec:
            return float(rec["float"])
        if "tuple" in rec or "list" in rec:
            items = [value_of(v, name) for v in rec.get("tuple", rec.get("list"))]
            return tuple(items) if "tuple" in rec else items
        return _Frozen(rec["str"], rec["repr"])
    return rec


def render(rec: dict, name: str | None = None, wrap=None) -> str:
    """The sentence a :func:`record` describes, in edition ``name``; ``wrap`` (LeftToRight, say) wraps each field."""
    fields = {k: value_of(v, name) for k, v in rec["fields"].items()}
    if wrap:
        fields = {k: wrap(v) for k, v in fields.items()}
    return translated(rec["template"], name).format(**fields)


def message(template: str, **fields) -> str:
    """The sentence ``template`` says with these ``fields``: the one place a printed sentence is formatted.

    The template is looked up in the edition's catalog first (:func:`translated`). A field the template uses
    but that is not given, or one given but unused, is refused in one sentence: both are the typo a
    translation must not inherit.
    """
    if not isinstance(template, str):
        raise TypeError(f"A message template is a string, got {type(template).__name__}.")
    wanted = fields_of(template)
    missing, unused = wanted - fields.keys(), fields.keys() - wanted
    if missing or unused:
        raise ValueError(f"The template {template!r} uses the fields {sorted(wanted)}; "
                         f"missing {sorted(missing)}, unused {sorted(unused)}.")
    text = Text(translated(template).format(**fields), template, fields)
    if len(_RECENT) >= _RECENT_MAX:
        _RECENT.clear()
    _RECENT.setdefault(str(text), text)         # the first sentence with this text, not a "{line}" passing it on
    return text
