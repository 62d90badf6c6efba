"""The battery of section 7 (notebooks/07-quality.md): sixteen short factual questions, asked greedily, in one batch.

* :func:`load_battery`: the questions and their accepted answers, from ``data/battery.json``;
* :func:`is_correct`: an answer counts when an accepted answer appears in the reply as a whole word or phrase;
* :func:`greedy_with_penalties` and :func:`run_battery`: every question under several repetition penalties
  (transformers' rule, :func:`penalize`) at once, prefilled once, with the shared chat-template opening computed
  once where the model allows it (:func:`helpers.s07_batched.can_share_prefix`).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from .infra.model import chat_prompt
from .infra.messages import message
from .s07_batched import can_share_prefix, last_logits_only, left_padded, pad_id_of, padded_prefill, prefix_padded
from . import s01_kv_cache as kv_cache

BATTERY_FILE = Path(__file__).resolve().parents[2] / "data" / "battery.json"


def load_battery(path: str | Path | None = None) -> list[dict]:
    """The questions and accepted answers from ``data/battery.json``."""
    p = Path(path) if path is not None else BATTERY_FILE
    if not p.is_file():
        raise ValueError(message("The battery file {path} is missing: restore data/battery.json from the project's "
                                 "checkout.", path=p))
    items = json.loads(p.read_text(encoding="utf-8"))
    if not items or not all(isinstance(i.get("question"), str) and i.get("answers") for i in items):
        raise ValueError(message("{path} must be a non-empty list of {{'question': ..., 'answers': [...]}} entries.",
                                 path=p))
    return items


def is_correct(reply: str, answers: Sequence[str]) -> bool:
    """True when one accepted answer appears in the reply as a whole word or phrase, ignoring case."""
    low = reply.lower()
    return any(re.search(r"(?<![\w])" + re.escape(a.lower()) + r"(?![\w])", low) for a in answers)


@dataclass
class BatteryResult:
    correct: list[bool]
    replies: list[str]
    repetition_penalty: float

    @property
    def score(self) -> int:
        return sum(self.correct)


def penalize(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """transformers' repetition penalty: every token already in the row (prompt and padding included, as
    ``generate`` does) has its logit divided by the row's penalty if positive, multiplied if negative."""
    scores = logits.gather(1, seen)
    p = penalty[:, None]
    scores = torch.where(scores < 0, scores * p, scores / p)
    return logits.scatter(1, seen, scores)


@torch.inference_mode()
def greedy_with_penalties(model, ids: torch.Tensor, mask: torch.Tensor, penalties: Sequence[float],
                          n_new: int, shared: int = 0) -> torch.Tensor:
    """Greedy decoding of a padded batch under several repetition penalties at once.

    The prompts are prefilled once; the cache is then repeated so that copy ``j`` of the batch decodes
    under ``penalties[j]``. With ``shared > 0`` (from :func:`prefix_padded`) the first ``shared`` columns, the
    same tokens in every row, are computed for one row only and copied. Returns the new tokens,
    (len(penalties) * B, n_new), copy by copy.
    """
    r, b = len(penalties), ids.shape[0]
    if shared and not can_share_prefix(model):
        raise ValueError(message("This model has sliding-window layers, which cannot share a prefix across padded "
                                 "rows: pass shared=0 with a left-padded batch."))
    if shared and not (bool((ids[:, :shared] == ids[:1, :shared]).all()) and bool(mask[:, :shared].all())
                       and 0 < shared < ids.shape[1]):
        raise ValueError(message("The first {shared} columns are not the same unpadded tokens in every row: build "
                                 "the batch with prefix_padded.", shared=shared))
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    logits, cache = padded_prefill(model, ids, mask, shared, **last_logits_only(model))
    penalty = torch.tensor(list(penalties), dtype=torch.float32).repeat_interleave(b)
    cache = kv_cache.repeat_rows(model, cache, r)           # copy j of the batch decodes under penalties[j]
    seen, mask, pos = ids.repeat(r, 1), mask.repeat(r, 1), pos[:, -1:].repeat(r, 1)
    last = logits[:, -1].float().repeat(r, 1)
    out = []
    for step in range(n_new):
        nxt = penalize(last, seen, penalty).argmax(-1, keepdim=True)
        out.append(nxt)
        if step == n_new - 1:
            break
        seen, mask, pos = torch.cat([seen, nxt], 1), torch.cat([mask, torch.ones_like(nxt)], 1), pos + 1
        logits, cache = kv_cache.forward(model, nxt, cache=cache, attention_mask=mask, position_ids=pos)
        last = logits[:, -1].float()
    return torch.cat(out, dim=1)


def _reply(tokenizer, new_ids: torch.Tensor) -> str:
    ids = new_ids.tolist()
    eos = tokenizer.eos_token_id
    if eos is not None and eos in ids:
        ids = ids[:ids.index(eos)]
    return tokenizer.decode(ids, skip_special_tokens=True).strip()


def run_battery(model, tokenizer, battery: Sequence[dict], penalties: Sequence[float] = (1.0,),
                n_new: int = 10) -> list[BatteryResult]:
    """Ask every question greedily, once per repetition penalty (1.0 is off), in one batch; one result each.

    The questions share their chat template's opening (the system turn), which is computed once for all of them
    where every layer attends to the whole context (:func:`can_share_prefix`).
    """
    if not penalties or any(not p > 0 for p in penalties):
        raise ValueError(message("Repetition penalties must be positive numbers (1.0 means off), got {penalties}.",
                                 penalties=list(penalties)))
    prompts = [chat_prompt(tokenizer, b["question"]) for b in battery]
    if can_share_prefix(model):
        ids, mask, shared = prefix_padded(prompts, pad_id_of(tokenizer))
    else:
        (ids, mask), shared = left_padded(prompts, pad_id_of(tokenizer)), 0
    new = greedy_with_penalties(model, ids, mask, penalties, n_new, shared).reshape(len(penalties), len(battery),
                                                                                    n_new)
    results = []
    for p, rows in zip(penalties, new):
        replies = [_reply(tokenizer, row) for row in rows]
        results.append(BatteryResult([is_correct(r, b["answers"]) for r, b in zip(replies, battery)], replies,
                                     float(p)))
    return results
