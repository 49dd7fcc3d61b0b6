"""Deterministic probability-flow ODE samplers for variance-exploding diffusion (EDM form).

Karras, Aittala, Aila, Laine, "Elucidating the Design Space of Diffusion-Based Generative Models",
NeurIPS 2022 (EDM), with ``sigma(t) = t``: the probability-flow ODE is

    dx/dσ = -σ ∇ₓ log p_σ(x),   p_σ = p_data * N(0, σ² I),

integrated from ``σ_max`` down to ``σ_min`` on the schedule of their eq. 5 (:func:`karras_sigmas`). Euler is
first order; Heun (their Algorithm 1, deterministic) is second order and costs two score evaluations per
step, except a final step to σ = 0, which falls back to Euler.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Sequence

import torch

from icml_generative.validation import (
    as_real_tensor,
    check_choice,
    check_int,
    check_number,
    check_positive,
    check_tensor,
)

MAX_LEVELS = 2**24  # karras_sigmas: at most 16M noise levels (128 MiB)

ScoreFn = Callable[[torch.Tensor, float], torch.Tensor]  # (x (n, d), sigma) -> ∇ log p_sigma(x) (n, d)
METHODS = ("euler", "heun")


def karras_sigmas(n: int, sigma_min: float, sigma_max: float, rho: float = 7.0) -> torch.Tensor:
    """The EDM noise levels (Karras et al. 2022, eq. 5): ``n`` values from ``sigma_max`` down to ``sigma_min``.

    ``σ_i = (σ_max^{1/ρ} + i/(n-1) (σ_min^{1/ρ} - σ_max^{1/ρ}))^ρ``; larger ``rho`` puts more steps at low
    noise. Returned as float64, shape ``(n,)``, without the trailing zero that k-diffusion appends (append
    it yourself to finish at σ = 0).
    """
    check_int(n, "n", 2, MAX_LEVELS)
    sigma_min = check_number(sigma_min, "sigma_min", above=0)
    sigma_max = check_number(sigma_max, "sigma_max", above=0)
    if not sigma_min < sigma_max:
        raise ValueError(
            f"need 0 < sigma_min < sigma_max (finite), got sigma_min={sigma_min}, sigma_max={sigma_max}"
        )
    rho = check_positive(rho, "rho")
    ramp = torch.linspace(0.0, 1.0, n, dtype=torch.float64)  # (n,)
    ends = torch.tensor([sigma_min, sigma_max], dtype=torch.float64)  # a tensor: overflows to inf, no error
    lo, hi = ends ** (1.0 / rho)
    sigmas = (hi + ramp * (lo - hi)) ** rho
    if not (torch.isfinite(sigmas).all() and (sigmas > 0).all() and (sigmas[1:] < sigmas[:-1]).all()):
        raise ValueError(
            f"rho={rho} is too extreme for sigma_min={sigma_min}, sigma_max={sigma_max} in float64: the "
            "schedule over- or underflows (or loses its strict decrease)"
        )
    return sigmas


def sample_pf_ode(
    score_fn: ScoreFn, x_T: torch.Tensor, sigmas: Sequence[float] | torch.Tensor, method: str = "euler"
) -> torch.Tensor:
    """Integrate the VE probability-flow ODE ``dx/dσ = -σ score_fn(x, σ)`` from ``sigmas[0]`` to ``sigmas[-1]``.

    ``x_T`` (any shape, floating point) is a sample of ``p_{sigmas[0]}``; ``sigmas`` is a strictly
    decreasing 1-D sequence of non-negative noise levels. ``method="euler"`` uses ``len(sigmas) - 1``
    score evaluations, ``"heun"`` twice that (minus one if ``sigmas[-1] == 0``). Returns the sample at
    ``sigmas[-1]``, same shape and dtype as ``x_T``. Gradients flow if ``score_fn`` allows them.
    """
    if not callable(score_fn):
        raise TypeError(f"score_fn must be callable as score_fn(x, sigma), got {type(score_fn).__name__}")
    check_tensor(x_T, "x_T", floating=True, finite=True)
    check_choice(method, "method", METHODS)
    levels = as_real_tensor(sigmas, "sigmas")
    if levels.ndim != 1 or levels.numel() < 2:
        raise ValueError(
            f"sigmas must be a 1-D sequence of at least 2 noise levels, got shape {tuple(levels.shape)}"
        )
    if not torch.isfinite(levels).all() or (levels < 0).any() or (levels[1:] >= levels[:-1]).any():
        raise ValueError("sigmas must be finite, non-negative and strictly decreasing")

    def drift(x: torch.Tensor, sigma: float) -> torch.Tensor:  # dx/dσ at (x, σ)
        try:
            score = score_fn(x, sigma)
        except (TypeError, ValueError) as err:
            raise type(err)(
                f"score_fn(x, sigma) refused x shaped like x_T {tuple(x.shape)} ({x.dtype}) at sigma={sigma}: {err}"
            ) from err
        if not isinstance(score, torch.Tensor) or score.shape != x.shape:
            raise ValueError(
                f"score_fn must return a tensor shaped like x {tuple(x.shape)}, got "
                f"{getattr(score, 'shape', type(score).__name__)}"
            )
        return -sigma * score

    x = x_T
    for sigma, sigma_next in itertools.pairwise(levels.tolist()):
        h = sigma_next - sigma  # negative: we integrate towards lower noise
        d = drift(x, sigma)
        x_euler = x + h * d
        if method == "euler" or sigma_next == 0.0:
            x = x_euler
        else:  # Heun: average the slopes at both ends of the step (trapezoidal rule)
            x = x + h * 0.5 * (d + drift(x_euler, sigma_next))
    if not bool(torch.isfinite(x.detach()).all()):
        warnings.warn(
            f"sample_pf_ode: the sample holds NaN or inf ({x.dtype} overflowed, or score_fn returned them)",
            RuntimeWarning,
            stacklevel=2,
        )
    return x
