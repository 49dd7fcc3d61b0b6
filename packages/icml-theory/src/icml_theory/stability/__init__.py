"""L_p-stability generalization bounds for heavy-tailed losses (numpy and scipy only).

- :mod:`~icml_theory.stability.concentration`: deviation bounds for functions of independent variables with
  L_p bounded differences (Rio's moment inequality, at order p or the best order; a Fuk–Nagaev-type bound)
  beside the classical McDiarmid and Chebyshev/Efron–Stein bounds.
- :mod:`~icml_theory.stability.estimate`: replace-one L_p stability of any algorithm, estimated by
  resampling, vectorized over datasets, with confidence intervals.
- :mod:`~icml_theory.stability.generalization`: generalization-gap bounds for ERM (ridge, logistic),
  transductive regression and meta-learning, with pluggable constants.
- :mod:`~icml_theory.stability.exact`: the same quantities computed exactly for small discrete cases.

The paper's exact constants were not available: the inequalities are the standard ones, documented in each
module, and the reconstructed parts are labelled there.
"""

from icml_theory.stability.concentration import (
    best_order,
    chebyshev_deviation,
    fuk_nagaev_deviation,
    lp_deviation,
    lp_moment_bound,
    mcdiarmid_deviation,
)
from icml_theory.stability.estimate import (
    StabilityEstimate,
    replace_one_differences,
    replace_one_stability,
    stability_from_differences,
)
from icml_theory.stability.exact import (
    ExactMoments,
    exact_moments,
)
from icml_theory.stability.generalization import (
    DEVIATIONS,
    ERMModel,
    ERMStability,
    erm_gap_bound,
    erm_stability,
    logistic,
    meta_learning_gap_bound,
    ridge,
    transductive_gap_bound,
)

__all__ = [
    "DEVIATIONS",
    "ERMModel",
    "ERMStability",
    "ExactMoments",
    "StabilityEstimate",
    "best_order",
    "chebyshev_deviation",
    "erm_gap_bound",
    "erm_stability",
    "exact_moments",
    "fuk_nagaev_deviation",
    "logistic",
    "lp_deviation",
    "lp_moment_bound",
    "mcdiarmid_deviation",
    "meta_learning_gap_bound",
    "replace_one_differences",
    "replace_one_stability",
    "ridge",
    "stability_from_differences",
    "transductive_gap_bound",
]
