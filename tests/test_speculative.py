"""Section 8: the speculative-decoding arithmetic, the exactness of the acceptance rule, and the loop."""
import pytest
import torch

from helpers import s08_drafts as D
from helpers import s01_kv_cache as kc
from helpers import s08_speculative as S
from helpers.infra import chapter


# --------------------------------------------------------------------------- arithmetic


def test_the_chapters_bold_entry_pays_five_passes_and_keeps_1_4_tokens():
    # at alpha 0.30 with c = 1/5: gamma = 4 draft tokens (four fifths of a pass) plus one verification
    bold = chapter.S8_BOLD
    gamma = bold["passes"] - 1
    assert S.round_cost(gamma, bold["c"]) == pytest.approx(1.8)
    assert S.expected_tokens(bold["alpha"], gamma) == pytest.approx(1.4251, abs=1e-4)
    assert round(S.expected_tokens(bold["alpha"], gamma), 1) == bold["tokens"]


def test_the_chapters_gamma_8_speedups_at_c_0_1():
    g8 = chapter.S8_GAMMA8
    for alpha, quoted in g8["speedup"].items():
        assert round(S.speedup(alpha, g8["gamma"], g8["c"]), 2) == quoted


def test_expected_tokens_is_the_geometric_sum():
    for a in (0.0, 0.3, 0.77):
        for g in (1, 3, 8):
            assert S.expected_tokens(a, g) == pytest.approx(sum(a ** i for i in range(g + 1)))


@pytest.mark.parametrize("alpha,gamma,c", [(1.0, 4, 0.1), (-0.1, 4, 0.1), (0.5, 0, 0.1), (0.5, 2.5, 0.1),
                                           (0.5, 4, 0.0), (0.5, 4, -1.0)])
def test_bad_alpha_gamma_or_c_raise_one_sentence(alpha, gamma, c):
    with pytest.raises(ValueError):
        S.speedup(alpha, gamma, c)


# --------------------------------------------------------------------------- exactness of the rule


def _random_pair(k, gen):
    p = torch.softmax(torch.randn(k, generator=gen, dtype=torch.float64) * 2, 0)
    q = torch.softmax(torch.randn(k, generator=gen, dtype=torch.float64) * 2, 0)
    return p, q


def test_accepted_mass_plus_residual_is_exactly_the_target_on_many_random_pairs():
    gen = torch.Generator().manual_seed(0)
    for k in (2, 5, 50, 1000):
        for _ in range(50):
            p, q = _random_pair(k, gen)
            assert torch.allclose(S.emitted_distribution(p, q), p, atol=1e-12)


def test_identical_draft_and_target_always_accept():
    p = torch.tensor([0.2, 0.5, 0.3])
    gen = torch.Generator().manual_seed(1)
    assert all(S.accept_token(p, p, x, gen)[0] for x in (0, 1, 2) for _ in range(50))


@pytest.mark.parametrize("k", [2, 6, 20])
def test_emitted_tokens_follow_the_target_and_always_accept_fails(k):
    gen = torch.Generator().manual_seed(k)
    p, q = _random_pair(k, gen)
    n = 20_000
    counts = torch.bincount(S.sample_emitted(p, q, n, gen), minlength=k).double()
    bound = S.tv_threshold(n, k)
    assert S.total_variation(p, counts) < bound
    bad = torch.bincount(S.sample_emitted(p, q, n, gen, always_accept=True), minlength=k).double()
    assert S.total_variation(p, bad) > bound, "the negative control must be caught by the same test"


def test_an_argmax_draft_needs_a_one_hot_q():
    # the public bug: propose the argmax but judge it with the full softmax q -> not the target
    gen = torch.Generator().manual_seed(3)
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
    n = 20_000
    wrong = torch.tensor([S.accept_token(p, q, 0, gen)[1] for _ in range(n)])
    one_hot = torch.tensor([1.0, 0, 0], dtype=torch.float64)
    right = torch.tensor([S.accept_token(p, one_hot, 0, gen)[1] for _ in range(n)])
    bound = S.tv_threshold(n, 3)
    assert S.total_variation(p, torch.bincount(wrong, minlength=3).double()) > bound
    assert S.total_variation(p, torch.bincount(right, minlength=3).double()) < bound


def test_processed_distribution_keeps_only_top_k():
    probs = S.processed(torch.tensor([3.0, 1.0, 2.0, 0.0]), temperature=0.5, top_k=2)
    assert probs[1] == 0 and probs[3] == 0 and probs.sum().item() == pytest.approx(1.0)
    with pytest.raises(ValueError):
        S.processed(torch.zeros(3), temperature=0.0)


@pytest.mark.parametrize("top_k", [0, -3, 2.5, True])
def test_a_top_k_that_is_not_a_positive_whole_number_is_one_sentence(top_k):
    with pytest.raises(ValueError, match="top_k"):
        S.processed(torch.zeros(5), top_k=top_k)


def test_nan_logits_or_distributions_are_refused_not_silently_rejected():
    with pytest.raises(ValueError, match="NaN"):
        S.processed(torch.tensor([1.0, float("nan"), 0.0]))
    p, q = torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.2, 0.3, 0.5])
    for bad_p, bad_q in [(torch.tensor([0.5, float("nan"), 0.5]), q), (p, torch.tensor([float("nan"), 0.5, 0.5])),
                         (torch.tensor([0.7, 0.7, -0.4]), q), (torch.tensor([0.5, 0.6, 0.0]), q)]:
        with pytest.raises(ValueError, match="probability distribution"):
            S.accept_token(bad_p, bad_q, 1)
    with pytest.raises(ValueError, match="same vocabulary"):
        S.accept_token(p, torch.tensor([0.5, 0.5]), 1)


def test_alpha_is_estimated_per_judged_token():
    # three rounds of gamma = 4: all four kept; 1 kept then a rejection; a rejection at once.
    # 12 proposed, 5 accepted, 2 rejections: the 5 proposals after a rejection are not failures
    assert S.acceptance_rate(5, 2) == pytest.approx(5 / 7)
    assert S.acceptance_rate(4, 0) == 1.0
    assert S.acceptance_rate(0, 0) != S.acceptance_rate(0, 0)          # nothing judged: NaN, not 0 or 1


def test_the_kept_share_of_sampled_rounds_is_the_overlap_of_p_and_q():
    gen = torch.Generator().manual_seed(3)
    p, q = _random_pair(6, gen)
    n = 20_000
    tokens, kept = S.sample_rounds(p, q, n, gen)
    overlap = float(torch.minimum(p, q).sum())                     # P(accept) = sum over x of min(p(x), q(x))
    assert abs(kept.double().mean().item() - overlap) < 5 * (overlap * (1 - overlap) / n) ** 0.5
    accepted_part = torch.bincount(tokens[kept], minlength=6).double() / n
    assert (accepted_part - torch.minimum(p, q)).abs().max() < 0.02   # the accepted draws alone are min(p, q)


# --------------------------------------------------------------------------- the loop


def _plain(model, prompt, n):
    return kc.generate_cached(model, prompt, n)


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_greedy_speculation_equals_plain_greedy_with_a_model_draft(tiny_llama, gamma):
    torch.manual_seed(0)
    prompt = torch.randint(0, 97, (1, 9))
    draft = D.early_exit_draft(tiny_llama, 1)
    tokens, stats = S.speculative_generate(tiny_llama, draft, prompt, 20, gamma)
    assert torch.equal(tokens, _plain(tiny_llama, prompt, 20))
    assert stats["target_forwards"] <= 20 and stats["proposed"] >= stats["accepted"]
    # a round ends at its first rejection or after gamma acceptances; every token emitted is an accepted
    # proposal or the target's own token, one per round
    assert stats["rejected"] <= stats["target_forwards"]
    assert stats["accepted"] + stats["target_forwards"] == round(stats["tokens_per_forward"] * stats["target_forwards"])
    assert stats["acceptance_rate"] == pytest.approx(stats["accepted"] / (stats["accepted"] + stats["rejected"]))
    assert stats["acceptance_rate"] >= stats["accepted_share"]


def test_the_target_as_its_own_draft_accepts_everything(tiny_llama):
    prompt = torch.randint(0, 97, (1, 5), generator=torch.Generator().manual_seed(2))
    tokens, stats = S.speculative_generate(tiny_llama, D.ModelDraft(tiny_llama), prompt, 17, 4)
    assert torch.equal(tokens, _plain(tiny_llama, prompt, 17))
    assert stats["acceptance_rate"] == 1.0 and stats["target_forwards"] == 4


def test_restricted_head_and_prompt_lookup_stay_exact(tiny_llama):
    prompt = torch.randint(0, 97, (1, 30), generator=torch.Generator().manual_seed(4))
    prompt = torch.cat([prompt, prompt[:, :12]], 1)            # something to copy
    plain = _plain(tiny_llama, prompt, 24)
    keep = D.frequent_tokens(prompt, 20, 97)
    for draft in (D.early_exit_draft(tiny_llama, 1, keep), D.PromptLookupDraft(97)):
        tokens, _ = S.speculative_generate(tiny_llama, draft, prompt, 24, 4)
        assert torch.equal(tokens, plain)


def test_prompt_lookup_copies_what_followed_the_last_ngram():
    d = D.PromptLookupDraft(50, max_ngram=2)
    d.start(torch.tensor([[1, 2, 3, 4, 5, 9, 2, 3]]))
    assert d.propose(3)[0] == [4, 5, 9]
    d.commit([7])
    assert d.propose(3)[0] == []


def test_sampled_speculation_emits_the_target_distribution(tiny_llama):
    # one new token per run: its distribution must be the target's processed next-token distribution
    prompt = torch.randint(0, 97, (1, 6), generator=torch.Generator().manual_seed(5))
    # (the rule's statistics are tested above with 2·10⁴ draws; this checks the loop wires p and q right)
    p = S.processed(kc.forward(tiny_llama, prompt)[0][0, -1], temperature=1.0, top_k=4)
    draft = D.ModelDraft(D.early_exit_draft(tiny_llama, 1).model)
    gen = torch.Generator().manual_seed(6)
    n = 2000
    out = [int(S.speculative_generate(tiny_llama, draft, prompt, 1, 2, sample=True, top_k=4, generator=gen)[0][0, 0])
           for _ in range(n)]
    counts = torch.bincount(torch.tensor(out), minlength=97).double()
    assert S.total_variation(p, counts) < S.tv_threshold(n, 4)


def test_bad_loop_inputs_raise(tiny_llama):
    draft = D.ModelDraft(tiny_llama)
    with pytest.raises(ValueError):
        S.speculative_generate(tiny_llama, draft, torch.zeros(2, 3, dtype=torch.long), 4, 2)
    with pytest.raises(ValueError):
        S.speculative_generate(tiny_llama, draft, torch.zeros(1, 3, dtype=torch.long), 0, 2)
    for not_a_draft in ("nope", tiny_llama):         # a bare model must be wrapped in a ModelDraft
        with pytest.raises(ValueError, match="ModelDraft"):
            S.speculative_generate(tiny_llama, not_a_draft, torch.zeros(1, 3, dtype=torch.long), 4, 2)


def test_greedy_speculation_stays_exact_past_a_sliding_window(second_model_dir):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(second_model_dir, dtype=torch.float32).eval()
    prompt = torch.randint(0, model.config.vocab_size, (1, 40), generator=torch.Generator().manual_seed(0))
    assert prompt.shape[1] > model.config.sliding_window            # the window is full before we start
    plain = _plain(model, prompt, 30)
    for draft in (D.early_exit_draft(model, 2), D.PromptLookupDraft(model.config.vocab_size), D.ModelDraft(model)):
        tokens, _ = S.speculative_generate(model, draft, prompt, 30, 5)
        assert torch.equal(tokens, plain)
