"""Sequential conditional-independence tests by betting: SKCI (He & Sutherland, ICML 2026) and the
baselines it is compared with (e-CRT, SKIT, batch KCI), on one betting and kernel toolkit."""

from icml_stats.seqci.betting import (
    AGRAPA,
    ONS,
    ConstantFraction,
    MixtureWealth,
    SequentialTestResult,
    SigmoidFraction,
    WealthProcess,
    anytime_p_value,
    ville_threshold,
)
from icml_stats.seqci.datasets import CIData, confounded_ci, gaussian_ci, sinusoidal_ci
from icml_stats.seqci.kernels import (
    RBF,
    Affine,
    ConditionalMeanEmbedding,
    GaussianConditional,
    Linear,
    RBFLinear,
    krr_loo_loss,
    loo_losses,
    median_bandwidth,
    select_ridge,
)
from icml_stats.seqci.skci import SKCI, ConfoundingWarning, run_ablation, shift_for

__all__ = [
    "AGRAPA",
    "ONS",
    "RBF",
    "SKCI",
    "Affine",
    "CIData",
    "ConditionalMeanEmbedding",
    "ConfoundingWarning",
    "ConstantFraction",
    "GaussianConditional",
    "Linear",
    "MixtureWealth",
    "RBFLinear",
    "SequentialTestResult",
    "SigmoidFraction",
    "WealthProcess",
    "anytime_p_value",
    "confounded_ci",
    "gaussian_ci",
    "krr_loo_loss",
    "loo_losses",
    "median_bandwidth",
    "run_ablation",
    "select_ridge",
    "shift_for",
    "sinusoidal_ci",
    "ville_threshold",
]
