"""Benchmark ``similarity-cka-streaming``: linear CKA of two simulated 30-layer "models" on 2,000 probe
texts, over all 30 depth-matched layer pairs, computed (a) from the full ``n x n`` Gram matrices
(:func:`~icml_interp.similarity.cka` of :func:`~icml_interp.similarity.gram_linear`) and (b) with
:class:`~icml_interp.similarity.StreamingCKA` in batches of 256 texts (``d x d`` feature-space sums).

Representations are simulated, not run through a model: each text has a shared 64-dimensional latent, and
layer ``l`` of each model is a random linear map of it to ``d = 576`` features (SmolLM2's width) plus
Gaussian noise that grows with depth, so CKA is far from 0 and 1 and varies over depth. Layer ``l`` of A is
paired with layer ``l`` of B (equal depths). Each pair's arrays are generated (float32, like
:func:`~icml_interp.similarity.layer_representations`) outside the timed region.

Before timing, both methods run on every pair and must agree to 1e-8; the ratios are left empty otherwise.
Reported: the median over repeats of the wall time for all pairs, and the peak memory of one pair's
computation as measured by ``tracemalloc`` (numpy's allocations during the call, the input arrays excluded;
measured in a separate, untimed run). Streaming also keeps its sums between batches; with one instance per
pair alive at once (batches arriving from a model) that state is ``pairs x 3 d^2`` float64, reported as
``state_mib_all_pairs``. The quick budget uses 6 layers and 512 texts.
"""

from __future__ import annotations

import os
import statistics
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
import torch

from icml_interp.similarity import StreamingCKA, cka, gram_linear

D, LATENT, BATCH = 576, 64, 256
BUDGETS = {
    "quick": {"layers": 6, "texts": 512, "repeats": 3},
    "full": {"layers": 30, "texts": 2000, "repeats": 3},
}
MEMORY_MEASURE = "tracemalloc peak of one pair's computation (numpy allocations, inputs excluded)"


def simulated_layer(latent: np.ndarray, model: int, layer: int, n_layers: int, seed: int) -> np.ndarray:
    """Layer ``layer`` of model ``model``: ``latent @ W + noise`` with noise growing with depth, float32."""
    rng = np.random.default_rng([seed, model, layer])
    mix = rng.standard_normal((latent.shape[1], D)) / np.sqrt(latent.shape[1])
    noise = (0.5 + 1.5 * layer / max(n_layers - 1, 1)) * rng.standard_normal((len(latent), D))
    return (latent @ mix + noise).astype(np.float32)


def full_gram(x: np.ndarray, y: np.ndarray) -> float:
    return cka(gram_linear(x), gram_linear(y))


def streaming(x: np.ndarray, y: np.ndarray) -> float:
    stream = StreamingCKA()
    for start in range(0, len(x), BATCH):
        stream.update(x[start : start + BATCH], y[start : start + BATCH])
    return stream.value()


def peak_bytes(fn: Callable, x: np.ndarray, y: np.ndarray) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn(x, y)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    """One row per method (full Gram, streaming) with times, memory, agreement and streaming/full ratios."""
    cfg = BUDGETS[budget]
    n_layers, n = cfg["layers"], cfg["texts"]
    latent = np.random.default_rng([seed, 99]).standard_normal((n, LATENT))

    def pair(layer: int) -> tuple[np.ndarray, np.ndarray]:
        return simulated_layer(latent, 0, layer, n_layers, seed), simulated_layer(
            latent, 1, layer, n_layers, seed
        )

    methods = {"full Gram (n x n)": full_gram, f"StreamingCKA (batches of {BATCH})": streaming}
    values: dict[str, list[float]] = {m: [] for m in methods}
    peaks: dict[str, int] = dict.fromkeys(methods, 0)
    for layer in range(n_layers):  # correctness first (and the untimed memory measurement)
        x, y = pair(layer)
        for name, fn in methods.items():
            values[name].append(fn(x, y))
            if layer == 0:
                peaks[name] = peak_bytes(fn, x, y)
    full_values, stream_values = (np.array(v) for v in values.values())
    max_diff = float(np.abs(full_values - stream_values).max())
    agree = max_diff <= 1e-8
    seconds: dict[str, list[float]] = {m: [] for m in methods}
    for _ in range(cfg["repeats"]):
        totals = dict.fromkeys(methods, 0.0)
        for layer in range(n_layers):
            x, y = pair(layer)
            for name, fn in methods.items():  # interleaved: drifts in machine load hit both methods
                start = time.perf_counter()
                fn(x, y)
                totals[name] += time.perf_counter() - start
        for name in methods:
            seconds[name].append(totals[name])
    medians = {name: statistics.median(ts) for name, ts in seconds.items()}
    full_name, stream_name = methods
    rows = []
    for name in methods:
        is_stream = name == stream_name
        rows.append(
            {
                "method": name,
                "layer_pairs": n_layers,
                "texts": n,
                "d": D,
                "batch_size": BATCH if is_stream else None,
                "median_seconds_all_pairs": medians[name],
                "seconds_per_pair": medians[name] / n_layers,
                "peak_mib_per_pair": peaks[name] / 2**20,
                "memory_measure": MEMORY_MEASURE,
                "state_mib_all_pairs": n_layers * 3 * D * D * 8 / 2**20 if is_stream else None,
                "mean_cka": float(np.mean(values[name])),
                "cka_first_last": f"{values[name][0]:.4f} / {values[name][-1]:.4f}",
                "max_abs_diff_vs_full": max_diff,
                "agree_1e-8": agree,
                "time_ratio_streaming_over_full": medians[stream_name] / medians[full_name]
                if agree
                else None,
                "peak_ratio_streaming_over_full": peaks[stream_name] / peaks[full_name] if agree else None,
                "repeats": cfg["repeats"],
                "threads": torch.get_num_threads(),
                "load_1min": os.getloadavg()[0],
            }
        )
    return rows
