"""A second, structurally different model for checking that every notebook runs on "any model".

The chapter's default model is a Llama with a chat template, full attention in
every layer and three KV heads. A reader's own model may differ in all of that,
so this builds a tiny random-weight Gemma-3-style model that differs on purpose:

* no chat template (a base model): prompts fall back to plain text;
* sliding-window attention in most layers (their cache stops growing at the window),
  one full-attention layer;
* a single KV head of dimension 32, extra norms (Gemma's pre/post feed-forward norms,
  q/k norms), other layer names;
* saved as a local Hugging Face folder (not a GGUF), so GGUF-only parts must skip.

It reuses the embedded model's tokenizer (read from its GGUF, so nothing is
downloaded) with the chat template removed. Build it with
``python tests/second_model.py PATH`` or through the ``second_model`` fixture.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

SLIDING_WINDOW = 16
LAYER_TYPES = ["sliding_attention"] * 3 + ["full_attention"] + ["sliding_attention"] * 2


def build(path: str | Path, seed: int = 0) -> Path:
    """Write the tiny model (config, safetensors, tokenizer) to ``path`` and return it."""
    import os
    from transformers import AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig

    from helpers.model import embedded_gguf_path

    path = Path(path)
    gguf = embedded_gguf_path()
    tok = AutoTokenizer.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf))
    tok.chat_template = None
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
