"""Clip quality against a reference (PSNR, SSIM) and rank correlation, in plain torch / numpy."""

from __future__ import annotations

import math

import numpy as np
import torch

from icml_generative.validation import check_same_shape, check_tensor


def psnr(x: torch.Tensor, ref: torch.Tensor, data_range: float = 2.0) -> float:
    """Peak signal-to-noise ratio in dB of ``x`` against ``ref`` (``inf`` when equal)."""
    check_same_shape(check_tensor(x, "x"), check_tensor(ref, "ref"), "x and ref")
    mse = (x.double() - ref.double()).pow(2).mean().item()
    return math.inf if mse == 0 else 10 * math.log10(data_range**2 / mse)


def ssim(
    x: torch.Tensor, ref: torch.Tensor, data_range: float = 2.0, window: int = 7, sigma: float = 1.5
) -> float:
    """Mean structural similarity (Wang et al. 2004) over frames and channels of clips ``(..., H, W)``.

    Gaussian window (``window`` × ``window``, std ``sigma``; 7 rather than 11 because the frames are small),
    constants ``(0.01 L)²`` and ``(0.03 L)²``, statistics over the valid region only.
    """
    check_same_shape(check_tensor(x, "x"), check_tensor(ref, "ref"), "x and ref")
    if x.ndim < 2 or min(x.shape[-2:]) < window:
        raise ValueError(f"frames must be at least {window}x{window}, got shape {tuple(x.shape)}")
    a = x.double().reshape(-1, 1, *x.shape[-2:])
    b = ref.double().reshape(-1, 1, *x.shape[-2:])
    coords = torch.arange(window, dtype=torch.float64) - (window - 1) / 2
    g = torch.exp(-(coords**2) / (2 * sigma**2))
    g = g / g.sum()
    kernel = (g[:, None] * g[None, :])[None, None]  # (1, 1, w, w)

    def blur(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.conv2d(t, kernel)

    mu_a, mu_b = blur(a), blur(b)
    var_a = blur(a * a) - mu_a**2
    var_b = blur(b * b) - mu_b**2
    cov = blur(a * b) - mu_a * mu_b
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    s = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2))
    return s.mean().item()


def spearman(a, b) -> float:
    """Spearman rank correlation (average ranks for ties); NaN with fewer than 3 pairs or a constant input."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"a and b must be 1-D of equal length, got shapes {a.shape} and {b.shape}")
    if len(a) < 3:
        return math.nan
    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
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
