"""Timing and memory, done the way noisy machines need.

* :func:`time_it` warms up, repeats, and reports the median.
* :func:`peak_memory` reports how many bytes a piece of work needed on top of
  what was already resident. On CUDA that is the allocator's peak. On CPU,
  PyTorch keeps no allocator statistics, so we ask the kernel: freed heap
  memory is first returned to the OS (``malloc_trim``), the process's
  high-water mark is reset (``/proc/self/clear_refs``), the work runs, and the
  new high-water mark (``VmHWM``) minus the resident size before is the answer.
"""
from __future__ import annotations

import ctypes
import gc
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch


@dataclass
class Timing:
    median: float                      # seconds
    times: list[float] = field(repr=False)
    warmup: int = 1

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def spread(self) -> float:
        """(max - min) / median: how noisy the repeats were."""
        return (max(self.times) - min(self.times)) / self.median if self.median else 0.0


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def time_it(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> Timing:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times; report the median wall time."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats} and {warmup}.")
    for _ in range(warmup):
        fn()
    _sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - t0)
    return Timing(statistics.median(times), times, warmup)


@dataclass
class MemoryPeak:
    extra_bytes: int      # peak during the work minus what was resident before
    method: str           # how it was measured


def _proc_status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _release_free_heap():
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def cpu_peak_supported() -> bool:
    return os.path.exists("/proc/self/clear_refs") and os.access("/proc/self/clear_refs", os.W_OK)


def peak_memory(fn: Callable[[], object], device: str | torch.device | None = None) -> MemoryPeak:
    """Extra memory ``fn`` needed at its peak, beyond what was already resident."""
    dev = torch.device(device) if device is not None else (
        torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return MemoryPeak(torch.cuda.max_memory_allocated() - before, "CUDA allocator peak")
    if not cpu_peak_supported():
        raise RuntimeError("Measuring peak CPU memory needs Linux's /proc/self/clear_refs; run on Linux or CUDA.")
    _release_free_heap()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")                      # reset VmHWM to the current resident size
    before = _proc_status("VmRSS")
    result = fn()
    peak = _proc_status("VmHWM")
    del result
    _release_free_heap()
    return MemoryPeak(peak - before, "resident-set high-water mark (Linux)")


def progress(iterable, desc: str | None = None, **kwargs):
    """A tqdm progress bar: a widget in JupyterLab, plain text (on stderr) in the static book build."""
    from .controls import is_static
    if is_static():
        from tqdm.std import tqdm
    else:
        from tqdm.auto import tqdm
    return tqdm(iterable, desc=desc, **kwargs)
