"""Section 9's exercise checkers against the section's own helpers: the answers they compute are the notebook's."""
from __future__ import annotations

import math

import torch

from helpers import s08_speculative as S
from helpers import s09_distillation as D
from helpers.infra import chapter
from helpers.s09_exercises import EXERCISES, _cases_9_5, spread_layers


def test_9_1_the_chapter_s_square_root():
    (t1, r1), (t2, r2) = chapter.S9_TOP_TO_THIRD.items()
    assert EXERCISES.verdict("9.1", r2, r1=r1, T=t2 / t1).right           # the chapter's 2.24 -> 1.50
    z = torch.tensor([3.0, 2.5, 1.0, 0.0], dtype=torch.float64)
    measured = D.top_to_third(S.processed(z, 4.0))
    assert EXERCISES.verdict("9.1", measured, r1=D.top_to_third(S.processed(z, 1.0)), T=4.0).right


def test_9_2_is_the_ratio_of_the_stored_tensors():
    vocab, k, rows, tokens = 2048, 32, 2, 16
    top = torch.randn(rows, tokens, vocab).topk(k, dim=-1)
    targets = D.Targets(top.values, top.indices)
    ratio = D.full_logits_bytes(vocab) * rows * tokens / targets.nbytes
    assert EXERCISES.verdict("9.2", ratio, vocab=vocab, k=k).right
    assert EXERCISES.verdict("9.2", int(ratio), vocab=vocab, k=k).right   # an int for a float


def test_9_3_reads_agreement_as_printed():
    facts = dict(soft_kl=5.0, hard_kl=4.0)
    assert EXERCISES.verdict("9.3", "b", soft_agreement=0.10, hard_agreement=0.20, **facts).right
    assert EXERCISES.verdict("9.3", "c", soft_agreement=0.2001, hard_agreement=0.1999, **facts).right   # 20.0 %


def test_9_4_breaks_even():
    for alpha in (0.05, 0.146, 0.5, 0.9):
        c = EXERCISES["9.4"].answer(alpha=alpha, gamma=3)
        assert math.isclose(S.speedup(alpha, 3, c), 1, rel_tol=1e-12)
    assert EXERCISES.verdict("9.4", 0, alpha=0.0, gamma=3).right                 # nothing accepted: c = 0
    assert EXERCISES.verdict("9.4", 1, alpha=1.0, gamma=3).right                 # everything accepted


def test_9_5_is_distilgpt2_s_choice():
    assert spread_layers(12, 6) == [0, 2, 4, 7, 9, 11]
    for n, k in _cases_9_5():
        kept = spread_layers(n, k)
        assert kept[0] == 0 and kept[-1] == n - 1 and len(set(kept)) == k == len(kept) and kept == sorted(kept)
        assert kept == [round(i * (n - 1) / (k - 1)) for i in range(k)]         # no halves: any rounding agrees
