import math

import pytest
import torch

from helpers import s07_batched as BT
from helpers import s07_battery as B
from helpers import s07_quality as QL
from helpers import s05_quantization as Q


def _positions(vocab=97, rows=3, width=6, n_new=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    seq = torch.randint(3, vocab, (rows, width + n_new), generator=g)
    mask = torch.ones_like(seq)
    mask[0, :2] = 0                                    # one left-padded row
    seq[0, :2] = 0
    return QL.Positions(seq, mask, width, ["a", "b", "c"])


def test_applied_quantizes_every_projection_and_restores_it_bit_for_bit(tiny_llama):
    before = {n: w.clone() for n, w in Q.projection_weights(tiny_llama).items()}
    scheme = Q.Scheme("int4 per-row", "absmax", 4, axis=-1)
    with QL.applied(tiny_llama, scheme):
        inside = Q.projection_weights(tiny_llama)
        assert all(torch.equal(inside[n], scheme.fake_quantize(w)) for n, w in before.items())
    after = Q.projection_weights(tiny_llama)
    assert all(torch.equal(after[n], w) for n, w in before.items())


def test_applied_restores_even_when_the_block_raises(tiny_llama):
    before = {n: w.clone() for n, w in Q.projection_weights(tiny_llama).items()}
    with pytest.raises(RuntimeError):
        with QL.applied(tiny_llama, Q.Scheme("int4", "absmax", 4)):
            raise RuntimeError("boom")
    assert all(torch.equal(Q.projection_weights(tiny_llama)[n], w) for n, w in before.items())


def test_perplexity_matches_transformers_loss_and_its_definition(tiny_llama):
    ids = torch.randint(0, 97, (1, 40), generator=torch.Generator().manual_seed(1))
    p = QL.perplexity(tiny_llama, ids, n_bytes=100)
    assert abs(p.nll - p.hf_loss) < 1e-5
    assert abs(p.perplexity - math.exp(p.nll)) < 1e-9 and p.tokens == 39
    assert abs(p.bits_per_byte - p.nll * 39 / math.log(2) / 100) < 1e-9
    lo, hi = p.interval()
    assert lo < p.perplexity < hi


def test_a_random_model_has_perplexity_near_its_vocabulary_size(tiny_llama):
    ids = torch.randint(0, 97, (1, 200), generator=torch.Generator().manual_seed(2))
    p = QL.perplexity(tiny_llama, ids, n_bytes=200)
    assert 50 < p.perplexity < 200


def test_perplexity_refuses_a_span_too_short():
    with pytest.raises(ValueError, match="at least 2"):
        QL.perplexity(None, torch.tensor([[5]]), 1)


def test_a_model_agrees_with_itself_everywhere_with_zero_kl(tiny_llama):
    pos = _positions()
    a = QL.agreement(tiny_llama, tiny_llama, pos)
    assert a.matches == a.positions == 3 * 8 and a.rate == 1.0 and a.mean_kl < 1e-6
    assert a.same_top_rate == 1.0 and len(a.per_position) == 24


def test_agreement_from_precomputed_logprobs_equals_agreement_from_the_model(tiny_llama):
    pos = _positions(seed=3)
    ref = QL.next_token_logprobs(tiny_llama, pos)
    with QL.applied(tiny_llama, Q.Scheme("int4 per-tensor", "absmax", 4)):
        a1 = QL.agreement(ref, tiny_llama, pos)
    import copy
    quantized = copy.deepcopy(tiny_llama)
    with torch.no_grad():
        for w in Q.projection_weights(quantized).values():
            w.copy_(Q.Scheme("x", "absmax", 4).fake_quantize(w))
    a2 = QL.agreement(tiny_llama, quantized, pos)
    assert a1 == a2 and a1.mean_kl > 0
    with QL.applied(tiny_llama, Q.Scheme("int4 per-tensor", "absmax", 4)):
        test = QL.next_token_logprobs(tiny_llama, pos)
    assert QL.agreement(ref, test, pos) == a1                       # both sides as log-probs: no pass at all
    assert QL.agreement(ref, ref, pos) == QL.agreement(tiny_llama, tiny_llama, pos)


def test_only_full_attention_models_share_an_opening(tiny_llama, second_model_dir):
    from transformers import AutoModelForCausalLM
    sliding = AutoModelForCausalLM.from_pretrained(second_model_dir).eval()
    assert BT.can_share_prefix(tiny_llama) and not BT.can_share_prefix(sliding)
    from helpers import s05_kernels as K
    assert not BT.can_share_prefix(K.with_kernel(tiny_llama, "int8 dynamic (torch.ao)"))   # batch-wide scales
    assert BT.can_share_prefix(K.with_kernel(tiny_llama, "int8 weight-only"))
    ids, mask, shared = BT.prefix_padded([torch.tensor([[1, 2, 3]]), torch.tensor([[1, 2, 4, 5]])], pad_id=0)
    with pytest.raises(ValueError, match="sliding-window"):
        B.greedy_with_penalties(sliding, ids, mask, (1.0,), n_new=2, shared=shared)


def test_teacher_forcing_with_a_shared_opening_computed_once_gives_the_same_logprobs(tiny_llama):
    g = torch.Generator().manual_seed(8)
    head = torch.randint(3, 97, (1, 5), generator=g)
    prompts = [torch.cat([head, torch.randint(3, 97, (1, n), generator=g)], 1) for n in (3, 1, 6)]
    ids, mask = BT.left_padded(prompts, pad_id=0)
    gen = torch.randint(3, 97, (3, 7), generator=g)
    pos = QL.Positions(torch.cat([ids, gen], 1), torch.cat([mask, torch.ones_like(gen)], 1), ids.shape[1])
    got = QL.next_token_logprobs(tiny_llama, pos)
    for i, p in enumerate(prompts):       # each row alone, unpadded
        alone = torch.log_softmax(tiny_llama(torch.cat([p, gen[i:i + 1]], 1)).logits[0, p.shape[1] - 1:-1], -1)
        assert torch.allclose(got[i], alone, atol=1e-5)


def test_agreement_counts_only_generated_positions_and_kl_is_nonnegative(tiny_llama):
    pos = _positions(seed=4)
    ref = QL.next_token_logprobs(tiny_llama, pos)
    assert ref.shape == (3, 8, 97)
    noisy = ref + 0.5 * torch.randn(ref.shape, generator=torch.Generator().manual_seed(0))
    noisy = torch.log_softmax(noisy, -1)
    same = (ref.argmax(-1) == noisy.argmax(-1)).sum()

    class Fixed(torch.nn.Module):       # a "model" whose teacher-forced log-probs are `noisy`
        def forward(self, ids, attention_mask=None, position_ids=None):
            full = torch.zeros(ids.shape[0], ids.shape[1], 97)
            full[:, pos.prompt_width - 1:-1] = noisy
            return type("Out", (), {"logits": full})()

    a = QL.agreement(ref, Fixed(), pos)
    assert a.matches == int(same) and a.mean_kl > 0
    with pytest.raises(ValueError, match="do not match"):
        QL.agreement(ref[:, :4], Fixed(), pos)


def test_wilson_interval_known_values_and_properties():
    lo, hi = QL.wilson(142, 144)
    assert abs(lo - 0.9507) < 1e-3 and abs(hi - 0.9962) < 1e-3
    lo, hi = QL.wilson(0, 16)
    assert lo == 0.0 and 0.19 < hi < 0.21
    assert QL.wilson(8, 16)[1] - QL.wilson(8, 16)[0] > QL.wilson(72, 144)[1] - QL.wilson(72, 144)[0]
    with pytest.raises(ValueError):
        QL.wilson(5, 4)


def test_answers_are_matched_as_whole_words_ignoring_case():
    assert B.is_correct("The capital of France is Paris.", ["Paris"])
    assert B.is_correct("A week has 7 days", ["seven", "7"])
    assert not B.is_correct("It boils at 1000 degrees", ["100"])
    assert not B.is_correct("Parisian food", ["Paris"])
    assert B.is_correct("painted by Leonardo da Vinci", ["da Vinci"])


def test_the_battery_file_has_sixteen_questions_with_answers():
    b = B.load_battery()
    assert len(b) == 16 and all(q["answers"] for q in b)


def test_left_padding_puts_every_prompt_at_the_right_edge():
    ids, mask = BT.left_padded([torch.tensor([[5, 6, 7]]), torch.tensor([[8]])], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]


@pytest.mark.parametrize("penalty", [1.0, 1.3])
def test_batched_penalty_decoding_equals_transformers_generate(tiny_llama, penalty):
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, 97, (1, n), generator=g) for n in (5, 3, 7)]
    ids, mask = BT.left_padded(prompts, pad_id=0)
    ours = B.greedy_with_penalties(tiny_llama, ids, mask, (1.0, penalty), n_new=6)
    ref = tiny_llama.generate(ids, attention_mask=mask, max_new_tokens=6, min_new_tokens=6, do_sample=False,
                              repetition_penalty=penalty, pad_token_id=0, eos_token_id=None)
    assert torch.equal(ours[3:], ref[:, ids.shape[1]:])
    assert ours.shape == (6, 6)


def test_a_shared_prefix_is_found_and_leaves_every_prompt_a_token_of_its_own():
    a, b, c = torch.tensor([[1, 2, 3, 4]]), torch.tensor([[1, 2, 3, 9, 9]]), torch.tensor([[1, 2]])
    assert BT.shared_prefix_length([a, b]) == 3
    assert BT.shared_prefix_length([a, b, c]) == 1             # c keeps its last token
    assert BT.shared_prefix_length([a, torch.tensor([[7, 2]])]) == 0
    ids, mask, shared = BT.prefix_padded([a, b], pad_id=0)
    assert shared == 3 and ids.tolist() == [[1, 2, 3, 0, 4], [1, 2, 3, 9, 9]]
    assert mask.tolist() == [[1, 1, 1, 0, 1], [1, 1, 1, 1, 1]]


@pytest.mark.parametrize("penalty", [1.0, 1.3])
def test_decoding_with_the_shared_prefix_computed_once_equals_each_prompt_alone(tiny_llama, penalty):
    g = torch.Generator().manual_seed(6)
    head = torch.randint(3, 97, (1, 6), generator=g)
    prompts = [torch.cat([head, torch.randint(3, 97, (1, n), generator=g)], 1) for n in (4, 1, 3)]
    ids, mask, shared = BT.prefix_padded(prompts, pad_id=0)
    assert shared == 6
    ours = B.greedy_with_penalties(tiny_llama, ids, mask, (1.0, penalty), n_new=6, shared=shared)
    assert torch.equal(ours, B.greedy_with_penalties(tiny_llama, ids, mask, (1.0, penalty), n_new=6))
    for i, p in enumerate(prompts):       # alone, unpadded; the penalty also sees the batch's padding tokens
        seen_pad = bool((mask[i] == 0).any())
        alone = tiny_llama.generate(p, max_new_tokens=6, min_new_tokens=6, do_sample=False, repetition_penalty=1.0,
                                    pad_token_id=0, eos_token_id=None)
        assert torch.equal(ours[i], alone[0, p.shape[1]:])
        if not seen_pad:
            alone = tiny_llama.generate(p, max_new_tokens=6, min_new_tokens=6, do_sample=False,
                                        repetition_penalty=penalty, pad_token_id=0, eos_token_id=None)
            assert torch.equal(ours[3 + i], alone[0, p.shape[1]:])
    with pytest.raises(ValueError, match="prefix_padded"):
        B.greedy_with_penalties(tiny_llama, *BT.left_padded(prompts, 0), (1.0,), n_new=2, shared=6)


def test_perplexity_without_the_cross_check_is_the_same_number(tiny_llama):
    ids = torch.randint(0, 97, (1, 40), generator=torch.Generator().manual_seed(7))
    a, b = QL.perplexity(tiny_llama, ids, 100), QL.perplexity(tiny_llama, ids, 100, cross_check=False)
    assert abs(a.nll - b.nll) < 1e-6 and math.isnan(b.hf_loss)
    logp = torch.log_softmax(tiny_llama(ids).logits[0, :-1], -1)
    assert torch.allclose(QL.token_nlls(tiny_llama(ids).logits, ids), -logp.gather(1, ids[0, 1:, None])[:, 0],
                          atol=1e-5)


def test_penalize_divides_positive_and_multiplies_negative_scores():
    logits = torch.tensor([[2.0, -2.0, 1.0]])
    out = B.penalize(logits, torch.tensor([[0, 1]]), torch.tensor([2.0]))
    assert out.tolist() == [[1.0, -4.0, 1.0]]


def test_student_schemes_and_their_one_sentence_errors(tiny_llama):
    assert QL.student_scheme(4, 64).group_size == 64
    assert QL.student_scheme(8, "row").axis == -1
    with pytest.raises(ValueError, match="bits"):
        QL.student_scheme(9, "row")
    with pytest.raises(ValueError, match="does not divide"):
        QL.student_scheme(4, 100, tiny_llama)
    with pytest.raises(ValueError, match="group size"):
        QL.student_scheme(4, "column")


def test_schemes_that_round_alike_are_the_same_whatever_their_names():
    by_name = {QL.scheme_name(s): s for s in QL.table_schemes()}
    assert QL.same_weights(QL.student_scheme(4, 128), by_name["int4 group-128"])
    assert QL.same_weights(Q.Scheme("int8 weights", "absmax", 8, axis=-1), by_name["int8 per-row"])
    assert not QL.same_weights(by_name["int8 per-row"], by_name["int8 per-tensor"])
    assert QL.same_weights(None, None) and not QL.same_weights(None, by_name["int8 per-row"])


def test_the_table_has_the_reference_and_six_schemes():
    names = [QL.scheme_name(s) for s in QL.table_schemes()]
    assert names == ["reference", "int8 per-tensor", "int8 per-row", "int4 per-tensor", "int4 per-row",
                     "int4 group-128", "NF4 block-64"]


def test_weight_only_kernels_compute_exactly_their_fake_quantized_schemes():
    from helpers import s05_kernels as K
    torch.manual_seed(0)
    lin = torch.nn.Linear(128, 96, bias=True)
    x = torch.randn(3, 128)
    cases = {K.Int8WeightOnlyLinear(lin): Q.Scheme("int8 per-row", "absmax", 8, axis=-1),
             K.Int4WeightOnlyLinear(lin, 64): Q.Scheme("int4 g64", "asymmetric", 4, axis=-1, group_size=64)}
    for kernel, scheme in cases.items():
        expected = x @ scheme.fake_quantize(lin.weight.detach()).T + lin.bias.detach()
        got = kernel(x)
        assert (got - expected).abs().max() < 1e-4 * expected.abs().max()


def test_int8_weight_only_reads_a_prompt_with_one_matmul_and_gets_the_kernels_answer():
    from helpers import s05_kernels as K
    torch.manual_seed(1)
    lin = torch.nn.Linear(128, 96, bias=False)
    kernel = K.Int8WeightOnlyLinear(lin)
    prompt = torch.randn(1, K.PREFILL_ROWS + 4, 128)          # more rows than a decode step: the prefill path
    row_by_row = torch.cat([kernel(prompt[:, i:i + 1]) for i in range(prompt.shape[1])], dim=1)
    together = kernel(prompt)
    assert (together - row_by_row).abs().max() < 1e-5 * row_by_row.abs().max()
    expected = prompt @ Q.Scheme("int8 per-row", "absmax", 8, axis=-1).fake_quantize(lin.weight.detach()).T
    assert (together - expected).abs().max() < 1e-5 * expected.abs().max()


def test_with_kernel_replaces_only_the_projections_and_counts_fewer_bytes(tiny_llama):
    from helpers import s05_kernels as K
    fp32 = K.linear_bytes(tiny_llama)
    q8 = K.with_kernel(tiny_llama, "int8 weight-only")
    assert isinstance(q8.model.layers[0].mlp.down_proj, K.Int8WeightOnlyLinear)
    assert isinstance(q8.lm_head, torch.nn.Linear)
    assert K.linear_bytes(q8) < fp32 / 3
    ids = torch.randint(0, 97, (1, 5))
    assert q8(ids).logits.shape == tiny_llama(ids).logits.shape
    with pytest.raises(ValueError, match="kernel must be one of"):
        K.with_kernel(tiny_llama, "int3")


def test_building_a_kernel_copy_leaves_the_model_as_it_was(tiny_llama):
    from helpers import s05_kernels as K
    before = {n: p.clone() for n, p in tiny_llama.named_parameters()}
    ids = torch.randint(0, 97, (1, 6), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        ref = tiny_llama(ids).logits
        for k in K.KERNELS[1:]:
            m = K.with_kernel(tiny_llama, k)
            assert m(ids).logits.shape == ref.shape
            assert m.get_input_embeddings().weight.data_ptr() != tiny_llama.get_input_embeddings().weight.data_ptr()
        assert all(torch.equal(p, before[n]) for n, p in tiny_llama.named_parameters())
        assert torch.equal(tiny_llama(ids).logits, ref)
        assert isinstance(tiny_llama.model.layers[0].mlp.down_proj, torch.nn.Linear)


def test_applied_with_the_callers_originals_equals_applied_without_them(tiny_llama):
    W = Q.projection_weights(tiny_llama)
    originals = {n: w.clone() for n, w in W.items()}
    ids = torch.randint(0, 97, (1, 20), generator=torch.Generator().manual_seed(5))
    for scheme in (Q.Scheme("int4 per-row", "absmax", 4, axis=-1), Q.Scheme("NF4", "nf4", 4, group_size=64)):
        with QL.applied(tiny_llama, scheme):
            plain = tiny_llama(ids).logits
        with QL.applied(tiny_llama, scheme, originals=originals):
            assert all(torch.equal(W[n], scheme.fake_quantize(w)) for n, w in originals.items())
            assert torch.equal(tiny_llama(ids).logits, plain)
        assert all(torch.equal(W[n], w) for n, w in originals.items())
    with QL.applied(tiny_llama, None, originals=originals):      # the reference: nothing changes
        assert all(torch.equal(W[n], w) for n, w in originals.items())


def test_applied_with_originals_still_notices_a_restore_that_is_not_exact(tiny_llama):
    originals = {n: w.clone() for n, w in Q.projection_weights(tiny_llama).items()}
    layer = tiny_llama.model.layers[0].self_attn.q_proj
    kept = layer.weight
    try:
        with pytest.raises(AssertionError, match="not exact"):
            with QL.applied(tiny_llama, Q.Scheme("int8", "absmax", 8), originals=originals):
                layer.weight = torch.nn.Parameter(kept.detach().clone())   # a new tensor the restore cannot reach
    finally:
        layer.weight = kept                      # leave the shared fixture as it was
    assert all(torch.equal(Q.projection_weights(tiny_llama)[n], w) for n, w in originals.items())


def test_perplexity_from_logits_is_perplexity_without_its_forward_pass(tiny_llama):
    ids = torch.randint(0, 97, (1, 50), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        logits = tiny_llama(ids, use_cache=False).logits
    p = QL.perplexity(tiny_llama, ids, 120)
    assert QL.perplexity_from_logits(logits, ids, 120, p.hf_loss) == p
    q = QL.perplexity_from_logits(logits, ids, 120)
    assert math.isnan(q.hf_loss) and (q.nll, q.nll_se, q.bits_per_byte) == (p.nll, p.nll_se, p.bits_per_byte)
    with pytest.raises(ValueError, match="logits of these ids"):
        QL.perplexity_from_logits(logits[:, :-1], ids, 120)
    with pytest.raises(ValueError, match="at least 2"):
        QL.perplexity_from_logits(logits[:, :1], ids[:, :1], 120)
    with pytest.raises(ValueError, match="n_bytes"):
        QL.perplexity_from_logits(logits, ids, 0)


def test_token_nlls_in_row_chunks_are_bit_for_bit_the_whole_log_sum_exp():
    g = torch.Generator().manual_seed(1)
    logits, ids = torch.randn(1, 300, 1000, generator=g) * 4, torch.randint(0, 1000, (1, 300), generator=g)
    z = logits[0, :-1]
    whole = torch.logsumexp(z, dim=-1) - z.gather(1, ids[0, 1:, None])[:, 0]
    assert torch.equal(QL.token_nlls(logits, ids), whole)


@pytest.mark.parametrize("vocab,scale", [(97, 5.0), (49_152, 20.0), (262_144, 40.0)])
def test_the_nll_tolerance_covers_float32_round_off_and_not_a_real_mistake(vocab, scale):
    # float32 computations of the same mean NLL, three ways, against the float64 truth, on a vocabulary as large as
    # Gemma 3's; a label shifted by one position is a real mistake and must fall far outside
    gen = torch.Generator().manual_seed(vocab)
    logits = scale * torch.randn(1, 33, vocab, generator=gen)
    ids = torch.randint(vocab, (1, 33), generator=gen)
    tol = QL.nll_tolerance(logits)
    truth = float(QL.token_nlls(logits.double(), ids).mean())
    ours = float(QL.token_nlls(logits, ids).mean())
    by_log_softmax = float(-torch.log_softmax(logits[0, :-1], -1).gather(1, ids[0, 1:, None]).mean())
    by_cross_entropy = float(torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:]))
    for value in (ours, by_log_softmax, by_cross_entropy):
        assert abs(value - truth) < tol / 2                  # two of them may differ by up to twice this
    shifted = float(QL.token_nlls(logits, torch.roll(ids, 1, dims=1)).mean())
    assert abs(shifted - truth) > 100 * tol


def test_perplexity_keeps_each_tokens_nll_and_its_tolerance(tiny_llama):
    ids = torch.randint(0, 97, (1, 40), generator=torch.Generator().manual_seed(3))
    p = QL.perplexity(tiny_llama, ids, 100)
    assert p.per_token.shape == (39,) and p.per_token.mean().item() == pytest.approx(p.nll)
    assert abs(p.nll - p.hf_loss) < p.tolerance


def test_a_paired_difference_sees_a_small_shift_that_unpaired_intervals_cannot():
    gen = torch.Generator().manual_seed(0)
    hard = 3 * torch.rand(1024, generator=gen)                       # shared difficulty: most of the spread
    a = hard + 0.02 * torch.randn(1024, generator=gen)
    b = hard + 0.05 + 0.02 * torch.randn(1024, generator=gen)        # b is worse by 0.05 on every token
    d = QL.paired_difference(b, a)
    assert d.separates and d.low < 0.05 < d.high and d.mean == pytest.approx(0.05, abs=0.005)
    se = float(hard.std()) / math.sqrt(1024)                         # each mean alone: about 0.027 wide
    assert 1.96 * 2 * se > 0.05                                      # so their unpaired intervals overlap
    same = QL.paired_difference(a, hard + 0.02 * torch.randn(1024, generator=gen))
    assert not same.separates
    with pytest.raises(ValueError, match="same tokens"):
        QL.paired_difference(a, b[:-1])
