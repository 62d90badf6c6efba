"""The chapter as an nbgrader course (issue 40): ``make assignments``.

    python -m mic_tools.assignments build/course                 # every section, in every edition
    python -m mic_tools.assignments build/course --edition hi --section 03 10

writes ``nbgrader_config.py`` and ``source/<assignment>/``, one assignment per section and edition: ``03-cache-size``
(English), ``03-cache-size-hi``, ``03-cache-size-ur``. Each holds the section's notebook and ``edition.txt``, the
edition its kernel prints in (nbgrader's folders are not named ``hi`` or ``ur``; helpers.infra.messages.edition).
From there on the instructor's commands are nbgrader's own (README, "Teaching with this chapter").

Each exercise of a section becomes three cells:

* a locked set-up cell: what the answer cell computed before the student's line (the facts the checker is given);
* the **answer cell**, an nbgrader solution cell: the student's line as the chapter writes it (``answer = None``, or
  the function's stub), then, between nbgrader's solution markers, our folded solution (its reasoning as comments,
  its code without its own asserts). The released notebook keeps only the student's line, so Run All stays green;
* the **test cell**, locked and autograded: it prints the checker's one-sentence verdict, with its hint, and asserts
  that the verdict is right between nbgrader's hidden-test markers. Points: predict and explain 1, change the code 2.

Every other cell is locked (nbgrader restores a locked cell's source when it grades), so the set-up that the
checker's facts come from is the chapter's. The solutions' own cells (tagged ``solution``) are not copied.
"""
from __future__ import annotations

import argparse
import ast
import builtins
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from helpers.infra.messages import EDITION_FILE, EDITIONS

ROOT = Path(__file__).resolve().parents[2]
POINTS = {"predict": 1, "explain": 1, "code": 2}
COURSE_ID = "making-inference-cheap"
GRADED = "graded"                     # the test cell's name for the verdict (no notebook uses it)

NBGRADER_CONFIG = '''\
# The nbgrader course of "Making Inference Cheap", written by `make assignments` (src/mic_tools/assignments.py).
# Run nbgrader's commands in this folder; the README's "Teaching with this chapter" lists them in order.
c = get_config()  # noqa: F821 (nbgrader defines it)
c.CourseDirectory.course_id = "{course}"
# The released answer cell keeps the chapter's own line (answer = None, or the function's stub) and nothing in place
# of the solution, so that Run All of a blank notebook stays green.
c.ClearSolutions.code_stub = {{"python": ""}}
c.ClearSolutions.text_stub = ""
# A test cell the student deleted is put back before grading (nbgrader's default is to leave it out: issue 40),
# and a copied cell no longer stops autograding when it is (mic_tools.grading says why).
c.OverwriteCells.add_missing_cells = True
from mic_tools.grading import SANITIZE  # noqa: E402
c.Autograde.sanitize_preprocessors = SANITIZE
# A cell of a section may run for a minute or more on a student's 2 cores; nbgrader's default is 30 s.
c.Execute.timeout = 900
# The exchange between instructor and students. nbgrader's default is /srv/nbgrader/exchange, which a JupyterHub
# administrator creates (world-writable). To try the course alone on one machine, point it at a folder of yours:
# c.Exchange.root = "/tmp/exchange"
'''


@dataclass
class Answer:
    """One exercise's answer cell, split: set-up lines, the student's line, the check call (its source)."""
    id: str
    setup: str
    student: str
    check: str
    name: str               # what the answer is: "answer", or the function's name


def _lines(source: str, node) -> str:
    return "\n".join(source.splitlines()[node.lineno - 1:node.end_lineno])


def split_answer(source: str) -> Answer | None:
    """The parts of an answer cell, or None when ``source`` is not one: its last statement calls
    ``check("N.M", answer_or_function, ...)``, and an earlier one sets ``answer = None`` or defines that function."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return None
    if not body:
        return None
    last = body[-1]
    call = last.value if isinstance(last, ast.Expr) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "check"
            and len(call.args) >= 2 and isinstance(call.args[0], ast.Constant) and isinstance(call.args[1], ast.Name)):
        return None
    name = call.args[1].id
    student = [s for s in body[:-1] if (isinstance(s, ast.FunctionDef) and s.name == name) or (
        isinstance(s, ast.Assign) and [getattr(t, "id", None) for t in s.targets] == [name]
        and isinstance(s.value, ast.Constant) and s.value.value is None)]
    if len(student) != 1:
        raise ValueError(f"Exercise {call.args[0].value}: its answer cell must set {name} once: {source!r}")
    setup = [s for s in body[:-1] if s is not student[0]]
    for s in setup:
        if name in {n.id for n in ast.walk(s) if isinstance(n, ast.Name)}:
            raise ValueError(f"Exercise {call.args[0].value}: a set-up line uses {name}, the student's answer.")
    lines = source.splitlines()
    student_line = student[0].lineno - 1
    while student_line > 0 and lines[student_line - 1].lstrip().startswith("#"):   # its comment goes with it
        student_line -= 1
    return Answer(id=call.args[0].value, setup="\n".join(_lines(source, s) for s in setup),
                  student="\n".join(lines[student_line:student[0].end_lineno]), check=_lines(source, last), name=name)


def _binds(node) -> set[str]:
    """The names a top-level statement binds."""
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _uses(node) -> set[str]:
    """The names a top-level statement reads from outside itself: not a function's or lambda's arguments, not a
    comprehension's variables, and in a compound statement (a loop, say) not the names it binds before reading."""
    names = [n for n in ast.walk(node) if isinstance(n, ast.Name)]
    local = {a.arg for a in ast.walk(node) if isinstance(a, ast.arg)}
    local |= {n.id for c in ast.walk(node) if isinstance(c, ast.comprehension) for n in ast.walk(c.target)
              if isinstance(n, ast.Name)}
    if isinstance(node, (ast.For, ast.While, ast.If, ast.With, ast.FunctionDef)):
        first = {}
        for n in sorted(names, key=lambda n: (n.lineno, n.col_offset)):
            first.setdefault(n.id, n.ctx)
        local |= {name for name, ctx in first.items() if isinstance(ctx, ast.Store)}
    return {n.id for n in names if isinstance(n.ctx, ast.Load)} - local


def _slice(statements: list, needed: set[str]) -> tuple[list, set[str]]:
    """The statements (in order) that compute ``needed``, and the names they read that none of them binds."""
    keep = []
    for node in reversed(statements):
        if _binds(node) & needed:
            keep.insert(0, node)
            needed = (needed - _binds(node)) | _uses(node)
    return keep, needed


def solution_code(solution: str, name: str, available: set[str], later: str = "") -> str:
    """A folded solution's code, cut down to what computes the answer (``name``: ``answer`` or the function).

    The answer cell runs where the student's line is, before the cells that measure what the solution may
    cross-check against (``later``: the code between the answer cell and the solution). So the solution's asserts,
    its calls of ``check`` and what only illustrates the answer (a table, a sentence) are left out, and a
    measurement the answer itself is computed from is taken from ``later`` (its statements, put first).
    ``available`` names what the cells above the answer cell bind."""
    keep, needed = _slice([s for s in ast.parse(solution).body if not isinstance(s, ast.Assert)], {name})
    before, missing = _slice(ast.parse(later).body if later.strip() else [], needed - available)
    if missing - available:
        raise ValueError(f"A solution needs {sorted(missing - available)}, which no cell above it binds.")
    return "\n".join([_lines(later, s) for s in before] + [_lines(solution, s) for s in keep])


def reasoning(markdown: str) -> str:
    """A ``{solution-start}`` cell's prose, as Python comments (the instructor reads it in the source version)."""
    body = [line for line in markdown.splitlines()[1:] if not line.startswith(":") and line.strip() != "```"]
    text = " ".join(line.strip() for line in body if line.strip())
    return "\n".join("# " + line for line in textwrap.wrap(text, 74))


def solutions(nb) -> dict[str, dict]:
    """{exercise id: {"reasoning": comments, "code": its code cells, "first": the index of its first cell}}."""
    from mic_tools.exercises import is_solution

    found, current = {}, None
    for i, cell in enumerate(nb.cells):
        if not is_solution(cell):
            continue
        start = re.search(r"\{solution-start\}\s+ex-([\w.]+)", cell.source)
        if start:
            current = start.group(1)
            found[current] = dict(reasoning=reasoning(cell.source), code=[], first=i)
        elif "{solution-end}" in cell.source:
            current = None
        elif cell.cell_type == "code" and current:
            found[current]["code"].append(cell.source)
    return {k: dict(v, code="\n".join(v["code"])) for k, v in found.items()}


def _meta(cell, grade_id: str, *, solution=False, grade=False, locked=False, points=None):
    nbgrader = dict(grade=grade, grade_id=grade_id, locked=locked, schema_version=3, solution=solution, task=False)
    if points is not None:
        nbgrader["points"] = points
    cell.metadata["nbgrader"] = nbgrader
    return cell


def exercise_set(section: str):
    """The section's :class:`helpers.infra.exercises.ExerciseSet` (``helpers.s03_exercises.EXERCISES``)."""
    import importlib
    return importlib.import_module(f"helpers.s{section}_exercises").EXERCISES


def source_version(nb, section: str):
    """Notebook ``nb`` (a section's jupytext source, any edition) as nbgrader's source version (see the module)."""
    import nbformat

    from mic_tools.exercises import is_solution
    exercises, sols = exercise_set(section), solutions(nb)
    out = nbformat.v4.new_notebook(metadata=nb.metadata)
    out.metadata.pop("jupytext", None)
    locked = 0

    def lock(cell):
        nonlocal locked
        locked += 1
        return _meta(cell, f"s{section}-{locked:03d}", locked=True)

    bound = set(dir(builtins))          # what the cells above have bound, for the solutions (solution_code)
    for i, cell in enumerate(nb.cells):
        if is_solution(cell):
            continue
        answer = split_answer(cell.source) if cell.cell_type == "code" else None
        if answer is None:
            new = nbformat.v4.new_markdown_cell(cell.source) if cell.cell_type == "markdown" else \
                nbformat.v4.new_code_cell(cell.source) if cell.cell_type == "code" else nbformat.v4.new_raw_cell(cell.source)
            new.metadata.update({k: v for k, v in cell.metadata.items() if k != "tags" or v})
            out.cells.append(lock(new))
            if cell.cell_type == "code":
                bound |= set().union(*map(_binds, ast.parse(cell.source).body))
            continue
        if answer.id not in sols:
            raise ValueError(f"Section {section}: exercise {answer.id} has no folded solution.")
        key = "ex" + answer.id.replace(".", "-")
        if answer.setup:
            out.cells.append(lock(nbformat.v4.new_code_cell(answer.setup)))
            bound |= set().union(*map(_binds, ast.parse(answer.setup).body))
        sol = sols[answer.id]
        later = "\n".join(c.source for c in nb.cells[i + 1:sol["first"]] if c.cell_type == "code" and not is_solution(c))
        code = solution_code(sol["code"], answer.name, bound, later)
        student = "\n".join([answer.student, "### BEGIN SOLUTION", sol["reasoning"], code, "### END SOLUTION"])
        out.cells.append(_meta(nbformat.v4.new_code_cell(student), f"{key}-answer", solution=True))
        test = "\n".join([f"{GRADED} = {answer.check}", "### BEGIN HIDDEN TESTS",
                          f"assert {GRADED}.right, {GRADED}.sentence", "### END HIDDEN TESTS"])
        points = POINTS[exercises[answer.id].kind]
        out.cells.append(_meta(nbformat.v4.new_code_cell(test), f"{key}-test", grade=True, locked=True, points=points))
        bound |= {answer.name, GRADED}
    return out


def assignment_name(stem: str, edition: str) -> str:
    return stem if edition == "en" else f"{stem}-{edition}"


def edition_sources(edition: str) -> list[Path]:
    folder = ROOT / "notebooks" if edition == "en" else ROOT / "notebooks" / edition
    return sorted(folder.glob("[0-9][0-9]-*.md"))


def write_course(course: Path, editions=EDITIONS, sections=None) -> list[Path]:
    """Write ``course``'s ``nbgrader_config.py`` and ``source/<assignment>/``; returns the notebooks written."""
    import jupytext
    import nbformat

    course.mkdir(parents=True, exist_ok=True)
    (course / "nbgrader_config.py").write_text(NBGRADER_CONFIG.format(course=COURSE_ID), encoding="utf8")
    written = []
    for edition in editions:
        for path in edition_sources(edition):
            if sections and path.name[:2] not in sections:
                continue
            nb = jupytext.read(path)
            folder = course / "source" / assignment_name(path.stem, edition)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / EDITION_FILE).write_text(edition + "\n", encoding="utf8")
            source = source_version(nb, path.name[:2])
            source.metadata["mic_edition"] = edition
            target = folder / (path.stem + ".ipynb")
            nbformat.write(source, target)
            written.append(target)
    return written


def nbgrader(course: Path, *args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``nbgrader *args`` in ``course`` (or ``cwd``) with this environment's nbgrader (and its alembic); ``env``
    adds to the environment (its kernels inherit it)."""
    import os
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, **(env or {}), PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("MIC_EDITION", None)           # each assignment's edition.txt decides
    return subprocess.run([str(bin_dir / "nbgrader"), *args], cwd=cwd or course, env=env, capture_output=True,
                          text=True)


REGION = r"### BEGIN (SOLUTION|HIDDEN TESTS)\n(.*?)### END[^\n]*"


def released_problems(source_path: Path, released_path: Path) -> list[str]:
    """What is wrong with a released notebook, given its source version: an answer or test cell that is not the
    source's with its solution or hidden test taken out, a line of a solution or hidden test anywhere in it (unless
    the chapter has that line outside them too), or a stub nbgrader adds (NotImplementedError). Empty when none."""
    import nbformat
    source = nbformat.read(source_path, as_version=4)
    released = nbformat.read(released_path, as_version=4)
    text = "\n".join(c.source for c in released.cells)
    outside = "\n".join(re.sub(REGION, "", c.source, flags=re.S) for c in source.cells)
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in released.cells}
    problems = []
    for cell in source.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        if not grade_id.startswith("ex"):
            continue
        given = re.sub(REGION, "", cell.source, flags=re.S)
        if grade_id not in by_id:
            problems.append(f"{released_path.name}: cell {grade_id} is missing")
        elif by_id[grade_id].source.strip() != given.strip():
            problems.append(f"{released_path.name}: cell {grade_id} is released as {by_id[grade_id].source!r}")
        for _, region in re.findall(REGION, cell.source, re.S):
            problems += [f"{released_path.name}: {grade_id} releases {line.strip()!r}" for line in region.splitlines()
                         if len(line.strip()) > 12 and line.strip() in text and line.strip() not in outside]
    problems += [f"{released_path.name}: holds {word}" for word in ("NotImplementedError", "BEGIN SOLUTION",
                                                                     "BEGIN HIDDEN TESTS") if word in text]
    return problems


def generate_all(course: Path) -> list[str]:
    """``nbgrader generate_assignment`` for every assignment of ``course``; the problems found (empty when none)."""
    problems = []
    for folder in sorted((course / "source").iterdir()):
        run = nbgrader(course, "generate_assignment", folder.name, "--force")
        if run.returncode:
            problems.append(f"{folder.name}: nbgrader generate_assignment failed: {run.stderr.strip()[-2000:]}")
            continue
        for source in folder.glob("*.ipynb"):
            problems += released_problems(source, course / "release" / folder.name / source.name)
        print(f"{folder.name}: released", flush=True)
    return problems


def nbgrader_available() -> bool:
    """Whether nbgrader can be used here; on Python 3.10 it cannot, and this says so in one sentence."""
    if sys.version_info < (3, 11):
        print("Grading with nbgrader needs Python 3.11 or newer (nbgrader 0.9.6); this is Python "
              "{}.{}, so make assignments writes nothing.".format(*sys.version_info[:2]))
        return False
    try:
        import nbgrader  # noqa: F401
    except ImportError:
        print('nbgrader is not installed: pip install -e ".[grading]" (make install does it).')
        return False
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("course", type=Path, help="the course folder to write (e.g. build/course)")
    ap.add_argument("--edition", nargs="+", choices=EDITIONS, default=list(EDITIONS))
    ap.add_argument("--section", nargs="+", help="two-digit section numbers (default: every section)")
    ap.add_argument("--generate", action="store_true",
                    help="then run nbgrader generate_assignment on each and check what it released")
    args = ap.parse_args(argv)
    if not nbgrader_available():
        return 1
    for path in write_course(args.course, args.edition, args.section):
        print(path.relative_to(args.course))
    if args.generate:
        problems = generate_all(args.course)
        print("\n".join(problems) or f"Every assignment released, without a solution: {args.course / 'release'}")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
