"""The package's layout shows the chapter, and every place that lists the notebooks lists all of them.

* ``src/helpers``: infrastructure in ``infra/``, each idea module named ``sNN_name`` by its section; an idea
  module imports the infrastructure and its own or earlier sections only, never another module's private
  names; no import cycles; project imports at the top of a module; a module is read in one sitting.
* The book's table of contents, its introduction and the package index (``helpers/__init__.py``) name
  every notebook; the index names every module.
* Every sentence a notebook prints, every claim and every figure title is a template with named fields,
  not an f-string (``helpers.infra.messages``); no notebook prints a helper's source.
"""
from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jupytext
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "helpers"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.md"))
MAX_LINES = 350
IDEA = re.compile(r"^s(\d\d)_[a-z0-9_]+$")


def modules() -> dict[str, Path]:
    """{dotted name under helpers: path} for every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        if "__pycache__" in rel.parts:
            continue
        out[".".join(rel.parts)] = path
    return out


def section_of(name: str) -> int | None:
    """The section an idea module belongs to (``s08_drafts`` -> 8); None for infrastructure."""
    m = IDEA.match(name)
    return int(m.group(1)) if m else None


def project_imports(name: str, path: Path) -> list[tuple[str, list[str], ast.AST, bool]]:
    """(module imported, names imported from it, node, at top level) for each import of another helpers module."""
    tree = ast.parse(path.read_text())
    top = set(map(id, tree.body))
    package = name.split(".")[:-1]                       # the package the module sits in
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == "helpers":
                target = ".".join(node.module.split(".")[1:])
            else:
                continue
            for alias in node.names:                     # `from . import s01_kv_cache` imports a module
                full = f"{target}.{alias.name}" if target else alias.name
                is_module = full in modules()
                out.append((full if is_module else target, [] if is_module else [alias.name], node, id(node) in top))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "helpers":
                    out.append((".".join(alias.name.split(".")[1:]), [], node, id(node) in top))
    return out


def test_the_listing_reads_in_chapter_order_with_infrastructure_apart():
    names = [n for n in modules() if not n.startswith("__")]
    ideas = [n for n in names if "." not in n]
    assert all(section_of(n) for n in ideas), f"an idea module must be named sNN_name: {ideas}"
    assert {n.split(".")[0] for n in names if "." in n} == {"infra"}, "only infra/ is a subpackage"
    assert sorted({section_of(n) for n in ideas}) == list(range(1, len(NOTEBOOKS) + 1)), \
        "every section has its module(s), numbered like the notebooks"


def test_no_cycles_no_later_sections_no_private_names_and_project_imports_at_the_top():
    graph: dict[str, set[str]] = {}
    problems = []
    for name, path in modules().items():
        graph[name] = set()
        mine = section_of(name.split(".")[0]) if "." not in name else None
        for target, imported, node, at_top in project_imports(name, path):
            if target in ("", "__init__") or target not in modules():
                target = target or "__init__"
            graph[name].add(target)
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if not at_top:
                problems.append(f"{where} imports {target} inside a function")
            if any(n.startswith("_") for n in imported):
                problems.append(f"{where} imports private names {imported} from {target}")
            theirs = section_of(target) if "." not in target else None
            if name.startswith("infra.") and theirs is not None:
                problems.append(f"{where}: infrastructure imports the idea module {target}")
            if mine is not None and theirs is not None and theirs > mine:
                problems.append(f"{where}: section {mine} imports a later section's module {target}")
    assert not problems, "\n".join(problems)

    cycle = find_cycle(graph)
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` ({module: modules it imports}) as a path back to its start, or []."""
    done: set[str] = set()

    def visit(n: str, trail: list[str]) -> list[str]:
        if n in trail:
            return trail[trail.index(n):] + [n]
        if n in done:
            return []
        for m in sorted(graph.get(n, ())):
            cycle = visit(m, trail + [n])
            if cycle:
                return cycle
        done.add(n)
        return []
    for n in sorted(graph):
        cycle = visit(n, [])
        if cycle:
            return cycle
    return []


def test_the_cycle_check_finds_a_cycle():
    assert find_cycle({"s08_a": {"s08_b"}, "s08_b": {"s08_a"}, "infra.x": set()}) == ["s08_a", "s08_b", "s08_a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_every_module_names_its_section_and_is_read_in_one_sitting():
    problems = []
    for name, path in modules().items():
        if name.startswith("__"):
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        n = section_of(name) if "." not in name else None
        if n is not None and not re.search(rf"\b[Ss]ection {n}\b|notebooks/{n:02d}-", doc):
            problems.append(f"{name}: the docstring does not name section {n}")
        if name.startswith("infra.") and "infrastructure" not in doc.lower():
            problems.append(f"{name}: the docstring does not say it is infrastructure")
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            problems.append(f"{name}: {lines} lines (at most {MAX_LINES})")
    assert not problems, "\n".join(problems)


def test_the_toc_the_intro_and_the_package_index_name_every_notebook_and_module():
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    listed = [c["file"] for c in toc["chapters"] if c["file"].startswith("notebooks/")]
    assert listed == [f"notebooks/{nb.stem}" for nb in NOTEBOOKS], "book/_toc.yml must list every notebook, in order"
    intro = (ROOT / "book" / "intro.md").read_text()
    for i, nb in enumerate(NOTEBOOKS, 1):
        assert re.search(rf"^{i}\. \[.+\]\(notebooks/{nb.name}\)", intro, re.M), \
            f"book/intro.md must link notebook {nb.name} as item {i}"
    index = (PACKAGE / "__init__.py").read_text()
    for nb in NOTEBOOKS:
        assert f"* {nb.stem}" in index, f"the package index (helpers/__init__.py) must list notebook {nb.stem}"
    for name in modules():
        if not name.startswith("__") and not name.endswith("__init__"):
            assert f":mod:`helpers.{name}`" in index, f"the package index must list helpers.{name}"


# ------------------------------------------------------------------ sentences are templates

TEMPLATE_CALLS = {"say", "claim", "message", "figure", "verdict"}
TITLE_KEYWORDS = {"title", "title_text", "xaxis_title", "yaxis_title", "statement", "evidence"}


def notebook_code(nb: Path) -> str:
    cells = [c.source for c in jupytext.read(nb).cells if c.cell_type == "code"]
    return "\n\n".join(re.sub(r"^\s*[%!].*$", "", c, flags=re.M) for c in cells)


def f_string_sentences(code: str) -> list[str]:
    """Calls that pass an f-string where a template belongs: say, claim, message, figure, or a title."""
    found = []
    for node in ast.walk(ast.parse(code)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        fname = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        args = list(node.args) if fname in TEMPLATE_CALLS else []
        args += [k.value for k in node.keywords if k.arg in TITLE_KEYWORDS]
        for a in args:
            if isinstance(a, ast.JoinedStr) or (isinstance(a, ast.BinOp) and isinstance(a.left, ast.JoinedStr)):
                found.append(f"line {node.lineno}: {fname}(f\"...\")")
    return found


def test_the_check_finds_an_f_string_sentence():
    assert f_string_sentences('say(f"{n} tokens")\nfig.update_layout(title=f"b = {b}")') == [
        'line 1: say(f"...")', 'line 2: update_layout(f"...")']
    assert f_string_sentences('say("{n:,} tokens", n=n)\nfigure("b = {b}", fields=dict(b=b))') == []


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_notebook_prints_templates_not_f_strings_and_no_helper_source(nb):
    code = notebook_code(nb)
    assert not f_string_sentences(code), f"{nb.name}: sentences must be templates: {f_string_sentences(code)}"
    assert "getsource" not in code, f"{nb.name} prints a helper's source: write the idea in the notebook instead"


def test_the_helpers_print_templates_not_f_strings():
    found = [f"{p.relative_to(ROOT)} {hit}" for p in modules().values() for hit in f_string_sentences(p.read_text())]
    assert not found, "\n".join(found)


# ------------------------------------------------------------------ sources jupytext leaves alone

@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_source_is_what_jupytext_writes_so_make_lab_never_rewrites_it(nb, tmp_path):
    """`make lab` runs `jupytext --sync`, which writes the .md as well as the .ipynb: a source in any other
    layout would change in a student's checkout the first time they open the chapter."""
    shutil.copy(ROOT / "jupytext.toml", tmp_path)
    copy = tmp_path / nb.name
    shutil.copy(nb, copy)
    subprocess.run([sys.executable, "-m", "jupytext", "--sync", "--quiet", str(copy)], check=True, cwd=tmp_path)
    assert copy.with_suffix(".ipynb").exists()
    assert copy.read_text() == nb.read_text(), f"jupytext rewrites {nb.name}: run it through `jupytext --sync` once"
