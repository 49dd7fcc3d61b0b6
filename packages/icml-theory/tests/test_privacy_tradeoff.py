"""Single-order and optimal trade-offs: brute force, soundness vs G_mu, tightness witness, structure."""

import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_theory.privacy import (
    GaussianRDP,
    RandomizedResponseRDP,
    SubsampledGaussianRDP,
    bernoulli_renyi,
    gaussian_tradeoff,
    optimal_tradeoff,
    randomized_response_tradeoff,
    single_order_tradeoff,
)


def both_divergences(tau, alpha, beta):
    """max(D_tau(Bern(alpha) || Bern(1 - beta)), D_tau(Bern(1 - beta) || Bern(alpha)))."""
    return np.maximum(bernoulli_renyi(tau, alpha, 1 - beta), bernoulli_renyi(tau, 1 - beta, alpha))


@pytest.mark.parametrize(
    "tau, rho", [(0.5, 0.3), (0.8, 0.05), (1.0, 0.2), (2.0, 0.5), (10.0, 2.0), (300.0, 4.0)]
)
def test_single_order_matches_brute_force(tau, rho):
    alphas = np.array([1e-3, 0.05, 0.2, 0.5, 0.8])
    got = single_order_tradeoff(alphas, tau, rho)
    for a, f in zip(alphas, got, strict=True):
        betas = np.linspace(0, 1 - a, 200001)[1:]
        feasible = betas[both_divergences(tau, a, betas) <= rho]
        assert f <= feasible.min() * (1 + 1e-12)  # never above the true minimum (sound)
        assert f >= feasible.min() - (1 - a) / 200000  # and within the brute-force grid step


def test_single_order_is_stable_at_the_extremes():
    alphas = np.geomspace(1e-12, 0.5, 50)
    # tau -> 1 from both sides approaches the KL region continuously
    kl = single_order_tradeoff(alphas, 1.0, 0.5)
    for eps in (1e-6, 1e-10):
        np.testing.assert_allclose(single_order_tradeoff(alphas, 1 + eps, 0.5), kl, rtol=1e-4)
        np.testing.assert_allclose(single_order_tradeoff(alphas, 1 - eps, 0.5), kl, rtol=1e-4)
    big = single_order_tradeoff(alphas, 5000.0, 1.0)  # large orders: finite, in [0, 1 - alpha]
    assert np.all(np.isfinite(big)) and np.all(big <= 1 - alphas) and np.all(big > 0)
    tiny = single_order_tradeoff([1e-12], 2.0, 0.1)[0]
    assert 0.9 < tiny < 1 - 1e-12


def test_gaussian_tradeoff_at_tiny_alpha_matches_mpmath():
    # Phi(-Phi^{-1}(alpha) - mu): Phi^{-1}(1 - alpha) rounded 1 - alpha (off by 14x at mu = 10, alpha = 1e-20)
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 50
    alphas = np.array([1e-12, 1e-16, 1e-17, 1e-20])
    for mu in [6.0, 10.0]:
        ref = [float(mp.ncdf(mp.sqrt(2) * mp.erfinv(1 - 2 * mp.mpf(a)) - mu)) for a in alphas]
        np.testing.assert_allclose(gaussian_tradeoff(alphas, mu), ref, rtol=1e-14)


def test_single_order_at_tiny_rho_matches_mpmath_and_stays_below_it():
    # rho ~ (1 - alpha - f)^2: the bound was 0.54 (relative) too close to 1 - alpha at rho = 1e-16, i.e.
    # above the true single-order trade-off (unsound), when the divergences came from rounded logs
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 60
    a, t = mp.mpf(0.5), mp.mpf(2.0)

    def renyi(p, q):
        return mp.log(p**t * q ** (1 - t) + (1 - p) ** t * (1 - q) ** (1 - t)) / (t - 1)

    for rho in [1e-12, 1e-14, 1e-16]:
        lo, hi = mp.mpf("1e-30"), 1 - a  # infeasible, feasible
        for _ in range(200):
            mid = (lo + hi) / 2
            if max(renyi(a, 1 - mid), renyi(1 - mid, a)) > rho:
                lo = mid
            else:
                hi = mid
        got = float(single_order_tradeoff([0.5], 2.0, rho)[0])
        assert got <= float(hi)
        assert 0.5 - got == pytest.approx(float(0.5 - hi), rel=1e-8, abs=0)


def test_edges():
    assert single_order_tradeoff([0.0, 1.0], 2.0, 0.3).tolist() == [1.0, 0.0]
    assert single_order_tradeoff([0.0], 0.5, 0.3)[0] == pytest.approx(math.exp(-0.3))
    # below order 1, beta = 0 may be feasible for large alpha
    assert single_order_tradeoff([0.9], 0.5, 5.0)[0] == 0.0


@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0])
def test_soundness_against_exact_gaussian(mu):
    """Acceptance: never above G_mu (1e-9) on 200 log-spaced alphas."""
    alphas = np.geomspace(1e-12, 1 - 1e-6, 200)
    curve = optimal_tradeoff(GaussianRDP(sigma=1 / mu), alphas)
    excess = curve.beta - gaussian_tradeoff(alphas, mu)
    assert excess.max() <= 1e-9
    assert np.all(curve.order >= 0.5)


@pytest.mark.parametrize(
    "profile", [GaussianRDP(1.0), SubsampledGaussianRDP(0.01, 1.0, 1000), RandomizedResponseRDP(1.0)]
)
def test_tightness_witness(profile):
    """Acceptance: (Bern(alpha), Bern(1 - f(alpha))) meets every order's constraint on a finer grid, and
    shrinking f by 1e-6 breaks at least one (the maximizing order)."""
    alphas = np.geomspace(1e-8, 0.5, 25)
    curve = optimal_tradeoff(profile, alphas)
    fine = np.concatenate([np.linspace(0.5, 0.99, 50), np.geomspace(1.0, 1e4, 2000)])
    rho = profile(fine)
    for a, f, tau in zip(alphas, curve.beta, curve.order, strict=True):
        d = both_divergences(fine, a, f)
        assert np.all(d <= rho * (1 + 1e-7) + 1e-12)
        shrunk = f * (1 - 1e-6)
        assert both_divergences(tau, a, shrunk) > profile(tau)


def test_randomized_response_touches_its_kink():
    eps0 = 1.0
    kink = 1 / (1 + math.e)
    alphas = np.array([1e-4, 0.05, 0.1, kink, 0.4, 0.6])
    curve = optimal_tradeoff(RandomizedResponseRDP(eps0), alphas)
    exact = randomized_response_tradeoff(alphas, eps0)
    assert curve.beta[3] == pytest.approx(kink, abs=1e-12)
    assert np.all(curve.beta <= exact + 1e-12)
    assert np.all((exact - curve.beta)[[0, 1, 2]] > 1e-7)  # strictly inside away from the kink


def test_grid_only_is_valid_and_refinement_tightens():
    alphas = np.geomspace(1e-6, 0.5, 30)
    prof = GaussianRDP(1.0)
    coarse = optimal_tradeoff(prof, alphas, orders=[0.5, 1.0, 2.0, 8.0, 32.0], refine=False)
    refined = optimal_tradeoff(prof, alphas, orders=[0.5, 1.0, 2.0, 8.0, 32.0])
    assert np.all(refined.beta >= coarse.beta) and np.any(refined.beta > coarse.beta + 1e-4)
    assert np.all(refined.beta <= gaussian_tradeoff(alphas, 1.0) + 1e-12)


mus = st.floats(0.2, 3.0)


@settings(max_examples=15, deadline=None)
@given(mu=mus, scale=st.floats(1.01, 3.0))
def test_structure_properties(mu, scale):
    """Acceptance (hypothesis): convex, non-increasing, <= 1 - alpha, symmetric, monotone in the profile."""
    alphas = np.linspace(0.0, 1.0, 41)
    prof = GaussianRDP(sigma=1 / mu)
    f = optimal_tradeoff(prof, alphas).beta
    assert np.all(f <= 1 - alphas + 1e-15)
    assert np.all(np.diff(f) <= 1e-12)
    second = f[:-2] - 2 * f[1:-1] + f[2:]
    assert np.all(second >= -1e-9)
    # symmetry: f(f(alpha)) = alpha where f is strictly decreasing
    ff = optimal_tradeoff(prof, f[1:-1]).beta
    inner = (f[1:-1] > 1e-6) & (alphas[1:-1] > 1e-6)
    np.testing.assert_allclose(ff[inner], alphas[1:-1][inner], atol=1e-7)
    # a larger profile (more leakage) gives a lower curve
    worse = optimal_tradeoff(GaussianRDP(sigma=1 / (mu * scale)), alphas).beta
    assert np.all(worse <= f + 1e-12)


@settings(max_examples=5, deadline=None)
@given(q=st.floats(0.001, 1.0), sigma=st.floats(0.6, 3.0), steps=st.integers(1, 500))
def test_subsampled_structure(q, sigma, steps):
    """The same five properties for DP-SGD profiles."""
    prof = SubsampledGaussianRDP(q, sigma, steps)
    alphas = np.linspace(0.0, 1.0, 41)
    f = optimal_tradeoff(prof, alphas).beta
    assert np.all(f <= 1 - alphas + 1e-15) and np.all(np.diff(f) <= 1e-12)
    assert np.all(f[:-2] - 2 * f[1:-1] + f[2:] >= -1e-9)  # convex
    ff = optimal_tradeoff(prof, f[1:-1]).beta
    inner = (f[1:-1] > 1e-6) & (alphas[1:-1] > 1e-6)
    np.testing.assert_allclose(ff[inner], alphas[1:-1][inner], atol=1e-7)  # symmetric
    small = np.geomspace(1e-6, 0.9, 25)
    more = optimal_tradeoff(SubsampledGaussianRDP(q, sigma, steps + 10), small).beta
    assert np.all(more <= optimal_tradeoff(prof, small).beta + 1e-12)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: single_order_tradeoff([0.5], 0.2, 1.0), ValueError, "order"),
        (lambda: single_order_tradeoff([1.5], 2.0, 1.0), ValueError, "alphas"),
        (lambda: single_order_tradeoff([0.5], 2.0, -1.0), ValueError, "rho"),
        (lambda: optimal_tradeoff("gauss", [0.5]), TypeError, "profile"),
        (lambda: optimal_tradeoff(GaussianRDP(1.0), [float("nan")]), ValueError, "alphas"),
        (lambda: optimal_tradeoff(GaussianRDP(1.0), ["a"]), TypeError, "alphas"),
        (lambda: gaussian_tradeoff([0.1], -1.0), ValueError, "mu"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_fused_violation_is_bit_identical_to_the_reference():
    # _Violation (the bisection's hoisted form, 2026-12 speed-up) must give the same bits as _violation,
    # including the KL order tau = 1, tiny alphas, u on both sides of -log 2, and beta = 1e-300
    from icml_theory.privacy.tradeoff import LOG_BETA_MIN, _Violation, _violation

    rng = np.random.default_rng(0)
    alpha = np.concatenate([[1e-40, 1e-12, 0.3, 0.5], rng.uniform(1e-6, 0.9, 60)])[:, None]
    tau = np.array([0.5, 0.8, 1.0, 1.01, 2.0, 37.5, 1e4])[None, :]
    a, t = np.broadcast_arrays(alpha, tau)
    rho = np.broadcast_to(rng.uniform(0.0, 5.0, t.shape[1])[None, :], t.shape)
    la, la1 = np.log(a), np.log1p(-a)
    fused = _Violation(a, la, la1, t, rho)
    with np.errstate(all="ignore"):
        for u in (np.full(a.shape, LOG_BETA_MIN), np.full(a.shape, -0.1), -rng.uniform(1e-9, 50, a.shape)):
            np.testing.assert_array_equal(fused(u), _violation(a, la, la1, u, t, rho))


@pytest.fixture(scope="module")
def pinned_accountant():
    """One accountant per ``(relation, sigma, q, steps)`` of the pinned values below: the settings repeat across
    deltas and the delta test, which only query it (no step), so its conversion is built once."""
    from icml_theory.privacy.accountant import OptimalRDPAccountant

    @functools.cache
    def make(relation, sigma, q, steps):
        return OptimalRDPAccountant(relation).step(noise_multiplier=sigma, sample_rate=q, num_steps=steps)

    return make


@pytest.mark.parametrize(
    "sigma, q, steps, relation, delta, expected",
    [
        # computed by the code before the speed-up (git HEAD of 2026-12-07, tradeoff.py without _Violation,
        # the early exit and the de-duplicated refinement orders): the speed-up left these bits unchanged
        (1.1, 0.01, 1000, "add-remove", 1e-5, 1.7115112484987458),
        (1.1, 0.01, 1000, "add-remove", 1e-9, 2.7470298136624525),
        (1.1, 0.125, 10, "add-remove", 1e-5, 3.36023478004655),
        (1.1, 0.01, 1000, "replace-one", 1e-5, 2.700288834348531),
        (5.0, 0.001, 1, "add-remove", 1e-5, 0.0008443519586394606),
    ],
)
def test_optimal_epsilon_pinned_to_the_values_before_the_speed_up(
    pinned_accountant, sigma, q, steps, relation, delta, expected
):
    acc = pinned_accountant(relation, sigma, q, steps)
    # bit-identical on the machine that computed them; 1e-12 relative leaves room for other CPUs' libm
    assert acc.get_epsilon(delta) == pytest.approx(expected, rel=1e-12, abs=0)


def test_optimal_delta_pinned_to_the_values_before_the_speed_up(pinned_accountant):
    acc = pinned_accountant("add-remove", 1.1, 0.01, 1000)
    # computed by the code before the speed-up (as above)
    assert acc.get_delta(1.0) == pytest.approx(0.002577396708002222, rel=1e-12, abs=0)
    assert acc.get_delta(0.1) == pytest.approx(0.13779699602250778, rel=1e-12, abs=0)


@pytest.mark.parametrize(
    "profile",
    [SubsampledGaussianRDP(0.01, 1.1, 1000), SubsampledGaussianRDP(0.3, 0.5, 5), GaussianRDP(0.3)],
)
def test_grid_search_with_early_exits_is_bit_identical_to_the_full_grid(profile):
    # _grid_best drops (order, alpha) pairs that are settled or beaten; argmax and value must equal the full grid's
    from icml_theory.privacy.tradeoff import DEFAULT_ORDERS, _grid_best, _single_log

    a = np.concatenate([[0.0, 1.0, 1e-300, 1e-40], np.geomspace(1e-30, 0.999, 40)])
    rho = profile(DEFAULT_ORDERS)
    full = _single_log(a[None, :], DEFAULT_ORDERS[:, None], rho[:, None])
    best, value = _grid_best(a, DEFAULT_ORDERS, rho)
    np.testing.assert_array_equal(best, np.argmax(full, axis=0))
    np.testing.assert_array_equal(value, full[best, np.arange(a.size)])
