"""nbgrader end to end on a temporary course (issue 40): the chapter's exercises released, submitted, autograded and
fed back, with the gradebook read back. Sections 03 and 10 (the fastest two) in English, and 10 in Hindi.

Students: one who hands the notebook back blank (through nbgrader's exchange: release, fetch, submit, collect), one
who writes every solution, one who makes a named mistake in every exercise (the checker's first typical mistake),
and one who edits the notebook's structure: copies an answer cell, deletes a test cell.
"""
from __future__ import annotations

import ast
import getpass
import html
import re
import shutil
import string
import sys
from pathlib import Path

import nbformat
import pytest

from helpers.infra.messages import catalog
from mic_tools import assignments

pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="nbgrader 0.9.6 needs Python 3.11")

ASSIGNMENTS = {"03-cache-size": "en", "10-memory-budget": "en", "10-memory-budget-hi": "hi"}
BLANK, SOLVED, MISTAKEN, TINKERER = getpass.getuser(), "solved", "mistaken", "tinkerer"


def nbgrader(course: Path, *args: str, cwd: Path | None = None) -> None:
    run = assignments.nbgrader(course, *args, f"--Exchange.root={course.parent / 'exchange'}", cwd=cwd, env=KERNEL_ENV)
    assert run.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}"


def cells_by_id(nb) -> dict:
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id")}


def check_call(test_source: str) -> ast.Call:
    return ast.parse(test_source.splitlines()[0]).body[0].value


def mistaken_line(test_source: str, section: str) -> str:
    """The answer a student with the exercise's first typical mistake gives: computed from the same facts."""
    call = check_call(test_source)
    facts = ", ".join(ast.unparse(k) for k in call.keywords)
    name = call.args[1].id
    return (f"\nfrom helpers.s{section}_exercises import EXERCISES as _exercises\n"
            f"{name} = _exercises[{call.args[0].value!r}].mistakes[0].answer({facts})")


def submit(course: Path, student: str, assignment: str, nb) -> None:
    folder = course / "submitted" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / (assignment.removesuffix("-hi") + ".ipynb"))
    (folder / "timestamp.txt").write_text("2026-12-06 12:00:00.000000 UTC")


# The students' kernels load the tests' tiny second model, claims reported, as JupyterLab's checks do: what this
# file checks is nbgrader's plumbing, the same on any model, and a notebook runs in about two thirds of the time.
# That every solution is right on the default model is asserted by the book build, which runs each one.
KERNEL_ENV: dict = {}


@pytest.fixture(scope="module")
def course(tmp_path_factory, second_model_dir):
    KERNEL_ENV.update(MIC_MODEL=str(second_model_dir), MIC_CLAIMS="report")
    root = tmp_path_factory.mktemp("grading")
    course, home = root / "course", root / "home"
    assignments.write_course(course, ("en", "hi"), ["03", "10"])
    shutil.rmtree(course / "source" / "03-cache-size-hi")
    (root / "exchange").mkdir()
    (root / "exchange").chmod(0o777)            # nbgrader's exchange is writable by every student
    home.mkdir()
    nbgrader(course, "generate_assignment", "*", "--force")
    # One blank notebook goes through nbgrader's exchange, as a class's would; the other two are put in place.
    exchanged = "10-memory-budget"
    nbgrader(course, "release_assignment", exchanged, "--force")
    nbgrader(course, "fetch_assignment", exchanged, f"--course={assignments.COURSE_ID}", cwd=home)
    nbgrader(course, "submit", exchanged, f"--course={assignments.COURSE_ID}", cwd=home)
    nbgrader(course, "collect", exchanged)
    for a in ASSIGNMENTS:
        stem = a.removesuffix("-hi")
        source = nbformat.read(course / "source" / a / f"{stem}.ipynb", as_version=4)
        released = nbformat.read(course / "release" / a / f"{stem}.ipynb", as_version=4)
        src = cells_by_id(source)
        if a != exchanged:
            submit(course, BLANK, a, released)
        solved, mistaken = nbformat.from_dict(released), nbformat.from_dict(released)
        for gid, cell in cells_by_id(solved).items():
            if gid.endswith("-answer"):
                cell.source = src[gid].source                   # the solution, between its markers
        for gid, cell in cells_by_id(mistaken).items():
            if gid.endswith("-answer"):
                cell.source += mistaken_line(src[gid.replace("-answer", "-test")].source, a[:2])
        submit(course, SOLVED, a, solved)
        submit(course, MISTAKEN, a, mistaken)
        if a == "03-cache-size":
            submit(course, TINKERER, a, tinkered(solved, released))
    nbgrader(course, "autograde", "*", "--force")
    nbgrader(course, "generate_feedback", "*", "--force")
    return course


def tinkered(solved, released):
    """Section 03 solved, then edited: 3.1's answer cell copied just below itself, the copy answered and the
    original left blank; 3.2's the same, the copy pasted below the test cell; 3.4's test cell deleted."""
    nb = nbformat.from_dict(solved)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    for exercise, below in (("ex3-1", "ex3-1-answer"), ("ex3-2", "ex3-2-test")):
        original = nb.cells[ids.index(f"{exercise}-answer")]
        copy = nbformat.from_dict(original)
        copy.id = f"copy-{exercise}"
        original.source = cells_by_id(released)[f"{exercise}-answer"].source
        nb.cells.insert(ids.index(below) + 1, copy)
        ids.insert(ids.index(below) + 1, None)
    del nb.cells[ids.index("ex3-4-test")]
    return nb


def scores(course: Path, assignment: str, student: str) -> dict[str, float]:
    from nbgrader.api import Gradebook
    notebook = assignment.removesuffix("-hi")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook(notebook, assignment, student)
        return {g.name: g.score for g in nb.grades}


def max_points(course: Path, assignment: str) -> dict[str, float]:
    source = nbformat.read(next((course / "source" / assignment).glob("*.ipynb")), as_version=4)
    return {gid: c.metadata["nbgrader"]["points"] for gid, c in cells_by_id(source).items() if gid.endswith("-test")}


def feedback(course: Path, assignment: str, student: str) -> str:
    page = next((course / "feedback" / student / assignment).glob("*.html")).read_text(encoding="utf8")
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def literal_core(template: str) -> str:
    """The longest stretch of a hint's template that no field and no Markdown mark interrupts."""
    parts = [literal for literal, *_ in string.Formatter().parse(template)]
    pieces = [p.strip() for part in parts for p in re.split(r"[`*_]|\s{2,}", part)]
    return max(pieces, key=len)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_blank_scores_0_solutions_full_points(course, assignment):
    points = max_points(course, assignment)
    assert len(points) == 4 and set(points.values()) <= {1, 2}
    assert scores(course, assignment, BLANK) == dict.fromkeys(points, 0)
    assert scores(course, assignment, SOLVED) == points


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_named_mistake_scores_0_and_its_own_hint_is_in_the_feedback_in_the_editions_language(course, assignment):
    assert scores(course, assignment, MISTAKEN) == dict.fromkeys(max_points(course, assignment), 0)
    page = feedback(course, assignment, MISTAKEN)
    words = catalog(ASSIGNMENTS[assignment])
    exercises = assignments.exercise_set(assignment[:2])
    for exercise in exercises.exercises.values():
        hint = exercise.mistakes[0].hint
        core = literal_core(words.get(hint, hint))
        assert core in page, f"{assignment}: exercise {exercise.id}'s hint ({core!r}) is not in the feedback"
    if ASSIGNMENTS[assignment] == "hi":
        assert re.search("[\u0900-\u097F]", literal_core(words[exercises["10.1"].mistakes[0].hint]))


def test_a_deleted_test_cell_is_restored_and_a_copied_answer_counts_where_it_runs(course):
    got = scores(course, "03-cache-size", TINKERER)
    assert got == {"ex3-1-test": 1, "ex3-2-test": 0, "ex3-3-test": 1, "ex3-4-test": 2}
    graded = nbformat.read(course / "autograded" / TINKERER / "03-cache-size" / "03-cache-size.ipynb", as_version=4)
    restored = [c for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ex3-4-test"]
    assert len(restored) == 1 and "was missing from the submission" in restored[0].source


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_released_notebook_runs_clean_and_holds_no_solution(course, assignment):
    stem = assignment.removesuffix("-hi")
    assert assignments.released_problems(course / "source" / assignment / f"{stem}.ipynb",
                                         course / "release" / assignment / f"{stem}.ipynb") == []
    # Run All of the released notebook: the blank submission ran it, hidden tests restored; the only errors are
    # those tests' asserts, so without them (as released) every cell runs.
    graded = nbformat.read(course / "autograded" / BLANK / assignment / f"{stem}.ipynb", as_version=4)
    for cell in graded.cells:
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        gid = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        assert not errors or (gid.endswith("-test") and errors[0].ename == "AssertionError"), (gid, errors)
    solved = nbformat.read(course / "autograded" / SOLVED / assignment / f"{stem}.ipynb", as_version=4)
    assert not [o for c in solved.cells for o in c.get("outputs", []) if o.output_type == "error"]


def test_the_feedback_of_a_blank_notebook_says_not_attempted_in_hindi(course):
    words = catalog("hi")
    template = "Exercise {id}: not attempted yet. Replace None with your answer and run the cell again."
    assert literal_core(words[template]) in feedback(course, "10-memory-budget-hi", BLANK)
