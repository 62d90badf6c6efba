"""The chapter's glossary (issue 41): its page in each edition, and the links from the notebooks to it.

``locale/glossary.yml`` is the one source. Each edition's site gets a glossary page, built from it at build time
(``book/_ext/mic_glossary.py`` adds :func:`glossary_markdown` to the page's heading): every term with a definition,
in the edition's rendering, with its three spellings, its one-line definition in the edition's language and the
section that introduces it. It is a MyST ``{glossary}``, so each term is in the index and prose links it with
``{term}``. The words the glossary lists to avoid (``avoid:``) are not terms and stay off the page.

:func:`linked` writes those links: each technical term's first use in a notebook's prose becomes a ``{term}`` role
(``scripts/link-glossary``). The general words (the last groups of the file: words of method, general words,
exercises) are on the page but never linked: a link on every "why" or "per" would bury the links that matter.
:func:`plain` turns a role back into its text, for a Markdown renderer that knows no roles (the instructor view).
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import yaml

from mic_tools.editions import EDITIONS

ROOT = Path(__file__).resolve().parents[2]
GLOSSARY = ROOT / "locale" / "glossary.yml"
# A word's letters in each edition's script: Devanagari without its dandas, Urdu without ، ؛ ؟ ۔
LETTERS = {"en": "A-Za-z", "hi": "\u0900-\u0963\u0966-\u097F",
           "ur": "\u0600-\u060B\u060D-\u061A\u061C-\u061E\u0620-\u06D3\u06D5-\u06FF\u0750-\u077F"}
GROUP = re.compile(r"^  # -{20,} (.+)$", re.M)
UNLINKED_GROUPS = ("words of method the seeds keep English", "general words the seeds translate",
                   "exercises and checkers")
# How a page says where a term comes from and that an edition keeps it in English, in the edition's own words.
INTRODUCED = {"en": "Introduced in {doc}", "hi": "पहली बार: {doc}", "ur": "پہلی بار: {doc}"}
KEPT = {"en": "Kept in English in the Hindi and Urdu editions.", "hi": "English में ही रखा जाता है।",
        "ur": "English ہی میں رکھا جاتا ہے۔"}
ROLE = re.compile(r"\{term\}`([^`<]*?)\s*(?:<([^`>]*)>)?`")


@functools.lru_cache(maxsize=1)
def groups() -> dict[str, list[dict]]:
    """{group name: its entries}, the groups in the file's order (a comment line heads each group)."""
    text = GLOSSARY.read_text(encoding="utf8")
    body = text[text.index("\nterms:\n"):text.index("\navoid:")]
    names, chunks = GROUP.findall(body), GROUP.split(body)[2::2]
    return {name: yaml.safe_load(chunk) or [] for name, chunk in zip(names, chunks)}


def terms() -> list[dict]:
    """Every entry that has a definition, in the file's order."""
    return [e for entries in groups().values() for e in entries if e.get("define")]


def linked_terms() -> list[dict]:
    """The entries whose first use in each notebook is linked: the technical groups'."""
    return [e for name, entries in groups().items() if name not in UNLINKED_GROUPS for e in entries
            if e.get("define")]


def term_name(entry: dict, edition: str) -> str:
    """The entry's term on the edition's page: its rendering, with the English beside it where two entries render
    the same ("सही (correct)"), since a glossary term names one entry."""
    rendering = entry[edition]
    same = [e for e in terms() if e[edition].lower() == rendering.lower()]
    return rendering if len(same) == 1 else f"{rendering} ({entry['en']})"


def spellings(entry: dict) -> str:
    """The term in all three editions ("English: right · हिंदी: सही · اردو: درست")."""
    return " · ".join(f"{name}: {entry[code]}" for code, name in EDITIONS.items())


def section_doc(section: str | None) -> str | None:
    """The document a section is ("01" -> notebooks/01-kv-cache; "intro" -> intro), or None."""
    if section is None:
        return None
    if section == "intro":
        return "intro"
    found = sorted((ROOT / "notebooks").glob(f"{section}-*.md"))
    if not found:
        raise ValueError(f"locale/glossary.yml names section {section!r}, which has no notebook.")
    return f"notebooks/{found[0].stem}"


def entry_markdown(entry: dict, edition: str) -> list[str]:
    """One term of the page: the term, then its definition, its spellings and where it is introduced."""
    lines = [term_name(entry, edition), f"  {entry['define'][edition]}", ""]
    lines += [f"  {KEPT[edition] if entry['keep'] else spellings(entry)}"]
    doc = section_doc(entry.get("section"))
    if doc:
        lines += ["", "  " + INTRODUCED[edition].format(doc=f"{{doc}}`/{doc}`")]
    return lines + [""]                                # (an empty line ends a term's definition)


def glossary_markdown(edition: str) -> str:
    """The page's glossary in MyST Markdown, sorted by term in the edition's rendering."""
    lines = ["```{glossary}", ":sorted:"]
    for entry in terms():
        lines += entry_markdown(entry, edition)
    return "\n".join(lines + ["```", ""])


# ---------------------------------------------------------------------------------------------- links from prose
# What is not prose in a Markdown cell: fenced blocks, math (inline math may wrap a line), code spans, roles, links
# and images, HTML tags and what an HTML block holds (jupyterlab-myst leaves a role inside the Urdu notebooks'
# <div dir="rtl"> unresolved: it showed "{undefined} term-token"), headings and directive options (whole lines).
# Bold and emphasis stay prose.
PROTECTED = re.compile(r"```.*?```|\$\$.*?\$\$|\$[^$]+\$|\{[\w:-]+\}`[^`]*`|`[^`]*`|!?\[[^\]]*\]\([^)]*\)"
                       r"|<(div|span)\b[^>]*>.*?</\1>|<[^>]+>|^#[^\n]*|^:[\w-]+:[^\n]*", re.S | re.M)


def protected_spans(source: str) -> list[tuple[int, int]]:
    return [m.span() for m in PROTECTED.finditer(source)]


def term_pattern(entry: dict, edition: str) -> re.Pattern:
    """The term as prose writes it: a whole word, an English term also in its plural, in any case."""
    letters = LETTERS[edition] if not entry["keep"] or edition == "en" else LETTERS["en"]
    word = re.escape(entry[edition]).replace(r"\ ", r"\s+")
    plural = "(?:s|es)?" if re.match("[A-Za-z]", entry[edition]) else ""
    return re.compile(rf"(?<![{letters}\w-]){word}{plural}(?![{letters}\w-])", re.I)


def role(text: str, target: str) -> str:
    """``{term}`` for ``text``, naming ``target`` where the text is not the term itself (a plural; Sphinx matches
    terms whatever their case)."""
    return f"{{term}}`{text}`" if text.lower() == target.lower() else f"{{term}}`{text} <{target}>`"


def linkable(cell) -> bool:
    """A Markdown cell whose prose links terms: not a solution (student copies drop it) and not a directive."""
    return (cell.cell_type == "markdown" and "solution" not in cell.get("metadata", {}).get("tags", [])
            and not cell.source.lstrip().startswith("```"))


def first_uses(sources: list[str], edition: str) -> dict[int, list[tuple[int, int, str]]]:
    """{cell index: [(start, end, target)]} of each linked term's first use in the cells' prose, longest terms
    first, so that "KV cache" is taken before "cache" (whose first use is then the first one outside it)."""
    taken = {i: protected_spans(s) for i, s in enumerate(sources)}
    found: dict[int, list[tuple[int, int, str]]] = {}
    for entry in sorted(linked_terms(), key=lambda e: len(e[edition]), reverse=True):
        pattern = term_pattern(entry, edition)
        for i, source in enumerate(sources):
            hit = next((m for m in pattern.finditer(source)
                        if not any(a < m.end() and m.start() < b for a, b in taken[i])), None)
            if hit:
                taken[i].append(hit.span())
                found.setdefault(i, []).append((*hit.span(), term_name(entry, edition)))
                break
    return found


def with_roles(source: str, uses: list[tuple[int, int, str]]) -> str:
    for start, end, target in sorted(uses, reverse=True):
        source = source[:start] + role(" ".join(source[start:end].split()), target) + source[end:]
    return source


def linked(nb, edition: str):
    """Notebook ``nb`` with each linked term's first use in its prose written as a ``{term}`` role (in place).

    A notebook already linked is first turned back into plain prose, so running this again gives the same notebook.
    Returns the number of links."""
    cells = [c for c in nb.cells if linkable(c)]
    for c in cells:
        c.source = plain(c.source)
    uses = first_uses([c.source for c in cells], edition)
    for i, spans in uses.items():
        cells[i].source = with_roles(cells[i].source, spans)
    return sum(len(s) for s in uses.values())


def plain(markdown: str) -> str:
    """Markdown with every ``{term}`` role replaced by its text, as a renderer that knows no roles should show it."""
    return ROLE.sub(lambda m: m.group(1), markdown)


def role_targets(markdown: str) -> list[str]:
    """The terms the ``{term}`` roles of ``markdown`` name."""
    return [(m.group(2) or m.group(1)).strip() for m in ROLE.finditer(markdown)]
