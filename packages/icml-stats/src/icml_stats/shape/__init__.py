"""PRISM (ICML 2026): probabilistic implicit shape models. A conditional Gaussian field of displacements
given a template point and a covariate (:class:`ShapeField`, needs torch: the ``deep`` extra), its Fisher
information with respect to the covariate in closed form through ``torch.func`` (local temporal
uncertainty, regional pooling), maximum-likelihood covariate estimation and anomaly scores
(:mod:`.fisher`, for any model callable). The network is our design, labelled in :mod:`.field`."""

from icml_stats.shape.field import ShapeField, cholesky_from_raw
from icml_stats.shape.fisher import (
    CovariateEstimate,
    estimate_covariate,
    fisher_information,
    gaussian_log_likelihood,
    regional_information,
)

__all__ = [
    "CovariateEstimate",
    "ShapeField",
    "cholesky_from_raw",
    "estimate_covariate",
    "fisher_information",
    "gaussian_log_likelihood",
    "regional_information",
]
