"""Section 6's exercises: the letter of 6.2 follows the dissection table's count; 6.4's reference is the helper's."""
from __future__ import annotations

import torch

from helpers import s06_int8_matmuls as M
from helpers.s06_exercises import EXERCISES, llm_int8, outlier_kind


def _inputs(column_tokens: int, tokens: int = 40, dims: int = 24) -> torch.Tensor:
    x = torch.randn(tokens, dims, generator=torch.Generator().manual_seed(column_tokens))
    x[:column_tokens, 5] = 100.0          # dimension 5 far above ten times the median dimension's max
    return x


def test_6_2_letters_follow_the_count_of_tokens_above_the_bar():
    assert outlier_kind(_inputs(0)) == "c"
    assert outlier_kind(_inputs(1)) == "b" and outlier_kind(_inputs(20)) == "b"      # at most half the tokens
    assert outlier_kind(_inputs(21)) == "a" and outlier_kind(_inputs(40)) == "a"
    for letter, x in (("a", _inputs(30)), ("b", _inputs(3)), ("c", _inputs(0))):    # every mistake differs
        answers = [m.answer(x=x) for m in EXERCISES["6.2"].mistakes]
        assert letter not in answers and len(set(answers)) == len(answers)


def test_6_4_reference_handles_no_outlier_and_all_outliers():
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(0))
    w = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    assert torch.equal(llm_int8(x, w, 100.0), M.int8_matmul(x, w, "token", "channel"))
    assert torch.allclose(llm_int8(x, w, 1e-9), x @ w.T)
