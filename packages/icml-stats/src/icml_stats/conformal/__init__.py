"""Split conformal prediction intervals and their coverage.

A placeholder for the conditional-coverage diagnostics to come (ERT): marginal coverage holds by
construction, coverage conditional on x does not, and this subpackage makes both measurable.
"""

from icml_stats.conformal.split import conformal_quantile, coverage, split_conformal_interval

__all__ = ["conformal_quantile", "coverage", "split_conformal_interval"]
