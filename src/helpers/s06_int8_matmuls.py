"""INT8 matrix multiplications with outliers: the schemes people use and how far each is from exact (section 6).

* :func:`int8_matmul`: INT8 x INT8 with one scale each, or vector-wise scales
  (per token x per output channel); :func:`weight_only_matmul`;
* :func:`llm_int8_matmul`: LLM.int8()'s decomposition (outlier dimensions in
  full precision); :func:`smooth_scales`, :func:`smoothquant_matmul`:
  SmoothQuant's scale migration;
* :func:`token_error`: the error per token, so one huge token cannot hide the rest;
* whole models: :func:`emulated_linears` (every linear through one scheme),
  :func:`quantize_linears_dynamic` (PyTorch's real INT8 kernel) and
  :func:`greedy_agreement` with full precision, teacher-forced (:func:`compare_next_tokens`, the one
  definition of agreement that section 7 builds on).

Codes come from :func:`helpers.s05_quantization.absmax_quantize`. Their products
are accumulated exactly (:func:`integer_matmul`): in float32 when no partial
sum can reach 2**24 (the usual case, and fast), in float64 otherwise.
"""
from __future__ import annotations

import contextlib
import copy
import warnings
from typing import Callable, Iterable

import torch

from .infra.messages import message
from .s06_outliers import check_ids, dimension_maxima
from .s05_quantization import absmax_quantize

# --------------------------------------------------------------------------- INT8 matmuls


def token_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    """Mean over tokens (rows) of ||approx_t - exact_t|| / ||exact_t||.

    Unlike :func:`helpers.s05_quantization.relative_error` (one norm over the whole matrix), one token with a
    huge output cannot hide the damage done to every other token: each row counts once.
    """
    if approx.shape != exact.shape or exact.dim() != 2:
        raise ValueError(message("need two (tokens, features) tensors of one shape, got {approx_shape} and "
                                 "{exact_shape}.", approx_shape=tuple(approx.shape), exact_shape=tuple(exact.shape)))
    norms = exact.double().norm(dim=1)
    if (norms == 0).any():
        raise ValueError(message("Some rows of the exact result are all zeros; their relative error is undefined."))
    return float(((approx.double() - exact.double()).norm(dim=1) / norms).mean())


def absmax_codes(t: torch.Tensor, per: str) -> tuple[torch.Tensor, torch.Tensor]:
    """INT8 absmax codes and scales from :func:`helpers.s05_quantization.absmax_quantize`, shaped for a matmul.

    ``per``: one scale for the 'tensor', or one per 'row' (a column of scales). Codes come back as
    float32: they are integers from -128 to 127, which float32 holds exactly in half the bytes of float64,
    and :func:`integer_matmul` multiplies them in float32 anyway. Scales come back as float64.
    """
    if per not in ("tensor", "row"):
        raise ValueError(message("per must be 'tensor' or 'row', got {per!r}.", per=per))
    q, scale = absmax_quantize(t, 8, axis=-1 if per == "row" else None)
    scale = scale.double().reshape(-1, 1) if per == "row" else scale.double().reshape(())
    return q.float(), torch.where(scale > 0, scale, torch.ones_like(scale))   # an all-zero row stays zero


def integer_matmul(qx: torch.Tensor, qw: torch.Tensor) -> torch.Tensor:
    """Exact ``qx @ qw.T`` of integer-valued code matrices, returned as float64.

    Every partial sum of a row is an integer no larger than ``sum|qx_row| * max|qw|``. When that bound is
    below 2**24, float32 represents every partial sum exactly, whatever the summation order, so the fast
    float32 product is exact; otherwise float64 is used (exact up to 2**53). The bound itself is summed in
    float64, so it is exact however long the rows are.
    """
    bound = float(qx.abs().sum(dim=1, dtype=torch.float64).max()) * float(qw.abs().max())
    if bound < 2 ** 24:
        return (qx.float() @ qw.float().T).double()
    return qx.double() @ qw.double().T


def _check_matmul(x: torch.Tensor, w: torch.Tensor) -> None:
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(message("need x (tokens, in) and w (out, in) with the same in; got {x_shape} and {w_shape}.",
                                 x_shape=tuple(x.shape), w_shape=tuple(w.shape)))


def int8_matmul(x: torch.Tensor, w: torch.Tensor, x_per: str = "tensor", w_per: str = "tensor") -> torch.Tensor:
    """Emulate an INT8 x INT8 matmul ``x @ w.T``: quantize both, multiply integer codes, rescale once.

    ``x_per``: 'tensor' (one activation scale) or 'token' (one per row of x).
    ``w_per``: 'tensor' (one weight scale) or 'channel' (one per output row of w).
    """
    _check_matmul(x, w)
    if x_per not in ("tensor", "token") or w_per not in ("tensor", "channel"):
        raise ValueError(message("x_per must be 'tensor' or 'token' and w_per 'tensor' or 'channel'."))
    qx, sx = absmax_codes(x, "tensor" if x_per == "tensor" else "row")
    qw, sw = absmax_codes(w, "tensor" if w_per == "tensor" else "row")
    acc = integer_matmul(qx, qw)             # exact integer accumulation
    return (acc * sx * (sw.T if w_per == "channel" else sw)).float()


def weight_only_matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Weight-only INT8 (per output channel): activations stay in full precision.

    The dequantized weight ``q * scale`` is formed in float32. The scales are float32 numbers (from
    :func:`helpers.s05_quantization.absmax_quantize`, merely held in float64), and a code has at most 8
    significant bits, so float32 rounds the exact product once: the same weight float64 would give.
    """
    _check_matmul(x, w)
    qw, sw = absmax_codes(w, "row")
    return x.float() @ (qw * sw.float()).T


def outlier_dimensions(x: torch.Tensor, threshold: float = 6.0) -> torch.Tensor:
    """Input dimensions (columns of x) where any token reaches |x| >= threshold (LLM.int8()'s criterion)."""
    if threshold <= 0:
        raise ValueError(message("threshold must be positive, got {threshold}.", threshold=threshold))
    return (x.abs().amax(dim=0) >= threshold).nonzero().flatten()


def llm_int8_matmul(x: torch.Tensor, w: torch.Tensor, threshold: float = 6.0) -> tuple[torch.Tensor, torch.Tensor]:
    """LLM.int8()-style mixed-precision decomposition of ``x @ w.T``. Returns (result, outlier dimensions).

    Columns of x holding an outlier (|x| >= threshold anywhere) and the matching columns of w are
    multiplied in full precision; everything else in INT8 with vector-wise scales (one per token of x,
    one per output channel of w). The two partial products are added.
    """
    _check_matmul(x, w)
    out_dims = outlier_dimensions(x, threshold)
    regular = torch.ones(x.shape[1], dtype=torch.bool)
    regular[out_dims] = False
    y = x[:, out_dims].float() @ w[:, out_dims].float().T
    if regular.any():
        y = y + int8_matmul(x[:, regular], w[:, regular], "token", "channel")
    return y, out_dims


def smooth_scales(x_max: torch.Tensor, w: torch.Tensor, alpha: float = 0.5) -> torch.Tensor:
    """SmoothQuant's per-input-channel factors s_j = max|x_j|^alpha / max|w_:,j|^(1 - alpha).

    Dividing activations by s and multiplying weights by s leaves x @ w.T unchanged and moves
    difficulty from activations to weights: alpha = 1 flattens every activation channel to
    maximum 1 (all difficulty in the weights), alpha = 0 flattens the weight columns instead.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(message("alpha must be between 0 and 1, got {alpha}.", alpha=alpha))
    if x_max.dim() != 1 or x_max.shape[0] != w.shape[1]:
        raise ValueError(message("x_max must hold one maximum per input channel ({inputs}), got {x_max_shape}.",
                                 inputs=w.shape[1], x_max_shape=tuple(x_max.shape)))
    w_max = w.abs().amax(dim=0)
    s = x_max.double().clamp_min(1e-5) ** alpha / w_max.double().clamp_min(1e-5) ** (1 - alpha)
    return s.clamp_min(1e-5)


def smoothquant_matmul(x: torch.Tensor, w: torch.Tensor, alpha: float = 0.5, x_max: torch.Tensor | None = None,
                       x_per: str = "tensor", w_per: str = "tensor") -> torch.Tensor:
    """SmoothQuant-style W8A8: migrate scale with :func:`smooth_scales`, then :func:`int8_matmul`.

    ``x_max`` are the per-channel activation maxima from calibration data (default: this x itself).
    """
    _check_matmul(x, w)
    s = smooth_scales(dimension_maxima(x) if x_max is None else x_max, w, alpha)
    return int8_matmul(x.double() / s, w.double() * s, x_per, w_per)


MATMULS: dict[str, Callable[..., torch.Tensor]] = {
    "INT8 x INT8, one scale each": lambda x, w, **kw: int8_matmul(x, w, "tensor", "tensor"),
    "INT8 x INT8, per token x per channel": lambda x, w, **kw: int8_matmul(x, w, "token", "channel"),
    "LLM.int8() decomposition": lambda x, w, threshold=6.0, **kw: llm_int8_matmul(x, w, threshold)[0],
    "SmoothQuant + one scale each": lambda x, w, alpha=0.5, x_max=None, **kw: smoothquant_matmul(
        x, w, alpha, x_max),
    "weight-only INT8": lambda x, w, **kw: weight_only_matmul(x, w),
}
"""The schemes compared in the notebook, by name: fn(x, w, **options) -> approximate x @ w.T."""


# --------------------------------------------------------------------------- whole models


@contextlib.contextmanager
def emulated_linears(model, scheme: str, names: Iterable[str] | None = None,
                     x_max: dict[str, torch.Tensor] | None = None, **options):
    """Inside the block, every ``nn.Linear`` (or those in ``names``) computes with ``MATMULS[scheme]``.

    ``x_max`` maps linear names to calibration maxima (SmoothQuant); ``options`` go to the scheme.
    Each layer's ``forward`` is replaced for the duration (an attribute of the instance, deleted on exit,
    which uncovers the class's own ``forward`` again). A forward hook could replace the output too, but
    only after the layer had computed its fp32 product for nothing.
    """
    if scheme not in MATMULS:
        raise ValueError(message("scheme must be one of {matmuls}, got {scheme!r}.",
                                 matmuls=list(MATMULS), scheme=scheme))
    fn = MATMULS[scheme]
    wanted = None if names is None else set(names)

    def emulated(name, module):
        extra = {"x_max": x_max[name]} if x_max is not None and name in x_max else {}

        def forward(x):
            y = fn(x.reshape(-1, x.shape[-1]), module.weight.detach(), **options, **extra)
            if module.bias is not None:
                y = y + module.bias.detach()
            return y.reshape(*x.shape[:-1], -1).to(x.dtype)     # nn.Linear's output has its input's dtype
        return forward

    linears = [(n, m) for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and (wanted is None or n in wanted)]
    try:
        for n, m in linears:
            m.forward = emulated(n, m)
        yield len(linears)
    finally:
        for n, m in linears:
            m.__dict__.pop("forward", None)


def quantize_linears_dynamic(model, names: Iterable[str], inplace: bool = False):
    """PyTorch's real INT8 kernel on the named ``nn.Linear`` layers (``torch.ao`` dynamic quantization).

    Weights: INT8, one symmetric scale per tensor. Activations: quantized on the fly with one
    (asymmetric, 7-bit on x86) scale per tensor per call. Returns the model (a copy unless ``inplace``).
    """
    names = set(names)
    linear = {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    if not names <= linear:
        raise ValueError(message("{count} names are not nn.Linear modules of this model (already quantized, or "
                                 "misspelt); pass names from model.named_modules().", count=len(names - linear)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization announces its move to torchao
        from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic
        # the named layers are about to be replaced: the copy starts out sharing their fp32 weights with
        # ``model`` (read, never written) instead of copying them only to throw them away. A weight that
        # other layers use too (an output head tied to the embedding) is copied as usual.
        elsewhere = {id(p) for n, m in model.named_modules() if n not in names for p in m.parameters(recurse=False)}
        shared = {id(p): p for n in names for p in model.get_submodule(n).parameters() if id(p) not in elsewhere}
        target = model if inplace else copy.deepcopy(model, memo=shared)
        return quantize_dynamic(target, {n: default_dynamic_qconfig for n in names}, dtype=torch.qint8,
                                inplace=True)


def dynamic_activation_bits(module) -> int:
    """Bits of the activation codes in PyTorch's dynamic INT8 ``module`` (from :func:`quantize_linears_dynamic`).

    Its forward asks for a reduced range (``reduce_range=True``, module version 4 and later), which the
    x86 and fbgemm engines honour by using 7-bit activation codes; other engines use 8.
    """
    if not hasattr(module, "_packed_params"):
        raise ValueError(message("pass a dynamically quantized linear layer (see quantize_linears_dynamic)."))
    reduced = (getattr(module, "version", None) or 0) >= 4
    return 7 if reduced and torch.backends.quantized.engine in ("x86", "fbgemm") else 8


# --------------------------------------------------------------------------- agreement with full precision


@torch.inference_mode()
def teacher_forced_logprobs(model, prompt_ids: torch.Tensor, continuation: torch.Tensor) -> torch.Tensor:
    """Log-probabilities (n, vocab) of the next token at each position of ``continuation``, given the true prefix.

    One forward pass over prompt + continuation (teacher forcing): every position sees the identical prefix,
    whatever the model would have generated itself.
    """
    check_ids(prompt_ids)
    if continuation.dim() != 2 or continuation.shape[0] != 1 or continuation.shape[1] < 1:
        raise ValueError(message("continuation must be shaped (1, n) with n >= 1, got {shape}.",
                                 shape=tuple(continuation.shape)))
    logits = model(torch.cat([prompt_ids, continuation], dim=1), use_cache=False).logits[0]
    return torch.log_softmax(logits[prompt_ids.shape[1] - 1:-1].float(), dim=-1)


def compare_next_tokens(reference: torch.Tensor, test: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced agreement, the one definition (section 7 builds on it): per position, whether the greedy
    next tokens agree, and KL(reference || test) in nats.

    ``reference`` and ``test`` are next-token log-probabilities at the same positions, shaped (..., vocab).
    Returns (same: bool (...), kl: (...)).
    """
    if reference.shape != test.shape:
        raise ValueError(message("Reference log-probs {reference_shape} and test log-probs {test_shape} must cover "
                                 "the same positions: compute both on the same text.",
                                 reference_shape=tuple(reference.shape), test_shape=tuple(test.shape)))
    same = reference.argmax(-1) == test.argmax(-1)
    kl = (reference.exp() * (reference - test)).sum(-1).clamp(min=0)
    return same, kl


def greedy_agreement(reference, model, prompt_ids: torch.Tensor, continuation: torch.Tensor) -> float:
    """Fraction of the positions of ``continuation`` where ``model``'s greedy next token is the reference's.

    ``reference`` is the reference model or its :func:`teacher_forced_logprobs` computed beforehand (pass those
    when ``model`` is the reference changed in place, as inside :func:`emulated_linears`).
    """
    ref = reference if isinstance(reference, torch.Tensor) else teacher_forced_logprobs(reference, prompt_ids,
                                                                                          continuation)
    same, _ = compare_next_tokens(ref, teacher_forced_logprobs(model, prompt_ids, continuation))
    return float(same.double().mean())
