"""A request's prefill runs alone, so it is run once and reused: by the other server, by the solo check, by the loops."""
import dataclasses
import time

import pytest
import torch

from helpers import s01_kv_cache as kc
from helpers import s04_servers as sv
from helpers import s04_slots as sl
from helpers import s04_solo as so
from test_batching import alone, ragged, tiny  # noqa: F401  (the same tiny model and ragged workload as the batching tests)


@pytest.fixture
def counted(monkeypatch):
    """Every prefill actually run, by prompt."""
    runs = []
    real = sl.prefill_alone

    def counting(model, prompt_ids):
        runs.append(sl.prompt_key(prompt_ids))
        return real(model, prompt_ids)

    monkeypatch.setattr(sl, "prefill_alone", counting)
    return runs


def test_prefill_alone_is_the_plain_prefill(tiny):
    p = torch.randint(0, 256, (1, 9), generator=torch.Generator().manual_seed(3))
    stored = sl.prefill_alone(tiny, p)
    logits, cache = kc.forward(tiny, p, cache=kc.new_cache(tiny))        # every position's logits
    assert stored.first == int(kc.greedy(logits)) and stored.seconds > 0
    assert torch.allclose(stored.logits, logits[0, -1], atol=1e-5, rtol=1e-5)
    assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(stored.kv, kc.cache_to_kv(cache)))


def test_side_by_side_runs_each_prefill_once(tiny, ragged, counted):
    prompts, lengths = ragged
    store = {}
    sv.serve_side_by_side(tiny, prompts, lengths, 3, prefills=store)
    keys = [sl.prompt_key(p) for p in prompts]
    assert sorted(counted) == sorted(keys) and set(store) == set(keys)
    counted.clear()
    sv.serve(tiny, prompts, lengths, 3, "continuous")                  # alone, without a store: one per admission
    assert sorted(counted) == sorted(keys)


def test_a_stored_prefill_gives_the_same_tokens(tiny, ragged):
    prompts, lengths = ragged
    store = {}
    both = sv.serve_side_by_side(tiny, prompts, lengths, 3, prefills=store)
    for policy, s in both.items():
        gen = sv.serving(tiny, prompts, lengths, 3, policy, prefills=dict(store))   # every prefill from the store
        try:
            while True:
                next(gen)
        except StopIteration as stop:
            again = stop.value
        alone = sv.serve(tiny, prompts, lengths, 3, policy)                       # every prefill run afresh
        assert s.outputs == again.outputs == alone.outputs and s.steps == again.steps == alone.steps
    # in the slot batch itself: the same rows, bit for bit
    a, b = sl.SlotBatch(tiny), sl.SlotBatch(tiny)
    for p in prompts[:4]:
        assert a.add(p) == b.add(p, store[sl.prompt_key(p)])
    assert all(torch.equal(x, y) for kx, ky in zip(a.kv, b.kv) for x, y in zip(kx, ky))
    assert torch.equal(a.step(), b.step()) and torch.equal(a.last_logits, b.last_logits)


def test_the_server_that_did_not_run_a_prefill_is_charged_its_time(tiny, ragged, monkeypatch):
    prompts, lengths = ragged
    real, pause = sl.prefill_alone, 0.05

    def slow(model, prompt_ids):          # a prefill that takes at least `pause` seconds, measured as usual
        t0 = time.perf_counter()
        out = real(model, prompt_ids)
        time.sleep(pause)
        return dataclasses.replace(out, seconds=time.perf_counter() - t0)

    monkeypatch.setattr(sl, "prefill_alone", slow)
    both = sv.serve_side_by_side(tiny, prompts, lengths, 3)
    # each server ran only some of the prefills, yet both clocks hold all of them
    assert all(s.makespan >= len(prompts) * pause for s in both.values())


def test_work_clock_charge():
    ticks = iter([0.0, 2.0, 3.0])
    c = sv.WorkClock(lambda: next(ticks))
    c.start()
    c.charge(5.0)
    assert c() == pytest.approx(7.0)
    c.stop()
    assert c.spent == pytest.approx(8.0)


def test_reusing_prefills_skips_the_model_only_inside_the_block(tiny, ragged):
    prompts, _ = ragged
    store = {sl.prompt_key(p): sl.prefill_alone(tiny, p) for p in prompts[:3]}
    calls = []
    hook = tiny.register_forward_hook(lambda *_: calls.append(1))
    try:
        with sl.reusing_prefills(store):
            b = sl.SlotBatch(tiny)
            firsts = [b.add(p) for p in prompts[:3]]
            assert calls == []
            b.add(prompts[3])                        # not stored: prefilled as usual
            assert len(calls) == 1
        assert sl.SlotBatch.reuse is None
        b.add(prompts[0])                            # outside the block: prefilled again
        assert len(calls) == 2
    finally:
        hook.remove()
    assert firsts == [s.first for s in store.values()]
    with pytest.raises(RuntimeError):
        with sl.reusing_prefills(store):
            raise RuntimeError
    assert sl.SlotBatch.reuse is None


def test_off_greedy_from_stored_prefills_agrees_with_the_full_pass(tiny, ragged):
    prompts, lengths = ragged
    solo = [alone(tiny, p, n) for p, n in zip(prompts, lengths)]
    store = {sl.prompt_key(p): sl.prefill_alone(tiny, p) for p in prompts}
    assert so.off_greedy(tiny, prompts, solo, lengths, prefills=store) == []
    swapped = [list(o) for o in solo]
    for i, k in ((2, 5), (5, 0), (8, 11)):        # the runner-up in place of the solo pick, first token included
        with torch.inference_mode():
            logits = tiny(torch.cat([prompts[i], torch.tensor([solo[i][:k]], dtype=torch.long)], 1)).logits[0, -1]
        swapped[i][k] = logits.topk(2).indices[1].item()
    full = so.off_greedy(tiny, prompts, swapped, lengths)
    stored = so.off_greedy(tiny, prompts, swapped, lengths, prefills=store)
    assert [f[:2] for f in full] == [s[:2] for s in stored] == [(2, 5), (5, 0), (8, 11)]
    assert [s[2] for s in stored] == pytest.approx([f[2] for f in full], rel=1e-4, abs=1e-5)
    # and the prompt is not run again: only reply tokens go through the model
    fed = []
    hook = tiny.register_forward_hook(lambda m, args, kwargs, out: fed.append(args[0].shape[1] if args else
                                                                               kwargs["input_ids"].shape[1]),
                                      with_kwargs=True)
    try:
        so.off_greedy(tiny, prompts, swapped, lengths, prefills=store)
    finally:
        hook.remove()
    assert sum(fed) == sum(n - 1 for n in lengths)


def test_a_sliding_window_prefill_is_not_continued(tmp_path):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    torch.manual_seed(0)
    cfg = Gemma3TextConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=4,
                           layer_types=["sliding_attention", "full_attention"], max_position_embeddings=256)
    model = Gemma3ForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(0)
    reply = torch.randint(0, 128, (6,), generator=g)
    for n in (2, 12):                            # within the window (continued), beyond it (a full pass)
        prompt = torch.randint(0, 128, (1, n), generator=g)
        full = so.solo_logits(model, prompt, reply)
        stored = so.solo_logits(model, prompt, reply, sl.prefill_alone(model, prompt))
        assert torch.allclose(full, stored, atol=1e-5, rtol=1e-5)
