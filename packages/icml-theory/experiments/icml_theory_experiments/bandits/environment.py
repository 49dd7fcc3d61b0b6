"""Logistic bandit problems with a nonlinear link and a tunable ``κ`` (made here; ground truth known).

Round ``t`` offers ``K`` arms, each a context ``x ∈ R^d`` uniform on the unit sphere; arm ``x`` pays
``Bernoulli(μ(h(x)))`` with ``h(x) = s cos(3 xᵀθ*)``, ``θ*`` a uniform unit vector. Since
``1/μ̇(z) = 2 + 2 cosh z``, the scale ``s = arccosh((κ − 2)/2)`` makes ``κ = sup_x 1/μ̇(h(x))`` the
target (``cos`` reaches 1 at ``xᵀθ* = 0``); :attr:`Problem.realized_kappa` is the maximum over the
contexts actually drawn. Contexts and the uniforms behind every arm's reward are drawn up front from the
seed, so every policy meets the same contexts and the same noise (paired by seed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def scale_for(kappa: float) -> float:
    """``s`` with ``2 + 2 cosh s = κ``."""
    if not kappa > 4:
        raise ValueError(f"kappa must be > 4 (mu' <= 1/4), got {kappa!r}")
    return math.acosh((kappa - 2) / 2)


@dataclass(frozen=True)
class Problem:
    contexts: np.ndarray  # (T, K, d)
    rewards: np.ndarray  # (T, K) in {0, 1}
    means: np.ndarray  # (T, K) = mu(h(x))
    theta: np.ndarray  # (d,)
    scale: float
    kappa: float

    def logit(self, x: np.ndarray) -> np.ndarray:
        """``h(x)`` for rows ``x`` (``(..., d)``)."""
        return self.scale * np.cos(3.0 * (x @ self.theta))

    @property
    def realized_kappa(self) -> float:
        """``max over the drawn contexts of 1/μ̇(h(x))``."""
        return float(np.max(1.0 / (self.means * (1.0 - self.means))))

    @property
    def optimal_variance(self) -> float:
        """Mean over rounds of the optimal arm's reward variance ``μ*(1 − μ*)``."""
        best = self.means.max(axis=1)
        return float(np.mean(best * (1.0 - best)))


def make_problem(kappa: float, T: int, *, K: int = 10, d: int = 8, seed: int = 0) -> Problem:
    rng = np.random.default_rng([seed, 37])
    theta = rng.standard_normal(d)
    theta /= np.linalg.norm(theta)
    x = rng.standard_normal((T, K, d))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    s = scale_for(kappa)
    means = 1.0 / (1.0 + np.exp(-s * np.cos(3.0 * (x @ theta))))
    rewards = (rng.random((T, K)) < means).astype(np.float64)
    return Problem(x, rewards, means, theta, s, float(kappa))
