"""Sample-quality metrics with a known zero: the sliced Wasserstein-2 distance between two point clouds and
the Fréchet distance between Gaussian fits of two feature sets; and Spearman's rank correlation.

Rabin, Peyré, Delon, Bernot, "Wasserstein Barycenter and its Application to Texture Mixing", SSVM 2011;
Bonneel, Rabin, Peyré, Pfister, "Sliced and Radon Wasserstein Barycenters of Measures", JMIV 2015.
In one dimension the W2 coupling of two equal-size samples matches them in sorted order, so each slice is
exact; the average over random directions is a Monte Carlo estimate of the integral over the sphere.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from icml_generative.validation import as_real_tensor, check_int, check_same_shape, check_tensor

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
    theta = (theta / theta.norm(dim=0, keepdim=True)).to(x.device)  # drawn on the CPU: the same on any device
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


def frechet_distance(x: torch.Tensor, y: torch.Tensor) -> float:
    """Fréchet distance between Gaussian fits of two feature sets ``x (n, d)`` and ``y (m, d)``:
    ``‖μx − μy‖² + tr(Σx + Σy − 2 (Σx^{1/2} Σy Σx^{1/2})^{1/2})`` (Dowson & Landau 1982; the FID of Heusel et
    al., NeurIPS 2017, on whatever features you give it), in float64.

    The matrix square roots come from symmetric eigendecompositions (eigenvalues clipped at 0), so the
    result is exact for positive semi-definite covariances, 0 for identical sets, and symmetric in ``x`` and
    ``y``. Covariances are unbiased (``n − 1``); each set needs at least 2 rows. With ``n < d`` the
    covariance is singular and the distance is biased upwards, as every FID estimate from few samples is:
    compare distances computed from equal sample sizes.
    """
    for name, t in (("x", x), ("y", y)):
        check_tensor(t, name, ("n", "d"), floating=True, finite=True)
        if t.shape[0] < 2:
            raise ValueError(f"{name} must hold at least 2 rows (feature vectors), got {t.shape[0]}")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y must have the same number of features, got {x.shape[1]} and {y.shape[1]}")
    x, y = x.double(), y.double()
    scale = max(x.abs().max().item(), y.abs().max().item()) or 1.0  # the distance is 2-homogeneous
    x, y = x / scale, y / scale
    mx, my = x.mean(0), y.mean(0)
    cx, cy = (torch.atleast_2d(torch.cov(t.T, correction=1)) for t in (x, y))

    def sqrt_psd(m: torch.Tensor) -> torch.Tensor:
        w, v = torch.linalg.eigh((m + m.T) / 2)
        return (v * w.clamp_min(0).sqrt()) @ v.T

    root = sqrt_psd(cx)
    cross = torch.linalg.eigvalsh(root @ cy @ root).clamp_min(0).sqrt().sum()
    value = ((mx - my) ** 2).sum() + cx.trace() + cy.trace() - 2 * cross
    distance = max(float(value), 0.0) * scale * scale
    if not math.isfinite(distance):
        warnings.warn(
            f"frechet_distance: the distance overflows float64 (features up to {scale:g})",
            RuntimeWarning,
            stacklevel=2,
        )
    return distance


def spearman(a, b) -> float:
    """Spearman rank correlation (average ranks for ties); NaN, with a ``RuntimeWarning``, with fewer than
    3 pairs or a constant input (as ``scipy.stats.spearmanr``)."""
    a, b = as_real_tensor(a, "a").cpu().numpy(), as_real_tensor(b, "b").cpu().numpy()
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"a and b must be 1-D of equal length, got shapes {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("a and b must be finite, got NaN or inf")
    if len(a) < 3:
        warnings.warn(
            f"spearman: {len(a)} pairs, fewer than 3: the correlation is NaN", RuntimeWarning, stacklevel=2
        )
        return math.nan
    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        warnings.warn(
            "spearman: a constant input has no rank correlation: it is NaN", RuntimeWarning, stacklevel=2
        )
        return math.nan
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="mergesort")
    ranks = np.empty(len(v))
    ranks[order] = np.arange(len(v), dtype=float)
    for value in np.unique(v):  # average the ranks of ties
        tied = v == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks
