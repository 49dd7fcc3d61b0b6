"""Conditional-coverage diagnostics for conformal prediction: ERT (Braun et al., ICML 2026) and the
metrics it is compared with, under one input contract (features, covers or raw intervals/sets, target).
"""

from icml_stats.coverage.diagnostic import ConditionalCoverageDiagnostic
from icml_stats.coverage.ert import (
    ERTResult,
    cross_fit_proba,
    default_classifier,
    ert,
    ert_from_proba,
    excess_risk_target_coverage,
    pointwise_loss,
    small_sample_classifier,
)
from icml_stats.coverage.metrics import (
    auto_groups,
    coverage_gap,
    equal_opportunity_coverage,
    feature_stratified_coverage,
    hsic,
    pearson_correlation,
    size_stratified_coverage,
    worst_slab_coverage,
)

__all__ = [
    "ConditionalCoverageDiagnostic",
    "ERTResult",
    "auto_groups",
    "coverage_gap",
    "cross_fit_proba",
    "default_classifier",
    "equal_opportunity_coverage",
    "ert",
    "ert_from_proba",
    "excess_risk_target_coverage",
    "feature_stratified_coverage",
    "hsic",
    "pearson_correlation",
    "pointwise_loss",
    "size_stratified_coverage",
    "small_sample_classifier",
    "worst_slab_coverage",
]
