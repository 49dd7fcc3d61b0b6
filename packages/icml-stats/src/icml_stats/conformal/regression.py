"""Split conformal regression beyond absolute residuals: locally weighted (normalized) intervals and CQR.

* Locally weighted conformal (Lei et al., 2018, Sec. 5.2): scores ``|y - mu(x)| / sigma(x)`` with
  ``sigma`` a regressor of the absolute residual; intervals ``mu(x) ± q sigma(x)``.
* Conformalized quantile regression, CQR (Romano, Patterson and Candès, 2019): quantile regressors at
  ``alpha/2`` and ``1 - alpha/2``, scores ``max(lo(x) - y, y - hi(x))``, intervals ``[lo - q, hi + q]``.

Both keep the marginal guarantee of split conformal (the threshold is the ``ceil((n + 1) c)``-th smallest
of the ``n`` calibration scores for confidence level ``c``). The estimators
:class:`NormalizedConformalRegressor` and :class:`ConformalizedQuantileRegressor` have MAPIE v1's shape
(``fit`` / ``conformalize`` / ``predict_interval``, intervals ``(n, 2, n_levels)``); the one-shot
functions :func:`normalized_conformal_interval` and :func:`cqr_interval` (MAPIE v0's ``(n_test, 2)``)
are deprecated thin wrappers of them. Our own choice: sigma is fitted on out-of-fold absolute residuals
of the training set (5-fold ``cross_val_predict``), since in-sample residuals of a flexible mean model are
too small, and floored at 1e-6 times their mean.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import RegressorMixin, clone
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import cross_val_predict

from icml_stats.conformal.base import (
    ConformalRegressor,
    check_regression_model,
    check_trained,
    warn_deprecated,
)
from icml_stats.conformal.split import finite_scores, fit_clone, one_shot_interval
from icml_stats.validation import as_split, check_bool, check_cv, check_real, check_regressor

SIGMA_FLOOR = 1e-6  # relative to the mean absolute residual: keeps scores finite where sigma_hat ~ 0


class NormalizedConformalRegressor(RegressorMixin, ConformalRegressor):
    """Locally weighted (normalized) split conformal regression: intervals ``mu(x) ± q_c sigma(x)``.

    Scores ``|y - mu(x)| / sigma(x)`` with ``sigma`` a regressor of the absolute residual, floored at
    ``sigma_floor``.

    Args:
        estimator: the mean regressor ``mu`` (default ``LinearRegression()``); trained already when
            ``prefit=True``, else a template cloned and trained by ``fit``.
        scale_estimator: the regressor ``sigma`` of ``|y - mu(x)|``. ``prefit=False``: a template
            (default: a clone of ``estimator``) trained by ``fit`` on ``cv``-fold out-of-fold absolute
            residuals of the training set. ``prefit=True``: required, trained already.
        confidence_level: a coverage level in (0, 1), or a list of them.
        prefit: whether both models are trained already (default False: ``fit`` trains them).
        cv: folds of the out-of-fold residuals (an int >= 2 or a scikit-learn splitter); ``fit`` only.
        sigma_floor: the smallest ``sigma``, > 0. None: 1e-6 times the mean absolute out-of-fold
            residual of the training set, or with ``prefit=True`` (no training set) of the residuals
            ``|y - mu(x)|`` of the calibration set.

    Attributes:
        estimator_, scale_estimator_: the trained models (those given when ``prefit=True``).
        sigma_floor_: the floor in use. n_features_in_, conformity_scores_, confidence_levels_,
        thresholds_: as in :class:`SplitConformalRegressor`.
    """

    def __init__(
        self,
        estimator=None,
        scale_estimator=None,
        confidence_level=0.9,
        prefit: bool = False,
        cv=5,
        sigma_floor: float | None = None,
    ):
        self.estimator = estimator
        self.scale_estimator = scale_estimator
        self.confidence_level = confidence_level
        self.prefit = prefit
        self.cv = cv
        self.sigma_floor = sigma_floor

    def _floor(self, residual) -> float:
        if self.sigma_floor is not None:
            return check_real(self.sigma_floor, "sigma_floor", "(0, inf)")
        return SIGMA_FLOOR * max(float(np.mean(residual)), np.finfo(float).tiny)

    def _train(self, X, y, what: str, params: dict) -> None:
        mean = LinearRegression() if self.estimator is None else check_regression_model(self.estimator)
        scale = (
            mean
            if self.scale_estimator is None
            else check_regression_model(self.scale_estimator, "scale_estimator")
        )
        cv = check_cv(self.cv, X.shape[0])
        self.estimator_ = fit_clone(mean, X, y, what, params)
        try:  # params: per-sample ones (sample_weight) are split with the folds
            residual = np.abs(y - cross_val_predict(clone(mean), X, y, cv=cv, params=params))  # (n_train,)
        except ValueError as err:
            raise ValueError(f"cross-fitting the estimator on {what} failed: {err}") from err
        self.scale_estimator_ = fit_clone(scale, X, residual, what, params)
        self.sigma_floor_ = self._floor(residual)

    def _take_prefit(self) -> None:
        for model, name in ((self.estimator, "estimator"), (self.scale_estimator, "scale_estimator")):
            if model is None:
                raise ValueError(f"{name} must be a trained regressor when prefit=True, got None")
            check_trained(check_regression_model(model, name), name)
        self.estimator_, self.scale_estimator_ = self.estimator, self.scale_estimator

    def _sigma(self, X) -> np.ndarray:
        sigma = np.asarray(self._call(self.scale_estimator_, "predict", X), dtype=float)
        return np.maximum(sigma, self.sigma_floor_)

    def _point(self, X) -> np.ndarray:
        return np.asarray(self._call(self.estimator_, "predict", X), dtype=float)

    def _scores(self, X, y, what: str) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):  # refused just below
            residual = np.abs(y - self._call(self.estimator_, "predict", X))  # (n_calib,)
            if check_bool(self.prefit, "prefit"):
                self.sigma_floor_ = self._floor(finite_scores(residual, what))
            return finite_scores(residual / self._sigma(X), what)

    def _bounds(self, X, thresholds):
        center, sigma = self._point(X), self._sigma(X)  # (n,) each
        width = sigma[:, None] * thresholds  # (n, k)
        return center, center[:, None] - width, center[:, None] + width


class ConformalizedQuantileRegressor(RegressorMixin, ConformalRegressor):
    """Conformalized quantile regression (CQR): intervals ``[lo(x) - q, hi(x) + q]``.

    Scores ``max(lo(x) - y, y - hi(x))`` (one correction ``q`` for both ends: MAPIE's
    ``symmetric_correction=True``). Crossing quantile fits with a negative ``q`` can give an empty
    interval; it is kept as the single point ``hi + q``.

    Args:
        lower_estimator, upper_estimator: regressors of the conditional quantiles at ``(1 - c) / 2`` and
            ``(1 + c) / 2`` for the confidence level ``c``. ``prefit=False``: templates trained by ``fit``
            (default ``HistGradientBoostingRegressor(loss="quantile")`` at those levels). ``prefit=True``:
            both required, trained already.
        confidence_level: one coverage level in (0, 1) (the quantile models are trained for it).
        prefit: whether both models are trained already (default False, as in MAPIE).

    Attributes:
        lower_estimator_, upper_estimator_: the trained models. n_features_in_, conformity_scores_,
        confidence_levels_, thresholds_: as in :class:`SplitConformalRegressor`.

    ``predict`` gives the midpoint of the two quantile predictions (MAPIE uses a third, median model).
    """

    _n_levels = 1

    def __init__(
        self, lower_estimator=None, upper_estimator=None, confidence_level=0.9, prefit: bool = False
    ):
        self.lower_estimator = lower_estimator
        self.upper_estimator = upper_estimator
        self.confidence_level = confidence_level
        self.prefit = prefit

    def _train(self, X, y, what: str, params: dict) -> None:
        (level,) = self._levels()
        models = []
        for model, name, quantile in (
            (self.lower_estimator, "lower_estimator", (1 - level) / 2),
            (self.upper_estimator, "upper_estimator", (1 + level) / 2),
        ):
            if model is None:
                model = HistGradientBoostingRegressor(loss="quantile", quantile=quantile, random_state=0)
            models.append(check_regression_model(model, name))
        self.lower_estimator_ = fit_clone(models[0], X, y, what, params)
        self.upper_estimator_ = fit_clone(models[1], X, y, what, params)

    def _take_prefit(self) -> None:
        for model, name in (
            (self.lower_estimator, "lower_estimator"),
            (self.upper_estimator, "upper_estimator"),
        ):
            if model is None:
                raise ValueError(f"{name} must be a trained quantile regressor when prefit=True, got None")
            check_trained(check_regression_model(model, name), name)
        self.lower_estimator_, self.upper_estimator_ = self.lower_estimator, self.upper_estimator

    def _quantiles(self, X) -> tuple[np.ndarray, np.ndarray]:
        lo = np.asarray(self._call(self.lower_estimator_, "predict", X), dtype=float)
        return lo, np.asarray(self._call(self.upper_estimator_, "predict", X), dtype=float)

    def _point(self, X) -> np.ndarray:
        lo, hi = self._quantiles(X)
        return (lo + hi) / 2

    def _scores(self, X, y, what: str) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):  # refused just below
            lo, hi = self._quantiles(X)
            return finite_scores(np.maximum(lo - y, y - hi), what)  # (n_calib,)

    def _bounds(self, X, thresholds):
        lo, hi = self._quantiles(X)
        lower, upper = lo[:, None] - thresholds, hi[:, None] + thresholds  # (n, 1) each
        # crossing quantile fits can give lower > upper for negative q: such a set is empty; keep one point
        return (lo + hi) / 2, np.minimum(lower, upper), upper


# ------------------------------------------------------------------------- deprecated one-shot functions
def normalized_conformal_interval(
    estimator,
    X_fit,
    y_fit,
    X_calib,
    y_calib,
    X_test,
    *,
    alpha: float = 0.1,
    scale_estimator=None,
    cv: int = 5,
) -> np.ndarray:
    """Locally weighted split conformal intervals ``(n_test, 2)``: ``mu(x) ± q sigma(x)``.

    Deprecated: a thin wrapper of :class:`NormalizedConformalRegressor` (``prefit=False``,
    ``confidence_level = 1 - alpha``), kept for one release; it gives the same intervals.

    Args:
        estimator: scikit-learn regressor for the mean ``mu`` (cloned, fitted on the fit set).
        X_fit, y_fit, X_calib, y_calib, X_test: as in :func:`split_conformal_interval`.
        alpha: miscoverage level in (0, 1).
        scale_estimator: regressor of ``|y - mu(x)|`` (default: a clone of ``estimator``), fitted on
            ``cv``-fold out-of-fold residuals of the fit set.
    """
    warn_deprecated(
        "normalized_conformal_interval",
        "NormalizedConformalRegressor(estimator, scale_estimator, confidence_level=1 - alpha, cv=cv)"
        ".fit(X_fit, y_fit).conformalize(X_calib, y_calib).predict_interval(X_test)",
    )
    alpha = check_real(alpha, "alpha", "(0, 1)")
    check_regressor(estimator)
    if scale_estimator is not None:
        check_regressor(scale_estimator, "scale_estimator")
    X_fit, y_fit, X_calib, y_calib, X_test = as_split(X_fit, y_fit, X_calib, y_calib, X_test)
    check_cv(cv, X_fit.shape[0])
    model = NormalizedConformalRegressor(
        estimator, scale_estimator, confidence_level=1 - alpha, prefit=False, cv=cv
    )
    return one_shot_interval(model, X_fit, y_fit, X_calib, y_calib, X_test, alpha)


def cqr_interval(
    X_fit, y_fit, X_calib, y_calib, X_test, *, alpha: float = 0.1, lower_estimator=None, upper_estimator=None
) -> np.ndarray:
    """CQR intervals ``(n_test, 2)``: ``[lo(x) - q, hi(x) + q]``.

    Deprecated: a thin wrapper of :class:`ConformalizedQuantileRegressor` (``prefit=False``,
    ``confidence_level = 1 - alpha``), kept for one release; it gives the same intervals.

    Args:
        lower_estimator, upper_estimator: regressors of the ``alpha/2`` and ``1 - alpha/2`` conditional
            quantiles (default ``HistGradientBoostingRegressor(loss="quantile")`` at those levels).
    """
    warn_deprecated(
        "cqr_interval",
        "ConformalizedQuantileRegressor(lower_estimator, upper_estimator, confidence_level=1 - alpha)"
        ".fit(X_fit, y_fit).conformalize(X_calib, y_calib).predict_interval(X_test)",
    )
    alpha = check_real(alpha, "alpha", "(0, 1)")
    X_fit, y_fit, X_calib, y_calib, X_test = as_split(X_fit, y_fit, X_calib, y_calib, X_test)
    for model, name in ((lower_estimator, "lower_estimator"), (upper_estimator, "upper_estimator")):
        if model is not None:
            check_regressor(model, name)
    # the defaults at alpha / 2 and 1 - alpha / 2 exactly as before (1 - (1 - alpha) can differ from alpha)
    if lower_estimator is None:
        lower_estimator = HistGradientBoostingRegressor(loss="quantile", quantile=alpha / 2, random_state=0)
    if upper_estimator is None:
        upper_estimator = HistGradientBoostingRegressor(
            loss="quantile", quantile=1 - alpha / 2, random_state=0
        )
    model = ConformalizedQuantileRegressor(
        lower_estimator, upper_estimator, confidence_level=1 - alpha, prefit=False
    )
    return one_shot_interval(model, X_fit, y_fit, X_calib, y_calib, X_test, alpha)
