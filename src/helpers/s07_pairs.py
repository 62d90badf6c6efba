"""Which measurement tells two schemes apart? Section 7 (notebooks/07-quality.md), after its table.

Every scheme of section 7 reads the same tokens (perplexity) and the same positions (agreement), so two schemes
can be compared two ways:

* **unpaired**: each scheme's own 95 % interval, and whether the two intervals :func:`overlap`;
* **paired**: the difference token by token (position by position), with its own interval
  (:func:`helpers.s07_quality.paired_difference`), which cancels the difficulty the two schemes share.

:func:`compare` does both for every pair of schemes, :func:`told_apart` counts the pairs each way separates,
:func:`parting_gap` says how far apart two battery scores must be before their intervals part, and
:func:`rate_trace` draws rates with their Wilson intervals.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import plotly.graph_objects as go
import torch

from .infra.messages import message
from .s07_quality import Agreement, PairedDifference, Perplexity, paired_difference, wilson


def overlap(a: Sequence[float], b: Sequence[float]) -> bool:
    """True when the intervals ``a = (low, high)`` and ``b`` share a point (touching counts)."""
    return a[0] <= b[1] and b[0] <= a[1]


@dataclass(frozen=True)
class Pair:
    """Two schemes compared both ways; the differences are ``a`` minus ``b``."""
    a: str
    b: str
    nll: PairedDifference           # a's NLL minus b's, token by token (nats per token)
    agreement: PairedDifference     # a's hits minus b's, position by position
    nll_apart: bool                 # the two perplexity intervals do not overlap
    agreement_apart: bool           # the two agreement intervals do not overlap


def compare(ppl: Mapping[str, Perplexity], agr: Mapping[str, Agreement], block: int = 8) -> list[Pair]:
    """Every pair of schemes (in the mappings' order), paired and unpaired, on perplexity and agreement.

    ``ppl`` must keep each token's NLL (``per_token``, as :func:`helpers.s07_quality.perplexity` does). Agreement's
    bootstrap resamples runs of ``block`` positions (neighbouring positions of a reply are correlated).
    """
    names = list(ppl)
    if set(names) != set(agr):
        raise ValueError(message("Perplexity and agreement must cover the same schemes, got {names} and {agreements}.",
                                 names=names, agreements=list(agr)))
    if any(ppl[k].per_token is None for k in names):
        raise ValueError(message("Pass perplexities that keep each token's NLL (per_token), as quality.perplexity "
                                 "does."))
    hits = {k: torch.tensor(agr[k].per_position, dtype=torch.float64) for k in names}
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            out.append(Pair(a, b, paired_difference(ppl[a].per_token, ppl[b].per_token),
                            paired_difference(hits[a], hits[b], block=block),
                            not overlap(ppl[a].interval(), ppl[b].interval()),
                            not overlap((agr[a].low, agr[a].high), (agr[b].low, agr[b].high))))
    return out


def told_apart(pairs: Sequence[Pair]) -> dict[tuple[str, str], int]:
    """How many pairs each way separates: keys ("unpaired" or "paired", "nll" or "agreement")."""
    return {("unpaired", "nll"): sum(p.nll_apart for p in pairs),
            ("unpaired", "agreement"): sum(p.agreement_apart for p in pairs),
            ("paired", "nll"): sum(p.nll.separates for p in pairs),
            ("paired", "agreement"): sum(p.agreement.separates for p in pairs)}


def parting_gap(k: int, n: int) -> int | None:
    """The fewest questions another score of ``n`` must differ from ``k`` by for the two Wilson intervals not to
    overlap; ``None`` when no score of ``n`` gets that far."""
    here = wilson(k, n)
    gaps = [abs(j - k) for j in range(n + 1) if not overlap(wilson(j, n), here)]
    return min(gaps, default=None)


def rate_trace(x: Sequence[str], hits: Sequence[int], n: int, color: str, name: str) -> go.Scatter:
    """Markers at ``hits[i] / n`` with asymmetric error bars from their 95 % Wilson intervals."""
    rates = [k / n for k in hits]
    iv = [wilson(k, n) for k in hits]
    return go.Scatter(x=list(x), y=rates, mode="markers", name=name, marker=dict(size=10, color=color),
                      error_y=dict(type="data", symmetric=False, array=[h - p for p, (_, h) in zip(rates, iv)],
                                   arrayminus=[p - lo for p, (lo, _) in zip(rates, iv)]))
