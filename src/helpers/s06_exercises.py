"""Section 6's exercises and their checkers: the one-scale step of the embeddings, B's kind of outlier, what the
whole-matrix error weighs, LLM.int8()'s decomposition.

Notebook 06 ends with these; ``check("6.3", answer, **facts)`` judges an answer against the right one,
computed from the facts the notebook passes in (:mod:`helpers.infra.exercises`).

* 6.1 predict, then measure: the INT8 scale of the token embeddings (layer 0 of the residual stream) with one
  scale for it all (section 6.3 printed the dissected layer's; this one the page does not print).
* 6.2 explain: what kind of outlier matmul B's input holds (a letter), and so whether per-token scales can help.
* 6.3 explain: the weight the whole-matrix error gives every token of matmul A but the largest.
* 6.4 change the code: LLM.int8()'s mixed-precision decomposition, around section 6's INT8 matmul.
"""
from __future__ import annotations

import torch

from .infra.exercises import CODE, EXPLAIN, PREDICT, Exercise, ExerciseSet, Mistake
from .s06_int8_matmuls import int8_matmul, llm_int8_matmul

# --------------------------------------------------------------------------- 6.2: B's kind of outlier

BAR = 10          # the dissection table's bar: ten times the median dimension's maximum


def outlier_kind(x: torch.Tensor) -> str:
    """The right letter of 6.2 for a linear layer's input ``x`` (tokens, in), by the dissection table's count.

    The top dimension (largest max |x|) above the bar on no token: "c", no outlier; on more than half of the
    tokens: "a", a dimension outlier; on some but at most half: "b", an outlier carried by a few tokens.
    """
    m = x.abs().amax(dim=0)
    top = int(m.argmax())
    above = int((x[:, top].abs() > BAR * m.median()).sum())
    return "c" if above == 0 else "a" if above > x.shape[0] / 2 else "b"


# a wrong letter for each mistake, whatever the right one: confusing tokens with dimensions, or missing the bar
_OTHER_KIND = {"a": "b", "b": "a", "c": "b"}
_OTHER_BAR = {"a": "c", "b": "c", "c": "a"}


def _example_input() -> torch.Tensor:
    """Made-up facts shaped like the default run's B (84 tokens, 192 inputs): one dimension high on 83 tokens."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(84, 192, generator=g)
    x[1:, 47] = 40 + torch.rand(83, generator=g)
    return x


# --------------------------------------------------------------------------- 6.3: what the whole-matrix error weighs


def _squared_norms(output):
    return output.double().norm(dim=1) ** 2


def _rest_share(output) -> float:
    sq = _squared_norms(output)
    return float(1 - sq.max() / sq.sum())


def _rest_share_of_norms(output) -> float:
    n = output.double().norm(dim=1)
    return float(1 - n.max() / n.sum())


def _example_output() -> torch.Tensor:
    """Made-up facts with the default run's shape: A's output (84 tokens x 576), the largest token carrying all of
    ||Y||^2 but a share of 1.9e-4, spread evenly over the other 83."""
    y = torch.zeros(84, 576, dtype=torch.float64)
    y[0, 0] = (1 - 1.9e-4) ** 0.5
    y[1:, 1] = (1.9e-4 / 83) ** 0.5
    return y


# --------------------------------------------------------------------------- 6.4: LLM.int8()


def llm_int8(x: torch.Tensor, w: torch.Tensor, threshold: float) -> torch.Tensor:
    """The reference for 6.4: ``x @ w.T`` by LLM.int8()'s decomposition (section 6's helper, its result only)."""
    return llm_int8_matmul(x, w, threshold)[0]


def _split(x, w, outlier, x_per="token", w_per="channel", add_outliers=True):
    """A decomposition whose outlier columns are ``outlier`` (a bool mask): the mistakes below vary its parts."""
    y = x[:, outlier].float() @ w[:, outlier].float().T if add_outliers else torch.zeros(x.shape[0], w.shape[0])
    if (~outlier).any():
        y = y + int8_matmul(x[:, ~outlier], w[:, ~outlier], x_per, w_per)
    return y


def _by_tokens(x, w, threshold):
    """The mistake of setting aside outlier *tokens* (rows of x) in full precision instead of dimensions."""
    rows = x.abs().amax(dim=1) >= threshold
    y = x.float() @ w.float().T
    if (~rows).any():
        y[~rows] = int8_matmul(x[~rows], w, "token", "channel")
    return y


def _cases_6_4(**_):
    g = torch.Generator().manual_seed(64)
    x = torch.randn(12, 32, generator=g) * 0.5
    x[:, 3] *= 40                                  # a dimension outlier, on every token
    x[5, 17] = 9.0                                 # one large value on one token
    x[7, 25] = 4.0                                 # and one above the lower threshold only
    w = torch.randn(8, 32, generator=g) * 0.1
    w[2, 20] = 8.0                                 # a large weight, which LLM.int8() does not look at
    tie = torch.randn(10, 16, generator=g)
    tie = tie / tie.abs().max() * 5                # every |x| <= 5 ...
    tie[4, 9] = 6.0                                # ... but one that equals the threshold
    w_tie = torch.randn(6, 16, generator=g)
    return [(x, w, 6.0), (x, w, 3.0), (x, w, 50.0), (tie, w_tie, 6.0), (tie, w_tie, 5.5)]


EXERCISES = ExerciseSet(
    Exercise(
        "6.1", PREDICT, answer=lambda peak: peak / 127, rel=0.003, example=dict(peak=0.883),
        mistakes=[
            Mistake("Code 128 exists only as -128: absmax maps the largest value to the largest positive code.",
                    lambda peak: peak / 128),
            Mistake("256 is the number of levels on both sides of zero; the step is set by the positive side alone.",
                    lambda peak: peak / 256),
            Mistake("The scale is the size of one step: divide the largest value by the largest code.",
                    lambda peak: peak * 127),
        ]),
    Exercise(
        "6.2", EXPLAIN, answer=lambda x: outlier_kind(x), choices="abc", example=dict(x=_example_input()),
        hint="Read B's row of the dissection table: on how many of its tokens does its top dimension clear the bar?",
        mistakes=[
            Mistake("A dimension outlier is one column of x, high on most tokens; an outlier on a few tokens is "
                    "carried by those rows: count the tokens above the bar.",
                    lambda x: _OTHER_KIND[outlier_kind(x)]),
            Mistake("Compare the top dimension's values with ten times the median dimension's maximum, token by "
                    "token, as the dissection table does.",
                    lambda x: _OTHER_BAR[outlier_kind(x)]),
        ]),
    Exercise(
        "6.3", EXPLAIN, answer=lambda output: _rest_share(output), rel=0.01, example=dict(output=_example_output()),
        hint="The whole-matrix error weighs each token by its squared output norm over ||Y||^2: add up the weights.",
        mistakes=[
            Mistake("The Frobenius norm adds *squared* norms: weigh each token by its ||y_t||^2, not ||y_t||.",
                    lambda output: _rest_share_of_norms(output)),
            Mistake("That is the largest token's own weight; the exercise asks for all the other tokens together.",
                    lambda output: 1 - _rest_share(output)),
            Mistake("Give a fraction between 0 and 1, not a percentage.",
                    lambda output: 100 * _rest_share(output)),
        ]),
    Exercise(
        "6.4", CODE, answer=lambda **f: llm_int8, example={}, cases=_cases_6_4,
        hint="Outlier dimensions: the columns of x where some |x| >= threshold. Multiply them (and w's matching "
             "columns) in full precision, the rest with vector-wise INT8, and add the two.",
        mistakes=[
            Mistake("A value equal to the threshold is an outlier too: compare |x| >= threshold.",
                    lambda **f: lambda x, w, t: _split(x, w, x.abs().amax(dim=0) > t)),
            Mistake("LLM.int8() picks the outlier dimensions from the activations x, where the outliers live; the "
                    "weights are not compared with the threshold.",
                    lambda **f: lambda x, w, t: _split(x, w, w.abs().amax(dim=0) >= t)),
            Mistake("The outliers are dimensions, columns of x: set aside columns (with w's matching columns), not "
                    "tokens.",
                    lambda **f: _by_tokens),
            Mistake("Add the full-precision product of the outlier columns back: the INT8 part leaves them out.",
                    lambda **f: lambda x, w, t: _split(x, w, x.abs().amax(dim=0) >= t, add_outliers=False)),
            Mistake("The INT8 part is vector-wise: one scale per token of x and one per output channel of w.",
                    lambda **f: lambda x, w, t: _split(x, w, x.abs().amax(dim=0) >= t, "tensor", "tensor")),
        ]),
)
check, verdict = EXERCISES.check, EXERCISES.verdict
