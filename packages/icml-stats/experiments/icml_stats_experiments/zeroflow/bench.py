"""Benchmark ``zeroflow-two-sample``: wall time of the zero-flow two-sample test (linear and kernel
velocity, 9,999 sign flips) against a kernel MMD permutation test (RBF kernel, median-heuristic
bandwidth, biased MMD², 199 permutations) at equal n per sample, d = 5, a 0.3 mean shift, one thread;
medians over repeats and the ratio MMD / zero-flow measured in the same run. The p-values are reported
beside the times.

Correctness first: the vectorized MMD statistic must equal a direct double sum on a small case, and the
sign-flip p-value must equal an explicit enumeration of the flips, else no timings are reported.
"""

from __future__ import annotations

import itertools
import os
import time
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from icml_stats.zeroflow import sign_flip_p_value, zero_flow_two_sample_test

BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"ns": (250, 1000), "repeats": 1},
    "full": {"ns": (250, 1000, 2000), "repeats": 3},
}
D, SHIFT, PERMUTATIONS = 5, 0.3, 199


def rbf_gram(z: np.ndarray) -> np.ndarray:
    sq = (z**2).sum(1)
    dist = np.maximum(sq[:, None] + sq[None, :] - 2.0 * z @ z.T, 0.0)
    return np.exp(-dist / np.median(dist[np.triu_indices(len(z), 1)]))


def mmd_statistics(gram: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Biased MMD² for each row of ``labels`` ``(k, 2n)`` (True = second sample) on the pooled ``gram``."""
    w = np.where(labels, 1.0 / labels.sum(1, keepdims=True), -1.0 / (~labels).sum(1, keepdims=True))
    return np.einsum("ki,ki->k", w @ gram, w)


def mmd_permutation_test(
    x0: np.ndarray, x1: np.ndarray, permutations: int, rng: np.random.Generator
) -> float:
    gram = rbf_gram(np.vstack([x0, x1]))
    labels = np.arange(len(x0) + len(x1)) >= len(x0)
    observed = mmd_statistics(gram, labels[None])[0]
    shuffled = np.array([rng.permutation(labels) for _ in range(permutations)])
    return (1 + int(np.sum(mmd_statistics(gram, shuffled) >= observed))) / (1 + permutations)


def _correct() -> bool:
    rng = np.random.default_rng(0)
    x0, x1 = rng.normal(size=(6, 2)), rng.normal(size=(5, 2)) + 1
    gram = rbf_gram(np.vstack([x0, x1]))
    direct = gram[:6, :6].sum() / 36 + gram[6:, 6:].sum() / 25 - 2 * gram[:6, 6:].sum() / 30
    mmd_ok = np.isclose(mmd_statistics(gram, (np.arange(11) >= 6)[None])[0], direct, rtol=1e-12)
    s = rng.normal(0.2, 1.0, 10)
    flips = [np.dot(signs, s) for signs in itertools.product((-1.0, 1.0), repeat=10)]
    flips_ok = np.isclose(sign_flip_p_value(s), np.mean([f >= s.sum() - 1e-12 for f in flips]))
    return bool(mmd_ok and flips_ok)


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    cfg = BUDGETS[budget]
    correct = _correct()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rows = []
    with threadpool_limits(limits=1):
        for n in cfg["ns"]:
            times: dict[str, list[float]] = {
                "zero-flow (linear)": [],
                "zero-flow (kernel)": [],
                "MMD permutation": [],
            }
            pvalues: dict[str, list[float]] = {k: [] for k in times}
            for r in range(cfg["repeats"]):
                rng = np.random.default_rng(seed + 1000 * r + n)
                x0, x1 = rng.normal(size=(n, D)), rng.normal(size=(n, D)) + SHIFT
                for name in times:
                    start = time.perf_counter()
                    if name == "MMD permutation":
                        p = mmd_permutation_test(x0, x1, PERMUTATIONS, rng)
                    else:
                        velocity = "linear" if "linear" in name else "kernel"
                        p = zero_flow_two_sample_test(x0, x1, velocity=velocity, random_state=r).p_value
                    times[name].append(time.perf_counter() - start)
                    pvalues[name].append(p)
            med = {k: float(np.median(v)) for k, v in times.items()}
            for name in times:
                rows.append(
                    {
                        "case": f"{name}, n = {n} per sample, d = {D}, mean shift {SHIFT}, 1 thread",
                        "median_seconds": med[name] if correct else None,
                        "MMD / this (ratio of medians)": med["MMD permutation"] / med[name]
                        if correct
                        else None,
                        "p_values": pvalues[name],
                        "repeats": cfg["repeats"],
                        "load_average_1min": load,
                        "correct": correct,
                    }
                )
    return rows
