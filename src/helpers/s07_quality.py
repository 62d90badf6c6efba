"""Does quality survive quantization? Three measurements of one model under many weight schemes (section 7).

* :func:`applied`: quantize every projection matrix in place with one of :mod:`helpers.s05_quantization`'s
  schemes, and restore the weights exactly (checked with ``torch.equal``) on exit;
* :func:`perplexity`: NLL per token, perplexity and bits per byte on a fixed span of text, one forward pass
  (:func:`perplexity_from_logits`: the same from logits already computed);
* the battery of sixteen short factual questions is :mod:`helpers.s07_battery`; the padded batches it shares
  with the agreement measurement are :mod:`helpers.s07_batched`;
* :func:`reference_positions` and :func:`agreement`: the fraction of positions where a quantized model's greedy
  next token equals the reference's, teacher-forced on the reference's own greedy generation, with a binomial
  (Wilson) interval and the mean KL(reference || quantized) (per position: section 6's
  :func:`helpers.s06_int8_matmuls.compare_next_tokens`). Section 8 reads this rate as the acceptance rate α;
* :func:`wilson` and :func:`paired_difference`: the intervals that say which differences are real.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch

from . import s05_quantization as Q
from .infra.messages import message
from .s06_int8_matmuls import compare_next_tokens
from .s07_batched import can_share_prefix, greedy_batch, last_logits_only, padded_prefill, prefix_padded, \
    shared_prefix_length

AGREEMENT_PROMPTS = (
    "Write a short story about a lighthouse keeper.",
    "Explain why the sky is blue.",
    "Give three tips for learning a new language.",
    "Describe how a bicycle works.",
    "What should I pack for a week in the mountains?",
    "Write a polite email asking a colleague for help.",
)
GRANULARITIES = ("tensor", "row", 32, 64, 128, 256)


# --------------------------------------------------------------------------- schemes, applied in place


def table_schemes() -> list[Q.Scheme | None]:
    """The rows of the section's table: ``None`` is the reference, then the chapter's six schemes."""
    keep = ("int8 per-tensor", "int8 per-row", "int4 per-tensor", "int4 per-row", "int4 group-128", "NF4 block-64")
    by_name = {s.name: s for s in Q.chapter_schemes()}
    return [None] + [by_name[k] for k in keep]


def scheme_name(scheme: Q.Scheme | None) -> str:
    return "reference" if scheme is None else scheme.name


def student_scheme(bits: int, granularity: str | int, model: torch.nn.Module | None = None) -> Q.Scheme:
    """Absmax at ``bits`` with one scale per tensor, per row, or per block of ``granularity`` weights.

    With ``model`` given, checks up front that the block size divides every projection matrix.
    """
    if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 8:
        raise ValueError(message("bits must be a whole number from 2 to 8, got {bits!r}.", bits=bits))
    if granularity in ("tensor", "row"):
        axis, group = (None, None) if granularity == "tensor" else (-1, None)
        return Q.Scheme(f"int{bits} per-{granularity}", "absmax", bits, axis, group)
    if isinstance(granularity, bool) or not isinstance(granularity, int) or granularity < 2:
        raise ValueError(message("The group size must be 'tensor', 'row' or a whole number of weights, got "
                                 "{granularity!r}.", granularity=granularity))
    if model is not None:
        bad = [n for n, w in Q.projection_weights(model).items() if w.numel() % granularity]
        if bad:
            raise ValueError(message("A group of {granularity} weights does not divide {weight}: pick one of {sizes}.",
                                     granularity=granularity, weight=bad[0],
                                     sizes=", ".join(str(g) for g in GRANULARITIES)))
    return Q.Scheme(f"int{bits} group-{granularity}", "absmax", bits, None, granularity)


def same_weights(a: Q.Scheme | None, b: Q.Scheme | None) -> bool:
    """True when two schemes (``None``: the reference) round every weight identically, whatever their names."""
    if a is None or b is None:
        return a is b
    return (a.kind, a.bits, a.axis, a.group_size) == (b.kind, b.bits, b.axis, b.group_size)


@contextlib.contextmanager
def applied(model: torch.nn.Module, scheme: Q.Scheme | None,
            originals: dict[str, torch.Tensor] | None = None) -> Iterator[torch.nn.Module]:
    """Inside the block the model computes with ``scheme``'s weights; on exit the originals are back, bit for bit.

    ``scheme=None`` is the reference (nothing changes). Uses :func:`helpers.s05_quantization.quantized_projections`
    and checks the restore with ``torch.equal`` on every matrix. ``originals``: copies of the projection weights
    the caller already holds (``{n: w.clone() for n, w in Q.projection_weights(model).items()}``), used instead
    of a fresh copy per call: quantized from, restored from, and compared with.
    """
    if scheme is None:
        yield model
        return
    before = originals if originals is not None else {n: w.clone() for n, w in Q.projection_weights(model).items()}
    with Q.quantized_projections(model, scheme, originals):
        yield model
    after = Q.projection_weights(model)
    assert all(torch.equal(after[n], w) for n, w in before.items()), "restoring the weights was not exact"


# --------------------------------------------------------------------------- perplexity


@dataclass(frozen=True)
class Perplexity:
    nll: float              # mean negative log-likelihood per predicted token, nats
    perplexity: float       # exp(nll)
    bits_per_byte: float    # total NLL in bits / UTF-8 bytes of the predicted text
    tokens: int             # predicted tokens (span length - 1)
    n_bytes: int
    hf_loss: float          # transformers' own model(ids, labels=ids).loss, the cross-check
    nll_se: float = 0.0     # standard error of the mean NLL over tokens (how llama.cpp puts +/- on perplexity)
    tolerance: float = 0.0  # how far another float32 computation of the same mean NLL may be off (nll_tolerance)
    per_token: torch.Tensor | None = field(default=None, repr=False, compare=False)   # each token's NLL, for pairing

    def interval(self, z: float = 1.96) -> tuple[float, float]:
        """exp(nll -/+ z * se): the perplexity interval llama.cpp prints as '+/-'."""
        return math.exp(self.nll - z * self.nll_se), math.exp(self.nll + z * self.nll_se)


def nll_tolerance(logits: torch.Tensor) -> float:
    """How far two float32 computations of the same mean NLL can differ by round-off alone, for these logits.

    A token's NLL is logsumexp(z) - z[y]. Subtracting numbers as large as max |z| leaves an error of about
    eps·max|z| each; a sum of V exponentials reduced as a tree, a relative error of about eps·log2(V), which the
    log turns into an absolute one. A mean over tokens is no worse than its worst token. A factor of 8 covers the
    order of operations; a real mistake (a shifted label, a missing token) is off by orders of magnitude more.
    """
    eps = torch.finfo(torch.float32).eps
    return 8 * eps * (2 * float(logits.detach().abs().max()) + math.log2(logits.shape[-1]))


def token_nlls(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """NLL (nats) of each of ids[1:] under the logits of ids[:-1]: position t predicts token t + 1.

    ``-log softmax(z)[y] = logsumexp(z) - z[y]``: the same number as ``log_softmax`` then ``gather``, without
    writing out a log-probability for every token of the vocabulary at every position. The log-sum-exp runs over
    a few rows at a time (the same numbers, bit for bit): rows still in the processor's cache are read faster.
    """
    z = logits[0, :-1].float()
    lse = torch.cat([torch.logsumexp(rows, dim=-1) for rows in z.split(128)])
    return lse - z.gather(1, ids[0, 1:, None]).squeeze(1)


@torch.inference_mode()
def perplexity(model: torch.nn.Module, ids: torch.Tensor, n_bytes: int, cross_check: bool = True) -> Perplexity:
    """One forward pass over ``ids`` (1, T): NLL per token, perplexity and bits per byte.

    ``n_bytes`` is the UTF-8 length of the text of ``ids[1:]`` (the tokens that are predicted). With
    ``cross_check`` the same pass also asks transformers for its own loss (``labels=ids``), kept in ``hf_loss``;
    without it ``hf_loss`` is NaN and the pass skips that second reduction over the vocabulary.
    """
    _check_span(ids, n_bytes)
    out = model(ids, labels=ids, use_cache=False) if cross_check else model(ids, use_cache=False)
    return perplexity_from_logits(out.logits, ids, n_bytes, float(out.loss) if cross_check else math.nan)


def perplexity_from_logits(logits: torch.Tensor, ids: torch.Tensor, n_bytes: int,
                           hf_loss: float = math.nan) -> Perplexity:
    """:func:`perplexity` from logits (1, T, vocab) the caller already computed over ``ids``: no forward pass.

    ``hf_loss`` is passed through (NaN: no cross-check).
    """
    _check_span(ids, n_bytes)
    if logits.ndim != 3 or logits.shape[:2] != ids.shape:
        raise ValueError(message("Pass the logits of these ids, shaped (1, {tokens}, vocab), got {shape}.",
                                 tokens=ids.shape[1], shape=tuple(logits.shape)))
    per_token = token_nlls(logits, ids)
    nll, t = float(per_token.mean()), per_token.numel()
    se = float(per_token.std() / math.sqrt(t)) if t > 1 else 0.0
    return Perplexity(nll, math.exp(nll), nll * t / math.log(2) / n_bytes, t, n_bytes, hf_loss, se,
                      nll_tolerance(logits), per_token)


def _check_span(ids: torch.Tensor, n_bytes: int) -> None:
    if ids.ndim != 2 or ids.shape[0] != 1 or ids.shape[1] < 2:
        raise ValueError(message("Pass one span of at least 2 token ids shaped (1, T), got {shape}.",
                                 shape=tuple(ids.shape)))
    if n_bytes < 1:
        raise ValueError(message("n_bytes must be the positive byte length of the predicted text, got {n_bytes}.",
                                 n_bytes=n_bytes))


# --------------------------------------------------------------------------- intervals


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95 % by default) for k successes in n trials."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(message("Need 0 <= k <= n and n >= 1, got k={k}, n={n}.", k=k, n=n))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class PairedDifference:
    mean: float             # mean of a - b over the shared tokens or positions
    low: float              # 95 % block-bootstrap interval
    high: float
    n: int

    @property
    def separates(self) -> bool:
        """True when the interval excludes zero: the two schemes differ on this measure."""
        return self.low > 0 or self.high < 0


def paired_difference(a: torch.Tensor, b: torch.Tensor, block: int = 16, resamples: int = 2000,
                      seed: int = 0) -> PairedDifference:
    """Mean of a - b over the *same* tokens (or positions), with a 95 % interval from a block bootstrap.

    Two schemes scored on the same text share every hard token, so their per-token differences vary far less
    than either score: comparing their two intervals throws that pairing away. Neighbouring tokens are
    correlated, so the bootstrap resamples runs of ``block`` consecutive differences, not single ones.
    """
    if a.shape != b.shape:
        raise ValueError(message("Paired values must cover the same tokens: got shapes {a_shape} and {b_shape}.",
                                 a_shape=tuple(a.shape), b_shape=tuple(b.shape)))
    d = (a.double() - b.double()).flatten()
    if d.numel() < 2 * block:
        raise ValueError(message("Need at least {needed} paired values for blocks of {block}, got {got}.",
                                 needed=2 * block, block=block, got=d.numel()))
    means = d[: d.numel() // block * block].reshape(-1, block).mean(1)
    gen = torch.Generator().manual_seed(seed)
    picks = torch.randint(len(means), (resamples, len(means)), generator=gen)
    boot = means[picks].mean(1)
    low, high = torch.quantile(boot, torch.tensor([0.025, 0.975], dtype=boot.dtype)).tolist()
    return PairedDifference(float(d.mean()), low, high, d.numel())


# --------------------------------------------------------------------------- agreement


@dataclass
class Positions:
    """The reference's own greedy continuations of several prompts: the positions agreement is scored on."""
    sequences: torch.Tensor        # (B, width + n_new) left-padded prompt + generated tokens
    attention_mask: torch.Tensor   # (B, width + n_new)
    prompt_width: int              # padded prompt length: generated tokens start here in every row
    prompts: list[str] = field(default_factory=list)

    @property
    def n_new(self) -> int:
        return self.sequences.shape[1] - self.prompt_width

    @property
    def count(self) -> int:
        return self.sequences.shape[0] * self.n_new


def reference_positions(model, tokenizer, prompts: Sequence[str] = AGREEMENT_PROMPTS,
                        n_positions: int = 144) -> Positions:
    """Generate ``n_positions / len(prompts)`` greedy tokens per prompt from the reference (batched)."""
    if not prompts or n_positions < len(prompts) or n_positions % len(prompts):
        raise ValueError(message("n_positions ({n_positions}) must be a positive multiple of the {prompts} prompts.",
                                 n_positions=n_positions, prompts=len(prompts)))
    seq, mask, width = greedy_batch(model, tokenizer, list(prompts), n_positions // len(prompts), force_length=True)
    return Positions(seq, mask, width, list(prompts))


@torch.inference_mode()
def next_token_logprobs(model, positions: Positions) -> torch.Tensor:
    """Log-probabilities (B, n_new, vocab) of the next token at every generated position, teacher-forced.

    When the prompts open the same way (a chat template's system turn) and the model allows it
    (:func:`can_share_prefix`), that opening is computed once for all rows (:func:`prefix_padded`); each token
    still sees exactly its own row's tokens at their own positions.
    """
    seq, mask, n = positions.sequences, positions.attention_mask, positions.n_new
    rows = [seq[i, mask[i].bool()][None] for i in range(seq.shape[0])]
    keep = {"logits_to_keep": n + 1} if last_logits_only(model) else {}     # the head only where it is scored
    if len(rows) > 1 and can_share_prefix(model) and shared_prefix_length(rows) > 0:
        ids, mask, shared = prefix_padded(rows, int(seq[0, 0]))
        logits, _ = padded_prefill(model, ids, mask, shared, **keep)
    else:
        pos_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(seq, attention_mask=mask, position_ids=pos_ids, **keep).logits
    return torch.log_softmax(logits[:, -(n + 1):-1].float(), dim=-1)


@dataclass(frozen=True)
class Agreement:
    matches: int
    positions: int
    rate: float                  # matches / positions: the acceptance rate α of greedy speculative decoding
    low: float                   # 95 % Wilson interval
    high: float
    mean_kl: float               # mean KL(reference || test) over the positions, nats
    per_position: tuple = ()     # 1 where the greedy tokens agree, 0 where not (row-major over prompts)

    @property
    def same_top_rate(self) -> float:
        """llama.cpp's "same top p": the same statistic as ``rate`` (top tokens equal under the same prefix)."""
        return self.rate


def agreement(reference, test_model, positions: Positions) -> Agreement:
    """How often ``test_model``'s greedy next token equals the reference's, given the identical prefix.

    ``reference`` is the reference model, or its :func:`next_token_logprobs` computed beforehand: pass the
    log-probs when the test model is the reference quantized *in place* (``with applied(model, scheme)``).
    ``test_model`` may be log-probs too (the reference against itself needs no second pass), e.g.::

        pos = reference_positions(model, tok)          # the reference's own greedy text, 144 positions
        ref = next_token_logprobs(model, pos)
        with applied(model, scheme):
            alpha = agreement(ref, model, pos).rate
    """
    ref = reference if isinstance(reference, torch.Tensor) else next_token_logprobs(reference, positions)
    test = test_model if isinstance(test_model, torch.Tensor) else next_token_logprobs(test_model, positions)
    if ref.shape != test.shape:
        raise ValueError(message("Reference log-probs {ref_shape} do not match these positions {test_shape}: compute "
                                 "them with next_token_logprobs on the same positions.",
                                 ref_shape=tuple(ref.shape), test_shape=tuple(test.shape)))
    same, kl = compare_next_tokens(ref, test)
    same = same.reshape(-1)
    k, n = int(same.sum()), same.numel()
    low, high = wilson(k, n)
    return Agreement(k, n, k / n, low, high, float(kl.mean()), tuple(same.int().tolist()))
