"""The built page for teachers (book/teaching.md, issue 40) in every edition: its tables hold the recorded bench run
and every exercise, with the points the nbgrader course gives (book/_ext/mic_teaching.py)."""
from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path

import pytest

from mic_tools.assignments import POINTS, exercise_set

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "book" / "_build" / "html"
PAGES = {"en": SITE / "teaching.html", "hi": SITE / "hi" / "teaching.html", "ur": SITE / "ur" / "teaching.html"}
RUN = json.loads((ROOT / "book" / "_data" / "bench.json").read_text(encoding="utf8"))

sys.path.insert(0, str(ROOT / "book" / "_ext"))
from mic_teaching import exercises_of  # noqa: E402

needs_sites = pytest.mark.skipif(not all(p.exists() for p in PAGES.values()), reason="build the sites first (make book)")


PLAIN_QUOTES = str.maketrans("‘’“”", "''\"\"")     # Sphinx's smart quotes, undone


def tables(page: Path) -> list[list[list[str]]]:
    """Each table of a page as rows of cell texts, its header row first."""
    text = page.read_text(encoding="utf8")
    out = []
    for table in re.findall(r"<table.*?</table>", text, re.S):
        rows = re.findall(r"<tr.*?</tr>", table, re.S)
        out.append([[html.unescape(re.sub(r"<[^>]+>", "", cell)).strip().translate(PLAIN_QUOTES)
                     for cell in re.findall(r"<t[hd].*?</t[hd]>", row, re.S)] for row in rows])
    return out


@needs_sites
@pytest.mark.parametrize("edition", PAGES)
def test_the_resources_table_is_the_recorded_bench_run(edition):
    page = PAGES[edition]
    resources = next(t for t in tables(page) if len(t) == len(RUN["notebooks"]) + 1)
    for row, nb in zip(resources[1:], RUN["notebooks"]):
        assert row == [nb["name"], f"{nb['seconds']:.0f}", f"{nb['cpu_seconds']:.0f}", f"{nb['peak_mib']:,}"]
    text = html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf8")))
    for value in (RUN["date"], RUN["machine"]["processor"], f"{RUN['model_disk_mib']['gguf']:.0f}",
                  f"{max(nb['peak_mib'] for nb in RUN['notebooks']):,}"):
        assert value in text, f"{edition}: {value} is not said under the table"
    assert not re.search(r"\{[a-z_]+\}", text), f"{edition}: a field of the sentence is left unfilled"


@needs_sites
@pytest.mark.parametrize("edition", PAGES)
def test_the_exercise_table_lists_every_exercise_with_its_points_in_the_editions_words(edition):
    folder = ROOT / "notebooks" if edition == "en" else ROOT / "notebooks" / edition
    titles = exercises_of(folder)
    exercises = next(t for t in tables(PAGES[edition]) if len(t) == len(titles) + 1)
    assert len(titles) == sum(len(exercise_set(f"{s:02d}").exercises) for s in range(1, 11)) == 42
    for row, (ex_id, kind, subject) in zip(exercises[1:], titles):
        expected = POINTS[exercise_set(f"{int(ex_id.split('.')[0]):02d}")[ex_id].kind]
        assert row == [ex_id, kind, str(expected), subject]
    script = {"hi": "[\u0900-\u097F]", "ur": "[\u0600-\u06FF]"}.get(edition)
    if script:
        assert all(re.search(script, row[1]) for row in exercises[1:]), "a kind not in the edition's words"
