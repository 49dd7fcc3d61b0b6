"""Benchmark ``rdp-fdp-optimal``: time to compute a trade-off curve and an epsilon for DP-SGD.

Rows: the optimal-rule curve (``optimal_tradeoff``, 200 alphas by default), the accountant's
``get_epsilon(1e-5)`` and ``get_delta(1.0)``, and as baseline the Balle/CKS ``(eps, delta)`` family turned
into a curve on the same alphas. Correctness comes first: the optimal curve must lie above the CKS-implied
curve (1e-9) and never exceed 1 - alpha; otherwise the ratio is left empty.
"""

from __future__ import annotations

import time

import numpy as np

from icml_theory.privacy.accountant import OptimalRDPAccountant
from icml_theory.privacy.compare import classical_tradeoff
from icml_theory.privacy.profiles import SubsampledGaussianRDP
from icml_theory.privacy.tradeoff import optimal_tradeoff

SIZES = {"quick": [(200, 1000)], "full": [(50, 1000), (200, 1000), (1000, 1000), (200, 10000)]}
REPEATS = 3


def _median_ms(fn) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    """Time the curve and epsilon computations for DP-SGD (q = 0.01, sigma = 1) at ``budget``."""
    rows = []
    for n_alpha, steps in SIZES[budget]:
        profile = SubsampledGaussianRDP(0.01, 1.0, steps)
        alphas = np.geomspace(1e-6, 0.5, n_alpha)
        ours = optimal_tradeoff(profile, alphas).beta
        base = classical_tradeoff(profile, alphas, "cks")
        correct = bool(np.all(ours >= base - 1e-9) and np.all(ours <= 1 - alphas + 1e-15))
        t_ours = _median_ms(lambda p=profile, a=alphas: optimal_tradeoff(p, a))
        t_base = _median_ms(lambda p=profile, a=alphas: classical_tradeoff(p, a, "cks"))
        t_eps = _median_ms(  # a fresh accountant each time: no cached conversion
            lambda s=steps: (
                OptimalRDPAccountant()
                .step(noise_multiplier=1.0, sample_rate=0.01, num_steps=s)
                .get_epsilon(1e-5)
            )
        )
        t_delta = _median_ms(
            lambda s=steps: (
                OptimalRDPAccountant()
                .step(noise_multiplier=1.0, sample_rate=0.01, num_steps=s)
                .get_delta(1.0)
            )
        )
        common = {"n_alpha": n_alpha, "steps": steps, "correct": correct}
        rows.append(
            {
                **common,
                "impl": "optimal_tradeoff",
                "median_ms": round(t_ours, 2),
                "ratio_to_cks_curve": round(t_ours / t_base, 3) if correct else None,
            }
        )
        rows.append(
            {
                **common,
                "impl": "cks (eps, delta) family -> curve",
                "median_ms": round(t_base, 2),
                "ratio_to_cks_curve": 1.0,
            }
        )
        rows.append(
            {
                **common,
                "impl": "OptimalRDPAccountant.get_epsilon(1e-5)",
                "median_ms": round(t_eps, 2),
                "ratio_to_cks_curve": None,
            }
        )
        rows.append(
            {
                **common,
                "impl": "OptimalRDPAccountant.get_delta(1.0)",
                "median_ms": round(t_delta, 2),
                "ratio_to_cks_curve": None,
            }
        )
    return rows
