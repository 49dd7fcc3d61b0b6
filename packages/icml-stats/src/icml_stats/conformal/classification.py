"""Split conformal prediction sets for classification: LAC and APS.

* LAC (least ambiguous set-valued classifier; Sadinle, Lei and Wasserman, 2019): score ``1 - p_hat_y(x)``,
  set ``{k : 1 - p_hat_k(x) <= q}``.
* APS (adaptive prediction sets; Romano, Sesia and Candès, 2020): score = total probability of the classes
  ranked at or above the true one, set = the classes whose score is ``<= q``. ``randomized=True`` counts
  only a uniform fraction ``U`` of the true class's own probability (one ``U`` per test point), the
  randomised version with exact coverage; the default is the deterministic, conservative version.

Sets come in MAPIE's layout: booleans ``(n_test, n_classes)``, column ``k`` for class ``k``. Labels
must be the integers ``0 .. n_classes - 1``.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import clone

from icml_stats.conformal.split import _as_2d, _check_alpha, conformal_quantile


def lac_sets(classifier, X_fit, y_fit, X_calib, y_calib, X_test, *, alpha: float = 0.1) -> np.ndarray:
    """LAC prediction sets ``(n_test, n_classes)`` at level ``1 - alpha`` around any ``predict_proba`` classifier."""
    alpha = _check_alpha(alpha)
    proba_calib, y_calib, proba_test = _fit_proba(classifier, X_fit, y_fit, X_calib, y_calib, X_test)
    q = conformal_quantile(1 - proba_calib[np.arange(y_calib.size), y_calib], alpha)
    return 1 - proba_test <= q


def aps_sets(
    classifier, X_fit, y_fit, X_calib, y_calib, X_test, *, alpha: float = 0.1, randomized: bool = False,
    random_state=None,
) -> np.ndarray:
    """APS prediction sets ``(n_test, n_classes)`` at level ``1 - alpha``."""
    alpha = _check_alpha(alpha)
    proba_calib, y_calib, proba_test = _fit_proba(classifier, X_fit, y_fit, X_calib, y_calib, X_test)
    rng = np.random.default_rng(random_state)
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


def _fit_proba(classifier, X_fit, y_fit, X_calib, y_calib, X_test):
    X_fit, X_calib, X_test = (_as_2d(a, n) for a, n in ((X_fit, "X_fit"), (X_calib, "X_calib"), (X_test, "X_test")))
    y_fit, y_calib = _labels(y_fit, "y_fit", X_fit.shape[0]), _labels(y_calib, "y_calib", X_calib.shape[0])
    n_classes = int(y_fit.max()) + 1
    if not np.array_equal(np.unique(y_fit), np.arange(n_classes)):
        raise ValueError(f"y_fit must contain every class 0 .. {n_classes - 1} (labels are column indices)")
    if y_calib.max() >= n_classes:
        raise ValueError(f"y_calib has the class {y_calib.max()}, unseen in y_fit (classes 0 .. {n_classes - 1})")
    for name, X in (("X_calib", X_calib), ("X_test", X_test)):
        if X.shape[1] != X_fit.shape[1]:
            raise ValueError(f"{name} must have {X_fit.shape[1]} features like X_fit, got {X.shape[1]}")
    if not hasattr(classifier, "predict_proba"):
        raise TypeError(f"classifier must have predict_proba, got {classifier!r}")
    model = clone(classifier).fit(X_fit, y_fit)
    return model.predict_proba(X_calib), y_calib, model.predict_proba(X_test)


def _labels(y, name: str, n: int) -> np.ndarray:
    a = np.asarray(y)
    if a.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},) (one label per row), got {a.shape}")
    if not np.issubdtype(a.dtype, np.integer):
        af = np.asarray(a, dtype=float)
        if np.isnan(af).any() or not np.all(af == np.round(af)):
            raise ValueError(f"{name} must hold integer class labels 0 .. n_classes - 1")
        a = af.astype(int)
    if a.min() < 0:
        raise ValueError(f"{name} must hold integer class labels 0 .. n_classes - 1, got {a.min()}")
    return a
