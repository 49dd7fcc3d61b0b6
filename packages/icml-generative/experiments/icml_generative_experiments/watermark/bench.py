"""Benchmark ``bispectrum-watermark-time``: wall time of :func:`~icml_generative.watermark.embed` and
:func:`~icml_generative.watermark.extract` (32 bits, library defaults) against the planar DCT mark
(:func:`~icml_generative.watermark.dct_embed` / ``dct_extract``, same bits, same PSNR) on procedural
panoramas at 128 x 256 and 256 x 512; medians over repeats and the ratio ours / DCT from the same run,
torch and BLAS at their default thread counts.

Correctness first: each timed call must decode every bit it embedded, else its time is not reported.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch

from icml_generative.watermark import dct_embed, dct_extract, embed, extract, psnr
from icml_generative_experiments.watermark.testbed import panorama

BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"heights": (128,), "repeats": 2},
    "full": {"heights": (128, 256), "repeats": 5},
}
N_BITS = 32


def timed(fn, *args, **kwargs) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    cfg = BUDGETS[budget]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rows = []
    embed(panorama(64, seed), [1, 0], "warm-up")  # builds the cached coupling tensors once
    for height in cfg["heights"]:
        times: dict[str, list[float]] = {"embed": [], "extract": [], "dct_embed": [], "dct_extract": []}
        correct = True
        for r in range(cfg["repeats"]):
            host = panorama(height, 1000 * seed + r)
            bits = np.random.default_rng(r).integers(0, 2, N_BITS)
            key = f"bench-{r}"
            ours, t = timed(embed, host, bits, key)
            times["embed"].append(t)
            decoded, t = timed(extract, ours, key, N_BITS)
            times["extract"].append(t)
            planar, t = timed(dct_embed, host, bits, key, psnr_db=psnr(host, ours))
            times["dct_embed"].append(t)
            planar_decoded, t = timed(dct_extract, planar, key, N_BITS)
            times["dct_extract"].append(t)
            correct &= bool((decoded == bits).all() and (planar_decoded == bits).all())
        med = {k: float(np.median(v)) for k, v in times.items()}
        for op in ("embed", "extract"):
            for name in (op, f"dct_{op}"):
                rows.append(
                    {
                        "case": f"{name}, {height}x{2 * height} RGB, {N_BITS} bits",
                        "median_seconds": med[name] if correct else None,
                        "ours / DCT (ratio of medians)": med[op] / med[f"dct_{op}"] if correct else None,
                        "repeats": cfg["repeats"],
                        "torch_threads": torch.get_num_threads(),
                        "load_average_1min": load,
                        "correct": correct,
                    }
                )
    return rows
