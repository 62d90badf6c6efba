"""Shared library of the chapter 'Making Inference Cheap'.

One module per idea of the chapter:

* :mod:`helpers.infra.model`      loading the embedded (or any other) model
* :mod:`helpers.s01_kv_cache`   naive vs cached decoding, the cache adapter
* :mod:`helpers.s01_attention`  one attention head both ways, counting MACs
* :mod:`helpers.s02_phases`     prefill vs decode timed, TTFT and streaming
* :mod:`helpers.s02_roofline`   memory bandwidth, the bytes and FLOPs of a step, the roofline
* :mod:`helpers.s03_cache_size` bytes per token of KV cache, MHA/GQA/MQA, sliding windows
* :mod:`helpers.s03_cache_calculator` the cache calculator (live and static)
* :mod:`helpers.s04_batching`   batch-size sweeps and the knee
* :mod:`helpers.s04_scheduling` static vs continuous batching on paper: a skewed workload, the simulator, slot timelines
* :mod:`helpers.s04_slots`      static vs continuous batching for real: the slot batch and its servers
* :mod:`helpers.s04_paged`      paged KV memory: block tables, fragmentation, prefix sharing
* :mod:`helpers.s05_quantization` absmax / zero-point / NF4 / Q4_1 weight quantization, error and bits accounting
* :mod:`helpers.s05_gguf`       a GGUF file's block formats: bits per weight, the stored numbers of a matrix
* :mod:`helpers.s06_outliers`   residual-stream outlier features and what they do to one INT8 scale
* :mod:`helpers.s06_int8_matmuls` the INT8 matmul schemes that cope with outliers, and whole models run through them
* :mod:`helpers.s08_speculative` speculative decoding: the arithmetic, Leviathan's acceptance rule, the draft/verify loop
* :mod:`helpers.s08_drafts`     the drafts: a model, an early exit with a restricted head, prompt lookup
* :mod:`helpers.infra.claims`     the chapter's empirical claims: asserted on the default model, reported on others;
                            a timing claim that fails is measured once more first
* :mod:`helpers.infra.chapter`    the chapter's reference architecture and every number it quotes
* :mod:`helpers.infra.measure`    timing with warm-up and medians, peak memory, progress bars
* :mod:`helpers.infra.plotting`   the figure style, the static (kernel-free) slider figure
* :mod:`helpers.infra.controls`   live ipywidgets controls, prose from measured values
* :mod:`mic_tools.notebook_client` (infrastructure) keeps notebook execution from stalling on a lost ZeroMQ wake-up
"""
from .infra import plotting  # noqa: F401  (registers the template and renderer)
from .infra.claims import claim, measure_checked, measure_until
from .infra.controls import is_static, live, say
from .infra.model import ModelNotAvailable, load_model

__all__ = ["load_model", "ModelNotAvailable", "live", "say", "is_static", "plotting", "claim", "measure_checked",
           "measure_until"]
