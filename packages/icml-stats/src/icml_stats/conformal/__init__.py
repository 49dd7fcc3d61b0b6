"""Split conformal predictors to diagnose: intervals for regression, sets for classification.

Estimators with MAPIE v1's shape (scikit-learn conventions; ``fit`` / ``conformalize`` /
``predict_interval`` or ``predict_set``, ``confidence_level`` a float or a list of floats):

* :class:`SplitConformalRegressor`: absolute residuals ``|y - mu(x)|``, intervals ``mu(x) ± q``;
* :class:`NormalizedConformalRegressor`: locally weighted, ``mu(x) ± q sigma(x)``;
* :class:`ConformalizedQuantileRegressor`: CQR, ``[lo(x) - q, hi(x) + q]``;
* :class:`SplitConformalClassifier`: LAC or APS (deterministic or randomized) sets.

``prefit=True`` takes already trained models as they are (``fit`` is then an error, as in MAPIE);
``prefit=False`` trains clones in ``fit``. ``conformalize`` takes the threshold ``q`` of each level ``c``:
the ``ceil((n + 1) c)``-th smallest of ``n`` calibration scores. ``predict_interval(X)`` returns
``(y_pred, y_pis)`` with intervals ``(n, 2, n_levels)``; ``predict_set(X)`` returns ``(y_pred, y_pss)``
with boolean sets ``(n, n_classes, n_levels)``. Their guarantee is marginal; ``icml_stats.coverage``
measures how far coverage conditional on x is from it.

The MAPIE v0-style one-shot functions (``split_conformal_interval``, ``normalized_conformal_interval``,
``cqr_interval``, ``lac_sets``, ``aps_sets``: ``alpha``, a fresh fit per call, ``(n, 2)`` intervals and
``(n, n_classes)`` sets) are deprecated thin wrappers of the estimators, kept for one release.
"""

from icml_stats.conformal.classification import SplitConformalClassifier, aps_sets, lac_sets
from icml_stats.conformal.regression import (
    ConformalizedQuantileRegressor,
    NormalizedConformalRegressor,
    cqr_interval,
    normalized_conformal_interval,
)
from icml_stats.conformal.split import (
    SplitConformalRegressor,
    conformal_quantile,
    coverage,
    split_conformal_interval,
)

__all__ = [
    "ConformalizedQuantileRegressor",
    "NormalizedConformalRegressor",
    "SplitConformalClassifier",
    "SplitConformalRegressor",
    "aps_sets",
    "conformal_quantile",
    "coverage",
    "cqr_interval",
    "lac_sets",
    "normalized_conformal_interval",
    "split_conformal_interval",
]
