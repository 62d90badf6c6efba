"""Section 8's exercise checkers beyond tests/test_exercises.py: right answers computed another way (the section's
own helpers, a simulation), the letters of 8.2, and top-p against its definition and the acceptance rule."""
from __future__ import annotations

import pytest
import torch

from helpers import s08_speculative as S
from helpers.s08_exercises import EXERCISES, _cases_8_4, nucleus


def test_8_1_accepts_the_closed_form_and_a_simulation():
    f = EXERCISES["8.1"].example
    assert EXERCISES.verdict("8.1", S.expected_tokens(**f), **f).right
    passes = torch.rand(100_000, f["gamma"], generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    simulated = float((passes < f["alpha"]).long().cumprod(1).sum(1).double().mean()) + 1
    assert EXERCISES.verdict("8.1", simulated, **f).right
    assert EXERCISES["8.1"].answer(alpha=1.0, gamma=5) == 6           # the sum form holds at α = 1 too


def test_8_2_letters():
    answer = EXERCISES["8.2"].answer
    assert answer(measured=1.91, chapter=3.88, with_v=1.94) == "b"
    assert answer(measured=3.5, chapter=3.88, with_v=1.94) == "a"
    assert answer(measured=1.5, chapter=3.88, with_v=3.8) == "c"      # v(γ + 1) within 5 % of 1


def test_8_3_accepts_the_c_where_a_perfect_draft_breaks_even():
    f = EXERCISES["8.3"].example
    low, high = 1e-6, 10.0                                            # bisection on the section's speed-up
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if S.speedup(1 - 1e-9, f["gamma"], mid, f["v"]) > 1 else (low, mid)
    assert EXERCISES.verdict("8.3", low, **f).right
    assert EXERCISES["8.3"].answer(gamma=5, v=2.0) == pytest.approx(0.8)      # (γ + 1 - v) / γ


def test_8_3_the_mistake_of_v_1_is_named():
    f = EXERCISES["8.3"].example
    verdict = EXERCISES.verdict("8.3", 1.0, **f)                      # (γ + 1 - 1) / γ
    assert not verdict.right and "v(γ + 1)" in verdict.sentence


def test_8_4_cases_stay_clear_of_ties_at_top_p():
    for q, top_p in _cases_8_4():
        ranked = q.sort(descending=True).values.double()
        above = ranked.cumsum(0) - ranked
        assert (above - top_p).abs().min() > 1e-6
        assert (ranked[1:] != ranked[:-1]).all()


def test_8_4_reference_keeps_the_smallest_top_set_reaching_top_p():
    q = torch.tensor([0.1, 0.4, 0.3, 0.2], dtype=torch.float64)
    assert torch.allclose(nucleus(q, 0.6), torch.tensor([0, 4 / 7, 3 / 7, 0], dtype=torch.float64))
    assert torch.allclose(nucleus(q, 0.3), torch.tensor([0, 1, 0, 0], dtype=torch.float64))
    assert torch.allclose(nucleus(q, 0.99), q)


def test_8_4_a_sort_and_scatter_version_is_right_and_the_rule_stays_exact():
    def by_sort(q, top_p):
        ranked, order = q.sort(descending=True)
        above = ranked.cumsum(0) - ranked
        return torch.zeros_like(q).scatter(0, order, ranked * (above < top_p)) / ranked[above < top_p].sum()
    assert EXERCISES.verdict("8.4", by_sort).right
    gen = torch.Generator().manual_seed(3)
    p = torch.softmax(2 * torch.randn(40, generator=gen, dtype=torch.float64), 0)
    q = torch.softmax(2 * torch.randn(40, generator=gen, dtype=torch.float64), 0)
    assert torch.allclose(S.emitted_distribution(p, nucleus(q, 0.8)), p, atol=1e-12)
