"""Graphical models with a known Markov blanket for the zero-flow reproduction.

A Gaussian graphical model on ``p`` nodes: a precision matrix ``Theta`` with a chain ``i -- i+1`` and
``extra`` random edges, every edge weight ``+-0.4`` (random sign), the diagonal raised until the smallest
eigenvalue is 0.2; ``Z ~ N(0, Sigma)`` with ``Sigma`` rescaled to unit variances (which keeps the zero
pattern of the precision). The Markov blanket of node ``i`` is ``{j: Theta_ij != 0}``.

* ``"gaussian"``: ``X = Z``.
* ``"lognormal"``: ``X_j = exp(2 Z_j)`` (a nonparanormal model: same graph, heavy-tailed marginals). The
  transform is known, so the oracle undoes it: ``Z_j = log(X_j) / 2``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

MODELS = ("gaussian", "lognormal")
EDGE = 0.4
MIN_EIGENVALUE = 0.2


@dataclasses.dataclass(frozen=True)
class GraphData:
    x: np.ndarray  # (n, p) observed
    z: np.ndarray  # (n, p) Gaussian before the marginal transform (the oracle's input)
    precision: np.ndarray  # (p, p) true Theta

    @property
    def edges(self) -> np.ndarray:
        """Bool ``(p, p)``: ``j`` is in the Markov blanket of ``i`` (zero diagonal)."""
        return (self.precision != 0) & ~np.eye(len(self.precision), dtype=bool)


def precision_matrix(p: int, extra: int, rng: np.random.Generator) -> np.ndarray:
    theta = np.eye(p)
    for i in range(p - 1):
        theta[i, i + 1] = theta[i + 1, i] = EDGE * rng.choice((-1.0, 1.0))
    added = 0
    while added < extra:
        i, j = rng.choice(p, 2, replace=False)
        if theta[i, j] == 0:
            theta[i, j] = theta[j, i] = EDGE * rng.choice((-1.0, 1.0))
            added += 1
    low = np.linalg.eigvalsh(theta).min()
    return theta + max(0.0, MIN_EIGENVALUE - low) * np.eye(p)


def sample(model: str, n: int = 2000, p: int = 10, extra: int = 5, seed: int = 0) -> GraphData:
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    rng = np.random.default_rng(seed)
    theta = precision_matrix(p, extra, rng)
    sigma = np.linalg.inv(theta)
    scale = np.sqrt(np.diag(sigma))
    z = rng.multivariate_normal(np.zeros(p), sigma / np.outer(scale, scale), size=n)
    x = z if model == "gaussian" else np.exp(2.0 * z)
    return GraphData(x, z, theta)
