"""Simulations with a known regression function for DeSI (our design, after Petersen & Müller 2019 and the
single-index Fréchet literature; the paper's simulation settings were not available to us).

Every simulation draws ``X ~ U[0, 1]^p`` and the index ``U = theta0^T X`` with
``theta0 = (3, 2, 1, 0, ..., 0) / sqrt(14)`` (``U`` in [0, 1.6], mean 0.8, sd 0.29), so a period of
``sin(2 pi U)`` spans the data: the link is nonlinear enough that a global (linear) model fails.

* ``wasserstein``: a Gaussian response distribution with random mean ``mu ~ N(sin(2 pi U), 0.2^2)`` and
  random scale ``sigma ~ Gamma(shape 10, mean 1 + U^2)``, observed as its quantile function on 50
  midpoint levels. The W2 Fréchet mean of a location-scale family averages the parameters, so the truth
  is ``m(x) = sin(2 pi U) + (1 + U^2) Phi^-1(s)`` exactly.
* ``spd``: 3x3 SPD matrices ``Y = expm(B + sin(2 pi U) A + E)`` (``A``, ``B`` fixed symmetric matrices,
  ``E`` symmetric with N(0, 0.2^2) upper-triangle entries) under the log-Euclidean metric, whose
  conditional Fréchet mean is ``expm(B + sin(2 pi U) A)`` exactly (``E`` has mean zero).
* ``compositional``: 3-part compositions whose square roots follow the curve
  ``r(U) = (cos a, sin a cos b, sin a sin b)``, ``a = 0.5 + 0.4 sin(2 pi U)``, ``b = 0.3 + 0.6 U``,
  perturbed by a tangent Gaussian step (sd 0.1 per coordinate) and folded back into the positive orthant.
  The reported truth is the generating curve ``r(U)^2``: the conditional Fréchet mean only approximately
  (the fold and the curvature bias it slightly), so this example carries no criterion.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from icml_stats.frechet import SPD, Compositional, Space, Wasserstein

LEVELS = (np.arange(50) + 0.5) / 50
SIMULATIONS = ("wasserstein", "spd", "compositional")


def theta0(p: int) -> np.ndarray:
    """The true index direction ``(3, 2, 1, 0, ...) / sqrt(14)`` in ``p`` dimensions (``p >= 3``)."""
    t = np.zeros(p)
    t[:3] = [3.0, 2.0, 1.0]
    return t / np.linalg.norm(t)


def _sym(m):
    return (m + np.swapaxes(m, -1, -2)) / 2


def _expm_sym(s):
    lam, vec = np.linalg.eigh(_sym(s))
    return (vec * np.exp(lam)[..., None, :]) @ np.swapaxes(vec, -1, -2)


_FIXED = np.random.default_rng(2026)
A_SPD = _sym(_FIXED.normal(size=(3, 3))) * 0.8
B_SPD = _sym(_FIXED.normal(size=(3, 3))) * 0.5


@dataclass(frozen=True)
class Simulation:
    """Training ``x, y``, test ``x_test`` with the true objects ``truth`` and indices ``u``/``u_test``."""

    name: str
    space: Space
    theta: np.ndarray
    x: np.ndarray
    y: np.ndarray
    u: np.ndarray
    x_test: np.ndarray
    u_test: np.ndarray
    truth: np.ndarray


def _wasserstein(u, rng):
    z = norm.ppf(LEVELS)
    mu = rng.normal(np.sin(2 * np.pi * u), 0.2)
    sigma = rng.gamma(10.0, (1 + u**2) / 10.0)
    return mu[:, None] + sigma[:, None] * z


def _wasserstein_truth(u):
    return np.sin(2 * np.pi * u)[:, None] + (1 + u**2)[:, None] * norm.ppf(LEVELS)


def _spd_log_truth(u):
    return B_SPD + np.sin(2 * np.pi * u)[:, None, None] * A_SPD


def _spd(u, rng):
    e = rng.normal(0.0, 0.2, size=(len(u), 3, 3))
    e = np.triu(e) + np.swapaxes(np.triu(e, 1), 1, 2)
    return _expm_sym(_spd_log_truth(u) + e)


def _root_curve(u):
    a, b = 0.5 + 0.4 * np.sin(2 * np.pi * u), 0.3 + 0.6 * u
    return np.stack([np.cos(a), np.sin(a) * np.cos(b), np.sin(a) * np.sin(b)], 1)


def _compositional(u, rng):
    r = _root_curve(u)
    v = rng.normal(0.0, 0.1, size=r.shape)
    v -= np.sum(v * r, 1, keepdims=True) * r  # tangent at r
    nv = np.linalg.norm(v, axis=1, keepdims=True)
    s = np.abs(np.cos(nv) * r + np.sin(nv) * v / np.maximum(nv, 1e-300))
    s /= np.linalg.norm(s, axis=1, keepdims=True)
    return s**2


def simulate(name: str, n: int, p: int, seed: int, n_test: int = 200) -> Simulation:
    """One draw of simulation ``name`` with ``n`` training and ``n_test`` test points in ``p`` dimensions."""
    rng = np.random.default_rng([seed, SIMULATIONS.index(name), n, p])
    theta = theta0(p)
    x, x_test = rng.uniform(size=(n, p)), rng.uniform(size=(n_test, p))
    u, u_test = x @ theta, x_test @ theta
    if name == "wasserstein":
        return Simulation(
            name, Wasserstein(), theta, x, _wasserstein(u, rng), u, x_test, u_test, _wasserstein_truth(u_test)
        )
    if name == "spd":
        return Simulation(
            name,
            SPD("log_euclidean"),
            theta,
            x,
            _spd(u, rng),
            u,
            x_test,
            u_test,
            _expm_sym(_spd_log_truth(u_test)),
        )
    if name == "compositional":
        return Simulation(
            name,
            Compositional(),
            theta,
            x,
            _compositional(u, rng),
            u,
            x_test,
            u_test,
            _root_curve(u_test) ** 2,
        )
    raise ValueError(f"name must be one of {SIMULATIONS}, got {name!r}")
