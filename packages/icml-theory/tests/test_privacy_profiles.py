"""RDP profiles: closed forms, numerical integration, both directions, sound interpolation, bad input."""

import math
import warnings
from decimal import MAX_EMAX, MIN_EMIN, Decimal, localcontext

import numpy as np
import pytest
from scipy import integrate, stats

from icml_theory.privacy import (
    ComposedRDP,
    GaussianRDP,
    LaplaceRDP,
    RandomizedResponseRDP,
    SubsampledGaussianRDP,
    TabulatedRDP,
    bernoulli_renyi,
    optimal_epsilon,
)

ORDERS = np.array([0.5, 0.6, 0.8, 0.99, 1.0, 1.01, 1.5, 2.0, 3.0, 7.5, 16.0, 40.0])


NORM_LOG_C = math.log(math.sqrt(2 * math.pi))


def norm_logpdf(loc, scale):
    """``stats.norm(loc, scale).logpdf`` for the quadratures below, without the frozen distribution's ~40 us of
    overhead per call (~99% of their time). Within 1e-15 relative of scipy's (test_norm_logpdf_is_scipys); the
    19 quadrature references of this module came out bit for bit the same with it as with scipy's."""
    log_scale = math.log(scale)

    def logpdf(x):
        y = (x - loc) / scale
        return -(y**2) / 2.0 - NORM_LOG_C - log_scale

    return logpdf


def test_norm_logpdf_is_scipys():
    x = np.concatenate([np.linspace(-45, 45, 20001), [-1e3, -1e-300, 0.0, 5e-324, 1e3]])
    for loc, scale in [(0, 1.5), (2, 1.5), (0, 1.2), (1, 1.2), (-1.0, 1.2), (0, 0.05), (1, 0.05)]:
        ours, theirs = norm_logpdf(loc, scale), stats.norm(loc, scale).logpdf
        # measured: at most 3.2e-16 relative (a few ulp: scipy forms the same formula with numpy operations)
        np.testing.assert_allclose(ours(x), theirs(x), rtol=1e-15, atol=0)
        scalars = x[::5]  # as quad passes them
        np.testing.assert_allclose([ours(float(v)) for v in scalars], theirs(scalars), rtol=1e-15, atol=0)


def renyi_by_quad(logp, logq, tau, lo=-40, hi=40):
    """D_tau(p || q) for log-densities by adaptive quadrature (the KL divergence at tau = 1)."""
    if tau == 1:

        def integrand(x):
            return math.exp(logp(x)) * (logp(x) - logq(x))
    else:

        def integrand(x):
            return math.exp(tau * logp(x) + (1 - tau) * logq(x))

    val, _ = integrate.quad(integrand, lo, hi, points=[0, 1], limit=400, epsabs=0, epsrel=1e-12)
    return val if tau == 1 else math.log(val) / (tau - 1)


def test_gaussian_closed_form_and_quadrature():
    prof = GaussianRDP(sigma=1.5, sensitivity=2.0, steps=3)
    assert prof.mu == pytest.approx(math.sqrt(3) * 2 / 1.5)
    np.testing.assert_allclose(prof(ORDERS), 3 * ORDERS * 4 / (2 * 1.5**2), rtol=1e-15)
    one = GaussianRDP(sigma=1.5, sensitivity=2.0)
    p, q = norm_logpdf(0, 1.5), norm_logpdf(2, 1.5)
    for tau in (0.5, 0.8, 1.0, 2.5):
        assert one(tau) == pytest.approx(renyi_by_quad(p, q, tau), rel=1e-7)


@pytest.mark.parametrize("tau", [0.5, 0.75, 0.9, 1.0, 1.2, 2.0, 5.0])
def test_laplace_matches_quadrature_both_directions(tau):
    prof = LaplaceRDP(scale=0.8, sensitivity=1.0)
    p, q = stats.laplace(0, 0.8).logpdf, stats.laplace(1, 0.8).logpdf
    assert prof(tau) == pytest.approx(renyi_by_quad(p, q, tau), rel=1e-7)
    assert prof(tau) == pytest.approx(renyi_by_quad(q, p, tau), rel=1e-7)


def laplace_rdp_reference(scale, tau):
    """Mironov (2017), Table II, for Lap(0, b) vs Lap(1, b), in 60-digit decimal arithmetic:
    ``log[tau/(2 tau - 1) e^{(tau-1)/b} + (tau-1)/(2 tau - 1) e^{-tau/b}] / (tau - 1)`` (the same three-piece
    integral for tau in (1/2, 1)); the KL ``1/b + e^{-1/b} - 1`` at tau = 1, the limit at tau = 1/2."""
    with localcontext() as ctx:
        ctx.prec, ctx.Emax, ctx.Emin = 60, MAX_EMAX, MIN_EMIN
        c, t = 1 / Decimal(repr(scale)), Decimal(repr(tau))
        if t == 1:
            return float(c + (-c).exp() - 1)
        if t == Decimal("0.5"):  # the limit: the sum is e^{-c/2} (1 + c/2)
            return float(((-c / 2).exp() * (1 + c / 2)).ln() / (t - 1))
        total = t / (2 * t - 1) * ((t - 1) * c).exp() + (t - 1) / (2 * t - 1) * (-t * c).exp()
        return float(total.ln() / (t - 1))


LAPLACE_ORDERS = [
    0.5,
    0.6,
    0.8,
    0.85,
    0.9,
    0.95,
    0.99,
    1 - 1e-6,
    1.0,
    1 + 1e-6,
    1.01,
    1.1,
    1.25,
    2.0,
    10.0,
    1e4,
]


@pytest.mark.parametrize("scale", [1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0, 1e4, 1e8])
def test_laplace_matches_high_precision_reference(scale):
    """Regression: at scale 1e-3 the expm1 form next to tau = 1 cancelled to log1p(-1) = -inf, so the RDP was
    +inf at orders 0.8-0.95 (true value <= 1/scale), and expm1 overflow warnings leaked at large orders.
    Large scales (tiny RDP): both forms summed first-order terms ~ 1/scale to ~ tau / (2 scale^2), relative
    error 6.3e-14 (scale 10), 4.8e-12 (100), 3.9e-8 (1e4), 0 or 7x the truth (1e8). Measured worst relative
    error over these orders now: 5.4e-16 (scale 10), 2.5e-16 (scale 1e8)."""
    prof = LaplaceRDP(scale)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = prof(np.array(LAPLACE_ORDERS))
    expected = [laplace_rdp_reference(scale, t) for t in LAPLACE_ORDERS]
    np.testing.assert_allclose(got, expected, rtol=2e-15, atol=0)
    assert np.all(got <= 1 / scale)  # bounded by the pure-DP epsilon
    grid = np.array(LAPLACE_ORDERS[:-1]).reshape(3, 5)  # 2-d orders (the order search passes them)
    np.testing.assert_array_equal(prof(grid), got[:-1].reshape(3, 5))


@pytest.mark.parametrize("scale", [1e-3, 1.0])
def test_laplace_optimal_epsilon_is_finite_and_silent(scale):
    """Regression: scale 1e-3 raised a misleading "must hold non-negative RDP values" ValueError (the order
    search met the +inf values) and scale 1 emitted ~130 "overflow encountered in expm1" warnings."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        eps = optimal_epsilon(LaplaceRDP(scale), 1e-5)
    assert eps == pytest.approx(1 / scale, rel=1e-4)  # measured: 1/scale + 6.1e-5 at both scales


def test_randomized_response_is_bernoulli_divergence():
    eps0 = 1.3
    p = math.exp(eps0) / (1 + math.exp(eps0))
    rr = RandomizedResponseRDP(eps0, steps=2)
    for tau in (0.5, 0.9, 1.0, 3.0, 200.0):
        s = p**tau * (1 - p) ** (1 - tau) + (1 - p) ** tau * p ** (1 - tau)
        expected = (2 * p - 1) * math.log(p / (1 - p)) if tau == 1 else math.log(s) / (tau - 1)
        assert rr(tau) == pytest.approx(2 * expected, rel=1e-12)
    assert rr(1e4) <= 2 * eps0  # bounded by the max divergence


@pytest.mark.parametrize("eps0", [1e-8, 1e-6, 1e-4, 1e-2, 0.5, 20.0])
def test_randomized_response_tiny_epsilon_matches_mpmath(eps0):
    """Regression: D_tau(Bern(p) || Bern(1-p)) summed first-order terms ~ tau eps/2 to ~ tau eps^2 / 4 (and its
    log-ratio log p - log(1-p) rounded to ~1e-16 absolute): 3.2e-8 relative at eps = 1e-8, 2.9e-12 at 1e-4.
    Now S - 1 = -expm1(tau eps) expm1((1 - tau) eps) / (1 + e^eps), a product; KL eps tanh(eps / 2).
    Measured worst relative error: 4.7e-16."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 50
    taus = [0.5, 0.75, 0.99, 1.0, 1 + 1e-6, 1.01, 2.0, 10.0, 1e4]
    got = RandomizedResponseRDP(eps0)(np.array(taus))
    e = mp.mpf(eps0)
    for t, value in zip(taus, got, strict=True):
        tm = mp.mpf(t)
        if t == 1:
            expected = e * mp.tanh(e / 2)
        else:
            expected = mp.log((mp.exp(tm * e) + mp.exp((1 - tm) * e)) / (1 + mp.exp(e))) / (tm - 1)
        assert value == pytest.approx(float(expected), rel=2e-15, abs=0)


@pytest.mark.parametrize(
    "profile",
    [
        GaussianRDP(0.7),
        LaplaceRDP(1.0),
        RandomizedResponseRDP(0.5),
        SubsampledGaussianRDP(0.05, 0.9, 3),
    ],
)
def test_profiles_are_monotone_and_continuous_at_one(profile):
    taus = np.geomspace(0.5, 64, 80)
    vals = profile(taus)
    assert np.all(np.diff(vals) >= -1e-12 * vals[1:])
    near = 1 + np.array([-1e-3, -1e-6, -1e-9, -1e-12, 0.0, 1e-12, 1e-9, 1e-6, 1e-3])
    vals = profile(near)  # no cancellation next to the KL order: still monotone, continuous at 1
    assert np.all(np.diff(vals) >= -1e-13 * vals[1:])
    np.testing.assert_allclose(vals[1:-1], vals[4], rtol=1e-5)


def subsampled_by_quad(q, sigma, tau):
    p0, p1_shifted = norm_logpdf(0, sigma), norm_logpdf(1, sigma)

    def p1(x):
        return np.logaddexp(math.log1p(-q) + p0(x), math.log(q) + p1_shifted(x))

    return max(renyi_by_quad(p1, p0, tau), renyi_by_quad(p0, p1, tau))


@pytest.mark.parametrize("tau", [0.5, 0.7, 1.0, 1.5, 2.0, 4.5, 8.0])
def test_subsampled_gaussian_matches_quadrature(tau):
    prof = SubsampledGaussianRDP(0.1, 1.2)
    assert prof(tau) == pytest.approx(subsampled_by_quad(0.1, 1.2, tau), rel=1e-6)


def test_subsampled_gaussian_integer_orders_match_binomial_sum():
    prof = SubsampledGaussianRDP(0.01, 1.0)
    for tau in (2, 3, 10, 64):
        fwd_quad = prof._log_moment(tau + 1e-13) / (tau + 1e-13 - 1)  # fractional path: quadrature
        assert fwd_quad == pytest.approx(prof._log_moment(tau) / (tau - 1), rel=1e-9)


@pytest.mark.slow
def test_subsampled_gaussian_against_mpmath():
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 30
    q, s = 0.01, 1.0

    def exact(t):
        def integrand(x):
            p1 = (1 - q) * mp.npdf(x, 0, s) + q * mp.npdf(x, 1, s)
            return p1**t * mp.npdf(x, 0, s) ** (1 - t)

        return float(mp.log(mp.quad(integrand, [-mp.inf, 0, 1, mp.inf])) / (t - 1))

    for t in (1.1, 1.5, 2.5):
        assert SubsampledGaussianRDP(q, s)(t) == pytest.approx(exact(t), rel=1e-9)


def test_subsampled_gaussian_limits():
    taus = np.array([0.5, 1.0, 2.0, 10.0])
    np.testing.assert_allclose(
        SubsampledGaussianRDP(1.0, 2.0, 5)(taus), GaussianRDP(2.0, steps=5)(taus), rtol=1e-14
    )
    # subsampling never increases the divergence (convexity); at order 2, rho = log(1 + q^2 (e^{1/s^2} - 1))
    sub = SubsampledGaussianRDP(0.01, 1.0)(taus)
    assert np.all(sub <= GaussianRDP(1.0)(taus))
    assert sub[2] == pytest.approx(math.log1p(0.01**2 * (math.e - 1)), rel=1e-12)


# D_tau at small sigma, where the privacy loss log r reaches hundreds to thousands: mpmath (40 digits) of the
# defining integrals, max of both directions (add-remove) or D_tau(P||Q) (replace-one), KL at tau = 1
SMALL_SIGMA_REFERENCE = [
    ("add-remove", 0.01, 0.05, 0.9, 0.09045302024579138),
    ("add-remove", 0.01, 0.05, 1.0, 1.9439984656451526),
    ("add-remove", 0.01, 0.05, 1.1, 169.34312839137124),
    ("add-remove", 0.01, 0.05, 2.0, 390.7896596280238),
    ("add-remove", 0.01, 0.02, 0.8, 0.040201343414005775),
    ("add-remove", 0.01, 0.02, 1.0, 12.443998465645153),
    ("add-remove", 0.01, 0.02, 1.01, 797.4118951478238),
    ("add-remove", 0.01, 0.02, 1.2, 1472.3689788840713),
    ("add-remove", 0.5, 0.02, 0.95, 13.169796430638948),
    ("add-remove", 0.5, 0.02, 1.0, 624.30685281944),
    ("replace-one", 0.01, 0.05, 1.0, 1.954048801498654),
    ("replace-one", 0.01, 0.02, 0.9, 0.10050335853501444),
    ("replace-one", 0.01, 0.02, 1.01, 797.4219454836773),
    ("replace-one", 0.01, 0.02, 1.1, 1324.3531782899845),
    ("replace-one", 0.5, 0.02, 1.2, 1496.5342640972),
    ("replace-one", 0.5, 0.02, 1.0, 625.0),
]


@pytest.mark.parametrize("relation, q, sigma, tau, expected", SMALL_SIGMA_REFERENCE)
def test_subsampled_gaussian_small_sigma_matches_high_precision(relation, q, sigma, tau, expected):
    """Regression: the forward KL formed phi0 * r, and r overflows float64 for small sigma (inf / inf: NaN at
    order 1 for q = 0.01, sigma = 0.05); the expm1 sums next to orders 0 and 1 overflowed too (NaN at orders
    0.8-1.2 for sigma <= 0.02). Measured worst relative error on these rows: 3.5e-14."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = SubsampledGaussianRDP(q, sigma, relation=relation)(tau)
    assert got == pytest.approx(expected, rel=1e-12)


def test_subsampled_gaussian_kl_at_small_sigma_matches_quadrature():
    """The order-1 value against adaptive quadrature of E_mu1[log mu1/mu0] (mu1 formed directly, no r)."""
    assert SubsampledGaussianRDP(0.01, 0.05)(1.0) == pytest.approx(
        subsampled_by_quad(0.01, 0.05, 1.0), rel=1e-12
    )


# tiny per-step RDP (small q): mpmath (50 digits) of E_mu0[r^tau] = 1 + E_mu0[(1 + g)^tau - 1 - tau g],
# g = r - 1 = q expm1((2z - 1) / (2 sigma^2)), by adaptive quadrature (it matches the binomial sum to 4e-41 at
# integer orders), max of both directions; KL at tau = 1; replace-one: int P^tau Q^(1-tau) - Q - tau (P - Q).
# The comment is the old code's relative error (-1: it returned 0)
TINY_RDP_REFERENCE = [
    ("add-remove", 1e-08, 0.8, 1.25, 2.356708088309224e-16),  # old code: -1.0e+00
    ("add-remove", 1e-08, 0.8, 10.5, 1.9796363525403063e-15),  # old code: -8.2e-03
    ("add-remove", 1e-08, 5.0, 2.5, 5.1013467751036385e-18),  # old code: -1.0e+00
    ("add-remove", 1e-08, 20.0, 1.25, 1.5644547535925333e-19),  # old code: +2.8e+03
    ("add-remove", 1e-08, 20.0, 10.5, 1.3141419933222575e-18),  # old code: +3.7e+02
    ("add-remove", 1e-06, 0.8, 1.25, 2.356693197446343e-12),  # old code: +2.3e-04
    ("add-remove", 1e-06, 0.8, 2.5, 4.7134365332271664e-12),  # old code: +2.7e-05
    ("add-remove", 1e-06, 0.8, 10.5, 1.979778152527674e-11),  # old code: -2.1e-07
    ("add-remove", 1e-06, 20.0, 1.25, 1.564454750682456e-15),  # old code: +1.3e+00
    ("add-remove", 1e-06, 20.0, 10.5, 1.3141420210261734e-14),  # old code: +3.1e-03
    ("add-remove", 0.0001, 0.8, 1.25, 2.355211602772601e-08),  # old code: +2.9e-08
    ("add-remove", 0.0001, 0.8, 10.5, 2.001960127254041e-07),  # old code: -2.3e-09
    ("add-remove", 0.0001, 5.0, 2.5, 5.101357323039289e-10),  # old code: -1.9e-07
    ("add-remove", 0.0001, 20.0, 1.25, 1.5644544596845912e-11),  # old code: +1.8e-05
    ("add-remove", 0.0001, 20.0, 10.5, 1.31414479113167e-10),  # old code: -1.4e-06
    ("add-remove", 0.01, 0.8, 1.25, 0.00022418621164605658),  # old code: -7.8e-13
    ("add-remove", 0.01, 0.8, 10.5, 3.1132392146906054),  # old code: -5.7e-16
    ("add-remove", 0.01, 20.0, 1.25, 1.564425458495505e-07),  # old code: +1.1e-09
    ("add-remove", 0.01, 20.0, 10.5, 1.314418938747169e-06),  # old code: -2.3e-12
    ("add-remove", 1e-08, 0.8, 0.5, 9.426831751555055e-17),  # old code: -1.0e+00
    ("add-remove", 1e-08, 0.8, 0.9, 1.6968297730413608e-16),  # old code: +7.6e-10
    ("add-remove", 1e-08, 0.8, 1.0, 1.8853664305352505e-16),  # old code: -2.4e-08
    ("add-remove", 1e-08, 5.0, 0.5, 1.0202693541766396e-18),  # old code: -1.0e+00
    ("add-remove", 1e-08, 5.0, 0.9, 1.836484837821823e-18),  # old code: +6.4e-06
    ("add-remove", 1e-08, 5.0, 1.0, 2.040538708775323e-18),  # old code: +5.7e-06
    ("replace-one", 1e-08, 0.8, 0.5, 2.280560649284602e-16),  # old code: -1.0e+00
    ("replace-one", 1e-08, 0.8, 1.0, 4.561121298569228e-16),  # old code: +1.5e-05
    ("replace-one", 1e-08, 0.8, 2.5, 1.1402803246423981e-15),  # old code: +4.3e-01
    ("replace-one", 1e-08, 5.0, 0.5, 4.001066750337065e-18),  # old code: -1.0e+00
    ("replace-one", 1e-08, 5.0, 1.0, 8.00213350067413e-18),  # old code: +4.1e+00
    ("replace-one", 1e-08, 5.0, 2.5, 2.0005333751685327e-17),  # old code: +2.1e+01
    ("replace-one", 0.0001, 5.0, 0.5, 4.001050091989814e-10),  # old code: +1.8e-06
]


@pytest.mark.parametrize("relation, q, sigma, tau, expected", TINY_RDP_REFERENCE)
def test_subsampled_gaussian_tiny_rdp_matches_high_precision(relation, q, sigma, tau, expected):
    """Regression: the log-sum-exp of the moment rounded 1 + tiny (0 at q = 1e-8, 2.3e-4 relative at q = 1e-6,
    sigma = 0.8, tau = 1.25; anti-conservative, 0 or -2.8e-5, at other orders), and the KL sums of p log r
    cancelled. The moment is now 1 + a sum of one-signed terms. Measured worst relative error on these rows:
    8.9e-16 (4 ulp; 8.7e-16 on the whole grid q in 1e-8..0.5, sigma in 0.5..20, tau in 0.5..1.1)."""
    got = SubsampledGaussianRDP(q, sigma, relation=relation)(tau)
    assert got == pytest.approx(expected, rel=4e-15, abs=0)


@pytest.mark.parametrize("q", [1e-8, 1e-6, 1e-4, 0.1])
@pytest.mark.parametrize("sigma", [0.8, 5.0, 20.0])
def test_subsampled_gaussian_integer_orders_match_mpmath_binomial_sum(q, sigma):
    """Integer orders: the binomial sum with 1 taken out of each exp factor, positive terms only (the full sum
    rounded 1 + tiny: 0 at q = 1e-8, sigma = 5), and exact binomial coefficients (gammaln's differences cost
    1.3e-13 at tau = 256, q = 0.01, sigma = 20). Measured worst relative error: 5.1e-15 (q = 0.1, sigma = 20, tau = 256; the
    rounding of exponents ~60 in the log-space terms), 3.4e-16 for q <= 1e-4."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 50
    orders = [2, 3, 10, 64, 256]
    got = SubsampledGaussianRDP(q, sigma)(np.array(orders, dtype=float))
    qm, s2 = mp.mpf(q), mp.mpf(sigma) ** 2
    for t, value in zip(orders, got, strict=True):
        a_minus_1 = mp.fsum(
            mp.binomial(t, k) * (1 - qm) ** (t - k) * qm**k * mp.expm1(mp.mpf(k * k - k) / (2 * s2))
            for k in range(2, t + 1)
        )
        assert value == pytest.approx(float(mp.log1p(a_minus_1) / (t - 1)), rel=2e-14, abs=0)


def replace_by_quad(q, sigma, tau):
    def pair(shift):
        center, shifted = norm_logpdf(0, sigma), norm_logpdf(shift, sigma)

        def logpdf(x):
            return np.logaddexp(math.log1p(-q) + center(x), math.log(q) + shifted(x))

        return logpdf

    return renyi_by_quad(pair(-1.0), pair(1.0), tau, lo=-2 * tau - 40)


@pytest.mark.parametrize("tau", [0.5, 0.8, 1.0, 1.5, 2.0, 4.5, 9.0])
def test_replace_one_subsampled_gaussian_matches_quadrature(tau):
    prof = SubsampledGaussianRDP(0.1, 1.2, relation="replace-one")
    assert prof(tau) == pytest.approx(replace_by_quad(0.1, 1.2, tau), rel=1e-6)


@pytest.mark.parametrize("tau", [0.7, 2.0, 6.0])
def test_replace_one_pair_is_the_worst_collinear_pair(tau):
    """Contributions a, b in [-1, 1] (the clipped gradients of one record before and after its label
    changes, collinear for a scalar-output regression): the antipodal pair (-1, 1) has the largest
    divergence on a grid (a numerical check, not a proof)."""
    q, sigma = 0.1, 1.2
    x = np.linspace(-2 * tau - 30, 2 * tau + 30, 200_001)

    def logmix(shift):
        return np.logaddexp(
            math.log1p(-q) + stats.norm(0, sigma).logpdf(x), math.log(q) + stats.norm(shift, sigma).logpdf(x)
        )

    grid = np.linspace(-1, 1, 9)
    logs = [logmix(a) for a in grid]

    def renyi(la, lb):  # a fine trapezoid rule in log space (the KL form is not needed: tau != 1)
        t = tau * la + (1 - tau) * lb
        top = t.max()
        y = np.exp(t - top)
        area = float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2)  # np.trapezoid needs numpy >= 2 (floor 1.26)
        return (top + math.log(area)) / (tau - 1)

    worst = SubsampledGaussianRDP(q, sigma, relation="replace-one")(tau)
    others = [renyi(la, lb) for la in logs for lb in logs]
    assert max(others) <= worst * (1 + 1e-6)
    assert max(others) == pytest.approx(worst, rel=1e-6)  # attained at (-1, 1) itself


def test_replace_one_limits_and_order():
    taus = np.array([0.5, 1.0, 2.0, 10.0])
    # q = 1: the Gaussian mechanism with sensitivity 2, which bounds every q (joint quasi-convexity)
    full = GaussianRDP(1.0, sensitivity=2.0, steps=3)(taus)
    np.testing.assert_allclose(
        SubsampledGaussianRDP(1.0, 1.0, 3, relation="replace-one")(taus), full, rtol=1e-14
    )
    sub = SubsampledGaussianRDP(0.05, 1.0, 3, relation="replace-one")(taus)
    add = SubsampledGaussianRDP(0.05, 1.0, 3)(taus)
    assert np.all(add < sub) and np.all(sub < full)
    assert "replace-one" in repr(SubsampledGaussianRDP(0.05, 1.0, relation="replace-one"))
    with pytest.raises(ValueError, match="relation"):
        SubsampledGaussianRDP(0.05, 1.0, relation="swap")


def test_composition_adds():
    a, b = GaussianRDP(1.0), LaplaceRDP(2.0)
    np.testing.assert_allclose((a + b)(ORDERS), a(ORDERS) + b(ORDERS))
    np.testing.assert_allclose(a.compose(4)(ORDERS), 4 * a(ORDERS))
    np.testing.assert_allclose(ComposedRDP([a, b], counts=[2, 3])(ORDERS), 2 * a(ORDERS) + 3 * b(ORDERS))


def test_tabulated_is_exact_at_nodes_and_sound_between():
    nodes = np.array([0.5, 1.0, 1.5, 2.0, 4.0, 8.0, 16.0, 32.0])
    for truth in (GaussianRDP(1.0), SubsampledGaussianRDP(0.02, 0.8, 50), RandomizedResponseRDP(2.0)):
        tab = TabulatedRDP(nodes, truth(nodes))
        np.testing.assert_allclose(tab(nodes), truth(nodes), rtol=1e-15)
        between = np.geomspace(0.5, 32, 301)
        assert np.all(tab(between) >= truth(between) * (1 - 1e-12))
        assert tab(64.0) == math.inf
    # the chord of (tau-1) rho is tighter than the next node for the (linear) Gaussian profile
    tab = TabulatedRDP(nodes, GaussianRDP(1.0)(nodes))
    assert tab(3.0) < GaussianRDP(1.0)(4.0)


def test_bernoulli_renyi_kl_limit():
    assert bernoulli_renyi(1.0, 0.3, 0.6) == pytest.approx(0.3 * math.log(0.5) + 0.7 * math.log(0.7 / 0.4))
    assert bernoulli_renyi(1 + 1e-9, 0.3, 0.6) == pytest.approx(bernoulli_renyi(1.0, 0.3, 0.6), rel=1e-6)


def test_bernoulli_renyi_of_nearby_probabilities_matches_mpmath():
    # D ~ (p - q)^2: log-ratios from the difference p - q (log1p), not from log p - log q, keep it; the
    # difference of rounded logs was off by 5e-2 (relative) at q - p = 1e-8
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 60
    p = 0.3
    for d in [1e-6, 1e-8]:
        q = p + d
        for tau in [0.5, 1.0, 2.0, 10.0]:
            pm, qm, tm = mp.mpf(p), mp.mpf(q), mp.mpf(tau)
            if tau == 1.0:
                ref = pm * mp.log(pm / qm) + (1 - pm) * mp.log((1 - pm) / (1 - qm))
            else:
                ref = mp.log(pm**tm * qm ** (1 - tm) + (1 - pm) ** tm * (1 - qm) ** (1 - tm)) / (tm - 1)
            assert float(bernoulli_renyi(tau, p, q)) == pytest.approx(float(ref), rel=1e-8, abs=0)


def test_bernoulli_renyi_matches_mpmath_from_nearly_equal_to_extreme_probabilities():
    # S - 1 was summed from first-order terms ~ (tau - 1)(p - q) to a value ~ (p - q)^2 / q: 0.45 relative error at
    # p = 1e-6, q = p + 1e-20 (always below the truth), a negative value at tau = 0.1, and log p - log q lost 5.9e-13
    # at p = 1e-300. Measured on this grid: worst 2.9e-14 relative (tau = 100, p = 1.1e-299, q = 1e-300: 100 ulps of
    # p / q, the problem's own condition number), 2.0 before; 1e-12 leaves a 30x margin.
    mp = pytest.importorskip("mpmath")
    taus = [0.0, 0.1, 0.5, 0.7, 1 - 1e-7, 1.0, 1 + 1e-7, 2.0, 10.0, 100.0]
    pairs = [(1e-6, 1e-6 + 1e-20), (0.3, 0.3 - 1e-15), (1 - 1e-9, 1 - 1e-9 + 2**-52), (1e-300, 4e-301)]
    pairs += [
        (1.1e-299, 1e-300),
        (0.5, 1e-300),
        (1e-12, 0.7),
        (0.999, 0.3),
        (0.2, 0.2 * 1.4),
        (0.6, 0.6 * 0.55),
    ]
    worst = 0.0
    for p, q in pairs:
        mp.mp.dps = 700  # 1 - p to full precision at p = 1e-300
        pm, qm = mp.mpf(p), mp.mpf(q)
        got = bernoulli_renyi(np.array(taus), p, q)
        for tau, value in zip(taus, got, strict=True):
            tm = mp.mpf(tau)
            if tau == 1.0:
                ref = pm * mp.log(pm / qm) + (1 - pm) * mp.log((1 - pm) / (1 - qm))
            else:
                ref = mp.log(pm**tm * qm ** (1 - tm) + (1 - pm) ** tm * (1 - qm) ** (1 - tm)) / (tm - 1)
            if tau == 0.0:
                assert value == 0.0  # D_0 = -log Q(P > 0) = 0
                continue
            worst = max(worst, abs(float(value) - float(ref)) / float(ref))
    assert worst < 1e-12


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: GaussianRDP(sigma=0), "sigma"),
        (lambda: GaussianRDP(sigma=-1.0), "sigma"),
        (lambda: GaussianRDP(sigma=float("nan")), "sigma"),
        (lambda: SubsampledGaussianRDP(0.0, 1.0), "sample_rate"),
        (lambda: SubsampledGaussianRDP(1.5, 1.0), "sample_rate"),
        (lambda: SubsampledGaussianRDP(0.1, 0.0), "sigma"),
        (lambda: SubsampledGaussianRDP(0.1, 1.0, steps=0), "steps"),
        (lambda: RandomizedResponseRDP(0.0), "epsilon"),
        (lambda: LaplaceRDP(-1.0), "scale"),
        (lambda: TabulatedRDP([1.5, 2, 3], [0.2, 0.1, 0.3]), "non-decreasing"),
        (lambda: TabulatedRDP([2, 1.5], [0.1, 0.2]), "strictly increasing"),
        (lambda: TabulatedRDP([0.3, 2], [0.1, 0.2]), "orders"),
        (lambda: TabulatedRDP([1.5, 2], [0.1]), "equal length"),
        (lambda: TabulatedRDP([1.5, 2], [-0.1, 0.2]), "non-negative"),
        (lambda: GaussianRDP(1.0)(0.2), "orders"),
    ],
)
def test_bad_input(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_types():
    with pytest.raises(TypeError, match="sigma"):
        GaussianRDP(sigma="1")
    with pytest.raises(TypeError, match="profiles"):
        ComposedRDP([1.0])
