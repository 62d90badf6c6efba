"""Section 8's predictions checked against what they predict: the rounds greedy speculation plays, estimated
from agreement along the target's text (:func:`greedy_rounds`), against the loop itself; α measured the way the
loop runs a draft; the held-out prediction; the costs (ideal kernel, steps); the race and transformers' loop."""
from __future__ import annotations

import copy

import pytest
import torch

from helpers import s01_kv_cache as kc
from helpers import s05_kernels as kernels
from helpers import s05_quantization as Q
from helpers import s07_quality as quality
from helpers import s08_drafts as D
from helpers import s08_speculative as S
from helpers.s02_roofline import weights_read_per_step

# --------------------------------------------------------------------------- rounds from agreement


def test_greedy_rounds_known_values():
    agrees = [1, 1, 0, 1, 1, 1, 1, 1, 1, 0]
    # γ = 3: [1 1 0] rejection at 2 (3 tokens); [1 1 1] then the bonus at 6 (4 tokens); [1 1 0] rejection at 9
    assert S.greedy_rounds(agrees, 3) == dict(accepted=7, rejected=2, rounds=3, tokens=10)
    assert S.greedy_rounds([1, 1, 1], 3) == dict(accepted=0, rejected=0, rounds=0, tokens=0)   # no round ends
    assert S.greedy_rounds([0, 0, 0], 2) == dict(accepted=0, rejected=3, rounds=3, tokens=3)


def _text_positions(model, prompt, n):
    """The target's own greedy text after ``prompt`` as section 7's Positions (one prompt, no padding)."""
    text = kc.generate_cached(model, prompt, n)
    seq = torch.cat([prompt, text], 1)
    return quality.Positions(seq, torch.ones_like(seq), prompt.shape[1])


@pytest.mark.parametrize("gamma", [2, 4])
def test_greedy_rounds_from_decoding_agreement_are_the_loops_rounds(tiny_llama, gamma):
    torch.manual_seed(1)
    prompt = torch.randint(0, 97, (1, 7))
    draft = D.early_exit_draft(tiny_llama, 1)
    _, stats = S.speculative_generate(tiny_llama, draft, prompt, 24, gamma)
    played = stats["accepted"] + stats["target_forwards"]            # every token the loop's rounds kept
    positions = _text_positions(tiny_llama, prompt, played + gamma + 1)
    ref = quality.next_token_logprobs(tiny_llama, positions)
    agrees = D.decoding_agreement(ref, draft, positions).per_position
    assert 0 < sum(agrees) < len(agrees)                               # both kinds of round occur
    assert S.greedy_rounds(agrees[:played], gamma) == dict(
        accepted=stats["accepted"], rejected=stats["rejected"], rounds=stats["target_forwards"], tokens=played)


def test_decoding_agreement_is_section_7s_for_a_draft_that_rounds_nothing_per_call(tiny_llama):
    prompt = torch.randint(0, 97, (1, 6), generator=torch.Generator().manual_seed(3))
    positions = _text_positions(tiny_llama, prompt, 16)
    ref = quality.next_token_logprobs(tiny_llama, positions)
    draft = D.early_exit_draft(tiny_llama, 1)
    stepwise = D.decoding_agreement(ref, draft, positions)
    at_once = quality.agreement(ref, draft.model, positions)
    assert stepwise.per_position == at_once.per_position and stepwise.positions == 16
    assert D.decoding_agreement(ref, D.ModelDraft(tiny_llama), positions).rate == 1.0   # the target itself


def test_a_restricted_heads_logprobs_in_one_forward_agree_as_it_decodes(tiny_llama):
    prompt = torch.randint(0, 97, (1, 6), generator=torch.Generator().manual_seed(8))
    positions = _text_positions(tiny_llama, prompt, 16)
    ref = quality.next_token_logprobs(tiny_llama, positions)
    draft = D.early_exit_draft(tiny_llama, 1, D.frequent_tokens(positions.sequences, 40, 97))
    at_once = quality.agreement(ref, D.draft_logprobs(draft, positions), positions)
    assert at_once.per_position == D.decoding_agreement(ref, draft, positions).per_position


def test_decoding_agreement_maps_a_restricted_head_and_refuses_other_positions(tiny_llama):
    prompt = torch.randint(0, 97, (1, 6), generator=torch.Generator().manual_seed(4))
    positions = _text_positions(tiny_llama, prompt, 12)
    ref = quality.next_token_logprobs(tiny_llama, positions)
    everything = torch.arange(97)                                      # a "restricted" head with every row
    assert D.decoding_agreement(ref, D.early_exit_draft(tiny_llama, 2, everything), positions).rate == 1.0
    with pytest.raises(ValueError):
        D.decoding_agreement(ref[:, :5], D.ModelDraft(tiny_llama), positions)


def test_held_out_prediction_fits_one_half_and_predicts_the_other():
    fit, test = [0, 1] * 6, [1, 1, 1, 0] * 3                           # prompts 1, 3 and 2, 4
    first, second = S.held_out_prediction([fit, test, fit, test], 3)
    a = S.greedy_rounds(fit, 3)
    b = S.greedy_rounds(test, 3)
    assert (first["estimated_on"], first["predicted_for"]) == ([1, 3], [2, 4])
    assert first["alpha"] == pytest.approx(a["accepted"] / (a["accepted"] + a["rejected"]))
    assert first["predicted"] == pytest.approx(S.expected_tokens(first["alpha"], 3))
    assert first["measured"] == pytest.approx(b["tokens"] / b["rounds"])
    assert second["measured"] == pytest.approx(a["tokens"] / a["rounds"])
    with pytest.raises(ValueError):
        S.held_out_prediction([fit], 3)


def test_predicted_reads_the_runs_alpha_and_prices_a_free_draft():
    out = S.predicted(dict(acceptance_rate=0.5), 2, 0.0, 2.0)
    assert out["tokens"] == pytest.approx(1.75)
    assert out["chapter"] == pytest.approx(1.75, rel=1e-5) and out["with_v"] == pytest.approx(0.875, rel=1e-5)
    assert S.predicted(dict(acceptance_rate=1.0), 3, 0.5, 1.0)["tokens"] < 4    # α capped below 1


# --------------------------------------------------------------------------- costs


def test_the_weight_only_kernel_holds_int8_per_rows_weights_exactly(tiny_llama):
    model = copy.deepcopy(tiny_llama)
    kernel = kernels.with_kernel(model, "int8 weight-only")
    per_row = next(s for s in Q.chapter_schemes() if s.name == "int8 per-row")
    with quality.applied(model, per_row):
        rounded = {n.removesuffix(".weight"): w.clone() for n, w in Q.projection_weights(model).items()}
    for name, layer in kernel.named_modules():
        if isinstance(layer, kernels.Int8WeightOnlyLinear):
            assert torch.equal(layer.codes.float() * layer.scales[:, None], rounded[name])


def test_ideal_cost_is_bytes_read_over_fp32_bytes(tiny_llama):
    proj = Q.projection_weights(tiny_llama)
    full, n = weights_read_per_step(tiny_llama), sum(w.numel() for w in proj.values())
    schemes = {s.name: s for s in Q.chapter_schemes()}
    assert D.ideal_cost(tiny_llama, schemes["int8 per-tensor"]) == pytest.approx(
        (full - 4 * n + n + 2 * len(proj)) / full)                     # 1 byte a weight, a 2-byte scale a matrix
    assert D.ideal_cost(tiny_llama, schemes["int4 per-row"]) < D.ideal_cost(tiny_llama, schemes["int8 per-row"]) < 1


def test_steps_in_turn_times_every_model_and_k(tiny_llama):
    prompt = torch.randint(0, 97, (1, 6), generator=torch.Generator().manual_seed(9))
    t = S.steps_in_turn({"a": tiny_llama, "b": D.early_exit_draft(tiny_llama, 1).model}, prompt, (1, 4), repeats=2)
    assert set(t) == {"a", "b"} and all(set(v) == {1, 4} and min(v.values()) > 0 for v in t.values())


def test_step_seconds_times_every_k_even_past_the_prompts_length_and_refuses_k_0(tiny_llama):
    prompt = torch.randint(0, 97, (1, 6), generator=torch.Generator().manual_seed(5))
    t = S.step_seconds(tiny_llama, prompt, [1, 3, 9], repeats=1, fastest=True)
    assert set(t) == {1, 3, 9} and all(s > 0 for s in t.values())
    for bad in ([0], [2.5], [True]):
        with pytest.raises(ValueError):
            S.step_seconds(tiny_llama, prompt, bad)


# --------------------------------------------------------------------------- the race, and transformers' loop


def test_the_race_times_every_draft_and_repeats_the_named_ones(tiny_llama):
    prompt = torch.randint(0, 97, (1, 20), generator=torch.Generator().manual_seed(6))
    prompt = torch.cat([prompt, prompt[:, :8]], 1)
    drafts = {"lookup": D.PromptLookupDraft(97), "exit": D.early_exit_draft(tiny_llama, 1)}
    seconds, stats, plain = D.race(tiny_llama, drafts, prompt, 12, 3, again=["lookup"], repeats=3)
    assert {k: len(v) for k, v in seconds.items()} == {D.PLAIN: 3, "lookup": 3, "exit": 1}
    assert set(stats) == {"lookup", "exit"}
    assert torch.equal(plain, kc.generate_cached(tiny_llama, prompt, 12))
    with pytest.raises(ValueError):
        D.race(tiny_llama, drafts, prompt, 12, 3, again=["nope"])


def test_transformers_assisted_runs_emit_our_greedy_tokens(tiny_llama):
    prompt = torch.randint(0, 97, (1, 10), generator=torch.Generator().manual_seed(7))
    plain = kc.generate_cached(tiny_llama, prompt, 8)
    runs = D.assisted_runs(tiny_llama, copy.deepcopy(tiny_llama), prompt, 8, 3, pad_token_id=0)
    assert list(runs) == [D.PLAIN, "assistant", "prompt lookup"]
    for seconds, tokens in runs.values():
        assert seconds > 0 and torch.equal(tokens[:, :8], plain)
    with pytest.raises(ValueError):
        D.assisted_runs(tiny_llama, tiny_llama, prompt, 8, 3, pad_token_id=0)
