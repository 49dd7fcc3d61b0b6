"""Timing of one callable for the kernels' benchmarks: Triton's ``do_bench`` on CUDA, wall-clock samples on
the CPU."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def time_ms(
    fn: Callable[[], object], device: torch.device, min_samples: int = 5, max_samples: int = 200
) -> tuple[float, float, float]:
    """(median, 20th, 80th percentile) milliseconds per call of ``fn``. On the CPU: one warm-up call, then
    ``min_samples`` calls, and more for up to a second (at most ``max_samples``)."""
    if device.type == "cuda":
        from triton.testing import do_bench

        median, p20, p80 = do_bench(fn, quantiles=[0.5, 0.2, 0.8])
        return float(median), float(p20), float(p80)
    fn()
    samples: list[float] = []
    budget_end = time.perf_counter() + 1.0
    while len(samples) < min_samples or (time.perf_counter() < budget_end and len(samples) < max_samples):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    t = torch.tensor(samples)
    median, p20, p80 = torch.quantile(t, torch.tensor([0.5, 0.2, 0.8], dtype=t.dtype)).tolist()
    return median, p20, p80
