"""The editions hold together with the English chapter: the same code cells and structure, prose in the edition's
script, the glossary followed (the Hindi and Urdu editions)."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import jupytext
import pytest
import yaml

from mic_tools.glossary import plain
from script_module import load

ROOT = Path(__file__).resolve().parents[1]
ENGLISH = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.md"))
EDITIONS = {"hi": r"\u0900-\u097F",                      # edition: its script's letters (Devanagari,
            "ur": r"\u0600-\u06FF\u0750-\u077F\uFB50-\uFDFF\uFE70-\uFEFF"}  # Arabic, as Urdu writes it)
GLOSSARY_FILE = yaml.safe_load((ROOT / "locale" / "glossary.yml").read_text(encoding="utf8"))
GLOSSARY, SEED_ENGLISH = GLOSSARY_FILE["terms"], GLOSSARY_FILE["seed_english"]
PAIRS = [(ed, p) for ed in EDITIONS if (ROOT / "notebooks" / ed).is_dir() for p in ENGLISH]
IDS = [f"{ed}/{p.stem}" for ed, p in PAIRS]


def sync_module():
    return load("sync-editions")


def strip_unscripted(text: str) -> str:
    """Prose only: code blocks and spans, math, roles, link targets, directive and option lines removed; a glossary
    link ({term}`KV cache`) is prose, its text kept."""
    text = plain(text)
    text = re.sub(r"```.*?```", lambda m: "\n".join(l for l in m.group(0).split("\n")[1:-1]
                                                    if not l.startswith(":")) if m.group(0).startswith(
        ("```{exercise}", "```{solution-start}")) else "", text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$|\$[^$]+\$", " ", text, flags=re.S)     # inline math may wrap a line
    text = re.sub(r"\{\w+\}`[^`]*`|`[^`]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"<[^>]+>", " ", text)
    return text


def kept_terms() -> list[str]:
    """Glossary terms that stay English, longest first (so that "KV cache" is removed before "cache")."""
    return sorted({e["en"] for e in GLOSSARY if e["keep"]}, key=len, reverse=True)


def admissible_english() -> list[str]:
    """What the script check sets aside: the kept terms, and the words the seed itself writes in English."""
    translated = {e["en"].lower() for e in GLOSSARY if not e["keep"]}
    return kept_terms() + sorted({w for w in SEED_ENGLISH if w not in translated}, key=len, reverse=True)


@functools.lru_cache(maxsize=1)
def admissible_pattern() -> re.Pattern:
    alternatives = "|".join(re.escape(t) for t in admissible_english())
    return re.compile(rf"(?<![A-Za-z])(?:{alternatives})s?(?![A-Za-z])", re.I)


def script_share(paragraph: str, letters: str) -> tuple[int, int]:
    """(letters of the edition's script, Latin letters) of a paragraph, glossary terms kept in English excluded."""
    text = admissible_pattern().sub(" ", strip_unscripted(paragraph))
    return len(re.findall(f"[{letters}]", text)), len(re.findall(r"[A-Za-z]", text))


def paragraphs(md: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", strip_unscripted(md)) if re.search("[A-Za-z" + "".join(EDITIONS.values()) + "]", p)]


@pytest.mark.parametrize("edition, english", PAIRS, ids=IDS)
def test_code_cells_and_cell_structure_are_the_english_ones(edition, english):
    target = ROOT / "notebooks" / edition / english.name
    assert target.exists(), f"{target.relative_to(ROOT)} is missing: run scripts/sync-editions"
    assert sync_module().differences(jupytext.read(english), jupytext.read(target)) == []


def structure(md_cell: str) -> dict:
    return {"headings": re.findall(r"^(#+) ", md_cell, re.M),
            "math": len(re.findall(r"\$\$", md_cell)) + len(re.findall(r"(?<!\$)\$(?!\$)", md_cell)),
            "cites": re.findall(r"\{cite[^}]*\}`([^`]*)`", md_cell),
            "tables": len(re.findall(r"^\|", md_cell, re.M)),
            "directives": re.findall(r"^```\{([\w-]+)\}[^\n]*?(\d+\.\d+)?", md_cell, re.M),
            "options": re.findall(r"^:[\w-]+:.*$", md_cell, re.M),
            "links": re.findall(r"\]\(([^)]*)\)", md_cell)}


@pytest.mark.parametrize("edition, english", PAIRS, ids=IDS)
def test_markdown_has_the_english_structure(edition, english):
    target = ROOT / "notebooks" / edition / english.name
    for i, (e, t) in enumerate(zip(jupytext.read(english).cells, jupytext.read(target).cells)):
        if e.cell_type == "markdown":
            assert structure(t.source) == structure(e.source), f"{target.name}, cell {i}"


@pytest.mark.parametrize("edition, english", PAIRS, ids=IDS)
def test_no_paragraph_is_left_in_english(edition, english):
    target = ROOT / "notebooks" / edition / english.name
    left = []
    for c in jupytext.read(target).cells:
        if c.cell_type == "markdown":
            for p in paragraphs(c.source):
                ours, latin = script_share(p, EDITIONS[edition])
                if latin and ours <= latin:            # (nothing left but kept terms and code: fine)
                    left.append(p.strip()[:80])
    assert not left, f"{target.name}: {len(left)} paragraphs not in the edition's script, e.g. {left[:3]}"


@pytest.mark.parametrize("edition, english", PAIRS, ids=IDS)
def test_glossary_terms_are_rendered_as_the_glossary_says(edition, english):
    text = " ".join(strip_unscripted(c.source) for c in jupytext.read(ROOT / "notebooks" / edition / english.name).cells
                    if c.cell_type == "markdown")
    kept = kept_terms()
    wrong = sorted({e["en"] for e in GLOSSARY if not e["keep"] and e[edition] != e["en"]
                    and not any(e["en"].lower() in k.lower() and e["en"].lower() != k.lower() for k in kept)
                    and re.search(rf"(?<![A-Za-z]){re.escape(e['en'])}(?![A-Za-z])", text, re.I)})
    assert not wrong, f"English words the glossary translates: {wrong[:10]}"


RTL_PAIRS = [(ed, p) for ed, p in PAIRS if ed == "ur"]


@pytest.mark.parametrize("edition, english", RTL_PAIRS, ids=[f"{ed}/{p.stem}" for ed, p in RTL_PAIRS])
def test_a_right_to_left_notebook_says_so_in_its_first_markdown_cell(edition, english):
    """JupyterLab's stylesheet runs a notebook right to left when it holds this block (mic_tools.editions)."""
    first = next(c for c in jupytext.read(ROOT / "notebooks" / edition / english.name).cells if c.cell_type == "markdown")
    assert f'<div dir="rtl" lang="{edition}">' in first.source and "</div>" in first.source


SEEDS = {"hi": "000_57e4c014da2f0aa6.txt", "ur": "002_58e389474b4f4ae8.txt"}   # the chapter, in Hindi and Urdu


@pytest.mark.parametrize("edition", SEEDS)
def test_the_script_check_passes_the_seed_and_fails_english(edition):
    seed = ROOT.parent / "shared" / "seeds" / SEEDS[edition]
    if not seed.exists():
        pytest.skip("the seeds live beside the repository, not in a clone of it")
    letters = EDITIONS[edition]
    prose = [p for p in re.split(r"\n\s*\n", seed.read_text(encoding="utf8")) if re.search(f"[{letters}]", p)]
    shares = [script_share(p, letters) for p in prose]
    assert len(prose) > 20 and all(ours > latin for ours, latin in shares), \
        [p[:60] for p, (o, l) in zip(prose, shares) if o <= l][:3]
    english = paragraphs(ENGLISH[2].read_text(encoding="utf8"))
    assert all(script_share(p, letters)[0] == 0 for p in english)


# ----------------------------------------------------------------------------------------------- issue 38: one voice
# Everything an edition's reader reads: its notebooks' Markdown, its site pages, its message catalog's translations.
def edition_texts(edition: str) -> dict[str, str]:
    """{where: text} of everything written in ``edition``: Markdown cells (prose only), pages, catalog entries."""
    out = {}
    for p in sorted((ROOT / "notebooks" / edition).glob("[0-9][0-9]-*.md")):
        for i, c in enumerate(jupytext.read(p).cells):
            if c.cell_type == "markdown":
                out[f"{p.name}, cell {i}"] = strip_unscripted(c.source)
    for p in sorted((ROOT / "book" / edition).glob("*.md")):
        out[f"book/{edition}/{p.name}"] = strip_unscripted(p.read_text(encoding="utf8"))
    po = ROOT / "locale" / edition / "LC_MESSAGES" / "helpers.po"
    if po.exists():
        from babel.messages.pofile import read_po
        for m in read_po(po.open("rb")):
            if m.id and m.string:
                out[f"helpers.po: {m.id[:40]!r}"] = m.string
    return out


# A script's punctuation is inside its Unicode block (the danda ।, Urdu's ، ؛ ؟ ۔): it ends a word like a space does.
PUNCTUATION = "\u0964\u0965\u060C\u061B\u061F\u06D4"


def letter(letters: str) -> str:
    """A character class of the script's letters, its punctuation left out."""
    return rf"(?:(?![{PUNCTUATION}])[{letters}])"


def whole_word(form: str, letters: str) -> re.Pattern:
    return re.compile(rf"(?<!{letter(letters)}){re.escape(form)}(?!{letter(letters)})")


@pytest.mark.parametrize("edition", EDITIONS)
def test_no_edition_uses_a_word_the_glossary_avoids(edition):
    letters = EDITIONS[edition]
    found = []
    for entry in GLOSSARY_FILE["avoid"][edition]:
        found += [f"{where}: {form!r} (use {entry['use']})" for form in entry["forms"]
                  for where, text in edition_texts(edition).items() if whole_word(form, letters).search(text)]
    assert not found, f"{len(found)} uses of avoided words, e.g. {found[:8]}"


def test_the_avoided_words_are_whole_words():
    """योग is avoided, उपयोग (use) is not; فی is avoided, فیصد (percent) is not."""
    assert whole_word("योग", EDITIONS["hi"]).search("इसका योग 12 है")
    assert not whole_word("योग", EDITIONS["hi"]).search("इसका उपयोग और संयोग")
    assert not whole_word("فی", EDITIONS["ur"]).search("50 فیصد")
    assert whole_word("فی", EDITIONS["ur"]).search("10 ms فی token")
    assert whole_word("योग", EDITIONS["hi"]).search("इसका योग।") and whole_word("عوامل", EDITIONS["ur"]).search("دو عوامل،")


def raw_paragraphs(md: str) -> list[str]:
    """The paragraphs of ``md``, glossary links as their text (a term is linked in one notebook, not the next)."""
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", plain(md)) if p.strip()]


def translations_of_repeated_paragraphs(edition: str) -> dict[str, set[str]]:
    """{English paragraph written more than once in the chapter: its renderings in the edition}. Paragraphs are paired
    within a Markdown cell when the cell has as many of them in both; otherwise the whole cell is the unit."""
    seen: dict[str, list[str]] = {}
    for english in ENGLISH:
        target = ROOT / "notebooks" / edition / english.name
        for e, t in zip(jupytext.read(english).cells, jupytext.read(target).cells):
            if e.cell_type != "markdown":
                continue
            ep, tp = raw_paragraphs(e.source), raw_paragraphs(t.source)
            pairs = zip(ep, tp) if len(ep) == len(tp) else [(" ".join(ep), " ".join(tp))]
            for a, b in pairs:
                if re.search("[A-Za-z]{3}", strip_unscripted(a)):        # prose, not a fence or a bare label
                    seen.setdefault(a, []).append(b)
    return {a: set(bs) for a, bs in seen.items() if len(bs) > 1}


@pytest.mark.parametrize("edition", EDITIONS)
def test_a_repeated_english_paragraph_has_one_translation(edition):
    """The Exercises section opens with the same paragraph in every notebook: it is translated once, not ten ways."""
    repeated = translations_of_repeated_paragraphs(edition)
    assert repeated, "no English paragraph is repeated: the check checks nothing"
    differ = {a[:60]: len(bs) for a, bs in repeated.items() if len(bs) > 1}
    assert not differ, f"{edition}: repeated English paragraphs rendered several ways: {differ}"


# A word in front of a term that agrees with its gender: the possessive (का/की, کا/کی), "whole" (पूरा/पूरी, پورا/پوری)
# and "such" (ऐसा/ऐसी, ایسا/ایسی), right in front of the term (with a word between, it may belong to that word).
# A possessive in front of a term followed by a postposition may belong to a longer phrase ("हर scheme का layers पर
# median error": का goes with error), so there only the adjectives count.
AGREEING = {"hi": {"m": ["का", "पूरा", "ऐसा"], "f": ["की", "पूरी", "ऐसी"]},
            "ur": {"m": ["کا", "پورا", "ایسا"], "f": ["کی", "پوری", "ایسی"]}}
POSSESSIVES = {"का", "की", "کا", "کی"}
POSTPOSITIONS = {"hi": ["पर", "में", "से", "को", "तक"], "ur": ["پر", "میں", "سے", "کو", "تک"]}


def gender_mismatches(edition: str, texts: dict[str, str]) -> list[str]:
    letters, after = letter(EDITIONS[edition]), "|".join(POSTPOSITIONS[edition])
    bad = []
    for entry in GLOSSARY:
        gender = (entry.get("gender") or {}).get(edition)
        if not gender:
            continue
        term = re.escape(entry[edition])
        for word in AGREEING[edition]["f" if gender == "m" else "m"]:
            tail = rf"(?!\s+(?:{after})(?!{letters}))" if word in POSSESSIVES else ""
            pattern = re.compile(rf"(?<!{letters}){word}\s+{term}s?(?![A-Za-z])(?!{letters}){tail}", re.I)
            bad += [f"{where}: {m.group(0)!r} ({entry['en']} is {gender})" for where, text in texts.items()
                    for m in pattern.finditer(text)]
    return bad


def test_the_gender_check_finds_a_mismatch_and_passes_an_agreement():
    assert gender_mismatches("ur", {"a": "پوری attention اور loss کی attention، X کی cost weights"}) == []
    assert gender_mismatches("ur", {"a": "اس کا distribution"}) == ["a: 'کا distribution' (distribution is f)"]
    assert gender_mismatches("hi", {"a": "पूरी matrix, उसका batch, हर scheme का layers पर error"}) == []
    assert gender_mismatches("hi", {"a": "इसकी batch और पूरा matrix"}) == ["a: 'पूरा matrix' (matrix is f)"]
    assert gender_mismatches("ur", {"a": "اس کا attention، پھر"}) == ["a: 'کا attention' (attention is f)"]
    assert gender_mismatches("hi", {"a": "यह पूरा matrix।"}) == ["a: 'पूरा matrix' (matrix is f)"]


@pytest.mark.parametrize("edition", EDITIONS)
def test_a_term_with_a_gender_is_used_with_it(edition):
    bad = gender_mismatches(edition, edition_texts(edition))
    assert not bad, f"{len(bad)} disagreements, e.g. {bad[:8]}"
