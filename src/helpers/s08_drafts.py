"""The drafts of section 8 (notebooks/08-speculative-decoding.md): who proposes the tokens the target verifies.

A draft is any object with three methods (the ``Draft`` protocol, used by
:func:`helpers.s08_speculative.speculative_generate`):

* ``start(prompt_ids)``: forget everything, the committed text is now the prompt (1, tokens);
* ``propose(gamma, sample, temperature, top_k, generator) -> (tokens, q_rows)``: up to ``gamma`` next tokens
  (a list of ints, possibly shorter or empty) and, when sampling, the draft's processed distribution
  q over the whole vocabulary for each (a (len(tokens), vocab) tensor; ``None`` when greedy);
* ``commit(tokens)``: the target kept these tokens (accepted proposals plus its own next token).

Three kinds here:

* :class:`ModelDraft`: any causal LM with the target's vocabulary (a quantized copy, the distilled student of
  section 9), with its own KV cache, cropped after every verification. An optional ``token_map`` lets the
  model's LM head cover only some token ids (a frequency-restricted head, FR-Spec 2025): tokens it cannot
  propose have q = 0, which keeps the rule exact;
* :func:`early_exit_draft`: the target's own first layers with such a restricted head, built by
  :func:`student_from_teacher` (a smaller model made of some of the teacher's decoder layers; section 9
  distils such a student);
* :class:`PromptLookupDraft`: no model at all, it copies what followed the latest earlier occurrence of the
  last few tokens (n-gram "prompt lookup"); q is one-hot on its proposal.

:func:`student_from_teacher` builds a smaller model from the target's own decoder layers (the first k for an
early exit here; every k-th, or the first k, for section 9's distilled students). Layers are found through the
module tree (:func:`helpers.infra.model.decoder_layers`), so any transformers causal LM works, not only Llama. The kept layers are
copies; the embedding, final norm and LM head are the teacher's own tensors, so a student costs only its layers'
memory (on a 262k-token vocabulary the embedding alone is 0.7 GB in fp32).
"""
from __future__ import annotations

import contextlib
import copy
from typing import Sequence

import torch

from . import s01_kv_cache as kc
from . import s02_roofline as roofline
from . import s05_quantization as Q
from . import s07_quality as quality
from .infra.measure import interleaved_medians, now
from .infra.model import decoder_layers
from .infra.messages import message
from .s08_speculative import processed, speculative_generate

try:                 # transformers' switch that skips the random initialisation of a new model
    from transformers.initialization import no_init_weights
except ImportError:  # older transformers: there is no such switch, and the (wasted) random init just runs
    no_init_weights = contextlib.nullcontext


class ModelDraft:
    """A causal LM as a draft, with its own cache; ``token_map[i]`` is the vocabulary id of head row i."""

    def __init__(self, model: torch.nn.Module, token_map: torch.Tensor | None = None, vocab: int | None = None):
        self.model, self.token_map = model, token_map
        self.vocab = vocab or model.config.vocab_size
        self.forwards = 0

    def start(self, prompt_ids: torch.Tensor) -> None:
        self.ids = prompt_ids[0].tolist()
        self.cache, self.cached = kc.rollback_cache(self.model), []    # `cached`: the tokens the cache holds
        self.forwards, self.prefill_seconds = 0, 0.0

    def _feed(self, ids: list[int]) -> torch.Tensor:
        x = torch.tensor([ids], device=next(self.model.parameters()).device)
        t0 = now()
        logits, self.cache = kc.forward(self.model, x, cache=self.cache)
        if not self.cached:                       # the draft's own prefill of the prompt, timed apart
            self.prefill_seconds = now() - t0
        self.cached += ids
        self.forwards += 1
        return logits[0, -1]

    def _full_q(self, q_small: torch.Tensor) -> torch.Tensor:
        if self.token_map is None:
            return q_small
        return torch.zeros(self.vocab, dtype=q_small.dtype).scatter(0, self.token_map, q_small)

    @torch.inference_mode()
    def propose(self, gamma: int, sample: bool = False, temperature: float = 1.0, top_k: int | None = None,
                generator: torch.Generator | None = None):
        logits = self._feed(self.ids[len(self.cached):])
        tokens, qs = [], []
        for i in range(gamma):
            if sample:
                q = self._full_q(processed(logits, temperature, top_k))
                qs.append(q)
                tok = int(torch.multinomial(q, 1, generator=generator))
            else:
                j = int(logits.argmax())
                tok = int(self.token_map[j]) if self.token_map is not None else j
            tokens.append(tok)
            if i + 1 < gamma:
                logits = self._feed([tok])
        return tokens, (torch.stack(qs) if sample else None)

    def commit(self, tokens: list[int]) -> None:
        self.ids += tokens
        same = 0
        limit = min(len(self.cached), len(self.ids) - 1)      # always leave one token to feed next time
        while same < limit and self.cached[same] == self.ids[same]:
            same += 1
        kc.crop_cache(self.cache, same)
        self.cached = self.cached[:same]


class PromptLookupDraft:
    """Propose the tokens that followed the latest earlier occurrence of the last n tokens (n = max_ngram..1)."""

    def __init__(self, vocab: int, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(message("need 1 <= min_ngram <= max_ngram, got {min_ngram} and {max_ngram}.",
                                     min_ngram=min_ngram, max_ngram=max_ngram))
        self.vocab, self.max_ngram, self.min_ngram = vocab, max_ngram, min_ngram
        self.forwards = 0

    def start(self, prompt_ids: torch.Tensor) -> None:
        self.ids = prompt_ids[0].tolist()

    def lookup(self, gamma: int) -> list[int]:
        ids = self.ids
        for n in range(min(self.max_ngram, len(ids) - 1), self.min_ngram - 1, -1):
            tail = ids[-n:]
            for s in range(len(ids) - n - 1, -1, -1):            # latest earlier occurrence first
                if ids[s:s + n] == tail:
                    return ids[s + n:s + n + gamma]
        return []

    def propose(self, gamma: int, sample: bool = False, generator=None, **_):
        tokens = self.lookup(gamma)
        if not sample:
            return tokens, None
        q = torch.zeros(len(tokens), self.vocab)
        q[torch.arange(len(tokens)), torch.tensor(tokens, dtype=torch.long)] = 1.0
        return tokens, q

    def commit(self, tokens: list[int]) -> None:
        self.ids += tokens


def frequent_tokens(ids: torch.Tensor, n: int, vocab: int, always: torch.Tensor | None = None) -> torch.Tensor:
    """The ``n`` most frequent token ids in ``ids`` (ties by id), plus ``always``; sorted."""
    counts = torch.bincount(ids.reshape(-1), minlength=vocab)
    top = counts.topk(min(n, vocab)).indices
    if always is not None:
        top = torch.cat([top, always.reshape(-1)])
    return torch.unique(top)


def restrict_head(model: torch.nn.Module, token_map: torch.Tensor) -> torch.nn.Module:
    """Replace the LM head by one with only the rows ``token_map`` (in place); returns the model."""
    head = model.get_output_embeddings()
    small = torch.nn.Linear(head.weight.shape[1], len(token_map), bias=head.bias is not None)
    with torch.no_grad():
        small.weight.copy_(head.weight[token_map])
        if head.bias is not None:
            small.bias.copy_(head.bias[token_map])
    small.to(head.weight.device, head.weight.dtype)
    model.set_output_embeddings(small)
    model.config.tie_word_embeddings = False
    return model


def early_exit_draft(target: torch.nn.Module, layers: int, token_map: torch.Tensor | None = None) -> ModelDraft:
    """The target's first ``layers`` decoder layers (copied), its final norm, and an LM head restricted to
    ``token_map`` (all tokens if ``None``)."""
    vocab = target.config.vocab_size
    student = student_from_teacher(target, list(range(layers)))
    if token_map is not None:
        restrict_head(student, token_map)
    return ModelDraft(student, token_map, vocab)


@torch.inference_mode()
def decoding_agreement(reference_logprobs: torch.Tensor, draft: ModelDraft,
                       positions: quality.Positions) -> quality.Agreement:
    """Section 7's agreement, measured the way the loop runs the draft: the α of the draft as it decodes.

    :func:`helpers.s07_quality.agreement` reads all positions of a prompt in one forward. A kernel that also
    rounds activations (torch's dynamic int8, one scale per call) then rounds a whole text with one scale. Here
    the draft reads each prompt at once and then the reference's tokens one at a time, through its own
    ``propose`` and ``commit``, as in :func:`helpers.s08_speculative.speculative_generate`; each position's
    greedy guess is compared with the reference's next token (``reference_logprobs``, from
    :func:`helpers.s07_quality.next_token_logprobs`). ``mean_kl`` is not computed (NaN).
    """
    seq, mask, n = positions.sequences, positions.attention_mask, positions.n_new
    if reference_logprobs.shape[:2] != (seq.shape[0], n):
        raise ValueError(message("reference_logprobs {shape} do not cover these positions: compute them with "
                                 "helpers.s07_quality.next_token_logprobs on the same positions.",
                                 shape=tuple(reference_logprobs.shape)))
    choice = reference_logprobs.argmax(-1).tolist()
    same = []
    for i in range(seq.shape[0]):
        row = seq[i, mask[i].bool()].tolist()
        draft.start(torch.tensor([row[:-n]], device=seq.device))
        for j, token in enumerate(row[-n:]):
            guess, _ = draft.propose(1)
            same.append(int(guess[0] == choice[i][j]))
            draft.commit([token])                      # the reference's own text, as the loop commits the target's
    k = sum(same)
    low, high = quality.wilson(k, len(same))
    return quality.Agreement(k, len(same), k / len(same), low, high, float("nan"), tuple(same))


@torch.inference_mode()
def draft_logprobs(draft: ModelDraft, positions: quality.Positions) -> torch.Tensor:
    """A model draft's next-token log-probs over the whole vocabulary at every position, teacher-forced in one
    forward (:func:`helpers.s07_quality.next_token_logprobs`), for :func:`helpers.s07_quality.agreement`.

    Equal to :func:`decoding_agreement`'s guesses for a draft whose rows do not share anything (fp32 weights, no
    rounding per call), and cheaper; a restricted head's missing tokens get -inf (so the agreement's mean KL is
    not finite)."""
    small = quality.next_token_logprobs(draft.model, positions)
    if draft.token_map is None:
        return small
    full = torch.full((*small.shape[:-1], draft.vocab), float("-inf"), dtype=small.dtype)
    return full.index_copy(-1, draft.token_map.to(small.device), small)


def ideal_cost(model: torch.nn.Module, scheme: Q.Scheme) -> float:
    """c of a draft on an ideal memory-bound kernel: the bytes a decode step reads with ``scheme``'s projection
    matrices (codes and scales), over the bytes the fp32 step reads. The rest (embedding, norms, a tied output
    head) stays as it is. What a kernel reaches when reading the weights is all a step costs."""
    proj = Q.projection_weights(model)
    full = roofline.weights_read_per_step(model)
    as_is = sum(w.numel() * w.element_size() for w in proj.values())
    stored = sum(w.numel() * scheme.bits_per_weight(w.shape) / 8 for w in proj.values())
    return (full - as_is + stored) / full


PLAIN = "plain greedy"


def race(target, drafts: dict, prompt_ids: torch.Tensor, n_new: int, gamma: int, again: Sequence[str] = (),
         repeats: int = 2):
    """Plain greedy decoding against greedy speculation with each draft, timed in turn.

    Every draft runs once, interleaved with plain greedy (:func:`helpers.s01_kv_cache.generate_cached`); then
    plain greedy and the drafts named in ``again`` take turns ``repeats - 1`` more times. Every output must
    equal plain greedy's first, token for token (``AssertionError`` otherwise). Returns (seconds: every run's
    seconds by name, :data:`PLAIN` among them; each draft's stats from its last run; plain greedy's tokens).
    """
    unknown = set(again) - set(drafts)
    if unknown or repeats < 1:
        raise ValueError(message("again must name drafts of the race and repeats be at least 1, got {unknown} and "
                                 "{repeats}.", unknown=sorted(unknown), repeats=repeats))
    first, stats = {}, {}

    def plain():
        tokens = kc.generate_cached(target, prompt_ids, n_new)
        assert torch.equal(first.setdefault(PLAIN, tokens), tokens), "plain greedy changed its output"

    def speculative(name):
        def run():
            tokens, stats[name] = speculative_generate(target, drafts[name], prompt_ids, n_new, gamma)
            assert torch.equal(tokens, first[PLAIN]), f"{name}: the output differs from plain greedy"
        return run

    once = interleaved_medians({PLAIN: plain, **{n: speculative(n) for n in drafts}}, repeats=1, warmup=0)
    seconds = {k: list(t.times) for k, t in once.items()}
    if repeats > 1:
        more = interleaved_medians({PLAIN: plain, **{n: speculative(n) for n in again}}, repeats=repeats - 1,
                                   warmup=0)
        for k, t in more.items():
            seconds[k] += t.times
    return seconds, stats, first[PLAIN]


def assisted_runs(target, assistant, prompt_ids: torch.Tensor, n_new: int, gamma: int, pad_token_id: int) -> dict:
    """transformers' own speculative loop (``generate``), greedy, one run each: plain, with ``assistant`` as the
    draft, and with prompt lookup. Returns {name: (seconds, the new tokens)}, names :data:`PLAIN`, "assistant",
    "prompt lookup".

    The assistant proposes γ tokens a round: a constant schedule and a confidence threshold of 0, set on the
    assistant's own ``generation_config`` (where ``generate`` reads them), which must not be the target's.
    """
    settings = assistant.generation_config
    if settings is target.generation_config:
        raise ValueError(message("the assistant shares the target's generation_config: give it a copy "
                                 "(copy.deepcopy) first."))
    settings.num_assistant_tokens, settings.num_assistant_tokens_schedule = gamma, "constant"
    settings.assistant_confidence_threshold = 0.0
    out = {}
    for name, kw in [(PLAIN, {}), ("assistant", dict(assistant_model=assistant)),
                     ("prompt lookup", dict(prompt_lookup_num_tokens=gamma))]:
        t0 = now()
        tokens = target.generate(prompt_ids, attention_mask=torch.ones_like(prompt_ids), max_new_tokens=n_new,
                                 do_sample=False, pad_token_id=pad_token_id, **kw)
        out[name] = (now() - t0, tokens[:, prompt_ids.shape[1]:])
    return out


# --------------------------------------------------------------------------- a smaller model from the target's layers


def student_from_teacher(teacher: torch.nn.Module, keep: Sequence[int]) -> torch.nn.Module:
    """A new model of the teacher's class with only the decoder layers ``keep`` (copied, so they can be trained
    without touching the teacher). Everything else (embedding, final norm, LM head) is the teacher's own tensors,
    shared, not copied: a student that trains them must copy them first. Per-layer settings (``layer_types``:
    sliding or full) follow."""
    n = teacher.config.num_hidden_layers
    keep = list(keep)
    if not keep or sorted(set(keep)) != keep or not 0 <= keep[0] <= keep[-1] < n:
        raise ValueError(message("keep must be increasing layer indices between 0 and {last}, got {keep}.",
                                 last=n - 1, keep=keep))
    cfg = copy.deepcopy(teacher.config)
    cfg.num_hidden_layers = len(keep)
    if isinstance(getattr(cfg, "layer_types", None), list):
        cfg.layer_types = [cfg.layer_types[i] for i in keep]
    prefix, _ = decoder_layers(teacher)
    new_index = {old: new for new, old in enumerate(keep)}
    state = {}
    for key, value in teacher.state_dict().items():
        if key.startswith(prefix + "."):
            old, rest = key[len(prefix) + 1:].split(".", 1)
            if int(old) not in new_index:
                continue
            key, value = f"{prefix}.{new_index[int(old)]}.{rest}", value.clone()
        state[key] = value
    with torch.device("cpu"), no_init_weights():      # every weight is assigned below: skip the random init
        student = type(teacher)(cfg)
    student.load_state_dict(state, assign=True)        # strict; assign: the tensors themselves, no second copy
    student.tie_weights()                              # a tied head is the embedding again, as in the teacher
    p = next(teacher.parameters())
    return student.to(device=p.device, dtype=p.dtype).eval()      # a no-op for the shared tensors
