"""helpers.s06_int8_matmuls computes the same bits as its earlier, slower form.

The codes used to be float64 (8 bytes per weight), weight-only dequantized in float64, and
``emulated_linears`` replaced each layer's output with a forward hook after the layer had computed its fp32
product. The references below are those earlier implementations, kept verbatim; the helpers must agree
with them bit for bit (``torch.equal``), not merely closely.
"""
import copy
import math

import pytest
import torch
from conftest import make_tiny_llama

from helpers import s06_int8_matmuls as M
from helpers.s05_quantization import absmax_quantize

# --------------------------------------------------------------------------- the earlier implementations


def old_absmax_codes(t, per):
    q, scale = absmax_quantize(t, 8, axis=-1 if per == "row" else None)
    scale = scale.double().reshape(-1, 1) if per == "row" else scale.double().reshape(())
    return q.double(), torch.where(scale > 0, scale, torch.ones_like(scale))


def old_integer_matmul(qx, qw):
    bound = float(qx.abs().sum(dim=1).max()) * float(qw.abs().max())
    if bound < 2 ** 24:
        return (qx.float() @ qw.float().T).double()
    return qx.double() @ qw.double().T


def old_int8_matmul(x, w, x_per="tensor", w_per="tensor"):
    qx, sx = old_absmax_codes(x, "tensor" if x_per == "tensor" else "row")
    qw, sw = old_absmax_codes(w, "tensor" if w_per == "tensor" else "row")
    return (old_integer_matmul(qx, qw) * sx * (sw.T if w_per == "channel" else sw)).float()


def old_weight_only_matmul(x, w):
    qw, sw = old_absmax_codes(w, "row")
    return x.float() @ (qw * sw).float().T


def old_llm_int8_matmul(x, w, threshold=6.0):
    out_dims = M.outlier_dimensions(x, threshold)
    regular = torch.ones(x.shape[1], dtype=torch.bool)
    regular[out_dims] = False
    y = x[:, out_dims].float() @ w[:, out_dims].float().T
    if regular.any():
        y = y + old_int8_matmul(x[:, regular], w[:, regular], "token", "channel")
    return y


def old_smoothquant_matmul(x, w, alpha=0.5):
    s = M.smooth_scales(x.abs().amax(dim=0), w, alpha)
    return old_int8_matmul(x.double() / s, w.double() * s)


OLD = {
    "INT8 x INT8, one scale each": lambda x, w: old_int8_matmul(x, w, "tensor", "tensor"),
    "INT8 x INT8, per token x per channel": lambda x, w: old_int8_matmul(x, w, "token", "channel"),
    "LLM.int8() decomposition": old_llm_int8_matmul,
    "SmoothQuant + one scale each": old_smoothquant_matmul,
    "weight-only INT8": old_weight_only_matmul,
}


# --------------------------------------------------------------------------- inputs

def pairs():
    """Random (x, w) pairs: small ones, and the shapes of our model's linears (84 tokens, 576 / 1536 wide)."""
    g = torch.Generator().manual_seed(11)
    out = []
    for tokens, n_in, n_out in ((5, 8, 4), (16, 32, 24), (84, 576, 576), (84, 576, 1536), (84, 1536, 576)):
        x = torch.randn(tokens, n_in, generator=g)
        w = torch.randn(n_out, n_in, generator=g) * 0.05
        x[0] *= 300                                  # a token outlier, like the first token's
        x[:, 3] *= 40                                # a channel outlier
        w[1] = 0                                     # an all-zero weight row (scale 0 -> 1)
        w[2, 0] = 1.5                                # an outlier weight
        out.append((x, w))
    x = torch.randn(3, 4000, generator=g)            # long rows: the float64 path of integer_matmul
    out.append((x, torch.randn(2, 4000, generator=g)))
    return out


# --------------------------------------------------------------------------- bit for bit


@pytest.mark.parametrize("scheme", list(M.MATMULS))
def test_every_scheme_gives_the_bits_of_the_float64_code_version(scheme):
    for x, w in pairs():
        assert torch.equal(M.MATMULS[scheme](x, w), OLD[scheme](x, w)), (scheme, tuple(x.shape), tuple(w.shape))


def test_codes_are_float32_integers_and_scales_float32_values_held_in_float64():
    for x, w in pairs():
        for t, per in ((x, "tensor"), (x, "row"), (w, "tensor"), (w, "row")):
            q, s = M.absmax_codes(t, per)
            q_old, s_old = old_absmax_codes(t, per)
            assert q.dtype == torch.float32 and torch.equal(q.double(), q_old)
            assert s.dtype == torch.float64 and torch.equal(s, s_old)
            # what makes weight-only's float32 product exact: every scale is a float32 number
            assert torch.equal(s.float().double(), s)


def test_integer_matmul_takes_both_paths_on_float32_codes():
    small = torch.randint(-128, 128, (6, 50)).float(), torch.randint(-128, 128, (5, 50)).float()
    big = torch.full((2, 2000), 127.0), torch.full((3, 2000), -128.0)     # bound 127 * 2000 * 128 > 2**24
    for qx, qw in (small, big):
        exact = (qx.long() @ qw.long().T).double()
        assert torch.equal(M.integer_matmul(qx, qw), exact)
        assert torch.equal(M.integer_matmul(qx, qw), old_integer_matmul(qx.double(), qw.double()))


# --------------------------------------------------------------------------- whole models


@pytest.fixture(scope="module")
def tiny(tiny_llama):
    """A copy of the shared tiny Llama (conftest), with one loud down_proj input channel, and 12 token ids."""
    model = copy.deepcopy(tiny_llama)
    torch.manual_seed(0)
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight[:, 7] *= 30      # give the activations something to do
    return model, torch.randint(0, 97, (1, 12))


def old_emulated_logits(model, ids, scheme, names, x_max):
    """The earlier hook version: each layer computes its fp32 output, then the hook replaces it."""
    fn = M.MATMULS[scheme]

    def hook(name):
        def replace(module, args, output):
            x = args[0]
            extra = {"x_max": x_max[name]} if name in x_max else {}
            y = fn(x.reshape(-1, x.shape[-1]), module.weight.detach(), threshold=6.0, alpha=0.5, **extra)
            if module.bias is not None:
                y = y + module.bias.detach()
            return y.reshape(*x.shape[:-1], -1).to(output.dtype)
        return replace

    hooks = [model.get_submodule(n).register_forward_hook(hook(n)) for n in names]
    try:
        with torch.inference_mode():
            return model(ids).logits
    finally:
        for h in hooks:
            h.remove()


@pytest.mark.parametrize("scheme", list(M.MATMULS))
def test_emulated_linears_match_the_hook_version_and_skip_the_fp32_product(tiny, scheme, monkeypatch):
    from helpers import s06_outliers as O
    model, ids = tiny
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"]
    x_max = {n: O.dimension_maxima(x) for n, x in O.linear_inputs(model, ids, names).items()}
    expected = old_emulated_logits(model, ids, scheme, names, x_max)
    calls = []
    original = torch.nn.Linear.forward
    monkeypatch.setattr(torch.nn.Linear, "forward", lambda self, x: calls.append(self) or original(self, x))
    with M.emulated_linears(model, scheme, names, x_max=x_max, threshold=6.0, alpha=0.5) as n:
        assert n == len(names)
        with torch.inference_mode():
            got = model(ids).logits
    assert torch.equal(got, expected)
    assert calls == [model.lm_head]                  # only the layer left alone computed an fp32 product
    assert all("forward" not in vars(model.get_submodule(n)) for n in names)   # the class's forward is back


def test_dynamic_copy_shares_only_the_weights_it_replaces():
    model = make_tiny_llama(seed=1, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                            tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]     # lm_head included
    ids = torch.randint(0, 97, (1, 6))
    with torch.inference_mode():
        before = model(ids).logits
    q = M.quantize_linears_dynamic(model, names)
    with torch.inference_mode():
        assert torch.equal(model(ids).logits, before)                     # the original is untouched
    assert q.model.embed_tokens.weight is not model.model.embed_tokens.weight    # a tied weight is copied
    assert all(isinstance(model.get_submodule(n), torch.nn.Linear) for n in names)
    with torch.no_grad():
        q.model.embed_tokens.weight.zero_()
    assert model.model.embed_tokens.weight.abs().sum() > 0


def test_compare_next_tokens_counts_agreeing_top_tokens_and_the_kl_between_them():
    p = torch.tensor([[0.7, 0.2, 0.1], [0.5, 0.3, 0.2]]).log()
    q = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3]]).log()
    same, kl = M.compare_next_tokens(p, q)
    assert same.tolist() == [True, False]                  # the second position's top token moved
    expected = [sum(a * math.log(a / b) for a, b in zip(pa, qa)) for pa, qa in
                ([(0.7, 0.2, 0.1), (0.6, 0.3, 0.1)], [(0.5, 0.3, 0.2), (0.2, 0.5, 0.3)])]
    assert kl.tolist() == pytest.approx(expected, rel=1e-5)
    same, kl = M.compare_next_tokens(p, p)
    assert same.all() and torch.equal(kl, torch.zeros(2))
    with pytest.raises(ValueError, match="same positions"):
        M.compare_next_tokens(p, q[:1])
