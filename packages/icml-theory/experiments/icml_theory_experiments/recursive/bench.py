"""Benchmark ``trm-dis-throughput``: examples per second of TRM against DIS in training (one batch through deep
supervision, TRM's halting head untrained so it runs all 16 steps) and in inference (all steps), at the
``trm-vs-dis`` sizes (hidden 32, expansion 2, 6x6 Sudoku, batch 32).

Correctness first: the evaluation counter must read 336 (TRM) and 18 (DIS) per example in inference;
otherwise the ratios are left empty. Medians of ``repeats`` timings (CUDA synchronized when on a GPU).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from icml_theory.recursive import RecursiveModel, RecursiveTrainer, count_evaluations, predict
from icml_theory_experiments.recursive.puzzles import SUDOKU_VOCAB, sudoku_dataset
from icml_theory_experiments.recursive.repro import BATCH, BLANKS, LR, model_config

BUDGET: dict[str, dict[str, Any]] = {"quick": {"repeats": 2}, "full": {"repeats": 5}}
EXPECTED = {"TRM": 336, "DIS": 18}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _median_seconds(fn, repeats: int, device: torch.device) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    cfg = BUDGET[budget]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        x, y = sudoku_dataset(BATCH, 10 + seed, BLANKS)
        x, y = x.to(device), y.to(device)
        timing: dict[str, dict[str, float]] = {}
        counted: dict[str, float] = {}
        for name in EXPECTED:
            model = RecursiveModel(model_config(name, SUDOKU_VOCAB, x.shape[1]), seed=seed).to(device)
            trainer = RecursiveTrainer(model, lr=LR, seed=seed)
            with count_evaluations(model) as counter:
                predict(model, x)
            counted[name] = counter.per_example(len(x))
            timing[name] = {
                "train": _median_seconds(lambda t=trainer: t.train_batch(x, y), cfg["repeats"], device),
                "inference": _median_seconds(lambda m=model: predict(m, x), cfg["repeats"], device),
            }
        correct = all(counted[k] == v for k, v in EXPECTED.items())
        rows = []
        for phase in ("train", "inference"):
            for name in EXPECTED:
                rows.append(
                    {
                        "phase": phase,
                        "method": name,
                        "device": device.type,
                        "batch": BATCH,
                        "evaluations per example (counted)": counted[name],
                        "correct": correct,
                        "median_ms_per_batch": round(1e3 * timing[name][phase], 2),
                        "examples_per_s": round(BATCH / timing[name][phase], 1),
                        "DIS / TRM speed": round(timing["TRM"][phase] / timing["DIS"][phase], 2)
                        if correct
                        else None,
                    }
                )
        return rows
    finally:
        torch.set_num_threads(threads)
