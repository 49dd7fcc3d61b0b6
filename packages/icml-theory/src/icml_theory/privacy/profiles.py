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

import math
import warnings

import numpy as np
from scipy.special import gammaln

from icml_theory.validation import as_array, as_rdp_table, check_choice, check_int, check_orders, check_real

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
    return bernoulli_renyi_from_logs(tau, np.log(p), np.log1p(-p), np.log(q), np.log1p(-q), diff=p - q)


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
        lp = -np.logaddexp(0.0, -self.epsilon)  # log e^eps/(1+e^eps)
        lp1 = -np.logaddexp(0.0, self.epsilon)
        # a divergence: rounding below 0 (tiny epsilon) is clamped
        return self.steps * np.maximum(bernoulli_renyi_from_logs(tau, lp, lp1, lp1, lp), 0.0)

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
            out = np.where(t1 == 0, c + math.expm1(-c), logs / np.where(t1 == 0, 1.0, t1))
        return self.steps * np.maximum(out, 0.0)  # a divergence: rounding below 0 (tiny c) is clamped

    def __repr__(self):
        return f"LaplaceRDP(scale={self.scale}, sensitivity={self.sensitivity}, steps={self.steps})"


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
      Zhang (2019), ``A = sum_k C(tau, k) (1-q)^(tau-k) q^k exp((k^2 - k) / (2 sigma^2))``, in log space;
    - every other order and direction, including ``tau`` in [0.5, 1) and the KL limit ``tau = 1``: the
      integral ``E_{mu0}[r^lambda]``, ``r = mu1/mu0``, by the trapezoid rule in log space on a uniform grid of
      step ``sigma/16`` over ``[-16 sigma - 1, max(lambda, 0) + 16 sigma + 1]``. The integrand is a smooth
      Gaussian-like function of width >= sigma, for which the trapezoid rule converges exponentially; the
      tests check it against the binomial sum at integer orders and against adaptive quadrature. The
      rule's own error at ``lambda = 0, 1`` (where the moment is exactly 1) is subtracted, and within 0.25
      of those exponents the moment is summed as ``1 + E[expm1(...)]``, which keeps full relative
      precision next to the KL order (where that sum stays within 1/2 of 1; for small sigma it can
      overflow or cancel, and the log-sum-exp value, accurate there, is kept). The KL order's weights
      ``phi0 * r`` are formed in log space, since ``r`` alone overflows float64 for small sigma.
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
        """Replace-one: ``D_tau(P||Q)`` by the trapezoid rule (the rule's error at ``tau = 0, 1`` removed)."""
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
            with np.errstate(divide="ignore", invalid="ignore"):
                d = np.where(lam == 1, kl if np.any(near) else 0.0, log_m / np.where(lam == 1, 1.0, lam - 1))
            out[idx] = np.maximum(d, 0.0)
        return (self.steps * out).reshape(tau.shape)

    def _rdp_quadrature(self, tau):
        t = tau.ravel()
        fwd = self._log_moments(t)  # log E_mu0[r^tau]
        rev = self._log_moments(1.0 - t)  # log E_mu0[r^(1-tau)]
        t1 = t - 1.0
        with np.errstate(divide="ignore", invalid="ignore"):
            d_fwd = np.where(t1 == 0, self._kl(forward=True), fwd / np.where(t1 == 0, 1.0, t1))
            d_rev = np.where(t1 == 0, self._kl(forward=False), rev / np.where(t1 == 0, 1.0, t1))
        return (self.steps * np.maximum(np.maximum(d_fwd, d_rev), 0.0)).reshape(tau.shape)

    def _grid(self, hi_lam: float):
        s = self.sigma
        lo, hi = -16 * s - 1, max(hi_lam, 0.0) + 16 * s + 1
        h = s / 16
        z = np.arange(lo, hi + h, h)  # (m,)
        log_phi0 = -0.5 * (z / s) ** 2 - math.log(s * math.sqrt(2 * math.pi)) + math.log(h)
        log_r = np.logaddexp(
            math.log1p(-self.sample_rate), math.log(self.sample_rate) + (2 * z - 1) / (2 * s * s)
        )
        return log_phi0, log_r

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
                log_phi0, log_r = self._grid(float(lams[idx].max()))
                lam = lams[idx]
                terms = log_phi0[None, :] + lam[:, None] * log_r[None, :]  # (k, m)
                # subtract the rule's own error at lam = 0 and 1 (where the moment is exactly 1)
                m0, m1 = _lse(log_phi0[None, :])[0], _lse((log_phi0 + log_r)[None, :])[0]
                out[idx] = _lse(terms) - (1 - lam) * m0 - lam * m1
                # next to lam = 0 and 1 the moment is 1 + O(lam (lam - 1)): sum expm1 terms instead, so the
                # divergence (this log over tau - 1) keeps full relative precision next to the KL order
                w0 = np.exp(log_phi0 - log_phi0.max())
                log_w1 = log_phi0 + log_r
                w1 = np.exp(log_w1 - log_w1.max())
                near0, near1 = np.abs(lam) < 0.25, np.abs(lam - 1) < 0.25
                if np.any(near0):
                    sel = idx[near0]
                    out[sel] = _log1p_where_accurate(lam[near0, None] * log_r[None, :], w0, out[sel])
                if np.any(near1):
                    sel = idx[near1]
                    out[sel] = _log1p_where_accurate((lam[near1, None] - 1) * log_r[None, :], w1, out[sel])
        return out

    def _log_moment_binomial(self, lam: int) -> float:
        k = np.arange(lam + 1)
        q, s2 = self.sample_rate, self.sigma * self.sigma
        terms = (
            gammaln(lam + 1)
            - gammaln(k + 1)
            - gammaln(lam - k + 1)
            + (lam - k) * math.log1p(-q)
            + k * math.log(q)
            + (k * k - k) / (2 * s2)
        )
        return float(_lse(terms[None, :])[0])

    def _log_moment(self, lam: float) -> float:
        """``log E_{mu0}[r^lam]`` at one exponent."""
        return float(self._log_moments(np.array([float(lam)]))[0])

    def _kl(self, forward: bool) -> float:
        log_phi0, log_r = self._grid(1.0)
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
