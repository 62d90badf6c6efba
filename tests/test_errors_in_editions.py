"""Bad input is answered in the reader's language (issue 38): every error a reader can meet is a template.

A Hindi or Urdu student who calls a helper badly gets the one sentence that says what to do in Hindi or Urdu, with
the bad value in it. So the helpers never raise with an f-string or a bare literal, which no catalog can hold: the
sentence goes through ``message`` (``helpers.infra.messages``) like every other printed sentence, and the catalogs
translate it (``tests/test_editions_catalog.py`` fails on an empty or fuzzy entry). The few errors about a developer's
own misuse of internals stay English; they are listed here with the reason, as AUTHORING.md ("Editions") says.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from helpers import s03_cache_size as cache_size
from helpers import s04_paged as paged
from helpers import s08_speculative as speculative
from helpers import s10_budget as budget
from helpers.infra import claims, corpus, messages
from helpers.infra import model as model_loading

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "helpers"

# The modules a reader's error can come from: every idea module, and the infrastructure a notebook or a student
# calls (a bad MIC_MODEL or MIC_CLAIMS, the corpus, timing, the chapter's config, an exercise's checker, a control).
READER_FACING = sorted(PACKAGE.glob("s[0-9][0-9]_*.py")) + [
    PACKAGE / "infra" / f"{name}.py" for name in ("model", "corpus", "measure", "chapter", "claims", "exercises",
                                                  "controls")]

# Modules whose errors are all about a developer's own misuse, so they stay English.
ENGLISH_MODULES = {
    "infra/messages.py": "a template's fields, or a translation's: the author's or translator's typo; and a bad "
                         "MIC_EDITION, where no edition is known to answer in",
    "infra/plotting.py": "figure() and slider_figure() given fields or values that a notebook's author got wrong",
    "infra/tables.py": "beside_chapter() given fields that a notebook's author got wrong",
}
# Errors that stay English inside a reader-facing module: (module, function) -> why.
ENGLISH_RAISES = {
    ("infra/claims.py", "claim"): "claim() given fields its sentences do not use: the notebook author's typo",
    ("infra/exercises.py", "__post_init__"): "an Exercise defined wrongly (its kind, mistakes, cases, choices)",
    ("infra/exercises.py", "__init__"): "an ExerciseSet with two exercises of one id",
}
RAISED = {"ValueError", "TypeError", "RuntimeError", "ModelNotAvailable"}


def _held(tree: ast.Module) -> set[str]:
    """Names assigned a template the extractor finds: a literal, a conditional of literals, a dict of literals."""
    def literal(node):
        if isinstance(node, ast.IfExp):
            return literal(node.body) and literal(node.orelse)
        return isinstance(node, ast.Constant) and isinstance(node.value, str)

    return {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) for t in node.targets
            if isinstance(t, ast.Name) and (literal(node.value) or isinstance(node.value, ast.Dict)
                                            and all(literal(v) for v in node.value.values))}


def _is_template(call: ast.AST, held: set[str]) -> bool:
    """``message("...", ...)``, ``message(NAME, ...)`` or ``message(NAME[key], ...)`` with NAME a held template."""
    if not (isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", None)) == "message"
            and call.args):
        return False
    first = call.args[0]
    first = first.value if isinstance(first, ast.Subscript) else first
    return (isinstance(first, ast.Constant) and isinstance(first.value, str)
            or isinstance(first, ast.Name) and first.id in held)


def untranslatable_raises(path: Path, root: Path = PACKAGE) -> list[str]:
    """'module:line function' for each raise whose sentence no catalog can hold (an f-string, a literal, ...)."""
    tree = ast.parse(path.read_text(encoding="utf8"))
    held, rel = _held(tree), path.relative_to(root).as_posix()
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.name)
                continue
            if (isinstance(child, ast.Raise) and isinstance(child.exc, ast.Call)
                    and getattr(child.exc.func, "id", None) in RAISED and child.exc.args
                    and not _is_template(child.exc.args[0], held) and (rel, function) not in ENGLISH_RAISES):
                found.append(f"{rel}:{child.lineno} {function}")
            visit(child, function)

    visit(tree, "<module>")
    return found


def test_no_reader_facing_module_raises_a_sentence_no_catalog_can_hold():
    assert not set(ENGLISH_MODULES) & {p.relative_to(PACKAGE).as_posix() for p in READER_FACING}
    found = [f for path in READER_FACING for f in untranslatable_raises(path)]
    assert not found, f"{len(found)} raises with an f-string or a bare literal (use message(...)): {found}"


def test_the_check_finds_an_f_string_a_literal_and_accepts_a_held_template(tmp_path):
    path = tmp_path / "s99_example.py"
    path.write_text('WHY = {"a": "{x} is wrong.", "b": "{x} is bad."}\n'
                    'def f(x):\n'
                    '    raise ValueError(f"{x} is wrong.")\n'
                    'def g(x):\n'
                    '    raise ValueError("x is wrong.")\n'
                    'def h(x):\n'
                    '    raise ValueError(message("{x} is wrong.", x=x))\n'
                    'def k(x):\n'
                    '    raise ValueError(message(WHY["a"], x=x))\n', encoding="utf8")
    assert untranslatable_raises(path, tmp_path) == ["s99_example.py:3 f", "s99_example.py:5 g"]


def test_each_error_template_is_given_exactly_its_fields():
    """A raise runs only on bad input, so a field misnamed in its message() would surface only there: check them all."""
    wrong = []
    for path in READER_FACING:
        tree = ast.parse(path.read_text(encoding="utf8"))
        held = {t.id: [v.value for v in node.value.values if isinstance(v, ast.Constant)]
                for node in ast.walk(tree) if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            call = node.exc.args[0] if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) \
                and node.exc.args else None
            if not _is_template(call, set(held)):
                continue
            first = call.args[0].value if isinstance(call.args[0], ast.Subscript) else call.args[0]
            templates = [first.value] if isinstance(first, ast.Constant) else held[first.id]
            given = {k.arg for k in call.keywords}
            wrong += [f"{path.name}:{node.lineno} {t!r}" for t in templates if messages.fields_of(t) != given]
    assert not wrong, wrong


def test_the_modules_kept_english_exist():
    assert all((PACKAGE / name).is_file() for name in ENGLISH_MODULES)
    assert all((PACKAGE / name).is_file() for name, _ in ENGLISH_RAISES)


# --------------------------------------------------------------------------- a bad input, answered in an edition

SCRIPTS = {"hi": re.compile(r"[\u0900-\u097F]"), "ur": re.compile(r"[\u0600-\u06FF]")}
LATIN = re.compile(r"[A-Za-z]")


@pytest.fixture(params=["hi", "ur"])
def edition(request, monkeypatch):
    monkeypatch.setenv(messages.EDITION_ENV, request.param)
    messages.catalog.cache_clear(), messages._translations.cache_clear()
    yield request.param
    messages.catalog.cache_clear(), messages._translations.cache_clear()


def answer(call) -> str:
    with pytest.raises((ValueError, model_loading.ModelNotAvailable)) as e:
        call()
    return str(e.value)


BAD_CALLS = {
    "top_k=0": (lambda: speculative.processed(torch.zeros(5), top_k=0), "0"),
    "temperature=-1": (lambda: speculative.processed(torch.zeros(5), temperature=-1.0), "-1.0"),
    "a card of -8 GB": (lambda: budget.fit(-8, "7B", "fp16"), "-8"),
    "an unknown weight format": (lambda: budget.fit(16, "7B", "int3"), "'int3'"),
    "kv_heads=0": (lambda: cache_size.kv_bytes_per_token(24, 0, 64, 2), "0"),
    "a block of 0 tokens": (lambda: paged.BlockAllocator(0, 16), "0"),
    "n_tokens=0": (lambda: corpus.token_span(None, 0), "0"),
    "a bad MIC_MODEL": (lambda: model_loading.resolve_source("not a model"), "'not a model'"),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_a_bad_input_is_answered_in_the_editions_language_and_names_the_value(edition, case):
    call, value = BAD_CALLS[case]
    said = answer(call)
    assert len(SCRIPTS[edition].findall(said)) > len(LATIN.findall(said)) / 4, said     # the edition's script
    assert value in said, said                                                           # the bad value, named
    assert "must" not in said and " got " not in said, said                              # not the English sentence


def test_top_k_0_in_each_edition(monkeypatch):
    """The issue's example: ``processed(logits, top_k=0)`` in the Hindi (and the Urdu) 08."""
    said = {}
    for name in ("en", "hi", "ur"):
        monkeypatch.setenv(messages.EDITION_ENV, name)
        messages.catalog.cache_clear()
        said[name] = answer(lambda: speculative.processed(torch.zeros(5), top_k=0))
    messages.catalog.cache_clear()
    assert said["en"].startswith("top_k must be a whole number of tokens, at least 1")
    assert SCRIPTS["hi"].search(said["hi"]) and said["hi"].endswith("।") and "top_k" in said["hi"]
    assert SCRIPTS["ur"].search(said["ur"]) and said["ur"].endswith("۔") and "top_k" in said["ur"]


def test_a_bad_mic_claims_is_answered_in_the_editions_language(edition, monkeypatch):
    monkeypatch.setenv(claims.CLAIMS_ENV, "maybe")
    said = answer(claims.strict)
    assert SCRIPTS[edition].search(said) and "MIC_CLAIMS" in said and "'maybe'" in said, said


def test_english_says_whole_sentences(monkeypatch):
    """The sentences once glued from parts ("{what} must be a {kind} of {unit}") are whole templates now."""
    monkeypatch.setenv(messages.EDITION_ENV, "en")
    assert answer(lambda: budget.fit(-8, "7B", "fp16")) == (
        "The card's memory must be a positive number of GB, got -8.")
    assert answer(lambda: cache_size.kv_bytes_per_token(24, 0, 64, 2)) == (
        "kv_heads must be at least 1, got 0: every attention layer keeps at least one key-value head.")
    assert answer(lambda: cache_size.cache_bytes(100, -1, 10)) == "users must be zero or more, got -1."


def test_a_live_controls_error_line_runs_right_to_left_in_urdu(monkeypatch):
    from helpers.infra import controls
    monkeypatch.setenv(messages.EDITION_ENV, "ur")
    assert controls.error_line("یہ غلط ہے۔").startswith('<div dir="rtl" lang="ur"')
    monkeypatch.setenv(messages.EDITION_ENV, "hi")
    assert "dir=" not in controls.error_line("यह गलत है।")
