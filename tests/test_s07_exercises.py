"""Section 7's exercise checkers beyond tests/test_exercises.py: right answers computed another way, the letters
of 7.3 in every case, and the repetition penalty against other ways of writing it."""
from __future__ import annotations

import math

import torch

from helpers.s07_battery import penalize
from helpers.s07_exercises import EXERCISES, repetition_penalty


def test_7_1_per_word_perplexity_from_bits_per_byte_is_right():
    f = EXERCISES["7.1"].example
    total_bits = f["nll"] * f["tokens"] / math.log(2)               # the same nats, as bits
    assert EXERCISES.verdict("7.1", 2 ** (total_bits / f["words"]), **f).right
    assert EXERCISES.verdict("7.1", round(math.exp(f["nll"] * f["tokens"] / f["words"]), 1), **f).right


def test_7_2_accepts_the_measured_error_and_the_table_rounding():
    f = EXERCISES["7.2"].example                                    # int8 per-row 0.0085 as the table prints it
    assert EXERCISES.verdict("7.2", 0.0720, **f).right              # int5 per-row as the notebook measured it
    assert EXERCISES.verdict("7.2", 0.00851 * 127 / 15, **f).right
    assert not EXERCISES.verdict("7.2", 0.00851 * 255 / 31, **f).right     # 2^b - 1 codes: outside the tolerance


def test_7_3_letter_follows_the_run_in_all_four_cases():
    base = dict(ref_low=60.0, ref_high=90.0)
    cases = {"a": dict(int8_low=61.0, int8_high=91.0, diff_low=-0.01, diff_high=-0.003),
             "b": dict(int8_low=95.0, int8_high=120.0, diff_low=-0.3, diff_high=-0.2),
             "c": dict(int8_low=61.0, int8_high=91.0, diff_low=-0.01, diff_high=0.003),
             "d": dict(int8_low=95.0, int8_high=120.0, diff_low=-0.3, diff_high=0.2)}
    for letter, facts in cases.items():
        assert EXERCISES["7.3"].answer(**base, **facts) == letter
        assert EXERCISES.verdict("7.3", letter.upper() + " ", **base, **facts).right


def _mask_version(logits, seen, penalty):
    hit = torch.zeros_like(logits, dtype=torch.bool)
    hit[list(seen)] = True
    return torch.where(hit, torch.where(logits > 0, logits / penalty, logits * penalty), logits)


def _loop_version(logits, seen, penalty):
    out = logits.clone()
    for t in set(seen):
        out[t] = logits[t] / penalty if logits[t] > 0 else logits[t] * penalty
    return out.tolist()                                              # a list is an answer too


def test_7_4_other_ways_of_writing_the_penalty_are_right():
    for f in (_mask_version, _loop_version):
        assert EXERCISES.verdict("7.4", f).right


def test_7_4_reference_is_section_7s_penalize_and_leaves_its_input_alone():
    z = torch.tensor([2.0, -2.0, 0.5, -0.5, 0.0])
    before = z.clone()
    out = repetition_penalty(z, [0, 1, 1, 4], 1.25)
    assert torch.equal(z, before)
    assert torch.allclose(out, torch.tensor([1.6, -2.5, 0.5, -0.5, 0.0]))
    assert torch.equal(out, penalize(z[None], torch.tensor([[0, 1, 1, 4]]), torch.tensor([1.25]))[0])


def test_7_4_a_function_that_changes_logits_in_place_gets_one_sentence_not_a_crash():
    def in_place(logits, seen, penalty):
        for t in set(seen):
            logits[t] = logits[t] / penalty if logits[t] > 0 else logits[t] * penalty
        return logits
    v = EXERCISES.verdict("7.4", in_place)
    assert not v.right and "in place" in v.sentence and "\n" not in v.sentence
