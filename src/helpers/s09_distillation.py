"""Distillation, section 9 (notebooks/09-distillation.md): temperature, a student made from the teacher, the KD loss.

* The soft labels are section 8's :func:`helpers.s08_speculative.processed`, softmax(logits / T);
  :func:`top_to_third` reads them. Ratios of probabilities are ``exp((z_i - z_j) / T)``, so at T = 2 every
  ratio is the square root of its value at T = 1.
* The student is section 8's :func:`helpers.s08_drafts.student_from_teacher`: a smaller model built from the
  teacher's own decoder layers (:func:`every_kth`, as DistilBERT and DistilGPT2 were initialised, or the first
  k, section 8's early exit). The kept layers are copies; the embedding, final norm and LM head are the
  teacher's own tensors, so a student costs only its layers' memory (on a 262k-token vocabulary the embedding
  alone is 0.7 GB in fp32).
* :func:`add_exit_adapter`: a trained residual linear map in front of the LM head: the "first layers plus an
  exit adapter" student. It starts at zero, i.e. as plain early exit.
* :func:`teacher_pass` runs the teacher once and stores its top-k logits (:class:`Targets`; the full
  distribution costs :func:`full_logits_bytes` per token), and also returns what a student made of the
  teacher's first layers feeds its head, which the teacher computes on its way. :func:`kd_loss`
  is KL(teacher/T || student/T) x T² on them (Hinton et al. 2015), :func:`hard_loss` the ordinary
  next-token cross-entropy it is compared with.
* :func:`train` runs either loss for a fixed number of seeded, deterministic steps with a progress bar;
  :func:`evaluate` reports held-out KL, perplexity and top-1 agreement with the teacher (the teacher's side
  computed once by :func:`held_reference` when many students are scored on the same text): agreement and KL
  are section 6's :func:`helpers.s06_int8_matmuls.compare_next_tokens`, the NLL behind the perplexity section
  7's :func:`helpers.s07_quality.token_nlls`, here over several rows of text.

Memory: full-vocabulary logits are the largest tensors here (rows x tokens x vocab x 4 bytes: 537 MB for 512
tokens of a 262k vocabulary). The teacher's pass keeps at most :data:`LOGITS_BUDGET` bytes of them at a time,
the held reference keeps one such tensor (the log-probabilities, not their exponential as well), and
:func:`evaluate` works through the positions in slices of at most that size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from .infra.measure import progress
from .infra.messages import message
from .s06_int8_matmuls import compare_next_tokens
from .s07_quality import token_nlls

LOGITS_BUDGET = 2 ** 28     # bytes of full-vocabulary logits (or their temporaries) worked on at a time: 256 MiB

# --------------------------------------------------------------------------- temperature


def top_to_third(probs: torch.Tensor) -> float:
    """p(most likely token) / p(third most likely token)."""
    top = torch.topk(probs, 3).values
    return float(top[0] / top[2])


def favours(soft: float, hard: float, digits: int, higher_is_better: bool = False) -> str:
    """Which labels a measure favours, compared as printed with ``digits`` after the decimal point: "soft", "hard"
    or "tie" (a difference the printed numbers do not show is no difference to the reader)."""
    soft, hard = round(soft, digits), round(hard, digits)
    if soft == hard:
        return "tie"
    return "soft" if (soft > hard) == higher_is_better else "hard"


def full_logits_bytes(vocab: int, bytes_per_logit: int = 4) -> int:
    """Bytes to store the teacher's full next-token logits for one token (fp32 by default)."""
    return vocab * bytes_per_logit


# --------------------------------------------------------------------------- the student


def every_kth(n_layers: int, k: int) -> list[int]:
    """Layers 0, k, 2k, ... (DistilBERT kept one layer in two): the layers a student keeps."""
    if not 1 <= k <= n_layers:
        raise ValueError(message("k must be between 1 and the {n_layers} layers, got {k}.", n_layers=n_layers, k=k))
    return list(range(0, n_layers, k))


class ExitAdapter(torch.nn.Module):
    """h -> h + W h + b in front of the LM head, zero at the start (so the student starts as plain early exit)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.proj = torch.nn.Linear(hidden, hidden)
        torch.nn.init.zeros_(self.proj.weight)
        torch.nn.init.zeros_(self.proj.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.proj(h)


def add_exit_adapter(student: torch.nn.Module) -> ExitAdapter:
    """Put a trainable :class:`ExitAdapter` in front of the student's LM head (a forward pre-hook)."""
    head = student.get_output_embeddings()
    p = head.weight
    adapter = ExitAdapter(p.shape[1]).to(device=p.device, dtype=p.dtype)
    student.add_module("exit_adapter", adapter)
    head.register_forward_pre_hook(lambda module, args: (adapter(args[0]),) + tuple(args[1:]))
    return adapter


@torch.no_grad()
def head_inputs(model: torch.nn.Module, ids: torch.Tensor, batch: int = 8) -> torch.Tensor:
    """What reaches the LM head (after the final norm, before any exit adapter) at every position of ``ids``."""
    head, captured = model.get_output_embeddings(), []
    hook = head.register_forward_pre_hook(lambda module, args: captured.append(args[0].detach().clone()),
                                          prepend=True)
    try:
        for i in range(0, ids.shape[0], batch):
            model(ids[i:i + batch], use_cache=False)
    finally:
        hook.remove()
    return torch.cat(captured)


# --------------------------------------------------------------------------- the losses


@dataclass
class Targets:
    """The teacher's top-k logits at every position: what distillation stores instead of the full vocabulary."""
    values: torch.Tensor     # (rows, tokens, k) logits, largest first
    indices: torch.Tensor    # (rows, tokens, k) token ids

    @property
    def nbytes(self) -> int:
        return self.values.numel() * self.values.element_size() + self.indices.numel() * 4   # ids fit in int32


def rows_per_batch(tokens: int, vocab: int, most: int = 8, budget: int | None = None) -> int:
    """How many rows of ``tokens`` tokens one forward takes so that its fp32 logits stay within ``budget`` bytes
    (:data:`LOGITS_BUDGET` by default; at least 1, at most ``most``)."""
    return max(1, min(most, (budget or LOGITS_BUDGET) // (tokens * vocab * 4)))


@torch.no_grad()
def teacher_pass(teacher: torch.nn.Module, ids: torch.Tensor, student: torch.nn.Module | None, k: int | None = None,
                 batch: int | None = None) -> tuple[torch.Tensor | Targets, torch.Tensor]:
    """Run the teacher once over ``ids`` (rows, tokens); returns (its logits, what reaches ``student``'s head).

    ``student`` is made of the teacher's first layers (:func:`helpers.s08_drafts.student_from_teacher`). The
    teacher computes those layers on its way, so their output, through the final norm, is exactly :func:`head_inputs` of the student,
    without running the student (checked on the first row; where the model keeps its final norm elsewhere the
    student is run after all). With ``k`` the logits are kept as the top-``k`` :class:`Targets`. With no
    ``student`` only the logits are returned (and None). ``batch`` rows go through at once; by default as many
    as keep one forward's logits within :data:`LOGITS_BUDGET` (at most 8).
    """
    batch = batch or rows_per_batch(ids.shape[1], teacher.config.vocab_size)
    depth = student.config.num_hidden_layers if student is not None else 0
    norm = getattr(student.get_decoder(), "norm", None) if hasattr(student, "get_decoder") else None
    logits, vals, idx, exits = [], [], [], []
    for i in range(0, ids.shape[0], batch):
        out = teacher(ids[i:i + batch], use_cache=False, output_hidden_states=norm is not None)
        if k is None:
            logits.append(out.logits)
        else:
            top = out.logits.float().topk(k, dim=-1)
            vals.append(top.values)
            idx.append(top.indices)
        if norm is not None:
            exits.append(norm(out.hidden_states[depth]))
    result = torch.cat(logits) if k is None else Targets(torch.cat(vals), torch.cat(idx))
    if student is None:
        return result, None
    h = torch.cat(exits) if exits else None
    if h is None or not torch.allclose(h[:1], head_inputs(student, ids[:1]), rtol=1e-4, atol=1e-4):
        h = head_inputs(student, ids, batch)
    return result, h


def kd_loss(student_logits: torch.Tensor, targets: Targets, T: float = 1.0) -> torch.Tensor:
    """KL(teacher/T || student/T) x T², with the teacher's distribution renormalised over its stored top-k.

    The student's log-probabilities are over the whole vocabulary, so mass it puts elsewhere is penalised.
    The T² keeps gradients the same size whatever T is (Hinton et al. 2015).
    """
    log_q = torch.log_softmax(student_logits.float() / T, dim=-1).gather(-1, targets.indices)
    log_p = torch.log_softmax(targets.values / T, dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1).mean() * T * T


def hard_loss(student_logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Cross-entropy against the text's own next token (the one-hot "hard label")."""
    return F.cross_entropy(student_logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())


# --------------------------------------------------------------------------- training and evaluation


def train(step_loss: Callable[[int], torch.Tensor], params, steps: int, lr: float, seed: int = 0,
          desc: str = "training", every: int = 0, on_checkpoint: Callable[[int], object] | None = None):
    """Adam on ``params`` for ``steps`` steps of ``step_loss(step)``; returns (losses, checkpoints).

    Seeded and run with deterministic algorithms, so the same inputs give the same curve on the same machine.
    ``on_checkpoint(step)`` is called before the first step and then every ``every`` steps (held-out metrics).
    """
    if steps < 1 or not lr > 0:
        raise ValueError(message("steps must be at least 1 and lr positive, got {steps} and {lr}.", steps=steps, lr=lr))
    params = list(params)
    torch.manual_seed(seed)
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    opt = torch.optim.Adam(params, lr=lr)
    losses, checkpoints = [], []
    try:
        for step in progress(range(steps), desc=desc):
            if on_checkpoint is not None and every and step % every == 0:
                checkpoints.append((step, on_checkpoint(step)))
            loss = step_loss(step)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        if on_checkpoint is not None and every:
            checkpoints.append((steps, on_checkpoint(steps)))
    finally:
        torch.use_deterministic_algorithms(was)
    return losses, checkpoints


@dataclass(frozen=True)
class HeldOut:
    kl: float            # mean KL(teacher || student) per position, nats
    perplexity: float    # of the student on the held-out text itself
    agreement: float     # fraction of positions where the student's top token is the teacher's


@dataclass(frozen=True)
class HeldReference:
    """What :func:`evaluate` needs from the teacher on a held-out text, computed once (:func:`held_reference`)."""
    log_p: torch.Tensor      # (rows, tokens, vocab) the teacher's log-probabilities, fp32 (their exponential is
                             # taken a slice at a time: a second tensor of this size is what a large vocabulary
                             # cannot afford)
    ids: torch.Tensor        # (rows, tokens) the text
    perplexity: float        # the teacher's own perplexity on the text


def perplexity_of_rows(logits: torch.Tensor, ids: torch.Tensor) -> float:
    """exp(mean NLL) of every row's next tokens: section 7's :func:`helpers.s07_quality.token_nlls`, row by row."""
    return math.exp(float(torch.cat([token_nlls(logits[r:r + 1], ids[r:r + 1]) for r in range(len(ids))]).mean()))


@torch.no_grad()
def held_reference(teacher_logits: torch.Tensor, ids: torch.Tensor) -> HeldReference:
    """The teacher's side of :func:`evaluate`, once for every student scored on the same text."""
    return HeldReference(torch.log_softmax(teacher_logits.float(), -1), ids, perplexity_of_rows(teacher_logits, ids))


def _slices(tokens: int, vocab: int) -> list[slice]:
    """Slices of positions whose fp32 (positions, vocab) temporaries, four at a time, fit in :data:`LOGITS_BUDGET`."""
    step = max(1, min(tokens, LOGITS_BUDGET // (4 * 4 * vocab)))
    return [slice(i, min(i + step, tokens)) for i in range(0, tokens, step)]


@torch.no_grad()
def evaluate(student_logits: torch.Tensor, teacher: torch.Tensor | HeldReference,
             ids: torch.Tensor | None = None) -> HeldOut:
    """Held-out KL to the teacher, perplexity on the text, and top-1 agreement with the teacher.

    ``teacher`` is the teacher's logits on ``ids``, or its :func:`held_reference` (which holds the ids), computed
    once when several students are scored on the same text.
    """
    ref = teacher if isinstance(teacher, HeldReference) else held_reference(teacher, ids)
    if ids is not None and ids is not ref.ids and not torch.equal(ids, ref.ids):
        raise ValueError(message("ids differ from the text the held reference was computed on."))
    rows, tokens, vocab = ref.log_p.shape
    if student_logits.shape != ref.log_p.shape:
        raise ValueError(message("The student's logits are shaped {student_shape}, the teacher's {teacher_shape}: "
                                 "score both on the same text.",
                                 student_shape=tuple(student_logits.shape), teacher_shape=tuple(ref.log_p.shape)))
    kl = torch.empty(rows, tokens)                       # KL(teacher || student) at every position
    same = torch.empty(rows, tokens, dtype=torch.bool)   # the student's top token is the teacher's
    for r in range(rows):                                # a slice of positions at a time: see LOGITS_BUDGET
        for s in _slices(tokens, vocab):
            log_q = torch.log_softmax(student_logits[r, s].float(), -1)
            same[r, s], kl[r, s] = compare_next_tokens(ref.log_p[r, s], log_q)
    return HeldOut(float(kl.mean()), perplexity_of_rows(student_logits, ref.ids), float(same.float().mean()))
