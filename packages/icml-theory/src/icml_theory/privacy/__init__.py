"""Optimal RDP -> f-DP conversion (Riess, Gomez, Calmon, Schnabel, Kaissis, ICML 2026) and a privacy accountant.

The intersection of single-order RDP privacy regions, ``f(alpha) = sup_{tau >= 0.5} f_{tau,rho(tau)}(alpha)``,
is the tightest trade-off function any black-box conversion can derive from an RDP profile. This
subpackage computes it (:func:`optimal_tradeoff`), converts it to ``(epsilon, delta)`` and attack views,
compares it with the classical conversions, and wraps it in an opacus-shaped accountant.
"""

from icml_theory.privacy.accountant import OptimalRDPAccountant, get_noise_multiplier
from icml_theory.privacy.conversions import (
    OptimalConverter,
    cks_delta,
    cks_epsilon,
    max_advantage,
    mironov_delta,
    mironov_epsilon,
    optimal_delta,
    optimal_epsilon,
    tpr_at_fpr,
    tradeoff_from_epsilon_delta_curve,
)
from icml_theory.privacy.integrations import register_opacus
from icml_theory.privacy.profiles import (
    ComposedRDP,
    GaussianRDP,
    LaplaceRDP,
    RandomizedResponseRDP,
    RDPProfile,
    SubsampledGaussianRDP,
    TabulatedRDP,
    bernoulli_renyi,
)
from icml_theory.privacy.tradeoff import (
    DEFAULT_ORDERS,
    TradeoffCurve,
    epsilon_delta_tradeoff,
    gaussian_tradeoff,
    optimal_tradeoff,
    randomized_response_tradeoff,
    single_order_tradeoff,
)

__all__ = [
    "DEFAULT_ORDERS",
    "ComposedRDP",
    "GaussianRDP",
    "LaplaceRDP",
    "OptimalConverter",
    "OptimalRDPAccountant",
    "RDPProfile",
    "RandomizedResponseRDP",
    "SubsampledGaussianRDP",
    "TabulatedRDP",
    "TradeoffCurve",
    "bernoulli_renyi",
    "cks_delta",
    "cks_epsilon",
    "epsilon_delta_tradeoff",
    "gaussian_tradeoff",
    "get_noise_multiplier",
    "max_advantage",
    "mironov_delta",
    "mironov_epsilon",
    "optimal_delta",
    "optimal_epsilon",
    "optimal_tradeoff",
    "randomized_response_tradeoff",
    "register_opacus",
    "single_order_tradeoff",
    "tpr_at_fpr",
    "tradeoff_from_epsilon_delta_curve",
]
