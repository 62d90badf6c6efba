import hashlib

import pytest
import torch

from helpers.infra import corpus


class CharTokenizer:
    """One token per character: enough to test spans without loading a real tokenizer."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def test_the_shipped_text_matches_its_checksum_and_is_moby_dick():
    text = corpus.load_text()
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == corpus.CORPUS_SHA256
    assert text.startswith("CHAPTER 1. Loomings.") and "Call me Ishmael." in text


def test_a_span_is_the_fixed_slice_of_the_whole_encoding():
    tok = CharTokenizer()
    text = corpus.load_text()
    span = corpus.token_span(tok, 50, offset=7)
    assert span.shape == (1, 50) and span.dtype == torch.long
    assert corpus.span_text(tok, span) == text[7:57]
    assert torch.equal(span, corpus.token_span(tok, 50, offset=7))


def test_spans_at_different_offsets_are_disjoint_for_training_after_the_eval_span():
    tok = CharTokenizer()
    ev = corpus.token_span(tok, corpus.EVAL_TOKENS)
    train = corpus.token_span(tok, 100, offset=corpus.EVAL_TOKENS)
    assert corpus.span_text(tok, ev) + corpus.span_text(tok, train) == corpus.load_text()[:corpus.EVAL_TOKENS + 100]


def test_a_span_longer_than_the_corpus_is_refused_in_one_sentence():
    with pytest.raises(ValueError, match="too short"):
        corpus.token_span(CharTokenizer(), 10 ** 7)
    with pytest.raises(ValueError, match="n_tokens"):
        corpus.token_span(CharTokenizer(), 0)


def test_a_missing_empty_or_altered_corpus_is_refused(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="missing"):
        corpus.load_text(tmp_path / "nope.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("   \n")
    with pytest.raises(ValueError, match="empty"):
        corpus.load_text(empty)
    altered = tmp_path / "altered.txt"
    altered.write_text(corpus.load_text().replace("Ishmael", "Ahab", 1))
    monkeypatch.setenv(corpus.CORPUS_ENV, str(altered))
    with pytest.raises(ValueError, match="altered"):
        corpus.token_span(CharTokenizer(), 10)
