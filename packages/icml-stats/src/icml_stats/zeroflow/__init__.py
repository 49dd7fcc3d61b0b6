"""Zero-flow criterion (ICML 2026): the rectified-flow velocity at ``t = 1/2`` of an independent coupling
vanishes iff the two laws are equal. Divergence and velocity regressors (:mod:`.velocity`), two-sample and
Model-X conditional-independence tests with exact sign-flip p-values (:mod:`.testing`), the sufficiency
certificate and amortized Markov-blanket learning (:mod:`.blanket`, the learner needs torch: the ``deep``
extra). The losses and estimators beyond the criterion are our construction, labelled in each module."""

from icml_stats.zeroflow.blanket import SufficiencyCertificate, ZeroFlowMarkovBlanket, sufficiency_certificate
from icml_stats.zeroflow.testing import (
    GaussianConditionalSampler,
    ZeroFlowTestResult,
    sign_flip_p_value,
    zero_flow_ci_test,
    zero_flow_two_sample_test,
)
from icml_stats.zeroflow.velocity import (
    VELOCITY_MODELS,
    MidpointVelocity,
    gaussian_midpoint_velocity,
    gaussian_zero_flow_divergence,
    midpoint_pairs,
    zero_flow_divergence,
)

__all__ = [
    "VELOCITY_MODELS",
    "GaussianConditionalSampler",
    "MidpointVelocity",
    "SufficiencyCertificate",
    "ZeroFlowMarkovBlanket",
    "ZeroFlowTestResult",
    "gaussian_midpoint_velocity",
    "gaussian_zero_flow_divergence",
    "midpoint_pairs",
    "sign_flip_p_value",
    "sufficiency_certificate",
    "zero_flow_ci_test",
    "zero_flow_divergence",
    "zero_flow_two_sample_test",
]
