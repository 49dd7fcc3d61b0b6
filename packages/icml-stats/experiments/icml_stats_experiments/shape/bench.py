"""Benchmark ``prism-fisher-time``: the Fisher information of a fitted :class:`~icml_stats.shape.ShapeField`
by ``torch.func.jvp`` (:meth:`~icml_stats.shape.ShapeField.fisher_information`) against central finite
differences of the same model (two more evaluations of mean and covariance at ``t ± h``, then the same
formula), at 4,096 and 65,536 points; medians over repeats, the time ratio and the agreement (median and
max relative difference) from the same run. A field fitted briefly on the reproduction's testbed (200
epochs) is enough: both methods differentiate the same network.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch

from icml_stats.shape import ShapeField
from icml_stats_experiments.shape.testbed import subjects, template

BUDGETS: dict[str, dict[str, Any]] = {
    "quick": {"sizes": (4096,), "repeats": 3},
    "full": {"sizes": (4096, 65536), "repeats": 7},
}
STEP = 1e-4


def finite_difference_fisher(
    field: ShapeField, points: np.ndarray, ages: np.ndarray, h: float = STEP
) -> np.ndarray:
    """``I = ∂μᵀΣ⁻¹∂μ + ½ tr(Σ⁻¹∂Σ Σ⁻¹∂Σ)`` with ``∂`` by central differences of ``predict``."""
    mean_hi, cov_hi = field.predict(points, ages + h)
    mean_lo, cov_lo = field.predict(points, ages - h)
    _, cov = field.predict(points, ages)
    dmean, dcov = (mean_hi - mean_lo) / (2 * h), (cov_hi - cov_lo) / (2 * h)
    a = np.linalg.solve(cov, dcov)
    return np.einsum("ni,ni->n", dmean, np.linalg.solve(cov, dmean[..., None])[..., 0]) + 0.5 * np.einsum(
        "nij,nji->n", a, a
    )


def run(budget: str = "quick", seed: int = 0) -> list[dict]:
    cfg = BUDGETS[budget]
    rng = np.random.default_rng(seed)
    data = subjects(60, 64, rng)
    field = ShapeField(epochs=200, random_state=seed).fit(
        data["points"], data["covariates"], data["displacements"]
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rows = []
    for n in cfg["sizes"]:
        points = np.tile(template(64), (n // 64, 1))
        ages = rng.uniform(0.0, 1.0, len(points))
        times: dict[str, list[float]] = {"torch.func.jvp": [], "finite differences": []}
        for _ in range(cfg["repeats"]):
            start = time.perf_counter()
            exact = field.fisher_information(points, ages)
            times["torch.func.jvp"].append(time.perf_counter() - start)
            start = time.perf_counter()
            approx = finite_difference_fisher(field, points, ages)
            times["finite differences"].append(time.perf_counter() - start)
        relative = np.abs(approx - exact) / np.abs(exact)
        med = {k: float(np.median(v)) for k, v in times.items()}
        for name in times:
            rows.append(
                {
                    "case": f"{name}, {len(points)} points, 2-D field (64, 64)",
                    "median_seconds": med[name],
                    "finite differences / jvp (ratio of medians)": med["finite differences"]
                    / med["torch.func.jvp"],
                    "median_relative_difference": float(np.median(relative)),
                    "max_relative_difference": float(relative.max()),
                    "step": STEP,
                    "repeats": cfg["repeats"],
                    "torch_threads": torch.get_num_threads(),
                    "load_average_1min": load,
                }
            )
    return rows
