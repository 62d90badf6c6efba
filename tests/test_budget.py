"""The memory budget: the chapter's three quoted numbers, the assumptions that reproduce them, bad input."""
import math

import pytest

from helpers.infra import chapter
from helpers.infra.model import weight_bytes_at
from helpers import s10_budget as budget
from helpers.s03_cache_size import bytes_per_element, kv_bytes_per_token


def test_the_chapters_three_quoted_numbers_are_reproduced_exactly():
    weights_gb, tokens = chapter.S10_13B_INT4_8GB
    small = budget.fit(8, "13B", "int4")
    assert small.tokens == tokens == 337
    assert round(small.weights / budget.GiB, 1) == weights_gb
    for model, quoted in chapter.S10_16GB_INT8_TOKENS.items():
        assert budget.fit(16, model, "int8").tokens == quoted


def test_quoted_numbers_are_the_chapters_under_its_assumptions_and_miss_under_each_alternative():
    quoted = (chapter.S10_13B_INT4_8GB[1], chapter.S10_16GB_INT8_TOKENS["7B"], chapter.S10_16GB_INT8_TOKENS["13B"])
    assert budget.quoted_numbers() == quoted == (337, 65_378, 3_136)
    for change in (dict(gb=10 ** 9), dict(overhead=0), dict(overhead=budget.GiB), dict(int4_bits=4),
                   *(dict(params_7b=p) for p in budget.REAL_7B_PARAMS.values())):
        assert budget.quoted_numbers(**change) != quoted, change
    assert budget.quoted_numbers(int4_bits=4)[1:] == quoted[1:]      # int4's bits change the int4 entry alone


def test_13b_mha_cache_is_800_kib_per_token_against_128_for_the_7b():
    for model, kib in chapter.S10_KIB_PER_TOKEN.items():
        assert budget.MODELS[model].bytes_per_token("fp16") == kib * 1024
    assert budget.MODELS["13B"].attention == "MHA" and budget.MODELS["70B"].attention == "GQA"


def test_bytes_per_token_come_from_the_section_3_formula():
    for arch in budget.MODELS.values():
        assert arch.bytes_per_token("fp16") == kv_bytes_per_token(arch.layers, arch.kv_heads, arch.head_dim, 2)


def test_int4_is_four_bits_plus_one_fp16_scale_per_group_of_128():
    assert budget.WEIGHT_BITS["int4"] == 4.125
    assert budget.weight_bytes(13_000_000_000, "int4") == 6_703_125_000
    assert budget.weight_bytes(7_000_000_000, "int8") == 7_000_000_000
    assert budget.weight_bytes(3, "int4") == 2          # rounded up to a whole byte


@pytest.mark.parametrize("change", ["decimal GB", "no overhead", "1 GiB overhead", "int4 as 4.0 bits"])
def test_each_alternative_assumption_misses_at_least_one_quoted_number(change):
    gb = 10 ** 9 if change == "decimal GB" else budget.GiB
    overhead = {"no overhead": 0, "1 GiB overhead": budget.GiB}.get(change, budget.RUNTIME_OVERHEAD)
    int4_bits = 4 if change == "int4 as 4.0 bits" else budget.WEIGHT_BITS["int4"]

    def tokens(card, model, bits):
        arch = budget.MODELS[model]
        w = math.ceil(weight_bytes_at(arch.params, bits))
        return budget.tokens_that_fit(card * gb, w, arch.bytes_per_token("fp16"), overhead)

    got = (tokens(8, "13B", int4_bits), tokens(16, "7B", 8), tokens(16, "13B", 8))
    assert got != (337, 65_378, 3_136)


def test_the_table_has_every_card_model_and_format_and_the_70b_fits_nowhere():
    rows = budget.budget_table()
    assert len(rows) == 3 * 3 * 3
    assert not any(r["tokens"] >= 0 for r in rows if r["model"] == "70B")
    by = {(r["card_gb"], r["model"], r["weight_format"]): r["tokens"] for r in rows}
    for model in budget.MODELS:     # fewer bits per weight always leave more room for context
        for card in chapter.S10_CARDS_GB:
            assert by[(card, model, "fp16")] < by[(card, model, "int8")] < by[(card, model, "int4")]


def test_users_served_is_tokens_that_fit_divided_by_context():
    f = budget.fit(16, "7B", "int8")
    assert budget.users_served(16, "7B", "int8", "fp16", 4096) == f.tokens // 4096 == 15
    assert budget.users_served(16, "7B", "int8", "int8", 4096) == budget.fit(16, "7B", "int8", "int8").tokens // 4096
    assert budget.frontier(16, "7B", "int8", "fp16", [1024, 2048, 4096]) == [63, 31, 15]


@pytest.mark.parametrize("args", [
    (8, "13B", "fp16", "fp16", 1024),    # the weights alone are larger than the card
    (16, "7B", "int8", "fp16", -5),      # a negative context
    (16, "7B", "int8", "fp16", 0),
    (16, "9B", "int8", "fp16", 1024),    # an unknown model
    (16, "7B", "int3", "fp16", 1024),    # an unknown format
    (-1, "7B", "int8", "fp16", 1024),
])
def test_bad_input_gets_one_sentence(args):
    with pytest.raises(ValueError) as e:
        budget.users_served(*args)
    msg = str(e.value)
    assert "\n" not in msg and msg.endswith(".")


def test_machine_tokens_refuses_a_memory_smaller_than_the_weights():
    assert budget.machine_tokens(10 * budget.GiB, budget.GiB, 1024, overhead=0) == 9 * 2 ** 20
    with pytest.raises(ValueError):
        budget.machine_tokens(budget.GiB, 2 * budget.GiB, 1024)


def _decoder_params(vocab, dim, layers, ffn, kv_dim):
    """Untied embedding and head, per layer q, k, v, o, a gated MLP and two norms, then the final norm."""
    per_layer = 2 * dim * dim + 2 * dim * kv_dim + 3 * dim * ffn + 2 * dim
    return 2 * vocab * dim + layers * per_layer + dim


def test_the_real_7b_counts_are_those_models_weights():
    assert budget.REAL_7B_PARAMS["Llama 2 7B"] == _decoder_params(32_000, 4096, 32, 11_008, kv_dim=4096)
    assert budget.REAL_7B_PARAMS["Mistral 7B"] == _decoder_params(32_000, 4096, 32, 14_336, kv_dim=8 * 128)


def test_real_7b_parameter_counts_miss_the_chapters_65378_tokens():
    arch = budget.MODELS["7B"]
    for params in budget.REAL_7B_PARAMS.values():
        assert params != arch.params
        got = budget.tokens_that_fit(16 * budget.GiB, budget.weight_bytes(params, "int8"), arch.bytes_per_token("fp16"))
        assert got != chapter.S10_16GB_INT8_TOKENS["7B"]
    assert min(budget.REAL_7B_PARAMS.values()) < arch.params < max(budget.REAL_7B_PARAMS.values())


@pytest.mark.parametrize("cache_budget", [16 * 2 ** 20, 10 ** 7, 123_457])
@pytest.mark.parametrize("bytes_per_token, context", [(18_432, 91), (131_072, 7), (1, 1), (3, 1000)])
def test_the_users_a_cache_budget_holds_fit_and_one_more_would_not(cache_budget, bytes_per_token, context):
    tokens = budget.tokens_that_fit(cache_budget, 0, bytes_per_token, overhead=0)    # the budget alone
    users = tokens // context
    assert users * context * bytes_per_token <= cache_budget < (users + 1) * context * bytes_per_token


@pytest.mark.parametrize("memory", [24 * budget.GiB, 8 * budget.GiB + 12_345, 4 * budget.GiB])
@pytest.mark.parametrize("numbers_per_token", [4_608, 18_432, 1_000_003])
def test_an_int8_cache_holds_at_least_four_times_the_tokens_of_an_fp32_one(memory, numbers_per_token):
    weights = 538_000_000
    fp32 = budget.machine_tokens(memory, weights, numbers_per_token * bytes_per_element("fp32"))
    int8 = budget.machine_tokens(memory, weights, numbers_per_token * bytes_per_element("int8"))
    assert fp32 > 0 and int8 >= 4 * fp32


@pytest.mark.parametrize("call", [
    lambda: budget.fit("16", "7B", "int8"),                # text, not a number: was a TypeError
    lambda: budget.fit(True, "7B", "int8"),
    lambda: budget.fit(float("nan"), "7B", "int8"),
    lambda: budget.fit(float("inf"), "7B", "int8"),
    lambda: budget.fit(-8, "7B", "int8"),
    lambda: budget.fit(16, "7B", "int8", overhead=-1),
    lambda: budget.fit(16, ["7B"], "int8"),                # unhashable: was a TypeError
    lambda: budget.fit(16, "7B", ["int8"]),
    lambda: budget.fit(16, "7B", "int8", "fp64"),
    lambda: budget.weight_bytes(7e9, "int8"),              # a float count of weights
    lambda: budget.weight_bytes(-1, "int8"),
    lambda: budget.tokens_that_fit("1", 0, 1),
    lambda: budget.tokens_that_fit(2 ** 30, 0, 0),
    lambda: budget.tokens_that_fit(2 ** 30, 0, 1.5),
    lambda: budget.tokens_that_fit(2 ** 30, float("nan"), 1),
    lambda: budget.machine_tokens(float("inf"), 0, 1),
    lambda: budget.users_served("16", "7B", "int8", "fp16", 4096),
    lambda: budget.users_served(16, "7B", "int8", "fp16", 4096.0),
    lambda: budget.users_served(16, "7B", "int8", "fp16", True),
    lambda: budget.frontier(16, "7B", "int8", "fp16", [1024, "2k"]),
    lambda: budget.budget_table(cards=(8, "16")),
])
def test_bad_input_to_every_function_gets_one_sentence(call):
    with pytest.raises(ValueError) as e:
        call()
    msg = str(e.value)
    assert "\n" not in msg and msg.endswith(".")


def test_the_frontier_figure_shows_the_calculators_users_and_its_menus_switch_card_and_cache():
    contexts = [512, 4096, 32768]
    fig = budget.frontier_figure([8, 16], contexts, card=16)
    shown = {t.name: list(t.y) for t in fig.data if t.visible}
    want = [u or None for u in budget.frontier(16, "7B", "int8", "fp16", contexts)]
    assert len(shown) == 9 and shown["7B, int8 weights"] == want
    cards, kvs = fig.layout.updatemenus
    assert [b.label for b in cards.buttons] == ["card: 8 GB", "card: 16 GB"] and cards.active == 1
    int8_ys = next(b for b in kvs.buttons if b.label == "KV cache: int8").args[0]["y"]
    assert int8_ys[9 + 1] == [u or None for u in budget.frontier(16, "7B", "int8", "int8", contexts)]


def test_the_memory_bar_adds_up_to_the_card():
    f = budget.fit(16, "7B", "int8")
    fig = budget.memory_bar(16, f, 1000 * f.bytes_per_token)
    assert abs(sum(t.x[0] for t in fig.data) - 16) < 1e-9 and len(fig.data) == 4
