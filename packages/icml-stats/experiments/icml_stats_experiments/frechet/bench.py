"""Benchmark ``desi-fit-time``: wall time of fitting (and predicting 200 test objects with) DeSI against
global Fréchet regression and local Fréchet regression with the oracle index (bandwidth by 5-fold CV), on
the Wasserstein simulation (p = 10), one thread; medians over repeats and their ratios measured in the
same run.

Correctness first: global Fréchet regression with the Euclidean metric must equal least squares on a
small case, else no timings are reported.
"""

from __future__ import annotations

import os
import time

import numpy as np
from sklearn.linear_model import LinearRegression
from threadpoolctl import threadpool_limits

from icml_stats.frechet import DeSI, GlobalFrechetRegressor, LocalFrechetRegressor
from icml_stats_experiments.frechet.testbed import simulate

BUDGETS = {"quick": {"n": 200, "repeats": 1}, "full": {"n": 500, "repeats": 3}}


def _correct() -> bool:
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(30, 3)), rng.normal(size=(30, 2))
    ours = GlobalFrechetRegressor("euclidean").fit(x, y).predict(x)
    return bool(np.allclose(ours, LinearRegression().fit(x, y).predict(x), atol=1e-10))


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    import torch

    cfg = BUDGETS[budget]
    correct = _correct()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    times: dict[str, list[float]] = {"GFR": [], "oracle LFR": [], "DeSI": []}
    try:
        with threadpool_limits(limits=1):
            for r in range(cfg["repeats"]):
                sim = simulate("wasserstein", cfg["n"], 10, seed + r)
                fits = {
                    "GFR": (GlobalFrechetRegressor(sim.space), sim.x, sim.x_test),
                    "oracle LFR": (
                        LocalFrechetRegressor(sim.space, random_state=r),
                        sim.u[:, None],
                        sim.u_test[:, None],
                    ),
                    "DeSI": (DeSI(sim.space, random_state=r), sim.x, sim.x_test),
                }
                for name, (model, x, x_test) in fits.items():
                    start = time.perf_counter()
                    model.fit(x, sim.y).predict(x_test)
                    times[name].append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    med = {k: float(np.median(v)) for k, v in times.items()}
    return [
        {
            "case": f"{name}: fit on {cfg['n']} Wasserstein objects (p = 10) + predict 200, 1 thread",
            "median_seconds": med[name] if correct else None,
            "repeats": cfg["repeats"],
            "DeSI / this (ratio of medians)": med["DeSI"] / med[name] if correct else None,
            "load_average_1min": load,
            "correct": correct,
        }
        for name in times
    ]
