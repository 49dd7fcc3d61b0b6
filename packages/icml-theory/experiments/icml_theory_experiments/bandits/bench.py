"""Benchmark ``neurallog-confidence``: time per round of the full confidence matrix against the diagonal one,
and of Sherman–Morrison against explicit re-inversion, at T rounds (2000 in the full budget).

Two measurements, medians of ``REPEATS`` runs:

* ``confidence ops``: one round's work on the matrix alone, ``update(g)`` then ``norms`` of K = 10 rows, on
  random gradient-sized vectors of length ``p`` (the parameter count of width-32 and width-128 networks,
  d = 8). A round costs the same at every t, so explicit re-inversion (``O(p³)`` a round) is timed over
  its first ``EXPLICIT_ROUNDS[p]`` rounds only. Correctness first: after the T updates, the
  Sherman–Morrison inverse must equal ``inv`` of its matrix (relative Frobenius error <= 1e-8); otherwise
  the ratio is left empty.
* ``round``: NeuralLog-UCB-2 end to end (select, update, training) on the ``neurallog-kappa`` problem
  (kappa = 50) for T rounds with each matrix (one run each: explicit inversion makes repeats slow).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from icml_theory.bandits import DiagonalConfidence, FullConfidence, NeuralLogUCB2, RewardNetwork, play
from icml_theory_experiments.bandits.environment import make_problem

BUDGET = {"quick": {"T": 200, "repeats": 1}, "full": {"T": 2000, "repeats": 3}}
WIDTHS = (32, 128)
D, K = 8, 10
KINDS = ("sherman-morrison", "explicit", "diagonal")
EXPLICIT_ROUNDS = {32: 200, 128: 20}  # by width


def _matrix(kind: str, p: int):
    return DiagonalConfidence(p, 0.01) if kind == "diagonal" else FullConfidence(p, 0.01, method=kind)


def _ops(kind: str, p: int, T: int, seed: int) -> tuple[float, FullConfidence | DiagonalConfidence]:
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(T, p, generator=gen, dtype=torch.float64) / p**0.5
    rows = torch.randn(K, p, generator=gen, dtype=torch.float64) / p**0.5
    m = _matrix(kind, p)
    start = time.perf_counter()
    for t in range(T):
        m.update(g[t])
        m._norms(rows)
    return (time.perf_counter() - start) / T, m


def _round(kind: str, T: int, seed: int) -> float:
    problem = make_problem(50.0, T, K=K, d=D, seed=seed)
    confidence = "diagonal" if kind == "diagonal" else "full"
    policy = NeuralLogUCB2(D, kappa=50.0, confidence=confidence, seed=seed)
    if kind == "explicit":
        assert policy.confidence is not None
        policy.confidence = FullConfidence(policy.confidence.dim, policy.lam, method="explicit")
    start = time.perf_counter()
    play(policy, problem.contexts, problem.rewards, problem.means)
    return (time.perf_counter() - start) / T


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = BUDGET[budget]
        T, repeats = cfg["T"], cfg["repeats"]
        rows = []
        for width in WIDTHS:
            p = RewardNetwork(D, width).num_parameters
            times: dict[str, list[float]] = {k: [] for k in KINDS}
            mats: dict[str, FullConfidence | DiagonalConfidence] = {}
            for _ in range(repeats):
                for k in KINDS:
                    s, mats[k] = _ops(k, p, min(T, EXPLICIT_ROUNDS[width]) if k == "explicit" else T, seed)
                    times[k].append(s)
            sm = mats["sherman-morrison"]
            assert isinstance(sm, FullConfidence)
            exact = torch.linalg.inv(sm.matrix)
            err = float(torch.linalg.norm(sm.inverse - exact) / torch.linalg.norm(exact))
            correct = err <= 1e-8
            med = {k: float(np.median(v)) for k, v in times.items()}
            for k in KINDS:
                rows.append(
                    {
                        "measure": "confidence ops",
                        "p": p,
                        "T": min(T, EXPLICIT_ROUNDS[width]) if k == "explicit" else T,
                        "impl": k,
                        "correct": correct,
                        "SM relative error": err,
                        "median_ms_per_round": round(1e3 * med[k], 4),
                        "explicit / this": round(med["explicit"] / med[k], 2) if correct else None,
                        "this / diagonal": round(med[k] / med["diagonal"], 2),
                    }
                )
        p = RewardNetwork(D, 32).num_parameters
        med = {k: _round(k, T, seed) for k in KINDS}
        for k in KINDS:
            rows.append(
                {
                    "measure": "round (NeuralLog-UCB-2, width 32)",
                    "p": p,
                    "T": T,
                    "impl": k,
                    "median_ms_per_round": round(1e3 * med[k], 3),
                    "explicit / this": round(med["explicit"] / med[k], 2),
                    "this / diagonal": round(med[k] / med["diagonal"], 2),
                }
            )
        return rows
    finally:
        torch.set_num_threads(threads)
