"""The tables of the page for teachers (book/teaching.md, issue 40), generated at build time, never typed.

* ``{teaching-exercises}``: every exercise of the chapter, its kind and points in the nbgrader course
  (mic_tools.assignments.POINTS) and what it asks, in the words of the edition's own exercise titles.
* ``{teaching-resources}``: what one student's kernel needs, section by section, from a recorded ``make bench`` run
  (``book/_data/bench.json``, written by ``scripts/bench.py --record``): wall time, CPU seconds, peak memory; and
  the run's date, machine and the disk the model takes.

The page's language supplies every word: the column headers are the directive's ``:columns:`` option, and the
sentence under a table is its body, a template with named fields that the directive fills from the data.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

EXERCISE = re.compile(r"\{exercise\}\s+(\d+)\.(\d+)\s+·\s+([^\n\"\\]+?)\s*(?:\\n|\n|\")")


def _table(header: list[str], rows: list[list[str]], numeric: set[int], numbers: bool = False) -> nodes.table:
    """A docutils table; ``numbers``: a table of numbers, which stays left to right in a right-to-left edition."""
    table = nodes.table(classes=["mic-teaching-table"] + (["mic-numbers-table"] if numbers else []))
    group = nodes.tgroup(cols=len(header))
    table += group
    group += [nodes.colspec(colwidth=1) for _ in header]
    head, body = nodes.thead(), nodes.tbody()
    group += [head, body]
    for cells, part in [(header, head)] + [(r, body) for r in rows]:
        row = nodes.row()
        for i, text in enumerate(cells):
            entry = nodes.entry(classes=["text-right"] if i in numeric else [])
            entry += nodes.paragraph(text=text)
            row += entry
        part += row
    return table


def _columns(argument: str) -> list[str]:
    return [c.strip() for c in argument.split("|")]


def exercises_of(notebooks: Path) -> list[tuple[str, str, str]]:
    """[(id, kind as the title says it, what it asks)] from the ``{exercise}`` titles of the notebooks in a folder
    ("3.1 · Predict, then measure: Qwen2.5-7B" gives ("3.1", "Predict, then measure", "Qwen2.5-7B"))."""
    found, paths = [], {}
    for path in sorted(notebooks.iterdir(), key=lambda p: p.suffix != ".md"):   # a source before its .ipynb
        if re.match(r"\d\d-.*\.(md|ipynb)$", path.name):
            paths.setdefault(path.stem, path)
    for path in sorted(paths.values()):
        for section, number, title in EXERCISE.findall(path.read_text(encoding="utf8")):
            kind, _, subject = title.partition(":")
            found.append((f"{int(section)}.{number}", kind.strip(), subject.strip()))
    return found


class TeachingExercises(SphinxDirective):
    """``{teaching-exercises}`` with ``:columns: exercise | kind | points | what it asks``."""
    option_spec = {"columns": directives.unchanged_required}

    def run(self):
        from mic_tools.assignments import POINTS, exercise_set
        rows = []
        for ex_id, kind, subject in exercises_of(Path(self.env.srcdir) / "notebooks"):
            points = POINTS[exercise_set(f"{int(ex_id.split('.')[0]):02d}")[ex_id].kind]
            rows.append([ex_id, kind, str(points), subject])
        self.env.note_dependency(str(Path(self.env.srcdir) / "notebooks"))
        return [_table(_columns(self.options["columns"]), rows, numeric={2})]


class TeachingResources(SphinxDirective):
    """``{teaching-resources}`` with ``:columns: section | wall time (s) | CPU (s) | peak memory (MiB)`` and, as
    its body, the sentence under the table with fields {date}, {processor}, {cores}, {memory_gib}, {model},
    {gguf_mib}, {cache_mib}, {total_seconds}, {total_cpu}, {largest_peak}."""
    option_spec = {"columns": directives.unchanged_required, "data": directives.unchanged}
    has_content = True

    def run(self):
        path = Path(self.env.srcdir) / self.options.get("data", "_data/bench.json")
        self.env.note_dependency(str(path))
        run = json.loads(path.read_text(encoding="utf8"))
        rows = [[nb["name"], f"{nb['seconds']:.0f}", f"{nb['cpu_seconds']:.0f}", f"{nb['peak_mib']:,}"]
                for nb in run["notebooks"]]
        fields = dict(date=run["date"], model=run["model"], **run["machine"],
                      gguf_mib=f"{run['model_disk_mib']['gguf']:.0f}", cache_mib=f"{run['model_disk_mib']['cache']:.0f}",
                      total_seconds=f"{sum(nb['seconds'] for nb in run['notebooks']) / 60:.1f}",
                      total_cpu=f"{sum(nb['cpu_seconds'] for nb in run['notebooks']) / 60:.1f}",
                      largest_peak=f"{max(nb['peak_mib'] for nb in run['notebooks']):,}")
        out = [_table(_columns(self.options["columns"]), rows, numeric={1, 2, 3}, numbers=True)]
        if self.content:
            sentence = " ".join(self.content).format(**fields)
            para = nodes.paragraph()
            text_nodes, messages = self.state.inline_text(sentence, self.lineno)
            para += text_nodes
            out += [para, *messages]
        return out


def setup(app):
    app.add_directive("teaching-exercises", TeachingExercises)
    app.add_directive("teaching-resources", TeachingResources)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
