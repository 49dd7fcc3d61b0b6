"""icml-stats: statistics from ICML 2026: conditional-coverage diagnostics (ERT), sequential CI tests (SKCI), Fréchet regression
(DeSI), label-private regression (Cond-DP), zero-flow tests and Markov blankets (``icml_stats.zeroflow``).

``icml_stats.coverage`` is the conditional-coverage subpackage; the marginal ``coverage`` function of
split conformal stays at ``icml_stats.conformal.coverage`` so the two names do not collide here.
"""

from importlib.metadata import version as _version

from icml_stats import conformal, coverage, seqci, zeroflow
from icml_stats.conformal import (
    ConformalizedQuantileRegressor,
    NormalizedConformalRegressor,
    SplitConformalClassifier,
    SplitConformalRegressor,
    aps_sets,
    conformal_quantile,
    cqr_interval,
    lac_sets,
    normalized_conformal_interval,
    split_conformal_interval,
)
from icml_stats.coverage import *  # noqa: F403  (the subpackage's public API, listed in its __all__)

__version__ = _version("icml-stats")
__all__ = [
    "ConformalizedQuantileRegressor",
    "NormalizedConformalRegressor",
    "SplitConformalClassifier",
    "SplitConformalRegressor",
    "aps_sets",
    "conformal",
    "conformal_quantile",
    "coverage",
    "cqr_interval",
    "lac_sets",
    "normalized_conformal_interval",
    "seqci",
    "split_conformal_interval",
    "zeroflow",
    *coverage.__all__,
]
