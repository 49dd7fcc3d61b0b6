"""Clip quality against a reference (PSNR, SSIM) in plain torch / numpy; the rank correlation lives in
:mod:`icml_generative.sampling.metrics` (re-exported here)."""

from __future__ import annotations

import math
import warnings

import torch

from icml_generative.sampling.metrics import spearman as spearman
from icml_generative.validation import (
    check_int,
    check_positive,
    check_real_tensor,
    check_same_shape,
)


def psnr(x: torch.Tensor, ref: torch.Tensor, data_range: float = 2.0) -> float:
    """Peak signal-to-noise ratio in dB of ``x`` against ``ref`` (``inf`` when equal)."""
    check_same_shape(check_real_tensor(x, "x"), check_real_tensor(ref, "ref"), "x and ref")
    data_range = check_positive(data_range, "data_range")
    diff = x.double() - ref.double()
    peak = diff.abs().max().item()  # mse = peak² · mean((diff / peak)²): no overflow for any finite input
    if peak == 0:
        return math.inf
    if not math.isfinite(peak):  # the difference of two values near the float64 range
        peak = max(x.double().abs().max().item(), ref.double().abs().max().item())
        diff = x.double() / peak - ref.double() / peak
    else:
        diff = diff / peak
    return 20 * math.log10(data_range) - 20 * math.log10(peak) - 10 * math.log10(diff.pow(2).mean().item())


def ssim_map(
    x: torch.Tensor, ref: torch.Tensor, data_range: float, window: int = 7, sigma: float = 1.5
) -> torch.Tensor:
    """The SSIM map ``(N, 1, H − window + 1, W − window + 1)`` of frames ``(..., H, W)`` (``N`` frames and
    channels), differentiable, in the dtype of ``x``; no checks (:func:`ssim` validates and averages it;
    training losses use it directly). Half-precision frames are compared in float32: the variances
    ``blur(a²) − mu²`` cancel, and in bfloat16 the map lost about a third of its value."""
    dtype = torch.promote_types(x.dtype, torch.float32)
    a = x.reshape(-1, 1, *x.shape[-2:]).to(dtype)
    b = ref.reshape(-1, 1, *x.shape[-2:]).to(dtype)
    coords = torch.arange(window, dtype=a.dtype, device=a.device) - (window - 1) / 2
    # exp(-(c² - min c²) / 2σ²): the same kernel once normalised, and 1 at the centre for any σ > 0 (no 0/0
    # when σ² underflows); dividing by σ twice keeps σ² from overflowing or underflowing
    g = torch.exp(-0.5 * (((coords**2 - (coords**2).min()) / sigma) / sigma))
    g = g / g.sum()
    kernel = (g[:, None] * g[None, :])[None, None]  # (1, 1, w, w)

    def blur(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.conv2d(t, kernel)

    mu_a, mu_b = blur(a), blur(b)
    var_a = blur(a * a) - mu_a**2
    var_b = blur(b * b) - mu_b**2
    cov = blur(a * b) - mu_a * mu_b
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    similarity = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2))
    return similarity.to(x.dtype)


def ssim(
    x: torch.Tensor, ref: torch.Tensor, data_range: float = 2.0, window: int = 7, sigma: float = 1.5
) -> float:
    """Mean structural similarity (Wang et al. 2004) over frames and channels of clips ``(..., H, W)``.

    Gaussian window (``window`` × ``window``, std ``sigma``; 7 rather than 11 because the frames are small),
    constants ``(0.01 L)²`` and ``(0.03 L)²``, statistics over the valid region only.
    """
    check_same_shape(check_real_tensor(x, "x"), check_real_tensor(ref, "ref"), "x and ref")
    data_range = check_positive(data_range, "data_range")
    window = check_int(window, "window", 1)
    sigma = check_positive(sigma, "sigma")
    if x.ndim < 2 or min(x.shape[-2:]) < window:
        raise ValueError(
            f"x and ref must have frames (..., H, W) of at least window={window} pixels a side, "
            f"got shape {tuple(x.shape)}"
        )
    # SSIM is unchanged when x, ref and data_range are scaled together: scale them to at most 1
    scale = max(x.double().abs().max().item(), ref.double().abs().max().item(), data_range)
    s = ssim_map(x.double() / scale, ref.double() / scale, data_range / scale, window, sigma)
    value = s.mean().item()
    if not math.isfinite(value):  # 0/0: constant frames with data_range negligible against the values
        warnings.warn(
            f"ssim: the similarity is undefined (0/0) with data_range={data_range:g} against values up "
            f"to {scale:g}; it is {value}",
            RuntimeWarning,
            stacklevel=2,
        )
    return value
