"""Conversions: optimal (eps, delta) against exact Gaussian, dominance over Balle/CKS and Mironov, formulas."""

import math

import numpy as np
import pytest

from icml_theory.privacy import (
    DEFAULT_ORDERS,
    GaussianRDP,
    OptimalConverter,
    SubsampledGaussianRDP,
    cks_delta,
    cks_epsilon,
    epsilon_delta_tradeoff,
    max_advantage,
    mironov_delta,
    mironov_epsilon,
    optimal_delta,
    optimal_epsilon,
    optimal_tradeoff,
    tpr_at_fpr,
)
from icml_theory.privacy.compare import classical_tradeoff, gaussian_epsilon

DELTAS = [1e-1, 1e-3, 1e-5, 1e-10]
ALPHAS = np.array([0.001, 0.01, 0.05, 0.1, 0.3, 0.5])
ORDERS = np.concatenate(
    [1 + np.arange(1, 100) / 10, np.arange(11, 64), [128, 256, 512, 1024]]
)  # dp_accounting's


def test_classical_formulas_by_hand():
    orders, rdp = np.array([2.0, 4.0, 0.7]), np.array([0.5, 1.0, 0.1])
    delta = 1e-5
    mir = min(r + math.log(1 / delta) / (t - 1) for t, r in [(2.0, 0.5), (4.0, 1.0)])
    assert mironov_epsilon(orders, rdp, delta)[0] == pytest.approx(mir, rel=1e-15)
    cks = min(
        r + math.log1p(-1 / t) - (math.log(delta) + math.log(t)) / (t - 1)
        for t, r in [(2.0, 0.5), (4.0, 1.0)]
    )
    assert cks_epsilon(orders, rdp, delta)[0] == pytest.approx(cks, rel=1e-15)
    eps = 3.0
    d_cks = min(
        math.exp((t - 1) * (r - eps + math.log1p(-1 / t)) - math.log(t)) for t, r in [(2.0, 0.5), (4.0, 1.0)]
    )
    assert cks_delta(orders, rdp, eps)[0] == pytest.approx(d_cks, rel=1e-13)
    assert mironov_delta(orders, rdp, eps)[0] == pytest.approx(math.exp(3 * (1.0 - eps)), rel=1e-13)
    # the KL shortcut: tiny RDP and a large delta give eps = 0
    assert cks_epsilon([2.0], [1e-6], 0.1)[0] == 0.0


@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0])
def test_dominance_and_soundness_gaussian(mu):
    """Acceptance: exact <= optimal <= CKS <= Mironov in eps(delta); optimal beta >= CKS-implied beta."""
    prof = GaussianRDP(sigma=1 / mu)
    conv = OptimalConverter(prof)
    opt = conv.epsilon(DELTAS)
    rho = prof(ORDERS)
    for d, e in zip(DELTAS, opt, strict=True):
        cks = cks_epsilon(ORDERS, rho, d)[0]
        mir = mironov_epsilon(ORDERS, rho, d)[0]
        assert gaussian_epsilon(mu, d) - 1e-9 <= e <= cks + 1e-9
        assert cks <= mir
    beta = conv.curve(ALPHAS).beta
    assert np.all(beta >= classical_tradeoff(prof, ALPHAS, "cks") - 1e-9)
    assert np.all(beta > classical_tradeoff(prof, ALPHAS, "mironov"))


def test_dominance_dp_sgd_and_inverse_consistency():
    prof = SubsampledGaussianRDP(0.01, 1.0, 1000)
    conv = OptimalConverter(prof)
    eps = conv.epsilon(DELTAS)
    rho = prof(ORDERS)  # evaluated once, not once per delta: the same values
    for d, e in zip(DELTAS, eps, strict=True):
        assert e <= cks_epsilon(ORDERS, rho, d)[0] + 1e-9
    back = conv.delta(eps)  # delta(eps(delta)) = delta: 1 - f is carried as -expm1(log beta)
    np.testing.assert_allclose(back, DELTAS, rtol=1e-9)
    # far below 1e-16 too (beta within 1e-20 of 1); a delta under the alpha grid's floor gets the classical
    # conversions' value instead of inf (issue 22, item 4)
    tiny = conv.epsilon([1e-20, 1e-30, 1e-60])
    assert tiny[0] > eps[-1] and np.isfinite(tiny[1]) and tiny[1] > tiny[0]
    own = DEFAULT_ORDERS[DEFAULT_ORDERS > 1]  # the converter's orders
    rho_own = prof(own)
    classical = min(cks_epsilon(own, rho_own, 1e-60)[0], mironov_epsilon(own, rho_own, 1e-60)[0])
    assert tiny[2] <= classical < np.inf  # the classical value, refined between the grid orders
    np.testing.assert_allclose(conv.delta(tiny[:2]), [1e-20, 1e-30], rtol=1e-9)


def test_classical_fallback_refines_the_order_between_grid_orders():
    """Where the classical conversions beat the optimal search (its optimal alpha below 1e-40: large epsilon),
    epsilon and delta took the CKS bound at the grid orders only (ratio 1.09 apart), looser than dp_accounting's
    RdpAccountant on its own orders: 100 Gaussian steps at sigma = 1 (rho = 50 tau), delta = 1e-5 gave 96.4195
    against RdpAccountant's 96.1163. The order is now refined between the grid orders."""
    conv = OptimalConverter(GaussianRDP(1.0, steps=100))
    # mpmath (40 digits): min over real tau > 1 of the CKS epsilon, 96.035270675173148 at tau = 1.4717; measured
    # 96.03527067517332 (1.8e-15 relative above; the old code 96.4195, 4.0e-3 above)
    ref_eps = 96.035270675173148
    eps = conv.epsilon([1e-5])[0]
    assert ref_eps * (1 - 1e-14) <= eps <= ref_eps * (1 + 1e-13)
    assert conv.delta([eps])[0] <= 1e-5 * (1 + 1e-12)  # measured 9.99999999999996e-06
    # mpmath: min over real tau of the CKS delta at eps = 200, 2.5739050794358972e-50 at tau = 2.5051; measured
    # 3.6e-10 relative above (7 rounds of multi-section), the old code 2.930e-50 (13.8 % above); the exact
    # Gaussian delta (mu = 10) is 1.46e-51, below both
    ref_delta = 2.5739050794358972e-50
    assert ref_delta * (1 - 1e-14) <= conv.delta([200.0])[0] <= ref_delta * (1 + 1e-8)


def test_optimal_delta_is_sound_for_gaussian():
    from scipy.stats import norm

    mu = 1.0
    for eps in (0.0, 0.5, 2.0, 5.0):
        exact = norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)
        got = optimal_delta(GaussianRDP(1.0), eps)
        assert exact - 1e-12 <= got <= cks_delta(ORDERS, GaussianRDP(1.0)(ORDERS), eps)[0] + 1e-12


def test_optimal_delta_is_sound_for_tiny_mu():
    # true delta(0) = TV = 2 Phi(mu/2) - 1 = erf(mu / (2 sqrt 2)); was 1.5e-9 (< 4.0e-9) at sigma = 1e8 from
    # the optimal rule and 0.0 at sigma = 1e9 from the classical CKS bound, both below the truth
    for sigma in (1e8, 1e9):
        prof = GaussianRDP(sigma=sigma)
        exact = math.erf(prof.mu / (2 * math.sqrt(2)))
        assert optimal_delta(prof, 0.0) >= exact
        assert max_advantage(prof) >= exact


def test_cks_delta_at_tiny_rdp_matches_mpmath():
    # the KL term sqrt(1 - e^-rho): log1p(-exp(-rho)) cancelled (4e-4 off at 1e-15, delta = 0 at 1e-17)
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40
    for r in (1e-10, 1e-13, 1e-15, 1e-17):
        got, order = cks_delta([1.5], [r], 0.0)
        assert order == 1.5
        assert got == pytest.approx(float(mp.sqrt(-mp.expm1(-mp.mpf(r)))), rel=2e-15, abs=0)


def test_tpr_at_fpr_keeps_full_precision_at_tiny_fpr():
    # 1 - beta lost the TPR's digits for beta near 1 (3.6e-5 relative at fpr = 1e-16); -expm1(log beta) keeps
    # them, and the TPR bound stays above the exact Gaussian TPR 1 - G_mu(fpr) (mu = 1)
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 50
    prof, fprs = GaussianRDP(sigma=1.0), np.array([1e-9, 1e-12, 1e-14, 1e-16])
    tpr = tpr_at_fpr(prof, fprs)
    np.testing.assert_allclose(tpr, -np.expm1(optimal_tradeoff(prof, fprs).log_beta), rtol=1e-15)
    exact = [float(1 - mp.ncdf(mp.sqrt(2) * mp.erfinv(1 - 2 * mp.mpf(a)) - 1)) for a in fprs]
    assert np.all(tpr >= exact)


def test_attack_views():
    prof = GaussianRDP(1.0)
    tpr = tpr_at_fpr(prof, [0.01, 0.1])
    assert np.all(tpr >= 0.01) and tpr[1] > tpr[0]
    adv = max_advantage(prof)
    exact_adv = 2 * __import__("scipy.stats").stats.norm.cdf(0.5) - 1  # TV distance of N(0,1), N(1,1)
    assert exact_adv <= adv <= 1


def test_epsilon_delta_tradeoff():
    f = epsilon_delta_tradeoff([0.0, 0.1, 0.5, 1.0], 1.0, 0.01)
    assert f[0] == pytest.approx(0.99) and f[-1] == 0.0
    assert f[1] == pytest.approx(max(0.99 - math.e * 0.1, math.exp(-1) * 0.89))


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: optimal_epsilon(GaussianRDP(1.0), 0.0), ValueError, "delta"),
        (lambda: optimal_epsilon(GaussianRDP(1.0), 1.0), ValueError, "delta"),
        (lambda: optimal_epsilon(GaussianRDP(1.0), "x"), TypeError, "delta"),
        (lambda: optimal_delta(GaussianRDP(1.0), -1.0), ValueError, "epsilon"),
        (lambda: cks_epsilon([2.0], [0.1], 1.5), ValueError, "delta"),
        (lambda: mironov_epsilon([2.0, 3.0], [0.1], 1e-5), ValueError, "equal length"),
        (lambda: mironov_epsilon([2.0], [-0.1], 1e-5), ValueError, "rdp"),
        (lambda: epsilon_delta_tradeoff([0.1], 1.0, 2.0), ValueError, "delta"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()
