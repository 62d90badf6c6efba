"""Shared library of the chapter 'Making Inference Cheap'.

One module per idea of the chapter:

* :mod:`helpers.model`      loading the embedded (or any other) model
* :mod:`helpers.kv_cache`   naive vs cached decoding, the cache adapter
* :mod:`helpers.attention`  one attention head both ways, counting MACs
* :mod:`helpers.measure`    timing with warm-up and medians, peak memory, progress bars
* :mod:`helpers.plotting`   the figure style, the static (kernel-free) slider figure
* :mod:`helpers.controls`   live ipywidgets controls, prose from measured values
"""
from . import plotting  # noqa: F401  (registers the template and renderer)
from .controls import is_static, live, say
from .model import ModelNotAvailable, load_model

__all__ = ["load_model", "ModelNotAvailable", "live", "say", "is_static", "plotting"]
