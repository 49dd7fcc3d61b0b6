"""Split conformal prediction sets for classification: LAC and APS.

* LAC (least ambiguous set-valued classifier; Sadinle, Lei and Wasserman, 2019): score ``1 - p_hat_y(x)``,
  set ``{k : 1 - p_hat_k(x) <= q}``.
* APS (adaptive prediction sets; Romano, Sesia and Candès, 2020): score = total probability of the classes
  ranked at or above the true one, set = the classes whose score is ``<= q``. ``randomized=True`` counts
  only a uniform fraction ``U`` of the true class's own probability (one ``U`` per test point), the
  randomised version with exact coverage; the default is the deterministic, conservative version.

Sets come in MAPIE's layout: booleans ``(n_test, n_classes)``, column ``k`` for class ``k``. Numeric labels
must be the integers ``0 .. n_classes - 1``; labels of any other kind (strings, objects) are allowed too, and
column ``k`` is then the ``k``-th of the sorted distinct labels of ``y_fit`` (the order of scikit-learn's
``classes_``).
"""

from __future__ import annotations

import numpy as np
from sklearn.base import clone

from icml_stats.conformal.split import conformal_quantile
from icml_stats.validation import as_rng, as_split, check_classifier, check_real


def lac_sets(classifier, X_fit, y_fit, X_calib, y_calib, X_test, *, alpha: float = 0.1) -> np.ndarray:
    """LAC prediction sets ``(n_test, n_classes)`` at level ``1 - alpha`` around any ``predict_proba`` classifier."""
    alpha = check_real(alpha, "alpha", "(0, 1)")
    proba_calib, y_calib, proba_test = _fit_proba(classifier, X_fit, y_fit, X_calib, y_calib, X_test)
    q = conformal_quantile(1 - proba_calib[np.arange(y_calib.size), y_calib], alpha)
    return 1 - proba_test <= q


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
    """APS prediction sets ``(n_test, n_classes)`` at level ``1 - alpha``."""
    alpha = check_real(alpha, "alpha", "(0, 1)")
    rng = as_rng(random_state)
    proba_calib, y_calib, proba_test = _fit_proba(classifier, X_fit, y_fit, X_calib, y_calib, X_test)
    u_calib = rng.uniform(size=y_calib.size) if randomized else np.ones(y_calib.size)
    scores = _aps_scores(proba_calib, u_calib)[np.arange(y_calib.size), y_calib]  # (n_calib,)
    q = conformal_quantile(scores, alpha)
    u_test = rng.uniform(size=proba_test.shape[0]) if randomized else np.ones(proba_test.shape[0])
    return _aps_scores(proba_test, u_test) <= q


def _aps_scores(proba: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``(n, K)``: for each class k, the probability of classes ranked above k plus ``u`` times ``p_k``."""
    order = np.argsort(-proba, axis=1, kind="stable")  # (n, K) classes by decreasing probability
    sorted_p = np.take_along_axis(proba, order, axis=1)
    above = np.cumsum(sorted_p, axis=1) - sorted_p  # (n, K) mass strictly before each rank
    scores = np.empty_like(proba)
    np.put_along_axis(scores, order, above + u[:, None] * sorted_p, axis=1)
    return scores


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


def _fit_proba(classifier, X_fit, y_fit, X_calib, y_calib, X_test):
    y_fit, y_calib = _encode_labels(y_fit, y_calib)
    X_fit, y_fit, X_calib, y_calib, X_test = as_split(X_fit, y_fit, X_calib, y_calib, X_test, labels=True)
    n_classes = int(y_fit.max()) + 1
    if not np.array_equal(np.unique(y_fit), np.arange(n_classes)):
        raise ValueError(f"y_fit must contain every class 0 .. {n_classes - 1} (labels are column indices)")
    if y_calib.max() >= n_classes:
        raise ValueError(
            f"y_calib has the class {y_calib.max()}, unseen in y_fit (classes 0 .. {n_classes - 1})"
        )
    model = clone(check_classifier(classifier)).fit(X_fit, y_fit)
    return model.predict_proba(X_calib), y_calib, model.predict_proba(X_test)
