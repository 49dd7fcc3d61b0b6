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
import warnings

import numpy as np
from sklearn.base import clone

from icml_stats.validation import as_array, as_intervals, as_split, check_real, check_regressor


def conformal_quantile(scores, alpha: float) -> float:
    """The split-conformal threshold: the ``ceil((n + 1)(1 - alpha))``-th smallest of ``n`` scores.

    That is the empirical quantile at level ``ceil((n + 1)(1 - alpha)) / n``; it is ``inf`` when that
    rank exceeds ``n`` (``alpha < 1/(n + 1)``: too few calibration points for this ``alpha``), with a
    ``UserWarning`` saying so, since every set or interval built on it is then trivial.
    """
    alpha = check_real(alpha, "alpha", "(0, 1)")
    s = as_array(scores, "scores", ("n",))
    n = s.size
    # the tolerance keeps float noise in (n + 1)(1 - alpha) from pushing an integer rank up by one
    rank = math.ceil((n + 1) * (1 - alpha) - 1e-9)
    if rank > n:
        # a tiny alpha makes 1/alpha overflow: the number of points it needs is then unbounded
        needed = f"{math.ceil(1 / alpha) - 1}" if 1 / alpha < 2**53 else "an unbounded number of"
        warnings.warn(
            f"alpha = {alpha:g} is below 1/(n + 1) = {1 / (n + 1):.3g} for n = {n} calibration scores: no finite "
            "threshold guarantees coverage 1 - alpha, so the threshold is inf (every prediction set or interval "
            f"is trivial); use alpha >= {1 / (n + 1):.3g} or at least {needed} calibration points",
            UserWarning,
            stacklevel=2,
        )
        return math.inf
    return float(np.partition(s, rank - 1)[rank - 1])


def fit_clone(estimator, X, y, what: str = "X_fit, y_fit"):
    """A fitted clone of ``estimator``; a fit that fails on the data (e.g. values near the float limit
    overflow inside it) raises a ValueError naming the data."""
    try:
        return clone(estimator).fit(X, y)
    except ValueError as err:
        raise ValueError(f"fitting {type(estimator).__name__} on {what} failed: {err}") from err


def finite_bounds(bounds: np.ndarray) -> np.ndarray:
    """The test intervals, refused when the predictions on X_test overflowed."""
    if not np.isfinite(bounds).all():
        raise ValueError(
            "X_test gives non-finite interval bounds (the predictions overflowed): rescale the data"
        )
    return bounds


def finite_scores(scores) -> np.ndarray:
    """The calibration scores, refused when they overflowed (fitted on values near the float limit)."""
    scores = np.asarray(scores, dtype=float)
    if not np.isfinite(scores).all():
        raise ValueError(
            "X_fit, y_fit, X_calib and y_calib give non-finite conformity scores (the model's predictions "
            "or residuals overflowed or are NaN): rescale the data"
        )
    return scores


def split_conformal_interval(
    estimator, X_fit, y_fit, X_calib, y_calib, X_test, *, alpha: float = 0.1
) -> np.ndarray:
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
    alpha = check_real(alpha, "alpha", "(0, 1)")
    check_regressor(estimator)
    X_fit, y_fit, X_calib, y_calib, X_test = as_split(X_fit, y_fit, X_calib, y_calib, X_test)
    model = fit_clone(estimator, X_fit, y_fit)
    with np.errstate(over="ignore", invalid="ignore"):  # refused just below
        scores = finite_scores(np.abs(y_calib - model.predict(X_calib)))  # (n_calib,)
        q = conformal_quantile(scores, alpha)
        center = np.asarray(model.predict(X_test), dtype=float)  # (n_test,)
        bounds = np.stack([center - q, center + q], axis=1)  # (n_test, 2)
    return finite_bounds(bounds)


def coverage(y, intervals) -> float:
    """Fraction of ``y`` inside its closed interval ``[lower, upper]`` (what MAPIE calls ``regression_coverage_score``).

    Args:
        y: targets ``(n,)``.
        intervals: ``(n, 2)`` lower and upper bounds, ``lower <= upper`` (infinite bounds allowed).
    """
    y = as_array(y, "y", ("n",))
    bounds = as_intervals(intervals, "intervals", y.size)
    return float(np.mean((bounds[:, 0] <= y) & (y <= bounds[:, 1])))
