"""Section 9's exercises and their checkers: temperature, the teacher's storage, the better draft, break-even, layers.

Notebook 09 ends with these; ``check("9.2", answer, **facts)`` judges an answer against the right one,
computed from the facts the notebook passes in (:mod:`helpers.infra.exercises`).

* 9.1 predict, then measure: the top-to-third ratio at T = 4 from its value at T = 1.
* 9.2 predict, then measure: how many times fewer bytes the teacher's top-k targets take than its full logits.
* 9.3 explain: which of the two trained students makes the better greedy draft, read off the right measure.
* 9.4 explain: the largest draft cost c at which the distilled draft breaks even, from this run's α and γ.
* 9.5 change the code: DistilGPT2's choice of layers, k of them spread evenly from the first to the last.
"""
from __future__ import annotations

from .infra.exercises import CODE, EXPLAIN, PREDICT, Exercise, ExerciseSet, Mistake
from .s08_speculative import expected_tokens


def _favoured(soft: float, hard: float, digits: int, higher_is_better: bool) -> str:
    """The letter of the student a measure favours, compared as the notebook prints it: a soft, b hard, c a tie."""
    soft, hard = round(soft, digits), round(hard, digits)
    return "c" if soft == hard else "a" if (soft > hard) == higher_is_better else "b"


def _break_even(alpha, gamma):
    """The draft cost c at which E(α, γ) / (γc + 1) = 1."""
    extra = gamma if alpha >= 1 else expected_tokens(alpha, gamma) - 1     # α = 1: every proposal is kept
    return extra / gamma


def spread_layers(n_layers, k):
    """The reference for 9.5: k layers spread evenly from layer 0 to layer n_layers - 1, each rounded to the
    nearest layer (halves up): i (n_layers - 1) / (k - 1) for i = 0 .. k - 1. DistilGPT2: 12 layers, k = 6 ->
    0, 2, 4, 7, 9, 11."""
    return [(2 * i * (n_layers - 1) + k - 1) // (2 * (k - 1)) for i in range(k)]


def _cases_9_5(**_):
    return [(12, 6), (30, 10), (24, 8), (27, 6), (32, 2), (6, 2), (7, 7), (16, 4)]


EXERCISES = ExerciseSet(
    Exercise(
        "9.1", PREDICT, answer=lambda r1, T: r1 ** (1 / T), rel=0.005, example=dict(r1=1.29, T=4.0),
        hint="A ratio of two probabilities is e to the difference of their logits, divided by T.",
        mistakes=[
            Mistake("The temperature divides the logits, not the ratio of the probabilities.",
                    lambda r1, T: r1 / T),
            Mistake("A temperature above 1 flattens the distribution: the ratio moves towards 1, not away from it.",
                    lambda r1, T: r1 ** T),
            Mistake("That is the ratio at T = 2; at T = {T:g} every logit difference is divided by {T:g}.",
                    lambda r1, T: r1 ** 0.5),
        ]),
    Exercise(
        "9.2", PREDICT, answer=lambda vocab, k: vocab * 4 / (k * (4 + 4)), rel=1e-9,
        example=dict(vocab=49_152, k=32),
        mistakes=[
            Mistake("The top {k} are stored with their token ids: each kept entry is a logit and an id.",
                    lambda vocab, k: vocab / k),
            Mistake("A token id fits in 4 bytes (int32) here, not 8.",
                    lambda vocab, k: vocab * 4 / (k * (4 + 8))),
            Mistake("The question asks how many times *fewer* bytes: the full logits over the top {k}.",
                    lambda vocab, k: k * (4 + 4) / (vocab * 4)),
        ]),
    Exercise(
        "9.3", EXPLAIN, choices="abc",
        answer=lambda soft_agreement, hard_agreement, **_: _favoured(soft_agreement, hard_agreement, 3, True),
        example=dict(soft_agreement=0.240, hard_agreement=0.184, soft_kl=5.86, hard_kl=5.60),
        hint="A greedy draft token is kept only when it is the target's own top token.",
        mistakes=[
            Mistake("KL and perplexity score the whole distribution; a greedy draft is kept only when its top "
                    "token is the target's.",
                    lambda soft_kl, hard_kl, **_: _favoured(soft_kl, hard_kl, 2, False)),
            Mistake("The two students' measures differ in this run's table: compare them as printed.",
                    lambda **_: "c"),
        ]),
    Exercise(
        "9.4", EXPLAIN, answer=lambda alpha, gamma: _break_even(alpha, gamma), rel=0.02, abs=1e-6,
        example=dict(alpha=0.146, gamma=3),
        hint="Set section 8's speed-up E(α, γ) / (γc + 1) to 1 and solve for c.",
        mistakes=[
            Mistake("A round costs γc for the draft plus one target step for the verification: count both.",
                    lambda alpha, gamma: expected_tokens(alpha, gamma) / gamma),
            Mistake("The draft runs {gamma} steps of cost c in every round, not one.",
                    lambda alpha, gamma: expected_tokens(alpha, gamma) - 1),
            Mistake("A round keeps E(α, γ) tokens, accepted proposals in a chain plus the target's own; "
                    "α alone is only the first proposal's chance.",
                    lambda alpha, gamma: alpha / gamma),
        ]),
    Exercise(
        "9.5", CODE, answer=lambda **_: spread_layers, example={}, cases=_cases_9_5,
        hint="The first kept layer is 0, the last is n_layers - 1, and the gaps between them are as equal as "
             "whole layers allow.",
        mistakes=[
            Mistake("Keeping one layer in every n_layers // k misses the teacher's last layer: spread the k "
                    "layers from the first to the last.",
                    lambda **_: lambda n_layers, k: list(range(0, n_layers, n_layers // k))[:k]),
            Mistake("Round each position to the nearest layer, not down.",
                    lambda **_: lambda n_layers, k: [i * (n_layers - 1) // (k - 1) for i in range(k)]),
            Mistake("Your last layer is not the teacher's last: count the k - 1 gaps between the kept layers, "
                    "not the k layers.",
                    lambda **_: lambda n_layers, k: [(2 * i * n_layers + k) // (2 * k) for i in range(k)]),
        ]),
)
check, verdict = EXERCISES.check, EXERCISES.verdict
