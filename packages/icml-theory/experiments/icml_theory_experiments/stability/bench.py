"""Benchmark ``lp-stability``: the vectorized replace-one estimator against a loop over replacements.

Both estimate c_2 of the ridge generalization gap of the ``lp-coverage`` testbed from the same random
pairs (same seed, same chunks): ``batched=True`` fits all 2B datasets of a chunk in one closed-form call,
the loop fits one dataset at a time. Correctness first: the two must give the same differences (1e-9);
otherwise the ratio is left empty. Medians of 3 runs.
"""

from __future__ import annotations

import time

import numpy as np

from icml_theory.stability import replace_one_differences
from icml_theory_experiments.stability.repro import gaps, sample

SIZES = {"quick": [(100, 400)], "full": [(100, 2000), (400, 2000), (1600, 1000)]}
REPEATS = 3


def _median_s(fn) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    rows = []
    for n, pairs in SIZES[budget]:

        def batched(n=n, pairs=pairs):
            return replace_one_differences(gaps, sample, n, pairs, batched=True, chunk=256, seed=seed)

        def looped(n=n, pairs=pairs):
            return replace_one_differences(
                lambda s: float(gaps(s[None])[0]), sample, n, pairs, batched=False, chunk=256, seed=seed
            )

        correct = bool(np.allclose(batched(), looped(), rtol=0, atol=1e-9))
        t_batched, t_looped = _median_s(batched), _median_s(looped)
        common = {"n": n, "pairs": pairs, "correct": correct}
        rows.append(
            {
                **common,
                "impl": "batched (one solve per chunk)",
                "median_s": round(t_batched, 4),
                "speedup_vs_loop": round(t_looped / t_batched, 2) if correct else None,
            }
        )
        rows.append(
            {
                **common,
                "impl": "loop over replacements",
                "median_s": round(t_looped, 4),
                "speedup_vs_loop": 1.0,
            }
        )
    return rows
