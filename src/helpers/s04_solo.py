"""What a request produces alone: the reference every batched reply is held to.

Section 4 (notebooks/04-batching.md), part 2.

* :func:`off_greedy`: check a batched reply against what the request produces alone (prefill, then batch-1
  decode steps: :func:`helpers.s01_kv_cache.generate_cached`) without generating it, one teacher-forced pass per
  request (over the reply alone when the request's prefill is at hand), up to ties (:data:`TIE_GAP`) that
  rounding may break either way; :func:`summarize` counts what it found for a table.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .infra.messages import message
from . import s01_kv_cache as kc


TIE_GAP = 1e-3      # logits closer than this are a tie that rounding may break either way


@dataclass(frozen=True)
class Parted:
    """What :func:`off_greedy` found over a run's requests, counted."""
    same: int                # requests whose every token is the model's own pick alone
    ties: int                # requests that parted from it only at ties (every gap at most the tie gap)
    largest_gap: float       # the largest gap over all parted requests (0.0 when none parted)
    where: str               # "request:token" (token counted from 1) where each parted request first did, or "—"


def summarize(found: Sequence[tuple[int, int, float]], requests: int, tie: float = TIE_GAP) -> Parted:
    """Count :func:`off_greedy`'s findings over ``requests`` requests, for one row of a table."""
    if len(found) > requests:
        raise ValueError(message("{found} requests parted, more than the {requests} served: pass the run's count.",
                                 found=len(found), requests=requests))
    gaps = [gap for *_, gap in found]
    return Parted(requests - len(found), sum(g <= tie for g in gaps), max(gaps, default=0.0),
                  " ".join(f"{i}:{k + 1}" for i, k, _ in found) or "—")


@torch.inference_mode()
def off_greedy(model, prompts: Sequence[torch.Tensor], outputs, lengths: Sequence[int] | None = None,
               seen: dict | None = None, prefills: dict | None = None) -> list[tuple[int, int, float]]:
    """The tokens of batched outputs that the model, serving the request alone, would not have picked.

    One forward pass per request, alone and without a cache, over its prompt and its batched output
    (teacher forcing; given the prompt's prefill, over the output only, continuing from the prefill's
    cache): the logits at each position say what the request would pick next alone, given
    the same text so far. A greedy output equals the request's solo run exactly when every token is that
    pick, so this checks every token at one pass per request instead of one decode step per token.

    A batch computes each row from the same values as a solo run, but a matrix with more rows may be
    multiplied with its sums in another order, so logits can differ in the last bits; greedy decoding
    turns that into another token only where the two best logits (nearly) tie. For each request with such
    a token this returns ``(request, first such token's index, gap)``, where ``gap`` is the largest amount,
    over all its such tokens, by which the batch's token fell short of the solo pick. At or under
    :data:`TIE_GAP` the batch broke ties the other way; far above it, the batch computed something else.

    ``outputs[i]`` (a list, or a dict such as ``Schedule.outputs``) is request ``i``'s output; with
    ``lengths`` an output of the wrong length is reported with an infinite gap (a length bug, not a tie).
    ``seen``, a dict the caller keeps across calls, saves the pass for a reply already checked, or for the
    start of one (the logits of a causal model at a position do not depend on the tokens after it).
    ``prefills``, the :class:`helpers.s04_slots.Prefill` of each prompt (keyed by its tokens, as
    :func:`helpers.s04_servers.serve_side_by_side` keeps them): the prompt's part of the pass is that prefill,
    already run alone, so the pass continues from its cache over the reply only (see :func:`solo_logits`).
    """
    seen = {} if seen is None else seen
    found = []
    for i, prompt in enumerate(prompts):
        got = tuple(int(t) for t in outputs[i])
        if lengths is not None and len(got) != lengths[i]:
            found.append((i, min(len(got), lengths[i]), float("inf")))
            continue
        if not got:
            continue
        mine = torch.tensor(got, dtype=prompt.dtype, device=prompt.device)
        key = tuple(prompt.reshape(-1).tolist())
        checked = seen.setdefault(key, [])
        known = next(((pick, short) for reply, pick, short in checked if reply[:len(got)] == got), None)
        if known is None:
            logits = solo_logits(model, prompt, mine, (prefills or {}).get(key))
            # logits[j] predicts output token j: the solo pick there, and how far the batch's token fell short
            known = logits.argmax(-1), logits.max(-1).values - logits.gather(-1, mine[:, None])[:, 0]
            checked.append((got, *known))
        pick, short = known[0][:len(got)], known[1][:len(got)]
        off = (pick != mine).nonzero()[:, 0]
        if len(off):
            found.append((i, int(off[0]), float(short[off].max())))
    return found


@torch.inference_mode()
def solo_logits(model, prompt: torch.Tensor, reply: torch.Tensor, prefill=None) -> torch.Tensor:
    """Teacher forcing, alone: row ``j`` holds the logits with which the request, run alone on its prompt and
    ``reply[:j]``, picks its next token. ``reply`` is a 1-D tensor of token ids.

    Without ``prefill``, one pass over prompt and reply with no cache. With the prompt's
    :class:`helpers.s04_slots.Prefill`, the prompt's part of that pass has already been run alone: row 0 is the
    prefill's own last-position logits, and the rest comes from one pass over the reply continuing from its
    cache. A sliding-window layer's cache keeps only its window, and a cache rebuilt from it would not know
    where in the sequence it is, so such a prefill is not continued: the full pass runs instead.
    """
    holds_prompt = prefill is not None and all(k.shape[-2] == prompt.shape[1] for k, _ in prefill.kv)
    if not holds_prompt:
        return kc.forward(model, torch.cat([prompt, reply[None]], dim=1))[0][0, prompt.shape[1] - 1:-1]
    rows = [prefill.logits[None]]
    if len(reply) > 1:
        rows.append(kc.forward(model, reply[None, :-1], cache=kc.cache_from_kv(model, prefill.kv))[0][0])
    return torch.cat(rows)
