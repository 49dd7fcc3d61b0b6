"""Split conformal regression with absolute-residual scores (Papadopoulos et al., 2002; Lei et al., 2018,
"Distribution-free predictive inference for regression", JASA, Sec. 2.2).

Fit a regressor on one part of the data, score ``|y - mu(x)|`` on a held-out calibration part of size
``n``, and take the ``ceil((n + 1)(1 - alpha))``-th smallest score ``q``. For exchangeable data the
interval ``mu(x) ± q`` covers a new ``y`` with probability at least ``1 - alpha`` (and below
``1 - alpha + 1/(n + 1)`` when scores have no ties). The guarantee is *marginal*: averaged over x,
not at each x, which is the gap conditional-coverage diagnostics (ERT) measure.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from sklearn.base import clone


def conformal_quantile(scores, alpha: float) -> float:
    """The split-conformal threshold: the ``ceil((n + 1)(1 - alpha))``-th smallest of ``n`` scores.

    That is the empirical quantile at level ``ceil((n + 1)(1 - alpha)) / n``; it is ``inf`` when that
    rank exceeds ``n`` (too few calibration points for this ``alpha``).
    """
    alpha = _check_alpha(alpha)
    s = _as_1d(scores, "scores")
    n = s.size
    # the tolerance keeps float noise in (n + 1)(1 - alpha) from pushing an integer rank up by one
    rank = math.ceil((n + 1) * (1 - alpha) - 1e-9)
    if rank > n:
        return math.inf
    return float(np.partition(s, rank - 1)[rank - 1])


def split_conformal_interval(estimator, X_fit, y_fit, X_calib, y_calib, X_test, *, alpha: float = 0.1) -> np.ndarray:
    """Prediction intervals ``(n_test, 2)`` at level ``1 - alpha`` from absolute-residual split conformal.

    Args:
        estimator: any scikit-learn regressor; a clone is fitted on ``(X_fit, y_fit)`` (the original
            is left untouched).
        X_fit, y_fit: training data, ``(n_fit, d)`` and ``(n_fit,)``.
        X_calib, y_calib: calibration data, ``(n_calib, d)`` and ``(n_calib,)``, not seen in fitting.
        X_test: points to predict, ``(n_test, d)``.
        alpha (float): miscoverage level in (0, 1).

    Returns:
        ``[[lower, upper], ...]``: ``mu(x) ∓ q`` with ``q = conformal_quantile(|y_calib - mu(X_calib)|, alpha)``.
    """
    alpha = _check_alpha(alpha)
    X_fit, y_fit, X_calib, y_calib, X_test = _check_split(X_fit, y_fit, X_calib, y_calib, X_test)
    model = clone(estimator).fit(X_fit, y_fit)
    q = conformal_quantile(np.abs(y_calib - model.predict(X_calib)), alpha)  # (n_calib,) scores -> scalar
    center = np.asarray(model.predict(X_test), dtype=float)  # (n_test,)
    return np.stack([center - q, center + q], axis=1)  # (n_test, 2)


def coverage(y, intervals) -> float:
    """Fraction of ``y`` inside its closed interval ``[lower, upper]`` (what MAPIE calls ``regression_coverage_score``).

    Args:
        y: targets ``(n,)``.
        intervals: ``(n, 2)`` lower and upper bounds, ``lower <= upper`` (infinite bounds allowed).
    """
    y = _as_1d(y, "y")
    bounds = np.asarray(intervals, dtype=float)
    if bounds.shape != (y.size, 2):
        raise ValueError(f"intervals must have shape ({y.size}, 2) (one [lower, upper] per y), got {bounds.shape}")
    if np.isnan(bounds).any():
        raise ValueError("intervals must not contain NaN")
    if np.any(bounds[:, 0] > bounds[:, 1]):
        raise ValueError("intervals must have lower <= upper in every row")
    return float(np.mean((bounds[:, 0] <= y) & (y <= bounds[:, 1])))


def _check_alpha(alpha) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be a number in the open interval (0, 1), got {alpha!r}")
    return float(alpha)


def _as_1d(values, name: str) -> np.ndarray:
    a = np.asarray(values, dtype=float)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite, got NaN or infinite entries")
    return a


def _as_2d(values, name: str) -> np.ndarray:
    a = np.asarray(values, dtype=float)
    if a.ndim != 2 or a.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array (n_samples, n_features), got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite, got NaN or infinite entries")
    return a


def _check_split(X_fit, y_fit, X_calib, y_calib, X_test):
    """Validate the fit, calibration and test parts of a split-conformal regression."""
    X_fit, y_fit = _check_xy(X_fit, y_fit, "X_fit", "y_fit")
    X_calib, y_calib = _check_xy(X_calib, y_calib, "X_calib", "y_calib")
    X_test = _as_2d(X_test, "X_test")
    for name, X in (("X_calib", X_calib), ("X_test", X_test)):
        if X.shape[1] != X_fit.shape[1]:
            raise ValueError(f"{name} must have {X_fit.shape[1]} features like X_fit, got {X.shape[1]}")
    return X_fit, y_fit, X_calib, y_calib, X_test


def _check_xy(X, y, x_name: str, y_name: str) -> tuple[np.ndarray, np.ndarray]:
    X, y = _as_2d(X, x_name), _as_1d(y, y_name)
    if X.shape[0] != y.size:
        raise ValueError(f"{x_name} and {y_name} must have the same length, got {X.shape[0]} and {y.size}")
    return X, y
