"""Mechanism diagnostic of ``neurallog-kappa``'s first testbed (fresh arms; docs page, "Results"): how much
does exploration matter there? NeuralLog-UCB-2 with ``ν = 0`` (pure greedy on the logistic network, no bonus at all) on the
evaluation seeds at every κ, beside the testbed's effective dimension ``d̃`` (NTK Gram over 1,000 of its
contexts at initialization, ``λ = 0.01``).

``uv run python -m icml_theory_experiments.bandits.diagnose`` (prints the JSON; ~2 min on 2 cores).
"""

from __future__ import annotations

import json

import numpy as np
import torch

from icml_theory.bandits import RewardNetwork, effective_dimension, ntk_gram
from icml_theory_experiments.bandits import repro
from icml_theory_experiments.bandits.environment import make_problem


def run(T: int = 2000, seeds: tuple[int, ...] = (0, 1, 2, 3, 4), workers: int = 2) -> dict:
    jobs: list[tuple] = [(repro.OURS, k, 0.0, s, T, "fresh") for k in repro.KAPPAS for s in seeds]
    results = repro._map(jobs, workers)
    greedy = {}
    for k in repro.KAPPAS:
        finals = np.array([r["curve"][-1] for r in results if r["kappa"] == k])
        mean, low, high = repro._t_interval(finals)
        greedy[f"kappa={k:g}"] = {"greedy final regret": mean, "ci": [low, high], "per seed": finals.tolist()}
    torch.set_num_threads(1)
    problem = make_problem(50.0, 100, K=repro.K, d=repro.D, seed=0)
    net = RewardNetwork(repro.D, repro.SHARED["width"], seed=0)
    gram = ntk_gram(net, problem.contexts.reshape(-1, repro.D))
    d_eff = effective_dimension(gram, repro.SHARED["lam"])
    return {
        "greedy (NeuralLog-UCB-2, nu = 0)": greedy,
        "effective dimension (1000 contexts)": d_eff,
        "parameters": net.num_parameters,
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=1, default=float))
