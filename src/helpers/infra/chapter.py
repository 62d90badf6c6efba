"""The chapter's own reference points: the model it measured and every number it quotes (infrastructure).

The source chapter measured Qwen2.5-0.5B in fp16 on an 8 GB laptop GPU. We
cannot download that model, but its *architecture* is public, so notebooks and
tests build random-weight copies of it from :func:`qwen25_config` whenever a
fact depends only on shapes (cache bytes, MAC counts). Its measured numbers
are quoted beside ours, never instead of ours. Each value below is the
chapter's, grouped by the section that quotes it, except the last block, which
is marked as our own earlier measurement; nothing else in the project should
type these numbers again.
"""
from __future__ import annotations
from transformers import Qwen2Config

from .messages import message

# --------------------------------------------------------------------------- the chapter's model
# Qwen2.5-0.5B: 24 layers, 14 query heads sharing 2 KV heads of dim 64, hidden 896, MLP 4864,
# vocabulary 151,936, tied embedding; 494,032,768 parameters.
QWEN25 = dict(name="Qwen2.5-0.5B (the chapter's model)", layers=24, query_heads=14, kv_heads=2,
              head_dim=64, hidden=896, mlp=4864, vocab=151_936, params=494_032_768)

# The chapter's 7B class (sections 3 and 10): 32 layers, 32 query heads sharing 8 KV heads of dim 128.
SEVEN_B = dict(name="7B-class", layers=32, query_heads=32, kv_heads=8, head_dim=128, params=7_000_000_000)


def qwen25_config(intermediate_size: int = QWEN25["mlp"], vocab_size: int = QWEN25["vocab"],
                  kv_heads: int = QWEN25["kv_heads"], layers: int = QWEN25["layers"]):
    """A ``Qwen2Config`` with the chapter's geometry (no download). Shrink the MLP or vocabulary for a
    light random model: neither changes the cache or the attention shapes."""
    if QWEN25["query_heads"] % kv_heads:
        raise ValueError(message("kv_heads must divide the {query_heads} query heads (1, 2, 7 or 14), got {kv_heads}.",
                                 query_heads=QWEN25["query_heads"], kv_heads=kv_heads))
    return Qwen2Config(vocab_size=vocab_size, hidden_size=QWEN25["hidden"], intermediate_size=intermediate_size,
                       num_hidden_layers=layers, num_attention_heads=QWEN25["query_heads"],
                       num_key_value_heads=kv_heads, tie_word_embeddings=True, use_sliding_window=False)


# --------------------------------------------------------------------------- quoted numbers, by section
# 1. Naive vs cached decoding
S1_SPEEDUP_48_TOKENS = 9.0           # cached vs naive, 48 generated tokens
S1_SCORE_MATRIX_BYTES = (67_108_864, 16_384)   # n x n vs 1 x n fp32 scores at n = 4,096
S1_PEAK_MEMORY_RATIO = 8.3           # uncached / cached peak extra memory, 256 tokens

# 2. Prefill vs decode
S2_PREFILL_TOKENS, S2_PREFILL_SECONDS = 40, 1.0224     # 25.6 ms per prompt token
S2_DECODE_STEPS, S2_DECODE_STEP_SECONDS = 47, 0.1665   # per step: 6x a prompt token

# 3. How big the cache is
S3_BYTES_PER_TOKEN = 12_288          # fp16, the chapter's model
S3_MEASURED_TOKENS, S3_MEASURED_BYTES = 295, 3_624_960
S3_MHA_BYTES_PER_TOKEN = 86_016
S3_SEVEN_B_BYTES_PER_TOKEN = 131_072
S3_RESIDENT_TOKENS, S3_RESIDENT_MIB = 65_536, 768     # three batch shapes, the same cache
S3_RESIDENT_SHAPES = ((32, 2048), (64, 1024), (128, 512))   # (users, tokens each) of those three shapes
S3_SEVEN_B_WEIGHTS_GIB, S3_LONG_CONTEXT = 13.0, 128_000   # "13.0 GB" of fp16 weights; a long context

# 4. Batching
S4_THROUGHPUT_1_TO_16, S4_LATENCY_1_TO_16 = 6.0, 2.67
S4_THROUGHPUT_16_TO_32 = 1.09
S4_REQUESTS, S4_MEDIAN, S4_LONGEST, S4_TOTAL, S4_SLOTS = 64, 18, 231, 1874, 8
S4_CONTINUOUS_THROUGHPUT, S4_CONTINUOUS_LATENCY = 1.6, 10.0   # "1.6x" and "more than 10x"
S4_CONTEXT = 64                      # every request of the batch-size table holds a 64-token cache
S4_KNEE = 16                         # the batch where the chapter's step turned compute-bound
S4_LATENCY_16_TO_32 = 2.0            # "latency nearly doubles" from 16 to 32

# 5. Weight quantization (relative error ||W - W_hat|| / ||W||)
S5_MATRICES, S5_PARAMS = 168, 357_800_000
S5_INT4_TENSOR_WORST = 0.99
S5_INT4_ROW_DIVIDES_BY = 3.4
S5_GROUP128_ERROR, S5_NF4_ERROR = 0.1323, 0.0952
S5_WEIGHT_GB = {"fp32": 1.98, "fp16": 0.99, "int8": 0.49}   # the chapter's model's weights
S5_NF4_GAIN = 0.28                  # NF4 block-64 vs int4 group-128: 28 % lower error
# the matrix the chapter dissects, layers.12.mlp.down_proj (896 x 4,864 weights): |w| statistics and the count of
# weights beyond 6 standard deviations
S5_DOWN_PROJ_12 = dict(mean_abs=0.01386, std=0.01822, max_abs=0.43945, max_over_std=24.1, beyond_6_sigma=692)

# 6. Activation outliers
S6_GIANT_DIM, S6_GIANT_VALUE, S6_MEDIAN_DIM_MAX = 62, 1579.6, 1.6
S6_INT8_SCALE, S6_INT8_LEVELS = 12.4378, 14
S6_HISTOGRAM_LAYER16 = {"0-1": 254, "1-2": 283, "2-4": 226, "4-8": 93, "8-16": 18, "16-32": 9,
                        "32-64": 7, "64-128": 5, "128-1024": 0, "1024-4096": 1}
S6_MEDIAN_MAGNITUDE, S6_P99_MAGNITUDE = 0.26, 2.51     # |h| at layer 16, all values
S6_TOP_K, S6_SCALE_TOP_K, S6_SHRINK_TOP_K = 4, 0.5749, 22   # scale with the top 4 dims set aside, 22x smaller
S6_ORDINARY_DIMS = [(826, 4.77, 1, 8), (336, 1.62, 1, 4), (96, 0.69, 1, 3)]   # (dim, max |h|, levels, levels top-4 aside)

# 7. Does quality survive quantization? (perplexity on 2,048 tokens of English prose)
S7_EVAL_TOKENS = 2048                    # the chapter's perplexity span, in tokens
S7_PERPLEXITY = {"reference": 23.08, "int8 per-row": 22.96, "int4 per-tensor": 365_416_000,
                 "int4 per-row": 46.18, "int4 group-128": 31.08, "NF4 block-64": 24.55}
S7_PUBLIC_CORPUS = {"reference": 22.24, "int8 per-row": 22.18}   # the same two rows on the public-domain book
S7_INT8_AGREEMENT = (142, 144)           # int8 per-row agrees with the reference on 142 of 144 positions
S7_CARELESS_INT8_PPL_COST = 0.5          # int8 per-tensor: +0.5 perplexity, no battery answers lost
S7_NF4_VS_G128 = (6.5, 1)                # perplexity gap and battery questions between NF4 and group-128
S7_REPETITION_PENALTY = 1.1              # the stock repetition penalty of the chapter's model (Qwen2.5-Instruct)

# 8. Speculative decoding: the bold entry (alpha 0.30, c = 1/5: five forward passes' worth, 1.4 tokens kept)
# and gamma = 8 at c = 0.1 (speed-up by alpha)
S8_BOLD = dict(alpha=0.30, c=1 / 5, passes=5, tokens=1.4)
S8_GAMMA8 = dict(gamma=8, c=0.1, speedup={0.9: 3.40, 0.3: 0.79})

# 9. Distillation: the chapter model's next-token distribution after "She poured the milk into the"
S9_PROMPT = "She poured the milk into the"
S9_TOP5 = {" jug": 0.1355, " cup": 0.1051, " bowl": 0.0605, " large": 0.0380, " milk": 0.0360}
S9_TOP_TO_THIRD = {1.0: 2.24, 2.0: 1.50}     # p(top) / p(third) at temperature T

# 10. The memory budget: cards of 8, 16 and 24 GB; the 13B is full MHA (40 heads of 128), 70B GQA (8 of 128)
S10_CARDS_GB = (8, 16, 24)
THIRTEEN_B = dict(name="13B-class (MHA)", layers=40, query_heads=40, kv_heads=40, head_dim=128, params=13_000_000_000)
SEVENTY_B = dict(name="70B-class", layers=80, query_heads=64, kv_heads=8, head_dim=128, params=70_000_000_000)
S10_13B_INT4_8GB = (6.2, 337)                # weights (GB), tokens of context that fit
S10_16GB_INT8_TOKENS = {"7B": 65_378, "13B": 3_136}
S10_KIB_PER_TOKEN = {"13B": 800, "7B": 128}


# --------------------------------------------------------------------------- not the chapter's: our own measurement
# Decode time per token of llama.cpp on the embedded SmolLM2-135M Q4_1 GGUF, measured by this project on its own
# machines (2 CPU cores) on 2026-11-29, with llama-cpp-python 0.3.x built from source (GGML_NATIVE), 2 threads
# (../shared/design-notes.md, "llama.cpp on the embedded Q4_1 GGUF"). The chapter quotes no such number. Building
# llama.cpp takes minutes of compiling, so notebook 5 quotes it with this source instead of measuring it.
OUR_LLAMA_CPP_Q4_MS = 9.1
OUR_LLAMA_CPP_THREADS = 2
OUR_LLAMA_CPP_HOW = "llama-cpp-python 0.3 built from source for this CPU, on 2026-11-29"
