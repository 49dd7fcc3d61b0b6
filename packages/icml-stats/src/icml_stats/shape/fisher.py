"""The Gaussian displacement model's likelihood, Fisher information and covariate estimation, for any model.

A **model** is a callable ``model(points, t) -> (mean, cov)`` on torch float64 tensors: ``points``
``(n, d)`` template points, ``t`` ``(n,)`` one covariate (time, age) per point; ``mean`` ``(n, d)`` and
``cov`` ``(n, d, d)`` symmetric positive definite, the law ``d | p, t ~ N(mean, cov)`` of the displacement
observed at ``p``. Each row must depend on its own ``t`` only (a pointwise field), which is what lets one
forward-mode pass give every point's derivative in ``t``. :class:`~icml_stats.shape.ShapeField` is one;
a closed-form model is another (the tests use one). A model computing in half precision (bfloat16,
float16) may return its ``(mean, cov)`` so: they are cast to float64 (torch's linear algebra has no half
precision).

Fisher information of ``t`` at a point (the standard Gaussian formula)::

    I(t; p) = ∂_t μᵀ Σ⁻¹ ∂_t μ + ½ tr(Σ⁻¹ ∂_t Σ Σ⁻¹ ∂_t Σ)

with ``∂_t μ`` and ``∂_t Σ`` from ``torch.func.jvp`` (exact derivatives of the model, no finite
differences). ``I(t; p)^(-1/2)`` is the local temporal uncertainty (the Cramér–Rao bound of an estimate of
``t`` from that one point); the information of a region is the sum over its points when the
displacements are conditionally independent given ``t``. Maximum-likelihood covariate estimation
(:func:`estimate_covariate`) maximizes ``Σ_p log N(d_p; μ(p, t), Σ(p, t))`` over ``t`` per group (a
subject): a grid, then a bounded Brent refinement around the best grid cell.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from scipy import optimize

from icml_stats.validation import as_array, check_int, check_shape

__all__ = [
    "CovariateEstimate",
    "estimate_covariate",
    "fisher_information",
    "gaussian_log_likelihood",
    "regional_information",
]

Model = Callable[[Any, Any], tuple[Any, Any]]
DIMENSIONS = (2, 3)


def require_torch():
    try:
        import torch
    except ImportError as err:  # pragma: no cover - the deep extra
        raise ImportError("icml_stats.shape needs torch: pip install 'icml-stats[deep]'") from err
    return torch


def as_points(points: Any, name: str = "points", n: int | None = None) -> np.ndarray:
    """``points`` as a finite ``(n, d)`` float array with ``d`` in 2 or 3."""
    a = as_array(points, name)
    check_shape(a, name, ("n_points", "dimension"), " (one row per point)")
    if a.shape[1] not in DIMENSIONS:
        raise ValueError(f"{name} must have 2 or 3 columns (2-D or 3-D shapes), got {a.shape[1]}")
    if n is not None and a.shape[0] != n:
        raise ValueError(f"{name} must have one row per point ({n}, like points), got {a.shape[0]}")
    return a


def as_covariates(covariates: Any, n: int, name: str = "covariates") -> np.ndarray:
    """``covariates`` as a finite ``(n,)`` float array (a scalar is broadcast to every point)."""
    a = as_array(covariates, name)
    if a.ndim == 0:
        a = np.full(n, float(a))
    check_shape(a, name, ("n",), " (one covariate per point, or a scalar)")
    if a.shape[0] != n:
        raise ValueError(f"{name} must have one value per point ({n}, like points), got {a.shape[0]}")
    return a


def _check_model(model: Any) -> Model:
    if not callable(model):
        raise TypeError(
            f"model must be a callable model(points, t) -> (mean, cov), got {type(model).__name__}"
        )
    return model


def _evaluate(model: Model, p, t):
    """``model(p, t)`` with its outputs checked (shapes, finiteness)."""
    torch = require_torch()
    out = model(p, t)
    if not (isinstance(out, tuple | list) and len(out) == 2):
        raise TypeError(f"model must return a pair of torch tensors (mean, cov), got {type(out).__name__}")
    mean, cov = out
    n, d = p.shape
    if not (isinstance(mean, torch.Tensor) and isinstance(cov, torch.Tensor)):
        raise TypeError("model must return two torch tensors (mean, cov)")
    if tuple(mean.shape) != (n, d) or tuple(cov.shape) != (n, d, d):
        raise ValueError(
            f"model must return mean ({n}, {d}) and cov ({n}, {d}, {d}), got {tuple(mean.shape)} and {tuple(cov.shape)}"
        )
    # a model computing on another device (a GPU) returns there: the results come back to the points' (CPU);
    # half-precision outputs come back in the points' dtype, which torch's cholesky and solve support
    if mean.dtype in (torch.float16, torch.bfloat16) or cov.dtype in (torch.float16, torch.bfloat16):
        return mean.to(p.device, p.dtype), cov.to(p.device, p.dtype)
    return mean.to(p.device), cov.to(p.device)


def gaussian_log_likelihood(model: Any, points: Any, covariates: Any, displacements: Any) -> np.ndarray:
    """``log N(d_i; μ(p_i, t_i), Σ(p_i, t_i))`` per point, ``(n,)``."""
    torch = require_torch()
    model = _check_model(model)
    p = as_points(points)
    t = as_covariates(covariates, len(p))
    d = as_points(displacements, "displacements", len(p))
    if d.shape[1] != p.shape[1]:
        raise ValueError(f"displacements must have {p.shape[1]} columns like points, got {d.shape[1]}")
    with torch.no_grad():
        values = _log_likelihood(model, *(torch.as_tensor(a, dtype=torch.float64) for a in (p, t, d))).numpy()
    return warn_if_not_finite(values, "gaussian_log_likelihood")


def warn_if_not_finite(values: np.ndarray, who: str) -> np.ndarray:
    """``values``, with a RuntimeWarning when some are not finite (an overflow from finite input)."""
    if not np.isfinite(values).all():
        warnings.warn(
            f"{who}: {int((~np.isfinite(values)).sum())} value(s) overflowed (displacements far from the model's law)",
            RuntimeWarning,
            stacklevel=3,
        )
    return values


def _log_likelihood(model: Model, p, t, d):
    torch = require_torch()
    mean, cov = _evaluate(model, p, t)
    try:
        chol = torch.linalg.cholesky(cov)
    except torch.linalg.LinAlgError:
        raise ValueError(
            "model's covariance is not positive definite or not finite at some of these points and covariates"
        ) from None
    resid = torch.linalg.solve_triangular(chol, (d - mean).unsqueeze(-1), upper=False).squeeze(-1)
    half_logdet = torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
    return -0.5 * (resid**2).sum(-1) - half_logdet - 0.5 * p.shape[1] * np.log(2 * np.pi)


def fisher_information(model: Any, points: Any, covariates: Any) -> np.ndarray:
    """``I(t_i; p_i)`` per point, ``(n,)`` (the module docstring's formula, derivatives by ``torch.func``)."""
    torch = require_torch()
    model = _check_model(model)
    p = torch.as_tensor(as_points(points), dtype=torch.float64)
    t = torch.as_tensor(as_covariates(covariates, len(p)), dtype=torch.float64)
    return _fisher(model, p, t).numpy()


def _fisher(model: Model, p, t):
    torch = require_torch()
    with torch.no_grad():
        _evaluate(model, p[:1], t[:1])  # the output's kind checked on one point, outside the transform
    with torch.no_grad(), warnings.catch_warnings():
        # torch's forward-mode AD loads its jvp decompositions through torch.jit.script on first use, which
        # warns (FutureWarning) about torch.jit itself: nothing the caller can act on
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.*", category=FutureWarning)
        (_, cov), (dmean, dcov) = torch.func.jvp(
            lambda s: _evaluate(model, p, s), (t,), (torch.ones_like(t),)
        )
    try:
        inv_dmean = torch.linalg.solve(cov, dmean.unsqueeze(-1)).squeeze(-1)
        inv_dcov = torch.linalg.solve(cov, dcov)  # Σ⁻¹ ∂Σ
    except torch.linalg.LinAlgError:
        raise ValueError(
            "model's covariance is singular or not finite at some of these points and covariates (far outside "
            "the data it was fitted on?)"
        ) from None
    mean_term = (dmean * inv_dmean).sum(-1)
    cov_term = 0.5 * torch.diagonal(inv_dcov @ inv_dcov, dim1=-2, dim2=-1).sum(-1)
    return mean_term + cov_term


def regional_information(information: Any, regions: Any) -> tuple[np.ndarray, np.ndarray]:
    """Pool per-point information over regions: ``(labels, summed information)``, labels sorted. The sum
    is the information of the region's points taken together when they are conditionally independent given
    ``t``; ``summed ** -0.5`` is its temporal uncertainty."""
    info = as_array(information, "information", ("n",), interval="[0, inf]")
    labels = np.asarray(regions)
    if labels.shape != info.shape:
        raise ValueError(f"regions must have one label per point ({info.shape[0]}), got shape {labels.shape}")
    keys, inverse = np.unique(labels, return_inverse=True)
    return keys, np.bincount(inverse, weights=info, minlength=len(keys))


class CovariateEstimate(NamedTuple):
    """Per group: ``estimate`` (the maximum-likelihood covariate), ``standard_error`` (``Σ_p I(t̂; p)``
    to the power -1/2, the Cramér–Rao bound at the estimate) and ``log_likelihood`` at the estimate;
    ``groups`` the group labels in the order of the rows (sorted)."""

    groups: np.ndarray
    estimate: np.ndarray
    standard_error: np.ndarray
    log_likelihood: np.ndarray


def estimate_covariate(
    model: Any,
    points: Any,
    displacements: Any,
    bounds: tuple[float, float],
    *,
    groups: Any = None,
    grid: int = 101,
) -> CovariateEstimate:
    """Maximum-likelihood covariate of each group (a subject's points; one group when ``groups`` is None)
    within ``bounds``: the summed log-likelihood on ``grid`` equally spaced values, then Brent's bounded
    method on the two cells around the best one."""
    torch = require_torch()
    model = _check_model(model)
    p = as_points(points)
    d = as_points(displacements, "displacements", len(p))
    if d.shape[1] != p.shape[1]:
        raise ValueError(f"displacements must have {p.shape[1]} columns like points, got {d.shape[1]}")
    lo, hi = _check_bounds(bounds)
    grid = check_int(grid, "grid", 3, 100_000)
    labels = np.zeros(len(p), dtype=int) if groups is None else np.asarray(groups)
    if labels.shape != (len(p),):
        raise ValueError(f"groups must have one label per point ({len(p)}), got shape {labels.shape}")
    keys, inverse = np.unique(labels, return_inverse=True)
    pt, dt = torch.as_tensor(p, dtype=torch.float64), torch.as_tensor(d, dtype=torch.float64)
    index = torch.as_tensor(inverse)

    def summed(values: np.ndarray) -> np.ndarray:
        """Summed log-likelihood of every group at covariate ``values`` (one per group)."""
        with torch.no_grad():
            t = torch.as_tensor(values, dtype=torch.float64)[index]
            ll = _log_likelihood(model, pt, t, dt)
        return np.bincount(inverse, weights=ll.numpy(), minlength=len(keys))

    candidates = np.linspace(lo, hi, grid)
    table = np.stack([summed(np.full(len(keys), c)) for c in candidates])  # (grid, groups)
    best = table.argmax(0)
    estimate = candidates[best].astype(float)
    step = (hi - lo) / (grid - 1)
    for g in range(len(keys)):
        a, b = max(lo, estimate[g] - step), min(hi, estimate[g] + step)
        members = inverse == g
        sub = torch.as_tensor(np.flatnonzero(members))

        def negative(s: float, sub=sub) -> float:
            with torch.no_grad():
                t = torch.full((len(sub),), float(s), dtype=torch.float64)
                return -float(_log_likelihood(model, pt[sub], t, dt[sub]).sum())

        result = optimize.minimize_scalar(negative, bounds=(a, b), method="bounded", options={"xatol": 1e-10})
        if -result.fun >= table[best[g], g]:
            estimate[g] = float(result.x)
    with torch.no_grad():
        t_hat = torch.as_tensor(estimate, dtype=torch.float64)[index]
        info = _fisher(model, pt, t_hat).numpy()
    total = np.bincount(inverse, weights=info, minlength=len(keys))
    with np.errstate(divide="ignore"):
        standard_error = np.where(total > 0, total, 0.0) ** -0.5
    return CovariateEstimate(keys, estimate, standard_error, summed(estimate))


def _check_bounds(bounds: Any) -> tuple[float, float]:
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise TypeError(f"bounds must be a pair (low, high) of numbers, got {bounds!r}") from None
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError(f"bounds must be finite with low < high, got {bounds!r}")
    return lo, hi
