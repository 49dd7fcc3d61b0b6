"""Split conformal regression beyond absolute residuals: locally weighted (normalized) intervals and CQR.

* Locally weighted conformal (Lei et al., 2018, Sec. 5.2): scores ``|y - mu(x)| / sigma(x)`` with
  ``sigma`` a regressor of the absolute residual; intervals ``mu(x) ± q sigma(x)``.
* Conformalized quantile regression, CQR (Romano, Patterson and Candès, 2019): quantile regressors at
  ``alpha/2`` and ``1 - alpha/2``, scores ``max(lo(x) - y, y - hi(x))``, intervals ``[lo - q, hi + q]``.

Both keep the marginal guarantee of split conformal (the threshold is :func:`conformal_quantile` of the
calibration scores) and return MAPIE's interval layout ``(n_test, 2)``. Our own choice: sigma is fitted
on out-of-fold absolute residuals of the fit set (5-fold ``cross_val_predict``), since in-sample
residuals of a flexible mean model are too small, and floored at 1e-6 times their mean.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import clone
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.model_selection import cross_val_predict

from icml_stats.conformal.split import conformal_quantile, finite_bounds, finite_scores, fit_clone
from icml_stats.validation import as_split, check_cv, check_real, check_regressor

SIGMA_FLOOR = 1e-6  # relative to the mean absolute residual: keeps scores finite where sigma_hat ~ 0


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

    Args:
        estimator: scikit-learn regressor for the mean ``mu`` (cloned, fitted on the fit set).
        X_fit, y_fit, X_calib, y_calib, X_test: as in :func:`split_conformal_interval`.
        alpha: miscoverage level in (0, 1).
        scale_estimator: regressor of ``|y - mu(x)|`` (default: a clone of ``estimator``), fitted on
            ``cv``-fold out-of-fold residuals of the fit set.
    """
    alpha = check_real(alpha, "alpha", "(0, 1)")
    check_regressor(estimator)
    if scale_estimator is not None:
        check_regressor(scale_estimator, "scale_estimator")
    X_fit, y_fit, X_calib, y_calib, X_test = as_split(X_fit, y_fit, X_calib, y_calib, X_test)
    cv = check_cv(cv, X_fit.shape[0])
    mean = fit_clone(estimator, X_fit, y_fit)
    try:
        residual = np.abs(y_fit - cross_val_predict(clone(estimator), X_fit, y_fit, cv=cv))  # (n_fit,)
    except ValueError as err:
        raise ValueError(f"cross-fitting the estimator on X_fit, y_fit failed: {err}") from err
    scale = fit_clone(estimator if scale_estimator is None else scale_estimator, X_fit, residual)
    floor = SIGMA_FLOOR * max(float(residual.mean()), np.finfo(float).tiny)

    def sigma(X):
        return np.maximum(np.asarray(scale.predict(X), dtype=float), floor)

    with np.errstate(over="ignore", invalid="ignore"):  # refused just below
        scores = np.abs(y_calib - mean.predict(X_calib)) / sigma(X_calib)
    q = conformal_quantile(finite_scores(scores), alpha)
    with np.errstate(over="ignore", invalid="ignore"):  # refused just below
        center, width = np.asarray(mean.predict(X_test), dtype=float), q * sigma(X_test)  # (n_test,) each
        bounds = np.stack([center - width, center + width], axis=1)
    return finite_bounds(bounds)


def cqr_interval(
    X_fit, y_fit, X_calib, y_calib, X_test, *, alpha: float = 0.1, lower_estimator=None, upper_estimator=None
) -> np.ndarray:
    """CQR intervals ``(n_test, 2)``: ``[lo(x) - q, hi(x) + q]``.

    Args:
        lower_estimator, upper_estimator: regressors of the ``alpha/2`` and ``1 - alpha/2`` conditional
            quantiles (default ``HistGradientBoostingRegressor(loss="quantile")`` at those levels).
    """
    alpha = check_real(alpha, "alpha", "(0, 1)")
    X_fit, y_fit, X_calib, y_calib, X_test = as_split(X_fit, y_fit, X_calib, y_calib, X_test)
    for model, name in ((lower_estimator, "lower_estimator"), (upper_estimator, "upper_estimator")):
        if model is not None:
            check_regressor(model, name)
    if lower_estimator is None:
        lower_estimator = HistGradientBoostingRegressor(loss="quantile", quantile=alpha / 2, random_state=0)
    if upper_estimator is None:
        upper_estimator = HistGradientBoostingRegressor(
            loss="quantile", quantile=1 - alpha / 2, random_state=0
        )
    lo, hi = fit_clone(lower_estimator, X_fit, y_fit), fit_clone(upper_estimator, X_fit, y_fit)
    with np.errstate(over="ignore", invalid="ignore"):  # refused just below
        scores = np.maximum(lo.predict(X_calib) - y_calib, y_calib - hi.predict(X_calib))  # (n_calib,)
        q = conformal_quantile(finite_scores(scores), alpha)
        bounds = np.stack([lo.predict(X_test) - q, hi.predict(X_test) + q], axis=1).astype(float)
    finite_bounds(bounds)
    # crossing quantile fits can give lower > upper for negative q: such a set is empty; keep one point
    bounds[:, 0] = np.minimum(bounds[:, 0], bounds[:, 1])
    return bounds
