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
from sklearn.base import RegressorMixin, clone
from sklearn.linear_model import LinearRegression

from icml_stats.conformal.base import (
    ConformalRegressor,
    check_regression_model,
    check_trained,
    conformal_rank,
    warn_deprecated,
)
from icml_stats.validation import (
    EXTENDED,
    as_array,
    as_intervals,
    as_split,
    check_real,
    check_regressor,
    check_shape,
)


def conformal_quantile(scores, alpha: float) -> float:
    """The split-conformal threshold: the ``ceil((n + 1)(1 - alpha))``-th smallest of ``n`` scores.

    That is the empirical quantile at level ``ceil((n + 1)(1 - alpha)) / n``; it is ``inf`` when that
    rank exceeds ``n`` (``alpha < 1/(n + 1)``: too few calibration points for this ``alpha``), with a
    ``UserWarning`` saying so, since every set or interval built on it is then trivial.
    """
    alpha = check_real(alpha, "alpha", "(0, 1)")
    s = as_array(scores, "scores", ("n",))
    n = s.size
    rank = conformal_rank(n, 1 - alpha)
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


def fit_clone(estimator, X, y, what: str = "X_fit, y_fit", params: dict | None = None):
    """A clone of ``estimator`` fitted with the keyword arguments ``params`` (``fit_params``); a fit that
    fails on the data (e.g. values near the float limit overflow inside it) raises a ValueError naming the
    data, one that refuses ``params`` a TypeError naming ``fit_params``."""
    try:
        return clone(estimator).fit(X, y, **(params or {}))
    except ValueError as err:
        raise ValueError(f"fitting {type(estimator).__name__} on {what} failed: {err}") from err
    except TypeError as err:
        if not params:
            raise
        raise TypeError(
            f"fit_params {sorted(params)} are not accepted by {type(estimator).__name__}.fit: {err}"
        ) from err


def finite_scores(scores, what: str = "X_fit, y_fit, X_calib and y_calib") -> np.ndarray:
    """The calibration scores, refused when they overflowed (fitted on values near the float limit);
    ``what`` names the data in the message."""
    scores = np.asarray(scores, dtype=float)
    if not np.isfinite(scores).all():
        raise ValueError(
            f"{what} give non-finite conformity scores (the model's predictions or residuals overflowed "
            "or are NaN): rescale the data"
        )
    return scores


class SplitConformalRegressor(RegressorMixin, ConformalRegressor):
    """Split conformal regression with absolute residuals, MAPIE v1's ``SplitConformalRegressor`` shape.

    Scores ``|y - mu(x)|`` on the calibration set; the interval at level ``c`` is ``mu(x) ± q_c`` with
    ``q_c`` the ``ceil((n + 1) c)``-th smallest of the ``n`` scores.

    Args:
        estimator: a scikit-learn regressor ``mu``: already trained when ``prefit=True`` (used as it is),
            else a template cloned and trained by ``fit`` (default ``LinearRegression()``).
        confidence_level: a coverage level in (0, 1), or a list of them (one interval per level).
        prefit: whether ``estimator`` is trained already (MAPIE's default, True): then call
            ``conformalize`` directly; ``fit`` is an error.

    Attributes:
        estimator_: the trained regressor (``estimator`` itself when ``prefit=True``).
        n_features_in_: the number of features.
        conformity_scores_: the calibration scores ``(n_calib,)``.
        confidence_levels_: the levels ``(n_levels,)``; thresholds_: their thresholds ``q_c``.

    Example: ``SplitConformalRegressor(model, confidence_level=[0.8, 0.9]).conformalize(X_cal, y_cal)
    .predict_interval(X)`` gives ``(y_pred (n,), y_pis (n, 2, 2))`` for an already trained ``model``.
    """

    def __init__(self, estimator=None, confidence_level=0.9, prefit: bool = True):
        self.estimator = estimator
        self.confidence_level = confidence_level
        self.prefit = prefit

    def _train(self, X, y, what: str, params: dict) -> None:
        template = LinearRegression() if self.estimator is None else check_regression_model(self.estimator)
        self.estimator_ = fit_clone(template, X, y, what, params)

    def _take_prefit(self) -> None:
        if self.estimator is None:
            raise ValueError("estimator must be a trained regressor when prefit=True, got None")
        check_trained(check_regression_model(self.estimator), "estimator")
        self.estimator_ = self.estimator

    def _point(self, X) -> np.ndarray:
        return np.asarray(self._call(self.estimator_, "predict", X), dtype=float)

    def _scores(self, X, y, what: str) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):  # refused just below
            return finite_scores(np.abs(y - self._call(self.estimator_, "predict", X)), what)

    def _bounds(self, X, thresholds):
        center = self._point(X)  # (n,)
        return center, center[:, None] - thresholds, center[:, None] + thresholds  # (n,), (n, k), (n, k)


def split_conformal_interval(
    estimator, X_fit, y_fit, X_calib, y_calib, X_test, *, alpha: float = 0.1
) -> np.ndarray:
    """Prediction intervals ``(n_test, 2)`` at level ``1 - alpha`` from absolute-residual split conformal.

    Deprecated: a thin wrapper of :class:`SplitConformalRegressor` (``prefit=False``, ``confidence_level =
    1 - alpha``), kept for one release; it gives the same intervals.

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
    warn_deprecated(
        "split_conformal_interval",
        "SplitConformalRegressor(estimator, confidence_level=1 - alpha, prefit=False)"
        ".fit(X_fit, y_fit).conformalize(X_calib, y_calib).predict_interval(X_test)",
    )
    alpha = check_real(alpha, "alpha", "(0, 1)")
    check_regressor(estimator)
    X_fit, y_fit, X_calib, y_calib, X_test = as_split(X_fit, y_fit, X_calib, y_calib, X_test)
    model = SplitConformalRegressor(estimator, confidence_level=1 - alpha, prefit=False)
    return one_shot_interval(model, X_fit, y_fit, X_calib, y_calib, X_test, alpha)


def one_shot_interval(model: ConformalRegressor, X_fit, y_fit, X_calib, y_calib, X_test, alpha: float):
    """The intervals ``(n_test, 2)`` of a deprecated one-shot function: ``model`` (``prefit=False``,
    level ``1 - alpha``) trained, calibrated and applied, its errors naming the function's arguments."""
    model._fit(X_fit, y_fit, ("X_fit", "y_fit"))
    model._conformalize(X_calib, y_calib, ("X_calib", "y_calib"), "X_fit, y_fit, X_calib and y_calib")
    if np.isinf(model.thresholds_).any():
        n = model.conformity_scores_.size
        raise ValueError(
            f"alpha = {alpha:g} needs at least {math.ceil(1 / alpha - 1 - 1e-9)} calibration points, got "
            f"{n}: the intervals are infinite; use alpha >= {1 / (n + 1):.3g} or more calibration data"
        )
    return model._interval(X_test, False, "X_test")[1][:, :, 0]


def coverage(y, intervals) -> float | np.ndarray:
    """Fraction of ``y`` inside its closed interval ``[lower, upper]`` (MAPIE's ``regression_coverage_score``).

    Args:
        y: targets ``(n,)`` or ``(n, 1)``; with ``(n, 2, n_levels)`` intervals also ``(n, n_levels)``,
            column ``j`` the targets of level ``j`` (as MAPIE's ``regression_coverage_score``).
        intervals: ``(n, 2)`` lower and upper bounds, ``lower <= upper`` (infinite bounds allowed, e.g. those
            of ``predict_interval(X, allow_infinite_bounds=True)``; MAPIE refuses them), or
            ``(n, 2, n_levels)``, one such pair per confidence level: the ``y_pis`` of ``predict_interval``.

    Returns:
        For ``(n, 2)`` intervals the coverage as a float; for ``(n, 2, n_levels)`` a float array
        ``(n_levels,)``, one coverage per level (as MAPIE's ``regression_coverage_score``).
    """
    y = as_array(y, "y")
    if y.ndim == 2 and y.shape[1] == 1:  # a column vector, e.g. a one-column data frame
        y = y[:, 0]
    if y.ndim == 2:  # one column of targets per confidence level, at least one row
        check_shape(
            y, "y", ("n", "n_levels"), " (one column per level of (n, 2, n_levels) intervals) or (n,)"
        )
    else:
        check_shape(y, "y", ("n",), " or (n, 1), or (n, n_levels) with (n, 2, n_levels) intervals")
    bounds = as_array(intervals, "intervals", interval=EXTENDED)
    if bounds.ndim != 3:
        if y.ndim == 2:
            raise ValueError(
                f"y of shape {y.shape} (one column per confidence level) needs intervals of shape "
                f"({y.shape[0]}, 2, {y.shape[1]}), got {bounds.shape}"
            )
        bounds = as_intervals(bounds, "intervals", y.size, f" or ({y.size}, 2, n_levels)")
        return float(np.mean((bounds[:, 0] <= y) & (y <= bounds[:, 1])))
    check_shape(
        bounds, "intervals", (y.shape[0], 2, "n_levels"), " (one [lower, upper] per sample and level)"
    )
    if y.ndim == 2 and y.shape[1] != bounds.shape[2]:
        raise ValueError(
            f"y of shape {y.shape} must have one column per confidence level of intervals "
            f"{bounds.shape} ({bounds.shape[2]}), or be ({y.shape[0]},)"
        )
    lower, upper = bounds[:, 0, :], bounds[:, 1, :]
    if np.any(lower > upper):
        raise ValueError("intervals must have lower <= upper in every row and level")
    y = y if y.ndim == 2 else y[:, None]  # (n, n_levels) or (n, 1)
    return np.mean((lower <= y) & (y <= upper), axis=0)
