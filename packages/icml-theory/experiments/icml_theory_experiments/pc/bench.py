"""Benchmark ``epc-throughput``: training steps per second of ePC against backprop (and sPC) on the same model
and batches, the ``epc-depth`` MLPs (depth 4 and 20, width 64, batch 64, 64 inference steps at lr 0.05).

Correctness first: on the float64 4-layer tanh MLP of the tests, ePC's weight gradient after 800 inference
steps must equal the L-BFGS equilibrium gradient to <= 1e-6 relative; otherwise the ratios are left empty.
Medians of ``repeats`` timings of ``steps`` training steps each (CUDA synchronized when on a GPU). One
inference step costs about one forward and backward pass, so ePC's step costs about ``inference_steps``
backprop steps: the ratio says what exact PC gradients cost on digital hardware.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from icml_theory.pc import EPC, SPC, Backprop, equilibrium, relative_error
from icml_theory_experiments.pc.repro import BATCH, INFERENCE, LR
from icml_theory_experiments.pc.testbed import mlp

BUDGET: dict[str, dict[str, Any]] = {
    "quick": {"depths": (4,), "steps": 3, "repeats": 3},
    "full": {"depths": (4, 20), "steps": 10, "repeats": 5},
}
METHODS = {"BP": Backprop, "sPC": SPC, "ePC": EPC}


def _correct() -> float:
    """ePC's gradient against the equilibrium gradient on a float64 4-layer tanh MLP (width 16, batch 8)."""
    gen = torch.Generator().manual_seed(0)
    model = mlp(4, 0, width=16, dtype=torch.float64)
    x = torch.rand(8, 64, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 10, (8,), generator=gen)
    reference = equilibrium(model, x, y, "ce", tol=1e-11).gradients
    EPC(model, "ce", inference_lr=0.1, inference_steps=800).gradients(x, y)
    return relative_error([p.grad for p in model.parameters() if p.grad is not None], reference)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    cfg = BUDGET[budget]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        err = _correct()
        correct = err <= 1e-6
        gen = torch.Generator().manual_seed(seed)
        x = torch.rand(BATCH, 64, generator=gen).to(device)
        y = torch.randint(0, 10, (BATCH,), generator=gen).to(device)
        rows = []
        for depth in cfg["depths"]:
            med = {}
            for name, cls in METHODS.items():
                kwargs = {} if name == "BP" else INFERENCE
                trainer = cls(mlp(depth, seed).to(device), "ce", lr=LR, **kwargs)
                trainer.step(x, y)  # warm-up
                times = []
                for _ in range(cfg["repeats"]):
                    _sync(device)
                    start = time.perf_counter()
                    for _ in range(cfg["steps"]):
                        trainer.step(x, y)
                    _sync(device)
                    times.append((time.perf_counter() - start) / cfg["steps"])
                med[name] = float(np.median(times))
            for name in METHODS:
                rows.append(
                    {
                        "depth": depth,
                        "method": name,
                        "device": device.type,
                        "batch": BATCH,
                        "inference steps": 0 if name == "BP" else INFERENCE["inference_steps"],
                        "correct": correct,
                        "ePC gradient relative error": err,
                        "median_ms_per_step": round(1e3 * med[name], 3),
                        "steps_per_s": round(1.0 / med[name], 2),
                        "throughput / BP": round(med["BP"] / med[name], 4) if correct else None,
                        "this / ePC": round(med[name] / med["ePC"], 3) if correct else None,
                    }
                )
        return rows
    finally:
        torch.set_num_threads(threads)
