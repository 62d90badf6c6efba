"""The notebooks read like a textbook (issue 37): the code cells compute and print plainly, the interpretation is
Markdown, the code fits the site's code box, and the helpers' modules are imported under their own names.

Counted by ``mic_tools.shape`` over the code cells of the ten English notebooks (the editions share them byte for
byte). ``python -m mic_tools.shape`` prints the same counts as a table.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from mic_tools import shape

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.md"))
MAX_SHARE = 0.12            # of code lines, at most this share builds sentences or claims
MAX_CALL_LINES = 4          # and no such call spans more lines than this


def test_at_most_an_eighth_of_the_code_builds_sentences():
    whole = sum((shape.notebook_shape(p) for p in NOTEBOOKS), shape.Shape())
    by_notebook = {p.stem: f"{shape.notebook_shape(p).share:.0%}" for p in NOTEBOOKS}
    assert whole.share <= MAX_SHARE, (f"{whole.sentence_lines} of {whole.code_lines} code lines build sentences "
                                      f"({whole.share:.1%}); by notebook: {by_notebook}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_sentence_or_claim_call_spans_more_than_four_lines(path):
    assert shape.notebook_shape(path).long_calls == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_code_line_fits_the_sites_code_box(path):
    """78 columns: what the site's code box shows at a 1280 px window (test_book_browser measures the real box)."""
    assert shape.notebook_shape(path).too_wide == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_helpers_modules_are_imported_under_their_own_names(path):
    imports = shape.notebook_shape(path).imports
    assert imports, f"{path.name} imports no helpers module"
    assert {m: n for m, n in imports.items() if n != shape.literal_name(m)} == {}


def test_the_counts_are_the_ones_the_issue_defines():
    """Known values on a cell written for the purpose: comments and blank lines are not code, a call's lines count
    once, a call over four lines is named, an alias is read, a line of 79 characters is too wide."""
    source = "\n".join([
        "from helpers import s08_speculative as S, s08_drafts as drafts",
        "# a comment",
        "",
        "x = 1",
        "say('{a} and {b}',",
        "    a=1,",
        "    b=2)",
        "helpers.claim(x > 0, 'x is positive', '{x}', x=x)",
        "message(",
        "    'one',",
        "    )",
        "say('{n}',",
        "    n=message('{m}',",
        "              m=1),",
        "    )",
        "y = " + "1" * 75,
    ])
    s = shape.cell_shape(source, "cell")
    assert (s.code_lines, s.sentence_lines, s.longest_call) == (14, 11, 4)
    assert s.long_calls == []
    assert len(s.too_wide) == 1
    assert s.imports == {"helpers.s08_speculative": "S", "helpers.s08_drafts": "drafts"}
    assert shape.literal_name("helpers.s08_speculative") == "speculative" != "S"
    assert shape.cell_shape("say(\n1,\n2,\n3,\n4)", "c").long_calls == ["c, line 1: say, 5 lines"]
