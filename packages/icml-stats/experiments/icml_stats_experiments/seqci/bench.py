"""Benchmark ``skci-speed``: wall time of one 1,000-sample SKCI stream (d = 5, batches of 20) and the
traced memory of updates early and late in a 10,000-sample stream (bounded memory: no growth).

Correctness first: the closed-form LOO loss must equal a brute-force LOO on a small case, else the
timings are not reported.
"""

from __future__ import annotations

import os
import time
import tracemalloc

import numpy as np
from threadpoolctl import threadpool_limits

from icml_stats.seqci.datasets import gaussian_ci
from icml_stats.seqci.kernels import RBF, krr_loo_loss
from icml_stats.seqci.skci import SKCI

BUDGETS = {"quick": {"repeats": 1, "long": 2000}, "full": {"repeats": 3, "long": 10_000}}


def _loo_correct() -> bool:
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((20, 2)), rng.standard_normal((20, 1))
    Kx, Ky = RBF(1.0)(x, x), RBF(1.0)(y, y)
    errors = []
    for i in range(20):
        keep = np.arange(20) != i
        beta = np.linalg.solve(Kx[np.ix_(keep, keep)] + 0.5 * np.eye(19), Kx[keep, i])
        errors.append(Ky[i, i] - 2 * beta @ Ky[keep, i] + beta @ Ky[np.ix_(keep, keep)] @ beta)
    return bool(abs(krr_loo_loss(Kx, Ky, 0.5) - np.mean(errors)) < 1e-9)


def _traced_peak(test, d, start, stop) -> int:
    tracemalloc.start()
    for i in range(start, stop, 20):
        test.update(d.a[i : i + 20], d.b[i : i + 20], d.c[i : i + 20])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    cfg = BUDGETS[budget]
    correct = _loo_correct()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    d = gaussian_ci(1000, 5, 0.0, seed=seed)
    times = []
    for r in range(cfg["repeats"]):
        start = time.perf_counter()
        SKCI(random_state=r).run(d.a, d.b, d.c, batch_size=20)
        times.append(time.perf_counter() - start)
    long = gaussian_ci(cfg["long"], 5, 0.0, seed=seed + 1)
    test = SKCI(random_state=seed)
    with threadpool_limits(limits=1, user_api="blas"):
        test.run(long.a[:600], long.b[:600], long.c[:600])
        early = _traced_peak(test, long, 600, 800)
        test.run(
            long.a[800 : cfg["long"] - 200], long.b[800 : cfg["long"] - 200], long.c[800 : cfg["long"] - 200]
        )
        late = _traced_peak(test, long, cfg["long"] - 200, cfg["long"])
    assert test._past is not None  # it has seen samples
    return [
        {
            "case": "SKCI 1,000 samples (d=5, batch 20)",
            "median_seconds": float(np.median(times)) if correct else None,
            "limit_seconds": 30.0,
            "load_average_1min": load,
            "correct": correct,
        },
        {
            "case": f"SKCI traced peak, 10 updates after 600 samples / before {cfg['long']}",
            "early_peak_mb": early / 1e6,
            "late_peak_mb": late / 1e6,
            "kept_samples": int(test._past[0].shape[0]),
            "bounded": bool(late <= 1.2 * early + 1e5),
            "correct": correct,
        },
    ]
