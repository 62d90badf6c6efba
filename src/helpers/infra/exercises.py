"""Exercises with checked answers: the machinery every section's ``sNN_exercises`` module uses (infrastructure).

An exercise's right answer is not typed into the checker: it is computed from the facts of this run
(the architecture loaded, the numbers the notebook just measured), which the notebook passes in::

    answer = None                     # the student replaces None with their number
    check("3.2", answer, layers=cfg.num_hidden_layers, kv_heads=..., head_dim=..., dtype_bytes=2)

so the checker stays right on another machine and another model. Three kinds of exercise:

* ``PREDICT`` (predict, then measure): the answer is a number, right when within ``rel`` (relative) or ``abs``;
* ``EXPLAIN`` (explain a measurement): a letter of a multiple choice (``choices="abc"``) whose right letter is
  derived from the run, or a number read off it;
* ``CODE`` (change the code): the answer is a function, right when it returns what the reference returns on
  every case.

Each exercise names its typical mistakes, each as the wrong answer it produces (computed from the same
facts) and a hint at the mistake. :func:`ExerciseSet.verdict` answers with one sentence:

* right;
* wrong, with the hint of the mistake the answer matches, or the exercise's general hint;
* not attempted yet, when the answer is ``None`` or a function that returns ``None`` (the stubs students
  fill in): nothing raises, so Run All, nbval and the book build stay green with empty answers.

Every sentence is a template with named fields (:mod:`helpers.infra.messages`): hints may use the facts'
names and ``answer``, never the right answer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from .controls import say
from .messages import fields_of, message

PREDICT, EXPLAIN, CODE = "predict", "explain", "code"
RIGHT, WRONG, NOT_ATTEMPTED = "right", "wrong", "not attempted"


@dataclass(frozen=True)
class Mistake:
    """A typical wrong answer: ``answer(**facts)`` is what the mistake gives, ``hint`` a template naming it."""
    hint: str
    answer: Callable[..., object]


@dataclass(frozen=True)
class Exercise:
    """One exercise: its id ("3.2"), its kind, the right answer from the facts, and its typical mistakes.

    ``answer(**facts)`` is the right answer: a number, a letter, or (``CODE``) the reference function.

    ``cases(**facts)`` lists the argument tuples a function answer is called with (kind ``CODE``).
    ``example`` holds facts to test the checker with: the chapter's numbers on its default model.
    """
    id: str
    kind: str
    answer: Callable[..., object]
    mistakes: Sequence[Mistake]
    example: Mapping[str, object]
    hint: str = "Check the formula and the units against the section."
    rel: float = 0.01
    abs: float = 0.0
    cases: Callable[..., Sequence[tuple]] | None = None
    choices: str = ""                 # an EXPLAIN exercise answered by a letter: the letters offered, e.g. "abc"

    def __post_init__(self):
        if self.kind not in (PREDICT, EXPLAIN, CODE):
            raise ValueError(f"An exercise's kind is predict, explain or code, got {self.kind!r}.")
        if not self.mistakes:
            raise ValueError(f"Exercise {self.id} names no typical mistake.")
        if (self.kind == CODE) != (self.cases is not None):
            raise ValueError(f"Exercise {self.id}: a code exercise, and only one, lists cases.")
        if self.choices and self.kind != EXPLAIN:
            raise ValueError(f"Exercise {self.id}: only an explain exercise is a multiple choice.")

    @property
    def answer_type(self) -> str:
        """What an answer is: "number", "letter" or "function"."""
        return "function" if self.kind == CODE else "letter" if self.choices else "number"


@dataclass(frozen=True)
class Verdict:
    """What the checker found: ``status`` (right, wrong, not attempted) and the sentence it says."""
    id: str
    status: str
    sentence: str

    @property
    def right(self) -> bool:
        return self.status == RIGHT

    def _ipython_display_(self):
        """Shows nothing: :meth:`ExerciseSet.check` has said the sentence already, and a student's cell ends with it."""


def _same(got, want, ex: Exercise, facts: Mapping) -> bool:
    """Whether an answer equals the right (or a mistaken) one, in the exercise's sense of equal."""
    if ex.answer_type == "number":
        return math.isclose(float(got), float(want), rel_tol=ex.rel, abs_tol=ex.abs)
    if ex.answer_type == "letter":
        return str(got).strip().lower() == str(want).strip().lower()
    return all(_equal_outputs(got(*case), want(*case)) for case in ex.cases(**facts))


def _equal_outputs(a, b) -> bool:
    """Two functions' outputs agree: numbers within 1e-6, tensors and arrays elementwise, sequences item by item."""
    import torch    # here, not at the top: only code exercises compare tensors

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
        return a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal_outputs(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    return a == b


def _attempted(answer, ex: Exercise, facts: Mapping) -> bool:
    """False for the stubs students start from: ``None``, or a function that returns ``None`` on every case."""
    if answer is None or answer is Ellipsis:
        return False
    if ex.kind == CODE:
        return any(answer(*case) is not None for case in ex.cases(**facts))
    return True


def _malformed(answer, ex: Exercise) -> str | None:
    """The sentence for an answer of the wrong type, or None when its type is right."""
    kind = ex.answer_type
    if kind == "number":
        if isinstance(answer, bool) or not hasattr(answer, "__float__"):
            return message("✘ Exercise {id} asks for a number; got {answer!r}.", id=ex.id, answer=answer)
        if not math.isfinite(float(answer)):
            return message("✘ Exercise {id} asks for a finite number; got {answer}.", id=ex.id, answer=answer)
    if kind == "letter" and str(answer).strip().lower() not in ex.choices:
        return message("✘ Exercise {id} asks for one of the letters {letters}; got {answer!r}.", id=ex.id,
                       letters=", ".join(ex.choices), answer=answer)
    if kind == "function" and not callable(answer):
        return message("✘ Exercise {id} asks for a function; got {answer!r}.", id=ex.id, answer=answer)
    return None


class ExerciseSet:
    """A section's exercises, looked up by id: ``verdict`` judges an answer, ``check`` also says the sentence."""

    def __init__(self, *exercises: Exercise):
        self.exercises = {ex.id: ex for ex in exercises}
        if len(self.exercises) != len(exercises):
            raise ValueError("Two exercises share an id.")

    def __getitem__(self, id: str) -> Exercise:
        if id not in self.exercises:
            raise ValueError(message("There is no exercise {id} here; this section's are {ids}.", id=id,
                                     ids=", ".join(self.exercises)))
        return self.exercises[id]

    def verdict(self, id: str, answer, **facts) -> Verdict:
        """Judge ``answer`` to exercise ``id`` against the right answer computed from ``facts``."""
        ex = self[id]
        not_yet = Verdict(id, NOT_ATTEMPTED, message(
            "Exercise {id}: not attempted yet. Write your function's body and run the cell again.", id=id)
            if ex.kind == CODE else message(
            "Exercise {id}: not attempted yet. Replace None with your answer and run the cell again.", id=id))
        if answer is None or answer is Ellipsis:
            return not_yet
        bad = _malformed(answer, ex)
        if bad:
            return Verdict(id, WRONG, bad)
        try:
            if not _attempted(answer, ex, facts):
                return not_yet
            if _same(answer, ex.answer(**facts), ex, facts):
                return Verdict(id, RIGHT, message("✔ Exercise {id}: right.", id=id))
            hint = next((m.hint for m in ex.mistakes if _same(answer, m.answer(**facts), ex, facts)), ex.hint)
        except Exception as e:      # a student's function that raises is an answer too: say why in one sentence
            if ex.kind != CODE:
                raise
            return Verdict(id, WRONG, message("✘ Exercise {id}: your function raised {error}: {detail}", id=id,
                                              error=type(e).__name__, detail=str(e)))
        return Verdict(id, WRONG, message("✘ Exercise {id}: not yet. {hint}", id=id, hint=_hint(hint, facts, answer)))

    def check(self, id: str, answer, **facts) -> Verdict:
        """Judge ``answer`` and say the verdict in one sentence under the cell; returns the :class:`Verdict`."""
        v = self.verdict(id, answer, **facts)
        say("{sentence}", sentence=v.sentence)
        return v


def _hint(template: str, facts: Mapping, answer) -> str:
    """A hint's sentence: its template filled with the facts (and the answer) it names."""
    values = {**facts, "answer": answer if not callable(answer) else getattr(answer, "__name__", "your function")}
    return message(template, **{k: values[k] for k in fields_of(template)})
