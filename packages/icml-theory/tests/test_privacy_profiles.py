"""RDP profiles: closed forms, numerical integration, both directions, sound interpolation, bad input."""

import math

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
)

ORDERS = np.array([0.5, 0.6, 0.8, 0.99, 1.0, 1.01, 1.5, 2.0, 3.0, 7.5, 16.0, 40.0])


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
    p, q = stats.norm(0, 1.5).logpdf, stats.norm(2, 1.5).logpdf
    for tau in (0.5, 0.8, 1.0, 2.5):
        assert one(tau) == pytest.approx(renyi_by_quad(p, q, tau), rel=1e-7)


@pytest.mark.parametrize("tau", [0.5, 0.75, 0.9, 1.0, 1.2, 2.0, 5.0])
def test_laplace_matches_quadrature_both_directions(tau):
    prof = LaplaceRDP(scale=0.8, sensitivity=1.0)
    p, q = stats.laplace(0, 0.8).logpdf, stats.laplace(1, 0.8).logpdf
    assert prof(tau) == pytest.approx(renyi_by_quad(p, q, tau), rel=1e-7)
    assert prof(tau) == pytest.approx(renyi_by_quad(q, p, tau), rel=1e-7)


def test_randomized_response_is_bernoulli_divergence():
    eps0 = 1.3
    p = math.exp(eps0) / (1 + math.exp(eps0))
    rr = RandomizedResponseRDP(eps0, steps=2)
    for tau in (0.5, 0.9, 1.0, 3.0, 200.0):
        s = p**tau * (1 - p) ** (1 - tau) + (1 - p) ** tau * p ** (1 - tau)
        expected = (2 * p - 1) * math.log(p / (1 - p)) if tau == 1 else math.log(s) / (tau - 1)
        assert rr(tau) == pytest.approx(2 * expected, rel=1e-12)
    assert rr(1e4) <= 2 * eps0  # bounded by the max divergence


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
    p0 = stats.norm(0, sigma).logpdf

    def p1(x):
        return np.logaddexp(math.log1p(-q) + p0(x), math.log(q) + stats.norm(1, sigma).logpdf(x))

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


def replace_by_quad(q, sigma, tau):
    def pair(shift):
        def logpdf(x):
            return np.logaddexp(
                math.log1p(-q) + stats.norm(0, sigma).logpdf(x),
                math.log(q) + stats.norm(shift, sigma).logpdf(x),
            )

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
