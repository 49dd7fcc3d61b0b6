"""Conversions: optimal trade-off -> (epsilon, delta), attack views, and the classical RDP -> (epsilon, delta)
conversions they are compared with.

Optimal rule (this package): with ``f`` the optimal trade-off (:func:`optimal_tradeoff`),
``delta(eps) = sup_alpha [1 - f(alpha) - e^eps alpha]`` (Dong, Roth, Su 2022, Prop. 2.12; ``f`` is symmetric)
and ``eps(delta) = log sup_alpha (1 - delta - f(alpha)) / alpha`` (the least ``eps`` with ``delta(eps) <= delta``).
Both objectives are unimodal in ``alpha`` (concave, resp. quasi-concave, since ``f`` is convex), so we
locate the maximizer on a coarse log grid of ``alpha`` (our design: ``0`` and 201 points in
``[1e-40, 0.5]``), then shrink the bracket around it by multi-section search (:data:`ALPHA_ROUNDS` rounds of
:data:`SECTION_POINTS` points, to a relative width below 1e-11). The reported value is the bracket's *upper bound* (``f`` non-increasing: on ``[a, b]``,
``1 - f(alpha) - e^eps alpha <= 1 - f(b) - e^eps a``), so it stays valid while the bracket shrinks. Below the first grid point (1e-40) we only use ``f >= f(1e-40)``:
``delta(eps) >= 1 - f(1e-40)`` always, and a ``delta`` below that floor (about ``e^eps * 1e-40``) gets ``eps = inf``.

Never looser than the classical conversions: ``epsilon`` and ``delta`` return the smaller of the optimal
rule's value and the CKS and Mironov values on the converter's own orders and RDP values (with ``refine``,
where a classical value is the smaller, also at orders searched between the grid orders around its best
one: :meth:`OptimalConverter._refine_classical`). Each of the three
is a valid bound on the same mechanism (the two classical ones by the cited theorems, the optimal one by
the paper's), so their minimum is valid; in exact arithmetic the optimal rule is never above the others
(it is the tightest rule for every profile), so the minimum only repairs the numerical limits of our
search: an ``epsilon`` whose optimal ``alpha`` lies below ``1e-40`` (large ``epsilon``, tiny ``delta``),
where the optimal search alone returns ``inf``, e.g. 10^7 DP-SGD steps at ``q = 0.01, sigma = 1``
(CKS 1033.98; 1036.23 at the grid orders alone) or ``delta = 1e-300``.

Classical conversions on the same inputs (orders ``> 1`` only; they have no use for lower orders):

- Mironov (2017, Prop. 3): ``eps = min_tau rho(tau) + log(1/delta) / (tau - 1)``.
- Balle et al. (2020, Thm 21) = Canonne, Kamath, Steinke (2020, Prop. 12), as in dp_accounting's
  ``RdpAccountant`` (orders ``> 1.01``, plus the KL shortcut ``eps = 0`` when ``delta^2 + expm1(-rho) > 0``):
  ``eps = min_tau rho + log1p(-1/tau) - (log delta + log tau) / (tau - 1)``, and
  ``log delta = min_tau min(0.5 log1p(-e^-rho), (tau-1)(rho - eps + log1p(-1/tau)) - log tau)``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from icml_theory.privacy.tradeoff import (
    REFINE_ROUNDS,
    TradeoffCurve,
    epsilon_delta_tradeoff,
    multisection,
    optimal_from_grid,
    optimal_tradeoff,
    order_grid,
    rdp_values,
)
from icml_theory.validation import (
    as_array,
    as_rdp_table,
    check_alphas,
    check_bool,
    check_profile,
    check_real,
)

COARSE_ALPHAS = np.concatenate([[0.0], np.geomspace(1e-40, 0.5, 201)])
ALPHA_ROUNDS = 18


class OptimalConverter:
    """Optimal-rule conversions for one profile, caching the coarse curve between queries.

    ``orders``: the global grid (default :data:`DEFAULT_ORDERS`); ``refine``: search between neighbouring grid
    orders per alpha (:func:`optimal_tradeoff`). With ``refine=False`` only the RDP values at ``orders`` are
    used: the same information a classical conversion of those orders has.
    """

    def __init__(self, profile, orders=None, *, refine: bool = True):
        self.profile = check_profile(profile)
        self.grid = order_grid(orders)
        self.refine = check_bool(refine, "refine")
        self.rho_grid = rdp_values(profile, self.grid)  # evaluated once per converter
        self.coarse = self.curve(COARSE_ALPHAS)

    def curve(self, alphas) -> TradeoffCurve:
        """The optimal trade-off at ``alphas`` (see :func:`optimal_tradeoff`)."""
        a = check_alphas(alphas).ravel()
        return optimal_from_grid(self.profile, a, self.grid, self.rho_grid, self.refine)

    def _power(self, alphas):
        """``1 - f(alpha)`` at full relative precision (from ``log beta``)."""
        return -np.expm1(self.curve(alphas).log_beta)

    def _maximize(self, objective, bound, n_targets):
        """Per target j: upper bound on sup_alpha objective(alpha, 1 - f(alpha), j) by bracket + multi-section search.

        Each round evaluates :data:`SECTION_POINTS` interior points per target in one vectorized call and keeps
        the two cells around the best (the objective is unimodal), shrinking the bracket by ``2/(m+1)``.
        """
        a, power = self.coarse.alpha, -np.expm1(self.coarse.log_beta)
        idx = np.arange(n_targets)[:, None]
        vals = objective(a[None, :], power[None, :], idx)  # (t, n)
        i = np.argmax(vals, axis=1)
        ll = np.log(a[np.maximum(i - 1, 1)])  # never 0: searched in log alpha
        lh = np.log(a[np.minimum(i + 1, a.size - 1)])
        ll = np.where(ll >= lh, lh - 7.0, ll)

        def values(x):  # x: (t, m) log alpha
            return objective(np.exp(x), self._power(np.exp(x).ravel()).reshape(x.shape), idx), x

        ll, lh, _, _ = multisection(ll, lh, values, ALPHA_ROUNDS)
        a_lo, a_hi = np.exp(ll), np.exp(lh)
        upper = bound(a_lo, a_hi, self._power(a_hi), idx[:, 0])
        at0 = np.where(a[None, :] == 0, vals, -np.inf).max(axis=1)  # alpha = 0 lies outside the log search
        return np.maximum(upper, at0)

    def delta(self, epsilons) -> np.ndarray:
        """``delta(eps)`` of the optimal trade-off for each ``eps >= 0`` (array; ``inf`` gives 0)."""
        eps = as_array(epsilons, "epsilons", "[0, inf]").ravel()
        e = np.exp(np.minimum(eps, 700.0))  # delta(eps) is 0 long before e^700 (alpha >= 1e-40)

        def objective(alpha, power, j):
            return power - e[j] * alpha

        def bound(a_lo, a_hi, power_hi, j):
            return power_hi - e[j] * a_lo

        # on [0, alpha_1] (below the coarse grid) f >= f(alpha_1), so the objective is <= 1 - f(alpha_1)
        first = -math.expm1(self.coarse.log_beta[1])
        optimal = np.clip(np.maximum(self._maximize(objective, bound, e.size), first), 0.0, 1.0)
        t, r = self._classical_inputs()
        classical = np.array(
            [
                min(cks_delta(t, r, x)[0], mironov_delta(t, r, x)[0]) if np.isfinite(x) and t.size else 1.0
                for x in eps
            ]
        )
        for i in np.flatnonzero(np.isfinite(eps) & (classical < optimal)):  # the classical value is used
            classical[i] = math.exp(self._refine_classical(_classical_log_deltas, float(eps[i])))
        return np.where(np.isinf(eps), 0.0, np.minimum(optimal, classical))

    def epsilon(self, deltas) -> np.ndarray:
        """``eps(delta)`` of the optimal trade-off for each ``delta`` in [0, 1] (array); 0 when ``delta >= delta(0)``,
        ``inf`` when no finite ``eps`` reaches ``delta`` (e.g. ``delta = 0`` for a Gaussian profile)."""
        d = as_array(deltas, "deltas", "[0, 1]", "deltas").ravel()

        def objective(alpha, power, j):
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(alpha > 0, (power - d[j]) / np.where(alpha > 0, alpha, 1.0), -np.inf)

        def bound(a_lo, a_hi, power_hi, j):
            return (power_hi - d[j]) / a_lo

        ratio = self._maximize(objective, bound, d.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            eps = np.where(ratio > 1, np.log(np.maximum(ratio, 1.0)), 0.0)
        # below the coarse grid's first alpha the ratio is not bounded: such tiny deltas get eps = inf here,
        # and the classical conversions' value below
        optimal = np.where(-math.expm1(self.coarse.log_beta[1]) - d > 0, np.inf, eps)
        t, r = self._classical_inputs()
        classical = np.array([self._classical_epsilon(t, r, x) for x in d])
        for i in np.flatnonzero((d > 0) & (d < 1) & (classical < optimal)):  # the classical value is used
            classical[i] = max(0.0, self._refine_classical(_classical_epsilons, float(d[i])))
        out = np.minimum(optimal, classical)
        if np.isinf(out).any():
            warnings.warn(
                f"no finite epsilon reaches deltas {d[np.isinf(out)].tolist()} from the RDP values at these "
                "orders: epsilon = inf there",
                RuntimeWarning,
                stacklevel=2,
            )
        return out

    @staticmethod
    def _classical_epsilon(t, r, delta) -> float:
        """The smaller of the CKS and Mironov epsilons, on the orders each can use (inf: none)."""
        if delta >= 1:
            return 0.0
        if delta <= 0:
            return math.inf  # no classical conversion reaches delta = 0
        eps = [math.inf]
        if np.any(t > 1):
            eps.append(mironov_epsilon(t, r, delta)[0])
        if np.any(t > 1.01):
            eps.append(cks_epsilon(t, r, delta)[0])
        return min(eps)

    def _refine_classical(self, per_order, target: float) -> float:
        """The least classical bound over the grid's orders > 1 and, with ``refine``, between them.

        ``per_order(orders, rdp, target)`` gives the classical bound (an epsilon at delta = ``target`` or a log
        delta at epsilon = ``target``) at each order, each valid alone. The grid's orders are log-spaced
        (ratio 1.09 above 1.01), so their least bound can be well above the least over all orders where the
        conversion is steep in the order (large epsilon, tiny delta: e.g. 96.42 against 96.04 for 100
        Gaussian steps at sigma = 1, delta = 1e-5). With
        ``refine`` we search the two grid cells around the best grid order by the multi-section search of
        the trade-off's order refinement (:data:`REFINE_ROUNDS` rounds of :data:`SECTION_POINTS` orders in
        ``log tau``), evaluating the profile there; every order tried is a valid bound, so is their least."""
        t, r = self._classical_inputs()
        values = per_order(t, r, target)
        k = int(np.argmin(values))
        best = float(values[k])
        if not self.refine or t.size < 2 or not math.isfinite(best):
            return best
        lo, hi = math.log(t[max(k - 1, 0)]), math.log(t[min(k + 1, t.size - 1)])

        def at_orders(x):  # x: (1, m) log tau
            tau = np.exp(x[0])
            with warnings.catch_warnings():  # an overflowing order only gives inf there, never a bound
                warnings.simplefilter("ignore", RuntimeWarning)
                return per_order(tau, rdp_values(self.profile, tau), target)[None, :], x

        start = (np.array([best]), np.array([np.nan]))
        _, _, least, _ = multisection(
            np.array([lo]), np.array([hi]), at_orders, REFINE_ROUNDS, minimize=True, start=start
        )
        return float(least[0])

    def _classical_inputs(self) -> tuple[np.ndarray, np.ndarray]:
        """The orders ``> 1`` of the grid and their RDP values: what the classical conversions use."""
        keep = self.grid > 1
        return self.grid[keep], self.rho_grid[keep]


def optimal_epsilon(profile, delta: float, *, orders=None) -> float:
    """Least ``eps`` such that the optimal trade-off of ``profile`` is ``(eps, delta)``-DP."""
    return float(OptimalConverter(profile, orders).epsilon([check_real(delta, "delta", "(0, 1)")])[0])


def optimal_delta(profile, epsilon: float, *, orders=None) -> float:
    """``delta(eps) = sup_alpha [1 - f(alpha) - e^eps alpha]`` of the optimal trade-off of ``profile``."""
    return float(OptimalConverter(profile, orders).delta([check_real(epsilon, "epsilon", "[0, inf)")])[0])


def tpr_at_fpr(profile, fpr, *, orders=None) -> np.ndarray:
    """The most power (TPR = ``1 - f(FPR)``) a membership-inference attack can have at false-positive rate
    ``fpr`` (any shape; the result has the same shape)."""
    alphas = check_alphas(fpr, "fpr")
    curve = optimal_tradeoff(profile, alphas.ravel(), orders=orders)
    return (-np.expm1(curve.log_beta)).reshape(alphas.shape)  # 1 - beta, full precision for beta near 1


def max_advantage(profile, *, orders=None) -> float:
    """Maximal attack advantage ``sup_alpha (1 - alpha - f(alpha)) = delta(0)`` (TPR - FPR)."""
    return float(OptimalConverter(profile, orders).delta([0.0])[0])


def _mironov_epsilons(t: np.ndarray, r: np.ndarray, delta: float) -> np.ndarray:
    """Mironov's epsilon at each order (``inf`` at orders <= 1)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(t > 1, r - math.log(delta) / (t - 1), np.inf)  # -log(delta): no overflow of 1/delta


def _cks_epsilons(t: np.ndarray, r: np.ndarray, delta: float) -> np.ndarray:
    """The CKS epsilon at each order (``inf`` at orders <= 1.01, 0 where the KL shortcut applies)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        eps = np.where(t > 1.01, r + np.log1p(-1 / t) - (math.log(delta) + np.log(t)) / (t - 1), np.inf)
        return np.where(delta**2 + np.expm1(-r) > 0, 0.0, eps)


def _classical_epsilons(t: np.ndarray, r: np.ndarray, delta: float) -> np.ndarray:
    """The smaller of the CKS and Mironov epsilons at each order (``inf`` at orders <= 1)."""
    return np.minimum(_mironov_epsilons(t, r, delta), _cks_epsilons(t, r, delta))


def _mironov_log_deltas(t: np.ndarray, r: np.ndarray, epsilon: float) -> np.ndarray:
    """Mironov's log delta at each order (``inf`` at orders <= 1)."""
    with np.errstate(invalid="ignore"):
        return np.where(t > 1, (t - 1) * (r - epsilon), np.inf)


def _cks_log_deltas(t: np.ndarray, r: np.ndarray, epsilon: float) -> np.ndarray:
    """The CKS log delta at each order."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        logd = np.where(r > 0, 0.5 * np.log(-np.expm1(-r)), -np.inf)  # expm1: 1 - e^-r for tiny r
        bound = np.where(t > 1.01, (t - 1) * (r - epsilon + np.log1p(-1 / t)) - np.log(t), np.inf)
        return np.minimum(logd, bound)


def _classical_log_deltas(t: np.ndarray, r: np.ndarray, epsilon: float) -> np.ndarray:
    """The smaller of the CKS and Mironov log deltas at each order, at most 0 (delta <= 1)."""
    return np.minimum(np.minimum(_mironov_log_deltas(t, r, epsilon), _cks_log_deltas(t, r, epsilon)), 0.0)


def mironov_epsilon(orders, rdp, delta: float) -> tuple[float, float]:
    """Mironov (2017, Prop. 3): ``min_tau rho(tau) + log(1/delta)/(tau - 1)`` over orders > 1; returns (eps, order)."""
    t, r = as_rdp_table(orders, rdp, "rdp")
    delta = check_real(delta, "delta", "(0, 1)")
    if not np.any(t > 1):
        raise ValueError(
            f"orders must include an order > 1 (the conversion uses only those), got {t.tolist()}"
        )
    eps = _mironov_epsilons(t, r, delta)
    k = int(np.argmin(eps))
    return max(0.0, float(eps[k])), float(t[k])


def mironov_delta(orders, rdp, epsilon: float) -> tuple[float, float]:
    """Mironov (2017): ``delta = min_tau exp((tau - 1)(rho - eps))`` over orders > 1; returns (delta, order)."""
    t, r = as_rdp_table(orders, rdp, "rdp")
    epsilon = check_real(epsilon, "epsilon", "[0, inf)")
    if not np.any(t > 1):
        raise ValueError(
            f"orders must include an order > 1 (the conversion uses only those), got {t.tolist()}"
        )
    logd = _mironov_log_deltas(t, r, epsilon)
    k = int(np.argmin(logd))
    return min(1.0, math.exp(min(float(logd[k]), 0.0))), float(t[k])


def cks_epsilon(orders, rdp, delta: float) -> tuple[float, float]:
    """Balle et al. 2020 / Canonne-Kamath-Steinke 2020 conversion (dp_accounting's); returns (eps, order)."""
    t, r = as_rdp_table(orders, rdp, "rdp")
    delta = check_real(delta, "delta", "(0, 1)")
    eps = _cks_epsilons(t, r, delta)
    k = int(np.argmin(eps))
    if np.isinf(eps[k]) and not np.any(t > 1.01):
        raise ValueError(
            f"orders must include an order > 1.01 (the conversion uses only those), got {t.tolist()}"
        )
    return max(0.0, float(eps[k])), float(t[k])


def cks_delta(orders, rdp, epsilon: float) -> tuple[float, float]:
    """Balle et al. 2020 / Canonne-Kamath-Steinke 2020 ``delta(eps)`` (dp_accounting's); returns (delta, order)."""
    t, r = as_rdp_table(orders, rdp, "rdp")
    epsilon = check_real(epsilon, "epsilon", "[0, inf)")
    logd = _cks_log_deltas(t, r, epsilon)
    k = int(np.argmin(logd))
    return min(1.0, math.exp(float(logd[k]))), float(t[k])


def tradeoff_from_epsilon_delta_curve(alphas, epsilons, deltas) -> np.ndarray:
    """The trade-off implied by a family of ``(eps_i, delta_i)`` guarantees: ``max_i f_{eps_i, delta_i}(alpha)``."""
    a = check_alphas(alphas)
    eps = as_array(epsilons, "epsilons", "[0, inf]").ravel()  # inf: a guarantee that constrains nothing
    dl = as_array(deltas, "deltas", "[0, 1]").ravel()
    if eps.size != dl.size or eps.size == 0:
        raise ValueError("epsilons and deltas must be non-empty and of equal length")
    out = np.zeros(a.shape)
    for e, d in zip(eps, dl, strict=True):
        if np.isfinite(e):
            out = np.maximum(out, epsilon_delta_tradeoff(a, float(e), float(d)))
    return out
