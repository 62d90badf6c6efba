"""Distillation helpers: temperature, the student made from the teacher, the KD loss, deterministic training."""
import math

import pytest
import torch

from helpers import s08_drafts as drafts
from helpers import s09_distillation as D
from helpers.infra.model import decoder_layers
from helpers.s08_speculative import processed


def test_ratios_at_temperature_two_are_square_roots_of_ratios_at_one():
    z = torch.tensor([3.0, 2.7, 2.2, 1.0, -4.0], dtype=torch.float64)
    r1, r2 = D.top_to_third(processed(z, 1.0)), D.top_to_third(processed(z, 2.0))
    assert r2 == pytest.approx(math.sqrt(r1), rel=1e-12)
    assert r1 == pytest.approx(math.exp(3.0 - 2.2), rel=1e-12)


def test_full_logits_of_our_vocabulary_cost_about_197_kb_per_token():
    assert D.full_logits_bytes(49_152) == 196_608


def test_a_student_keeping_every_layer_is_the_teacher(tiny_llama):
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(0))
    student = drafts.student_from_teacher(tiny_llama, [0, 1])
    with torch.no_grad():
        assert torch.equal(student(ids).logits, tiny_llama(ids).logits)


def test_a_student_ties_its_head_to_its_embedding_as_the_teacher_does(tiny_llama):
    from helpers.infra.model import param_count
    student = drafts.student_from_teacher(tiny_llama, [1])
    tied = tiny_llama.get_output_embeddings().weight is tiny_llama.get_input_embeddings().weight
    assert (student.get_output_embeddings().weight is student.get_input_embeddings().weight) == tied
    layer = sum(p.numel() for p in decoder_layers(tiny_llama)[1][0].parameters())
    assert param_count(student) == param_count(tiny_llama) - layer


def test_the_teachers_pass_gives_the_first_layers_students_head_inputs(tiny_llama, second_model_dir):
    from transformers import AutoModelForCausalLM
    for teacher in (tiny_llama, AutoModelForCausalLM.from_pretrained(second_model_dir).eval()):
        student = drafts.student_from_teacher(teacher, [0])
        ids = torch.randint(0, 97, (3, 9), generator=torch.Generator().manual_seed(4))
        logits, h = D.teacher_pass(teacher, ids, student, batch=2)
        with torch.no_grad():
            assert torch.allclose(logits, teacher(ids).logits, atol=1e-5)
        assert torch.allclose(h, D.head_inputs(student, ids), atol=1e-5)
        top, h2 = D.teacher_pass(teacher, ids, student, k=4)
        assert torch.equal(top.indices, logits.topk(4, dim=-1).indices) and torch.allclose(h2, h, atol=1e-5)


def test_a_student_copies_the_kept_layers_and_renumbers_them(tiny_llama):
    student = drafts.student_from_teacher(tiny_llama, [1])
    _, t_layers = decoder_layers(tiny_llama)
    _, s_layers = decoder_layers(student)
    assert len(s_layers) == 1 and student.config.num_hidden_layers == 1
    for (n1, p1), (n2, p2) in zip(t_layers[1].named_parameters(), s_layers[0].named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2) and p1.data_ptr() != p2.data_ptr()   # a copy, not a view
    # the copy can be trained without touching the teacher
    assert D.every_kth(30, 5) == [0, 5, 10, 15, 20, 25]


def test_a_student_of_a_sliding_window_model_keeps_its_layer_types(second_model_dir):
    from transformers import AutoModelForCausalLM
    teacher = AutoModelForCausalLM.from_pretrained(second_model_dir).eval()
    keep = D.every_kth(teacher.config.num_hidden_layers, 2)
    student = drafts.student_from_teacher(teacher, keep)
    assert student.config.layer_types == [teacher.config.layer_types[i] for i in keep]
    with torch.no_grad():
        out = student(torch.tensor([[1, 2, 3, 4]])).logits
    assert out.shape[-1] == teacher.config.vocab_size


def test_a_zero_exit_adapter_changes_nothing_and_a_trained_one_does(tiny_llama):
    ids = torch.randint(0, 97, (1, 7), generator=torch.Generator().manual_seed(1))
    student = drafts.student_from_teacher(tiny_llama, [0])
    with torch.no_grad():
        before = student(ids).logits
        adapter = D.add_exit_adapter(student)
        assert torch.equal(student(ids).logits, before)
        adapter.proj.bias.fill_(0.1)
        h = D.head_inputs(student, ids)       # what reaches the head, before the adapter
        head = student.get_output_embeddings()
        assert torch.equal(torch.nn.functional.linear(h, head.weight), before)
        assert torch.equal(student(ids).logits, head(h))     # calling the head applies the adapter (its pre-hook)
        assert not torch.allclose(student(ids).logits, before)


def test_kd_loss_with_every_logit_stored_is_the_full_kl_times_t_squared():
    g = torch.Generator().manual_seed(0)
    t, s = torch.randn(2, 5, 11, generator=g), torch.randn(2, 5, 11, generator=g)
    full = D.Targets(*t.topk(11, dim=-1))
    for T in (1.0, 2.0):
        ref = torch.nn.functional.kl_div(torch.log_softmax(s / T, -1), torch.log_softmax(t / T, -1),
                                         log_target=True, reduction="none").sum(-1).mean() * T * T
        assert torch.allclose(D.kd_loss(s, full, T), ref, atol=1e-6)
    assert float(D.kd_loss(t, full, 2.0)) == pytest.approx(0.0, abs=1e-6)
    assert float(D.kd_loss(t, D.Targets(*t.topk(3, dim=-1)), 1.0)) > 0    # top-k: mass elsewhere is penalised


def test_evaluate_a_student_identical_to_the_teacher():
    t = torch.randn(1, 6, 13, generator=torch.Generator().manual_seed(2))
    ids = torch.randint(0, 13, (1, 6))
    r = D.evaluate(t, t, ids)
    assert r.agreement == 1.0 and r.kl == pytest.approx(0.0, abs=1e-6) and r.perplexity > 1


def test_training_is_deterministic_and_lowers_the_loss(tiny_llama):
    ids = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(3))
    targets, _ = D.teacher_pass(tiny_llama, ids, None, k=8)
    assert targets.values.shape == (2, 12, 8) and targets.nbytes == 2 * 12 * 8 * 8

    def run():
        student = drafts.student_from_teacher(tiny_llama, [0])
        adapter = D.add_exit_adapter(student)
        h = D.head_inputs(student, ids)
        head = student.get_output_embeddings()    # its pre-hook applies the adapter
        losses, _ = D.train(lambda step: D.kd_loss(head(h), targets, 2.0), adapter.parameters(), steps=6, lr=1e-2)
        return losses

    a, b = run(), run()
    assert a == b and a[-1] < a[0]


def test_bad_input_gets_one_sentence(tiny_llama):
    for bad in (lambda: processed(torch.zeros(3), 0.0), lambda: D.every_kth(30, 0),
                lambda: drafts.student_from_teacher(tiny_llama, [1, 0]), lambda: drafts.student_from_teacher(tiny_llama, [5])):
        with pytest.raises(ValueError) as e:
            bad()
        assert "\n" not in str(e.value) and str(e.value).endswith(".")


def test_a_held_reference_gives_exactly_what_evaluate_computes_from_the_teachers_logits():
    g = torch.Generator().manual_seed(4)
    teacher, ids = torch.randn(3, 9, 50, generator=g) * 4, torch.randint(0, 50, (3, 9), generator=g)
    ref = D.held_reference(teacher, ids)
    for _ in range(3):
        student = torch.randn(3, 9, 50, generator=g) * 3
        by_hand = D.HeldOut(
            float((torch.softmax(teacher, -1) * (torch.log_softmax(teacher, -1) - torch.log_softmax(student, -1)))
                  .sum(-1).mean()),
            math.exp(float(D.hard_loss(student, ids))),
            float((student.argmax(-1) == teacher.argmax(-1)).float().mean()))
        got = D.evaluate(student, ref)
        assert got == D.evaluate(student, teacher, ids) == D.evaluate(student, ref, ids)   # bit for bit
        assert got.perplexity == pytest.approx(by_hand.perplexity, rel=1e-6) and got.agreement == by_hand.agreement
        assert got.kl == pytest.approx(by_hand.kl, rel=1e-6)
    assert ref.perplexity == D.evaluate(teacher, teacher, ids).perplexity
    with pytest.raises(ValueError, match="ids differ"):
        D.evaluate(student, ref, ids.flip(0))


def test_a_student_shares_the_teachers_embedding_and_head_and_copies_only_its_layers(tiny_llama):
    student = drafts.student_from_teacher(tiny_llama, [1])
    shared = {n: p.data_ptr() for n, p in tiny_llama.named_parameters() if not n.startswith(decoder_layers(tiny_llama)[0])}
    assert shared and all(dict(student.named_parameters())[n].data_ptr() == ptr for n, ptr in shared.items())
    with torch.no_grad():                               # training the student's layer leaves the teacher alone
        before = decoder_layers(tiny_llama)[1][1].mlp.down_proj.weight.clone()
        decoder_layers(student)[1][0].mlp.down_proj.weight.add_(1.0)
        assert torch.equal(decoder_layers(tiny_llama)[1][1].mlp.down_proj.weight, before)


def test_the_teachers_pass_keeps_one_forwards_logits_within_the_budget():
    assert D.rows_per_batch(128, 49_152) == 8            # 25 MB a row: the default 8 rows fit in 256 MiB
    assert D.rows_per_batch(128, 262_144) == 2           # Gemma 3's vocabulary: 128 MiB a row
    assert D.rows_per_batch(4096, 262_144) == 1          # never fewer than one row
    assert D.rows_per_batch(128, 262_144, budget=2 ** 30) == 8


def test_evaluate_in_slices_is_bit_for_bit_evaluate_in_one_piece(monkeypatch):
    g = torch.Generator().manual_seed(5)
    teacher, student = torch.randn(2, 13, 40, generator=g) * 4, torch.randn(2, 13, 40, generator=g) * 3
    ids = torch.randint(0, 40, (2, 13), generator=g)
    whole = D.evaluate(student, teacher, ids)
    monkeypatch.setattr(D, "LOGITS_BUDGET", 16 * 40 * 3)     # three positions a slice: 5 slices a row
    assert len(D._slices(13, 40)) == 5
    assert D.evaluate(student, teacher, ids) == whole
    assert whole.perplexity == pytest.approx(math.exp(float(D.hard_loss(student, ids))), rel=1e-6)
    with pytest.raises(ValueError, match="same text"):
        D.evaluate(student[:, :5], D.held_reference(teacher, ids))


def test_the_perplexity_of_rows_is_section_7s_perplexity_pooled_over_the_rows():
    from helpers.s07_quality import perplexity_from_logits
    g = torch.Generator().manual_seed(6)
    logits, ids = torch.randn(3, 11, 30, generator=g) * 3, torch.randint(0, 30, (3, 11), generator=g)
    one = [perplexity_from_logits(logits[r:r + 1], ids[r:r + 1], n_bytes=10) for r in range(3)]
    assert D.perplexity_of_rows(logits[:1], ids[:1]) == one[0].perplexity
    pooled = math.exp(sum(p.nll for p in one) / 3)           # every row has the same number of tokens
    assert D.perplexity_of_rows(logits, ids) == pytest.approx(pooled, rel=1e-6)
    assert D.perplexity_of_rows(logits, ids) != pytest.approx(one[0].perplexity, rel=1e-3)


def test_favours_compares_as_printed_and_knows_which_way_is_better():
    assert D.favours(0.4142, 0.4138, 3, higher_is_better=True) == "tie"      # both print 41.4 %
    assert D.favours(0.42, 0.41, 3, higher_is_better=True) == "soft"
    assert D.favours(10.47, 16.34, 2) == "soft" and D.favours(16.34, 10.47, 2) == "hard"
    assert D.favours(101.6, 100.4, 0) == "hard" and D.favours(101.4, 100.6, 0) == "tie"
