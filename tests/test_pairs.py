"""Section 7's comparisons of schemes: overlapping intervals, every pair both ways, the battery's parting gap."""
from __future__ import annotations

import math

import pytest
import torch

from helpers import s07_pairs as pairs
from helpers import s07_quality as quality


def _perplexity(per_token: torch.Tensor) -> quality.Perplexity:
    nll, t = float(per_token.mean()), per_token.numel()
    se = float(per_token.std() / math.sqrt(t))
    return quality.Perplexity(nll, math.exp(nll), 1.0, t, 100, math.nan, se, 0.0, per_token)


def _agreement(hits: list[int]) -> quality.Agreement:
    k, n = sum(hits), len(hits)
    lo, hi = quality.wilson(k, n)
    return quality.Agreement(k, n, k / n, lo, hi, 0.0, tuple(hits))


def test_intervals_overlap_when_they_share_a_point():
    assert pairs.overlap((1, 3), (2, 4)) and pairs.overlap((2, 4), (1, 3))
    assert pairs.overlap((1, 2), (2, 3))                      # touching counts
    assert not pairs.overlap((1, 2), (2.5, 3)) and not pairs.overlap((2.5, 3), (1, 2))
    assert pairs.overlap((0, 10), (4, 5))                     # one inside the other


def test_a_small_shift_on_shared_difficulty_is_told_apart_only_when_paired():
    """Three schemes read the same hard and easy tokens: a shift of 0.01 nats is far inside each interval, yet the
    paired difference, which cancels each token's difficulty, excludes 0; a shift of 0 is told apart by nothing."""
    g = torch.Generator().manual_seed(3)
    base = 4 + 2 * torch.randn(512, generator=g, dtype=torch.float64)
    ppl = {"ref": _perplexity(base), "same": _perplexity(base.clone()), "worse": _perplexity(base + 0.01)}
    hits = [1] * 100 + [0] * 28
    agr = {k: _agreement(hits) for k in ppl}
    got = {(p.a, p.b): p for p in pairs.compare(ppl, agr)}
    assert list(got) == [("ref", "same"), ("ref", "worse"), ("same", "worse")]
    shifted = got[("ref", "worse")]
    assert not shifted.nll_apart and shifted.nll.separates and shifted.nll.mean == pytest.approx(-0.01)
    assert not got[("ref", "same")].nll.separates and not got[("ref", "same")].agreement.separates
    assert pairs.told_apart(list(got.values())) == {("unpaired", "nll"): 0, ("unpaired", "agreement"): 0,
                                                     ("paired", "nll"): 2, ("paired", "agreement"): 0}


def test_agreement_far_apart_is_told_apart_both_ways():
    tokens = torch.linspace(1, 5, 256, dtype=torch.float64)
    ppl = {"a": _perplexity(tokens), "b": _perplexity(tokens)}
    agr = {"a": _agreement([1] * 144), "b": _agreement([1, 0] * 72)}
    (p,) = pairs.compare(ppl, agr)
    assert p.agreement_apart and p.agreement.separates and p.agreement.mean == pytest.approx(0.5)
    assert not p.nll_apart and not p.nll.separates


def test_compare_refuses_mismatched_schemes_and_missing_token_nlls():
    ppl = {"a": _perplexity(torch.ones(64, dtype=torch.float64))}
    with pytest.raises(ValueError, match="same schemes"):
        pairs.compare(ppl, {"b": _agreement([1] * 16)})
    bare = quality.Perplexity(1.0, math.e, 1.0, 64, 100, math.nan)
    with pytest.raises(ValueError, match="per_token"):
        pairs.compare({"a": bare}, {"a": _agreement([1] * 16)})


def test_the_parting_gap_is_the_nearest_score_whose_interval_is_apart():
    for k, n in ((12, 16), (0, 16), (8, 16), (70, 144)):
        gap = pairs.parting_gap(k, n)
        here = quality.wilson(k, n)
        assert not pairs.overlap(quality.wilson(k + gap if k + gap <= n else k - gap, n), here)
        assert all(pairs.overlap(quality.wilson(j, n), here) for j in range(n + 1) if abs(j - k) < gap)
    assert pairs.parting_gap(12, 16) == 8                      # what notebook 07 prints for group-128's 12 of 16
    assert pairs.parting_gap(1, 2) is None                     # two questions: every interval overlaps


def test_a_rate_trace_puts_each_rate_inside_its_wilson_interval():
    t = pairs.rate_trace(["a", "b"], [3, 16], 16, "#000000", name="battery")
    assert list(t.y) == [3 / 16, 1.0] and t.name == "battery"
    for k, p, up, down in zip((3, 16), t.y, t.error_y.array, t.error_y.arrayminus):
        assert (p - down, p + up) == pytest.approx(quality.wilson(k, 16))
