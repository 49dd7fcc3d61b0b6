"""Every conversion of one RDP profile side by side: the optimal rule, Balle/CKS, Mironov, and an exact
reference where one is known (shared by the reproduction, the plot and the CLI)."""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtr

from icml_theory.privacy.conversions import (
    OptimalConverter,
    cks_epsilon,
    mironov_epsilon,
    tradeoff_from_epsilon_delta_curve,
)
from icml_theory.privacy.tradeoff import DEFAULT_ORDERS, gaussian_tradeoff, randomized_response_tradeoff

CLASSICAL = {"cks": cks_epsilon, "mironov": mironov_epsilon}
# the (eps, delta) family a classical conversion yields, sampled on this delta grid (our design)
CURVE_DELTAS = np.geomspace(1e-16, 0.9, 400)


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact ``eps(delta)`` of mu-GDP: root of ``Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) = delta``."""

    def gap(eps):
        return ndtr(-eps / mu + mu / 2) - math.exp(eps) * ndtr(-eps / mu - mu / 2) - delta

    if gap(0.0) <= 0:
        return 0.0
    hi = 1.0
    while gap(hi) > 0:
        hi *= 2
    return brentq(gap, 0.0, hi, xtol=1e-14, rtol=1e-14)


def randomized_response_epsilon(epsilon0: float, delta: float) -> float:
    """Exact ``eps(delta)`` of randomized response: ``delta(eps) = (e^eps0 - e^eps) / (1 + e^eps0)`` below eps0."""
    inner = math.exp(epsilon0) - delta * (1 + math.exp(epsilon0))
    return max(0.0, math.log(inner)) if inner > 0 else 0.0


def classical_tradeoff(profile, alphas, method: str) -> np.ndarray:
    """The trade-off implied by the ``(eps(delta), delta)`` family of a classical conversion."""
    orders = DEFAULT_ORDERS[DEFAULT_ORDERS > 1]
    rdp = profile(orders)
    eps = [CLASSICAL[method](orders, rdp, float(d))[0] for d in CURVE_DELTAS]
    return tradeoff_from_epsilon_delta_curve(alphas, eps, CURVE_DELTAS)


def compare_methods(profile, deltas, alphas, *, exact: tuple[str, float] | None = None) -> dict:
    """epsilon at each delta and beta at each alpha by every method (and the exact value when known).

    ``exact``: ``("gaussian", mu)`` or ``("randomized_response", eps0)``. Returns
    ``{"epsilon": {method: [...]}, "beta": {method: [...]}}`` with methods optimal, cks, mironov, exact.
    """
    conv = OptimalConverter(profile)
    orders = DEFAULT_ORDERS[DEFAULT_ORDERS > 1]
    rdp = profile(orders)
    alphas = np.asarray(alphas, dtype=np.float64)
    eps = {"optimal": conv.epsilon(deltas).tolist()}
    beta = {"optimal": conv.curve(alphas).beta.tolist()}
    for name, fn in CLASSICAL.items():
        eps[name] = [fn(orders, rdp, float(d))[0] for d in deltas]
        beta[name] = classical_tradeoff(profile, alphas, name).tolist()
    if exact is not None:
        kind, param = exact
        if kind == "gaussian":
            eps["exact"] = [gaussian_epsilon(param, float(d)) for d in deltas]
            beta["exact"] = gaussian_tradeoff(alphas, param).tolist()
        elif kind == "randomized_response":
            eps["exact"] = [randomized_response_epsilon(param, float(d)) for d in deltas]
            beta["exact"] = randomized_response_tradeoff(alphas, param).tolist()
        else:
            raise ValueError(
                f"exact must be ('gaussian', mu) or ('randomized_response', eps0), got {exact!r}"
            )
    return {"epsilon": eps, "beta": beta}
