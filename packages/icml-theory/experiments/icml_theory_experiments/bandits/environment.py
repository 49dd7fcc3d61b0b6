"""Logistic bandit problems with a nonlinear link and a tunable ``κ`` (made here; ground truth known).

``arms="fresh"`` (the first testbed): round ``t`` offers ``K`` new arms, each a context ``x ∈ R^d``
uniform on the unit sphere. ``arms="fixed"`` (the declared revision): the same ``K`` arms every round,
with ``cos(3 xᵀθ*)`` equal to 1 for one arm, ``cos 3`` (its minimum on the sphere) for another and
uniform between them for the rest (``xᵀθ*``
of random sign, the rest of ``x`` uniform on the sphere orthogonal to ``θ*``), so the best arm has the
smallest reward variance and the realized ``κ`` is the target. Either way arm ``x`` pays
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


ARMS = ("fresh", "fixed")


def _fixed_arms(rng: np.random.Generator, theta: np.ndarray, K: int) -> np.ndarray:
    low = np.cos(3.0)  # the smallest cos(3 x·θ*) a unit x reaches (x·θ* = ±1)
    c = np.concatenate([[1.0, low], rng.uniform(low, 1.0, K - 2)])
    u = np.clip(np.arccos(c) / 3.0, 0.0, 1.0) * rng.choice([-1.0, 1.0], K)  # x·θ* with cos(3 x·θ*) = c
    v = rng.standard_normal((K, theta.size))
    v -= np.outer(v @ theta, theta)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    x = u[:, None] * theta + np.sqrt(1.0 - u**2)[:, None] * v
    return x[rng.permutation(K)]


def make_problem(
    kappa: float, T: int, *, K: int = 10, d: int = 8, seed: int = 0, arms: str = "fresh"
) -> Problem:
    if arms not in ARMS:
        raise ValueError(f"arms must be one of {ARMS}, got {arms!r}")
    rng = np.random.default_rng([seed, 37])
    theta = rng.standard_normal(d)
    theta /= np.linalg.norm(theta)
    if arms == "fresh":
        x = rng.standard_normal((T, K, d))
        x /= np.linalg.norm(x, axis=-1, keepdims=True)
    else:
        x = np.broadcast_to(_fixed_arms(rng, theta, K), (T, K, d)).copy()
    s = scale_for(kappa)
    means = 1.0 / (1.0 + np.exp(-s * np.cos(3.0 * (x @ theta))))
    rewards = (rng.random((T, K)) < means).astype(np.float64)
    return Problem(x, rewards, means, theta, s, float(kappa))
