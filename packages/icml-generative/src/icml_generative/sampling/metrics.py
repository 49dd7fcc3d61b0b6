"""Sample-quality metric with a known zero: the sliced Wasserstein-2 distance between two point clouds.

Rabin, Peyré, Delon, Bernot, "Wasserstein Barycenter and its Application to Texture Mixing", SSVM 2011;
Bonneel, Rabin, Peyré, Pfister, "Sliced and Radon Wasserstein Barycenters of Measures", JMIV 2015.
In one dimension the W2 coupling of two equal-size samples matches them in sorted order, so each slice is
exact; the average over random directions is a Monte Carlo estimate of the integral over the sphere.
"""

from __future__ import annotations

import math
import warnings

import torch

from icml_generative.validation import check_int, check_same_shape, check_tensor

MAX_PROJECTIONS = 2**20


def sliced_wasserstein(x: torch.Tensor, y: torch.Tensor, n_projections: int = 256, seed: int = 0) -> float:
    """``SW₂(x, y) = sqrt(mean_θ W₂²(θᵀx, θᵀy))`` over ``n_projections`` directions uniform on the sphere.

    ``x`` and ``y`` are ``(n, d)`` samples of equal size (each slice is then an exact sorted matching). The
    directions come from ``seed``, so two calls with the same seed use the same slices. Zero iff the two
    samples agree on every slice; equal to ``sqrt(mean_θ (θᵀv)²)`` when ``y = x + v``.
    """
    for name, t in (("x", x), ("y", y)):
        check_tensor(t, name, ("n", "d"), floating=True, finite=True)
    check_same_shape(x, y, "x and y")
    check_int(n_projections, "n_projections", 1, MAX_PROJECTIONS)
    check_int(seed, "seed", 0, 2**64 - 1)
    if x.numel() == 0:
        raise ValueError(
            f"x and y must hold at least one point of at least one dimension, got {tuple(x.shape)}"
        )
    gen = torch.Generator().manual_seed(seed)
    theta = torch.randn(x.shape[1], n_projections, generator=gen, dtype=torch.float64)  # (d, p)
    theta = theta / theta.norm(dim=0, keepdim=True)
    # on x / s and y / s with s = max |x|, |y| (SW2 is 1-homogeneous): no overflow for any finite input
    s = max(x.double().abs().max().item(), y.double().abs().max().item()) or 1.0
    px = torch.sort((x.double() / s) @ theta, dim=0).values  # (n, p)
    py = torch.sort((y.double() / s) @ theta, dim=0).values  # (n, p)
    distance = s * ((px - py) ** 2).mean().sqrt().item()
    if not math.isfinite(distance):
        warnings.warn(
            f"sliced_wasserstein: the distance overflows float64 (points up to {s:g})",
            RuntimeWarning,
            stacklevel=2,
        )
    return distance
