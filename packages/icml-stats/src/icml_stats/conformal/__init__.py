"""Split conformal predictors to diagnose: intervals for regression, sets for classification.

Absolute-residual split conformal, locally weighted (normalized) conformal and CQR give intervals
``(n, 2)``; LAC and APS give boolean sets ``(n, n_classes)`` (MAPIE's layouts). Their guarantee is
marginal; ``icml_stats.coverage`` measures how far coverage conditional on x is from it.
"""

from icml_stats.conformal.classification import aps_sets, lac_sets
from icml_stats.conformal.regression import cqr_interval, normalized_conformal_interval
from icml_stats.conformal.split import conformal_quantile, coverage, split_conformal_interval

__all__ = [
    "aps_sets",
    "conformal_quantile",
    "coverage",
    "cqr_interval",
    "lac_sets",
    "normalized_conformal_interval",
    "split_conformal_interval",
]
