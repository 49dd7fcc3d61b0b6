"""Trade-off functions from RDP: the single-order bound and the optimal rule (intersection of regions).

A test of ``P`` against ``Q`` with type I error ``alpha`` and type II error ``beta`` post-processes the
mechanism into the Bernoulli pair ``P' = Bern(alpha)``, ``Q' = Bern(1 - beta)`` (probabilities of
"reject"). An RDP guarantee ``rho`` at order ``tau`` (both directions) therefore confines ``(alpha, beta)``
to the region ``R_tau = {D_tau(P'||Q') <= rho and D_tau(Q'||P') <= rho}``. On ``[0, 1 - alpha]`` both
divergences decrease in ``beta`` (to 0 at ``beta = 1 - alpha``), so the single-order trade-off
``f_{tau,rho}(alpha) = min{beta : (alpha, beta) in R_tau}`` is the root of ``max(D1, D2) = rho``, found here
by bisection on ``log(-log beta)`` (64 halvings between ``beta = 1 - alpha`` and ``beta = 1e-300``:
machine precision in ``log beta`` relative to itself, so both ``beta`` near 0 and ``1 - beta`` near 0 keep
full relative precision). We return the *infeasible* end of the final bracket, so the value never exceeds the true
root: every curve we report is a valid (sound) lower bound on the trade-off.

The paper (Riess et al., ICML 2026) proves that ``f(alpha) = sup_{tau >= 0.5} f_{tau,rho(tau)}(alpha)`` is the
optimal black-box conversion. How we compute the supremum is our own design (the paper's algorithm text
was not available to us): a fixed global grid of orders (:data:`DEFAULT_ORDERS`: 10 orders in [0.5, 1),
the KL order 1 and 110 log-spaced orders in [1.01, 10^4]), then, for every ``alpha``, a multi-section
refinement in ``log tau`` (7 rounds of 8 points) on the two grid cells around the best grid order, keeping the better of the grid
and refined values. The grid alone is already a valid (looser) bound; refinement only tightens it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.special import ndtr, ndtri

from icml_theory.privacy.profiles import bernoulli_renyi_from_logs
from icml_theory.validation import (
    as_array,
    check_alphas,
    check_bool,
    check_orders,
    check_profile,
    check_real,
)

DEFAULT_ORDERS = np.concatenate([np.linspace(0.5, 0.95, 10), [1.0], np.geomspace(1.01, 1e4, 110)])
LOG_BETA_MIN = math.log(1e-300)
BISECTION_STEPS = 64
SECTION_POINTS = 8
REFINE_ROUNDS = 7


class TradeoffCurve(NamedTuple):
    """A trade-off curve: ``beta[i]`` is the bound at ``alpha[i]``, attained at order ``order[i]``.

    ``log_beta`` carries full precision where ``beta`` is near 1: ``1 - beta = -expm1(log_beta)``.
    """

    alpha: np.ndarray
    beta: np.ndarray
    order: np.ndarray
    log_beta: np.ndarray


def _log1mexp(u):
    """``log(1 - e^u)`` for ``u <= 0``, accurate at both ends."""
    with np.errstate(divide="ignore"):
        return np.where(u > -math.log(2), np.log(-np.expm1(u)), np.log1p(-np.exp(u)))


def _violation(a, la, la1, u, tau, rho):
    """``max(D_tau(P'||Q'), D_tau(Q'||P')) - rho`` for ``P' = Bern(alpha)``, ``Q' = Bern(1 - e^u)``."""
    lb1 = _log1mexp(u)  # log(1 - beta) = log Q'(reject)
    diff = -np.expm1(u) - a  # Q'(reject) - P'(reject), not from the rounded logs: D ~ diff^2
    d1 = bernoulli_renyi_from_logs(tau, la, la1, lb1, u, diff=-diff)
    d2 = bernoulli_renyi_from_logs(tau, lb1, u, la, la1, diff=diff)
    return np.maximum(d1, d2) - rho


class _Violation:
    """:func:`_violation` for fixed ``a, tau, rho`` and many ``u`` (the bisection's 65 calls): the same operations
    in the same order (bit-identical), with what does not depend on ``u`` formed once and the exponentials
    both divergences share (``e^u``, ``1 - beta``) formed once per call."""

    def __init__(self, a, la, la1, tau, rho):
        self.a, self.la, self.la1, self.rho = a, la, la1, rho
        self.p, self.p1 = np.exp(la), np.exp(la1)  # alpha, 1 - alpha as bernoulli_renyi_from_logs forms them
        self.p_half, self.p_two = 0.5 * self.p, 2 * self.p
        self.p1_half, self.p1_two = 0.5 * self.p1, 2 * self.p1
        self.t1 = tau - 1.0
        self.at_one = self.t1 == 0
        self.any_one = bool(np.any(self.at_one))
        self.denom = np.where(self.at_one, 1.0, self.t1) if self.any_one else self.t1

    def _finish(self, lp, lp1, p, p1, a, b):
        """The tail of :func:`bernoulli_renyi_from_logs` once ``a``, ``b`` (after their corrections) are known."""
        t1 = self.t1
        ta, tb = t1 * a, t1 * b
        far = np.logaddexp(lp + ta, lp1 + tb)
        s_minus_1 = p * np.expm1(ta) + p1 * np.expm1(tb)
        near = np.log1p(s_minus_1)
        logs = np.where(np.isfinite(near) & (np.abs(s_minus_1) <= 0.5), near, far)
        if self.any_one:
            kl = np.where(p > 0, p * a, 0.0) + np.where(p1 > 0, p1 * b, 0.0)
            return np.where(self.at_one, kl, logs / self.denom)
        return logs / t1

    def __call__(self, u):
        la, la1, p, p1 = self.la, self.la1, self.p, self.p1
        e_u, em1 = np.exp(u), np.expm1(u)
        lb1 = np.where(u > -math.log(2), np.log(-em1), np.log1p(-e_u))  # _log1mexp(u)
        diff = -em1 - self.a
        e_lb1 = np.exp(lb1)
        # D(P'||Q'): p = alpha, q = 1 - beta (bernoulli_renyi_from_logs(tau, la, la1, lb1, u, diff=-diff))
        a1 = np.where((p >= 0.5 * e_lb1) & (p <= 2 * e_lb1), np.log1p(-diff / e_lb1), la - lb1)
        b1 = np.where((p1 >= 0.5 * e_u) & (p1 <= 2 * e_u), np.log1p(diff / e_u), la1 - u)
        d1 = self._finish(la, la1, p, p1, a1, b1)
        # D(Q'||P') (bernoulli_renyi_from_logs(tau, lb1, u, la, la1, diff=diff))
        a2 = np.where((e_lb1 >= self.p_half) & (e_lb1 <= self.p_two), np.log1p(diff / p), lb1 - la)
        b2 = np.where((e_u >= self.p1_half) & (e_u <= self.p1_two), np.log1p(-diff / p1), u - la1)
        d2 = self._finish(lb1, u, e_lb1, e_u, a2, b2)
        return np.maximum(d1, d2) - self.rho


def _log_single_order(a, tau, rho):
    """``log f_{tau,rho}(alpha)`` (the sound end of the bracket); ``-inf`` when ``beta = 0`` is feasible.

    Bisection on ``v = log(-log beta)``: full relative precision both for ``beta`` near 0 and for ``beta``
    near 1 (tiny alpha), where ``1 - beta = -expm1(log beta)`` is what the conversions need.
    """
    shape = np.broadcast_shapes(np.shape(a), np.shape(tau), np.shape(rho))
    a, tau, rho = (np.broadcast_to(x, shape) for x in (a, tau, rho))
    la, la1 = np.log(a), np.log1p(-a)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        violation = _Violation(a, la, la1, tau, rho)
        lo = np.log(-la1)  # beta = 1 - alpha: always feasible
        hi = np.full(shape, math.log(-LOG_BETA_MIN))  # beta = 1e-300
        zero_ok = violation(np.full(shape, LOG_BETA_MIN)) <= 0
        for step in range(BISECTION_STEPS):
            mid = 0.5 * (lo + hi)
            ok = violation(-np.exp(mid)) <= 0
            new_lo, new_hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
            # a step that changes no bracket end is a fixed point (the next one repeats it exactly: same mid,
            # same test), so the remaining steps would return the same bits; usually from step ~55 of 64
            if step >= 40 and np.array_equal(new_lo, lo) and np.array_equal(new_hi, hi):
                break
            lo, hi = new_lo, new_hi
        u = -np.exp(hi)  # the infeasible end: never above the true root
    u = np.where(zero_ok | (rho == np.inf), -np.inf, u)
    return np.where(np.isnan(rho), -np.inf, u)


def _edge_values(alpha, tau, rho):
    """Exact ``f_{tau,rho}`` at ``alpha = 0`` (1 for ``tau >= 1``; ``exp(-rho (1 - tau)/tau)`` below) and 1 (0)."""
    with np.errstate(over="ignore", invalid="ignore"):
        at0 = np.where(tau >= 1, 1.0, np.exp(-rho * (1 - tau) / tau))
    at0 = np.where(np.isfinite(rho), at0, 0.0)
    return np.where(alpha == 0, at0, 0.0)


def single_order_tradeoff(alphas, order: float, rho: float) -> np.ndarray:
    """``f_{tau,rho}(alpha)``: the least ``beta`` a single RDP guarantee ``rho`` at ``order`` allows.

    Args:
        alphas: type I errors in [0, 1] (any shape).
        order: the Rényi order ``tau >= 0.5``.
        rho: the RDP bound at that order, ``>= 0`` (``inf``: no constraint, ``f = 0``).

    Returns:
        float64 array shaped like ``alphas``, never above the exact single-order trade-off.
    """
    a = check_alphas(alphas)
    orders = check_orders(order, "order")
    if orders.size != 1:
        raise ValueError(f"order must be one Rényi order >= 0.5, got {orders.size} values")
    tau = float(orders.reshape(()))
    rho = check_real(rho, "rho", "[0, inf]")
    return _single(a, np.full(a.shape, tau), np.full(a.shape, rho))


def _single(a, tau, rho):
    return np.exp(_single_log(a, tau, rho))


def _single_log(a, tau, rho):
    """``log f_{tau,rho}(a)`` with the exact edge values at ``a = 0`` and ``a = 1``."""
    interior = (a > 0) & (a < 1)
    safe = np.where(interior, a, 0.5)
    lb = _log_single_order(safe, tau, rho)
    with np.errstate(divide="ignore"):
        return np.where(interior, lb, np.log(_edge_values(a, tau, rho)))


def optimal_tradeoff(profile, alphas, *, orders=None, refine: bool = True) -> TradeoffCurve:
    """The optimal RDP -> f-DP conversion ``f(alpha) = sup_{tau >= 0.5} f_{tau,rho(tau)}(alpha)``.

    Args:
        profile: an :class:`RDPProfile` (or any callable mapping an array of orders to RDP values).
        alphas: type I errors in [0, 1] (1-d array-like).
        orders: the global grid of orders (default :data:`DEFAULT_ORDERS`); each >= 0.5.
        refine: multi-section refinement in ``log tau`` around the best grid order, per ``alpha``.

    Returns:
        :class:`TradeoffCurve` ``(alpha, beta, order)``: ``beta`` is a valid lower bound on the optimal
        trade-off, ``order`` the maximizing order found for each ``alpha``.
    """
    profile = check_profile(profile)
    a = check_alphas(alphas).ravel()
    grid = order_grid(orders)
    refine = check_bool(refine, "refine")
    return optimal_from_grid(profile, a, grid, rdp_values(profile, grid), refine)


def order_grid(orders=None) -> np.ndarray:
    """The sorted global grid of orders: :data:`DEFAULT_ORDERS`, or the checked ``orders`` (each >= 0.5)."""
    if orders is None:
        return DEFAULT_ORDERS
    grid = np.unique(check_orders(orders).ravel())
    if grid.size == 0:
        raise ValueError("orders must hold at least one Rényi order >= 0.5, got none")
    return grid


def optimal_from_grid(profile, a, grid, rho_grid, refine) -> TradeoffCurve:
    """:func:`optimal_tradeoff` on checked inputs, with the profile already evaluated on the grid."""
    best, log_beta = _grid_best(a, grid, rho_grid)
    order = grid[best]
    if refine and grid.size > 1:
        log_beta, order = _refine(profile, a, grid, best, log_beta, order)
    return TradeoffCurve(a, np.exp(log_beta), order, log_beta)


def _grid_best(a, grid, rho_grid):
    """``argmax_k log f_{grid[k], rho_grid[k]}(a)`` per alpha and its value: the argmax and maximum of
    ``_single_log(a[None, :], grid[:, None], rho_grid[:, None])``, bit for bit, for less work.

    The bisection of :func:`_log_single_order` runs on every (order, alpha) pair, but a pair leaves it once its
    outcome is settled: (i) a step that changes neither bracket end is a fixed point (the pair's later steps
    repeat it exactly), and (ii) a pair whose best possible value ``-exp(lo)`` lies strictly below the worst
    possible value ``-exp(hi)`` of another pair of its alpha (one that is not overridden to ``-inf``) cannot be
    the argmax, nor tie with it: it is dropped (value ``-inf`` here). Every pair still in the running is
    computed exactly as there, so the first maximum and its value are the same.
    """
    k, n = grid.size, a.size
    interior = (a > 0) & (a < 1)
    safe = np.where(interior, a, 0.5)
    a2, tau, rho = (
        np.ascontiguousarray(x) for x in np.broadcast_arrays(safe[None, :], grid[:, None], rho_grid[:, None])
    )
    vals = np.full((k, n), -np.inf)
    la, la1 = np.log(a2), np.log1p(-a2)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        lo = np.log(-la1)
        hi = np.full((k, n), math.log(-LOG_BETA_MIN))
        zero_ok = _Violation(a2, la, la1, tau, rho)(np.full((k, n), LOG_BETA_MIN)) <= 0
        dead = zero_ok | (rho == np.inf) | np.isnan(rho)  # -inf whatever the bisection gives
        dropped = dead | ~interior[None, :]  # edge columns take their exact edge values below
        settled = dropped.copy()
        flat = (a2.ravel(), la.ravel(), la1.ravel(), tau.ravel(), rho.ravel())
        lo_f, hi_f, settled_f, dropped_f = lo.ravel(), hi.ravel(), settled.ravel(), dropped.ravel()
        act = np.flatnonzero(~settled_f)
        violation = _Violation(*(x[act] for x in flat))
        for _ in range(BISECTION_STEPS):
            if act.size == 0:
                break
            lo_a, hi_a = lo_f[act], hi_f[act]
            mid = 0.5 * (lo_a + hi_a)
            ok = violation(-np.exp(mid)) <= 0
            new_lo, new_hi = np.where(ok, mid, lo_a), np.where(ok, hi_a, mid)
            fixed = (new_lo == lo_a) & (new_hi == hi_a)  # False for NaN: such pairs run all steps
            lo_f[act], hi_f[act] = new_lo, new_hi
            ref = np.where(dead, np.inf, hi).min(axis=0)  # (n,) the best guaranteed end per alpha
            beaten = np.exp(lo) > np.exp(ref)[None, :]
            dropped |= beaten & ~dead
            settled_f[act[fixed]] = True
            settled |= dropped
            keep = ~settled_f[act]
            if not np.all(keep):
                act = act[keep]
                violation = _Violation(*(x[act] for x in flat))
        live = ~dropped_f
        vals.ravel()[live] = -np.exp(hi_f[live])
    if not np.all(interior):
        with np.errstate(divide="ignore"):
            vals[:, ~interior] = np.log(_edge_values(a[None, :], tau, rho))[:, ~interior]
    best = np.argmax(vals, axis=0)
    return best, vals[best, np.arange(n)]


def rdp_values(profile, tau) -> np.ndarray:
    """``profile(tau)`` shaped like ``tau``, checked: RDP values are >= 0 (``inf``: no guarantee)."""
    values = as_array(profile(tau), "profile(orders)", "[0, inf]", "non-negative RDP values")
    if values.size != np.size(tau):
        raise ValueError(
            f"profile(orders) must return one RDP value per order ({np.size(tau)}), got shape {values.shape}"
        )
    return values.reshape(np.shape(tau))


def _refine(profile, a, grid, best, log_beta, order):
    """Multi-section search for the maximizing order on ``[grid[k-1], grid[k+1]]`` for each alpha.

    Each round evaluates :data:`SECTION_POINTS` orders per alpha in one vectorized call and keeps the two
    cells around the best; :data:`REFINE_ROUNDS` rounds shrink the bracket in ``log tau`` by ``(2/9)^7``.
    """
    work = (log_beta > -np.inf) & (a > 0) & (a < 1)
    if not np.any(work):
        return log_beta, order
    k = best[work]
    lo = np.log(grid[np.maximum(k - 1, 0)])
    hi = np.log(grid[np.minimum(k + 1, grid.size - 1)])
    aw = a[work][:, None]  # (n, 1)

    def values(x):  # x: (n, m) log tau
        tau = np.exp(x)
        # neighbouring alphas often share their brackets: the profile is evaluated once per distinct order
        distinct, where = np.unique(tau, return_inverse=True)
        rho = rdp_values(profile, distinct)[where.ravel()].reshape(tau.shape)
        return _single_log(np.broadcast_to(aw, x.shape), tau, rho), tau  # (n, m) log beta, at tau

    _, _, top, top_tau = multisection(lo, hi, values, REFINE_ROUNDS, start=(log_beta[work], order[work]))
    log_beta, order = log_beta.copy(), order.copy()
    log_beta[work], order[work] = top, top_tau
    return log_beta, order


def multisection(lo, hi, f, rounds: int, *, points: int = SECTION_POINTS, minimize: bool = False, start=None):
    """Multi-section search of ``f`` on the brackets ``[lo[i], hi[i]]`` (arrays of shape ``(n,)``), all at once.

    Each of the ``rounds`` rounds evaluates ``f`` at ``points`` equally spaced interior points of every bracket
    in one vectorized call, ``f(x) -> (values, at)`` with ``x``, ``values`` and ``at`` of shape
    ``(n, points)`` (``at``: what to report for a point, e.g. the order ``exp(x)``), and keeps the two cells
    around the best point (the first maximum, or minimum with ``minimize``): the bracket shrinks by
    ``2 / (points + 1)`` per round. ``start = (best, best_at)`` (default: none, ``-inf`` / ``inf`` and ``nan``)
    is the incumbent a point must strictly beat.

    Returns ``(lo, hi, best, best_at)``: the final brackets, and the best value seen per bracket (incumbent
    included) with its ``at``.
    """
    frac = np.arange(1, points + 1) / (points + 1)  # (m,)
    rows = np.arange(lo.shape[0])
    if start is None:
        start = (np.full(lo.shape, np.inf if minimize else -np.inf), np.full(lo.shape, np.nan))
    best, best_at = start
    for _ in range(rounds):
        x = lo[:, None] + frac[None, :] * (hi - lo)[:, None]  # (n, m)
        vals, at = f(x)
        j = np.argmin(vals, axis=1) if minimize else np.argmax(vals, axis=1)
        v = vals[rows, j]
        better = v < best if minimize else v > best
        best = np.where(better, v, best)
        best_at = np.where(better, at[rows, j], best_at)
        step = (hi - lo) / (points + 1)
        lo, hi = lo + j * step, lo + (j + 2) * step
    return lo, hi, best, best_at


def gaussian_tradeoff(alphas, mu: float) -> np.ndarray:
    """The exact trade-off of ``mu``-GDP: ``G_mu(alpha) = Phi(Phi^{-1}(1 - alpha) - mu)`` (Dong, Roth, Su 2022)."""
    a = check_alphas(alphas)
    mu = check_real(mu, "mu", "[0, inf)")
    return ndtr(-ndtri(a) - mu) if mu > 0 else 1 - a  # -ndtri(a), not ndtri(1 - a): 1 - a rounds tiny a


def randomized_response_tradeoff(alphas, epsilon: float) -> np.ndarray:
    """Exact trade-off of binary randomized response (= pure ``epsilon``-DP): ``max(0, 1 - e^eps a, e^-eps (1 - a))``."""
    return epsilon_delta_tradeoff(alphas, epsilon, 0.0)


def epsilon_delta_tradeoff(alphas, epsilon: float, delta: float) -> np.ndarray:
    """The trade-off implied by one ``(epsilon, delta)``-DP guarantee: ``max(0, 1 - delta - e^eps a, e^-eps (1 - delta - a))``."""
    a = check_alphas(alphas)
    epsilon, delta = check_real(epsilon, "epsilon", "[0, inf]"), check_real(delta, "delta", "[0, 1]")
    with np.errstate(over="ignore", invalid="ignore"):
        one = 1 - delta - np.exp(epsilon) * a
        two = math.exp(-epsilon) * (1 - delta - a)
    return np.maximum(0.0, np.maximum(np.nan_to_num(one, nan=-np.inf), two))
