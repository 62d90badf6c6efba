"""Tests for helpers.s02_phases on tiny random-init models (no download, seconds to run)."""

import pytest
import torch

from conftest import TINY, make_tiny_llama
from helpers import s01_kv_cache as kv_cache, s02_phases as phases, s02_roofline as roofline
from helpers.infra.model import weight_bytes

LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM = (TINY[k] for k in ("num_hidden_layers", "hidden_size",
                                                               "num_attention_heads", "num_key_value_heads",
                                                               "head_dim"))


def tiny(tied: bool = True):
    """The conftest tiny Llama, its embedding tied to its output head (as in SmolLM2) unless ``tied=False``."""
    return make_tiny_llama(tie_word_embeddings=tied)


@pytest.fixture(scope="module")
def model():
    return tiny()


BASE = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
CACHE_BYTES_PER_TOKEN = 2 * LAYERS * KV_HEADS * HEAD_DIM * 4   # K and V, fp32


# --------------------------------------------------------------------------- prompts


def test_prompt_of_length_repeats_and_cuts():
    base = torch.tensor([[1, 2, 3]])
    assert phases.prompt_of_length(base, 7).tolist() == [[1, 2, 3, 1, 2, 3, 1]]
    assert phases.prompt_of_length(base, 2).tolist() == [[1, 2]]
    assert phases.prompt_of_length(base, 3).tolist() == [[1, 2, 3]]


@pytest.mark.parametrize("n", [0, -3, 2.5])
def test_prompt_of_length_rejects_bad_n(n):
    with pytest.raises(ValueError):
        phases.prompt_of_length(BASE, n)


def test_prompt_of_length_rejects_empty_base():
    with pytest.raises(ValueError):
        phases.prompt_of_length(torch.zeros(1, 0, dtype=torch.long), 4)


def test_prefill_sweep_rows(model):
    rows = phases.prefill_sweep(model, BASE, [4, 16], repeats=2, warmup=0)
    assert [r.tokens for r in rows] == [4, 16]
    for r in rows:
        assert r.seconds > 0
        assert r.ms_per_token == pytest.approx(1e3 * r.seconds / r.tokens)
        assert r.tokens_per_second == pytest.approx(r.tokens / r.seconds)


@pytest.mark.parametrize("bad", [[], [0, 4], [4, 4]])
def test_sweeps_reject_bad_lengths(model, bad):
    with pytest.raises(ValueError):
        phases.prefill_sweep(model, BASE, bad)
    with pytest.raises(ValueError):
        phases.decode_sweep(model, BASE, bad)


def test_decode_sweep_cache_bytes_exact(model):
    rows = phases.decode_sweep(model, BASE, [3, 20], repeats=3, warmup=1)
    assert [r.context for r in rows] == [3, 20]
    for r in rows:
        assert r.cache_bytes == CACHE_BYTES_PER_TOKEN * r.context
        assert r.steps == 4
        assert r.tokens_per_second == pytest.approx(1 / r.seconds)


def test_decode_bytes_adds_the_cache(model):
    _, cache = kv_cache.prefill(model, phases.prompt_of_length(BASE, 11))
    b = roofline.decode_bytes(model, cache)
    assert b.cache == CACHE_BYTES_PER_TOKEN * 11
    assert b.weights == weight_bytes(model)
    assert b.total == b.weights + b.cache
    assert roofline.decode_bytes(model).cache == 0


def test_stream_reply_is_the_cached_generation(model):
    ids = phases.prompt_of_length(BASE, 9)
    seen = []
    s = phases.stream_reply(model, ids, 12, on_token=lambda t, sec: seen.append((t, sec)))
    assert torch.equal(torch.tensor([s.tokens]), kv_cache.generate_cached(model, ids, 12))
    assert [t for t, _ in seen] == s.tokens and [sec for _, sec in seen] == s.times
    assert s.prompt_tokens == 9
    assert s.ttft == s.times[0] > 0
    assert all(b > a for a, b in zip(s.times, s.times[1:]))
    assert len(s.gaps) == 11


def test_stream_reply_stops_at_a_stop_token(model):
    ids = phases.prompt_of_length(BASE, 9)
    full = phases.stream_reply(model, ids, 12).tokens
    stop = full[4]
    first = full.index(stop)
    s = phases.stream_reply(model, ids, 12, stop_ids=[stop])
    assert s.tokens == full[:first + 1]


def test_stream_rate_and_errors():
    s = phases.Stream(prompt_tokens=3, tokens=[1, 2, 3, 4], times=[0.5, 0.6, 0.7, 1.2])
    assert s.ttft == 0.5
    assert s.tokens_per_second == pytest.approx(10.0)      # median gap 0.1 s; the 0.5 s hiccup does not count
    with pytest.raises(ValueError):
        phases.Stream(prompt_tokens=3, tokens=[1], times=[0.5]).tokens_per_second
    with pytest.raises(ValueError):
        phases.Stream(prompt_tokens=3).ttft


@pytest.mark.parametrize("kw", [dict(n_new=0), dict(prompt_ids=torch.zeros(1, 0, dtype=torch.long)),
                                dict(prompt_ids=torch.zeros(2, 4, dtype=torch.long))])
def test_stream_reply_rejects_bad_input(model, kw):
    args = dict(prompt_ids=BASE, n_new=4) | kw
    with pytest.raises(ValueError):
        phases.stream_reply(model, **args)


def test_ttft_sweep_one_row_per_length(model):
    out = phases.ttft_sweep(model, BASE, [4, 30], n_new=5, repeats=2)
    assert [r.prompt_tokens for r in out] == [4, 30]
    for r, p in zip(out, [4, 30]):
        assert len(r.streams) == 2 and all(len(s.tokens) == 5 for s in r.streams)
        assert len(r.gaps) == 8
        # every stream is an exact greedy continuation of its own prompt
        ref = kv_cache.generate_cached(model, phases.prompt_of_length(BASE, p), 5)
        assert all(ref.tolist() == [s.tokens] for s in r.streams)


def test_decode_stepper_grows_the_cache_one_token_per_step(model):
    step, state = phases.decode_stepper(model, BASE, 10)
    assert kv_cache.cache_length(state[1]) == 10
    tokens = [int(state[0])]
    for _ in range(3):
        step()
        tokens.append(int(state[0]))
    assert kv_cache.cache_length(state[1]) == 13
    ref = kv_cache.generate_cached(model, phases.prompt_of_length(BASE, 10), 4)
    assert ref.tolist() == [tokens]
    with pytest.raises(ValueError):
        phases.decode_stepper(model, BASE, 0)


def test_decode_stepper_uses_a_prefilled_cache_only_at_its_length(model, monkeypatch):
    ids = phases.prompt_of_length(BASE, 10)
    ready = kv_cache.prefill(model, ids)
    calls = []
    real_prefill = kv_cache.prefill
    monkeypatch.setattr(kv_cache, "prefill", lambda *a, **k: calls.append(1) or real_prefill(*a, **k))
    step, state = phases.decode_stepper(model, BASE, 10, prefilled=ready)
    assert calls == [] and state[1] is ready[1]           # taken as it is: no second prefill
    step()                                                # the step grows that very cache to 11 tokens...
    assert kv_cache.cache_length(ready[1]) == 11
    _, again = phases.decode_stepper(model, BASE, 10, prefilled=ready)
    assert calls == [1] and kv_cache.cache_length(again[1]) == 10   # ...so it is not reused: a fresh prefill
    fresh = phases.decode_sweep(model, BASE, [10], repeats=2, warmup=1)
    reused = phases.decode_sweep(model, BASE, [10], repeats=2, warmup=1,
                                 prefilled={10: real_prefill(model, ids)})
    assert (fresh[0].cache_bytes, fresh[0].steps) == (reused[0].cache_bytes, reused[0].steps)


def test_ttft_row_statistics():
    mk = lambda times: phases.Stream(prompt_tokens=5, tokens=list(range(len(times))), times=times)  # noqa: E731
    row = phases.TTFTRow(5, [mk([0.3, 0.4, 0.5]), mk([0.1, 0.3, 0.35]), mk([0.2, 0.5, 0.6])])
    assert row.ttft == 0.2 and row.fastest_ttft == 0.1
    assert row.typical is row.streams[2]
    assert sorted(row.gaps) == pytest.approx([0.05, 0.1, 0.1, 0.1, 0.2, 0.3])
    assert row.tokens_per_second == pytest.approx(10.0)
    assert row.fastest_tokens_per_second == pytest.approx(20.0)
    with pytest.raises(ValueError):
        phases.TTFTRow(5, [mk([0.3])]).tokens_per_second


def test_ttft_sweep_rejects_bad_repeats(model):
    with pytest.raises(ValueError):
        phases.ttft_sweep(model, BASE, [5], repeats=0)


def test_sweep_rows_fastest_is_at_most_the_median(model):
    for r in phases.prefill_sweep(model, BASE, [4, 8], repeats=3, warmup=0):
        assert 0 < r.fastest <= r.seconds
    for r in phases.decode_sweep(model, BASE, [4, 8], repeats=3, warmup=0):
        assert 0 < r.fastest <= r.seconds



def test_prefill_rows_keep_their_repeats_and_pool(model):
    a, b = phases.prefill_sweep(model, BASE, [4, 8], repeats=2, warmup=0), \
        phases.prefill_sweep(model, BASE, [4, 8], repeats=3, warmup=0)
    for r in a + b:
        assert r.fastest == min(r.times) and r.fastest_ms_per_token == pytest.approx(1e3 * r.fastest / r.tokens)
    pooled = phases.pool_prefill_rows(a, b)
    for p, x, y in zip(pooled, a, b):
        assert p.tokens == x.tokens and p.times == x.times + y.times
        assert p.fastest == min(x.fastest, y.fastest)
        assert p.seconds == pytest.approx(sorted(p.times)[2])          # the median of the five repeats
    with pytest.raises(ValueError):
        phases.pool_prefill_rows(a, b[::-1])                         # lengths must line up
    with pytest.raises(ValueError):
        a[0].pooled(phases.PrefillRow(4, 0.1, 0.0, 0.1))              # a row without its repeats


def test_prefill_agreement_known_values():
    mk = lambda p, ttft: phases.TTFTRow(p, [phases.Stream(p, [1, 2], [ttft, ttft + 0.05])])  # noqa: E731
    rows = [phases.PrefillRow(16, 0.09, 0.0, 0.06, (0.06, 0.12)), phases.PrefillRow(64, 0.2, 0.0, 0.2, (0.2,)),
            phases.PrefillRow(1024, 3.0, 0.0, 2.0, (2.0, 4.0))]
    got = phases.prefill_agreement(rows, [mk(16, 0.09), mk(128, 0.5), mk(1024, 2.0)])
    assert got == pytest.approx({16: 1.5, 1024: 1.0})                # fastest runs, larger over smaller
    with pytest.raises(ValueError):
        phases.prefill_agreement(rows, [mk(128, 0.5)])                # no length in common


# --------------------------------------------------------------------------- the claims read off the timings


def _fields_used(check):
    """Every field a check passes is one its statement or evidence names, and every named field is passed."""
    from helpers.infra.messages import fields_of
    holds, statement, evidence, fields = check
    return set(fields) == fields_of(statement) | fields_of(evidence)


def test_split_checks_reads_the_fastest_repeats():
    from helpers.infra.measure import Timing
    split = {"prefill": Timing(0.1, [0.1, 0.08]), "decode": Timing(0.06, [0.06, 0.05])}   # 2 ms a token, 50 ms
    (holds, _, _, fields), = phases.split_checks(split, 40).values()
    assert holds and fields["ratio"] == pytest.approx(25.0)
    slow_prefill = {**split, "prefill": Timing(0.8, [0.8])}                               # 20 ms a token: 2.5x
    assert not phases.split_checks(slow_prefill, 40)["split"][0]
    assert _fields_used(phases.split_checks(split, 40)["split"])


def _ttft(p, times):
    return phases.TTFTRow(p, [phases.Stream(p, list(range(len(times))), times)])


def test_prefill_checks_known_values():
    rows = [phases.PrefillRow(16, 0.04, 0.0, 0.032, (0.032, 0.04)),             # 2 ms a token
            phases.PrefillRow(1024, 1.2, 0.0, 1.024, (1.024, 1.2))]             # 1 ms a token
    streamed = [_ttft(16, [0.03, 0.08, 0.13]), _ttft(1024, [1.1, 1.16, 1.22])]   # 20 and 16.7 tokens/s
    checks = phases.prefill_checks((rows, streamed))
    assert all(c[0] for c in checks.values()) and all(_fields_used(c) for c in checks.values())
    assert checks["falls"][3]["first"] == pytest.approx(2.0) and checks["falls"][3]["best"] == pytest.approx(1.0)
    assert checks["agree"][3]["p"] == 1024 and checks["agree"][3]["apart"] == pytest.approx(1.1 / 1.024)
    assert checks["ttft"][3]["growth"] == pytest.approx(1.1 / 0.03)
    assert checks["rate"][3]["rate"] == pytest.approx(0.05 / 0.06)
    late = [streamed[0], _ttft(1024, [2.0, 2.2, 2.4])]                      # 1.95x apart, a third of the pace
    failed = phases.prefill_checks((rows, late))
    assert not failed["agree"][0] and not failed["rate"][0] and failed["ttft"][0]
    flat = [rows[0], phases.PrefillRow(1024, 3.0, 0.0, 2.048, (2.048,))]       # 2 ms a token throughout
    assert not phases.prefill_checks((flat, streamed))["falls"][0]


def test_pool_prefill_and_stream_keeps_every_run():
    rows = [phases.PrefillRow(16, 0.04, 0.0, 0.04, (0.04,))]
    a = (rows, [_ttft(16, [0.03, 0.08])])
    b = ([phases.PrefillRow(16, 0.03, 0.0, 0.03, (0.03,))], [_ttft(16, [0.02, 0.06])])
    pooled_rows, pooled_ttft = phases.pool_prefill_and_stream(a, b)
    assert pooled_rows[0].times == (0.04, 0.03) and pooled_rows[0].fastest == 0.03
    assert pooled_ttft[0].streams == a[1][0].streams + b[1][0].streams and pooled_ttft[0].fastest_ttft == 0.02
    with pytest.raises(ValueError):
        phases.pool_prefill_and_stream(a, (b[0], [_ttft(32, [0.02, 0.06])]))


def test_decode_checks_known_values():
    rows = [phases.DecodeRow(16, 0.06, 0.0, 8, 100, 0.05), phases.DecodeRow(1024, 0.07, 0.0, 8, 6400, 0.06)]
    (holds, _, _, fields), = phases.decode_checks(rows).values()
    assert holds and (fields["low"], fields["high"], fields["t_low"], fields["t_high"]) == (16, 1024, 50.0, 60.0)
    assert _fields_used(phases.decode_checks(rows)["flat"])
    rows[-1] = phases.DecodeRow(1024, 0.09, 0.0, 8, 6400, 0.08)              # 1.6x: not flat
    assert not phases.decode_checks(rows)["flat"][0]
