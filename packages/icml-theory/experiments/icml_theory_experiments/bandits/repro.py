"""Reproduction ``neurallog-kappa``: does NeuralLog-UCB-2's variance-aware exploration beat NeuralLog-UCB-1,
NeuralUCB, NeuralTS, epsilon-greedy and GLM-UCB when the rewards' minimum variance ``1/κ`` is small?

Testbed, headroom, tuning protocol and criterion are fixed in ``packages/icml-theory/docs/
neural-logistic-bandits.md`` (committed before the first full run) and restated in the returned dict.
Script: ``python -m icml_theory_experiments.bandits.repro --budget full`` (prints the JSON).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
from scipy import stats

from icml_theory_experiments.bandits.environment import make_problem

KAPPAS = (5.0, 50.0, 200.0)
D, K = 8, 10
SHARED: dict[str, Any] = {"lam": 0.01, "lr": 0.03, "steps": 10, "train_every": 5, "width": 32}
BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"T": 600, "seeds": (0, 1), "tune": False},
    "full": {"T": 2000, "seeds": (0, 1, 2, 3, 4), "tune": True},
}
TUNING_SEED = 100
NU_GRID = (0.01, 0.03, 0.1)
EPSILON_GRID = (0.02, 0.05, 0.1)
DEFAULT_KNOB = {"eps-greedy": 0.05}  # quick (no tuning): the grids' middle values
OURS = "NeuralLog-UCB-2"
METHODS = ("NeuralLog-UCB-2", "NeuralLog-UCB-1", "NeuralUCB", "NeuralTS", "eps-greedy", "GLM-UCB")
REFERENCES = ("random", "GLM-UCB (true h)", "greedy")
GREEDY_RATIO = 1.5  # declared revision: exploration pays (greedy >= 1.5x the best method at kappa >= 50)
TESTBED = "fixed"  # the declared revision; "fresh" is the first testbed (docs page)
HEADROOM_RATIO = 5.0
VARIANCE_MAX = 0.1
KAPPA_TOLERANCE = 0.05
NEAR = 0.10  # UCB-1 within 10 % of NeuralUCB at kappa = 5
SLOPE_MAX = 0.8
POINTS = 25  # points of each regret curve in the figures


def _policy(method: str, kappa: float, knob: float | None, seed: int, problem):
    import icml_theory.bandits as b

    nu = 0.03 if knob is None else knob
    if method == "NeuralLog-UCB-2":
        return b.NeuralLogUCB2(D, kappa=kappa, nu=nu, seed=seed, **SHARED)
    if method == "NeuralLog-UCB-1":
        return b.NeuralLogUCB1(D, kappa=kappa, nu=nu, seed=seed, **SHARED)
    if method == "NeuralUCB":
        return b.NeuralUCB(D, nu=nu, seed=seed, **SHARED)
    if method == "NeuralTS":
        return b.NeuralTS(D, nu=nu, seed=seed, **SHARED)
    if method == "eps-greedy":
        return b.EpsilonGreedy(
            D, epsilon=DEFAULT_KNOB["eps-greedy"] if knob is None else knob, seed=seed, **SHARED
        )
    if method == "GLM-UCB":
        return b.GLMUCB(D, nu=nu, seed=seed)
    if method == "greedy":  # NeuralLog-UCB-2 without a bonus: the exploration-headroom reference
        return b.NeuralLogUCB2(D, kappa=kappa, nu=0.0, seed=seed, **SHARED)
    if method == "GLM-UCB (true h)":
        return b.GLMUCB(
            D, nu=nu, seed=seed, features=lambda x: np.stack([problem.logit(x), np.ones(len(x))], 1)
        )
    return b.UniformRandom(D, seed=seed)


def _one(job: tuple) -> dict:
    """One run: ``(method, kappa, knob, seed, T)`` -> final regret, the curve and the problem's statistics."""
    import torch

    from icml_theory.bandits import play

    torch.set_num_threads(1)
    method, kappa, knob, seed, T, arms = job
    problem = make_problem(kappa, T, K=K, d=D, seed=seed, arms=arms)
    start = time.perf_counter()
    run = play(_policy(method, kappa, knob, seed, problem), problem.contexts, problem.rewards, problem.means)
    return {
        "method": method,
        "kappa": kappa,
        "knob": knob,
        "seed": seed,
        "curve": run.cumulative_regret.tolist(),
        "seconds": time.perf_counter() - start,
        "realized kappa": problem.realized_kappa,
        "optimal variance": problem.optimal_variance,
    }


def _map(jobs: list[tuple], workers: int) -> list[dict]:
    if workers <= 1:
        return [_one(j) for j in jobs]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_one, jobs))


def _t_interval(values: np.ndarray) -> tuple[float, float, float]:
    mean = float(values.mean())
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values)))
    return mean, mean - half, mean + half


def _slope(curve: np.ndarray) -> float:
    """Log-log slope of cumulative regret over the second half of the rounds."""
    T = len(curve)
    t = np.arange(T // 2, T) + 1
    y = np.maximum(curve[T // 2 :], 1e-12)
    return float(np.polyfit(np.log(t), np.log(y), 1)[0])


def run(budget: str = "quick", seed: int = 0, workers: int | None = None, testbed: str = TESTBED) -> dict:
    cfg = BUDGETS[budget]
    T, seeds = cfg["T"], tuple(s + seed for s in cfg["seeds"])
    workers = workers or min(2, os.cpu_count() or 1)
    start = time.perf_counter()
    knobs: dict[tuple[str, float], float | None] = {}
    tuning: dict[str, dict[float, float]] = {}
    if cfg["tune"]:  # each method's knob by its final regret on a seed that is not evaluated
        tune_jobs = [
            (m, k, v, TUNING_SEED + seed, T, testbed)
            for k in KAPPAS
            for m in METHODS
            for v in (EPSILON_GRID if m == "eps-greedy" else NU_GRID)
        ]
        for r in _map(tune_jobs, workers):
            tuning.setdefault(f"{r['method']} kappa={r['kappa']:g}", {})[r["knob"]] = r["curve"][-1]
        for k in KAPPAS:
            for m in METHODS:
                scores = tuning[f"{m} kappa={k:g}"]
                knobs[m, k] = min(scores.items(), key=lambda item: item[1])[0]
    jobs: list[tuple] = [
        (m, k, knobs.get((m, k)), s, T, testbed)
        for k in KAPPAS
        for m in (*METHODS, *REFERENCES)
        for s in seeds
    ]
    results = _map(jobs, workers)
    final: dict[tuple[str, float], dict[int, float]] = {(r["method"], r["kappa"]): {} for r in results}
    curves: dict[tuple[str, float], list] = {}
    for r in results:
        final[r["method"], r["kappa"]][r["seed"]] = r["curve"][-1]
        curves.setdefault((r["method"], r["kappa"]), []).append(r["curve"])
    problems = {k: [r for r in results if r["kappa"] == k and r["method"] == "random"] for k in KAPPAS}

    rows: list[dict[str, Any]] = []
    figures: list[dict[str, Any]] = []
    headroom_parts: dict[str, dict[str, Any]] = {}
    claim_parts: dict[str, dict[str, bool]] = {}
    notes: list[str] = []
    for k in KAPPAS:
        vec = {m: np.array([final[m, k][s] for s in seeds]) for m in (*METHODS, *REFERENCES)}
        mean_curve = {m: np.mean(curves[m, k], axis=0) for m in (*METHODS, *REFERENCES)}
        realized = [p["realized kappa"] for p in problems[k]]
        variance = float(np.mean([p["optimal variance"] for p in problems[k]]))
        oracle = float(vec["GLM-UCB (true h)"].mean())
        ratio = float(vec["random"].mean()) / oracle if oracle > 0 else math.inf
        kappa_ok = all(abs(x / k - 1) <= KAPPA_TOLERANCE for x in realized)
        greedy = float(vec["greedy"].mean()) / min(float(vec[m].mean()) for m in METHODS)
        head = (
            ratio >= HEADROOM_RATIO
            and kappa_ok
            and (k < 50 or (variance <= VARIANCE_MAX and greedy >= GREEDY_RATIO))
        )
        headroom_parts[f"kappa={k:g}"] = {
            "random / GLM-UCB(true h)": ratio,
            "greedy / best method": greedy,
            "realized kappa": realized,
            "optimal-arm variance": variance,
            "holds": head,
        }
        slopes = {m: _slope(mean_curve[m]) for m in (*METHODS, *REFERENCES)}
        for m in (*METHODS, *REFERENCES):
            mean, low, high = _t_interval(vec[m])
            row = {
                "kappa": k,
                "method": m,
                "knob": knobs.get((m, k)),
                "final regret": mean,
                "ci low": low,
                "ci high": high,
                "slope (second half)": slopes[m],
            }
            if m != OURS:
                d_mean, d_low, d_high = _t_interval(vec[OURS] - vec[m])
                row.update({"ours - this": d_mean, "diff ci low": d_low, "diff ci high": d_high})
            rows.append(row)
        means = {m: float(vec[m].mean()) for m in METHODS}
        if k < 50:
            part = {
                "UCB-2 <= UCB-1": means[OURS] <= means["NeuralLog-UCB-1"],
                "UCB-1 within 10% of NeuralUCB": abs(means["NeuralLog-UCB-1"] / means["NeuralUCB"] - 1)
                <= NEAR,
            }
        else:
            part = {
                f"UCB-2 below {m}": bool(_t_interval(vec[OURS] - vec[m])[2] < 0) for m in METHODS if m != OURS
            }
        part.update({f"{m} sublinear": slopes[m] < SLOPE_MAX for m in (OURS, "NeuralLog-UCB-1")})
        claim_parts[f"kappa={k:g}"] = part
        idx = np.unique(np.linspace(0, T - 1, POINTS).astype(int))
        figures.append(
            {
                "name": f"regret-kappa{k:g}",
                "title": f"Cumulative regret, kappa = {k:g} (mean of {len(seeds)} seeds)",
                "xlabel": "round",
                "ylabel": "cumulative regret",
                "x": (idx + 1).tolist(),
                "series": {m: mean_curve[m][idx].tolist() for m in (*METHODS, *REFERENCES)},
                "kind": "line",
            }
        )
    headroom = all(h["holds"] for h in headroom_parts.values())
    holds = all(all(p.values()) for p in claim_parts.values())
    failed = [f"{k}: {name}" for k, p in claim_parts.items() for name, ok in p.items() if not ok]
    if not headroom:
        notes.append(
            "NO HEADROOM: " + json.dumps({k: h for k, h in headroom_parts.items() if not h["holds"]})
        )
    hi = next(r for r in rows if r["kappa"] == KAPPAS[-1] and r["method"] == OURS)
    base = min(
        (r for r in rows if r["kappa"] == KAPPAS[-1] and r["method"] in METHODS and r["method"] != OURS),
        key=lambda r: r["final regret"],
    )
    seconds = {
        m: float(np.median([r["seconds"] for r in results if r["method"] == m]))
        for m in (*METHODS, *REFERENCES)
    }
    return {
        "system": "neurallog-kappa",
        "claim": (
            "NeuralLog-UCB-2's variance-weighted confidence (regret O~(d~ sqrt(T/kappa))) beats NeuralLog-UCB-1 "
            "(O~(d~ sqrt(kappa T))) and the neural and GLM baselines when the reward variance is small (large "
            "kappa), and matches them when it is not."
        ),
        "metric": f"final regret at T={T}, kappa={KAPPAS[-1]:g} (mean of {len(seeds)} seeds): NeuralLog-UCB-2 vs the best other method ({base['method']})",
        "ours": hi["final regret"],
        "baseline": base["final regret"],
        "criterion": (
            f"headroom at every kappa: random's final regret >= {HEADROOM_RATIO:g} x GLM-UCB given the true h(x), "
            f"realized kappa within {KAPPA_TOLERANCE:.0%} of its target, and at kappa >= 50 the optimal arm's reward "
            f"variance <= {VARIANCE_MAX} and greedy (UCB-2 with nu = 0) >= {GREEDY_RATIO:g} x the best method's regret; then at kappa = 5 mean UCB-2 <= mean UCB-1 and UCB-1 within {NEAR:.0%} of "
            "NeuralUCB; at kappa >= 50 the paired t 95% interval of (UCB-2 - other) below 0 for every other method; "
            f"log-log slope of UCB-1's and UCB-2's mean cumulative regret over the second half < {SLOPE_MAX}. "
            + (
                f"Each method's nu (epsilon) tuned per kappa on seed {TUNING_SEED + seed} over "
                f"{NU_GRID} ({EPSILON_GRID}); evaluated on seeds {seeds}."
                if cfg["tune"]
                else f"Quick: untuned nu = 0.03, epsilon = 0.05, seeds {seeds}."
            )
        ),
        "passed": bool(headroom and holds),
        "rows": rows,
        "figures": figures,
        "headroom": {"holds": headroom, **headroom_parts},
        "checks": claim_parts,
        "tuning": {k: {str(v): s for v, s in d.items()} for k, d in tuning.items()},
        "threads": f"torch 1 thread per run, {workers} worker processes",
        "notes": (
            f"testbed={testbed} arms, budget={budget}, T={T}, K={K}, d={D}, seeds {seeds}, {time.perf_counter() - start:.0f} s. "
            + (
                "every criterion held"
                if headroom and holds
                else "failed: " + "; ".join(failed)
                if failed
                else ""
            )
            + (" " + " ".join(notes) if notes else "")
            + f". Median seconds per run: {json.dumps({m: round(v, 1) for m, v in seconds.items()})}"
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", choices=("quick", "full"), default="full")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--testbed", choices=("fixed", "fresh"), default=TESTBED)
    args = parser.parse_args()
    print(json.dumps(run(args.budget, args.seed, args.workers, args.testbed), indent=1, default=float))


if __name__ == "__main__":
    main()
