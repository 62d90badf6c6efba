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
import nbformat
import yaml

from mic_tools.exercises import read_executed, without_solutions

# The fonts each edition's script is set in (helpers.infra.messages.SCRIPT_FONTS and FIGURE_FONTS name their
# families): the site (book/_ext/mic_editions.py), the instructor view (instructor/voila.py) and JupyterLab
# (write_notebook_stylesheet) serve them themselves, so nothing is fetched from the internet and a machine without
# Indic or Arabic-script fonts still shapes every word. Each face: (family, CSS weight, where its file is).
# Devanagari comes from PyPI; Nastaliq and Naskh from npm (fontsource's Arabic-script subsets, woff2), which
# `make install` puts under the environment's share/mic-fonts (NPM_FONTS; pyproject.toml cannot ask npm).
EDITIONS = {"en": "English", "hi": "हिंदी", "ur": "اردو"}   # code: the edition's name in its own language
NPM_FONTS = {"@fontsource/noto-nastaliq-urdu": "5.3.0", "@fontsource/noto-naskh-arabic": "5.3.0"}
FONT_FACES = {
    "hi": [("Noto Sans Devanagari", "100 900", ("pypi", "fontpkg_noto_sans_devanagari", "*.ttf"))],
    "ur": [("Noto Nastaliq Urdu", "400", ("npm", "noto-nastaliq-urdu", "*-arabic-400-normal.woff2")),
           ("Noto Nastaliq Urdu", "700", ("npm", "noto-nastaliq-urdu", "*-arabic-700-normal.woff2")),
           ("Noto Naskh Arabic", "400", ("npm", "noto-naskh-arabic", "*-arabic-400-normal.woff2")),
           ("Noto Naskh Arabic", "700", ("npm", "noto-naskh-arabic", "*-arabic-700-normal.woff2"))],
}


# Figures set Urdu in Naskh, which must not become a figure's "primary" font: that one (the first in the stack that
# has a space) gives every text its height, and Naskh's is tall enough that plotly.js's axis titles then cover their
# tick labels. Limited to Arabic letters, it draws those only, and Latin text keeps the Latin font's metrics.
UNICODE_RANGES = {"Noto Naskh Arabic": "U+0600-06FF, U+0750-077F, U+08A0-08FF, U+FB50-FDFF, U+FE70-FEFF"}


def npm_fonts_folder() -> Path:
    """Where ``make install`` puts the npm fonts: ``<environment>/share/mic-fonts/node_modules/@fontsource``."""
    import sys

    return Path(sys.prefix) / "share" / "mic-fonts" / "node_modules" / "@fontsource"


def install_npm_fonts() -> None:
    """``python -m mic_tools.editions``: the npm fonts into this environment (``make install`` runs it)."""
    import subprocess

    prefix = npm_fonts_folder().parents[1]
    if all((npm_fonts_folder() / name.split("/")[1] / "package.json").exists() for name in NPM_FONTS):
        return
    if shutil.which("npm") is None:
        raise SystemExit("The Urdu edition's fonts come from npm, which is not installed: install Node.js "
                         "(https://nodejs.org, or `conda install nodejs`) and run `make install` again.")
    prefix.mkdir(parents=True, exist_ok=True)
    subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-save", "--no-audit", "--no-fund",
                    "--no-package-lock", *(f"{name}@{version}" for name, version in NPM_FONTS.items())], check=True)


def font_file(source: tuple[str, str, str]) -> Path:
    """The file of one face, from the package that ships it."""
    import importlib

    kind, package, pattern = source
    folder = (Path(importlib.import_module(package).__file__).parent / "files" if kind == "pypi"
              else npm_fonts_folder() / package / "files")
    files = sorted(folder.glob(pattern))
    if not files:
        how = "make install" if kind == "npm" else f"pip install {package.replace('_', '-')}"
        raise FileNotFoundError(f"The font {package} is not installed ({folder / pattern} is missing): run {how}.")
    return files[0]


def font_faces(edition: str) -> list[tuple[str, str, Path, str]]:
    """(family, weight, file, the name it is served as) of each face an edition's script uses."""
    faces = []
    for family, weight, source in FONT_FACES.get(edition, []):
        path = font_file(source)
        faces.append((family, weight, path, f"{family.replace(' ', '-').lower()}-{weight.split()[0]}{path.suffix}"))
    return faces


def font_face_css(edition: str, url: str) -> list[str]:
    """The @font-face rules of an edition's fonts, served from ``url`` (a folder, ending in /)."""
    formats = {".ttf": "truetype", ".woff2": "woff2", ".woff": "woff"}
    return [f'@font-face {{ font-family: "{family}"; src: url("{url}{name}") format("{formats[path.suffix]}"); '
            f"font-weight: {weight}; font-display: swap;"
            + (f" unicode-range: {UNICODE_RANGES[family]};" if family in UNICODE_RANGES else "") + " }"
            for family, weight, path, name in font_faces(edition)]


# A right-to-left edition's notebook in JupyterLab or the instructor view, which have no right-to-left mode. Each Urdu
# notebook's first Markdown cell, and every sentence `say` prints, sit in a <div dir="rtl" lang="ur"> (JupyterLab's
# sanitizer keeps both attributes); a notebook holding one runs all its Markdown right to left, in Nastaliq, and
# keeps code, outputs, math and tables of numbers left to right. (JupyterLab keeps every cell in the page:
# its default windowing mode, contentVisibility, only skips drawing those off screen.)
NOTEBOOK_RTL_CSS = """
:is(.jp-Notebook, #rendered_cells):has([lang="ur"]) .jp-MarkdownCell :is(.jp-RenderedMarkdown, .myst),
.jp-RenderedHTMLCommon [lang="ur"] {
  direction: rtl; line-height: 2.2; font-family: "Noto Nastaliq Urdu", var(--jp-content-font-family); }
:is(.jp-Notebook, #rendered_cells):has([lang="ur"]) .jp-MarkdownCell :is(p, li, h1, h2, h3, h4, blockquote),
.jp-RenderedHTMLCommon [lang="ur"] :is(p, li) { direction: rtl; text-align: start; }
:is(.jp-Notebook, #rendered_cells):has([lang="ur"]) .jp-MarkdownCell :is(h1, h2, h3, h4) { line-height: 1.9; }
:is(.jp-Notebook, #rendered_cells):has([lang="ur"]) .jp-MarkdownCell :is(pre, code, mjx-container, .MathJax) {
  direction: ltr; unicode-bidi: isolate; }
"""


def notebook_stylesheet(url: str) -> str:
    """The stylesheet JupyterLab (custom.css) and the instructor view load: every edition's fonts, served from
    ``url``, and the right-to-left rules above."""
    return "\n".join(css for code in FONT_FACES for css in font_face_css(code, url)) + NOTEBOOK_RTL_CSS


def copy_fonts(folder: Path) -> None:
    """Every edition's font files into ``folder``, under the names font_face_css serves them by."""
    folder.mkdir(parents=True, exist_ok=True)
    for code in FONT_FACES:
        for _, _, path, name in font_faces(code):
            shutil.copyfile(path, folder / name)


def write_notebook_stylesheet(folder: Path, name: str) -> Path:
    """``folder/name`` with the stylesheet, and the fonts beside it in ``folder/fonts/``."""
    copy_fonts(folder / "fonts")
    (folder / name).write_text(notebook_stylesheet("fonts/"), encoding="utf8")
    return folder / name


def merged(base: dict, over: dict) -> dict:
    """``over`` merged into ``base``, dictionaries key by key."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def stage_edition(book: Path, stage: Path, edition: str, solutions: bool = True, executed: Path | None = None) -> Path:
    """Stage edition ``edition``'s book in ``stage``: the English book's files, its own pages over them, its notebooks.

    With ``executed`` (the English build's ``jupyter_execute`` folder) each notebook is written with the English
    run's outputs, said again in the edition's words (:mod:`mic_tools.rerender`), and the staged book executes
    nothing: the three sites show one run's numbers. Without it the notebooks are sources the build executes.
    """
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
        if executed is None:
            jupytext.write(nb if solutions else without_solutions(nb), stage / "notebooks" / source.name,
                           fmt="md:myst")
            continue
        from mic_tools.rerender import executed_path, with_english_outputs      # needs the helpers' kernel side
        done = executed_path(executed, source)
        if not done.exists():
            raise FileNotFoundError(f"No English execution of {source.name} in {executed}: build the English "
                                    "site first (make book).")
        nb = with_english_outputs(nb if solutions else without_solutions(nb), nbformat.read(done, as_version=4),
                                  edition)
        nbformat.write(nb, stage / "notebooks" / (source.stem + ".ipynb"))
    config = yaml.safe_load((book / "_config.yml").read_text(encoding="utf8"))
    config["sphinx"].setdefault("config", {})["language"] = edition
    if executed is not None:                       # the English run's outputs: nothing to execute
        read_executed(stage, config)
    if (own / "_config.yml").exists():
        config = merged(config, yaml.safe_load((own / "_config.yml").read_text(encoding="utf8")) or {})
    if not solutions:
        config["sphinx"]["config"]["hide_solutions"] = True
    (stage / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf8")
    return stage


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--lab"]:           # make lab: JupyterLab's custom.css (its config folder, sys.argv[2])
        write_notebook_stylesheet(Path(sys.argv[2]) / "custom", "custom.css")
    else:
        install_npm_fonts()
