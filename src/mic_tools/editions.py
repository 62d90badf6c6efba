"""An edition's book: the book folder staged with the edition's notebooks, pages and language (issue 28).

``stage_edition(book, stage, "hi")`` copies ``book/`` to ``stage`` with

* the notebooks of ``notebooks/hi/`` (their code cells are the English ones: ``scripts/sync-editions``);
* each page of ``book/`` (intro, references) replaced by ``book/hi/<page>`` where the edition has one;
* the configuration's ``language`` set, and ``book/hi/_config.yml`` (the edition's title, say) merged over it.

The build runs the kernels with ``MIC_EDITION`` set (scripts/build-book), since the staged notebooks no longer sit
in a folder named after their edition.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import jupytext
import yaml

from mic_tools.exercises import without_solutions

# Where each edition's script font comes from (helpers.infra.messages.SCRIPT_FONTS names its family): the site
# (book/_ext/mic_editions.py) and the instructor view (instructor/voila.py) serve it themselves, so nothing is
# fetched from the internet and a machine without Indic fonts still shapes every word.
FONT_PACKAGES = {"hi": "fontpkg_noto_sans_devanagari"}


def font_file(edition: str) -> Path:
    """The font file of an edition's script, from the package that ships it."""
    import importlib

    package = FONT_PACKAGES[edition]
    files = sorted((Path(importlib.import_module(package).__file__).parent / "files").glob("*.ttf"))
    if not files:
        raise FileNotFoundError(f"The font package {package} holds no .ttf file.")
    return files[0]


def merged(base: dict, over: dict) -> dict:
    """``over`` merged into ``base``, dictionaries key by key."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def stage_edition(book: Path, stage: Path, edition: str, solutions: bool = True) -> Path:
    own = book / edition
    sources = book / "notebooks" / edition
    if not sources.is_dir():
        raise FileNotFoundError(f"No edition {edition!r}: {sources} does not exist.")
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    for item in book.iterdir():
        if item.name in ("_build", "notebooks", edition) or (item.is_dir() and len(item.name) == 2):
            continue                                   # outputs, sources and the editions' own folders
        mine = own / item.name
        (shutil.copytree if item.is_dir() else shutil.copy2)(mine if mine.exists() else item, stage / item.name)
    (stage / "notebooks").mkdir()
    for source in sorted(sources.glob("[0-9][0-9]-*.md")):
        nb = jupytext.read(source)
        jupytext.write(nb if solutions else without_solutions(nb), stage / "notebooks" / source.name, fmt="md:myst")
    config = yaml.safe_load((book / "_config.yml").read_text(encoding="utf8"))
    config["sphinx"].setdefault("config", {})["language"] = edition
    if (own / "_config.yml").exists():
        config = merged(config, yaml.safe_load((own / "_config.yml").read_text(encoding="utf8")) or {})
    if not solutions:
        config["sphinx"]["config"]["hide_solutions"] = True
    (stage / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf8")
    return stage
