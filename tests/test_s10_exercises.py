"""Section 10's exercise checkers against the section's own helpers: the answers they compute are the notebook's."""
from __future__ import annotations

import math

import pytest

from helpers import s10_budget as budget
from helpers.infra import chapter
from helpers.s10_exercises import EXERCISES, card_needed


def facts(card_gb, model, weight_format):
    arch = budget.MODELS[model]
    return dict(card_gb=card_gb, params=arch.params, weight_bits=budget.WEIGHT_BITS[weight_format],
                layers=arch.layers, kv_heads=arch.kv_heads, head_dim=arch.head_dim, cache_bytes=2,
                overhead=budget.RUNTIME_OVERHEAD)


def cell(r):
    return f"{r['card_gb']}-{r['model']}-{r['weight_format']}"


@pytest.mark.parametrize("row", budget.budget_table(), ids=cell)
def test_10_1_s_sum_is_the_table_s(row):
    f = facts(row["card_gb"], row["model"], row["weight_format"])
    assert EXERCISES["10.1"].answer(**f) == row["tokens"]
    if row["tokens"] >= 0:
        assert EXERCISES.verdict("10.1", float(row["tokens"]), **f).right          # a float for an int


def test_10_2_the_chapter_s_337():
    f, per_token = facts(8, "13B", "int4"), budget.MODELS["13B"].bytes_per_token("fp16")
    bare = budget.tokens_that_fit(8 * budget.GiB, math.ceil(f["params"] * 4 / 8), per_token)
    assert EXERCISES["10.2"].answer(code_bits=4, **f) == bare - chapter.S10_13B_INT4_8GB[1]
    assert EXERCISES.verdict("10.2", f["params"] / 64 / per_token, code_bits=4, **f).right     # the scales' bytes


def test_10_3_depends_on_the_model():
    assert EXERCISES["10.3"].answer(card_gb=16, model="13B", context=4096) == "a"
    assert EXERCISES["10.3"].answer(card_gb=16, model="7B", context=4096) == "b"


@pytest.mark.parametrize("row", [r for r in budget.budget_table() if r["tokens"] >= 4096],
                         ids=cell)
def test_10_4_the_card_serves_its_users_and_no_more(row):
    users = budget.users_served(row["card_gb"], row["model"], row["weight_format"], "fp16", 4096)
    w, bpt = row["weights"], row["bytes_per_token"]
    assert card_needed(w, bpt, users, 4096) <= row["card_gb"] < card_needed(w, bpt, users + 1, 4096)
