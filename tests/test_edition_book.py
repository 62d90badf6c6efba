"""An edition's book is staged from its own notebooks and pages, in its language."""
from pathlib import Path

import jupytext
import yaml

from mic_tools.editions import stage_edition

ROOT = Path(__file__).resolve().parents[1]


def test_the_hindi_book_is_staged_from_the_hindi_notebooks(tmp_path):
    stage = stage_edition(ROOT / "book", tmp_path / "hi", "hi")
    config = yaml.safe_load((stage / "_config.yml").read_text(encoding="utf8"))
    assert config["sphinx"]["config"]["language"] == "hi"
    staged = sorted(p.name for p in (stage / "notebooks").glob("*.md"))
    assert staged == sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]-*.md"))
    for name in staged:
        a, b = jupytext.read(stage / "notebooks" / name), jupytext.read(ROOT / "notebooks" / "hi" / name)
        assert [c.source for c in a.cells] == [c.source for c in b.cells]
    assert (stage / "_toc.yml").read_text() == (ROOT / "book" / "_toc.yml").read_text()
    assert not (stage / "_build").exists()


def test_an_edition_without_solutions_drops_them(tmp_path):
    stage = stage_edition(ROOT / "book", tmp_path / "hi", "hi", solutions=False)
    for path in (stage / "notebooks").glob("*.md"):
        assert not any("solution" in c.metadata.get("tags", []) for c in jupytext.read(path).cells)
