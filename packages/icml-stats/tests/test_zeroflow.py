"""icml_stats.zeroflow against references: the Gaussian closed forms (derived independently here from the
joint law of (M, D)), full enumeration of sign flips, the size and power of the tests, the planted
sufficiency certificate and Markov blanket."""

import itertools

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import Ridge
from sklearn.metrics import roc_auc_score

from icml_stats.zeroflow import (
    GaussianConditionalSampler,
    MidpointVelocity,
    ZeroFlowMarkovBlanket,
    gaussian_midpoint_velocity,
    gaussian_zero_flow_divergence,
    midpoint_pairs,
    sign_flip_p_value,
    sufficiency_certificate,
    zero_flow_ci_test,
    zero_flow_divergence,
    zero_flow_two_sample_test,
)

MU0, MU1 = np.zeros(3), np.array([0.3, 0.0, -0.2])
S0 = np.eye(3)
S1 = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.0], [0.0, 0.0, 0.5]])
ALPHA = 0.05


def joint_reference(mu0, s0, mu1, s1):
    """E[D | M] from the joint Gaussian law of (M, D) = ((X0 + X1)/2, X1 - X0) by the conditioning formula."""
    d = len(mu0)
    t = np.block([[np.eye(d) / 2, np.eye(d) / 2], [-np.eye(d), np.eye(d)]])  # (M, D) = t (X0, X1)
    cov = t @ np.block([[s0, np.zeros((d, d))], [np.zeros((d, d)), s1]]) @ t.T
    mean = t @ np.concatenate([mu0, mu1])
    a = cov[d:, :d] @ np.linalg.inv(cov[:d, :d])
    b = mean[d:] - a @ mean[:d]
    zf = float(mean[d:] @ mean[d:] + np.trace(a @ cov[:d, :d] @ a.T))  # E||A M + b||^2 with E[AM + b] = E[D]
    return a, b, zf


def test_gaussian_closed_forms_equal_the_joint_law_reference():
    a, b = gaussian_midpoint_velocity(MU0, S0, MU1, S1)
    ref_a, ref_b, ref_zf = joint_reference(MU0, S0, MU1, S1)
    np.testing.assert_allclose(a, ref_a, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(b, ref_b, rtol=1e-12, atol=1e-12)
    assert gaussian_zero_flow_divergence(MU0, S0, MU1, S1) == pytest.approx(ref_zf, rel=1e-12)
    # 1-D: dmu^2 + (s1^2 - s0^2)^2 / (s0^2 + s1^2); and zero between equal laws only
    assert gaussian_zero_flow_divergence([0.5], [[1.0]], [2.0], [[4.0]]) == pytest.approx(1.5**2 + 9.0 / 5.0)
    assert gaussian_zero_flow_divergence(MU1, S1, MU1, S1) == 0.0
    assert gaussian_zero_flow_divergence(MU0, S0, MU0 + 1e-3, S0) > 0


@pytest.mark.parametrize("model", ["linear", "kernel", pytest.param("mlp", marks=pytest.mark.slow)])
def test_divergence_recovers_the_closed_form_at_n_20000(model):
    rng = np.random.default_rng(0)
    x0 = rng.multivariate_normal(MU0, S0, 20_000)
    x1 = rng.multivariate_normal(MU1, S1, 20_000)
    truth = gaussian_zero_flow_divergence(MU0, S0, MU1, S1)
    assert zero_flow_divergence(x0, x1, velocity=model, random_state=0) == pytest.approx(truth, rel=0.10)


def test_linear_velocity_coefficients_match_the_closed_form():
    rng = np.random.default_rng(1)
    m, d = midpoint_pairs(
        rng.multivariate_normal(MU0, S0, 50_000), rng.multivariate_normal(MU1, S1, 50_000), 1
    )
    fitted = MidpointVelocity("linear").fit(m, d)
    a, b = gaussian_midpoint_velocity(MU0, S0, MU1, S1)
    np.testing.assert_allclose(fitted.coef_, a, atol=0.03)
    np.testing.assert_allclose(fitted.intercept_, b, atol=0.02)
    assert fitted.predict(m[:4]).shape == (4, 3)


def test_a_refit_keeps_no_coefficients_of_an_earlier_linear_fit():
    # was: set_params(model="kernel").fit(...) kept coef_ [[0.995, 2.012]] of the earlier linear fit, while a
    # fresh "kernel" fit has no coef_ (scikit-learn resets such attributes: MLPRegressor's
    # validation_scores_, StandardScaler's scale_ become None on a refit that does not use them)
    rng = np.random.default_rng(0)
    m = rng.normal(size=(200, 2))
    d = m @ [[1.0], [2.0]] + 0.1 * rng.normal(size=(200, 1))
    velocity = MidpointVelocity("linear").fit(m, d)
    velocity.set_params(model="kernel", n_components=20, random_state=0).fit(m, 5 * d)
    fresh = MidpointVelocity("kernel", n_components=20, random_state=0).fit(m, 5 * d)
    assert not hasattr(velocity, "coef_") and not hasattr(velocity, "intercept_")
    assert sorted(vars(velocity)) == sorted(vars(fresh))
    np.testing.assert_array_equal(velocity.predict(m), fresh.predict(m))
    # a refit that fails keeps the earlier model whole (was: an unfitted regressor_ beside the old coef_,
    # predict raised NotFittedError), as LinearRegression keeps its model after a refused refit
    linear = MidpointVelocity("linear").fit(m, d)
    before = linear.predict(m)
    with pytest.raises(ValueError, match="could not fit D"):
        linear.set_params(model=Ridge(solver="lbfgs")).fit(m, d)  # lbfgs needs positive=True: refused
    np.testing.assert_array_equal(linear.predict(m), before)
    np.testing.assert_array_equal(linear.regressor_.coef_, linear.coef_)
    # nor does a refit refused for its D after M of more columns was taken (was: n_features_in_ became 3
    # beside the 2-feature model, and predict refused M of 2 columns: "expecting 3 features")
    with pytest.raises(ValueError, match="D must have one row per sample"):
        linear.fit(rng.normal(size=(200, 3)), d[:10])
    assert linear.n_features_in_ == 2
    np.testing.assert_array_equal(linear.predict(m), before)


def test_midpoint_pairs_is_an_independent_coupling_of_the_given_rows():
    x0, x1 = np.arange(10.0)[:, None], 100 + np.arange(7.0)[:, None]
    m, d = midpoint_pairs(x0, x1, 0)
    first, second = m - d / 2, m + d / 2
    assert len(m) == 7 and len(set(first[:, 0])) == 7 and set(second[:, 0]) == set(x1[:, 0])
    assert set(first[:, 0]) <= set(x0[:, 0])


def brute_force_p(scores):
    observed = sum(scores)
    flips = [np.dot(signs, scores) for signs in itertools.product((-1.0, 1.0), repeat=len(scores))]
    return np.mean([f >= observed - 1e-12 for f in flips])


@pytest.mark.parametrize("n", [1, 5, 9, 12])
def test_sign_flip_exact_and_monte_carlo_match_full_enumeration(n):
    scores = np.random.default_rng(n).normal(0.3, 1.0, n)
    exact = brute_force_p(scores)
    assert sign_flip_p_value(scores, method="exact") == pytest.approx(exact, abs=1e-12)
    assert sign_flip_p_value(scores) == pytest.approx(exact, abs=1e-12)  # auto enumerates up to 20
    flips = 200_000
    mc = sign_flip_p_value(scores, method="monte-carlo", n_flips=flips, random_state=0)
    assert abs(mc - exact) <= 4 * np.sqrt(exact * (1 - exact) / flips) + 1 / flips


def test_sign_flip_monte_carlo_is_never_zero_and_ties_count():
    assert sign_flip_p_value(np.full(40, 5.0), n_flips=99, random_state=0) == pytest.approx(1 / 100)
    assert sign_flip_p_value(np.zeros(6)) == 1.0  # every flip ties the observed sum


@pytest.mark.parametrize("factor", [1e-8, 1e8])
def test_sign_flip_p_value_is_scale_invariant(factor):
    # the tie tolerance is relative: tiny scores were all ties (p = 1) under an absolute 1e-12
    scores = np.arange(1.0, 9.0)
    assert sign_flip_p_value(scores) == 1 / 256
    assert sign_flip_p_value(scores * 1e-14) == 1 / 256
    shifted = np.random.default_rng(0).normal(0.3, 1.0, 12)
    for method in ("exact", "monte-carlo"):
        p = sign_flip_p_value(shifted, method=method, n_flips=999, random_state=0)
        assert sign_flip_p_value(shifted * factor, method=method, n_flips=999, random_state=0) == p


def test_two_sample_p_value_is_unchanged_when_the_data_are_rescaled():
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((200, 2))
    x1 = rng.standard_normal((200, 2)) + np.array([1.0, 0.0])
    p = zero_flow_two_sample_test(x0, x1, random_state=0).p_value
    assert p < 0.01
    for factor in (1e-8, 1e8):
        assert zero_flow_two_sample_test(x0 * factor, x1 * factor, random_state=0).p_value == p


def rejection_rate(n, shift, reps, seed, d=5, **kwargs):
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(reps):
        x0, x1 = rng.standard_normal((n, d)), rng.standard_normal((n, d)) + shift
        hits += zero_flow_two_sample_test(x0, x1, random_state=rng, **kwargs).reject(ALPHA)
    return hits / reps


@pytest.mark.slow
def test_two_sample_size_over_500_repetitions():
    reps = 500
    assert rejection_rate(200, 0.0, reps, seed=0) <= ALPHA + 2 * np.sqrt(ALPHA * (1 - ALPHA) / reps)


def test_exact_p_values_are_valid_at_tiny_n():
    # 12 held-out pairs: every p-value is an exact enumeration, so P(p <= alpha) <= alpha at this n too
    reps = 400
    rate = rejection_rate(24, 0.0, reps, seed=1, d=2)
    assert rate <= ALPHA + 2 * np.sqrt(ALPHA * (1 - ALPHA) / reps)
    assert (
        zero_flow_two_sample_test(np.zeros((32, 2)) + 1, np.ones((32, 2)), random_state=0).method == "exact"
    )


def test_power_rises_with_n_toward_one():
    power = [rejection_rate(n, 0.3, 40, seed=2 + n) for n in (40, 160, 480)]
    assert power[0] < power[1] < power[2] or power[1] == power[2] == 1.0
    assert power[2] >= 0.95 and power[0] <= 0.6


def test_mlp_and_kernel_velocities_detect_a_variance_change():
    rng = np.random.default_rng(3)
    x0, x1 = rng.standard_normal((600, 2)), rng.standard_normal((600, 2)) * [2.0, 1.0]
    for model in ("kernel", "mlp"):
        assert zero_flow_two_sample_test(x0, x1, velocity=model, random_state=0).p_value < 0.01
    # a user's regressor works too
    assert zero_flow_two_sample_test(x0, x1, velocity=Ridge(1.0), random_state=0).p_value <= 1.0


def test_mlp_velocity_consumes_a_random_state_instance_like_the_kernel():
    rng = np.random.default_rng(0)
    m, d = rng.standard_normal((100, 2)), rng.standard_normal((100, 2))
    rs = np.random.RandomState(0)
    est = MidpointVelocity("mlp", hidden=(8,), max_iter=5, random_state=rs)
    with pytest.warns(UserWarning):  # max_iter=5 does not converge
        first = est.fit(m, d).predict(m)
    reference = np.random.RandomState(0)
    seed = int(reference.randint(2**31))  # one int drawn from the instance seeds the MLP
    assert np.array_equal(rs.get_state()[1], reference.get_state()[1])  # advanced by exactly that draw
    assert rs.get_state()[2] == reference.get_state()[2]
    with pytest.warns(UserWarning):
        by_seed = MidpointVelocity("mlp", hidden=(8,), max_iter=5, random_state=seed).fit(m, d).predict(m)
        refit = est.fit(m, d).predict(m)
    np.testing.assert_array_equal(first, by_seed)
    assert not np.array_equal(refit, first)  # a refit draws a new initialisation


def test_a_users_randomised_regressor_follows_random_state():
    # the old code cloned a user's forest with random_state=None: two runs with random_state=0 gave
    # zero-flow divergences -0.160 and -0.383 (/tmp/icml-stats-int/p5_zf_seed.py)
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    x0, x1 = rng.standard_normal((200, 2)), rng.standard_normal((200, 2)) + np.array([0.5, 0.0])
    forest = RandomForestRegressor(n_estimators=5, max_depth=3)
    runs = [zero_flow_divergence(x0, x1, velocity=forest, random_state=0) for _ in range(2)]
    assert runs[0] == runs[1]
    piped = make_pipeline(StandardScaler(), forest)
    fits = [MidpointVelocity(piped, random_state=3).fit(x0, x1).predict(x0) for _ in range(2)]
    np.testing.assert_array_equal(fits[0], fits[1])
    assert forest.random_state is None  # the user's model is not touched
    fixed = RandomForestRegressor(n_estimators=5, max_depth=3, random_state=7)  # a seed the user set is kept
    np.testing.assert_array_equal(
        MidpointVelocity(fixed, random_state=3).fit(x0, x1).predict(x0), clone(fixed).fit(x0, x1).predict(x0)
    )


def ci_data(n, rng, effect):
    z = rng.normal(size=(n, 2))
    y = np.sin(z[:, :1]) + z[:, 1:] + rng.normal(size=(n, 1))
    x = z @ [[0.7], [-0.4]] + effect * y + rng.normal(size=(n, 1))
    return x, y, z


def test_model_x_ci_test_keeps_its_size_with_a_known_sampler():
    rng = np.random.default_rng(4)
    known = lambda z, r: z @ [[0.7], [-0.4]] + r.normal(size=(len(z), 1))  # noqa: E731
    reps, hits = 200, 0
    for _ in range(reps):
        x, y, z = ci_data(200, rng, 0.0)
        hits += zero_flow_ci_test(x, y, z, sampler=known, random_state=rng).reject(ALPHA)
    assert hits / reps <= ALPHA + 2 * np.sqrt(ALPHA * (1 - ALPHA) / reps)
    x, y, z = ci_data(400, rng, 0.5)
    assert zero_flow_ci_test(x, y, z, sampler=known, random_state=0).p_value < 0.01
    assert zero_flow_ci_test(x, y, z, sampler="gaussian", random_state=0).p_value < 0.01


def test_gaussian_conditional_sampler_recovers_the_conditional():
    rng = np.random.default_rng(5)
    z = rng.normal(size=(20_000, 2))
    x = (
        z @ [[1.0, 0.0], [0.5, -1.0]]
        + 3.0
        + rng.multivariate_normal([0, 0], [[1.0, 0.5], [0.5, 2.0]], 20_000)
    )
    sampler = GaussianConditionalSampler().fit(z, x)
    np.testing.assert_allclose(sampler.cov_, [[1.0, 0.5], [0.5, 2.0]], atol=0.06)
    draws = sampler.sample(np.zeros((20_000, 2)), random_state=0)
    np.testing.assert_allclose(draws.mean(0), [3.0, 3.0], atol=0.05)
    assert sampler is not clone(sampler) and clone(sampler).get_params() == sampler.get_params()


def test_sufficiency_certificate_on_a_planted_blanket():
    rng = np.random.default_rng(6)
    y = rng.normal(size=(3000, 4))
    x = y[:, :1] - y[:, 1:2] + 0.5 * rng.normal(size=(3000, 1))
    keep = sufficiency_certificate(x, y, [0, 1], random_state=0)
    drop = sufficiency_certificate(x, y, [0], random_state=0)
    assert abs(keep.z) < 3 and abs(keep.certificate) < 0.01
    assert drop.z > 10 and drop.certificate > 0.1
    # a mask and a callable encoder give the same certificate as the indices
    mask = sufficiency_certificate(x, y, np.array([True, True, False, False]), random_state=0)
    call = sufficiency_certificate(x, y, lambda v: v[:, :2], random_state=0)
    assert mask.certificate == keep.certificate == call.certificate


def test_markov_blanket_of_a_planted_chain():
    rng = np.random.default_rng(7)
    w = np.zeros((2000, 5))
    w[:, 0] = rng.normal(size=2000)
    for j in range(1, 5):
        w[:, j] = 0.8 * w[:, j - 1] + 0.6 * rng.normal(size=2000)
    model = ZeroFlowMarkovBlanket(hidden=32, steps=600, random_state=0).fit(w * 3 + 1)  # units do not matter
    edges = np.abs(np.subtract.outer(np.arange(5), np.arange(5))) == 1
    upper = np.triu_indices(5, 1)
    assert roc_auc_score(edges[upper], model.blanket_scores_[upper]) == 1.0
    assert np.argsort(model.blanket_scores_[2])[-2:].tolist() in ([1, 3], [3, 1])
    assert np.all(np.diag(model.gates_) == 0) and model.loss_curve_.shape == (600,)
    assert model.blanket(2, threshold=0.0).tolist() == [0, 1, 3, 4]  # every other node scores >= 0


def test_markov_blanket_fit_is_reproducible_and_clonable():
    w = np.random.default_rng(8).normal(size=(50, 3))
    model = ZeroFlowMarkovBlanket(hidden=8, steps=20, random_state=3).fit(w)
    again = clone(model).fit(w)
    np.testing.assert_array_equal(again.gates_, model.gates_)  # an int random_state reproduces the fit
    assert model.fit(w) is model


def test_markov_blanket_fit_leaves_the_global_torch_generators_alone(monkeypatch):
    import torch

    reseeded = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: reseeded.append(seed))
    before = torch.get_rng_state()
    w = np.random.default_rng(8).normal(size=(50, 3))
    ZeroFlowMarkovBlanket(hidden=8, steps=5, random_state=3).fit(w)
    assert reseeded == []  # no CUDA generator is reseeded
    assert torch.equal(torch.get_rng_state(), before)
