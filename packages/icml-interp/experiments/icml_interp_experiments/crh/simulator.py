"""A planted cylinder: difference vectors built from overlapping concept directions, and a concept readout
whose sensitivity to steering along the axis is planted as a function of the sample's angle to the axis and
of a sector term in the normal plane (our design; the CRH paper's own simulator, if any, was not available).

Geometry. The target concept's direction is ``w0 = e0``; two other concepts overlap it,
``w_j = rho e0 + sqrt(1 - rho^2) e_j`` (``j = 1, 2``). Sample ``i``'s difference vector is
``d_i = a_i w0 + b_i1 w1 + b_i2 w2 + noise`` with ``a_i ~ U(a_lo, a_hi)`` and zero-mean ``b``: the mean
difference points along ``e0`` (the planted axis), the ``b`` terms tilt each sample off it by ``theta_i`` and
place its normal part at the angle ``phi_i`` in the plane of ``e1, e2``.

Readout. Steering sample ``i`` by ``s`` along the axis, a concept is emitted in each of ``draws`` trials
when the readout ``g_i s + u`` crosses the threshold ``1 - base`` (``u ~ U(0, 1)`` per trial), i.e. with
probability ``min(1, base + g_i s)``, linear in ``s`` below saturation; the planted gain is
``g_i = kappa |d_i|^2 f(theta_i) (1 + eta cos(phi_i - psi_i))`` with ``f = sin^2 / cos`` (CRH's default
exponents) and ``psi_i`` the sample's sensitive sector: drawn per sample (``shared_sector=False``: CRH's case,
unpredictable from ``d_i``) or one angle for all samples (the control, predictable).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Planted:
    diffs: torch.Tensor  # (n, d)
    axis: torch.Tensor  # (d,), the planted unit axis e0
    theta: np.ndarray  # (n,), the angle of d_i to the planted axis
    phi: np.ndarray  # (n,), the angle of d_i's normal part in the (e1, e2) plane
    psi: np.ndarray  # (n,), the sensitive sector's angle
    f_theta: np.ndarray  # (n,), sin^2 theta / cos theta
    gain: np.ndarray  # (n,), the planted steerability gain
    scales: np.ndarray  # (n_scales,)
    rates: np.ndarray  # (n, n_scales): observed concept rates


def simulate(
    n: int = 300,
    *,
    d_model: int = 32,
    rho: float = 0.3,
    a_range: tuple[float, float] = (0.8, 1.6),
    b_sd: float = 0.4,
    noise: float = 0.03,
    eta: float = 0.6,
    shared_sector: bool = False,
    n_scales: int = 6,
    max_scale: float = 0.1,
    kappa: float = 1.0,
    base: float = 0.05,
    draws: int = 200,
    seed: int = 0,
) -> Planted:
    rng = np.random.default_rng(seed)
    w0 = np.eye(d_model)[0]
    w = [rho * w0 + math.sqrt(1 - rho**2) * np.eye(d_model)[j] for j in (1, 2)]
    a = rng.uniform(*a_range, n)
    b = rng.normal(0, b_sd, (n, 2))
    d = a[:, None] * w0 + b[:, :1] * w[0] + b[:, 1:] * w[1] + rng.normal(0, noise, (n, d_model))
    norms = np.linalg.norm(d, axis=1)
    cos = d @ w0 / norms
    theta = np.arccos(np.clip(cos, -1, 1))
    phi = np.arctan2(d[:, 2], d[:, 1])
    psi = np.full(n, rng.uniform(-math.pi, math.pi)) if shared_sector else rng.uniform(-math.pi, math.pi, n)
    f_theta = np.sin(theta) ** 2 / np.cos(theta)
    gain = kappa * norms**2 * f_theta * (1 + eta * np.cos(phi - psi))
    scales = np.linspace(0, max_scale, n_scales)
    p = np.minimum(1.0, base + gain[:, None] * scales[None])
    rates = rng.binomial(draws, p) / draws
    return Planted(
        diffs=torch.tensor(d),
        axis=torch.tensor(w0),
        theta=theta,
        phi=phi,
        psi=psi,
        f_theta=f_theta,
        gain=gain,
        scales=scales,
        rates=rates,
    )
