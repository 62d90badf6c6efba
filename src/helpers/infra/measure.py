"""Timing and memory, done the way noisy machines need (infrastructure).

* :func:`time_it` warms up, repeats, and reports the median; :func:`interleaved_medians` does it
  for several cases at once, in turn, so that their ratios survive a noisy machine.
* :func:`peak_memory` reports how many bytes a piece of work needed on top of
  what was already alive. On CUDA that is the allocator's peak. On CPU, where
  PyTorch keeps no allocator statistics, we account for every tensor the work
  creates and frees, operator by operator, and report the peak. (The process's
  resident size is no substitute: the C allocator keeps freed memory and
  one-time library buffers, which made it swing by hundreds of MB between
  identical runs here.)
"""
from __future__ import annotations

import gc
import weakref
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from .controls import is_static
from .messages import catalog, edition, message


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

    def pooled(self, other: "Timing") -> "Timing":
        """Both timings' repeats as one (a fresh measurement of the same thing, taken later)."""
        times = self.times + other.times
        return Timing(statistics.median(times), times, self.warmup)


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def now() -> float:
    """A timestamp in seconds, taken after the GPU (if any) has finished its queued work.

    Every timing in the chapter goes through this function or :func:`time_it`: on a GPU,
    ``time.perf_counter()`` alone would time how fast work is *queued*, not done.
    """
    _sync()
    return time.perf_counter()


def interleaved_medians(cases: Mapping[object, Callable[[], object]], repeats: int = 5, warmup: int = 1,
                        rounds: Callable[[Iterable[int]], Iterable[int]] | None = None) -> dict[object, Timing]:
    """Time every case ``repeats`` times in interleaved rounds, after ``warmup`` untimed rounds.

    Returns ``{key: Timing}`` with each case's median. Every round times each case once, in turn, so
    load that comes and goes hits all cases alike and the ratios between them survive a noisy
    machine. ``rounds`` may wrap the rounds' range, for example in :func:`progress`.
    """
    if not cases:
        raise ValueError(message("interleaved_medians needs at least one case to time."))
    if repeats < 1 or warmup < 0:
        raise ValueError(message("repeats must be >= 1 and warmup >= 0, got {repeats} and {warmup}.",
                                 repeats=repeats, warmup=warmup))
    times: dict[object, list[float]] = {k: [] for k in cases}
    all_rounds = range(warmup + repeats)
    for r in (rounds(all_rounds) if rounds else all_rounds):
        for k, fn in cases.items():
            t0 = now()
            fn()
            if r >= warmup:
                times[k].append(now() - t0)
    return {k: Timing(statistics.median(v), v, warmup) for k, v in times.items()}


def time_it(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> Timing:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times; report the median wall time."""
    return interleaved_medians({0: fn}, repeats=repeats, warmup=warmup)[0]


@dataclass
class MemoryPeak:
    extra_bytes: int      # peak during the work minus what was live before
    method: str           # how it was measured


class _LiveTensorBytes:
    """Counts the bytes of every tensor storage created while active, and when each is freed.

    A ``TorchDispatchMode`` sees the output of every operator; a weak reference on each output
    tells us when it dies. Storages shared by views are counted once (keyed by data pointer and
    reference-counted over the tensors that share it). Scratch space used *inside* one operator
    (a matmul's workspace) is not a tensor and is not counted; on CUDA the allocator does count it.
    """

    def __init__(self):
        self.live = 0
        self.peak = 0
        self._refs: dict[int, list[int]] = {}     # data_ptr -> [tensor count, bytes]

    def _free(self, key: int) -> None:
        entry = self._refs.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            self.live -= entry[1]
            del self._refs[key]

    def track(self, t: torch.Tensor) -> None:
        if t.device.type == "meta":
            return
        storage = t.untyped_storage()
        key, nbytes = storage.data_ptr(), storage.nbytes()
        if key == 0 or nbytes == 0:
            return
        entry = self._refs.get(key)
        if entry is None:
            self._refs[key] = [1, nbytes]
            self.live += nbytes
            self.peak = max(self.peak, self.live)
        else:
            entry[0] += 1
        weakref.finalize(t, self._free, key)


def _tensor_peak(fn: Callable[[], object]) -> int:

    counter = _LiveTensorBytes()

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    counter.track(t)
            return out

    with Mode():
        result = fn()
    del result
    gc.collect()
    return counter.peak


def peak_memory(fn: Callable[[], object], device: str | torch.device | None = None) -> MemoryPeak:
    """Extra memory ``fn`` needed at its peak, beyond what was already alive before it ran.

    CUDA: the caching allocator's own peak statistic. CPU: PyTorch keeps no allocator statistics, so
    we account for every tensor the work creates and frees (see ``_LiveTensorBytes``) and report the
    most bytes alive at once. Both leave out the weights and anything else that existed before.
    """
    dev = torch.device(device) if device is not None else (
        torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return MemoryPeak(torch.cuda.max_memory_allocated() - before, "CUDA allocator peak")
    return MemoryPeak(_tensor_peak(fn), "peak bytes of live tensors, counted operator by operator")


def progress(iterable, desc: str | None = None, **kwargs):
    """A tqdm progress bar: a widget in JupyterLab, plain text (on stderr) in the static book build. ``desc``, its
    label, is shown as the edition's catalog has it (a literal one is extracted; a name such as a model's stays)."""
    if isinstance(desc, str):
        desc = catalog(edition()).get(desc, desc)
    # Imported here, on purpose: which tqdm depends on the mode, and tqdm.auto draws a widget in a kernel.
    if is_static():
        from tqdm.std import tqdm
    else:
        from tqdm.auto import tqdm
    return tqdm(iterable, desc=desc, **kwargs)
