"""The exact score of an isotropic Gaussian mixture under Gaussian noise: a ground truth for samplers.

If ``p = Σ_k w_k N(μ_k, s_k² I)`` then ``p_σ = p * N(0, σ² I) = Σ_k w_k N(μ_k, (s_k² + σ²) I)``, so

    ∇ₓ log p_σ(x) = Σ_k r_k(x) (μ_k - x) / (s_k² + σ²),   r_k(x) = w_k N(x; μ_k, v_k I) / p_σ(x),

with the responsibilities ``r_k`` computed by a log-sum-exp for stability far from every mode.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import torch

from icml_generative.validation import as_real_tensor, check_number, check_tensor


def gaussian_mixture_score(means, stds, weights=None) -> Callable[[torch.Tensor, float], torch.Tensor]:
    """Return ``score(x, sigma)``: the exact ``∇ₓ log p_σ(x)`` of the mixture convolved with ``N(0, σ² I)``.

    ``means`` is ``(k, d)``, ``stds`` a positive scalar or ``(k,)``, ``weights`` ``(k,)`` non-negative and
    summing to one (uniform if omitted), the parameters a mixture sampler takes.
    The returned function takes ``x`` shaped ``(n, d)`` (floating point) and ``sigma >= 0`` and returns
    ``(n, d)`` in ``x``'s dtype and device (float16 and bfloat16 are computed in float32).
    """
    mu = as_real_tensor(means, "means")
    if mu.ndim != 2 or mu.shape[0] < 1 or not torch.isfinite(mu).all():
        raise ValueError(f"means must be a finite array shaped (k, d), got shape {tuple(mu.shape)}")
    k, d = mu.shape
    s = as_real_tensor(stds, "stds")
    if s.ndim > 1 or (s.ndim == 1 and s.shape[0] != k):
        raise ValueError(f"stds must be a scalar or shaped ({k},), got shape {tuple(s.shape)}")
    s = s.expand(k)  # (k,)
    if not torch.isfinite(s).all() or (s <= 0).any():
        raise ValueError("stds must be positive and finite")
    f64 = torch.float64
    w = torch.full((k,), 1.0 / k, dtype=f64) if weights is None else as_real_tensor(weights, "weights", f64)
    if w.shape != (k,) or (w < 0).any() or not math.isclose(w.sum().item(), 1.0, abs_tol=1e-6):
        raise ValueError(f"weights must be {k} non-negative numbers summing to 1")
    log_w = torch.log(w)  # (k,); -inf for empty components, which then get zero responsibility

    def score(x: torch.Tensor, sigma: float) -> torch.Tensor:
        check_tensor(x, "x", ("n", d), floating=True, finite=True)
        sigma = check_number(sigma, "sigma", minimum=0)
        # computed in at least float32 (half-precision squares and log-densities overflow where the score
        # itself fits), returned in x's dtype
        work = torch.promote_types(x.dtype, torch.float32)
        xw = x.to(work)
        lw = log_w.to(xw)
        var = (s**2 + torch.tensor(sigma, dtype=f64) ** 2).to(
            xw
        )  # (k,); a tensor: sigma² may overflow to inf
        # μ − x in float64, then rounded once: rounding the float64 means to x's dtype first made the score
        # (a function of x − μ) depend on where the mixture sits (float32: relative error 1.3e-2 at 65536)
        diff = (mu.to(x.device)[None, :, :] - x.to(f64)[:, None, :]).to(work)  # (n, k, d)
        log_comp = lw - 0.5 * d * torch.log(2 * math.pi * var) - 0.5 * (diff**2).sum(-1) / var  # (n, k)
        resp = torch.softmax(log_comp, dim=1)  # (n, k)
        out = torch.einsum("nk,nkd->nd", resp / var, diff).to(x.dtype)  # (n, d)
        if not bool(torch.isfinite(out).all()):
            warnings.warn(
                f"gaussian_mixture_score: the score overflows {x.dtype} (x, means or stds too far from "
                "the range where the mixture density is representable)",
                RuntimeWarning,
                stacklevel=2,
            )
        return out

    return score
