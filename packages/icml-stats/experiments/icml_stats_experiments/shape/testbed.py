"""Synthetic 2-D shapes with analytic heteroscedastic noise for the PRISM reproduction.

Template: ``m`` points on the unit circle at angles ``φ_j = 2π j / m``, normal ``n(φ) = (cos φ, sin φ)``,
tangent ``τ(φ) = (-sin φ, cos φ)``. A subject of age ``t`` in ``[0, 1]`` has, at template point ``φ``, the
displacement ``d ~ N(μ, Σ)`` with

* ``μ(φ, t) = a(φ) t n(φ)``, ``a(φ) = 0.3 + 0.15 cos 2φ + 0.1 sin φ`` (growth that changes the shape);
* ``Σ(φ, t) = s_r² n nᵀ + s_τ² τ τᵀ``, ``s_r = 0.02 exp(0.9 cos(φ - 0.5) + 0.8 t)`` (radial noise, 0.008
  to 0.11) and ``s_τ = 0.015 exp(0.6 sin 2φ - 0.5 t)`` (tangential).

So the Fisher information of ``t`` is analytic: ``I(φ, t) = a² / s_r² + 2·0.8² + 2·0.5²`` (the mean term,
then the two log-variance slopes). Anomalies: a smooth radial bump ``c · s_r(φ, t) · exp(-(Δφ / w)² / 2)``
centred on a random template point (``w`` = 2 point spacings), ``c`` in units of the local radial noise.
"""

from __future__ import annotations

import numpy as np
import torch

GROWTH = (0.3, 0.15, 0.1)
RADIAL = (0.02, 0.9, 0.5, 0.8)  # scale, angular amplitude, phase, slope in t
TANGENTIAL = (0.015, 0.6, -0.5)  # scale, angular amplitude, slope in t


def template(m: int) -> np.ndarray:
    phi = 2 * np.pi * np.arange(m) / m
    return np.column_stack([np.cos(phi), np.sin(phi)])


def _parts(phi, t, lib):
    a = GROWTH[0] + GROWTH[1] * lib.cos(2 * phi) + GROWTH[2] * lib.sin(phi)
    s_r = RADIAL[0] * lib.exp(RADIAL[1] * lib.cos(phi - RADIAL[2]) + RADIAL[3] * t)
    s_t = TANGENTIAL[0] * lib.exp(TANGENTIAL[1] * lib.sin(2 * phi) + TANGENTIAL[2] * t)
    return a, s_r, s_t


class AnalyticModel:
    """The true law as a model callable ``(points, t) -> (mean, cov)`` on torch tensors (points on the
    unit circle; the angle is read from each point)."""

    def __call__(self, p: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        phi = torch.atan2(p[:, 1], p[:, 0])
        a, s_r, s_t = _parts(phi, t, torch)
        n = torch.stack([torch.cos(phi), torch.sin(phi)], dim=1)
        tau = torch.stack([-torch.sin(phi), torch.cos(phi)], dim=1)
        cov = (s_r**2)[:, None, None] * n[:, :, None] * n[:, None, :] + (s_t**2)[:, None, None] * (
            tau[:, :, None] * tau[:, None, :]
        )
        return (a * t)[:, None] * n, cov


def analytic_fisher(points: np.ndarray, t: np.ndarray) -> np.ndarray:
    phi = np.arctan2(points[:, 1], points[:, 0])
    a, s_r, _ = _parts(phi, np.asarray(t, dtype=float), np)
    return a**2 / s_r**2 + 2 * RADIAL[3] ** 2 + 2 * TANGENTIAL[2] ** 2


def radial_std(points: np.ndarray, t: np.ndarray) -> np.ndarray:
    phi = np.arctan2(points[:, 1], points[:, 0])
    return _parts(phi, np.asarray(t, dtype=float), np)[1]


def subjects(n: int, m: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``n`` subjects of ``m`` points each, ages uniform on [0, 1]; flat arrays with a ``subject`` label."""
    p = np.tile(template(m), (n, 1))
    ages = rng.uniform(0.0, 1.0, n)
    t = np.repeat(ages, m)
    with torch.no_grad():
        mean, cov = AnalyticModel()(torch.as_tensor(p), torch.as_tensor(t))
    chol = np.linalg.cholesky(cov.numpy())
    d = mean.numpy() + np.einsum("nij,nj->ni", chol, rng.standard_normal((n * m, 2)))
    return {
        "points": p,
        "covariates": t,
        "displacements": d,
        "subject": np.repeat(np.arange(n), m),
        "ages": ages,
    }


def add_bump(
    data: dict[str, np.ndarray], which: np.ndarray, m: int, strength: float, rng: np.random.Generator
) -> None:
    """Add a radial bump of ``strength`` local radial standard deviations to the subjects in ``which``
    (in place), centred on a random template point of each."""
    phi = 2 * np.pi * np.arange(m) / m
    width = 2 * (2 * np.pi / m)
    for s in which:
        rows = slice(s * m, (s + 1) * m)
        centre = phi[rng.integers(m)]
        gap = np.angle(np.exp(1j * (phi - centre)))
        profile = np.exp(-0.5 * (gap / width) ** 2)
        sigma = radial_std(data["points"][rows], data["covariates"][rows])
        data["displacements"][rows] += (strength * sigma * profile)[:, None] * data["points"][rows]
