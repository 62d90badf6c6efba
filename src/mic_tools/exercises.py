"""The chapter without its solutions: student copies (``make exercises``) and the site a graded course publishes
(``make book SOLUTIONS=no``).

A solution is every cell tagged ``solution`` (AUTHORING.md, Exercises): the ``{solution-start}`` Markdown cell with
its reasoning, the code, and the ``{solution-end}`` cell. Removing those cells removes the solution whole, so
neither its prose nor its code reaches a student copy, a page, the search index or a page's downloadable source.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import jupytext
import nbformat
import yaml

SOLUTION_TAG = "solution"


def is_solution(cell) -> bool:
    return SOLUTION_TAG in cell.get("metadata", {}).get("tags", [])


def without_solutions(nb):
    """A copy of notebook ``nb`` with every solution cell removed (outputs of the other cells kept)."""
    out = nbformat.from_dict(nb)
    out.cells = [c for c in out.cells if not is_solution(c)]
    return out


def write_student_copies(sources: list[Path], folder: Path) -> list[Path]:
    """Write ``folder/NN-name.ipynb`` for each jupytext source: no solutions, no outputs. Returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for source in sources:
        nb = without_solutions(jupytext.read(source))
        nb.metadata.pop("jupytext", None)            # a plain notebook, not paired with a source it no longer matches
        path = folder / (source.stem + ".ipynb")
        nbformat.write(nb, path)
        written.append(path)
    return written


def read_executed(stage: Path, config: dict) -> None:
    """Turn a staged book whose notebooks are executed ``.ipynb`` copies into one that reads them as they are:
    its pages link them by their new names, and its configuration executes nothing and no longer skips them."""
    for page in stage.glob("*.md"):      # the introduction links the notebooks by file name
        text = page.read_text(encoding="utf8")
        for nb in (stage / "notebooks").glob("*.ipynb"):
            text = text.replace(f"(notebooks/{nb.stem}.md)", f"(notebooks/{nb.name})")
        page.write_text(text, encoding="utf8")
    config["execute"]["execute_notebooks"] = "off"
    config["exclude_patterns"] = [p for p in config["exclude_patterns"] if p != "**.ipynb"]


def stage_book(book: Path, stage: Path, executed: Path | None = None, solutions: bool = False) -> Path:
    """Copy the book folder to ``stage`` with every notebook replaced by its copy without solutions (with them
    where ``solutions``).

    Without ``executed`` the copies are jupytext sources and the build executes them, as ``make book`` does.
    With ``executed`` (a folder of executed notebooks, e.g. ``book/_build/jupyter_execute``) each copy is the
    source, its Markdown as written now (a glossary link added since that run shows), with that run's outputs, and
    the staged configuration turns execution off: the same site, built in a minute, from a run that has already
    measured everything (the tests build it that way).
    """
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    for item in book.iterdir():
        if item.name in ("_build", "notebooks") or (item.is_dir() and len(item.name) == 2):
            continue                                   # outputs, sources and the editions' own folders
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, stage / item.name)
    notebooks = stage / "notebooks"
    notebooks.mkdir()
    config = yaml.safe_load((book / "_config.yml").read_text(encoding="utf8"))
    for source in sorted((book / "notebooks").glob("[0-9][0-9]-*.md")):
        nb = jupytext.read(source)
        nb = nb if solutions else without_solutions(nb)
        if executed is None:
            jupytext.write(nb, notebooks / source.name, fmt="md:myst")
            continue
        from mic_tools.rerender import with_english_outputs      # needs the helpers' kernel side
        done = executed / "notebooks" / (source.stem + ".ipynb")
        if not done.exists():
            raise FileNotFoundError(f"No executed copy of {source.name} in {executed}: build the book first.")
        nbformat.write(with_english_outputs(nb, nbformat.read(done, as_version=4), "en"), notebooks / done.name)
    if executed is not None:
        read_executed(stage, config)
    if not solutions:
        config["sphinx"].setdefault("config", {})["hide_solutions"] = True     # sphinx-exercise: none left to hide
    (stage / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf8")
    return stage
