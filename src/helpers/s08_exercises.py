"""Section 8's exercises and their checkers: tokens per verification, what v costs, the int8 ceiling, top-p.

Notebook 08 ends with these; ``check("8.2", answer, **facts)`` judges an answer against the right one,
computed from the facts the notebook passes in (:mod:`helpers.infra.exercises`).

* 8.1 predict: the tokens one verification yields, E(α, γ), for int8 per-tensor's α at the chapter's γ = 8.
* 8.2 explain: which prediction of prompt lookup's speed-up the run bears out, v = 1 or the measured v (a letter).
* 8.3 explain: the largest draft cost c at which a draft whose every guess is accepted still breaks even.
* 8.4 change the code: top-p (nucleus) processing of the draft's q, under which the rule stays exact.
"""
from __future__ import annotations

import math

import torch

from .infra.exercises import CODE, EXPLAIN, PREDICT, Exercise, ExerciseSet, Mistake

# --------------------------------------------------------------------------- 8.1: tokens per verification


def _tokens(alpha, gamma, last=None):
    """1 + α + ... + α^last (last = γ): E(α, γ) as a sum, which also holds at α = 1."""
    return sum(alpha ** k for k in range((gamma if last is None else last) + 1))


# --------------------------------------------------------------------------- 8.2: v = 1 or the measured v

SAME = 0.05          # two predictions within 5 % of each other: v(γ + 1) is about 1, the question does not arise


def _closer(measured, chapter, with_v):
    """a: the chapter's prediction (v = 1) is the closer to the measured speed-up; b: the one with the measured v;
    c: the two predictions agree within ``SAME``. Closeness is a ratio: |log(measured / predicted)|."""
    if abs(chapter / with_v - 1) < SAME:
        return "c"
    return "a" if abs(math.log(measured / chapter)) < abs(math.log(measured / with_v)) else "b"


# --------------------------------------------------------------------------- 8.3: break-even for a perfect draft


def _break_even(gamma, v, kept=None, steps=None):
    """The c at which (γ + 1) / (γc + v) = 1: every guess accepted, γ + 1 tokens for γ draft steps and one
    verification costing v. ``kept`` and ``steps`` replace γ + 1 and γ (the mistakes)."""
    kept = gamma + 1 if kept is None else kept
    steps = gamma if steps is None else steps
    return (kept - v) / steps


# --------------------------------------------------------------------------- 8.4: top-p on the draft's q


def nucleus(q: torch.Tensor, top_p: float) -> torch.Tensor:
    """The reference for 8.4: q restricted to its nucleus and renormalised. The nucleus is the most probable
    tokens, from the top down, up to and including the one whose mass carries the total to ``top_p``."""
    order = torch.argsort(q, descending=True)
    ranked = q[order]
    keep = torch.zeros_like(q, dtype=torch.bool)
    keep[order] = torch.cumsum(ranked, 0) - ranked < top_p          # the mass above each token is short of top_p
    kept = torch.where(keep, q, torch.zeros_like(q))
    return kept / kept.sum()


def _without_crossing(q, top_p):
    order = torch.argsort(q, descending=True)
    keep = torch.zeros_like(q, dtype=torch.bool)
    keep[order] = torch.cumsum(q[order], 0) < top_p
    keep[order[0]] = True                                            # at least the top token, or nothing is left
    kept = torch.where(keep, q, torch.zeros_like(q))
    return kept / kept.sum()


def _unnormalised(q, top_p):
    order = torch.argsort(q, descending=True)
    keep = torch.zeros_like(q, dtype=torch.bool)
    keep[order] = torch.cumsum(q[order], 0) - q[order] < top_p
    return torch.where(keep, q, torch.zeros_like(q))


def _least_probable(q, top_p):
    order = torch.argsort(q)                                         # ascending: the tail first
    keep = torch.zeros_like(q, dtype=torch.bool)
    keep[order] = torch.cumsum(q[order], 0) - q[order] < top_p
    kept = torch.where(keep, q, torch.zeros_like(q))
    return kept / kept.sum()


def _cases_8_4(**_):
    """Distributions of 3 to 1,000 tokens (float64 and float32), none with a token's mass landing on top_p."""
    gen = torch.Generator().manual_seed(8)

    def dist(n, spread):
        return torch.softmax(spread * torch.randn(n, generator=gen, dtype=torch.float64), 0)

    return [(dist(6, 1.5), 0.5), (dist(6, 1.5), 0.9), (dist(50, 2.0), 0.8), (dist(1000, 3.0), 0.95),
            (torch.tensor([0.9, 0.06, 0.04], dtype=torch.float64), 0.5), (dist(50, 2.0).float(), 0.7)]


EXERCISES = ExerciseSet(
    Exercise(
        "8.1", PREDICT, answer=lambda alpha, gamma: _tokens(alpha, gamma), rel=0.01,
        example=dict(alpha=0.8472, gamma=8),
        hint="Add up the chance that each of the γ guesses survives, then the target's own token.",
        mistakes=[
            Mistake("The target adds one token of its own after the accepted guesses: count it.",
                    lambda alpha, gamma: _tokens(alpha, gamma) - 1),
            Mistake("All {gamma} guesses can be accepted: the sum runs up to α^γ, so the closed form's exponent "
                    "is γ + 1.",
                    lambda alpha, gamma: _tokens(alpha, gamma, last=gamma - 1)),
            Mistake("A guess counts only if every guess before it was accepted: the k-th survives with "
                    "probability α^k, not α.",
                    lambda alpha, gamma: 1 + alpha * gamma),
        ]),
    Exercise(
        "8.2", EXPLAIN, choices="abc", answer=lambda **f: _closer(**f),
        example=dict(measured=1.91, chapter=3.88, with_v=1.94),
        hint="Put the measured speed-up beside the two predictions: which is the closer, as a ratio?",
        mistakes=[
            Mistake("The chapter's v = 1 prices a verification at one step whatever γ; compare its prediction "
                    "with the measured column again.",
                    lambda **f: "a"),
            Mistake("The two predicted columns differ by more than 5 % here: this machine's v(γ + 1) is not 1.",
                    lambda **f: "c"),
        ]),
    Exercise(
        "8.3", EXPLAIN, answer=lambda gamma, v: _break_even(gamma, v), rel=0.02,
        example=dict(gamma=5, v=1.73),
        hint="With every guess accepted, a round yields γ + 1 tokens for γc + v(γ + 1) target steps: set the "
             "speed-up to 1 and solve for c.",
        mistakes=[
            Mistake("Verification is timed on this machine: one forward over γ + 1 tokens costs v(γ + 1) steps, "
                    "not one.",
                    lambda gamma, v: _break_even(gamma, 1.0)),
            Mistake("Even when all {gamma} guesses are kept, the target adds its own token to the round.",
                    lambda gamma, v: _break_even(gamma, v, kept=gamma)),
            Mistake("The draft runs γ steps in every round, each costing c target steps.",
                    lambda gamma, v: _break_even(gamma, v, steps=1)),
        ]),
    Exercise(
        "8.4", CODE, answer=lambda **_: nucleus, example={}, cases=_cases_8_4,
        hint="Rank q from the most probable token down, keep tokens until their mass reaches top_p (the one that "
             "crosses it included), set the rest to 0, renormalise, and leave q itself unchanged.",
        mistakes=[
            Mistake("Keep the token that carries the mass past top_p too: without it the kept mass falls short "
                    "of top_p.",
                    lambda **_: _without_crossing),
            Mistake("Renormalise what you keep, so that it sums to 1 again: the rule divides by q(x).",
                    lambda **_: _unnormalised),
            Mistake("The nucleus is made of the most probable tokens: rank them from the top, not from the tail.",
                    lambda **_: _least_probable),
        ]),
)
check, verdict = EXERCISES.check, EXERCISES.verdict
