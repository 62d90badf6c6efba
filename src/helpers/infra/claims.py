"""The chapter's empirical claims, checked on whatever model the reader loaded (infrastructure).

A claim such as "decode time is flat in the context length" or "one dimension
of the residual stream dwarfs the rest" is a finding about a trained model,
not a law. The chapter states it for its default model, so on that model CI
must fail when it stops holding. A reader who points the chapter at another
model (``MIC_MODEL``) should instead *learn* which claims carry over. So:

* on the default embedded model, :func:`claim` asserts;
* on any other model, or with ``MIC_CLAIMS=report``, it shows a verdict,
  "holds on this model" or "does not hold on this model", with the evidence,
  and the notebook goes on.

Structural facts (the cache is exact, bytes add up) are not claims: notebooks
check them with plain ``assert`` on every model.

A claim about speed is read off a timing, and other programs sharing the
machine can only slow a run down. One disturbed run is no evidence against
such a claim; the same failure on fresh runs is. The notebooks measure such
claims with :func:`measure_checked`: it measures afresh (up to twice) while a
check fails, can pool the fresh runs with the earlier ones, and shows every
measurement that failed. :func:`measure_until` is the bare loop for a single
condition, returning every run.
"""
from __future__ import annotations

import os
from typing import Callable, Mapping, TypeVar

from .model import is_default_model
from .controls import say
from .messages import fields_of, message

T = TypeVar("T")

CLAIMS_ENV = "MIC_CLAIMS"          # "assert" (default on the embedded model) or "report"


def strict() -> bool:
    """True when a failed claim should stop the notebook: the default model and no ``MIC_CLAIMS=report``."""
    mode = os.environ.get(CLAIMS_ENV, "").strip().lower()
    if mode not in ("", "assert", "report"):
        raise ValueError(message("{setting} must be 'assert' or 'report', got {mode!r}.", setting=CLAIMS_ENV,
                                 mode=mode))
    if mode:
        return mode == "assert"
    return is_default_model()


def verdict(holds: bool, statement: str, evidence: str = "") -> str:
    """One line of Markdown: the claim (already formatted), whether it holds here, and the numbers."""
    mark = message("✔ holds on this model") if holds else message("✘ does not hold on this model")
    if evidence:
        return message("**Claim:** {statement}. **{mark}** ({evidence}).", statement=statement, mark=mark,
                       evidence=evidence)
    return message("**Claim:** {statement}. **{mark}**.", statement=statement, mark=mark)


def claim(holds, statement: str, evidence: str = "", fields: Mapping[str, object] | None = None, /,
          **more) -> bool:
    """Check one of the chapter's empirical claims.

    ``holds`` is the comparison (``ratio < 1.3``), ``statement`` the claim in words and ``evidence``
    the measured numbers, both templates whose named fields come from ``fields`` and keywords::

        claim(r < 1.3, "decode time is flat in the context", "{r:.2f}x from 16 to 1,024 tokens", r=r)

    Asserts on the default model; elsewhere shows the verdict and returns it.
    """
    holds, values = bool(holds), {**(fields or {}), **more}
    unused = values.keys() - fields_of(statement) - fields_of(evidence)
    if unused:
        raise ValueError(f"claim() was given fields its sentences do not use: {sorted(unused)}.")
    statement = message(statement, **{k: v for k, v in values.items() if k in fields_of(statement)})
    evidence = message(evidence, **{k: v for k, v in values.items() if k in fields_of(evidence)})
    if strict():
        assert holds, message("The chapter's claim failed on the default model: {statement} ({evidence}).",
                              statement=statement, evidence=evidence)
        return True
    say("{line}", line=verdict(holds, statement, evidence))
    return holds


def measure_until(measure: Callable[[], T], holds: Callable[[T], bool], runs: int = 2) -> list[T]:
    """Run ``measure()``; while ``holds(result)`` is False, measure afresh, up to ``runs`` runs in all.

    For claims about speed on the default model: a claim that fails ``runs`` times in a row then fails
    for real (:func:`claim` asserts on the last run). Where claims are only reported it measures once.
    Returns every result in order; the last is the one to use, any before it are the runs that failed.
    """
    if runs < 1:
        raise ValueError(message("runs must be at least 1, got {runs}.", runs=runs))
    results = [measure()]
    while len(results) < runs and strict() and not holds(results[-1]):
        results.append(measure())
    return results


Checks = dict[str, tuple]      # {name: (holds, statement, evidence[, fields])}: claim's arguments


def _stated(holds, statement: str, evidence: str = "", fields: Mapping[str, object] | None = None) -> str:
    """A check's statement and evidence, formatted: "statement (evidence)"."""
    fields = fields or {}
    return "{} ({})".format(message(statement, **{k: v for k, v in fields.items() if k in fields_of(statement)}),
                            message(evidence, **{k: v for k, v in fields.items() if k in fields_of(evidence)}))


def measure_checked(measure: Callable[[], T], checks: Callable[[T], Checks], runs: int = 3,
                    combine: Callable[[T, T], T] | None = None) -> tuple[T, Checks]:
    """Measure, check the claims that read the measurement, and measure afresh while one of them fails.

    ``checks(result)`` returns ``{name: (holds, statement, evidence)}``. While any of them fails on the default
    model, measure afresh, up to ``runs`` measurements in all; each one that did not bear them out is shown with
    its numbers, not hidden. ``combine(earlier, fresh)``, where given, pools a fresh measurement with the earlier
    ones: a claim read off the fastest runs only gets closer to the real cost with more runs, and a busy spell
    that hit one step of every run so far is outvoted. Returns the last (pooled) result and its checks, to pass
    to :func:`claim`: ``claim(*checks["name"])``.
    """
    if runs < 1:
        raise ValueError(message("runs must be at least 1, got {runs}.", runs=runs))
    result, done = measure(), 1
    while done < runs and strict() and not all(bool(c[0]) for c in checks(result).values()):
        failed = "; ".join(_stated(*c) for c in checks(result).values() if not c[0])
        if combine is None:
            say("A measurement did not bear out: {failed}. It was measured afresh: a claim about speed fails only "
                "when fresh measurements fail too.", failed=failed)
        else:
            say("A measurement did not bear out: {failed}. It was measured afresh, and the runs pooled: a claim "
                "about speed fails only when fresh measurements fail too.", failed=failed)
        fresh = measure()
        result, done = (fresh if combine is None else combine(result, fresh)), done + 1
    return result, checks(result)
