"""Reproduction ``cond-dp-spectra``: Cond-DP beats DP-SGD in label-private linear regression when the public
features have a decaying spectrum, most at the smallest epsilon, and matches it on isotropic features.

Synthetic tasks (:func:`.testbed.spectral`): ``n = 10,000``, ``d = 50``, decay ``a`` in {0, 0.5, 1, 2},
``epsilon`` in {0.5, 1, 2, 4, 8} at ``delta = 1/n``, label DP (replace one label). Both private methods
run :class:`icml_stats.dp.CondDPRegressor` with the same batch (expected 500, Poisson), steps (100: 5
epochs), clip bound (1) and noise multiplier (calibrated once per epsilon by icml-theory's optimal
accountant); Cond-DP uses ``conditioning="svd"`` (the paper's ``V Sigma^-1 V^T``, rms-normalized), DP-SGD
``conditioning="identity"``. The learning rate is chosen per (method, a, epsilon) from a grid by the
median validation MSE over tuning seeds 1000.. (fresh data and noise, disjoint from the evaluation seeds;
this tuning is not charged to the privacy budget, as in the paper's protocol of tuned baselines: a real
user would pay for it). Evaluation: seeds 0..19, the same data and noise seed for both methods (paired);
non-private OLS and the Laplace label-noise baseline (labels clipped to [-3, 3]) alongside.

Criterion (fixed in docs/cond-dp.md before the first full run):

* headroom: for every a >= 0.5 at epsilon = 1, median over seeds of MSE(DP-SGD) / MSE(OLS) >= 2; the
  condition number of X^T X is reported per a;
* for every a >= 0.5 and every epsilon, the mean over seeds of log MSE(Cond-DP) - log MSE(DP-SGD) has a
  paired-bootstrap 95 % interval (10,000 resamples, seed 0) entirely below 0;
* for every a >= 0.5 the relative gain (minus that mean) is largest at the smallest epsilon;
* at a = 0 the interval lies within +-log(1.05) at every epsilon.

Real data (no criterion): diabetes and statsmodels' ``fair``, 75/25 splits, epsilon in {1, 4}, the same
protocol. Budgets: quick a in {0, 1}, epsilon = 1, 2 seeds, 1 tuning seed, 3 learning rates, diabetes
only (informative: two seeds cannot make a bootstrap interval); full as above with 3 tuning seeds, 5
learning rates and 10 real-data seeds.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
from sklearn.linear_model import LinearRegression
from threadpoolctl import threadpool_limits

from icml_stats.dp import CondDPRegressor, DivergedError, LaplaceLabelRegressor
from icml_stats_experiments.dp.testbed import N_TRAIN, Task, condition_number, real, spectral

BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {
        "decays": (0.0, 1.0),
        "epsilons": (1.0,),
        "seeds": 2,
        "tune_seeds": 1,
        "lrs": (0.1, 0.3, 1.0),
        "datasets": ("diabetes",),
        "real_epsilons": (1.0,),
        "real_seeds": 2,
    },
    "full": {
        "decays": (0.0, 0.5, 1.0, 2.0),
        "epsilons": (0.5, 1.0, 2.0, 4.0, 8.0),
        "seeds": 20,
        "tune_seeds": 3,
        "lrs": (0.03, 0.1, 0.3, 1.0, 3.0),
        "datasets": ("diabetes", "fair"),
        "real_epsilons": (1.0, 4.0),
        "real_seeds": 10,
    },
}
# (expected batch size, epochs) per task family; the clip bound is 1 everywhere
SETTINGS = {"synthetic": (500, 5.0), "diabetes": (33, 20.0), "fair": (240, 5.0)}
CLIP = 1.0
TUNE_SEED0 = 1000
HEADROOM_MIN = 2.0
NULL_BAND = math.log(1.05)
PRIVATE = ("DP-SGD", "Cond-DP")
# method -> (conditioning, power); "Cond-DP p=0.5" is the tempered member of the family (sweep.py only)
CONDITIONING = {"DP-SGD": ("identity", 1.0), "Cond-DP": ("svd", 1.0), "Cond-DP p=0.5": ("svd", 0.5)}


def task(name: str, seed: int) -> Task:
    """``"a=<decay>"`` for the synthetic task, else a real dataset."""
    return spectral(float(name[2:]), seed) if name.startswith("a=") else real(name, seed)


def family(name: str) -> str:
    return "synthetic" if name.startswith("a=") else name


def fit_mse(job: tuple) -> tuple[tuple, float]:
    """One fit: ``(task, epsilon, method, lr, seed, sigma)`` -> test MSE (inf if the run diverged)."""
    name, eps, method, lr, seed, sigma = job
    import torch

    torch.set_num_threads(1)
    t = task(name, seed)
    with threadpool_limits(limits=1):
        if method == "OLS":
            model: Any = LinearRegression()
        elif method == "Laplace":
            model = LaplaceLabelRegressor(eps, label_bound=t.label_bound, random_state=seed)
        else:
            batch, epochs = SETTINGS[family(name)]
            conditioning, power = CONDITIONING[method]
            model = CondDPRegressor(
                conditioning=conditioning,
                power=power,
                lr=lr,
                max_grad_norm=CLIP,
                batch_size=batch,
                epochs=epochs,
                noise_multiplier=sigma,
                random_state=seed,
            )
        try:
            pred = model.fit(t.x, t.y).predict(t.x_test)
        except DivergedError:
            return job, math.inf
    mse = float(np.mean((pred - t.y_test) ** 2))
    return job, mse if math.isfinite(mse) else math.inf


def noise_for(job: tuple[str, float]) -> tuple[tuple[str, float], float]:
    """The noise multiplier of ``(task family, epsilon)``: (epsilon, 1/n) label DP, replace-one."""
    from icml_stats.dp import calibrate_noise

    fam, eps = job
    n = N_TRAIN if fam == "synthetic" else len(task(fam, 0).y)
    batch, epochs = SETTINGS[fam]
    q = batch / n
    return job, calibrate_noise(eps, 1.0 / n, q, max(1, round(epochs * n / batch)), "replace-one")


def pmap(pool: ProcessPoolExecutor | None, fn, jobs: list) -> list:
    """``fn`` over ``jobs`` in the worker processes (one pool for every phase: torch starts once per worker)."""
    if pool is None:
        return [fn(j) for j in jobs]
    return list(pool.map(fn, jobs, chunksize=max(1, len(jobs) // 16)))


def paired_bootstrap_interval(d, resamples: int = 10_000, seed: int = 0) -> list[float]:
    """95 % percentile-bootstrap interval of the mean of paired differences ``d`` (seeds resampled)."""
    d = np.asarray(d, dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(d), size=(resamples, len(d)))
    return np.quantile(d[idx].mean(axis=1), [0.025, 0.975]).tolist()


def run(budget: str = "quick", seed: int = 0, workers: int | None = None) -> dict:
    workers = workers or min(2, os.cpu_count() or 1)
    if workers <= 1:
        return experiment(budget, seed, None, workers)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return experiment(budget, seed, pool, workers)


def experiment(budget: str, seed: int, pool: ProcessPoolExecutor | None, workers: int) -> dict:
    cfg = BUDGETS[budget]
    start = time.perf_counter()
    synth = [f"a={a:g}" for a in cfg["decays"]]
    grid = [(name, eps) for name in synth for eps in cfg["epsilons"]]
    grid += [(name, eps) for name in cfg["datasets"] for eps in cfg["real_epsilons"]]
    fams = sorted({(family(name), eps) for name, eps in grid})
    sigma = dict(pmap(pool, noise_for, fams))
    seconds_noise = time.perf_counter() - start

    # 1. learning rate per (task, epsilon, method) on tuning seeds (disjoint from the evaluation seeds)
    tune = [
        (name, eps, m, lr, TUNE_SEED0 + seed + s, sigma[family(name), eps])
        for name, eps in grid
        for m in PRIVATE
        for lr in cfg["lrs"]
        for s in range(cfg["tune_seeds"])
    ]
    tuned = pmap(pool, fit_mse, tune)
    chosen: dict[tuple[str, float, str], float] = {}
    validation: dict[str, dict[str, float]] = {}
    for name, eps in grid:
        for m in PRIVATE:
            med = {
                lr: float(np.median([v for j, v in tuned if j[:4] == (name, eps, m, lr)]))
                for lr in cfg["lrs"]
            }
            chosen[name, eps, m] = min(med, key=lambda lr: (med[lr], lr))
            validation[f"{name} eps={eps:g} {m}"] = med

    # 2. evaluation: paired seeds, the chosen learning rates, OLS and the Laplace baseline
    evals = []
    for name, eps in grid:
        seeds = range(seed, seed + (cfg["seeds"] if name in synth else cfg["real_seeds"]))
        for s in seeds:
            evals += [(name, eps, m, chosen[name, eps, m], s, sigma[family(name), eps]) for m in PRIVATE]
            evals += [(name, eps, "Laplace", 0.0, s, 0.0), (name, eps, "OLS", 0.0, s, 0.0)]
    results = pmap(pool, fit_mse, evals)
    mse: dict[tuple[str, float, str], list[float]] = {}
    for j, v in results:
        mse.setdefault((j[0], j[1], j[2]), []).append(v)

    summaries: dict[str, Any] = {}
    for name, eps in grid:
        per = {m: np.array(mse[name, eps, m]) for m in (*PRIVATE, "Laplace", "OLS")}
        with np.errstate(invalid="ignore"):
            diff = np.log(per["Cond-DP"]) - np.log(per["DP-SGD"])
        finite = bool(np.isfinite(diff).all())
        summaries[f"{name} eps={eps:g}"] = {
            "task": name,
            "epsilon": eps,
            "noise multiplier": sigma[family(name), eps],
            "learning rate": {m: chosen[name, eps, m] for m in PRIVATE},
            "median MSE": {m: float(np.median(v)) for m, v in per.items()},
            "median MSE(DP-SGD) / MSE(OLS)": float(np.median(per["DP-SGD"] / per["OLS"])),
            "mean log MSE(Cond-DP) - log MSE(DP-SGD)": float(diff.mean()) if finite else math.nan,
            "paired bootstrap 95% interval": paired_bootstrap_interval(diff) if finite else [math.nan] * 2,
            "seeds": len(diff),
        }

    # 3. the criterion (synthetic tasks)
    decays = [a for a in cfg["decays"] if a >= 0.5]
    smallest = min(cfg["epsilons"])
    head_eps = 1.0 if 1.0 in cfg["epsilons"] else smallest
    headroom_ratio = {
        f"a={a:g}": summaries[f"a={a:g} eps={head_eps:g}"]["median MSE(DP-SGD) / MSE(OLS)"] for a in decays
    }
    headroom = bool(decays) and all(r >= HEADROOM_MIN for r in headroom_ratio.values())
    checks: dict[str, bool] = {}
    for a in decays:
        rows = [summaries[f"a={a:g} eps={e:g}"] for e in cfg["epsilons"]]
        checks[f"a={a:g}: Cond-DP below DP-SGD at every epsilon (interval < 0)"] = all(
            r["paired bootstrap 95% interval"][1] < 0 for r in rows
        )
        gains = {r["epsilon"]: -r["mean log MSE(Cond-DP) - log MSE(DP-SGD)"] for r in rows}
        if len(gains) > 1:
            checks[f"a={a:g}: largest gain at epsilon = {smallest:g}"] = (
                max(gains, key=lambda e: gains[e]) == smallest
            )
    if 0.0 in cfg["decays"]:
        checks["a=0: interval within +-log(1.05) at every epsilon"] = all(
            -NULL_BAND <= lo and hi <= NULL_BAND
            for e in cfg["epsilons"]
            for lo, hi in [summaries[f"a=0 eps={e:g}"]["paired bootstrap 95% interval"]]
        )
    passed = headroom and all(checks.values())
    failed = [k for k, ok in checks.items() if not ok]
    figures = [
        {
            "name": f"cond_dp_{name.replace('=', '').replace('.', '_')}",
            "title": f"{name}: median test MSE against epsilon (label DP, delta = 1/n)",
            "xlabel": "epsilon",
            "ylabel": "median test MSE",
            "x": list(cfg["epsilons"] if name in synth else cfg["real_epsilons"]),
            "series": {
                m: [
                    summaries[f"{name} eps={e:g}"]["median MSE"][m]
                    for e in (cfg["epsilons"] if name in synth else cfg["real_epsilons"])
                ]
                for m in (*PRIVATE, "Laplace", "OLS")
            },
            "kind": "line",
            "logx": True,
            "logy": True,
        }
        for name in (*synth, *cfg["datasets"])
    ]
    main = f"a={max(cfg['decays']):g} eps={smallest:g}"
    return {
        "system": "cond-dp-spectra",
        "claim": (
            "Conditioning DP-SGD with a matrix built from the public features' SVD lowers the test MSE of "
            "label-private linear regression when the feature spectrum decays, most at small epsilon, at "
            "no privacy cost; on isotropic features it matches DP-SGD."
        ),
        "metric": f"synthetic {main}: median test MSE; ours: Cond-DP, baseline: DP-SGD (same B, T, sigma, clip)",
        "ours": summaries[main]["median MSE"]["Cond-DP"],
        "baseline": summaries[main]["median MSE"]["DP-SGD"],
        "criterion": (
            f"headroom: median MSE(DP-SGD)/MSE(OLS) >= {HEADROOM_MIN} at epsilon = 1 for every a >= 0.5; then "
            "for every a >= 0.5 and epsilon the paired-bootstrap 95% interval of mean log MSE(Cond-DP) - log "
            "MSE(DP-SGD) lies below 0, the gain is largest at the smallest epsilon, and at a = 0 the interval "
            f"lies within +-log(1.05). Seeds {seed}..{seed + cfg['seeds'] - 1}, learning rates tuned on seeds "
            f"{TUNE_SEED0 + seed}.., delta = 1/n, replace-one label DP. This budget ({budget}) judges decays "
            f"{list(cfg['decays'])} at epsilons {list(cfg['epsilons'])}"
            + ("" if len(cfg["epsilons"]) > 1 else ": with one epsilon the largest-gain check does not apply")
            + "; the checks run are listed under 'checks'."
        ),
        "passed": bool(passed),
        "headroom": {
            "holds": headroom,
            f"median MSE(DP-SGD) / MSE(OLS) at epsilon = {head_eps:g}": headroom_ratio,
            "condition number of X^T X": {f"a={a:g}": condition_number(a) for a in cfg["decays"]},
        },
        "checks": checks,
        "summaries": summaries,
        "validation median MSE per learning rate": validation,
        "figures": figures,
        "threads": f"1 thread per fit (torch and BLAS), {workers} worker processes",
        "notes": (
            f"budget={budget}, {time.perf_counter() - start:.0f} s ({seconds_noise:.0f} s calibrating the noise). "
            + ("every criterion held" if passed else ("failed: " + "; ".join(failed)) if failed else "")
            + ("" if headroom else " NO HEADROOM")
        ),
    }
