"""Reproduction ``epc-depth``: does error-based predictive coding (ePC) train a 20-layer MLP as well as backprop
while state-based PC (sPC), with the same inference budget, does not, and does ePC's inference converge in far
fewer iterations?

Testbed, budgets and criterion are fixed in ``packages/icml-theory/docs/predictive-coding.md`` (committed
before the first full run) and restated in the returned dict.
Script: ``python -m icml_theory_experiments.pc.repro --budget full`` (prints the JSON).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

DEPTHS = (4, 20)
METHODS = ("BP", "sPC", "ePC")
LR = 1e-3  # Adam, every method
BATCH = 64
INFERENCE: dict[str, Any] = {
    "inference_lr": 0.05,
    "inference_steps": 64,
}  # sPC and ePC alike (the pilot in the docs page)
BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"epochs": 3, "seeds": (0,), "batches": 1, "cap": 512, "reference_iter": 500},
    "full": {"epochs": 20, "seeds": (0, 1, 2), "batches": 3, "cap": 2048, "reference_iter": 2000},
}
ENERGY_TOL = 1e-3  # converged: E_t - E* <= 1e-3 (E_0 - E*), E* from an L-BFGS solve of inference
BP_MIN = 0.90  # headroom: backprop trains the 20-layer MLP
DECAY_MAX = 1e-3  # headroom: sPC's first ten layers get <= 1e-3 of the last layer's gradient norm
EPC_GAP = 2.0  # points: BP - ePC <= 2
SPC_GAP = 10.0  # points: BP - sPC >= 10
SPEEDUP = 10.0  # median sPC iterations / ePC iterations >= 10
FIRST = 10  # "the first ten layers"


def _trainer(method: str, model):
    from icml_theory.pc import EPC, SPC, Backprop

    if method == "BP":
        return Backprop(model, "ce", lr=LR)
    return (SPC if method == "sPC" else EPC)(model, "ce", lr=LR, **INFERENCE)


def _train(job: tuple) -> dict:
    """Train one (method, depth, seed) for ``epochs``: test accuracy and the per-layer gradient norms of every step."""
    import torch

    from icml_theory_experiments.pc.testbed import accuracy, digits, mlp

    torch.set_num_threads(1)
    method, depth, seed, epochs = job
    x, y, x_test, y_test = digits()
    trainer = _trainer(method, mlp(depth, seed))
    gen = torch.Generator().manual_seed(seed)
    norms, losses, skipped = [], [], 0
    start = time.perf_counter()
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=gen).split(BATCH):
            try:
                info = trainer.step(x[idx], y[idx])
            except ValueError:  # inference diverged on this batch: no update, counted and reported
                skipped += 1
                continue
            norms.append(info.grad_norms.numpy())
            losses.append(info.loss)
    n = np.array(norms) if norms else np.full((1, depth), np.nan)  # (steps, depth)
    relative = n / n[:, -1:]
    return {
        "method": method,
        "depth": depth,
        "seed": seed,
        "test accuracy": accuracy(trainer, x_test, y_test),
        "train loss (last epoch)": float(np.mean(losses[-max(1, len(losses) // epochs) :])),
        "decay": float(np.median(relative[:, :FIRST].max(1))) if depth > FIRST else None,
        "relative norms": np.median(relative, 0).tolist(),
        "diverged batches (skipped)": skipped,
        "seconds": time.perf_counter() - start,
    }


def _iterations(job: tuple) -> dict:
    """Inference iterations to the energy tolerance for sPC and ePC on one batch at initialization (float64)."""
    import torch

    from icml_theory.pc import EPC, SPC, equilibrium, iterations_to_tolerance
    from icml_theory_experiments.pc.testbed import digits, mlp

    torch.set_num_threads(1)
    depth, seed, batch, cap, reference_iter = job
    x, y, _, _ = digits(torch.float64)
    xb, yb = x[batch * BATCH : (batch + 1) * BATCH], y[batch * BATCH : (batch + 1) * BATCH]
    model = mlp(depth, seed, dtype=torch.float64)
    eq = equilibrium(model, xb, yb, "ce", tol=1e-9, max_iter=reference_iter)
    out: dict[str, Any] = {
        "depth": depth,
        "seed": seed,
        "batch": batch,
        "equilibrium converged": eq.converged,
    }
    settings = {**INFERENCE, "inference_steps": cap}
    for name, cls in (("sPC", SPC), ("ePC", EPC)):
        _, trace = cls(model, "ce", **settings).infer(xb, yb)
        hit = iterations_to_tolerance(trace, eq.energy, ENERGY_TOL)
        out[name] = hit
        gap = (trace - eq.energy) / (trace[0] - eq.energy)
        out[f"{name} gap"] = gap.clamp_min(1e-16).tolist()
    return out


def _map(fn, jobs: list[tuple], workers: int) -> list[dict]:
    if workers <= 1:
        return [fn(j) for j in jobs]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(fn, jobs))


def _pick(results: list[dict], method: str, depth: int) -> list[dict]:
    return sorted(
        (r for r in results if r["method"] == method and r["depth"] == depth), key=lambda r: r["seed"]
    )


def run(budget: str = "quick", seed: int = 0, workers: int | None = None) -> dict:
    cfg = BUDGETS[budget]
    seeds = tuple(s + seed for s in cfg["seeds"])
    workers = workers or min(2, os.cpu_count() or 1)
    start = time.perf_counter()
    # longest jobs first, so that the two workers finish together
    jobs = [
        (m, d, s, cfg["epochs"])
        for d in sorted(DEPTHS, reverse=True)
        for m in ("sPC", "ePC", "BP")
        for s in seeds
    ]
    it_jobs = [
        (d, s, b, cfg["cap"], cfg["reference_iter"])
        for d in sorted(DEPTHS, reverse=True)
        for s in seeds
        for b in range(cfg["batches"])
    ]
    trained = _map(_train, jobs, workers)
    iterations = _map(_iterations, it_jobs, workers)

    rows: list[dict[str, Any]] = []
    per_depth: dict[int, dict[str, Any]] = {}
    for d in DEPTHS:
        acc = {m: np.array([r["test accuracy"] for r in _pick(trained, m, d)]) * 100 for m in METHODS}
        its = [r for r in iterations if r["depth"] == d]
        ratios = [(r["sPC"] if r["sPC"] is not None else cfg["cap"]) / r["ePC"] for r in its if r["ePC"]]
        per_depth[d] = {
            "BP - ePC (points)": float(np.mean(acc["BP"] - acc["ePC"])),
            "BP - sPC (points)": float(np.mean(acc["BP"] - acc["sPC"])),
            "iterations sPC / ePC (median)": float(np.median(ratios)) if len(ratios) == len(its) else None,
            "sPC censored at cap": sum(r["sPC"] is None for r in its),
            "ePC reached the tolerance": all(r["ePC"] is not None for r in its),
        }
        for m in METHODS:
            for r in _pick(trained, m, d):
                rows.append(
                    {
                        "depth": d,
                        "method": m,
                        "seed": r["seed"],
                        "test accuracy": r["test accuracy"],
                        "train loss (last epoch)": r["train loss (last epoch)"],
                        "first-ten / last gradient norm (median over steps)": r["decay"],
                        "diverged batches (skipped)": r["diverged batches (skipped)"],
                        "seconds": r["seconds"],
                    }
                )
        for r in its:
            rows.append(
                {
                    "depth": d,
                    "method": "inference iterations",
                    "seed": r["seed"],
                    "batch": r["batch"],
                    "sPC": r["sPC"],
                    "ePC": r["ePC"],
                    "equilibrium converged": r["equilibrium converged"],
                }
            )
    deep = max(DEPTHS)
    bp_deep = float(np.mean([r["test accuracy"] for r in _pick(trained, "BP", deep)]))
    decay = float(np.median([r["decay"] for r in _pick(trained, "sPC", deep)]))
    headroom = {"BP accuracy at depth 20": bp_deep, "sPC first-ten / last gradient norm": decay}
    head_ok = bp_deep >= BP_MIN and decay <= DECAY_MAX
    p = per_depth[deep]
    checks = {
        f"BP - ePC <= {EPC_GAP:g} points": p["BP - ePC (points)"] <= EPC_GAP,
        f"BP - sPC >= {SPC_GAP:g} points": p["BP - sPC (points)"] >= SPC_GAP,
        f"sPC / ePC iterations >= {SPEEDUP:g}": p["ePC reached the tolerance"]
        and p["iterations sPC / ePC (median)"] is not None
        and p["iterations sPC / ePC (median)"] >= SPEEDUP,
    }
    passed = head_ok and all(checks.values())

    figures = [_decay_figure(trained, deep), _gap_figure(iterations, deep, seeds[0])]
    ep = float(np.mean([r["test accuracy"] for r in _pick(trained, "ePC", deep)]))
    failed = [k for k, ok in checks.items() if not ok]
    return {
        "system": "epc-depth",
        "claim": (
            "ePC computes exact predictive-coding weight gradients without sPC's exponential signal decay: on a "
            "20-layer MLP it matches backprop's accuracy where sPC, with the same inference budget, falls "
            "behind, and its inference converges in far fewer iterations."
        ),
        "metric": f"digits test accuracy, 20-layer tanh MLP, {cfg['epochs']} epochs (mean of {len(seeds)} seeds): ePC vs BP",
        "ours": ep,
        "baseline": bp_deep,
        "criterion": (
            f"headroom: BP's mean test accuracy at depth 20 >= {BP_MIN:.0%} and sPC's median (over seeds) of the "
            f"median (over training steps) of max over the first {FIRST} layers of |grad theta_l| / |grad theta_20| "
            f"<= {DECAY_MAX:g}; then at depth 20, mean over seeds of BP - ePC <= {EPC_GAP:g} points, of BP - sPC "
            f">= {SPC_GAP:g} points, and the median over (seed, batch) of sPC's / ePC's inference iterations to "
            f"E_t - E* <= {ENERGY_TOL:g} (E_0 - E*) >= {SPEEDUP:g} (sPC censored at {cfg['cap']} counts as {cfg['cap']}; "
            f"ePC must reach it). Adam lr {LR:g}, batch {BATCH}, {cfg['epochs']} epochs, inference lr "
            f"{INFERENCE['inference_lr']}, {INFERENCE['inference_steps']} steps, seeds {seeds}."
        ),
        "passed": bool(passed),
        "rows": rows,
        "figures": figures,
        "headroom": {"holds": head_ok, **headroom},
        "checks": checks,
        "depths": {str(d): v for d, v in per_depth.items()},
        "threads": f"torch 1 thread per run, {workers} worker processes",
        "notes": (
            f"budget={budget}, {time.perf_counter() - start:.0f} s. "
            + ("every criterion held" if passed else "failed: " + "; ".join(failed) if failed else "")
            + ("" if head_ok else f" NO HEADROOM: {json.dumps(headroom)}")
            + ". Median seconds per training run: "
            + json.dumps(
                {
                    f"{m} depth {d}": round(float(np.median([r["seconds"] for r in _pick(trained, m, d)])), 1)
                    for d in DEPTHS
                    for m in METHODS
                }
            )
        ),
    }


def _decay_figure(trained: list[dict], depth: int) -> dict:
    return {
        "name": "signal-decay",
        "title": f"Per-layer weight-gradient norm / last layer's, depth {depth} (median over steps and seeds)",
        "xlabel": "layer",
        "ylabel": "|grad theta_l| / |grad theta_L|",
        "x": list(range(1, depth + 1)),
        "series": {
            m: np.median([r["relative norms"] for r in _pick(trained, m, depth)], 0).tolist() for m in METHODS
        },
        "kind": "line",
        "logy": True,
    }


def _gap_figure(iterations: list[dict], depth: int, seed: int) -> dict:
    r = next(r for r in iterations if r["depth"] == depth and r["seed"] == seed and r["batch"] == 0)
    steps = len(r["sPC gap"])
    idx = np.unique(np.geomspace(1, steps, 40).astype(int)) - 1
    return {
        "name": "energy-gap",
        "title": f"Inference: (E_t - E*) / (E_0 - E*), depth {depth}, one batch at initialization",
        "xlabel": "inference step",
        "ylabel": "relative energy gap",
        "x": (idx + 1).tolist(),
        "series": {m: np.array(r[f"{m} gap"])[idx].tolist() for m in ("sPC", "ePC")},
        "kind": "line",
        "logx": True,
        "logy": True,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", choices=("quick", "full"), default="full")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    print(json.dumps(run(args.budget, args.seed, args.workers), indent=1, default=float))


if __name__ == "__main__":
    main()
