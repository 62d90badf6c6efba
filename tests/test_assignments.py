"""mic_tools.assignments: each notebook as nbgrader's source version (issue 40), without nbgrader itself.
tests/test_grading.py runs nbgrader on the result."""
from __future__ import annotations

import ast
import builtins

import jupytext
import pytest

from helpers.infra import messages
from mic_tools import assignments

SECTIONS = [(edition, path) for edition in assignments.EDITIONS for path in assignments.edition_sources(edition)]


def graded_cells(nb) -> dict[str, dict]:
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells
            if c.metadata["nbgrader"]["grade"] or c.metadata["nbgrader"]["solution"]}


@pytest.mark.parametrize("edition, path", SECTIONS, ids=[f"{e}-{p.stem[:2]}" for e, p in SECTIONS])
def test_every_exercise_has_an_answer_cell_and_a_test_cell_with_its_points(edition, path):
    source = assignments.source_version(jupytext.read(path), path.name[:2])
    exercises = assignments.exercise_set(path.name[:2]).exercises
    cells = graded_cells(source)
    assert set(cells) == {f"ex{i.replace('.', '-')}-{part}" for i in exercises for part in ("answer", "test")}
    for ex_id, exercise in exercises.items():
        key = "ex" + ex_id.replace(".", "-")
        test = cells[f"{key}-test"]
        assert test.metadata["nbgrader"]["points"] == {"predict": 1, "explain": 1, "code": 2}[exercise.kind]
        assert test.metadata["nbgrader"]["locked"] and not cells[f"{key}-answer"].metadata["nbgrader"]["locked"]
        assert "### BEGIN HIDDEN TESTS\nassert graded.right" in test.source
        answer = cells[f"{key}-answer"].source
        assert answer.count("### BEGIN SOLUTION") == 1 and answer.index("### BEGIN SOLUTION") > 0
        ast.parse(answer)
    others = [c for c in source.cells if c.metadata["nbgrader"]["grade_id"] not in cells]
    assert all(c.metadata["nbgrader"]["locked"] for c in others)
    ids = [c.metadata["nbgrader"]["grade_id"] for c in source.cells]
    assert len(ids) == len(set(ids))
    assert not any("solution" in c.metadata.get("tags", []) for c in source.cells)


@pytest.mark.parametrize("path", assignments.edition_sources("en"), ids=lambda p: p.stem[:2])
def test_each_solution_runs_where_the_answer_cell_is(path):
    """No solution reads a name that only a cell below the answer cell binds (solution_code takes what it needs
    from there, or raises): checked here by the names each answer cell reads and the cells above it bind."""
    source = assignments.source_version(jupytext.read(path), path.name[:2])
    bound = set(dir(builtins))
    for cell in source.cells:
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source)
        if cell.metadata["nbgrader"]["grade_id"].endswith("-answer"):
            reads = set().union(*(assignments._uses(s) for s in tree.body))
            written = set().union(*(assignments._binds(s) for s in tree.body))
            assert reads - bound - written == set(), cell.metadata["nbgrader"]["grade_id"]
        bound |= set().union(set(), *(assignments._binds(s) for s in tree.body))


def test_editions_give_the_same_code_cells():
    """The same cells and code in every edition; only a solution's reasoning (its comments) is in the edition's
    language."""
    for en in assignments.edition_sources("en"):
        code = {}
        for edition in assignments.EDITIONS:
            path = en if edition == "en" else en.parent / edition / en.name
            nb = assignments.source_version(jupytext.read(path), en.name[:2])
            code[edition] = [(c.metadata["nbgrader"]["grade_id"], [line for line in c.source.splitlines()
                                                                   if not line.startswith("# ")])
                             for c in nb.cells if c.cell_type == "code"]
        assert code["hi"] == code["en"] == code["ur"], en.name


def test_an_answer_cell_splits_into_set_up_the_students_line_and_the_check():
    answer = assignments.split_answer(
        'facts = dict(a=1)\nanswer = None          # a number\nmore = 2\ncheck("9.9", answer, **facts)')
    assert (answer.id, answer.name) == ("9.9", "answer")
    assert answer.setup == "facts = dict(a=1)\nmore = 2"
    assert answer.student == "answer = None          # a number"
    assert answer.check == 'check("9.9", answer, **facts)'
    code = assignments.split_answer('def f(x):\n    return None        # your code here\n\ncheck("9.8", f)')
    assert (code.name, code.setup, code.student) == ("f", "", "def f(x):\n    return None        # your code here")
    assert assignments.split_answer("x = 1") is None
    with pytest.raises(ValueError, match="uses answer"):
        assignments.split_answer('facts = dict(a=answer)\nanswer = None\ncheck("9.7", answer, **facts)')


def test_a_solution_keeps_what_computes_the_answer_and_takes_a_measurement_from_below():
    solution = "# Solution\nstep = 2\nanswer = run.steps * step\nassert answer > 0\nsay('{a}', a=answer)"
    later = "run = simulate(lengths)\nsay('measured')"
    code = assignments.solution_code(solution, "answer", {"simulate", "lengths", "say"}, later)
    assert code == "run = simulate(lengths)\nstep = 2\nanswer = run.steps * step"
    with pytest.raises(ValueError, match="unknown"):
        assignments.solution_code("answer = unknown + 1", "answer", set())
    loop = "low = 0\nfor _ in range(3):\n    mid = low + 1\n    low = mid\nanswer = low"
    assert assignments.solution_code(loop, "answer", {"range"}) == loop


def test_an_assignment_folder_records_its_edition_for_the_kernel(tmp_path, monkeypatch):
    monkeypatch.delenv(messages.EDITION_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert messages.edition() == "en"
    (tmp_path / messages.EDITION_FILE).write_text("ur\n")
    assert messages.edition() == "ur"
    monkeypatch.setenv(messages.EDITION_ENV, "hi")
    assert messages.edition() == "hi"


def test_on_python_3_10_make_assignments_says_why_in_one_sentence(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(assignments.sys, "version_info", (3, 10, 14))
    assert assignments.main([str(tmp_path / "course")]) == 1
    said = capsys.readouterr().out.strip()
    assert said.count("\n") == 0 and "Python 3.11" in said and "3.10" in said
    assert not (tmp_path / "course").exists()


def test_the_release_check_finds_a_solution_left_in_and_nothing_in_a_clean_release(tmp_path):
    import re

    import nbformat
    source = assignments.source_version(jupytext.read(assignments.edition_sources("en")[-1]), "10")
    released = nbformat.from_dict(source)
    for cell in released.cells:
        cell.source = re.sub(assignments.REGION, "", cell.source, flags=re.S)     # what nbgrader releases
    nbformat.write(source, tmp_path / "source.ipynb")
    nbformat.write(released, tmp_path / "released.ipynb")
    assert assignments.released_problems(tmp_path / "source.ipynb", tmp_path / "released.ipynb") == []
    solution = re.search(assignments.REGION, graded_cells(source)["ex10-1-answer"].source, re.S).group(2)
    line = [ln for ln in solution.splitlines() if ln.strip() and not ln.startswith("#")][-1]
    released.cells[0].source += "\n" + line                      # a solution line left in another cell
    nbformat.write(released, tmp_path / "released.ipynb")
    problems = assignments.released_problems(tmp_path / "source.ipynb", tmp_path / "released.ipynb")
    assert problems == [f"released.ipynb: ex10-1-answer releases {line.strip()!r}"]
