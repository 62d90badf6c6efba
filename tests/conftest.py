import pytest
import torch


@pytest.fixture(scope="session")
def tiny_llama():
    """A 2-layer Llama with random weights: same code paths as the real model, built in milliseconds."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256)
    return LlamaForCausalLM(cfg).eval()
