"""Shared library of the chapter 'Making Inference Cheap'.

One module per idea of the chapter:

* :mod:`helpers.model`      loading the embedded (or any other) model
* :mod:`helpers.kv_cache`   naive vs cached decoding, the cache adapter
* :mod:`helpers.attention`  one attention head both ways, counting MACs
* :mod:`helpers.phases`     prefill vs decode timed, TTFT and streaming
* :mod:`helpers.roofline`   memory bandwidth, the bytes and FLOPs of a step, the roofline
* :mod:`helpers.cache_size` bytes per token of KV cache, MHA/GQA/MQA, sliding windows
* :mod:`helpers.cache_calculator` the cache calculator (live and static)
* :mod:`helpers.batching`   batch-size sweeps and the knee
* :mod:`helpers.scheduling` static vs continuous batching on paper: a skewed workload, the simulator, slot timelines
* :mod:`helpers.slots`      static vs continuous batching for real: the slot batch and its servers
* :mod:`helpers.paged`      paged KV memory: block tables, fragmentation, prefix sharing
* :mod:`helpers.quantization` absmax / zero-point / NF4 / Q4_1 weight quantization, error and bits accounting
* :mod:`helpers.gguf`       a GGUF file's block formats: bits per weight, the stored numbers of a matrix
* :mod:`helpers.outliers`   residual-stream outlier features and what they do to one INT8 scale
* :mod:`helpers.int8_matmuls` the INT8 matmul schemes that cope with outliers, and whole models run through them
* :mod:`helpers.speculative` speculative decoding: the arithmetic, Leviathan's acceptance rule, the draft/verify loop
* :mod:`helpers.drafts`     the drafts: a model, an early exit with a restricted head, prompt lookup
* :mod:`helpers.claims`     the chapter's empirical claims: asserted on the default model, reported on others;
                            a timing claim that fails is measured once more first
* :mod:`helpers.chapter`    the chapter's reference architecture and every number it quotes
* :mod:`helpers.measure`    timing with warm-up and medians, peak memory, progress bars
* :mod:`helpers.plotting`   the figure style, the static (kernel-free) slider figure
* :mod:`helpers.controls`   live ipywidgets controls, prose from measured values
* :mod:`helpers.notebook_client` (infrastructure) keeps notebook execution from stalling on a lost ZeroMQ wake-up
"""
from . import plotting  # noqa: F401  (registers the template and renderer)
from .claims import claim, measure_checked, measure_until
from .controls import is_static, live, say
from .model import ModelNotAvailable, load_model

__all__ = ["load_model", "ModelNotAvailable", "live", "say", "is_static", "plotting", "claim", "measure_checked",
           "measure_until"]
