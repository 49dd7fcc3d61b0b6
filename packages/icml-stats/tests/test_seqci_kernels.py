"""Kernels, closed-form LOO kernel ridge regression and (conditional) centered kernels against brute force."""

import numpy as np
import pytest

from icml_stats.seqci import (
    RBF,
    Affine,
    ConditionalMeanEmbedding,
    GaussianConditional,
    Linear,
    RBFLinear,
    krr_loo_loss,
    loo_losses,
    median_bandwidth,
    select_ridge,
)
from icml_stats.seqci.kernels import choose_kernel_and_ridge


def brute_force_loo(K_x, K_y, ridge):
    """Refit without each point (same absolute ridge) and measure its squared error in feature space."""
    n = K_x.shape[0]
    errors = []
    for i in range(n):
        keep = np.arange(n) != i
        beta = np.linalg.solve(K_x[np.ix_(keep, keep)] + ridge * np.eye(n - 1), K_x[keep, i])
        errors.append(K_y[i, i] - 2 * beta @ K_y[keep, i] + beta @ K_y[np.ix_(keep, keep)] @ beta)
    return float(np.mean(errors))


@pytest.mark.parametrize("ridge", [1e-3, 0.1, 2.0])
def test_closed_form_loo_equals_brute_force(ridge):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((30, 3)), rng.standard_normal((30, 2))
    K_x = RBF(1.2)(x, x)
    for K_y in (RBF(0.7)(y, y), y @ y.T):  # a conditional mean embedding, and plain vector regression
        expected = brute_force_loo(K_x, K_y, ridge)
        assert krr_loo_loss(K_x, K_y, ridge) == pytest.approx(expected, rel=1e-9)
        assert loo_losses(K_x, K_y, [ridge])[0] == pytest.approx(expected, rel=1e-7)


def test_select_ridge_picks_the_smallest_loo_loss():
    rng = np.random.default_rng(1)
    c = rng.uniform(-2, 2, (60, 1))
    y = np.sin(2 * c) + 0.3 * rng.standard_normal((60, 1))
    K_x, K_y = RBF(0.5)(c, c), y @ y.T
    grid = (1e-5, 1e-3, 1e-1, 10.0)
    losses = [brute_force_loo(K_x, K_y, 60 * lam) for lam in grid]
    assert select_ridge(K_x, K_y, grid) == grid[int(np.argmin(losses))]
    assert np.argmin(losses) not in (0, len(grid) - 1)  # the noise level puts the optimum inside the grid


def test_centered_gram_with_linear_kernels_equals_explicit_residuals():
    rng = np.random.default_rng(2)
    c = rng.standard_normal((40, 3))
    a = c @ rng.standard_normal((3, 2)) + rng.standard_normal((40, 2))
    cme = ConditionalMeanEmbedding(Linear(), Linear(), ridge=0.05).fit(c, a)
    coef = np.linalg.solve(c.T @ c + 40 * 0.05 * np.eye(3), c.T @ a)  # ridge regression in feature space
    c1, a1 = rng.standard_normal((7, 3)), rng.standard_normal((7, 2))
    c2, a2 = rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    r1, r2 = a1 - c1 @ coef, a2 - c2 @ coef
    np.testing.assert_allclose(cme.centered_gram(c1, a1, c2, a2), r1 @ r2.T, atol=1e-10)
    np.testing.assert_allclose(cme.centered_gram(c1, a1), r1 @ r1.T, atol=1e-10)
    np.testing.assert_allclose(cme.predict_mean(c1), c1 @ coef, atol=1e-10)


def test_rbf_centered_gram_is_a_gram_matrix():
    rng = np.random.default_rng(3)
    c = rng.standard_normal((50, 2))
    a = np.cos(c[:, :1]) + 0.2 * rng.standard_normal((50, 1))
    cme = ConditionalMeanEmbedding(random_state=0).fit(c, a)
    K = cme.centered_gram(c[:20], a[:20])
    np.testing.assert_allclose(K, K.T, atol=1e-12)
    assert np.linalg.eigvalsh(K).min() > -1e-10


def test_gaussian_embedding_matches_monte_carlo():
    rng = np.random.default_rng(4)
    v = np.array([0.5, -1.0])
    cond = GaussianConditional(lambda c: c @ v, 0.7)
    c, a, k = rng.standard_normal((3, 2)), rng.standard_normal((3, 1)), RBF(0.9)
    exact = cond.centered_gram(k, c, a, c, a)
    draws = 200_000
    s1 = (c @ v)[:, None] + 0.7 * rng.standard_normal((3, draws))  # A | c_u
    s2 = (c @ v)[:, None] + 0.7 * rng.standard_normal((3, draws))  # an independent copy

    def kern(x, y):
        return np.exp(-((x - y) ** 2) / (2 * 0.81))

    mc = np.array(
        [
            [
                kern(a[u, 0], a[w, 0])
                - kern(a[u, 0], s1[w]).mean()
                - kern(s1[u], a[w, 0]).mean()
                + kern(s1[u], s2[w]).mean()
                for w in range(3)
            ]
            for u in range(3)
        ]
    )
    np.testing.assert_allclose(exact, mc, atol=0.01)


def test_estimated_gaussian_conditional_against_brute_force_and_planted_truth():
    rng = np.random.default_rng(4)
    c = rng.standard_normal((40, 3))
    y = c @ np.array([[1.0], [-0.5], [0.2]]) + 0.3 * rng.standard_normal((40, 1))
    kernel, lam = RBFLinear(1.7), 0.01
    g = GaussianConditional.estimate(c, y, kernel, lam)
    loo = []  # refit without each point, same absolute ridge n * lam
    for i in range(40):
        keep = np.arange(40) != i
        K = kernel(c[keep], c[keep])
        dual = np.linalg.solve(K + 40 * lam * np.eye(39), y[keep])
        loo.append(y[i, 0] - (kernel(c[[i]], c[keep]) @ dual)[0, 0])
    assert g.std == pytest.approx(np.sqrt(np.mean(np.square(loo))), rel=1e-9)
    dual = np.linalg.solve(kernel(c, c) + 40 * lam * np.eye(40), y)
    np.testing.assert_allclose(g.mean(c[:5]), kernel(c[:5], c) @ dual, rtol=1e-9)
    # planted: a linear mean and noise sd 0.3, recovered from 400 points with the default kernel and ridge
    c = rng.standard_normal((400, 3))
    m = c @ np.array([1.0, -0.5, 0.2])
    g = GaussianConditional.estimate(c, m[:, None] + 0.3 * rng.standard_normal((400, 1)), random_state=0)
    assert np.sqrt(np.mean((g.mean(c)[:, 0] - m) ** 2)) < 0.06 and g.std == pytest.approx(0.3, abs=0.03)
    assert g.explained_ == pytest.approx(m.var() / (m.var() + 0.09), abs=0.02)


def test_affine_kernel_regression_is_ridge_regression_on_one_and_x():
    rng = np.random.default_rng(5)
    x, y, h, r = rng.standard_normal((30, 2)), rng.standard_normal((30, 1)), 1.3, 0.7
    K = Affine(h)(x, x)
    kernel_fit = K @ np.linalg.solve(K + r * np.eye(30), y)
    phi = np.hstack([np.ones((30, 1)), x / h])
    theta = np.linalg.solve(phi.T @ phi + r * np.eye(3), phi.T @ y)
    np.testing.assert_allclose(kernel_fit, phi @ theta, rtol=1e-9)
    np.testing.assert_allclose(RBFLinear(h)(x, x), RBF(h)(x, x) + x @ x.T / h**2)


def test_kernel_choice_follows_the_planted_mean():
    rng = np.random.default_rng(6)
    c = rng.standard_normal((300, 4))
    kernels = (Affine(2.0), RBFLinear(2.0), RBF(2.0))
    linear = c @ np.array([[2.0], [1.0], [0.0], [-1.0]]) + rng.standard_normal((300, 1))
    assert choose_kernel_and_ridge(kernels, Linear(), c, linear)[0] is kernels[0]
    wiggly = np.sin(3 * c[:, :1]) + 0.1 * rng.standard_normal((300, 1))
    assert choose_kernel_and_ridge(kernels, Linear(), c, wiggly)[0] is not kernels[0]


def test_median_bandwidth():
    assert median_bandwidth(np.array([0.0, 1.0, 3.0])) == pytest.approx(2.0)  # distances 1, 2, 3
    assert median_bandwidth(np.zeros((5, 2))) == 1.0  # constant data falls back to 1


@pytest.mark.parametrize("scale", [1e-160, 1e-200, 1e-300, 1e200])
def test_median_bandwidth_scales_with_tiny_and_huge_data(scale):
    # data below ~1e-154 had squared distances that underflowed to 0: the bandwidth fell back to 1.0 (the
    # constant-data value; 1e+200 times too large at 1e-200, 2.4e-5 off relative at 1e-160), so SKCI on
    # gaussian_ci(300, d=2, effect=0.5) times 1e-200 had all-ones kernels and p-value 1.0 (0.016 unscaled)
    x = np.random.default_rng(0).standard_normal((50, 2))
    # measured: the ratio matches the unscaled bandwidth to 2.2e-16 relative at every scale here
    assert median_bandwidth(x * scale) / scale == pytest.approx(median_bandwidth(x), rel=1e-13)


@pytest.mark.parametrize("scale", [1e-200, 1e-160, 1e200])
def test_mean_regression_choices_are_scale_free(scale):
    # a Linear target Gram underflowed to 0 below ~1e-154 (all LOO losses 0: the first kernel and ridge,
    # Affine with lam 1e-5 instead of 1e-3 for a), the LOO variance to 0 (std 0, explained 0) and the Gram
    # overflowed at 1e200 ("K_y must be finite"). Measured now: the same choices, std and explained
    # within 7.5e-13 relative of the unscaled ones at these scales (margin 130x).
    from icml_stats.seqci import gaussian_ci
    from icml_stats.seqci.skci import mean_kernels

    d = gaussian_ci(300, d=2, effect=0.5)
    h, hs = median_bandwidth(d.c), median_bandwidth(d.c * scale)
    for y in (d.a, d.b):
        kernel, lam = choose_kernel_and_ridge(mean_kernels(h), Linear(), d.c, y, rng=np.random.default_rng(0))
        k_s, lam_s = choose_kernel_and_ridge(
            mean_kernels(hs), Linear(), d.c * scale, y * scale, rng=np.random.default_rng(0)
        )
        assert (type(k_s), lam_s) == (type(kernel), lam)
        fit = GaussianConditional.estimate(d.c, y, random_state=0)
        fit_s = GaussianConditional.estimate(d.c * scale, y * scale, random_state=0)
        assert fit_s.ridge_ == fit.ridge_
        assert fit_s.std / scale == pytest.approx(fit.std, rel=1e-10)
        assert fit_s.explained_ == pytest.approx(fit.explained_, rel=1e-10)


@pytest.mark.parametrize("offset", [1e6, 1e8])
def test_rbf_and_median_bandwidth_do_not_lose_digits_to_a_common_offset(offset):
    # |x|^2 + |y|^2 - 2 x.y of rows near 1e6 cancelled to 1.8e-4 relative error (at 1e8: K off by 0.94)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 1)) + offset
    y = x[:50] + 0.5 * rng.standard_normal((50, 1))
    d2 = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)  # direct differences: the float64 reference
    np.testing.assert_allclose(RBF(1.0)(x, y), np.exp(-d2 / 2), rtol=1e-13, atol=0)
    dxx = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)[np.triu_indices(200, 1)]
    assert median_bandwidth(x) == pytest.approx(np.sqrt(np.median(dxx)), rel=1e-14)


def test_bad_inputs():
    K = np.eye(3)
    with pytest.raises(ValueError, match="ridge"):
        krr_loo_loss(K, K, 0.0)
    with pytest.raises(ValueError, match="K_x"):
        krr_loo_loss(np.ones((3, 2)), K, 1.0)
    with pytest.raises(ValueError, match="K_y"):
        krr_loo_loss(K, np.eye(4), 1.0)
    with pytest.raises(ValueError, match="c must not contain NaN"):
        ConditionalMeanEmbedding().fit(np.array([[np.nan], [1.0]]), np.ones(2))
    with pytest.raises(ValueError, match="y must have one row per sample"):
        ConditionalMeanEmbedding().fit(np.ones((4, 1)), np.ones(3))
    with pytest.raises(ValueError, match="bandwidth"):
        RBF(-1.0)
    with pytest.raises(ValueError, match="std"):
        GaussianConditional(lambda c: c, -1.0)
    with pytest.raises(TypeError, match="mean"):
        GaussianConditional(3.0, 1.0)
