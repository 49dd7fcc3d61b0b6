"""Mechanism diagnostic of ``neurallog-kappa``'s first testbed (fresh arms; docs page, "Results"): how much
does exploration matter there? NeuralLog-UCB-2 with ``ν = 0`` (pure greedy on the logistic network, no bonus at all) on the
evaluation seeds at every κ, beside the testbed's effective dimension ``d̃`` (NTK Gram over 1,000 of its
contexts at initialization, ``λ = 0.01``).

``uv run python -m icml_theory_experiments.bandits.diagnose`` (prints the JSON; ~2 min on 2 cores).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from icml_theory.bandits import RewardNetwork, effective_dimension, ntk_gram, play
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


# the knobs the revised full run tuned (docs page): (method, kappa, nu)
TUNED = (
    ("NeuralLog-UCB-2", 200.0, 0.1),
    ("NeuralTS", 200.0, 0.01),
    ("NeuralLog-UCB-2", 50.0, 0.1),
    ("NeuralTS", 50.0, 0.01),
)


def locking(T: int = 2000, seeds: tuple[int, ...] = (0, 1, 2, 3, 4)) -> dict:
    torch.set_num_threads(1)
    out = {}
    for method, kappa, knob in TUNED:
        rows = []
        for s in seeds:
            problem = make_problem(kappa, T, K=repro.K, d=repro.D, seed=s, arms="fixed")
            policy = repro._policy(method, kappa, knob, s, problem)
            result = play(policy, problem.contexts, problem.rewards, problem.means)
            last, best = result.arms[-500:], int(problem.means[0].argmax())
            top = int(np.bincount(last, minlength=repro.K).argmax())
            rows.append(
                {
                    "seed": s,
                    "final regret": float(result.cumulative_regret[-1]),
                    "best-arm share, last 500": float((last == best).mean()),
                    "mean of the arm played most, last 500": float(problem.means[0, top]),
                    "best mean": float(problem.means[0, best]),
                }
            )
        out[f"{method} kappa={kappa:g} nu={knob}"] = rows
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("greedy", "locking", "all"), default="all")
    part = parser.parse_args().part
    result = {}
    if part in ("greedy", "all"):
        result["greedy (fresh arms)"] = run()
    if part in ("locking", "all"):
        result["locking (fixed arms)"] = locking()
    print(json.dumps(result, indent=1, default=float))
