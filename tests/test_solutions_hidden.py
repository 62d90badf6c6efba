"""Solutions folded on the site, absent from the student copies and from the site a graded course publishes.

* ``make exercises`` (scripts/student-copies) writes notebooks with the exercises and no solution;
* the site shows every exercise, each solution behind a closed toggle that opens (in Chromium);
* the site built without solutions (``make book SOLUTIONS=no``; here from the executed notebooks of the book
  build, so nothing runs twice) holds no word of any solution in any file: pages, search index, sources.

Needs ``make book`` first for the site checks (``make test`` builds it).
"""
from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest
import snowballstemmer
from mic_tools.exercises import is_solution
from mic_tools.glossary import glossary_markdown

from test_book_browser import SITE, needs_site, serve

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.md"))
EXECUTED = SITE.parent / "jupyter_execute"
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{5,}")
ANY_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")      # a short word ("fine") shares a stem with a long one ("finely")


def solution_only_words() -> dict[str, set[str]]:
    """{notebook: words that appear in its solutions and nowhere else in the chapter}: a trace of a solution.

    Nowhere else means not even in another form: the search index holds stems ("proportion" and "proportional"
    are both "proport"), so a word whose stem occurs outside the solutions is no trace."""
    rest, found = set(), {}
    for source in [*NOTEBOOKS, *(ROOT / "book").glob("*.md")]:
        if source.parent.name == "notebooks":
            nb = jupytext.read(source)
            rest |= {w.lower() for c in nb.cells if not is_solution(c) for w in ANY_WORD.findall(c.source)}
            found[source.stem] = {w.lower() for c in nb.cells if is_solution(c) for w in WORD.findall(c.source)}
        else:
            rest |= {w.lower() for w in ANY_WORD.findall(source.read_text(encoding="utf8"))}
    rest |= {w.lower() for w in ANY_WORD.findall(glossary_markdown("en"))}     # the glossary page's generated terms
    stem = snowballstemmer.stemmer("porter").stemWord        # Sphinx's English stemmer, as its search index uses
    rest_stems = {stem(w) for w in rest}
    return {name: {w for w in words - rest if stem(w) not in rest_stems} for name, words in found.items()}


def site_text(site: Path) -> str:
    """Every text file of a site, HTML tags removed and entities decoded, in one lower-case string."""
    parts = []
    for path in site.rglob("*"):
        if path.is_file() and path.suffix in (".html", ".js", ".txt", ".md", ".ipynb", ".json"):
            if path.name in ("plotly.min.js",) or "mathjax" in path.parts or "_static" in path.parts:
                continue
            text = path.read_text(encoding="utf8", errors="replace")
            parts.append(html.unescape(re.sub(r"<[^>]+>", "", text)) if path.suffix == ".html" else text)
    return "\n".join(parts).lower()


def test_student_copies_hold_the_exercises_and_no_solution(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "scripts/student-copies"), str(tmp_path)], capture_output=True,
                         text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    words = solution_only_words()
    for source in NOTEBOOKS:
        copy = nbformat.read(tmp_path / (source.stem + ".ipynb"), as_version=4)
        assert not any(is_solution(c) for c in copy.cells)
        text = "\n".join(c.source for c in copy.cells)
        assert "{solution-start}" not in text and "{solution-end}" not in text
        assert re.search(r"^```\{exercise\}", text, re.M), f"{source.stem}: the exercises are missing"
        assert not {w for w in words[source.stem] if re.search(rf"\b{re.escape(w)}\b", text, re.I)}
        assert not any(c.get("outputs") for c in copy.cells if c.cell_type == "code")
        original = jupytext.read(source)
        assert len(copy.cells) == sum(not is_solution(c) for c in original.cells)


def test_every_notebook_has_words_only_its_solutions_use():
    """The check below needs traces to look for: each notebook's solutions must leave some."""
    assert all(solution_only_words().values()), {k for k, v in solution_only_words().items() if not v}


@needs_site
def test_the_site_holds_every_solution_folded():
    words = solution_only_words()
    text = site_text(SITE)
    assert "solution to exercise" in text
    for name, ws in words.items():
        assert any(re.search(rf"\b{re.escape(w)}\b", text) for w in ws), f"{name}: no solution on the site"


@pytest.fixture(scope="module")
def no_solutions_site(tmp_path_factory):
    if not EXECUTED.exists():
        pytest.skip("build the book first: make book")
    out = tmp_path_factory.mktemp("no-solutions")
    run = subprocess.run([sys.executable, str(ROOT / "scripts/build-book"), str(ROOT / "book"), "--no-solutions",
                          "--executed", str(EXECUTED), "--path-output", str(out)], capture_output=True, text=True,
                         cwd=ROOT, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:]
    return out / "_build" / "html"


def test_the_site_without_solutions_holds_no_trace_of_one(no_solutions_site):
    text = site_text(no_solutions_site)
    assert "exercise (" in text                        # the exercises are there
    assert "solution to exercise" not in text
    stem = snowballstemmer.stemmer("porter").stemWord
    index = (no_solutions_site / "searchindex.js").read_text(encoding="utf8").lower()
    for name, words in solution_only_words().items():
        on_page = {w for w in words if re.search(rf"\b{re.escape(w)}\b", text)}
        assert not on_page, f"{name}: solution words in the site without solutions: {sorted(on_page)[:5]}"
        indexed = {w for w in words if f'"{stem(w)}":' in index}
        assert not indexed, f"{name}: solution words in its search index: {sorted(indexed)[:5]}"


@needs_site
def test_each_page_shows_its_exercises_with_solutions_closed_and_one_opens(browser):
    with serve(SITE) as url:
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        opened = False
        for source in NOTEBOOKS:
            n = len(re.findall(r"^```\{exercise\}", source.read_text(encoding="utf8"), re.M))
            page.goto(f"{url}/notebooks/{source.stem}.html", wait_until="load")
            page.wait_for_timeout(300)
            exercises, solutions = page.locator("div.exercise.admonition"), page.locator("div.solution.admonition")
            assert exercises.count() == n and solutions.count() == n, source.stem
            for i in range(n):
                assert exercises.nth(i).is_visible()
                assert not solutions.nth(i).locator("section, .cell").first.is_visible(), f"{source.stem}: open"
            if n and not opened:                                    # open one: its reasoning and code show
                solutions.first.locator("button.toggle-button").click()
                page.wait_for_timeout(500)
                assert solutions.first.locator(".cell_input pre").first.is_visible()
                assert "right" in solutions.first.locator(".cell_output").first.inner_text()
                opened = True
        assert opened
        page.close()
