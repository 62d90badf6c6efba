"""The cache-size formula, held against known values, its own properties, and the real cache of tiny models."""
from fractions import Fraction

import pytest
import torch
from transformers import Qwen2Config

from conftest import tiny_llama_config
from helpers import s01_kv_cache as kv_cache
from helpers import s03_cache_calculator as calc
from helpers import s03_cache_size as cs
from helpers.infra import chapter as ch

NARROW = dict(hidden_size=32, head_dim=8, intermediate_size=16, vocab_size=64)   # 2 layers, 2 KV heads of dim 8
Q = ch.QWEN25                                                                      # the chapter's model
CHAPTER_GEOMETRY = (Q["layers"], Q["query_heads"], Q["kv_heads"], Q["head_dim"])


def tiny_config(**overrides):
    """The conftest tiny Llama's config, narrowed (``NARROW``): small caches whose bytes are easy to count."""
    return tiny_llama_config(**{**NARROW, **overrides})


@pytest.fixture(scope="module")
def tiny16():
    return cs.random_model(tiny_config(), dtype=torch.float16)


# --------------------------------------------------------------------------- the formula: known values

def test_known_bytes_per_token():
    layers, _, kv_heads, head_dim = CHAPTER_GEOMETRY
    assert cs.kv_bytes_per_token(layers, kv_heads, head_dim, 2) == ch.S3_BYTES_PER_TOKEN      # fp16
    assert cs.kv_bytes_per_token(layers, Q["query_heads"], head_dim, "fp16") == ch.S3_MHA_BYTES_PER_TOKEN
    s = ch.SEVEN_B
    assert cs.kv_bytes_per_token(s["layers"], s["kv_heads"], s["head_dim"], torch.float16) == \
        ch.S3_SEVEN_B_BYTES_PER_TOKEN
    assert cs.kv_bytes_per_token(30, 3, 64, "float32") == 46_080    # SmolLM2-135M in fp32, by hand
    assert cs.CHAPTER_MODEL.bytes_per_token("fp16") == ch.S3_BYTES_PER_TOKEN
    assert cs.SEVEN_B_CLASS.bytes_per_token("bf16") == ch.S3_SEVEN_B_BYTES_PER_TOKEN


def test_chapter_headline_numbers():
    bpt = cs.CHAPTER_MODEL.bytes_per_token("fp16")
    assert cs.cache_bytes(bpt, 1, ch.S3_MEASURED_TOKENS) == ch.S3_MEASURED_BYTES
    rows = cs.shape_table(bpt, ch.S3_RESIDENT_SHAPES)
    assert {r["resident"] for r in rows} == {ch.S3_RESIDENT_TOKENS}
    assert {r["bytes"] for r in rows} == {ch.S3_RESIDENT_MIB * 2 ** 20}
    assert cs.human_bytes(rows[0]["bytes"]) == "768 MiB"
    # 7B class: 13.0 GiB of fp16 weights; one user's cache passes them before the chapter's long context.
    w = cs.SEVEN_B_CLASS.weight_bytes("fp16")
    assert round(w / 2 ** 30, 1) == ch.S3_SEVEN_B_WEIGHTS_GIB and cs.human_bytes(w) == "13.0 GiB"
    n = cs.context_to_exceed(w, cs.SEVEN_B_CLASS.bytes_per_token("fp16"))
    assert n == 106_812 and n < ch.S3_LONG_CONTEXT


@pytest.mark.parametrize("name,expected", [("fp32", 4), ("float", 4), ("half", 2), ("BF16", 2), ("torch.float16", 2),
                                           ("fp8", 1), ("int8", 1), (torch.bfloat16, 2), (torch.int8, 1)])
def test_dtype_aliases(name, expected):
    assert cs.bytes_per_element(name) == expected


def test_human_bytes():
    assert cs.human_bytes(12_288) == "12 KiB"
    assert cs.human_bytes(86_016) == "84 KiB"
    assert cs.human_bytes(3_624_960) == "3.46 MiB"
    assert cs.human_bytes(512) == "512 B"


# --------------------------------------------------------------------------- properties

@pytest.mark.parametrize("q", [1, 6, 9, 14, 32])
def test_gqa_divides_the_cache_by_the_group_size(q):
    base = cs.KVArchitecture("m", layers=5, query_heads=q, kv_heads=q, head_dim=16)
    mha = base.bytes_per_token("fp16")
    for kv in [d for d in range(1, q + 1) if q % d == 0]:
        v = base.with_kv_heads(kv)
        assert Fraction(mha, v.bytes_per_token("fp16")) == Fraction(q, kv) == v.group_size
    assert set(base.with_kv_heads(1).variants()) <= {"MHA", "MQA"}


def test_variants_of_a_gqa_model():
    v = cs.CHAPTER_MODEL.variants()
    assert list(v) == ["MHA", "GQA", "MQA"]
    assert [a.kv_heads for a in v.values()] == [14, 2, 1]
    assert v["MHA"].bytes_per_token("fp16") == 7 * v["GQA"].bytes_per_token("fp16")


def test_cache_depends_only_on_resident_tokens():
    bpt = ch.S3_BYTES_PER_TOKEN
    for total in (1, 96, 65_536):
        sizes = {cs.cache_bytes(bpt, u, total // u) for u in range(1, total + 1) if total % u == 0}
        assert sizes == {total * bpt}


def test_context_to_exceed_is_the_first_context_past_the_limit():
    for limit, bpt, users in [(14_000_000_000, 131_072, 1), (1000, 10, 3), (999, 333, 1), (0, 7, 2)]:
        n = cs.context_to_exceed(limit, bpt, users)
        assert cs.cache_bytes(bpt, users, n) > limit >= cs.cache_bytes(bpt, users, n - 1)


def test_calculator_values():
    c = calc.calculator(*CHAPTER_GEOMETRY, "fp16", users=3, tokens=100)
    bpt = ch.S3_BYTES_PER_TOKEN
    assert c["bytes_per_token"] == bpt and c["total_bytes"] == 3 * 100 * bpt
    assert c["mha_bytes"] == 7 * c["total_bytes"] and c["mqa_bytes"] * 2 == c["total_bytes"]
    assert (c["attention"], c["group_size"]) == ("GQA", 7)


# --------------------------------------------------------------------------- bad input: one sentence each

def _one_sentence(e):
    msg = str(e.value)
    assert "\n" not in msg and msg.endswith(".") and msg.count(". ") == 0, msg


def test_the_live_view_shows_the_calculators_numbers_and_bars(monkeypatch):
    shown = []
    monkeypatch.setattr(calc, "display", shown.append)
    layers, q, kv, hd = CHAPTER_GEOMETRY
    fig = calc.live_view(layers, q, kv, hd, window=1024, window_layers=20, dtype="float16", users=3, tokens=4096)
    c = calc.calculator(layers, q, kv, hd, "float16", 3, 4096, 1024, 20)
    row = shown[0].iloc[0]
    assert shown[0].index.tolist() == ["GQA"] and row["query heads per KV head"] == q // kv
    assert row["bytes per token"] == f"{ch.S3_BYTES_PER_TOKEN:,}" and row["all users"] == cs.human_bytes(c["total_bytes"])
    bars = fig.data[0]
    assert list(bars.x) == [c[k] / 2 ** 30 for k in ("mha_bytes", "total_bytes", "mqa_bytes")]
    assert bars.x[0] == q // kv * bars.x[1] and list(bars.y) == [f"MHA ({q} KV heads)", f"yours ({kv})", "MQA (1)"]
    with pytest.raises(ValueError, match="kv_heads"):
        calc.live_view(layers, q, 4, hd, None, 0, "fp16", 1, 10)

@pytest.mark.parametrize("call", [
    lambda: cs.kv_bytes_per_token(24, 0, 64, 2),                              # zero heads
    lambda: cs.KVArchitecture("m", 24, 0, 1, 64),                             # zero query heads
    lambda: cs.KVArchitecture("m", 24, 14, 4, 64),                            # 4 does not divide 14
    lambda: cs.KVArchitecture("m", 24, 14, 28, 64),                           # more KV than query heads
    lambda: cs.cache_bytes(12_288, 1, -5),                                    # negative tokens
    lambda: cs.cache_bytes(12_288, -1, 5),                                    # negative users
    lambda: cs.kv_bytes_per_token(24, 2, 64, "fp7"),                          # unknown dtype
    lambda: cs.kv_bytes_per_token(24, 2, 64, 0),                              # zero bytes
    lambda: cs.kv_bytes_per_token(24, 2, 64.5, 2),                            # not whole
    lambda: calc.calculator(24, 14, 3, 64, "fp16", 1, 10),
])
def test_bad_input_raises_one_sentence(call):
    with pytest.raises(ValueError) as e:
        call()
    _one_sentence(e)


def test_divisibility_message_suggests_divisors():
    with pytest.raises(ValueError, match=r"1, 2, 7, 14"):
        cs.KVArchitecture("m", 24, 14, 4, 64)


# --------------------------------------------------------------------------- configs

def test_from_config():
    cfg = ch.qwen25_config(intermediate_size=8, vocab_size=16)
    a = cs.KVArchitecture.from_config(cfg)
    assert (a.layers, a.query_heads, a.kv_heads, a.head_dim) == CHAPTER_GEOMETRY
    assert cs.kv_bytes_per_token_from_config(cfg, "fp16") == ch.S3_BYTES_PER_TOKEN
    assert cs.kv_bytes_per_token_from_config(tiny_config(dtype="float32")) == 2 * 2 * 2 * 8 * 4
    with pytest.raises(ValueError):
        cs.kv_bytes_per_token_from_config(tiny_config())      # no dtype anywhere
    with pytest.raises(ValueError):
        ch.qwen25_config(kv_heads=3)


def test_sliding_window_configs_are_read_per_layer():
    cfg = tiny_config(num_hidden_layers=3, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                      sliding_window=16)
    a = cs.KVArchitecture.from_config(cfg)
    assert (a.window, a.window_layers) == (16, 2)
    # within the window every layer grows; past it only the full layer does (the window keeps 15 tokens)
    per_layer = 2 * 2 * 8 * 2
    assert a.cache_bytes("fp16", 1, 10) == 3 * 10 * per_layer
    assert a.cache_bytes("fp16", 2, 100) == 2 * (100 + 2 * 15) * per_layer
    assert a.bytes_per_token_past_window("fp16") == per_layer


def test_unknown_layer_kinds_are_refused():
    cfg = tiny_config(layer_types=["chunked_attention", "full_attention"])
    with pytest.raises(ValueError):
        cs.KVArchitecture.from_config(cfg)


def test_a_window_needs_a_size_and_fits_the_layers():
    with pytest.raises(ValueError):
        cs.KVArchitecture("x", 2, 4, 2, 8, window_layers=1)
    with pytest.raises(ValueError):
        cs.KVArchitecture("x", 2, 4, 2, 8, window=16, window_layers=3)


@pytest.mark.parametrize("tokens", [1, 14, 15, 16, 17, 40])
def test_sliding_window_formula_equals_the_real_cache(tokens):
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=16, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=1, use_sliding_window=True, sliding_window=16,
                      max_window_layers=1, max_position_embeddings=256)
    m = cs.random_model(cfg, dtype=torch.float32)
    a = cs.KVArchitecture.from_config(cfg)
    assert a.window_layers == 3
    assert cs.measure_cache(m, 2, tokens).nbytes == a.cache_bytes("fp32", 2, tokens)


def test_sliding_calculator_row():
    layers, _, kv_heads, head_dim = CHAPTER_GEOMETRY
    c = calc.calculator(*CHAPTER_GEOMETRY, "fp16", users=1, tokens=4096, window=1024, window_layers=20)
    assert c["total_bytes"] == ((layers - 20) * 4096 + 20 * 1023) * 2 * kv_heads * head_dim * 2
    assert c["no_window_bytes"] == layers * 4096 * 2 * kv_heads * head_dim * 2


# --------------------------------------------------------------------------- against the real cache

@pytest.mark.parametrize("users,tokens", [(1, 1), (1, 13), (3, 7), (4, 32)])
def test_measured_cache_equals_the_formula(tiny16, users, tokens):
    m = cs.measure_cache(tiny16, users, tokens)
    bpt = cs.kv_bytes_per_token_from_config(tiny16.config, "fp16")
    assert m.layer_shape == (users, 2, tokens, 8) and m.dtype == "float16" and m.layers == 2
    assert m.nbytes == cs.cache_bytes(bpt, users, tokens) == m.storage_bytes
    assert m.bytes_per_token == bpt


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_measured_cache_follows_the_dtype(dtype):
    model = cs.random_model(tiny_config(), dtype=dtype)
    m = cs.measure_cache(model, 2, 5)
    assert m.dtype == dtype
    assert m.nbytes == cs.cache_bytes(cs.kv_bytes_per_token(2, 2, 8, dtype), 2, 5)


def test_hidden_mlp_vocab_do_not_matter():
    a = cs.random_model(tiny_config())
    b = cs.random_model(tiny_config(hidden_size=48, intermediate_size=80, vocab_size=300))
    assert cs.measure_cache(a, 2, 9).nbytes == cs.measure_cache(b, 2, 9).nbytes


def test_a_shrunk_config_keeps_the_cache_and_leaves_the_original_alone():
    full = ch.qwen25_config()
    small = cs.shrunk_config(full, mlp=64, vocab=1024)
    assert (small.intermediate_size, small.vocab_size) == (64, 1024)
    assert (full.intermediate_size, full.vocab_size) == (Q["mlp"], Q["vocab"])          # a copy, not an edit
    assert cs.kv_bytes_per_token_from_config(small, "fp16") == ch.S3_BYTES_PER_TOKEN
    assert cs.KVArchitecture.from_config(small) == cs.KVArchitecture.from_config(full)
    mqa = cs.shrunk_config(full, 64, 1024, kv_heads=1)
    assert mqa.num_key_value_heads == 1 and full.num_key_value_heads == Q["kv_heads"]
    assert cs.kv_bytes_per_token_from_config(mqa, "fp16") * Q["kv_heads"] == ch.S3_BYTES_PER_TOKEN
    # the same as the chapter's own builder, which takes the KV heads too
    assert small.to_dict() == ch.qwen25_config(64, 1024).to_dict()
    assert mqa.to_dict() == ch.qwen25_config(64, 1024, kv_heads=1).to_dict()
    with pytest.raises(ValueError, match="mlp"):
        cs.shrunk_config(full, mlp=0, vocab=1024)


def test_each_decode_step_adds_exactly_one_token_per_user(tiny16):
    bpt = cs.kv_bytes_per_token_from_config(tiny16.config, "fp16")
    ids = torch.randint(0, 64, (3, 5), generator=torch.Generator().manual_seed(1))
    nxt, cache = kv_cache.prefill(tiny16, ids)
    before = cs.describe_cache(cache).nbytes
    nxt, cache = kv_cache.decode_step(tiny16, nxt, cache)
    after = cs.describe_cache(cache)
    assert after.nbytes - before == 3 * bpt and after.tokens == 6


def test_empty_cache_is_refused():
    with pytest.raises(ValueError):
        cs.describe_cache(kv_cache.new_cache())


# --------------------------------------------------------------------------- the static calculator

def test_the_users_slider_says_when_its_steps_are_logarithmic():
    assert calc.users_label([1, 2, 4, 8]) == "users (logarithmic steps: each x2)"
    assert calc.users_label([1, 10, 100]) == "users (logarithmic steps: each x10)"
    assert calc.users_label([1, 2, 3]) == calc.users_label([1, 2]) == "users"
    fig = calc.calculator_figure([cs.CHAPTER_MODEL], ["fp16"], [1, 2, 4], tokens_range=(128, 512))
    assert fig.layout.sliders[0].currentvalue.prefix == "users (logarithmic steps: each x2): "


def test_calculator_figure_controls_compose():
    archs = [cs.CHAPTER_MODEL, cs.SEVEN_B_CLASS]
    dtypes, users = ["fp32", "fp16", "int8"], [1, 4, 32]
    fig = calc.calculator_figure(archs, dtypes, users, tokens_range=(128, 4096))
    lay = fig.layout
    arch_menu, dtype_menu = lay.updatemenus
    # one above the other from the same left edge, so that no model name, however long, runs into the dtypes
    assert arch_menu.x == dtype_menu.x == 0 and arch_menu.xanchor == dtype_menu.xanchor == "left"
    assert arch_menu.y == dtype_menu.y and arch_menu.pad.b >= 36 > (dtype_menu.pad.b or 0)
    vis = [b.args[0]["visible"] for b in arch_menu.buttons]
    assert all(sum(col) == 1 for col in zip(*vis))          # every trace belongs to exactly one architecture
    assert all(b.method == "relayout" for b in dtype_menu.buttons)   # a dtype relabels the axis only
    for d_btn, d in zip(dtype_menu.buttons, dtypes):
        vals, text = d_btn.args[0]["yaxis.tickvals"], d_btn.args[0]["yaxis.ticktext"]
        assert [cs.human_bytes(int(v * cs.bytes_per_element(d))) for v in vals] == list(text)
    names = [t.name for t in fig.data]
    for s_step, u in zip(lay.sliders[0].steps, users):
        assert s_step.method == "restyle" and list(s_step.args[0]) == ["y"]
        for j, ys in enumerate(s_step.args[0]["y"]):
            a = archs[[v[j] for v in vis].index(True)]
            if names[j] == "weights":
                assert set(ys) == {a.params}
            elif "window" in names[j]:
                w = calc.sliding_variant(a)
                assert ys[-1] == w.cache_bytes(1, u, 4096) < a.cache_bytes(1, u, 4096)
            else:
                kv = int(names[j].split(": ")[1].split()[0])
                assert ys[0] == a.with_kv_heads(kv).cache_bytes(1, u, 128)
