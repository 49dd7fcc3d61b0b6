"""Split conformal prediction sets for classification: LAC and APS.

* LAC (least ambiguous set-valued classifier; Sadinle, Lei and Wasserman, 2019): score ``1 - p_hat_y(x)``,
  set ``{k : 1 - p_hat_k(x) <= q}``.
* APS (adaptive prediction sets; Romano, Sesia and Candès, 2020): score = total probability of the classes
  ranked at or above the true one, set = the classes whose score is ``<= q``. ``randomized=True`` counts
  only a uniform fraction ``U`` of the true class's own probability (one ``U`` per test point), the
  randomised version with exact coverage; the default is the deterministic, conservative version.

:class:`SplitConformalClassifier` has MAPIE v1's shape: ``predict_set(X)`` gives ``(y_pred, y_pss)``,
``y_pss`` booleans ``(n, n_classes, n_levels)``, column ``k`` for the classifier's ``classes_[k]``.

The one-shot functions :func:`lac_sets` and :func:`aps_sets` (deprecated thin wrappers of it) return
booleans ``(n_test, n_classes)``, column ``k`` for class ``k``. Their numeric labels must be the integers
``0 .. n_classes - 1``; labels of any other kind (strings, objects) are allowed too, and column ``k`` is
then the ``k``-th of the sorted distinct labels of ``y_fit`` (the order of scikit-learn's ``classes_``).
"""

from __future__ import annotations

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.linear_model import LogisticRegression

from icml_stats.conformal.base import ConformalPredictor, check_trained, warn_deprecated
from icml_stats.conformal.split import fit_clone
from icml_stats.validation import (
    as_rng,
    as_split,
    check_bool,
    check_choice,
    check_classifier,
    check_real,
    check_shape,
)

SCORES = ("lac", "aps")


class SplitConformalClassifier(ClassifierMixin, ConformalPredictor):
    """Split conformal prediction sets around any ``predict_proba`` classifier, MAPIE v1's
    ``SplitConformalClassifier`` shape.

    Args:
        estimator: a scikit-learn classifier with ``predict_proba``: trained already when ``prefit=True``
            (used as it is), else a template cloned and trained by ``fit`` (default
            ``LogisticRegression()``).
        confidence_level: a coverage level in (0, 1), or a list of them (one set per level).
        conformity_score: ``"lac"`` (score ``1 - p_y(x)``) or ``"aps"`` (the mass of the classes ranked at
            or above ``y``).
        prefit: whether ``estimator`` is trained already (MAPIE's default, True).
        randomized: APS only: count a uniform fraction ``U`` of the true class's own probability (exact
            coverage); the default is the deterministic, conservative version.
        random_state: the seed of the APS uniforms (None, an int or a numpy Generator). ``conformalize``
            starts its stream; every ``predict_set`` then draws its test uniforms from it, so the first
            call after ``conformalize`` gives the sets of :func:`aps_sets` with the same seed.

    Attributes:
        estimator_: the trained classifier (``estimator`` itself when ``prefit=True``).
        classes_: its classes, the columns of the sets. rng_: the generator of the APS uniforms.
        n_features_in_, conformity_scores_, confidence_levels_, thresholds_: as in
        :class:`SplitConformalRegressor`.
    """

    def __init__(
        self,
        estimator=None,
        confidence_level=0.9,
        conformity_score: str = "lac",
        prefit: bool = True,
        randomized: bool = False,
        random_state=None,
    ):
        self.estimator = estimator
        self.confidence_level = confidence_level
        self.conformity_score = conformity_score
        self.prefit = prefit
        self.randomized = randomized
        self.random_state = random_state

    def predict(self, X) -> np.ndarray:
        """The classifier's predicted labels ``(n,)``."""
        X = self._check_conformalized(X)
        return np.asarray(self._call(self.estimator_, "predict", X))

    def predict_set(self, X) -> tuple[np.ndarray, np.ndarray]:
        """Predicted labels ``(n,)`` and prediction sets ``(n, n_classes, n_levels)`` (booleans, column
        ``k`` for ``classes_[k]``), one set per confidence level."""
        X = self._check_conformalized(X)
        return np.asarray(self._call(self.estimator_, "predict", X)), self._sets(X)

    def _sets(self, X) -> np.ndarray:
        proba = self._proba(X, "X")
        scores = self._class_scores(proba, self._uniforms(proba.shape[0]))  # (n, n_classes)
        return scores[:, :, None] <= self.thresholds_  # (n, n_classes, n_levels)

    def _train(self, X, y, what: str, params: dict) -> None:
        template = LogisticRegression() if self.estimator is None else self.estimator
        self.estimator_ = fit_clone(check_classifier(template, "estimator"), X, y, what, params)

    def _take_prefit(self) -> None:
        if self.estimator is None:
            raise ValueError("estimator must be a trained classifier when prefit=True, got None")
        check_trained(check_classifier(self.estimator, "estimator"), "estimator")
        self.estimator_ = self.estimator

    def _targets(self, y, name: str, n: int, x_name: str) -> np.ndarray:
        a = check_shape(np.asarray(y), name, (n,), f" (one label per row of {x_name})")
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise ValueError(f"{name} must not contain NaN or inf")
        return a

    def _calibration_targets(self, y: np.ndarray, name: str) -> np.ndarray:
        self.classes_ = np.asarray(self.estimator_.classes_)
        return label_index(self.classes_, y, name)  # (n_calib,) columns

    def _scores(self, X, y, what: str) -> np.ndarray:
        check_choice(self.conformity_score, "conformity_score", SCORES)
        check_bool(self.randomized, "randomized")
        self.rng_ = as_rng(self.random_state)
        proba = self._proba(X, what)
        return self._class_scores(proba, self._uniforms(y.size))[np.arange(y.size), y]  # (n_calib,)

    def _uniforms(self, n: int) -> np.ndarray:
        randomized = self.conformity_score == "aps" and check_bool(self.randomized, "randomized")
        return self.rng_.uniform(size=n) if randomized else np.ones(n)

    def _class_scores(self, proba: np.ndarray, u: np.ndarray) -> np.ndarray:
        return 1 - proba if self.conformity_score == "lac" else aps_scores(proba, u)

    def _proba(self, X, what: str) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            proba = np.asarray(self._call(self.estimator_, "predict_proba", X), dtype=float)
        if proba.shape != (X.shape[0], self.classes_.size) or not np.isfinite(proba).all():
            raise ValueError(
                f"the classifier's predict_proba on {what} must give finite probabilities of shape "
                f"({X.shape[0]}, {self.classes_.size}), got shape {proba.shape}: rescale the data"
            )
        return proba


def label_index(classes: np.ndarray, y: np.ndarray, name: str) -> np.ndarray:
    """The column of each label of ``y`` among the classifier's ``classes`` (sorted, as in scikit-learn)."""
    try:
        index = np.searchsorted(classes, y)
        known = (index < classes.size) & (classes[np.minimum(index, classes.size - 1)] == y)
    except TypeError:  # e.g. strings against numbers: no order
        raise TypeError(
            f"{name} must hold labels of the kind of the classifier's classes_ {classes.tolist()}"
        ) from None
    if not known.all():
        raise ValueError(
            f"{name} has the label {y[~known].tolist()[0]!r}, unknown to the classifier (classes_ {classes.tolist()})"
        )
    return index


def aps_scores(proba: np.ndarray, u: np.ndarray) -> np.ndarray:
    """APS scores ``(n, K)``: for each class k, the probability of the classes ranked above k plus ``u``
    times ``p_k`` (one ``u`` per row)."""
    order = np.argsort(-proba, axis=1, kind="stable")  # (n, K) classes by decreasing probability
    sorted_p = np.take_along_axis(proba, order, axis=1)
    above = np.cumsum(sorted_p, axis=1) - sorted_p  # (n, K) mass strictly before each rank
    scores = np.empty_like(proba)
    np.put_along_axis(scores, order, above + u[:, None] * sorted_p, axis=1)
    return scores


# ------------------------------------------------------------------------- deprecated one-shot functions
def lac_sets(classifier, X_fit, y_fit, X_calib, y_calib, X_test, *, alpha: float = 0.1) -> np.ndarray:
    """LAC prediction sets ``(n_test, n_classes)`` at level ``1 - alpha`` around any ``predict_proba`` classifier.

    Deprecated: a thin wrapper of ``SplitConformalClassifier(conformity_score="lac")``, kept for one
    release; it gives the same sets."""
    warn_deprecated(
        "lac_sets",
        'SplitConformalClassifier(classifier, confidence_level=1 - alpha, conformity_score="lac", '
        "prefit=False).fit(X_fit, y_fit).conformalize(X_calib, y_calib).predict_set(X_test)",
    )
    alpha = check_real(alpha, "alpha", "(0, 1)")
    model = SplitConformalClassifier(classifier, 1 - alpha, "lac", prefit=False)
    return _one_shot_sets(model, X_fit, y_fit, X_calib, y_calib, X_test)


def aps_sets(
    classifier,
    X_fit,
    y_fit,
    X_calib,
    y_calib,
    X_test,
    *,
    alpha: float = 0.1,
    randomized: bool = False,
    random_state=None,
) -> np.ndarray:
    """APS prediction sets ``(n_test, n_classes)`` at level ``1 - alpha``.

    Deprecated: a thin wrapper of ``SplitConformalClassifier(conformity_score="aps")``, kept for one
    release; it gives the same sets (the same uniforms for the same ``random_state``)."""
    warn_deprecated(
        "aps_sets",
        'SplitConformalClassifier(classifier, confidence_level=1 - alpha, conformity_score="aps", '
        "prefit=False, randomized=randomized, random_state=random_state).fit(X_fit, y_fit)"
        ".conformalize(X_calib, y_calib).predict_set(X_test)",
    )
    alpha = check_real(alpha, "alpha", "(0, 1)")
    as_rng(random_state)  # checked first, as before
    model = SplitConformalClassifier(
        classifier, 1 - alpha, "aps", prefit=False, randomized=bool(randomized), random_state=random_state
    )
    return _one_shot_sets(model, X_fit, y_fit, X_calib, y_calib, X_test)


def _encode_labels(y_fit, y_calib):
    """Non-numeric labels (strings, objects) as indices into the sorted distinct labels of ``y_fit``;
    numeric labels pass unchanged (they must already be class indices)."""
    yf, yc = np.asarray(y_fit), np.asarray(y_calib)
    if yf.dtype.kind in "biuf" and yc.dtype.kind in "biuf":
        return y_fit, y_calib
    try:
        classes = np.unique(yf)
        unseen = np.setdiff1d(np.unique(yc), classes)
    except TypeError:  # e.g. strings mixed with numbers: no order
        raise TypeError(
            "y_fit and y_calib must hold labels of one sortable kind (all numbers or all strings)"
        ) from None
    if unseen.size:
        raise ValueError(
            f"y_calib has the label {unseen.tolist()[0]!r}, unseen in y_fit (labels {classes.tolist()})"
        )
    return np.searchsorted(classes, yf), np.searchsorted(classes, yc)


def _one_shot_sets(model: SplitConformalClassifier, X_fit, y_fit, X_calib, y_calib, X_test) -> np.ndarray:
    """The sets ``(n_test, n_classes)`` of a deprecated one-shot function (labels as before: class indices,
    or any sortable labels encoded by their sorted order)."""
    y_fit, y_calib = _encode_labels(y_fit, y_calib)
    X_fit, y_fit, X_calib, y_calib, X_test = as_split(X_fit, y_fit, X_calib, y_calib, X_test, labels=True)
    n_classes = int(y_fit.max()) + 1
    if not np.array_equal(np.unique(y_fit), np.arange(n_classes)):
        raise ValueError(f"y_fit must contain every class 0 .. {n_classes - 1} (labels are column indices)")
    if y_calib.max() >= n_classes:
        raise ValueError(
            f"y_calib has the class {y_calib.max()}, unseen in y_fit (classes 0 .. {n_classes - 1})"
        )
    check_classifier(model.estimator)
    model._fit(X_fit, y_fit, ("X_fit", "y_fit"))
    model._conformalize(X_calib, y_calib, ("X_calib", "y_calib"), "X_fit, y_fit, X_calib and y_calib")
    return model._sets(X_test)[:, :, 0]
