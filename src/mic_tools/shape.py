"""How a notebook reads: the share of its code that builds sentences, and code that fits the page (issue 37).

A textbook's code cells compute and print plainly; what a measurement means is Markdown beside it. This module
measures how far a notebook's code is from that, the way ``tests/test_textbook_shape.py`` holds it:

* **code lines**: the non-blank, non-comment lines of its code cells (cells that are shell or magic commands
  left out), parsed with :mod:`ast`;
* **sentence lines**: the code lines covered by a call of ``say``, ``claim`` or ``message`` (whether written
  bare or as ``helpers.claim``), the calls that build a sentence or a claim;
* **the longest such call**, in lines;
* **lines too wide**: lines of code (comments included) longer than :data:`CODE_COLUMNS` characters, the site's
  code box at a 1280 px window (78 columns of its monospace font; the browser test measures the real box);
* **module names**: how each ``helpers`` module is imported (``from helpers import s08_speculative as
  speculative``): the name must be the module's own, its section prefix dropped (:func:`literal_name`).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import jupytext

SENTENCE_CALLS = {"say", "claim", "message"}
CODE_COLUMNS = 78
IDEA = re.compile(r"^s\d\d_(?P<name>[a-z0-9_]+)$")


@dataclass
class Shape:
    """One notebook's (or a sum of notebooks') code, counted."""
    code_lines: int = 0
    sentence_lines: int = 0
    longest_call: int = 0                                        # lines of the longest say/claim/message call
    long_calls: list[str] = field(default_factory=list)          # "cell N, line L: say, K lines" over the limit
    too_wide: list[str] = field(default_factory=list)            # "cell N: the line" for each line too wide
    imports: dict[str, str] = field(default_factory=dict)        # {module: the name it is imported as}

    @property
    def share(self) -> float:
        return self.sentence_lines / self.code_lines if self.code_lines else 0.0

    def __add__(self, other: "Shape") -> "Shape":
        return Shape(self.code_lines + other.code_lines, self.sentence_lines + other.sentence_lines,
                     max(self.longest_call, other.longest_call), self.long_calls + other.long_calls,
                     self.too_wide + other.too_wide, {**self.imports, **other.imports})


def literal_name(module: str) -> str:
    """The name a helpers module is imported as: ``helpers.s08_speculative`` -> ``speculative``,
    ``helpers.infra.plotting`` -> ``plotting``."""
    last = module.split(".")[-1]
    m = IDEA.match(last)
    return m.group("name") if m else last


def _call_name(node: ast.Call) -> str | None:
    return getattr(node.func, "id", None) or getattr(node.func, "attr", None)


def cell_shape(source: str, where: str = "", max_call_lines: int = 4) -> Shape:
    """Count one code cell (Python source)."""
    lines = source.split("\n")
    code = {i + 1 for i, line in enumerate(lines) if line.strip() and not line.strip().startswith("#")}
    shape = Shape(code_lines=len(code))
    shape.too_wide = [f"{where}: {line}" for line in lines if len(line) > CODE_COLUMNS]
    tree = ast.parse(source)
    covered: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) in SENTENCE_CALLS:
            span = range(node.lineno, node.end_lineno + 1)
            covered |= set(span) & code
            shape.longest_call = max(shape.longest_call, len(span))
            if len(span) > max_call_lines:
                shape.long_calls.append(f"{where}, line {node.lineno}: {_call_name(node)}, {len(span)} lines")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "helpers":
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if IDEA.match(alias.name) or node.module == "helpers.infra":     # a module, not a function
                    shape.imports[full] = alias.asname or alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("helpers.") and alias.asname:
                    shape.imports[alias.name] = alias.asname
    shape.sentence_lines = len(covered)
    return shape


def code_cells(path: Path) -> list[tuple[int, str]]:
    """(cell index, source) of a notebook's Python code cells."""
    nb = jupytext.read(path)
    return [(i, c.source) for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and not c.source.lstrip().startswith(("%", "!"))]


def notebook_shape(path: Path) -> Shape:
    total = Shape()
    for i, source in code_cells(path):
        total = total + cell_shape(source, f"{path.name}, cell {i}")
    return total


if __name__ == "__main__":                     # python -m mic_tools.shape notebooks/*.md: a table
    import sys

    paths = [Path(p) for p in sys.argv[1:]] or sorted(Path("notebooks").glob("[0-9][0-9]-*.md"))
    whole = Shape()
    print(f"{'notebook':28} {'code':>5} {'sentence':>8} {'share':>6} {'longest':>7} {'>4':>3} {'wide':>5}")
    for p in paths:
        s = notebook_shape(p)
        whole = whole + s
        print(f"{p.stem:28} {s.code_lines:5} {s.sentence_lines:8} {s.share:6.1%} {s.longest_call:7} "
              f"{len(s.long_calls):3} {len(s.too_wide):5}")
    print(f"{'all':28} {whole.code_lines:5} {whole.sentence_lines:8} {whole.share:6.1%} {whole.longest_call:7} "
          f"{len(whole.long_calls):3} {len(whole.too_wide):5}")
    bad = {m: n for m, n in whole.imports.items() if n != literal_name(m)}
    print("imports not under their literal names:", bad or "none")
