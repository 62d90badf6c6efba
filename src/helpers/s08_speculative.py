"""Speculative decoding, section 8 (notebooks/08-speculative-decoding.md): the arithmetic, the rule, the loop.

* the arithmetic: :func:`expected_tokens` per verification, (1 - α^(γ+1)) / (1 - α), and
  :func:`speedup`, that divided by the cost of a round, γc + v (v = 1 in the chapter; on a CPU the
  measured cost of verifying γ + 1 tokens in one forward, relative to one);
* the rule of Leviathan et al. (2023): the draft proposes x ~ q, the target keeps it with probability
  min(1, p(x) / q(x)), and otherwise samples from the residual max(p - q, 0), normalised
  (:func:`accept_token`, :func:`residual`). p is always the *target*, q the *draft*;
* :func:`speculative_generate`: the loop, greedy or sampled, with any draft object (``start``, ``propose``,
  ``commit``: the drafts of :mod:`helpers.s08_drafts`, which builds on this module).

Section 9 reuses :func:`processed` (softmax of logits / T: its soft labels) and :func:`speedup`.
"""
from __future__ import annotations

import math

import torch

from . import s01_kv_cache as kc
from .infra.measure import interleaved_medians, now
from .infra.messages import message

# --------------------------------------------------------------------------- the arithmetic


def check_params(alpha: float, gamma: int, c: float | None = None) -> None:
    """Raise ``ValueError`` (one sentence) for an α outside [0, 1), a γ below 1, or a c that is not positive."""
    if not 0 <= alpha < 1:
        raise ValueError(message("alpha must be in [0, 1) (an acceptance rate below certainty), got {alpha}.",
                                 alpha=alpha))
    if isinstance(gamma, bool) or int(gamma) != gamma or gamma < 1:
        raise ValueError(message("gamma must be a whole number of draft tokens, at least 1, got {gamma}.", gamma=gamma))
    if c is not None and not c > 0:
        raise ValueError(message("c (draft cost per token as a fraction of a target step) must be > 0, got {c}.", c=c))


def expected_tokens(alpha: float, gamma: int) -> float:
    """Tokens kept per verification: the accepted prefix plus the target's own token, (1 - α^(γ+1)) / (1 - α)."""
    check_params(alpha, gamma)
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def round_cost(gamma: int, c: float, v: float = 1.0) -> float:
    """Cost of one round in target steps: γ draft tokens at c each, plus one verification costing v."""
    check_params(0.0, gamma, c)
    return gamma * c + v


def speedup(alpha: float, gamma: int, c: float, v: float = 1.0) -> float:
    """Expected tokens per round divided by the round's cost: E / (γc + v)."""
    return expected_tokens(alpha, gamma) / round_cost(gamma, c, v)


# --------------------------------------------------------------------------- the acceptance rule


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """max(p - q, 0), normalised: where the target samples after a rejection."""
    r = (p - q).clamp(min=0)
    total = r.sum()
    return r / total if total > 0 else p


def emitted_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """What the rule emits, in closed form: accepted mass min(p, q) plus the rejected mass times the residual."""
    accepted = torch.minimum(p, q)
    return accepted + (1 - accepted.sum()) * residual(p, q)


def check_distributions(p: torch.Tensor, q: torch.Tensor) -> None:
    """Raise ``ValueError`` (one sentence) unless p and q are probability vectors of one shape: no NaN, none
    negative, each summing to 1. Without this a NaN compares false and is silently never accepted."""
    for name, d in (("p (the target)", p), ("q (the draft)", q)):
        if not torch.isfinite(d).all() or (d < 0).any() or abs(float(d.sum()) - 1) > 1e-3:
            raise ValueError(message("{name} must be a probability distribution (finite, non-negative, summing to "
                                     "1); it has {bad} NaN or infinite entries and sums to {total:.4g}.",
                                     name=name, bad=int((~torch.isfinite(d)).sum()), total=float(d.nansum())))
    if p.shape != q.shape:
        raise ValueError(message("p and q must be distributions over the same vocabulary, got {p_shape} and "
                                 "{q_shape}.", p_shape=tuple(p.shape), q_shape=tuple(q.shape)))


def accept_token(p: torch.Tensor, q: torch.Tensor, x: int, generator: torch.Generator | None = None,
                 always_accept: bool = False, check: bool = True) -> tuple[bool, int]:
    """One draft token x ~ q judged against the target p. Returns (kept, the token emitted).

    ``always_accept`` is the negative control (it emits q, not p). The generator is the caller's, never reseeded.
    ``check=False`` skips :func:`check_distributions` for a caller that checked this (p, q) once already.
    """
    if check:
        check_distributions(p, q)
    if always_accept:
        return True, x
    u = torch.rand((), generator=generator, device=p.device)
    if q[x] > 0 and u * q[x] < p[x]:                 # u < min(1, p(x) / q(x)) without dividing
        return True, x
    return False, int(torch.multinomial(residual(p, q), 1, generator=generator))


def sample_rounds(p: torch.Tensor, q: torch.Tensor, n: int, generator: torch.Generator,
                  always_accept: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` independent rounds of one draft token: x ~ q, then :func:`accept_token`.

    Returns (the emitted tokens, whether each was the accepted draft token rather than a residual draw).
    """
    check_distributions(p, q)
    xs = torch.multinomial(q, n, replacement=True, generator=generator)
    rounds = [accept_token(p, q, int(x), generator, always_accept, check=False) for x in xs]
    return torch.tensor([t for _, t in rounds]), torch.tensor([kept for kept, _ in rounds])


def sample_emitted(p: torch.Tensor, q: torch.Tensor, n: int, generator: torch.Generator,
                   always_accept: bool = False) -> torch.Tensor:
    """The emitted tokens of :func:`sample_rounds`."""
    return sample_rounds(p, q, n, generator, always_accept)[0]


def total_variation(p: torch.Tensor, counts: torch.Tensor) -> float:
    """Half the L1 distance between p and the empirical distribution of ``counts``."""
    return 0.5 * float((counts / counts.sum() - p).abs().sum())


def tv_threshold(n: int, support: int, delta: float = 1e-6) -> float:
    """A TV a correct sampler exceeds with probability below ``delta``: E[TV] <= ½√(k/n) (Cauchy-Schwarz over
    the k outcomes), and TV moves by at most 1/n per draw, so McDiarmid adds √(ln(1/δ) / 2n)."""
    return 0.5 * math.sqrt(support / n) + math.sqrt(math.log(1 / delta) / (2 * n))


def processed(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None) -> torch.Tensor:
    """softmax(logits / T) restricted to the top k: the distribution a sampler really draws from (both p and q).

    With ``top_k=None`` it is the teacher's soft labels of section 9: T > 1 flattens the distribution, T < 1
    sharpens it. Computed in float32 at least (float64 logits stay float64)."""
    if not temperature > 0:
        raise ValueError(message("temperature must be > 0 (use greedy decoding for T = 0), got {temperature}.",
                                 temperature=temperature))
    if top_k is not None and (isinstance(top_k, bool) or int(top_k) != top_k or top_k < 1):
        raise ValueError(message("top_k must be a whole number of tokens, at least 1 (or None for all), got "
                                 "{top_k!r}.", top_k=top_k))
    if torch.isnan(logits).any():
        raise ValueError(message("the logits contain NaN: the model's output is broken, so there is no distribution "
                                 "to draw from."))
    z = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature   # fp64 stays fp64
    if top_k is not None and top_k < z.shape[-1]:
        cut = z.topk(top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < cut, float("-inf"))
    return torch.softmax(z, dim=-1)


# --------------------------------------------------------------------------- the loop


def verify_greedy(target_logits: torch.Tensor, proposals: list[int]) -> tuple[int, int]:
    """Longest prefix of the proposals that equals the target's argmax, and the target's next token after it."""
    choice = target_logits.argmax(-1).tolist()
    n_ok = 0
    while n_ok < len(proposals) and proposals[n_ok] == choice[n_ok]:
        n_ok += 1
    return n_ok, choice[n_ok]


def verify_sampled(p_rows: torch.Tensor, q_rows: torch.Tensor, proposals: list[int],
                   generator: torch.Generator | None) -> tuple[int, int]:
    """Leviathan's rule down the proposals; if all are kept, the bonus token is drawn from the last p."""
    for i, x in enumerate(proposals):
        kept, token = accept_token(p_rows[i], q_rows[i], x, generator)
        if not kept:
            return i, token
    return len(proposals), int(torch.multinomial(p_rows[len(proposals)], 1, generator=generator))


def acceptance_rate(accepted: int, rejected: int) -> float:
    """α estimated per *judged* token: accepted / (accepted + rejections).

    The target judges proposals in order and stops at the first rejection, so the proposals after it were never
    judged. Each judged token is accepted with probability α, so this count (the maximum-likelihood estimate) is
    the α that E(α, γ) needs; accepted / proposed counts the unjudged ones as failures and underestimates it.
    """
    judged = accepted + rejected
    return accepted / judged if judged else float("nan")


def predicted(stats: dict, gamma: int, c: float, v: float) -> dict:
    """What the formula predicts for a run of :func:`speculative_generate` from the run's own α per judged token.

    Returns tokens (E(α, γ)), chapter (the speed-up with the chapter's v = 1) and with_v (with the measured v).
    α is capped at 0.999 (E needs α < 1) and a draft that costs nothing (c = 0, prompt lookup) is taken at
    c = 1e-6, so that E / v is its speed-up.
    """
    alpha, c = min(stats["acceptance_rate"], 0.999), max(c, 1e-6)
    return dict(tokens=expected_tokens(alpha, gamma), chapter=speedup(alpha, gamma, c),
                with_v=speedup(alpha, gamma, c, v))


def _check_inputs(draft, prompt_ids: torch.Tensor, n_new: int, gamma: int) -> None:
    if not all(callable(getattr(draft, m, None)) for m in ("start", "propose", "commit")):
        raise ValueError(message("draft must have the draft protocol (start, propose, commit): wrap a model in "
                                 "helpers.s08_drafts.ModelDraft."))
    if prompt_ids.dim() != 2 or prompt_ids.shape[0] != 1 or prompt_ids.shape[1] < 1:
        raise ValueError(message("prompt_ids must be one non-empty sequence shaped (1, tokens), got {shape}.",
                                 shape=tuple(prompt_ids.shape)))
    if isinstance(n_new, bool) or not isinstance(n_new, int) or n_new < 1:
        raise ValueError(message("n_new must be a positive whole number of tokens, got {n_new!r}.", n_new=n_new))
    check_params(0.0, gamma)


@torch.inference_mode()
def speculative_generate(target, draft, prompt_ids: torch.Tensor, n_new: int, gamma: int,
                         sample: bool = False, temperature: float = 1.0, top_k: int | None = None,
                         generator: torch.Generator | None = None):
    """Generate ``n_new`` tokens with ``draft`` proposing up to ``gamma`` at a time and ``target`` verifying them.

    ``draft`` is any object with the draft protocol (``start``, ``propose``, ``commit``; a causal LM sharing the
    target's vocabulary becomes one with :class:`helpers.s08_drafts.ModelDraft`). Greedy by default (the output
    equals plain greedy decoding); with ``sample=True`` Leviathan's rule on the processed distributions.
    Returns (tokens (1, n_new), stats dict: proposed, accepted, rejected, acceptance_rate (α per judged token,
    :func:`acceptance_rate`), accepted_share (accepted / proposed), target_forwards, tokens_per_forward, seconds, ...).
    """
    _check_inputs(draft, prompt_ids, n_new, gamma)
    t0 = now()
    cache = kc.rollback_cache(target)
    if prompt_ids.shape[1] > 1:
        _, cache = kc.forward(target, prompt_ids[:, :-1], cache=cache)
    draft.start(prompt_ids)
    last, out = int(prompt_ids[0, -1]), []
    proposed = accepted = rejected = forwards = 0
    while len(out) < n_new:
        held = kc.cache_length(cache)                      # every committed token except `last`
        proposals, q_rows = draft.propose(gamma, sample=sample, temperature=temperature, top_k=top_k,
                                          generator=generator)
        ids = torch.tensor([[last] + proposals], device=prompt_ids.device)
        logits, cache = kc.forward(target, ids, cache=cache)
        forwards += 1
        if sample:
            p_rows = processed(logits[0], temperature, top_k)
            n_ok, nxt = verify_sampled(p_rows, q_rows, proposals, generator)
        else:
            n_ok, nxt = verify_greedy(logits[0], proposals)
        proposed, accepted = proposed + len(proposals), accepted + n_ok
        rejected += n_ok < len(proposals)                 # the proposals after a rejection were never judged
        new = proposals[:n_ok] + [nxt]
        kc.crop_cache(cache, held + 1 + n_ok)              # keep `last` and the accepted proposals
        draft.commit(new)
        out += new
        last = nxt
    tokens = torch.tensor([out[:n_new]], device=prompt_ids.device)
    return tokens, dict(proposed=proposed, accepted=accepted, rejected=rejected,
                        acceptance_rate=acceptance_rate(accepted, rejected), accepted_share=accepted / max(proposed, 1),
                        target_forwards=forwards, tokens_per_forward=len(out) / forwards,
                        draft_forwards=getattr(draft, "forwards", 0),
                        draft_prefill_seconds=getattr(draft, "prefill_seconds", 0.0), seconds=now() - t0)


# --------------------------------------------------------------------------- what a step costs


def steps_in_turn(models: dict, prompt_ids: torch.Tensor, ks, repeats: int = 3, fastest: bool = False) -> dict:
    """Seconds of one forward over k new tokens on a cache holding the prompt, for each model and each k, all
    timed in turn (:func:`helpers.infra.measure.interleaved_medians`): load that comes and goes hits every case
    alike, so their ratios survive a noisy machine. Returns {name: {k: median, or fastest, seconds}}.

    Each model reads the prompt once; every step is cropped back to it, so each k starts from the same cache. The
    k new tokens are the prompt's last token, k times (their values do not change the cost). ``fastest`` reads the
    least disturbed run: other programs can only add time. v(k) of the formula is ``t[k] / t[1]``.
    """
    if not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in ks):
        raise ValueError(message("each k must be a whole number of new tokens, at least 1, got {ks}.", ks=list(ks)))

    def step(model, k):
        _, cache = kc.forward(model, prompt_ids, cache=kc.rollback_cache(model))     # a cache that can be cut
        held = kc.cache_length(cache)

        def run():
            kc.forward(model, prompt_ids[:, -1:].repeat(1, k), cache=cache)
            kc.crop_cache(cache, held)
        return run

    timings = interleaved_medians({(name, k): step(m, k) for name, m in models.items() for k in ks},
                                  repeats=repeats, warmup=1)
    return {name: {k: (timings[name, k].min if fastest else timings[name, k].median) for k in ks}
            for name in models}


def step_seconds(model, prompt_ids: torch.Tensor, ks, repeats: int = 3, fastest: bool = False) -> dict:
    """{k: seconds} of one model's forward over k new tokens, the ks timed in turn (:func:`steps_in_turn`)."""
    return steps_in_turn({0: model}, prompt_ids, ks, repeats, fastest)[0]


# --------------------------------------------------------------------------- predicting the loop's rounds


def greedy_rounds(agrees, gamma: int) -> dict:
    """The rounds greedy speculation plays along the target's own text, from the draft's agreement there.

    ``agrees[i]`` says whether the draft's greedy next token equals the target's at position i of the target's
    greedy text, given that text as the prefix. A round starting at i keeps the agreeing positions from i on, up
    to γ; the next position is a rejection (judged) or, after γ kept, the target's bonus token (not judged); the
    next round starts after it. Under greedy decoding this is what :func:`speculative_generate` does, round for
    round. Only rounds that end inside the text are counted. Returns accepted, rejected, rounds, tokens.
    """
    check_params(0.0, gamma)
    agrees = [bool(a) for a in agrees]
    i = accepted = rejected = rounds = tokens = 0
    while True:
        ok = 0
        while ok < gamma and i + ok < len(agrees) and agrees[i + ok]:
            ok += 1
        end = i + ok                                  # the rejected position, or the target's bonus token
        if end >= len(agrees):
            break
        accepted, rejected = accepted + ok, rejected + (ok < gamma)
        rounds, tokens, i = rounds + 1, tokens + ok + 1, end + 1
    return dict(accepted=accepted, rejected=rejected, rounds=rounds, tokens=tokens)


def held_out_prediction(per_prompt, gamma: int) -> list[dict]:
    """Estimate α on half the prompts and predict the tokens per verification on the other half, both ways.

    ``per_prompt`` holds one agreement sequence per prompt (:func:`greedy_rounds` plays each). The halves are
    the odd-numbered and the even-numbered prompts (1, 3, 5... and 2, 4, 6..., counting from 1). α is
    estimated per judged token (:func:`acceptance_rate`) on one half's rounds; E(α, γ) is compared with the
    tokens per verification the other half's rounds kept. Returns one dict per direction: estimated_on,
    predicted_for (the prompts' numbers), alpha, predicted, measured.
    """
    if len(per_prompt) < 2:
        raise ValueError(message("need at least 2 prompts to hold half of them out, got {prompts}.",
                                 prompts=len(per_prompt)))
    halves = [list(range(0, len(per_prompt), 2)), list(range(1, len(per_prompt), 2))]

    def pooled(rows):
        counts = [greedy_rounds(per_prompt[r], gamma) for r in rows]
        return {k: sum(c[k] for c in counts) for k in counts[0]}

    out = []
    for fit, test in (halves, halves[::-1]):
        a, b = pooled(fit), pooled(test)
        alpha = min(acceptance_rate(a["accepted"], a["rejected"]), 0.999)       # E(α, γ) needs α < 1
        out.append(dict(estimated_on=[r + 1 for r in fit], predicted_for=[r + 1 for r in test], alpha=alpha,
                        predicted=expected_tokens(alpha, gamma), measured=b["tokens"] / max(b["rounds"], 1)))
    return out
