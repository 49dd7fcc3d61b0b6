"""RDP profiles: callables ``tau -> rho(tau)`` bounding the Rényi divergence of a mechanism's output on
neighbouring inputs, in *both* directions, at every order ``tau >= 0.5``.

Each profile is vectorized over orders (``profile(orders)`` takes a scalar or an array and returns float64
of the same shape) and profiles add: ``p1 + p2`` is the composition (RDP adds across mechanisms). ``inf``
means "no guarantee at this order"; the optimal rule then simply ignores the order.

Closed forms: Gaussian ``rho = T tau Delta^2 / (2 sigma^2)`` (Mironov 2017, Prop. 7), Laplace (Mironov 2017,
Prop. 6, extended below to orders in [0.5, 1) by the same integral), randomized response (the Rényi
divergence of two Bernoulli distributions). The Poisson-subsampled Gaussian has no closed form at
fractional orders: see :class:`SubsampledGaussianRDP` for how we compute it (our own numerical design).
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
from scipy.special import gammaln

from icml_theory.validation import as_array, as_rdp_table, check_choice, check_int, check_orders, check_real

LOG_TINY = math.log(1e-300)  # weights below exp(LOG_TINY) lose precision (subnormal) or underflow
MAX_GRID = 1 << 24  # most points of SubsampledGaussianRDP's quadrature grid (128 MiB per order)


class RDPProfile:
    """Base class: a valid RDP guarantee ``rho(tau)`` for both directions of every neighbouring pair."""

    _finite = False  # True: finite parameters give finite RDP values, so inf or NaN means overflow

    def __call__(self, orders):
        tau = check_orders(orders)
        out = np.asarray(self._rdp(np.atleast_1d(tau)), dtype=np.float64).reshape(tau.shape)
        if self._finite and not np.isfinite(out).all():
            warnings.warn(
                f"{self!r}: the RDP values overflowed float64 at some orders (inf: no guarantee there)",
                RuntimeWarning,
                stacklevel=2,
            )
        return out if out.ndim else float(out)

    def _rdp(self, tau: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def __add__(self, other):
        if not isinstance(other, RDPProfile):
            return NotImplemented
        return ComposedRDP([self, other])

    def compose(self, count: int) -> ComposedRDP:
        """``count`` self-compositions: ``count * rho(tau)``."""
        return ComposedRDP([self], counts=[check_int(count, "count", 1)])


class GaussianRDP(RDPProfile):
    """Gaussian mechanism, sensitivity ``sensitivity``, noise std ``sigma``, ``steps`` compositions.

    ``rho(tau) = steps * tau * sensitivity^2 / (2 sigma^2)`` for every order; it is mu-GDP with
    ``mu = sqrt(steps) * sensitivity / sigma``, whose exact trade-off is :func:`gaussian_tradeoff`.
    """

    _finite = True

    def __init__(self, sigma: float, sensitivity: float = 1.0, steps: int = 1):
        self.sigma = check_real(sigma, "sigma", "(0, inf)")
        self.sensitivity = check_real(sensitivity, "sensitivity", "(0, inf)")
        self.steps = check_int(steps, "steps", 1)

    @property
    def mu(self) -> float:
        """The GDP parameter ``sqrt(steps) * sensitivity / sigma``."""
        return math.sqrt(self.steps) * self.sensitivity / self.sigma

    def _rdp(self, tau):
        with np.errstate(over="ignore"):
            return tau * (self.mu * self.mu) / 2  # mu * mu: inf (then a warning) where mu**2 would raise

    def __repr__(self):
        return f"GaussianRDP(sigma={self.sigma}, sensitivity={self.sensitivity}, steps={self.steps})"


def bernoulli_renyi(tau, p, q) -> np.ndarray:
    """``D_tau(Bern(p) || Bern(q))`` for ``p, q`` in (0, 1), vectorized; the KL divergence at ``tau = 1``."""
    tau = as_array(tau, "tau", "[0, inf)", "Rényi orders")
    p, q = as_array(p, "p", "(0, 1)", "probabilities"), as_array(q, "q", "(0, 1)", "probabilities")
    try:
        tau, p, q = np.broadcast_arrays(tau, p, q)
    except ValueError:
        raise ValueError(
            f"tau, p and q must broadcast to one shape, got {tau.shape}, {p.shape} and {q.shape}"
        ) from None
    shape = tau.shape
    tau, p, q = tau.ravel(), p.ravel(), q.ravel()  # 1-d: the excess helpers assign through masks
    diff = p - q
    lp, lp1, lq, lq1 = np.log(p), np.log1p(-p), np.log(q), np.log1p(-q)
    with np.errstate(divide="ignore", over="ignore", under="ignore", invalid="ignore"):
        # log p/q from the quotient (1 ulp) where it is a normal number: log p - log q is off by ~ eps |log q|
        # (5.9e-13 at p = 1e-300, q = 5e-301)
        ratio, ratio1 = p / q, (1 - p) / (1 - q)
        normal, normal1 = (ratio >= _NORMAL) & (ratio <= _BIG), (ratio1 >= _NORMAL) & (ratio1 <= _BIG)
        a = np.where(normal, np.log(ratio), lp - lq)
        b = np.where(normal1, np.log(ratio1), lp1 - lq1)
        ratio, ratio1 = np.where(normal, ratio, np.exp(a)), np.where(normal1, ratio1, np.exp(b))
        # bernoulli_renyi_from_logs (the trade-off bisection's fast form) sums S - 1 from first-order terms
        # ~ (tau - 1) (p - q) to a value ~ (p - q)^2 / q and loses ~ q / |p - q| ulps (0.45 relative at p = 1e-6,
        # q = p + 1e-20; a negative value at tau = 0.1). Here S - 1 is a sum of second-order terms, formed as
        # (S - 1) / (tau - 1) (the KL divergence at tau = 1), and D = that * log1p(S - 1) / (S - 1)
        scaled = _bernoulli_excess(tau, q, diff, (ratio, a), (ratio1, b))
        t1 = tau - 1.0
        excess = t1 * scaled
        near = np.isfinite(scaled) & np.isfinite(excess) & (excess >= -0.5)
        e = np.where(near & (excess != 0), excess, 1.0)
        out = scaled * np.where(excess != 0, np.log1p(e) / e, 1.0)
        # S far from 1 (large orders, or S < 1/2): log S = logaddexp(log p + (tau-1) a, log(1-p) + (tau-1) b);
        # KL p a + (1 - p) b where (1 + x) log1p(x) overflows (p / q beyond float64's range)
        far = np.where(
            t1 == 0, p * a + (1 - p) * b, np.logaddexp(lp + t1 * a, lp1 + t1 * b) / np.where(t1 == 0, 1, t1)
        )
        out = np.where(near, out, far)
    # a divergence: rounding below 0 (-5e-324 at tau = 0) is clamped
    return np.maximum(out, 0.0).reshape(shape)


_NORMAL, _BIG = np.finfo(np.float64).tiny, np.finfo(np.float64).max


def _bernoulli_excess(tau, q, diff, ratio_a, ratio_b):
    """``(S - 1) / (tau - 1)`` of :func:`bernoulli_renyi` for ``p = q + diff`` without first-order cancellation
    (the KL divergence at ``tau = 1``; dividing each term by ``tau - 1`` keeps it from underflowing there).

    ``ratio_a = (p / q, log(p / q))`` and ``ratio_b`` the same for ``(1 - p) / (1 - q)`` (used where the
    quotient lies outside ``[1/2, 3/2]``). With ``r = (p - q) / q`` and ``s = (q - p) / (1 - q)`` (so
    ``q r + (1 - q) s = 0``), ``S - 1 = q F(r) + (1 - q) F(s)`` with ``F(x) = (1 + x)^tau - 1 - tau x``, of the
    sign of ``tau (tau - 1)`` for both terms. For ``|x| <= 1/2``, ``F(x) = (tau - 1) phi(x) + (1 + x) g((tau - 1)
    log1p(x))`` for ``tau >= 1/2`` and ``g(tau log1p(x)) - tau (x - log1p(x))`` below, with ``g(y) = e^y - 1 - y``
    (:func:`_exp_excess`), ``phi(x) = (1 + x) log1p(x) - x`` (:func:`_entropy_excess`) and ``x - log1p(x)``
    (:func:`_log_excess`): same-sign terms, or ones where at most a factor ``1/tau`` (``1/(1 - tau)`` below 1/2)
    cancels. Farther out ``F = (1 + x) expm1((tau - 1) log1p(x)) - (tau - 1) x`` (``expm1(tau log1p(x)) - tau x``
    below 1/2) cancels at most a factor ~6 or ``1/tau``; those avoid the terms ~ ``log1p(x)`` that cancel in the
    forms above (a factor 690 at p = 1/2, q = 1e-300, tau = 1/2).
    """
    t1 = tau - 1.0
    at_one = t1 == 0
    d = np.where(at_one, 1.0, t1)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        total = 0.0
        for weight, x, (ratio, log_ratio) in ((q, diff / q, ratio_a), (1 - q, -diff / (1 - q), ratio_b)):
            small = np.abs(x) <= 0.5
            xs = np.where(small, x, 0.0)
            lg = np.where(small, np.log1p(xs), log_ratio)
            ratio = np.where(small, 1 + xs, ratio)
            phi, h = _entropy_excess(xs, lg), _log_excess(xs, lg)  # used where small only
            upper = np.where(
                small,
                phi + ratio * np.where(at_one, 0.0, _exp_excess(t1 * lg) / d),
                ratio * np.where(at_one, lg, np.expm1(t1 * lg) / d) - x,
            )
            lower = np.where(small, _exp_excess(tau * lg) - tau * h, np.expm1(tau * lg) - tau * x) / d
            total = total + weight * np.where(tau >= 0.5, upper, lower)
    return total


def bernoulli_renyi_from_logs(tau, lp, lp1, lq, lq1, diff=None):
    """``D_tau(Bern(p) || Bern(q))`` from ``log p, log(1-p), log q, log(1-q)``, stable near ``tau = 1``.

    With ``a = log(p/q)``, ``b = log((1-p)/(1-q))`` the sum is ``S = p e^{(tau-1) a} + (1-p) e^{(tau-1) b}``;
    ``S - 1 = p expm1((tau-1) a) + (1-p) expm1((tau-1) b)`` avoids the cancellation of ``log S`` itself
    wherever ``|S - 1| <= 1/2``. ``diff``, when given, is ``p - q`` computed without cancellation; then
    ``a = log1p(diff/q)`` and ``b = log1p(-diff/(1-q))`` where ``p, q`` (and ``1-p, 1-q``) lie within a
    factor 2 of each other, instead of the difference of rounded logs (which loses ``D ~ (p - q)^2``).
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a = lp - lq  # log p/q
        b = lp1 - lq1  # log (1-p)/(1-q)
        t1 = tau - 1.0
        p, p1 = np.exp(lp), np.exp(lp1)
        if diff is not None:
            q, q1 = np.exp(lq), np.exp(lq1)
            a = np.where((p >= 0.5 * q) & (p <= 2 * q), np.log1p(diff / q), a)
            b = np.where((p1 >= 0.5 * q1) & (p1 <= 2 * q1), np.log1p(-diff / q1), b)
        # log S = logaddexp(tau lp + (1-tau) lq, tau lp1 + (1-tau) lq1)
        far = np.logaddexp(lp + t1 * a, lp1 + t1 * b)
        s_minus_1 = p * np.expm1(t1 * a) + p1 * np.expm1(t1 * b)
        near = np.log1p(s_minus_1)
        # 0 * inf terms (p = 0 or 1) contribute nothing, overflow: use far; S - 1 near -1 (S near 0) has
        # cancelled: use far
        logs = np.where(np.isfinite(near) & (np.abs(s_minus_1) <= 0.5), near, far)
        at_one = t1 == 0
        if np.any(at_one):
            kl = np.where(p > 0, p * a, 0.0) + np.where(p1 > 0, p1 * b, 0.0)
            out = np.where(at_one, kl, logs / np.where(at_one, 1.0, t1))
        else:
            out = logs / t1
    return out


class RandomizedResponseRDP(RDPProfile):
    """Binary randomized response with parameter ``epsilon``: truthful with probability ``e^eps/(1+e^eps)``.

    ``rho(tau) = D_tau(Bern(p) || Bern(1-p))`` (symmetric), composed ``steps`` times. Its exact trade-off is
    :func:`randomized_response_tradeoff` (one step).
    """

    _finite = True

    def __init__(self, epsilon: float, steps: int = 1):
        self.epsilon = check_real(epsilon, "epsilon", "(0, inf)")
        self.steps = check_int(steps, "steps", 1)

    def _rdp(self, tau):
        e = self.epsilon
        lp = -np.logaddexp(0.0, -e)  # log e^eps/(1+e^eps)
        lp1 = -np.logaddexp(0.0, e)
        out = bernoulli_renyi_from_logs(tau, lp, lp1, lp1, lp)
        # the sum is S = (e^{tau eps} + e^{(1-tau) eps}) / (1 + e^eps), and S - 1 a product without cancellation:
        # -expm1(tau eps) expm1((1 - tau) eps) / (1 + e^eps). The generic form above sums first-order terms of
        # size tau eps/2 to S - 1 ~ tau (tau - 1) eps^2 / 2, and its log-ratio lp - lp1 is off by ~1e-16 / eps
        # (3e-8 relative at eps = 1e-8). For eps > 1 the generic value is the accurate one (the product rounds
        # e^{tau eps}: 8 ulp at eps = 20, tau = 0.99), as where S - 1 overflows or lies below -1/2.
        t1 = tau - 1.0
        with np.errstate(over="ignore", invalid="ignore"):
            excess = -np.expm1(tau * e) * np.expm1(-t1 * e) * math.exp(-np.logaddexp(0.0, e))
            ok = np.isfinite(excess) & (excess >= -0.5) & (t1 != 0) & (e <= 1)
            out = np.where(ok, np.log1p(np.where(ok, excess, 0.0)) / np.where(ok, t1, 1.0), out)
        out = np.where(t1 == 0, e * math.tanh(e / 2), out)  # the KL divergence (2p - 1) eps
        return self.steps * np.maximum(out, 0.0)  # a divergence: rounding below 0 is clamped

    def __repr__(self):
        return f"RandomizedResponseRDP(epsilon={self.epsilon}, steps={self.steps})"


class LaplaceRDP(RDPProfile):
    """Laplace mechanism with scale ``b`` and sensitivity ``sensitivity`` (``lambda = b / sensitivity``).

    ``exp((tau-1) rho) = int p^tau q^(1-tau)`` for Lap(0, b) vs Lap(Delta, b), split at 0 and Delta:
    ``[tau e^{(tau-1)/lambda} + (tau-1) e^{-tau/lambda}] / (2 tau - 1)`` (Mironov 2017, Prop. 6) for
    ``tau > 1``; the same three-piece integral written with ``expm1`` is valid for every ``tau > 0``
    (including the removable singularity at ``tau = 1/2``), and ``rho(1) = 1/lambda + e^{-1/lambda} - 1``.
    """

    _finite = True

    def __init__(self, scale: float, sensitivity: float = 1.0, steps: int = 1):
        self.scale = check_real(scale, "scale", "(0, inf)")
        self.sensitivity = check_real(sensitivity, "sensitivity", "(0, inf)")
        self.steps = check_int(steps, "steps", 1)

    def _rdp(self, tau):
        c = self.sensitivity / self.scale  # 1 / lambda
        t1 = tau - 1.0
        k = 2 * tau - 1
        # over: expm1 of a huge exponent (large order or large 1/lambda) is inf, which the log then handles
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            middle = np.where(np.abs(k) < 1e-12, c, -np.expm1(-k * c) / np.where(k == 0, 1.0, k))
            # log of 1/2 e^{-(1-tau)c} + 1/2 e^{-tau c} + 1/2 e^{-(1-tau)c} * middle
            logs = np.log(0.5) + np.logaddexp(t1 * c + np.log1p(middle), -tau * c)
            # next to tau = 1 the sum is 1 + O(tau - 1): assemble "sum - 1" from expm1 pieces instead. That
            # form is accurate only while the sum - 1 is small: for large 1/lambda it lands next to -1 (e.g.
            # -1 + 1e-87 at tau = 0.8, lambda = 1e-3), where log1p has cancelled (to -inf); the log above
            # is accurate there, since |log sum| >= log(3/2)
            near = np.abs(t1) < 0.25  # a mask: tau may be 2-d
            if np.any(near):
                tn, mn, kn = t1[near], middle[near], k[near]
                # middle - middle(1)
                d_middle = (-2 * tn + math.exp(-c) * (2 * tn - np.expm1(-2 * tn * c))) / kn
                s_minus_1 = 0.5 * (np.expm1(tn * c) * (1 + mn) + d_middle) + 0.5 * math.exp(-c) * np.expm1(
                    -tn * c
                )
                ok = np.abs(s_minus_1) <= 0.5
                logs[near] = np.where(ok, np.log1p(np.where(ok, s_minus_1, 0.0)), logs[near])
            out = logs / np.where(t1 == 0, 1.0, t1)
            # both forms above cancel for small c (large lambda): the sum - 1 ~ tau (tau - 1) c^2 / 2 comes out
            # of first-order terms ~ c (0 or 7x the truth at lambda = 1e8). _laplace_excess has no
            # cancellation; it is used wherever it is finite and log1p is accurate
            excess = _laplace_excess(tau, c)
            ok = np.isfinite(excess) & (excess >= -0.5) & (t1 != 0)
            out = np.where(ok, np.log1p(np.where(ok, excess, 0.0)) / np.where(ok, t1, 1.0), out)
        out = np.where(t1 == 0, float(_exp_excess(np.array([-c]))[0]), out)  # the KL c + e^{-c} - 1
        return self.steps * np.maximum(out, 0.0)  # a divergence: rounding below 0 is clamped

    def __repr__(self):
        return f"LaplaceRDP(scale={self.scale}, sensitivity={self.sensitivity}, steps={self.steps})"


def _laplace_excess(tau: np.ndarray, c: float) -> np.ndarray:
    """``S - 1`` for Laplace's ``S = [tau e^{(tau-1) c} + (tau-1) e^{-tau c}] / (2 tau - 1)``, without cancellation;
    NaN for ``tau`` in [1/2, 1) with ``c > 1`` and at ``tau = 1`` (not covered here).

    With ``psi(x) = e^x - 1 - x`` (:func:`_exp_excess`) the first-order terms cancel exactly:
    ``S - 1 = [tau psi((tau-1) c) + (tau-1) psi(-tau c)] / (2 tau - 1)``, two non-negative terms for ``tau > 1``.
    For ``tau`` in [1/2, 1), with ``a = tau``, ``b = 1 - tau`` (``a + b = 1``), expanding both ``psi``:
    ``S - 1 = -a b c^2 sum_m (-c)^m h_m / (m+2)!`` with ``h_m = sum_j a^j b^(m-j)`` (``h_m = a h_{m-1} + b^m``,
    ``0 < h_m <= 1``), smooth through the removable singularity at 1/2; for ``c <= 1`` the series loses at
    most a factor 2.2 to cancellation and 20 terms leave a tail below 1e-19.
    """
    out = np.full(tau.shape, np.nan)
    above = tau > 1
    if np.any(above):
        ta = tau[above]
        with np.errstate(over="ignore", invalid="ignore"):
            out[above] = (ta * _exp_excess((ta - 1) * c) + (ta - 1) * _exp_excess(-ta * c)) / (2 * ta - 1)
    below = tau < 1
    if c <= 1 and np.any(below):
        a, b = tau[below], 1 - tau[below]
        h, b_pow, total, coef = np.ones_like(a), np.ones_like(a), np.zeros_like(a), 0.5
        for m in range(20):
            if m:
                b_pow = b_pow * b
                h = a * h + b_pow
                coef *= -c / (m + 2)  # (-c)^m / (m + 2)!
            total = total + coef * h
        out[below] = -a * b * c * c * total
    return out


RELATIONS = ("add-remove", "replace-one")


class SubsampledGaussianRDP(RDPProfile):
    """Poisson-subsampled Gaussian (DP-SGD step): sample rate ``q``, noise multiplier ``sigma``, ``steps``.

    For the add/remove relation the pair is ``mu0 = N(0, sigma^2)`` and ``mu1 = (1-q) N(0, sigma^2) +
    q N(1, sigma^2)``; we bound both directions, ``rho(tau) = steps * max(D_tau(mu1||mu0), D_tau(mu0||mu1))``.

    ``relation="replace-one"`` (one record replaced, e.g. one label changed under label DP, with the
    record's clipped contribution of norm <= 1 before and after): the pair is ``P = (1-q) N(0, sigma^2) +
    q N(-1, sigma^2)`` and ``Q = (1-q) N(0, sigma^2) + q N(1, sigma^2)``, the pair dp_accounting's PLD
    uses for ``REPLACE_ONE`` (its ``AdjacencyType.REPLACE``); it is symmetric, so one direction suffices.
    It is computed by the trapezoid rule on the same kind of grid, extended to the left where the
    integrand ``P^tau Q^(1-tau)`` peaks (near ``-tau``). With ``q = 1`` it is the Gaussian mechanism of
    sensitivity 2, ``rho = 2 tau / sigma^2``, which also bounds every ``q`` (joint quasi-convexity).

    How it is computed (our own numerical design, not from the paper):

    - integer orders ``tau >= 2``, direction ``mu1||mu0``: the exact binomial sum of Mironov, Talwar and
      Zhang (2019), ``A = sum_k C(tau, k) (1-q)^(tau-k) q^k exp((k^2 - k) / (2 sigma^2))``, as
      ``log1p(A - 1)`` with ``A - 1 = sum_{k>=2} C(tau, k) (1-q)^(tau-k) q^k expm1((k^2 - k) / (2 sigma^2))``
      (positive terms: no cancellation however small the RDP);
    - every other order and direction, including ``tau`` in [0.5, 1) and the KL limit ``tau = 1``: the
      integral ``E_{mu0}[r^lambda]``, ``r = mu1/mu0``, by the trapezoid rule in log space on a uniform grid of
      step ``sigma/16`` over ``[-16 sigma - 1, max(lambda, 0) + 16 sigma + 1]``. The integrand is a smooth
      Gaussian-like function of width >= sigma, for which the trapezoid rule converges exponentially; the
      tests check it against the binomial sum at integer orders and against adaptive quadrature. Where
      the log moment is small (``|log M| <= max(|lambda|, 1)``) it is ``log1p(E[(1 + g)^lambda - 1 - lambda
      g])`` with ``g = r - 1 = q expm1((2z - 1) / (2 sigma^2))`` (``E_{mu0}[g] = 0``): the summands share one
      sign and each is formed without cancellation, so tiny RDP values (small ``q``) keep full relative
      precision, at every order including the KL order (``E[(1 + g) log1p(g) - g]``, ``E[g - log1p(g)]``).
      Elsewhere (large moments, or small sigma where the weights underflow where the integrand lives) the
      log-sum-exp of the rule, less its own error at ``lambda = 0, 1`` (where the moment is exactly 1), is
      accurate and kept; the KL order's weights ``phi0 * r`` are then formed in log space, since ``r``
      alone overflows float64 for small sigma. Replace-one uses the same form with ``g = P/Q - 1``.
    """

    _finite = True

    def __init__(self, sample_rate: float, sigma: float, steps: int = 1, relation: str = "add-remove"):
        self.sample_rate = check_real(sample_rate, "sample_rate", "(0, 1]")
        self.sigma = check_real(sigma, "sigma", "(0, inf)")
        self.steps = check_int(steps, "steps", 1)
        self.relation = check_choice(relation, "relation", RELATIONS)

    def _rdp(self, tau):
        if self.sample_rate == 1.0:  # no subsampling: the Gaussian mechanism
            return self._gaussian_bound(tau)
        s = self.sigma
        if s > 1e100:  # the quadrature grid overflows; the Gaussian bound is below 1e-200 here
            return self._gaussian_bound(tau)
        # orders whose quadrature grid would exceed MAX_GRID points (tiny sigma): the Gaussian bound
        reach = np.maximum(tau, 1.0) * (2 if self.relation == "replace-one" else 1)
        too_big = 16 * (2 + 32 * s + reach) / s > MAX_GRID
        if np.any(too_big):
            warnings.warn(
                f"sigma = {s} is too small for the quadrature at some orders: using the valid but looser "
                "Gaussian bound steps * tau / (2 sigma^2) there",
                RuntimeWarning,
                stacklevel=3,
            )
            out = self._gaussian_bound(tau)
            if not np.all(too_big):
                out[~too_big] = self._quadrature(tau[~too_big])
            return out
        return self._quadrature(tau)

    def _quadrature(self, tau):
        return self._rdp_replace(tau) if self.relation == "replace-one" else self._rdp_quadrature(tau)

    def _gaussian_bound(self, tau):
        """``steps * tau * Delta^2 / (2 sigma^2)`` (``Delta`` = 1 for add/remove, 2 for replace-one): the RDP
        of the unsubsampled step, a valid bound in both directions (Rényi divergence is jointly
        quasi-convex, van Erven and Harremoës 2014, Thm 13)."""
        d2 = 4.0 if self.relation == "replace-one" else 1.0
        with np.errstate(over="ignore", divide="ignore"):
            return self.steps * tau * d2 / (2 * self.sigma * self.sigma)

    def _rdp_replace(self, tau):
        """Replace-one: ``D_tau(P||Q)`` by the trapezoid rule (the rule's error at ``tau = 0, 1`` removed; small moments
        as ``log1p`` of a one-signed sum)."""
        t = tau.ravel()
        out = np.empty(t.shape)
        s, q = self.sigma, self.sample_rate
        bucket = np.ceil(np.log2(np.maximum(t, 1.0)))
        for b in np.unique(bucket):
            idx = np.flatnonzero(bucket == b)
            h = s / 16
            z = np.arange(-2 * max(float(t[idx].max()), 1.0) - 16 * s - 1, 16 * s + 1 + h, h)
            base = -0.5 * (z / s) ** 2 - math.log(s * math.sqrt(2 * math.pi)) + math.log(h)
            log_p = base + np.logaddexp(math.log1p(-q), math.log(q) - (2 * z + 1) / (2 * s * s))
            log_q = base + np.logaddexp(math.log1p(-q), math.log(q) + (2 * z - 1) / (2 * s * s))
            lam = t[idx]
            m_q, m_p = _lse(log_q[None, :])[0], _lse(log_p[None, :])[0]
            log_m = _lse(lam[:, None] * log_p[None, :] + (1 - lam[:, None]) * log_q[None, :])
            log_m -= lam * m_p + (1 - lam) * m_q
            # next to tau = 1, log M = log E_P[exp((tau - 1) L)], L = log P/Q: expm1 keeps full precision
            near = np.abs(lam - 1) < 0.25
            if np.any(near):
                w = np.exp(log_p - log_p.max())
                ell = log_p - log_q
                sel = np.flatnonzero(near)
                log_m[sel] = _log1p_where_accurate((lam[sel, None] - 1) * ell[None, :], w, log_m[sel])
                kl = float(ell @ w / w.sum())
            # E_Q[(P/Q)^lam] = 1 + E_Q[(1 + g)^lam - 1 - lam g] with g = P/Q - 1 and E_Q[g] = 0, as for add-remove
            # (_excess_grid): without cancellation where the moment is small (both sums above cancel to ~q^2)
            small = np.flatnonzero(np.abs(log_m) <= np.maximum(np.abs(lam), 1.0))
            if small.size or np.any(lam == 1):
                ell = log_p - log_q
                log_w = log_q - m_q
                g, log_g = self._replace_excess(z, log_q - base)
                log1p_g = np.where(g < -0.5, ell, np.log1p(np.maximum(g, -0.5)))
            if small.size:
                log_m[small] = _log1p_mean_power_excess(lam[small], log_w, g, log1p_g, log_g, log_m[small])
            if np.any(lam == 1):  # KL = E_Q[(1 + g) log1p(g) - g] <= E_Q[(P/Q) |log P/Q| + |g|]
                with np.errstate(divide="ignore"):
                    bound = np.maximum(ell + np.log(np.abs(ell)), log_g)
                kl_excess = _mean_where_live(_entropy_excess, log_w, g, log1p_g, bound)
                kl = kl if math.isnan(kl_excess) else kl_excess
            with np.errstate(divide="ignore", invalid="ignore"):
                d = np.where(lam == 1, kl if np.any(near) else 0.0, log_m / np.where(lam == 1, 1.0, lam - 1))
            out[idx] = np.maximum(d, 0.0)
        return (self.steps * out).reshape(tau.shape)

    def _replace_excess(self, z: np.ndarray, log_r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Replace-one: ``g = P/Q - 1 = -2 q e^{-1/(2 sigma^2)} sinh(z / sigma^2) / r`` (``Q = phi0 r``, ``r = 1 + q
        expm1((2 z - 1) / (2 sigma^2))``) without the cancellation of ``P - Q``, and ``log |g|``; from the logs
        where ``sinh`` or ``r`` overflow."""
        s2, q = self.sigma * self.sigma, self.sample_rate
        x = z / s2
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            log_g = (
                math.log(2 * q)
                - 0.5 / s2
                + np.abs(x)
                - math.log(2)
                + np.log1p(-np.exp(-2 * np.abs(x)))
                - log_r
            )
            g = -2 * q * math.exp(-0.5 / s2) * np.sinh(x) / (1 + q * np.expm1((2 * z - 1) / (2 * s2)))
            g = np.where(np.isfinite(g), g, -np.sign(x) * np.exp(log_g))
        return g, log_g

    def _rdp_quadrature(self, tau):
        t = tau.ravel()
        fwd = self._log_moments(t)  # log E_mu0[r^tau]
        rev = self._log_moments(1.0 - t)  # log E_mu0[r^(1-tau)]
        t1 = t - 1.0
        kl_fwd, kl_rev = (self._kl(forward=True), self._kl(forward=False)) if np.any(t1 == 0) else (0.0, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            d_fwd = np.where(t1 == 0, kl_fwd, fwd / np.where(t1 == 0, 1.0, t1))
            d_rev = np.where(t1 == 0, kl_rev, rev / np.where(t1 == 0, 1.0, t1))
        return (self.steps * np.maximum(np.maximum(d_fwd, d_rev), 0.0)).reshape(tau.shape)

    def _grid(self, hi_lam: float):
        """Nodes ``z``, log trapezoid weights ``log(h phi0(z))`` and ``log r(z)`` for exponents up to ``hi_lam``."""
        s = self.sigma
        lo, hi = -16 * s - 1, max(hi_lam, 0.0) + 16 * s + 1
        h = s / 16
        z = np.arange(lo, hi + h, h)  # (m,)
        log_phi0 = -0.5 * (z / s) ** 2 - math.log(s * math.sqrt(2 * math.pi)) + math.log(h)
        log_r = np.logaddexp(
            math.log1p(-self.sample_rate), math.log(self.sample_rate) + (2 * z - 1) / (2 * s * s)
        )
        return z, log_phi0, log_r

    def _log_moments(self, lams: np.ndarray) -> np.ndarray:
        """``log E_{mu0}[r^lam]`` for each ``lam``: binomial sum at integers >= 2, trapezoid rule otherwise."""
        out = np.zeros(lams.shape)
        integer = (lams >= 2) & (lams == np.round(lams))
        for i in np.flatnonzero(integer):
            out[i] = self._log_moment_binomial(int(lams[i]))
        quad = ~integer & (lams != 0) & (lams != 1)
        if np.any(quad):
            # one shared grid per power-of-two bucket of lam, so huge orders do not inflate small ones
            bucket = np.ceil(np.log2(np.maximum(lams, 1.0)))
            for b in np.unique(bucket[quad]):
                idx = np.flatnonzero(quad & (bucket == b))
                z, log_phi0, log_r = self._grid(float(lams[idx].max()))
                lam = lams[idx]
                terms = log_phi0[None, :] + lam[:, None] * log_r[None, :]  # (k, m)
                # subtract the rule's own error at lam = 0 and 1 (where the moment is exactly 1)
                m0, m1 = _lse(log_phi0[None, :])[0], _lse((log_phi0 + log_r)[None, :])[0]
                log_m = _lse(terms) - (1 - lam) * m0 - lam * m1
                # the moment is 1 + E_mu0[(1 + g)^lam - 1 - lam g] (see _excess_grid), summed without cancellation;
                # the log-sum-exp rounds to ~|lam| ulp (lam m1, lam log r), a few ulp relative where |log M| > |lam|
                small = np.flatnonzero(np.abs(log_m) <= np.maximum(np.abs(lam), 1.0))
                if small.size:
                    log_p, g, log1p_g, log_g = self._excess_grid(z, log_phi0, log_r)
                    log_m[small] = _log1p_mean_power_excess(
                        lam[small], log_p, g, log1p_g, log_g, log_m[small]
                    )
                out[idx] = log_m
        return out

    def _excess_grid(self, z: np.ndarray, log_phi0: np.ndarray, log_r: np.ndarray):
        """Normalized log weights ``log p`` of ``mu0`` on the grid, ``g = r - 1 = q expm1(v)`` (``v = (2 z - 1) /
        (2 sigma^2)``, formed without rounding ``r``), ``log1p(g)`` (``log_r`` where ``g < -1/2``) and ``log |g|``.

        ``E_mu0[g] = 0`` exactly, and the rule's error on that Gaussian integrand is far below float64's, so
        ``E[r^lam] = 1 + E[(1 + g)^lam - 1 - lam g]``, ``E[r log r] = E[(1 + g) log1p(g) - g]`` and ``-E[log r] =
        E[g - log1p(g)]``: each summand has one sign, and the sums keep full relative precision however small
        (the sums of ``p r^lam`` or ``p log r`` round 1 + tiny or cancel to ~q^2: 0 or 7000x the truth at
        ``q = 1e-8``).
        """
        v = (2 * z - 1) / (2 * self.sigma * self.sigma)
        with np.errstate(over="ignore", divide="ignore"):
            g = self.sample_rate * np.expm1(v)
            log_g = math.log(self.sample_rate) + np.maximum(v, 0.0) + np.log(-np.expm1(-np.abs(v)))
        log1p_g = np.where(g < -0.5, log_r, np.log1p(np.maximum(g, -0.5)))
        return log_phi0 - _lse(log_phi0[None, :])[0], g, log1p_g, log_g

    def _log_moment_binomial(self, lam: int) -> float:
        """``log A`` from ``A - 1 = sum_{k>=2} C(lam, k) (1-q)^(lam-k) q^k expm1((k^2 - k) / (2 sigma^2))``.

        The binomial probabilities sum to 1, so taking 1 out of each ``exp(...)`` factor removes the 1 exactly
        and leaves positive terms: ``log A = log1p(A - 1)`` has no cancellation however small ``A - 1`` is
        (the sum with the ``k = 0, 1`` terms rounds 1 + tiny: 0 at ``q = 1e-8, sigma = 5``). ``A - 1`` is
        summed as ``t_2 sum_k t_k / t_2`` with ``t_2`` formed directly (the logs of the terms are ~ -40 at
        ``q = 1e-8``, and their rounding would cost ~20 ulp), by log-sum-exp where that under- or overflows.
        """
        k = np.arange(2, lam + 1)
        q, s2 = self.sample_rate, self.sigma * self.sigma
        c = (k * k - k) / (2 * s2)
        with np.errstate(over="ignore"):
            log_em1 = np.where(c < 30, np.log(np.expm1(np.minimum(c, 30.0))), c + np.log1p(-np.exp(-c)))
        terms = _log_binomials(lam)[2:] + (lam - k) * math.log1p(-q) + k * math.log(q) + log_em1
        if c[0] < 700:  # c[0] = 1 / sigma^2
            t2 = lam * (lam - 1) / 2 * q * q * math.exp((lam - 2) * math.log1p(-q)) * math.expm1(c[0])
            with np.errstate(over="ignore"):
                excess = t2 * float(np.exp(terms - terms[0]).sum())
            if t2 > 1e-300 and math.isfinite(excess):
                return math.log1p(excess)
        return float(np.logaddexp(0.0, _lse(terms[None, :])[0]))

    def _log_moment(self, lam: float) -> float:
        """``log E_{mu0}[r^lam]`` at one exponent."""
        return float(self._log_moments(np.array([float(lam)]))[0])

    def _kl(self, forward: bool) -> float:
        z, log_phi0, log_r = self._grid(1.0)
        # E_mu0[(1 + g) log1p(g) - g] (forward) and E_mu0[g - log1p(g)] (reverse), see _excess_grid
        log_p, g, log1p_g, log_g = self._excess_grid(z, log_phi0, log_r)
        with np.errstate(divide="ignore"):
            log_abs_log_r = np.log(np.abs(log_r))
        if forward:  # (1 + g) log1p(g) - g <= r |log r| + |g|
            excess, bound = _entropy_excess, np.maximum(log_r + log_abs_log_r, log_g)
        else:  # g - log1p(g) <= |g| + |log r|
            excess, bound = _log_excess, np.maximum(log_g, log_abs_log_r)
        kl = _mean_where_live(excess, log_p, g, log1p_g, bound)
        if not math.isnan(kl):
            return kl
        # E_mu1[log r] = E_mu0[r log r] (forward) or E_mu0[log mu0/mu1] = -E_mu0[log r], with weights
        # phi0 r or phi0 formed in log space and scaled by their largest term: r alone overflows float64
        # once (2 z - 1) / (2 sigma^2) passes ~709 (small sigma), and inf / inf would give NaN
        log_w = log_phi0 + log_r if forward else log_phi0
        w = np.exp(log_w - log_w.max())
        mean = float(w @ log_r / w.sum())
        return mean if forward else -mean

    def __repr__(self):
        rel = "" if self.relation == "add-remove" else f", relation={self.relation!r}"
        return f"SubsampledGaussianRDP(sample_rate={self.sample_rate}, sigma={self.sigma}, steps={self.steps}{rel})"


def _iterable(x) -> bool:
    try:
        iter(x)
    except TypeError:
        return False
    return not isinstance(x, str | bytes)


def _log1p_where_accurate(exponents: np.ndarray, w: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """``log(1 + e)`` with ``e = sum_j w_j expm1(exponents[i, j]) / sum_j w_j``, per row where ``|e| <= 1/2``;
    ``fallback`` (the log-sum-exp value) elsewhere.

    The ``1 + E[expm1(...)]`` form keeps full relative precision only while the log moment is small. Far
    from 0 (small sigma) the exponents reach float64's range: ``expm1`` overflows and ``inf * 0`` (an
    underflowed weight) gives NaN, or ``e`` lands next to -1 where ``log1p`` has cancelled. There
    ``|log(1 + e)| >= log(3/2)`` and the log-sum-exp value is accurate, so it is kept.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.expm1(exponents) @ w / w.sum()
    ok = np.abs(e) <= 0.5  # False for NaN and inf
    return np.where(ok, np.log1p(np.where(ok, e, 0.0)), fallback)


@functools.lru_cache(maxsize=32)
def _log_binomials(n: int) -> np.ndarray:
    """``log C(n, k)`` for ``k = 0..n``: from the exact integers up to ``n = 10^4`` (16 ms there), where
    ``gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)`` is off by up to 5e-13 (a difference of values
    ~ ``n log n``); that difference beyond."""
    if n > 10_000:
        ks = np.arange(n + 1)
        out = gammaln(n + 1) - gammaln(ks + 1) - gammaln(n - ks + 1)
    else:
        out, c = np.zeros(n + 1), 1
        for k in range(n):
            c = c * (n - k) // (k + 1)
            out[k + 1] = math.log(c)
    out.flags.writeable = False  # cached: shared between calls
    return out


# Taylor coefficients: e^x - 1 - x = x^2 sum_k x^k / (k + 2)!, k < 25 (the tail is below 1e-19 for |x| <= 2)
_EXP_EXCESS = tuple(1 / math.factorial(k + 2) for k in range(25))
# atanh(s) - s = s^3 sum_k s^(2k) / (2k + 3), k < 30 (the tail is below 1e-19 for |s| <= 1/2)
_ATANH_EXCESS = tuple(1 / (2 * k + 3) for k in range(30))


def _horner(coefs, x: np.ndarray) -> np.ndarray:
    acc = np.full_like(x, coefs[-1])
    for c in coefs[-2::-1]:
        acc = acc * x + c
    return acc


def _exp_excess(x: np.ndarray) -> np.ndarray:
    """``e^x - 1 - x`` to a few ulp: its Taylor series on [-1.5, 2] (``expm1(x) - x`` cancels there, by 7 bits
    at ``x = 0.01``), the direct difference outside, where it loses at most ~2 bits."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.expm1(x) - x
    near = (x >= -1.5) & (x <= 2.0)
    xn = x[near]
    out[near] = xn * xn * _horner(_EXP_EXCESS, xn)
    return out


def _atanh_excess(s: np.ndarray) -> np.ndarray:
    """``atanh(s) - s`` for ``|s| <= 1/2`` (Taylor series, no cancellation)."""
    u = s * s
    return s * u * _horner(_ATANH_EXCESS, u)


def _one_plus(g: np.ndarray, log1p_g: np.ndarray) -> np.ndarray:
    """``1 + g``, as ``exp(log1p_g)`` where ``g < -1/2``: there ``1 + g`` may lie far below the rounding of ``g``
    (``g = -1.0`` exactly for replace-one's ``P/Q - 1`` at small sigma, where ``P/Q ~ 1e-500``)."""
    with np.errstate(under="ignore"):
        return np.where(g < -0.5, np.exp(log1p_g), 1 + g)


def _log_excess(g: np.ndarray, log1p_g: np.ndarray) -> np.ndarray:
    """``g - log1p(g) >= 0`` for ``g > -1`` (``log1p_g`` its accurate log1p), to a few ulp. With ``s = g / (2 + g)``,
    ``log1p(g) = 2 atanh(s)`` and ``g = 2 s / (1 - s)``, so ``g - log1p(g) = 2 (s^2 / (1 - s) - (atanh(s) - s))``:
    two non-negative terms for ``s < 0``, a loss below 2 bits for ``0 < s <= 1/2``; the direct difference
    where ``|s| > 1/2``."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = g - log1p_g
        s = g / (2 + g)
    near = np.abs(s) <= 0.5
    sn = s[near]
    out[near] = 2 * (sn * sn / (1 - sn) - _atanh_excess(sn))
    return out


def _entropy_excess(g: np.ndarray, log1p_g: np.ndarray) -> np.ndarray:
    """``(1 + g) log1p(g) - g >= 0`` for ``g > -1``, to a few ulp: ``2 (s^2 + (1 + s)(atanh(s) - s)) / (1 - s)``
    with ``s = g / (2 + g)`` where ``|s| <= 1/2`` (as in :func:`_log_excess`), the direct form outside."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = _one_plus(g, log1p_g) * log1p_g - g
        s = g / (2 + g)
    near = np.abs(s) <= 0.5
    sn = s[near]
    out[near] = 2 * (sn * sn + (1 + sn) * _atanh_excess(sn)) / (1 - sn)
    return out


def _power_excess(lam: np.ndarray, g: np.ndarray, log1p_g: np.ndarray) -> np.ndarray:
    """``(1 + g)^lam - 1 - lam g`` for ``g > -1`` (``log1p_g`` its accurate log1p; ``(k, m)`` for ``k`` exponents
    and ``m`` nodes), to a few ulp relative (its sign is that of ``lam (lam - 1)``).

    The direct form ``expm1(lam L) - lam g`` cancels to ``lam (lam - 1) g^2 / 2``. With ``L = log1p(g)`` and
    ``mu = lam - 1`` it equals ``mu ((1 + g) L - g) + (1 + g)(e^{mu L} - 1 - mu L)``, two non-negative terms
    for ``lam >= 1``, and ``(e^{lam L} - 1 - lam L) - lam (g - L)``, two non-negative terms for ``lam <= 0``;
    between 0 and 1 the first form is used above 1/2 and the second below, where their terms cancel by at
    most a factor 2 for small ``g``. Next to ``g = -1`` (``L < -2``) the second form cancels (terms ~ ``lam
    |L|``, sum ~ ``lam - 1``) and the first can meet 0 * inf: the direct form, within a factor 3, is used.
    """
    lam = np.asarray(lam, dtype=np.float64)[:, None]
    out = np.empty((lam.shape[0], g.size))
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        hi = lam[:, 0] > 0.5
        if np.any(hi):
            mu = lam[hi] - 1.0
            out[hi] = mu * _entropy_excess(g, log1p_g) + _one_plus(g, log1p_g) * _exp_excess(mu * log1p_g)
        if not np.all(hi):
            lo = lam[~hi]
            out[~hi] = _exp_excess(lo * log1p_g) - lo * _log_excess(g, log1p_g)
        direct = (log1p_g < -2) & ~(hi[:, None] & np.isfinite(out))
        if np.any(direct):
            rows, cols = np.nonzero(direct)
            out[rows, cols] = np.expm1(lam[rows, 0] * log1p_g[cols]) - lam[rows, 0] * g[cols]
    return out


def _means_where_live(f, log_p, log_bound) -> np.ndarray:
    """Per row ``i``: ``sum_j p_j F[i, j]`` for weights ``p = exp(log_p)`` (``m`` nodes), summed over the nodes
    where ``p_j`` is normal (above 1e-300) and ``F[i, j]`` finite; NaN unless the other nodes' share is
    below e^-40 of the sum (then nodes out of float64's range dominate: the moment is large and its
    log-sum-exp value is accurate).

    ``f(live)`` gives ``F`` on the live nodes (a boolean mask), ``(k, n_live)``; ``log_bound(rows)`` a
    ``(len(rows), m)`` log of a bound on ``|F| / 2`` at every node, for the rows that leave nodes out.
    """
    live = log_p > LOG_TINY  # ~ 75 sigma / h nodes: F is evaluated only there
    vals = f(live)
    finite = np.isfinite(vals)
    totals = (np.where(finite, vals, 0.0) * np.exp(log_p[live])).sum(axis=1)  # pairwise: O(log m) rounding
    partial = np.flatnonzero(~np.all(finite, axis=1) | ~np.all(live))
    if partial.size:
        share = log_p[None, :] + log_bound(partial)  # (r, m)
        share[:, np.flatnonzero(live)] = np.where(finite[partial], -np.inf, share[:, live])
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            top = share.max(axis=1)
            safe = np.where(np.isfinite(top), top, 0.0)
            log_share = safe + np.log(np.exp(share - safe[:, None]).sum(axis=1)) + math.log(2)
            small = log_share <= np.log(np.abs(totals[partial])) - 40  # False for NaN; -inf <= -inf holds
        totals[partial[~small]] = np.nan
    return np.where(np.isfinite(totals), totals, np.nan)


def _mean_where_live(f, log_p, g, log1p_g, log_bound) -> float:
    """:func:`_means_where_live` of one row ``f(g, log1p_g)``, with ``log_bound`` the log of a bound on ``|f| / 2``
    per node."""
    return float(
        _means_where_live(
            lambda live: f(g[live], log1p_g[live])[None, :], log_p, lambda rows: log_bound[None, :]
        )[0]
    )


def _log1p_mean_power_excess(lam, log_p, g, log1p_g, log_g, fallback: np.ndarray) -> np.ndarray:
    """``log sum_j p_j (1 + g_j)^lam`` for each exponent ``lam[i]`` and weights ``p = exp(log_p)`` summing to 1 with
    ``sum_j p_j g_j = 0``: ``log1p(sum_j p_j f_j)`` with ``f = (1 + g)^lam - 1 - lam g`` (:func:`_power_excess`),
    whose terms share one sign, so its log keeps full relative precision however small it is (the
    log-sum-exp of ``p (1 + g)^lam`` rounds 1 + tiny). ``|f| <= (1 + g)^lam + 1 + |lam g|`` bounds the nodes
    left out (``log1p_g = log(1 + g)``, ``log_g = log |g|``); ``fallback`` where they may matter
    (:func:`_means_where_live`) or the sum lies below -1/2 (``log1p`` cancels there)."""
    lam = np.asarray(lam, dtype=np.float64)

    def log_bound(rows):
        la = lam[rows, None]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return np.maximum(la * log1p_g[None, :], np.logaddexp(0.0, np.log(np.abs(la)) + log_g[None, :]))

    totals = _means_where_live(lambda live: _power_excess(lam, g[live], log1p_g[live]), log_p, log_bound)
    ok = totals >= -0.5  # False for NaN
    return np.where(ok, np.log1p(np.where(ok, totals, 0.0)), fallback)


def _lse(x: np.ndarray) -> np.ndarray:
    """Row-wise log-sum-exp of a finite 2-d array (scipy's is slow on many small calls)."""
    top = x.max(axis=1)
    return top + np.log(np.exp(x - top[:, None]).sum(axis=1))


class ComposedRDP(RDPProfile):
    """Composition: ``rho(tau) = sum_i counts[i] * profiles[i](tau)`` (RDP adds under composition)."""

    def __init__(self, profiles, counts=None):
        if isinstance(profiles, RDPProfile) or not _iterable(profiles):
            raise TypeError(f"profiles must be a non-empty sequence of RDPProfile objects, got {profiles!r}")
        profiles = list(profiles)
        if not profiles or not all(isinstance(p, RDPProfile) for p in profiles):
            raise TypeError("profiles must be a non-empty sequence of RDPProfile objects")
        if counts is not None and not _iterable(counts):
            raise TypeError(f"counts must be a sequence of integers >= 1, one per profile, got {counts!r}")
        counts = [1] * len(profiles) if counts is None else [check_int(c, "counts[i]", 1) for c in counts]
        if len(counts) != len(profiles):
            raise ValueError(f"counts must have one entry per profile ({len(profiles)}), got {len(counts)}")
        self.profiles, self.counts = profiles, counts
        self._finite = all(p._finite for p in profiles)

    def _rdp(self, tau):
        total = np.zeros_like(tau)
        for p, c in zip(self.profiles, self.counts, strict=True):
            total = total + c * p._rdp(tau)
        return total

    def __repr__(self):
        return f"ComposedRDP({self.profiles!r}, counts={self.counts})"


class TabulatedRDP(RDPProfile):
    """A user profile given as values at orders, extended to every order by a *sound* interpolation.

    Every valid RDP curve is non-decreasing in ``tau`` (van Erven and Harremoës 2014, Thm 3) and
    ``g(tau) = (tau - 1) D_tau`` is convex (a log-moment generating function), for each direction and so
    for their maximum. Hence, for ``tau`` between listed orders ``t_i < tau < t_{i+1}`` (our design):

    - ``rho(tau) <= rho(t_{i+1})`` (monotonicity), valid at every order;
    - for ``tau > 1`` also ``rho(tau) <= chord_g(tau) / (tau - 1)``, the chord of ``g`` between the two
      listed orders (convexity); we return the smaller of the two;
    - below the smallest listed order ``rho(t_0)``; above the largest ``inf`` (no guarantee).

    Values must be non-negative and non-decreasing in the order (a non-monotone table is not an RDP
    curve: ``ValueError``); orders must be strictly increasing and >= 0.5.
    """

    def __init__(self, orders, values):
        t, v = as_rdp_table(orders, values)
        if np.any(np.diff(t) <= 0):
            raise ValueError("orders must be strictly increasing")
        if np.any(np.diff(v) < 0):
            i = int(np.argmax(np.diff(v) < 0))
            raise ValueError(
                f"values must be non-decreasing in the order (RDP is monotone): rho({t[i + 1]}) = {v[i + 1]} "
                f"< rho({t[i]}) = {v[i]}"
            )
        self.orders, self.values = t, v

    def _rdp(self, tau):
        t, v = self.orders, self.values
        j = np.searchsorted(t, tau, side="left")  # t[j-1] < tau <= t[j]
        exact = (j < t.size) & (t[np.minimum(j, t.size - 1)] == tau)
        upper = np.where(j < t.size, v[np.minimum(j, t.size - 1)], np.inf)
        i = np.clip(j - 1, 0, t.size - 1)
        has_chord = (j > 0) & (j < t.size) & (tau > 1)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            g0 = (t[i] - 1) * v[i]
            g1 = (t[np.minimum(j, t.size - 1)] - 1) * upper
            w = (tau - t[i]) / (t[np.minimum(j, t.size - 1)] - t[i])
            chord = ((1 - w) * g0 + w * g1) / (tau - 1)
        out = np.where(has_chord & np.isfinite(chord), np.minimum(upper, chord), upper)
        return np.where(exact, upper, out)

    def __repr__(self):
        return f"TabulatedRDP(orders={self.orders.tolist()}, values={self.values.tolist()})"
