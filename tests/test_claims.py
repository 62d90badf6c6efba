"""helpers.infra.claims: asserted on the default model, reported elsewhere; timing claims get a second run."""
import pytest

from helpers.infra import claims
from helpers.infra.messages import message


@pytest.fixture
def asserting(monkeypatch):
    monkeypatch.setenv(claims.CLAIMS_ENV, "assert")


@pytest.fixture
def reporting(monkeypatch):
    monkeypatch.setenv(claims.CLAIMS_ENV, "report")


def runs_of(*values):
    """A fake measurement: returns the given values one call at a time, and counts the calls."""
    it = iter(values)
    calls = []

    def measure():
        calls.append(1)
        return next(it)
    return measure, calls


def test_a_failed_claim_asserts_with_its_evidence(asserting):
    with pytest.raises(AssertionError, match=r"grows \(1.1x\)"):
        claims.claim(1.1 > 1.2, "it grows", "1.1x")
    assert claims.claim(True, "it grows") is True


def test_a_failed_claim_is_reported_and_the_notebook_goes_on(reporting):
    assert claims.claim(False, "it grows", "1.1x") is False


def test_a_disturbed_first_run_is_measured_again(asserting):
    measure, calls = runs_of(1.1, 1.4, 1.5)
    assert claims.measure_until(measure, lambda r: r > 1.2) == [1.1, 1.4]
    assert len(calls) == 2


def test_a_run_that_holds_is_not_repeated(asserting):
    measure, calls = runs_of(1.4, 1.5)
    assert claims.measure_until(measure, lambda r: r > 1.2) == [1.4]
    assert len(calls) == 1


def test_a_claim_that_keeps_failing_stops_after_the_last_run(asserting):
    measure, calls = runs_of(1.0, 1.1, 1.15, 9.9)
    assert claims.measure_until(measure, lambda r: r > 1.2, runs=3) == [1.0, 1.1, 1.15]
    with pytest.raises(AssertionError):
        claims.claim(1.15 > 1.2, "it grows")


def test_reported_claims_are_measured_once(reporting):
    measure, calls = runs_of(1.0, 1.5)
    assert claims.measure_until(measure, lambda r: r > 1.2) == [1.0]


def test_bad_input_gets_one_sentence(asserting, monkeypatch):
    with pytest.raises(ValueError, match="runs must be at least 1"):
        claims.measure_until(lambda: 1, lambda r: True, runs=0)
    monkeypatch.setenv(claims.CLAIMS_ENV, "maybe")
    with pytest.raises(ValueError, match="must be 'assert' or 'report'"):
        claims.strict()


def growth_checks(r):
    return {"grows": (r > 1.2, "it grows", f"{r:.1f}x"), "finite": (r < 9, "it stays finite", f"{r:.1f}")}


def test_measure_checked_measures_afresh_shows_the_failed_run_and_returns_the_last(asserting, monkeypatch):
    shown = []
    monkeypatch.setattr(claims, "say", lambda t, **f: shown.append(message(t, **f)))
    measure, calls = runs_of(1.1, 1.4, 1.5)
    result, checks = claims.measure_checked(measure, growth_checks)
    assert (result, len(calls)) == (1.4, 2)
    assert checks == growth_checks(1.4) and claims.claim(*checks["grows"])
    assert len(shown) == 1 and "it grows (1.1x)" in shown[0] and "stays finite" not in shown[0]


def test_measure_checked_keeps_a_run_where_every_check_holds(asserting, monkeypatch):
    shown = []
    monkeypatch.setattr(claims, "say", lambda t, **f: shown.append(message(t, **f)))
    measure, calls = runs_of(1.4, 1.5)
    assert claims.measure_checked(measure, growth_checks) == (1.4, growth_checks(1.4))
    assert (len(calls), shown) == (1, [])


def test_measure_checked_hands_a_repeated_failure_to_claim(asserting, monkeypatch):
    monkeypatch.setattr(claims, "say", lambda t, **f: None)
    measure, calls = runs_of(1.0, 1.1, 1.15, 1.5)
    result, checks = claims.measure_checked(measure, growth_checks)          # three measurements in all
    assert (result, len(calls)) == (1.15, 3)
    with pytest.raises(AssertionError, match=r"it grows \(1.1x\)"):
        claims.claim(*checks["grows"])
    measure, calls = runs_of(1.0, 1.1, 1.5)
    assert claims.measure_checked(measure, growth_checks, runs=2)[0] == 1.1 and len(calls) == 2


def test_measure_checked_pools_fresh_runs_with_earlier_ones(asserting, monkeypatch):
    shown = []
    monkeypatch.setattr(claims, "say", lambda t, **f: shown.append(message(t, **f)))
    measure, calls = runs_of([1.1], [1.0], [1.4], [9.0])       # each "run" a list of ratios; pooled, the best one
    result, checks = claims.measure_checked(measure, lambda r: growth_checks(max(r)), combine=lambda a, b: a + b)
    assert (result, len(calls)) == ([1.1, 1.0, 1.4], 3) and checks["grows"][0]
    assert len(shown) == 2 and all("pooled" in m for m in shown)


def test_measure_checked_measures_once_where_claims_are_reported(reporting, monkeypatch):
    monkeypatch.setattr(claims, "say", lambda t, **f: None)
    measure, calls = runs_of(1.0, 1.5)
    result, checks = claims.measure_checked(measure, growth_checks)
    assert (result, len(calls), checks["grows"][0]) == (1.0, 1, False)


def test_a_claim_formats_its_templates_with_named_fields(reporting, monkeypatch):
    shown = []
    monkeypatch.setattr(claims, "say", lambda t, **f: shown.append(message(t, **f)))
    assert claims.claim(True, "it grows {r:.1f}x", "from {a} to {b}", r=1.25, a=1, b=2)
    assert claims.claim(False, "flat", "{r:.2f}x", {"r": 1.5}) is False
    assert "it grows 1.2x" in shown[0] and "(from 1 to 2)" in shown[0] and "1.50x" in shown[1]
    with pytest.raises(ValueError, match="do not use"):
        claims.claim(True, "flat", "{r:.2f}x", r=1.0, extra=2)
    with pytest.raises(ValueError, match="missing"):
        claims.claim(True, "flat {x}", "{r:.2f}x", r=1.0)
