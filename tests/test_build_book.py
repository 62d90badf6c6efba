"""scripts/build-book: a failed book build ends with why it failed (CI shows only the end of a log)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

NOTEBOOK = """\
---
jupytext:
  text_representation: {extension: .md, format_name: myst}
kernelspec: {display_name: Python 3, language: python, name: python3}
---
# A notebook whose claim fails

```{code-cell} ipython3
print("several lines of output" + "\\n" * 40)
assert 1 > 2, "The chapter's claim failed on the default model: one is more than two (1 against 2)."
```
"""


def test_a_failed_build_ends_with_the_failed_claim(tmp_path):
    (tmp_path / "_config.yml").write_text("title: t\nexecute:\n  execute_notebooks: force\n")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n- file: claims\n")
    (tmp_path / "intro.md").write_text("# Intro\n")
    (tmp_path / "claims.md").write_text(NOTEBOOK)
    run = subprocess.run([sys.executable, str(ROOT / "scripts/build-book"), str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    lines = run.stdout.rstrip().splitlines()
    assert "=== Why the book build failed ===" in lines, run.stdout[-3000:]
    why = lines[lines.index("=== Why the book build failed ==="):]      # the end of the output, and all of it
    assert len(why) < 10 and any("Executing notebook failed" in w for w in why), "\n".join(why)
    assert why[-1] == ("claims: AssertionError: The chapter's claim failed on the default model: "
                       "one is more than two (1 against 2)."), "\n".join(why)


def test_an_edition_is_rebuilt_only_when_what_it_is_built_from_changed(tmp_path):
    """make book-incremental: an edition's digest follows its pages, catalogs and the English run's notebooks."""
    from script_module import load
    build_book = load("build-book")
    book = tmp_path / "book"
    (tmp_path / "notebooks" / "hi").mkdir(parents=True)        # linked into the book, as in the repository
    book.mkdir()
    (book / "notebooks").symlink_to("../notebooks")
    (book / "notebooks" / "hi" / "01-a.md").write_text("# एक\n")
    executed = book / "_build" / "jupyter_execute"
    (executed / "notebooks").mkdir(parents=True)
    (executed / "notebooks" / "01-a.ipynb").write_text("{}")
    (book / "_build" / "html").mkdir()
    (book / "_build" / "html" / "page.html").write_text("built")

    def digest():
        return build_book.inputs_digest(book, "hi", executed, True)
    first = digest()
    assert digest() == first
    (book / "_build" / "html" / "page.html").write_text("built again")       # a build's own output: no change
    assert digest() == first
    (executed / "notebooks" / "01-a.ipynb").write_text('{"outputs": 1}')    # the English run measured again
    second = digest()
    assert second != first
    (book / "notebooks" / "hi" / "01-a.md").write_text("# दो\n")              # the edition's Markdown
    assert digest() != second
    hindi, urdu = digest(), build_book.inputs_digest(book, "ur", executed, True)
    assert urdu != hindi
    (book / "notebooks" / "hi" / "01-a.md").write_text("# तीन\n")            # another edition's change
    assert build_book.inputs_digest(book, "ur", executed, True) == urdu
