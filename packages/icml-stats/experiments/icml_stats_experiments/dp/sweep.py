"""Follow-up study of ``cond-dp-spectra`` (run after the verdict; it does not change it): does the tempered
conditioning ``power = 0.5`` (``C = V Sigma^-1/2 V^T``, rms-normalized) or a wider learning-rate grid
change the picture at the decays where the full conditioning lost (a = 2) or won (a = 1)?

Same tasks, batch, steps, clip and noise as the reproduction; a in {1, 2}, epsilon in {0.5, 8}; DP-SGD,
Cond-DP and Cond-DP with power 0.5, each with its learning rate chosen from {0.1, 0.3, 1, 3, 10, 30} on
tuning seeds 1000-1002; evaluation seeds 0-19, paired. Writes ``cond_dp_sweep.json``::

    uv run python -m icml_stats_experiments.dp.sweep packages/icml-stats/docs/cond_dp_sweep.json
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from icml_stats_experiments.dp.repro import TUNE_SEED0, fit_mse, noise_for, paired_bootstrap_interval, pmap

DECAYS, EPSILONS, SEEDS, TUNE_SEEDS = (1.0, 2.0), (0.5, 8.0), 20, 3
LRS = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0)
METHODS = ("DP-SGD", "Cond-DP", "Cond-DP p=0.5")


def main(out: str) -> dict:
    start = time.perf_counter()
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        sigma = dict(pmap(pool, noise_for, [("synthetic", e) for e in EPSILONS]))
        grid = [(f"a={a:g}", e) for a in DECAYS for e in EPSILONS]
        tune = [
            (name, e, m, lr, TUNE_SEED0 + s, sigma["synthetic", e])
            for name, e in grid
            for m in METHODS
            for lr in LRS
            for s in range(TUNE_SEEDS)
        ]
        tuned = pmap(pool, fit_mse, tune)
        chosen = {}
        for name, e in grid:
            for m in METHODS:
                med = {lr: float(np.median([v for j, v in tuned if j[:4] == (name, e, m, lr)])) for lr in LRS}
                chosen[name, e, m] = min(med, key=lambda lr: (med[lr], lr))
        evals = [
            (name, e, m, chosen[name, e, m], s, sigma["synthetic", e])
            for name, e in grid
            for m in METHODS
            for s in range(SEEDS)
        ]
        res = pmap(pool, fit_mse, evals)
    rows = {}
    for name, e in grid:
        mse = {m: np.array([v for j, v in res if j[:3] == (name, e, m)]) for m in METHODS}
        rows[f"{name} eps={e:g}"] = {
            "learning rate": {m: chosen[name, e, m] for m in METHODS},
            "median MSE": {m: float(np.median(v)) for m, v in mse.items()},
            **{
                f"mean log MSE({m}) - log MSE(DP-SGD)": float(np.mean(np.log(mse[m]) - np.log(mse["DP-SGD"])))
                for m in METHODS[1:]
            },
            **{
                f"paired bootstrap 95% interval ({m})": paired_bootstrap_interval(
                    np.log(mse[m]) - np.log(mse["DP-SGD"])
                )
                for m in METHODS[1:]
            },
        }
    report = {"seconds": time.perf_counter() - start, "learning rates": LRS, "seeds": SEEDS, "rows": rows}
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    return report


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cond_dp_sweep.json")
