"""Benchmark ``cond-dp-step-time``: wall time of one Cond-DP step (per-sample gradients by ``torch.func``,
conditioning, clipping, noise) against DP-SGD (the same optimizer with no conditioning) and opacus'
``DPOptimizer`` on a ``GradSampleModule``, for a linear model (d = 50) and a two-layer network whose first
layer is conditioned (50 -> 64 -> 1), batch 500, float64, one thread; medians over steps and their
ratios measured in the same run.

Correctness first: with ``C = I`` Cond-DP must equal DP-SGD to the bit after 5 steps, else no timings are
reported.
"""

from __future__ import annotations

import os
import time

import numpy as np

BUDGETS = {"quick": {"steps": 20}, "full": {"steps": 200}}
N, D, B = 10_000, 50, 500


def _data(seed: int):
    import torch

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D)) * np.arange(1, D + 1) ** -1.0
    y = X @ rng.standard_normal(D) + 0.1 * rng.standard_normal(N)
    return X, torch.tensor(X), torch.tensor(y)


def _model(kind: str):
    import torch
    from torch import nn

    torch.manual_seed(0)
    if kind == "linear":
        return nn.Linear(D, 1, dtype=torch.float64), "weight"
    return nn.Sequential(
        nn.Linear(D, 64, dtype=torch.float64), nn.Tanh(), nn.Linear(64, 1, dtype=torch.float64)
    ), "0.weight"


def _ours(kind: str, C, seed: int):
    import torch

    from icml_stats.dp import CondDPSGD

    model, name = _model(kind)
    return model, CondDPSGD(
        model,
        lr=0.1,
        max_grad_norm=1.0,
        noise_multiplier=1.0,
        expected_batch_size=B,
        conditioning=None if C is None else {name: C},
        generator=torch.Generator().manual_seed(seed),
    )


def _correct(X, Xt, yt) -> bool:
    import torch

    outs = []
    for C in (None, np.eye(D)):
        model, opt = _ours("linear", C, 1)
        for _ in range(5):
            idx = opt.poisson_batch(N, B / N)
            opt.step(Xt[idx], yt[idx])
        outs.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    return bool(torch.equal(outs[0], outs[1]))


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    import torch

    from icml_stats.dp import conditioning_matrix

    steps = BUDGETS[budget]["steps"]
    X, Xt, yt = _data(seed)
    correct = _correct(X, Xt, yt)
    C = conditioning_matrix(X - X.mean(0))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows = []
    try:
        for kind in ("linear", "mlp"):
            times: dict[str, list[float]] = {}
            runners = {"DP-SGD": _ours(kind, None, seed)[1], "Cond-DP": _ours(kind, C, seed)[1]}
            try:
                runners["opacus DPOptimizer"] = _opacus(kind, seed)
            except ImportError:
                pass
            gen = torch.Generator().manual_seed(seed)
            batches = [
                torch.nonzero(torch.rand(N, generator=gen) < B / N).reshape(-1) for _ in range(steps + 2)
            ]
            for name, runner in runners.items():
                step = runner.step if name != "opacus DPOptimizer" else runner
                for idx in batches[:2]:  # warm-up
                    step(Xt[idx], yt[idx])
                t = []
                for idx in batches[2:]:
                    start = time.perf_counter()
                    step(Xt[idx], yt[idx])
                    t.append(time.perf_counter() - start)
                times[name] = t
            med = {k: float(np.median(v)) for k, v in times.items()}
            for name in times:
                rows.append(
                    {
                        "case": f"{name}: one step, {kind} ({'d = 50' if kind == 'linear' else '50 -> 64 -> 1, first layer conditioned'}), Poisson batch ~{B}, float64, 1 thread",
                        "median_seconds": med[name] if correct else None,
                        "steps": steps,
                        "this / DP-SGD (ratio of medians)": med[name] / med["DP-SGD"] if correct else None,
                        "load_average_1min": load,
                        "correct": correct,
                    }
                )
    finally:
        torch.set_num_threads(threads)
    return rows


def _opacus(kind: str, seed: int):
    import torch
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    model, _ = _model(kind)
    gsm = GradSampleModule(model)
    opt = DPOptimizer(
        torch.optim.SGD(gsm.parameters(), lr=0.1),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        expected_batch_size=B,
        generator=torch.Generator().manual_seed(seed),
    )

    def step(x, y):
        opt.zero_grad()
        (0.5 * (gsm(x).reshape(-1) - y) ** 2).mean().backward()
        opt.step()

    return step
