"""Every section's exercises: checkers that can tell right from each typical mistake, and notebooks laid out so
that solutions fold in JupyterLab, toggle on the site and can be removed whole.

The solutions themselves run inside the notebooks (``assert check(...).right``): on the default model in the
book build, on the second architecture in ``tests/test_second_model.py``.
"""
from __future__ import annotations

import importlib
import re
from collections import Counter
from pathlib import Path

import jupytext
import pytest

from helpers.infra.exercises import CODE, EXPLAIN, NOT_ATTEMPTED, PREDICT, RIGHT, WRONG, Exercise, ExerciseSet
from helpers.infra.messages import message

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.md"))
EXERCISE = re.compile(r"^```\{exercise\} (\d+\.\d+) · (.+)\n:label: ex-(\d+\.\d+)\n:nonumber:\n", re.M)


def section(nb_path: Path) -> int:
    return int(nb_path.name[:2])


def exercise_set(n: int) -> ExerciseSet:
    return importlib.import_module(f"helpers.s{n:02d}_exercises").EXERCISES


def all_exercises() -> list[tuple[ExerciseSet, Exercise]]:
    """Every section's exercises (a section without its module fails the notebook tests below, not collection)."""
    out = []
    for p in NOTEBOOKS:
        try:
            out += [(exercise_set(section(p)), ex) for ex in exercise_set(section(p)).exercises.values()]
        except ModuleNotFoundError:
            pass
    return out


EXERCISES = all_exercises()
IDS = [ex.id for _, ex in EXERCISES]


def stub(*args):
    return None


# --------------------------------------------------------------------------- the checkers


@pytest.mark.parametrize("exercises, ex", EXERCISES, ids=IDS)
def test_an_empty_answer_is_not_attempted(exercises, ex):
    for empty in (None, stub) if ex.kind == CODE else (None,):
        v = exercises.verdict(ex.id, empty, **ex.example)
        assert v.status == NOT_ATTEMPTED and "not attempted" in v.sentence and not v.right


@pytest.mark.parametrize("exercises, ex", EXERCISES, ids=IDS)
def test_the_right_answer_is_right(exercises, ex):
    v = exercises.verdict(ex.id, ex.answer(**ex.example), **ex.example)
    assert v.status == RIGHT and v.right, v.sentence


@pytest.mark.parametrize("exercises, ex", EXERCISES, ids=IDS)
def test_every_named_mistake_is_rejected_with_its_own_hint(exercises, ex):
    assert ex.mistakes, f"{ex.id} names no typical mistake"
    for mistake in ex.mistakes:
        v = exercises.verdict(ex.id, mistake.answer(**ex.example), **ex.example)
        assert v.status == WRONG, f"{ex.id}: the mistake '{mistake.hint}' was accepted"
        fields = {**ex.example, "answer": mistake.answer(**ex.example)}
        if callable(fields["answer"]):
            fields["answer"] = getattr(fields["answer"], "__name__", "your function")
        hint = message(mistake.hint, **{k: fields[k] for k in re.findall(r"\{(\w+)", mistake.hint)})
        assert hint in v.sentence, f"{ex.id}: {v.sentence!r} does not give the hint {hint!r}"


@pytest.mark.parametrize("exercises, ex", EXERCISES, ids=IDS)
def test_a_wrong_type_gets_one_sentence(exercises, ex):
    wrong = {"number": "twelve", "letter": "z", "function": 12}[ex.answer_type]
    v = exercises.verdict(ex.id, wrong, **ex.example)
    assert v.status == WRONG and "\n" not in v.sentence and v.sentence.startswith("✘")


@pytest.mark.parametrize("exercises, ex", [e for e in EXERCISES if e[1].kind == CODE], ids=lambda e: getattr(e, "id", ""))
def test_a_function_that_raises_gets_one_sentence(exercises, ex):
    def broken(*args):
        raise KeyError("oops")
    v = exercises.verdict(ex.id, broken, **ex.example)
    assert v.status == WRONG and "KeyError" in v.sentence


def test_the_checker_accepts_a_right_answer_computed_another_way():
    from helpers.s03_exercises import EXERCISES as E3
    facts = E3["3.1"].example
    assert E3.verdict("3.1", 131072.0, **facts).right                        # a float, not an int
    import numpy as np
    assert E3.verdict("3.1", np.int64(2 * 32 * 8 * 128 * 2), **facts).right
    assert E3.verdict("3.3", 7.0000001, query_heads=14, kv_heads=2).right     # within the tolerance


def test_an_unknown_exercise_is_one_sentence():
    with pytest.raises(ValueError, match=r"There is no exercise 3\.9"):
        exercise_set(3).verdict("3.9", 1)


def test_check_says_the_sentence_and_shows_nothing_else(capsys):
    from helpers.s03_exercises import check
    shown = []
    import helpers.infra.exercises as infra_ex
    real = infra_ex.say
    infra_ex.say = lambda template, **f: shown.append(message(template, **f))
    try:
        v = check("3.2", 170, card_gib=8, tokens=4096, bytes_per_token=12_288)
    finally:
        infra_ex.say = real
    assert v.right and shown == ["✔ Exercise 3.2: right."]
    assert hasattr(v, "_ipython_display_")         # a cell ending in check(...) does not print the Verdict again


# --------------------------------------------------------------------------- the notebooks


def cells(path: Path):
    return jupytext.read(path).cells


def exercises_part(path: Path):
    """The cells from the notebook's last ``## Exercises`` heading on."""
    cs = cells(path)
    starts = [i for i, c in enumerate(cs) if c.cell_type == "markdown" and c.source.startswith("## Exercises")]
    assert starts, f"{path.name} has no '## Exercises' section"
    return cs[starts[-1]:]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_each_notebook_ends_with_three_to_five_exercises_matching_its_checkers(path):
    part = exercises_part(path)
    assert not any(c.source.startswith("## ") for c in part[1:] if c.cell_type == "markdown"), "Exercises come last"
    found = [m for c in part if c.cell_type == "markdown" for m in EXERCISE.finditer(c.source)]
    n = section(path)
    ids = [m.group(1) for m in found]
    assert ids == [f"{n}.{k}" for k in range(1, len(ids) + 1)], f"{path.name}: exercises {ids}"
    assert 3 <= len(ids) <= 5
    assert all(m.group(1) == m.group(3) for m in found)
    assert ids == list(exercise_set(n).exercises), f"{path.name}: the notebook's exercises and the checkers differ"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_each_solution_is_folded_tagged_and_checked(path):
    part = exercises_part(path)
    for ex_id in exercise_set(section(path)).exercises:
        answer = [c for c in part if c.cell_type == "code" and f'check("{ex_id}"' in c.source
                  and "solution" not in c.metadata.get("tags", [])]
        assert answer, f"{ex_id}: no answer cell"
        assert re.search(r"^answer = None\b", answer[0].source, re.M) or "return None" in answer[0].source
        start = [i for i, c in enumerate(part) if f"{{solution-start}} ex-{ex_id}\n" in c.source]
        assert len(start) == 1, f"{ex_id}: one solution-start"
        end = next(i for i in range(start[0], len(part)) if "{solution-end}" in part[i].source)
        solution = part[start[0]:end + 1]
        for c in solution:
            assert "solution" in c.metadata.get("tags", []), f"{ex_id}: an untagged cell in the solution"
            if c.cell_type == "code":                # folded in JupyterLab to their first line (not their outputs:
                assert c.metadata["jupyter"] == {"source_hidden": True}   # running a cell unfolds those, and saves it)
                assert c.source.startswith(f"# Solution {ex_id}\n")
            else:                                    # Run All would unfold a hidden Markdown cell, and save it so
                assert "source_hidden" not in c.metadata.get("jupyter", {})
        # the reasoning sits inside the directive, which jupyterlab-myst draws as a closed dropdown
        assert re.fullmatch(rf"```{{solution-start}} ex-{re.escape(ex_id)}\n:class: dropdown\n\n.+\n```",
                            solution[0].source, re.S), f"{ex_id}: the solution's opening cell"
        assert solution[-1].source == "```{solution-end}\n```"
        code = "\n".join(c.source for c in solution if c.cell_type == "code")
        assert re.search(rf'assert check\("{re.escape(ex_id)}", .*\)\.right', code), f"{ex_id}: unchecked solution"
    tagged = sum("solution" in c.metadata.get("tags", []) for c in cells(path))
    assert tagged == sum("solution" in c.metadata.get("tags", []) for c in part), "solution cells only in exercises"


def test_the_kinds_are_mixed():
    kinds = {section(p): {ex.kind for ex in exercise_set(section(p)).exercises.values()} for p in NOTEBOOKS}
    assert all(len(k) >= 2 for k in kinds.values()), kinds
    per_kind = Counter(k for ks in kinds.values() for k in ks)
    assert all(per_kind[k] >= 3 for k in (PREDICT, EXPLAIN, CODE)), per_kind
