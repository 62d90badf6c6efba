"""Shared library of the chapter 'Making Inference Cheap'.

The folder reads like the table of contents: ``infra/`` is the shared infrastructure, apart from the
ideas; each idea module is named by the section (notebook) that teaches it, ``sNN_name``. An idea module
imports the infrastructure and earlier sections only (tests/test_layout.py checks it, and this index).

Infrastructure (``helpers.infra``): a change here means a review of every notebook.

* :mod:`helpers.infra.model`     loading the embedded (or any other) model; parameter and weight bytes
* :mod:`helpers.infra.measure`   timing with warm-up and medians (one case or several in turn), peak memory, progress bars
* :mod:`helpers.infra.claims`    the chapter's empirical claims: asserted on the default model, reported on others
* :mod:`helpers.infra.messages`  printed sentences as templates with named fields (what editions translate)
* :mod:`helpers.infra.controls`  live ipywidgets controls, ``say``: a one-line sentence with measured values
* :mod:`helpers.infra.tables`    small tables of this run's numbers, and this run's beside the chapter's
* :mod:`helpers.infra.outputs`   what an output keeps (templates, fields) so an edition can say it again
* :mod:`helpers.infra.plotting`  the figure style, the static (kernel-free) slider figure
* :mod:`helpers.infra.alt_text`  a figure's text alternative (what a screen reader says), and its takeaway
* :mod:`helpers.infra.chapter`   the chapter's reference architecture and every number it quotes
* :mod:`helpers.infra.corpus`    the text perplexity and distillation read
* :mod:`helpers.infra.exercises` exercises' checkers: right, a named mistake with its hint, or not attempted

The ideas, in the chapter's order:

* 01-kv-cache
    * :mod:`helpers.s01_kv_cache`   naive vs cached decoding, the cache adapter
    * :mod:`helpers.s01_attention`  one attention head both ways, counting MACs
    * :mod:`helpers.s01_exercises`  the exercises and their checkers
* 02-prefill-decode
    * :mod:`helpers.s02_phases`     prefill vs decode timed, TTFT and streaming
    * :mod:`helpers.s02_roofline`   memory bandwidth, the bytes and FLOPs of a step, the roofline
    * :mod:`helpers.s02_exercises`  the exercises and their checkers
* 03-cache-size
    * :mod:`helpers.s03_cache_size` bytes per token of KV cache, MHA/GQA/MQA, sliding windows
    * :mod:`helpers.s03_cache_calculator` the cache calculator (live and static)
    * :mod:`helpers.s03_exercises`  the exercises and their checkers
* 04-batching
    * :mod:`helpers.s04_batching`   batch-size sweeps and the knee
    * :mod:`helpers.s04_scheduling` static vs continuous batching on paper: a skewed workload, the simulator
    * :mod:`helpers.s04_slots`      static vs continuous batching for real: the slot batch
    * :mod:`helpers.s04_servers`    the static and continuous servers over it, and transformers' engine beside them
    * :mod:`helpers.s04_solo`       one request at a time, the baseline
    * :mod:`helpers.s04_paged`      paged KV memory: block tables, fragmentation, prefix sharing
    * :mod:`helpers.s04_exercises`  the exercises and their checkers
* 05-weight-quantization
    * :mod:`helpers.s05_quant_blocks` blocks, groups and rows: how a scale is shared
    * :mod:`helpers.s05_quantization` absmax / zero-point / NF4 weight quantization, error and bits accounting
    * :mod:`helpers.s05_gguf`       a GGUF file's block formats (Q4_1 among them): bits per weight, a matrix's stored numbers
    * :mod:`helpers.s05_kernels`    real low-bit kernels, timed
    * :mod:`helpers.s05_figures`    the section's figures and controls: histograms, levels, errors by block size
    * :mod:`helpers.s05_exercises`  the exercises and their checkers
* 06-activation-outliers
    * :mod:`helpers.s06_outliers`   residual-stream outlier features and what they do to one INT8 scale
    * :mod:`helpers.s06_int8_matmuls` the INT8 matmul schemes that cope with outliers, and whole models run through them
    * :mod:`helpers.s06_exercises`  the exercises and their checkers
* 07-quality
    * :mod:`helpers.s07_quality`    perplexity, teacher-forced agreement, paired differences
    * :mod:`helpers.s07_batched`    padded batches: many prompts in one pass, a shared opening computed once
    * :mod:`helpers.s07_battery`    the question battery, answered in batches
    * :mod:`helpers.s07_pairs`      which measurement tells two schemes apart: paired and unpaired
    * :mod:`helpers.s07_exercises`  the exercises and their checkers
* 08-speculative-decoding
    * :mod:`helpers.s08_speculative` the arithmetic, Leviathan's acceptance rule, the draft/verify loop
    * :mod:`helpers.s08_drafts`     the drafts: a model, an early exit with a restricted head, prompt lookup
    * :mod:`helpers.s08_exercises`  the exercises and their checkers
* 09-distillation
    * :mod:`helpers.s09_distillation` a student taught by the teacher's whole distribution
    * :mod:`helpers.s09_exercises`  the exercises and their checkers
* 10-memory-budget
    * :mod:`helpers.s10_budget`     weights plus resident tokens: how many users fit
    * :mod:`helpers.s10_exercises`  the exercises and their checkers

Build and test plumbing that students never import lives apart, in ``src/mic_tools``.
"""
from .infra import outputs, plotting  # noqa: F401  (registers the template and renderer)
from .infra.claims import claim, measure_checked, measure_until
from .infra.controls import is_static, live, say
from .infra.model import ModelNotAvailable, load_model

outputs.register_table_formatter()        # a table shown in a kernel keeps its labels' records (issue 39)

__all__ = ["load_model", "ModelNotAvailable", "live", "say", "is_static", "plotting", "claim", "measure_checked",
           "measure_until"]
