"""Section 7's exercises and their checkers: perplexity per word, int5's error, pairing, the repetition penalty.

Notebook 07 ends with these; ``check("7.2", answer, **facts)`` judges an answer against the right one,
computed from the facts the notebook passes in (:mod:`helpers.infra.exercises`).

* 7.1 predict: the reference's perplexity per *word* of the span, from its NLL per token.
* 7.2 predict, then measure: int5 per-row's mean weight error from int8 per-row's, by the size of absmax's step
  (the question states the model: error proportional to the step; the measurement shows what it neglects).
* 7.3 explain: how many times less the per-token difference of the reference and int8 per-row spreads than the
  reference's own NLL does: why pairing works.
* 7.4 change the code: transformers' repetition penalty, the setting that swaps two rows of the battery.
"""
from __future__ import annotations

import math

import torch

from .infra.exercises import CODE, EXPLAIN, PREDICT, Exercise, ExerciseSet, Mistake
from .s07_battery import penalize

# --------------------------------------------------------------------------- 7.1: perplexity per word


def _per_word(nll, tokens, words):
    """exp(total NLL / words): the same nats spread over the words instead of the tokens."""
    return math.exp(nll * tokens / words)


# --------------------------------------------------------------------------- 7.2: int5 per-row's weight error


def _levels(bits):
    """Absmax's largest code at ``bits``: 2^(bits - 1) - 1, so its step is max|w| / that."""
    return 2 ** (bits - 1) - 1


def _error_at(int8_error, bits, ratio):
    return int8_error * ratio(8) / ratio(bits)


# --------------------------------------------------------------------------- 7.3: why pairing works


def _spread_ratio(ref_sd, int8_sd, r, paired=True):
    """ref_sd / sd(ref - int8), with sd(a - b)^2 = sd(a)^2 + sd(b)^2 - 2 r sd(a) sd(b) (r = 0: unpaired)."""
    cov = r * ref_sd * int8_sd if paired else 0.0
    return ref_sd / math.sqrt(max(ref_sd ** 2 + int8_sd ** 2 - 2 * cov, 1e-300))


# --------------------------------------------------------------------------- 7.4: the repetition penalty


def repetition_penalty(logits: torch.Tensor, seen, penalty: float) -> torch.Tensor:
    """The reference for 7.4: one row's scores after transformers' repetition penalty (section 7's
    :func:`helpers.s07_battery.penalize`): each token in ``seen``, once however often it appears, has a
    positive score divided by ``penalty`` and a negative one multiplied by it. Returns a new tensor."""
    ids = torch.tensor([list(seen)], dtype=torch.long)
    return penalize(logits[None].clone(), ids, torch.tensor([float(penalty)], dtype=logits.dtype))[0]


def _divide_all(logits, seen, penalty):
    out, ids = logits.clone(), torch.tensor(sorted(set(seen)), dtype=torch.long)
    out[ids] = logits[ids] / penalty
    return out


def _each_time(logits, seen, penalty):
    out = logits.clone()
    for t in seen:
        out[t] = out[t] * penalty if out[t] < 0 else out[t] / penalty
    return out


def _inverted(logits, seen, penalty):
    out, ids = logits.clone(), torch.tensor(sorted(set(seen)), dtype=torch.long)
    out[ids] = torch.where(logits[ids] < 0, logits[ids] / penalty, logits[ids] * penalty)
    return out


def _cases_7_4(**_):
    """Fresh tensors on every call (a function that changes ``logits`` in place spoils only its own check)."""
    gen = torch.Generator().manual_seed(7)

    def scores(n):
        return 3 * torch.randn(n, generator=gen)

    long_seen = torch.randint(0, 1000, (300,), generator=gen).tolist()     # repeats, as a real context has
    return [(scores(12), [1, 3, 3, 7], 1.1), (scores(12), [0, 2, 5, 5, 5, 11], 1.5), (scores(12), [4, 6, 9], 0.8),
            (scores(12), list(range(12)), 1.2), (scores(1000), long_seen, 1.1)]


EXERCISES = ExerciseSet(
    Exercise(
        "7.1", PREDICT, answer=lambda **f: _per_word(**f), rel=0.005,
        example=dict(nll=4.3035, tokens=1023, words=775),
        hint="Add up the nats the model spent on the text, share them among the words, and exponentiate.",
        mistakes=[
            Mistake("Perplexity is the exponential of a mean; scaling the perplexity itself by tokens per word "
                    "does not move the mean inside it.",
                    lambda nll, tokens, words: math.exp(nll) * tokens / words),
            Mistake("The NLL is in nats: exponentiate with e, not 2.",
                    lambda nll, tokens, words: 2 ** (nll * tokens / words)),
            Mistake("A word is longer than a token: the model spends more nats per word, not fewer.",
                    lambda nll, tokens, words: math.exp(nll * words / tokens)),
        ]),
    Exercise(
        "7.2", PREDICT, answer=lambda int8_error, bits: _error_at(int8_error, bits, _levels), rel=0.02,
        example=dict(int8_error=0.0085, bits=5),
        hint="Rounding to the nearest step leaves an error proportional to the step, max|w| over the largest code.",
        mistakes=[
            Mistake("Absmax is symmetric: at {bits} bits the largest code is 2^(bits - 1) - 1, not 2^bits.",
                    lambda int8_error, bits: _error_at(int8_error, bits, lambda b: 2 ** b)),
            Mistake("The step does not shrink in proportion to the bits: each extra bit doubles the codes.",
                    lambda int8_error, bits: _error_at(int8_error, bits, lambda b: b)),
            Mistake("The error scales with the step, not with its square (that is the error's variance).",
                    lambda int8_error, bits: _error_at(int8_error, bits, lambda b: _levels(b) ** 2)),
        ]),
    Exercise(
        "7.3", EXPLAIN, answer=lambda **f: _spread_ratio(**f), rel=0.01,
        example=dict(ref_sd=3.3687, int8_sd=3.3584, r=0.999646),
        hint="Take each token's NLL under both schemes, subtract token by token, and compare the spread of those "
             "differences with the spread of the reference's NLLs.",
        mistakes=[
            Mistake("That is how much a difference of two independent scores spreads: these two schemes read the "
                    "same tokens, so subtract token by token before you measure the spread.",
                    lambda **f: _spread_ratio(**f, paired=False)),
            Mistake("Divide the reference's spread by the difference's: the question asks how many times less "
                    "the difference spreads.",
                    lambda **f: 1 / _spread_ratio(**f)),
            Mistake("Compare standard deviations, not variances.",
                    lambda **f: _spread_ratio(**f) ** 2),
        ]),
    Exercise(
        "7.4", CODE, answer=lambda **_: repetition_penalty, example={}, cases=_cases_7_4,
        hint="Change only the seen tokens' scores, each once, by transformers' rule, and return a new tensor "
             "without changing logits in place.",
        mistakes=[
            Mistake("Dividing a negative score by the penalty moves it toward zero, which makes the token more "
                    "likely: negative scores are multiplied.",
                    lambda **_: _divide_all),
            Mistake("A token that appears several times in the text is penalised once, not once per appearance.",
                    lambda **_: _each_time),
            Mistake("The penalty pushes seen tokens down: a positive score is divided by it, not multiplied.",
                    lambda **_: _inverted),
        ]),
)
check, verdict = EXERCISES.check, EXERCISES.verdict
