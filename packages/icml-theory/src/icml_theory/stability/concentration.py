"""Deviation bounds for Z = Φ(X_1, ..., X_n) of independent variables, from L_p bounded differences.

Notation: X^{(i)} is X with X_i replaced by an independent copy; the L_p bounded difference of coordinate i
is c_i = ‖Φ(X) − Φ(X^{(i)})‖_p. Every function here returns a deviation t such that
P(Z − EZ ≥ t) ≤ δ (``two_sided=False``, the default: the generalization-gap direction) or
P(|Z − EZ| ≥ t) ≤ δ (``two_sided=True``).

- :func:`lp_moment_bound`: ‖Z − EZ‖_p ≤ sqrt(K_p Σ c_i²), K_p = p − 1. Proof: the Doob martingale
  differences are D_i = E[Φ(X) − Φ(X^{(i)}) | X_1..X_i], so ‖D_i‖_p ≤ c_i (conditional Jensen), and Rio's
  inequality for martingales (2009), ‖Σ D_i‖_p² ≤ (p − 1) Σ ‖D_i‖_p² for p ≥ 2, finishes it.
- :func:`lp_deviation`: Markov's inequality on that moment, t = sqrt(K_q Σ c_i²) δ^{−1/q}, at the best order
  q in [2, p] (c_{i,q} ≤ c_{i,p} by Lyapunov, so the p-th differences serve every lower order). The best
  order has a closed form, q* = L + sqrt(L² − 2L) with L = log(1/δ) (clipped to [2, p]), so with many
  moments the bound falls to the sub-Gaussian rate sqrt(2e Σ c_i² log(1/δ)) and with few it keeps the
  polynomial δ^{−1/p} that only p moments allow.
- :func:`fuk_nagaev_deviation`: the Fuk–Nagaev form, a Gaussian term in Σ c_{i,2}² plus a polynomial term in
  Σ c_{i,p}^p: P(Z − EZ ≥ t) ≤ A_p Σ c_{i,p}^p / t^p + exp(−B_p t² / Σ c_{i,2}²) with Nagaev's (1979)
  constants A_p = (1 + 2/p)^p and B_p = 2 / ((p + 2)² e^p) by default, solved for t. For sums of
  independent variables this is the Fuk–Nagaev inequality (c_{i,p} ≥ ‖X_i − EX_i‖_p by Jensen). For a
  general Φ it is **our reconstruction** of the shape the paper's sharp inequality takes: the paper's
  constants were not available, so A_p and B_p are arguments.
- :func:`mcdiarmid_deviation`: the classical bounded-differences bound, t = sqrt(Σ c_i² log(1/δ) / 2), valid
  when c_i bounds |Φ(x) − Φ(x^{(i)})| almost surely (a range, not a moment).
- :func:`chebyshev_deviation`: Chebyshev (two-sided) or Cantelli (one-sided) with the Efron–Stein variance
  bound Var Z ≤ ½ Σ c_{i,2}².
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy.optimize import brentq
from scipy.special import logsumexp

from icml_theory.validation import as_array, check_real

__all__ = [
    "best_order",
    "chebyshev_deviation",
    "fuk_nagaev_deviation",
    "lp_deviation",
    "lp_moment_bound",
    "mcdiarmid_deviation",
]


def _differences(c, name: str = "c") -> np.ndarray:
    """Bounded differences: a scalar (one coordinate) or a 1-d array, each finite and >= 0, non-empty."""
    a = as_array(c, name, "[0, inf)", "finite non-negative bounded differences")
    if a.ndim > 1 or a.size == 0:
        raise ValueError(f"{name} must be a number or a non-empty 1-d array, got shape {a.shape}")
    return a.reshape(-1)


def _root_sum_squares(c: np.ndarray) -> float:
    """sqrt(Σ c_i²), scaled by max c_i so that huge differences do not overflow."""
    top = float(c.max())
    return top * math.sqrt(float(np.sum((c / top) ** 2))) if top > 0 else 0.0


def _finite(value: float, what: str) -> float:
    """``value``, with a RuntimeWarning when finite inputs overflowed it to inf."""
    if not math.isfinite(value):
        warnings.warn(f"{what} overflows float64; returning inf", RuntimeWarning, stacklevel=3)
    return value


def _delta(delta) -> float:
    return check_real(delta, "delta", "(0, 1)")


def _order(p, name: str = "p") -> float:
    # p >= 2: Rio's inequality (and every bound built on it) needs it
    return check_real(p, name, "[2, inf)")


def _flag(value, name: str) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return bool(value)


def lp_moment_bound(c, p, *, constant: float | None = None) -> float:
    """The bound sqrt(K_p Σ c_i²) on ‖Z − EZ‖_p, with K_p = ``constant`` (default p − 1, Rio's constant)."""
    c, p = _differences(c), _order(p)
    k = p - 1 if constant is None else check_real(constant, "constant", "(0, inf)")
    return _finite(math.sqrt(k) * _root_sum_squares(c), "lp_moment_bound")


def best_order(delta, p) -> float:
    """The order q in [2, p] minimising sqrt(q − 1) δ^{−1/q}: q* = L + sqrt(L² − 2L), L = log(1/δ), clipped."""
    delta, p = _delta(delta), _order(p)
    big_l = -math.log(delta)
    q = big_l + math.sqrt(big_l * big_l - 2 * big_l) if big_l > 2 else 2.0
    return float(min(max(q, 2.0), p))


def lp_deviation(c, p, delta, *, optimize_order: bool = True, two_sided: bool = False) -> float:
    """t with P(Z − EZ ≥ t) ≤ δ from L_p differences: sqrt((q − 1) Σ c_i²) δ^{−1/q} at q = :func:`best_order`
    (``optimize_order``) or q = p. ``c`` holds the differences in L_p (c_{i,p})."""
    c, p, delta = _differences(c), _order(p), _delta(delta)
    _flag(two_sided, "two_sided")  # Markov on |Z - EZ|: the same t serves either side
    q = best_order(delta, p) if _flag(optimize_order, "optimize_order") else p
    return _finite(lp_moment_bound(c, q) * delta ** (-1 / q), "lp_deviation")


def fuk_nagaev_deviation(
    c2, cp, p, delta, *, a: float | None = None, b: float | None = None, two_sided: bool = False
) -> float:
    """t solving A Σ c_{i,p}^p / t^p + exp(−B t² / Σ c_{i,2}²) = δ (``two_sided``: = δ/2 for each side).

    ``c2`` and ``cp`` hold each coordinate's differences in L_2 and L_p (same length; ``c2 <= cp``
    entrywise holds for true moments). Defaults A = (1 + 2/p)^p, B = 2 / ((p + 2)² e^p) (Nagaev 1979).
    For a general Φ this form is our reconstruction (module docstring)."""
    c2, cp, p, delta = _differences(c2, "c2"), _differences(cp, "cp"), _order(p), _delta(delta)
    if c2.size != cp.size:
        raise ValueError(f"c2 and cp must have the same length, got {c2.size} and {cp.size}")
    big_a = (1 + 2 / p) ** p if a is None else check_real(a, "a", "(0, inf)")
    big_b = 2 / ((p + 2) ** 2 * math.exp(p)) if b is None else check_real(b, "b", "(0, inf)")
    level = delta / (2 if _flag(two_sided, "two_sided") else 1)
    rss = _root_sum_squares(c2)
    positive = cp[cp > 0]
    if rss == 0 and positive.size == 0:
        return 0.0
    # everything in logs, so that no p, constant or scale over- or underflows:
    # log(A Σ c^p / t^p) and -B t² / Σ c²
    log_sp = float(logsumexp(p * np.log(positive))) if positive.size else -math.inf
    log_s2 = 2 * math.log(rss) if rss > 0 else -math.inf
    log_a, log_level = math.log(big_a), math.log(level)

    def excess(log_t: float) -> float:
        log_poly = log_a + log_sp - p * log_t
        x = 2 * log_t - log_s2
        log_gauss = -big_b * math.exp(x) if x < 700 else -math.inf
        return float(np.logaddexp(log_poly, log_gauss)) - log_level

    # each term alone below level/2 at its own t: the larger of the two brackets the root from above
    log_2_over_level = math.log(2) - log_level
    hi = max(
        0.5 * (log_s2 + math.log(log_2_over_level / big_b)) if rss > 0 else -math.inf,
        (log_a + log_sp + log_2_over_level) / p,
    )
    lo = hi - 50.0
    while excess(lo) < 0:
        lo -= 50.0
    log_t = brentq(excess, lo, hi, xtol=1e-13, rtol=1e-13)
    if log_t > 709:
        warnings.warn(
            "fuk_nagaev_deviation: the bound overflows float64; returning inf", RuntimeWarning, stacklevel=2
        )
        return math.inf
    return math.exp(log_t)


def mcdiarmid_deviation(c, delta, *, two_sided: bool = False) -> float:
    """The sub-Gaussian McDiarmid bound sqrt(Σ c_i² log(k/δ) / 2) (k = 2 if ``two_sided``, else 1), valid
    when ``c`` bounds each coordinate's difference almost surely."""
    c, delta = _differences(c), _delta(delta)
    k = 2 if _flag(two_sided, "two_sided") else 1
    return _finite(
        _root_sum_squares(c) * math.sqrt((math.log(k) - math.log(delta)) / 2), "mcdiarmid_deviation"
    )


def chebyshev_deviation(c2, delta, *, two_sided: bool = False) -> float:
    """Efron–Stein Var Z ≤ ½ Σ c_{i,2}², then Chebyshev (two-sided, sd·δ^{−1/2}) or Cantelli (one-sided,
    sd·sqrt((1 − δ)/δ)). ``c2`` holds the differences in L_2."""
    c2, delta = _differences(c2, "c2"), _delta(delta)
    sd = _root_sum_squares(c2) / math.sqrt(2)
    t = sd / math.sqrt(delta) if _flag(two_sided, "two_sided") else sd * math.sqrt((1 - delta) / delta)
    return _finite(t, "chebyshev_deviation")
