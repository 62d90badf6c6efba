"""A second, structurally different model for checking that every notebook runs on "any model".

The chapter's default model is a Llama with a chat template, full attention in
every layer and three KV heads. A reader's own model may differ in all of that,
so this builds a tiny random-weight Gemma-3-style model that differs on purpose:

* no chat template (a base model): prompts fall back to plain text;
* sliding-window attention in most layers (their cache stops growing at the window),
  one full-attention layer;
* a single KV head of dimension 32, extra norms (Gemma's pre/post feed-forward norms,
  q/k norms), other layer names;
* its own tokenizer: a byte-level BPE of 2,048 tokens (SmolLM2 has 49,152), trained when the
  model is built on the chapter's corpus (``helpers.infra.corpus``), so nothing is downloaded. A small
  vocabulary also keeps the output layer, which dominates so small a model, from dominating the
  tests' time;
* saved as a local Hugging Face folder (not a GGUF), so GGUF-only parts must skip.

Build it with ``python tests/second_model.py PATH`` or through the ``second_model`` fixture.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

SLIDING_WINDOW = 16
LAYER_TYPES = ["sliding_attention"] * 3 + ["full_attention"] + ["sliding_attention"] * 2


VOCAB = 2048
END = "<|endoftext|>"


def tokenizer():
    """A byte-level BPE (any text encodes) of ``VOCAB`` tokens trained on the chapter's corpus; no chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from helpers.infra.corpus import load_text

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=[END], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(load_text().splitlines(), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=END, eos_token=END, pad_token=END)


def build(path: str | Path, seed: int = 0) -> Path:
    """Write the tiny model (config, safetensors, tokenizer) to ``path`` and return it."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    path = Path(path)
    tok = tokenizer()
    cfg = Gemma3TextConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=192, num_hidden_layers=len(LAYER_TYPES),
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, sliding_window=SLIDING_WINDOW,
        layer_types=LAYER_TYPES, max_position_embeddings=4096,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    torch.manual_seed(seed)
    model = Gemma3ForCausalLM(cfg).eval()
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/second_model.py OUTPUT_FOLDER")
    print(build(sys.argv[1]))
