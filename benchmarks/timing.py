"""Timing shared by the benchmarks: wall-clock seconds per call of a step function after warm-up, with the CUDA
queue drained before and after (kernels run asynchronously; without the syncs the clock measures launches)."""

from __future__ import annotations

import time
from collections.abc import Callable


def seconds_per_call(fn: Callable[[], object], calls: int, *, warmup: int = 1, cuda: bool = False) -> float:
    import torch

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
