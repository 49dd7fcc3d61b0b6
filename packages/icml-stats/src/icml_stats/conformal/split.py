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

from icml_stats.validation import as_array, as_intervals, as_split, check_real


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
        warnings.warn(
            f"alpha = {alpha:g} is below 1/(n + 1) = {1 / (n + 1):.3g} for n = {n} calibration scores: no finite "
            "threshold guarantees coverage 1 - alpha, so the threshold is inf (every prediction set or interval "
            f"is trivial); use alpha >= {1 / (n + 1):.3g} or at least {math.ceil(1 / alpha) - 1} calibration points",
            UserWarning,
            stacklevel=2,
        )
        return math.inf
    return float(np.partition(s, rank - 1)[rank - 1])


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
    X_fit, y_fit, X_calib, y_calib, X_test = as_split(X_fit, y_fit, X_calib, y_calib, X_test)
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
    y = as_array(y, "y", ("n",))
    bounds = as_intervals(intervals, "intervals", y.size)
    return float(np.mean((bounds[:, 0] <= y) & (y <= bounds[:, 1])))
