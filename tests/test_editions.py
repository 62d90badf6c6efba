"""The editions hold together with the English chapter: the same code cells and structure, prose in the edition's
script, the glossary followed (the Hindi and Urdu editions)."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import jupytext
import pytest
import yaml

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
    """Prose only: code blocks and spans, math, roles, link targets, directive and option lines removed."""
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
