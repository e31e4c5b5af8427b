"""Timing shared by the benchmarks: wall-clock seconds per call of a step function after warm-up, with the CUDA
queue drained before and after (kernels run asynchronously; without the syncs the clock measures launches)."""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable

import torch


def seconds_per_call(fn: Callable[[], object], calls: int, *, warmup: int = 1, cuda: bool = False) -> float:
    for _ in range(warmup):  # kernels chosen, allocator settled
        fn()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls


def reset_peak_memory(device) -> None:
    """Start a new peak-memory window on CUDA (CPU has none: its figure is the process's peak)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device) -> str:
    """The peak memory since ``reset_peak_memory``, labelled: allocated CUDA memory on a GPU, else the process's
    peak resident set (``getrusage``; it covers everything the process did so far, not only the last measurement)."""
    if device.type == "cuda":
        return f"peak GPU memory {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    rss_bytes = rss if sys.platform == "darwin" else rss * 1024
    return f"process peak RSS {rss_bytes / 2**30:.2f} GiB"
