"""What the conformal predictors share: MAPIE v1's life cycle, its confidence levels and output layout.

Each predictor is a scikit-learn estimator (``__init__`` only stores its parameters, learned attributes
end in ``_``, ``get_params``/``clone`` work) with MAPIE v1's steps:

1. ``fit(X_train, y_train)`` trains a clone of the underlying model(s); only with ``prefit=False``.
   With ``prefit=True`` the model(s) given are already trained, used as they are (never cloned or
   refitted), and calling ``fit`` is an error, as in MAPIE.
2. ``conformalize(X_conformalize, y_conformalize)`` scores a calibration set the models never saw and
   keeps one threshold per confidence level: the ``ceil((n + 1) * confidence_level)``-th smallest of the
   ``n`` scores (:func:`conformal_rank`), ``inf`` with a warning when that rank exceeds ``n``.
   ``predict_params`` (MAPIE's) are keyword arguments of the models' ``predict`` / ``predict_proba``, used
   there and in every prediction after it.
3. ``predict_interval(X)`` / ``predict_set(X)`` return ``(y_pred, y_pis)``, ``y_pis`` of shape
   ``(n, 2, n_levels)`` / ``(n, n_classes, n_levels)``; ``predict(X)`` the point prediction alone.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from sklearn.base import BaseEstimator, is_classifier
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from icml_stats.validation import (
    as_array,
    as_confidence_levels,
    check_bool,
    check_regressor,
    keep_state_on_failure,
)


def conformal_rank(n: int, level: float) -> int:
    """``ceil((n + 1) * level)``: the rank among ``n`` calibration scores of the split-conformal threshold
    for coverage ``level``."""
    # the tolerance keeps float noise in (n + 1) * level from pushing an integer rank up by one
    return math.ceil((n + 1) * level - 1e-9)


def conformal_thresholds(scores: np.ndarray, levels: tuple[float, ...]) -> np.ndarray:
    """``(n_levels,)``: per confidence level, the ``conformal_rank``-th smallest score, or ``inf`` (with a
    ``UserWarning``) when the rank exceeds ``n``: too few calibration points for that level."""
    n = scores.size
    ordered = np.sort(scores)
    thresholds = np.empty(len(levels))
    for j, level in enumerate(levels):
        rank = conformal_rank(n, level)
        if rank > n:
            needed = math.ceil(level / (1 - level) - 1e-9)
            warnings.warn(
                f"confidence_level = {level:g} is above n/(n + 1) = {n / (n + 1):.3g} for n = {n} calibration "
                "scores: no finite threshold guarantees it, so the threshold is inf (every prediction set or "
                f"interval at this level is trivial); use at least {needed} calibration points",
                UserWarning,
                stacklevel=4,
            )
            thresholds[j] = math.inf
        else:
            thresholds[j] = ordered[rank - 1]
    return thresholds


def warn_deprecated(old: str, new: str) -> None:
    """The ``DeprecationWarning`` of a v0 one-shot function that became a thin wrapper of ``new``."""
    warnings.warn(
        f"{old} is deprecated and will be removed after one release; use {new} instead",
        DeprecationWarning,
        stacklevel=3,
    )


def check_regression_model(model, name: str = "estimator"):
    """A scikit-learn regressor instance (a classifier is refused: it would be fitted to real targets)."""
    check_regressor(model, name)
    if is_classifier(model):
        raise TypeError(f"{name} must be a regressor, got the classifier {model!r}")
    return model


def check_fit_params(fit_params, name: str = "fit_params", example: str = "{'sample_weight': w}") -> dict:
    """MAPIE's ``fit_params`` (or ``predict_params``, ``name``): None or a dict of keyword arguments (str
    keys) for the models' ``fit`` (``predict``)."""
    if fit_params is None:
        return {}
    if not isinstance(fit_params, dict) or not all(isinstance(key, str) for key in fit_params):
        method = name.removesuffix("_params")
        raise TypeError(
            f"{name} must be None or a dict of keyword arguments of the model's {method}, e.g. "
            f"{example}, got {fit_params!r}"
        )
    return dict(fit_params)


def check_trained(model, name: str) -> None:
    """With ``prefit=True``, ``model`` must be trained already (scikit-learn's ``check_is_fitted``)."""
    try:
        check_is_fitted(model)
    except NotFittedError as err:
        raise NotFittedError(
            f"{name} must be a trained model when prefit=True (or pass prefit=False and call fit): {err}"
        ) from None


class ConformalPredictor(BaseEstimator):
    """The MAPIE v1 life cycle shared by the regressors and the classifier (see the module doc).

    Subclasses define ``_train(X, y, what, params)`` (fit clones of their models, ``params`` the keyword
    arguments of their ``fit``), ``_take_prefit()`` (check and take the trained models),
    ``_scores(X, y, what)`` (calibration scores ``(n,)``) and their predictions.
    ``what`` names the data in error messages, so that the deprecated one-shot functions can keep
    their argument names.
    """

    _n_levels: int | None = None  # a fixed number of confidence levels (CQR: 1), or any

    def fit(self, X_train, y_train, fit_params: dict | None = None):
        """Train clones of the model(s) on ``(X_train, y_train)``; returns self. Only with ``prefit=False``.

        ``fit_params``: keyword arguments of every model's ``fit``, e.g. ``{"sample_weight": w}`` (one weight
        per row of ``X_train``; a Pipeline's ``{"ridge__sample_weight": w}``), as MAPIE's ``fit_params``.
        """
        if check_bool(self.prefit, "prefit"):
            raise ValueError(
                "fit must be skipped when prefit=True (the model is already trained): call conformalize "
                "directly, or pass prefit=False to train the model here"
            )
        self._levels()
        return self._fit(X_train, y_train, ("X_train", "y_train"), check_fit_params(fit_params))

    def conformalize(self, X_conformalize, y_conformalize, predict_params: dict | None = None):
        """Score the calibration set ``(X_conformalize, y_conformalize)`` (data the model never saw) and
        keep one threshold per confidence level; returns self.

        ``predict_params``: keyword arguments of every model's ``predict`` (the classifier's ``predict`` and
        ``predict_proba``), as MAPIE's ``predict_params``: used on the calibration set here and by every
        later ``predict``, ``predict_interval`` and ``predict_set`` (kept as ``predict_params_``), so the
        scores and the predictions they calibrate come from the same model.
        """
        return self._conformalize(
            X_conformalize,
            y_conformalize,
            ("X_conformalize", "y_conformalize"),
            "X_conformalize, y_conformalize",
            check_fit_params(predict_params, "predict_params", "{'n_neighbors': 5}"),
        )

    # ----------------------------------------------------------------------------- the shared steps
    def _levels(self) -> tuple[float, ...]:
        levels = as_confidence_levels(self.confidence_level)
        if self._n_levels is not None and len(levels) != self._n_levels:
            raise ValueError(
                f"confidence_level must be one number for {type(self).__name__} (its models are trained "
                f"for one level), got {len(levels)} levels"
            )
        return levels

    def _features(self, X, name: str, n_features: int | None = None):
        """``X`` for the model(s), ``(n, n_features)`` (the columns of the training data).

        A data frame (pandas, polars: anything 2-D with ``columns``) goes to the models as it is, as MAPIE
        passes it: a model trained on one, e.g. a Pipeline whose ``ColumnTransformer`` selects columns by
        name or one-hot encodes a string column, needs the frame (a float array made such a prefit model
        raise, or warn that X has no feature names); the models check its values. Anything else becomes a
        finite float array.
        """
        shape = getattr(X, "shape", None)
        if hasattr(X, "columns") and shape is not None and len(shape) == 2:
            expected = "n_features" if n_features is None else n_features
            if shape[0] < 1 or shape[1] < 1 or (n_features is not None and shape[1] != n_features):
                raise ValueError(f"{name} must have shape (n_{name}, {expected}), got {tuple(shape)}")
            return X
        return as_array(X, name, (f"n_{name}", "n_features" if n_features is None else n_features))

    def _fit(self, X, y, names: tuple[str, str], params: dict | None = None):
        with keep_state_on_failure(self):  # a refused refit keeps the earlier models and calibration
            return self._fit_models(X, y, names, params or {})

    def _fit_models(self, X, y, names: tuple[str, str], params: dict):
        X = self._features(X, names[0])
        y = self._targets(y, names[1], X.shape[0], names[0])
        # a refit makes a new model: the thresholds calibrated for the old one no longer hold for it
        for attr in ("conformity_scores_", "confidence_levels_", "thresholds_", "predict_params_"):
            self.__dict__.pop(attr, None)
        self._train(X, y, ", ".join(names), params)
        self.n_features_in_ = X.shape[1]
        self.is_trained_ = True
        return self

    def _conformalize(self, X, y, names: tuple[str, str], what: str, params: dict | None = None):
        # a refused calibration keeps the earlier one whole: with prefit=True the model given is taken
        # before the data are checked, and was left beside the thresholds of the model it replaced
        with keep_state_on_failure(self):
            return self._calibrate(X, y, names, what, params or {})

    def _call(self, model, method: str, X):
        """``model.method(X, **predict_params_)``; a model that refuses those parameters raises a TypeError
        naming ``predict_params``."""
        params = getattr(self, "predict_params_", {})
        try:
            return getattr(model, method)(X, **params)
        except TypeError as err:
            if not params:
                raise
            raise TypeError(
                f"predict_params {sorted(params)} are not accepted by {type(model).__name__}.{method}: {err}"
            ) from err

    def _calibrate(self, X, y, names: tuple[str, str], what: str, params: dict):
        levels = self._levels()
        if check_bool(self.prefit, "prefit"):
            self._take_prefit()
        elif not getattr(self, "is_trained_", False):
            raise NotFittedError(
                f"{type(self).__name__} is not trained: call fit(X_train, y_train) before conformalize, "
                "or pass a trained model with prefit=True"
            )
        X = self._features(X, names[0], getattr(self, "n_features_in_", None))
        y = self._targets(y, names[1], X.shape[0], names[0])
        self.n_features_in_ = X.shape[1]
        self.predict_params_ = params
        scores = self._scores(X, self._calibration_targets(y, names[1]), what)
        self.conformity_scores_ = scores
        self.confidence_levels_ = np.asarray(levels)
        self.thresholds_ = conformal_thresholds(scores, levels)
        return self

    def _targets(self, y, name: str, n: int, x_name: str) -> np.ndarray:
        return as_array(y, name, (n,), hint=f" (one per row of {x_name})")

    def _calibration_targets(self, y: np.ndarray, name: str) -> np.ndarray:
        return y  # the classifier maps its labels to columns here

    def _check_conformalized(self, X, name: str = "X"):
        check_is_fitted(self, "thresholds_")
        return self._features(X, name, self.n_features_in_)


class ConformalRegressor(ConformalPredictor):
    """Regression: ``predict_interval`` and ``predict``; subclasses define ``_point(X)`` and
    ``_bounds(X, thresholds)`` returning ``(y_pred (n,), lower (n, k), upper (n, k))``."""

    def predict(self, X) -> np.ndarray:
        """Point predictions ``(n,)``."""
        X = self._check_conformalized(X)
        return self._finite_point(X, "X")

    def predict_interval(self, X, allow_infinite_bounds: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Point predictions ``(n,)`` and intervals ``(n, 2, n_levels)`` (lower, upper), one per level.

        Args:
            X: features ``(n, n_features)``.
            allow_infinite_bounds: accept the infinite intervals of a level the calibration set is too
                small for (``ceil((n + 1) * level) > n``); by default that is an error, as in MAPIE.
        """
        X = self._check_conformalized(X)
        allow = check_bool(allow_infinite_bounds, "allow_infinite_bounds")
        return self._interval(X, allow, "X")

    def _interval(self, X, allow_infinite_bounds: bool, what: str) -> tuple[np.ndarray, np.ndarray]:
        infinite = np.isinf(self.thresholds_)
        if infinite.any() and not allow_infinite_bounds:
            level = float(self.confidence_levels_[infinite][0])
            n = self.conformity_scores_.size
            raise ValueError(
                f"confidence_level = {level:g} needs at least {math.ceil(level / (1 - level) - 1e-9)} "
                f"calibration points, got {n}: its intervals are infinite; calibrate on more data or pass "
                "allow_infinite_bounds=True"
            )
        with np.errstate(over="ignore", invalid="ignore"):  # refused just below
            y_pred, lower, upper = self._bounds(X, self.thresholds_)
        y_pis = np.stack([lower, upper], axis=1)  # (n, 2, n_levels)
        if not (np.isfinite(y_pred).all() and np.isfinite(y_pis[:, :, ~infinite]).all()):
            raise ValueError(
                f"{what} gives non-finite interval bounds (the predictions overflowed): rescale the data"
            )
        return y_pred, y_pis

    def _finite_point(self, X, what: str) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):  # refused just below
            y_pred = self._point(X)
        if not np.isfinite(y_pred).all():
            raise ValueError(f"{what} gives non-finite predictions (they overflowed): rescale the data")
        return y_pred
