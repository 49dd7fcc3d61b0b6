"""Bad-input fuzz tests (GUIDE "Bad input") of icml_stats.zeroflow: every public API either returns a result
its check accepts or raises ValueError/TypeError naming the argument, and never answers NaN/inf from finite
input without a warning. Data are tiny: 12 pairs of 2-vectors, 12 matched rows of (x, y, z) = (1, 1, 1)
columns, a 3-node graph; the velocities are "linear" but for a few "kernel" (4 Nystroem points) and "mlp"
(3 units, 5 epochs) calls; ZeroFlowMarkovBlanket trains a width-4 field for 3 steps of 4 rows.

Each breach the fuzz found once (velocity classes, unbounded sizes hanging or overflowing, huge finite data
giving NaN or errors naming no argument, samplers and encoders of the wrong shape accepted, an empty
column selection crashing, refusals naming X for M and Z, a split refusal naming no data argument) was
fixed in the library and is replayed explicitly in ``BREACHES`` at the end, so it stays fixed."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LinearRegression, Ridge
from sklearn.svm import SVR

import icml_stats.zeroflow
from icml_stats.zeroflow import (
    GaussianConditionalSampler,
    MidpointVelocity,
    SufficiencyCertificate,
    ZeroFlowMarkovBlanket,
    ZeroFlowTestResult,
    gaussian_midpoint_velocity,
    gaussian_zero_flow_divergence,
    midpoint_pairs,
    sign_flip_p_value,
    sufficiency_certificate,
    zero_flow_ci_test,
    zero_flow_divergence,
    zero_flow_two_sample_test,
)
from icml_tools.fuzz import Coverage, fuzz_call, hostile, keeps_contract, non_finite, rejects

FUZZ = Coverage()  # VELOCITY_MODELS is a constant (a tuple): not an API

RNG = np.random.default_rng(0)
N = 12
X0 = RNG.normal(size=(N, 2))
X1 = RNG.normal(size=(N, 2)) + 0.5
M = RNG.normal(size=(N, 2))  # midpoints and differences for MidpointVelocity
D = M @ np.array([[1.0, 0.5], [0.0, -1.0]]) + 0.1 * RNG.normal(size=(N, 2))
CZ = RNG.normal(size=(N, 1))  # the CI test's x, y, z: x and y both depend on z
CX = CZ + 0.5 * RNG.normal(size=(N, 1))
CY = CZ + 0.5 * RNG.normal(size=(N, 1))
SX = RNG.normal(size=(N, 2))  # the sufficiency certificate's x and y
SY = np.c_[SX @ np.array([1.0, -1.0]), RNG.normal(size=(N, 2))]
XB = RNG.normal(size=(N, 3))  # the blanket's nodes
SCORES = RNG.normal(size=8) + 0.3
MEAN0, MEAN1 = np.zeros(2), np.array([1.0, -0.5])
COV0, COV1 = np.eye(2), np.array([[2.0, 0.5], [0.5, 1.0]])

TINY_KERNEL = MidpointVelocity("kernel", n_components=4)
TINY_MLP = MidpointVelocity("mlp", hidden=(3,), max_iter=5)
MLP_WARNINGS = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def no_larger(top: int):
    """Drop the integers above ``top`` (valid but slow: many epochs, steps, wide layers); the overflowing
    extreme (2**63) is replayed in BREACHES."""
    return lambda v: not (isinstance(v, int) and not isinstance(v, bool) and v > top)


def small(valid, top: int) -> st.SearchStrategy:
    return hostile(valid).filter(no_larger(top))


def seeds() -> st.SearchStrategy:
    """random_state of the functions: None, an int or a numpy Generator are valid; the rest is hostile."""
    return st.one_of(hostile(0), st.sampled_from([np.random.default_rng(1), np.random.RandomState(1), -1]))


def velocities() -> st.SearchStrategy:
    """velocity: hostile names, classes instead of instances, objects that are no regressor, and a few
    valid ones (a scikit-learn regressor, tiny configured MidpointVelocity)."""
    return st.one_of(
        hostile("linear"),
        st.sampled_from([LinearRegression, MidpointVelocity, Ridge(1.0), TINY_KERNEL, np.eye(2), print]),
    )


def finite_float(v) -> bool:
    return isinstance(v, float) and math.isfinite(v)


def is_result(n_pairs: int):
    def check(r) -> bool:
        return (
            isinstance(r, ZeroFlowTestResult)
            and 0.0 < r.p_value <= 1.0
            and finite_float(r.statistic)
            and r.n_train >= 2
            and r.n_test >= 2
            and r.n_train + r.n_test <= n_pairs
            and r.method in ("exact", "monte-carlo")
        )

    return check


# --------------------------------------------------------------------------------------------- velocity
@FUZZ.covers(midpoint_pairs)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_midpoint_pairs(data):
    def check(out) -> bool:
        m, d = out
        return m.shape == d.shape and m.ndim == 2 and not non_finite(out)

    fuzz_call(
        data,
        midpoint_pairs,
        {"x0": X0, "x1": X1, "random_state": 0},
        check=check,
        strategies={"random_state": seeds()},
        related={"x0": ["x1"], "x1": ["x0"]},
    )


def test_midpoint_pairs_pair_rows_of_each_sample():
    """M - D/2 and M + D/2 are rows of x0 and x1 (a random one-to-one pairing), min(n0, n1) pairs."""
    m, d = midpoint_pairs(X0, X1[:7], random_state=3)
    assert m.shape == d.shape == (7, 2)
    a, b = m - d / 2, m + d / 2
    np.testing.assert_allclose(np.sort(b, axis=0), np.sort(X1[:7], axis=0), rtol=1e-12, atol=1e-12)
    assert len({tuple(np.round(r, 9)) for r in a} & {tuple(np.round(r, 9)) for r in X0}) == 7
    m1, d1 = midpoint_pairs(X0[:, 0], X1[:, 0], random_state=3)  # a 1-D sample is one feature
    assert m1.shape == d1.shape == (N, 1)


def divergence(x0, x1, velocity, cv, random_state):
    return zero_flow_divergence(x0, x1, velocity=velocity, cv=cv, random_state=random_state)


@FUZZ.covers(zero_flow_divergence)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_zero_flow_divergence(data):
    fuzz_call(
        data,
        divergence,
        {"x0": X0, "x1": X1, "velocity": "linear", "cv": 2, "random_state": 0},
        check=finite_float,
        strategies={"velocity": velocities(), "random_state": seeds()},
        related={"x0": ["x1"], "x1": ["x0"], "cv": ["x0", "x1"]},
    )


@MLP_WARNINGS
@settings(max_examples=6, deadline=None)
@given(st.data())
def test_zero_flow_divergence_mlp(data):
    fuzz_call(
        data,
        divergence,
        {"x0": X0, "x1": X1, "velocity": TINY_MLP, "cv": 2, "random_state": 0},
        check=finite_float,
        mutate=["x0", "cv"],
        related={"x0": ["x1"], "cv": ["x0", "x1"]},
    )


def test_zero_flow_divergence_refusals_name_the_sizes():
    err = rejects(zero_flow_divergence, X0, X1, cv=7, name=["x0", "cv"])
    assert "14 pairs" in str(err) and "got 12" in str(err)
    rejects(zero_flow_divergence, X0, X1, cv=True, name="cv")
    rejects(zero_flow_divergence, X0, X1[:, :1], name=["x0", "x1"])


def velocity_fit_predict(M, D, model, alpha, hidden, max_iter, n_components, random_state):
    est = MidpointVelocity(
        model,
        alpha=alpha,
        hidden=hidden,
        max_iter=max_iter,
        n_components=n_components,
        random_state=random_state,
    )
    return est.fit(M, D).predict(np.asarray(M)[:3] if np.ndim(M) == 2 else M)


VELOCITY_VALID = {
    "M": M,
    "D": D,
    "model": "linear",
    "alpha": 1e-2,
    "hidden": (3,),
    "max_iter": 5,
    "n_components": 4,
    "random_state": 0,
}


def predicts_rows(out) -> bool:
    return isinstance(out, np.ndarray) and out.ndim == 2 and not non_finite(out)


@FUZZ.covers(MidpointVelocity)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_midpoint_velocity_linear(data):
    fuzz_call(
        data,
        velocity_fit_predict,
        VELOCITY_VALID,
        check=predicts_rows,
        strategies={
            "model": st.one_of(
                hostile("linear"), st.sampled_from([LinearRegression, Ridge(), object(), ["linear"]])
            ),
            "random_state": st.one_of(hostile(0), st.sampled_from([np.random.RandomState(0), 2**32])),
        },
        related={"M": ["D"], "D": ["M"]},
    )


@pytest.mark.parametrize("model", ["kernel", pytest.param("mlp", marks=MLP_WARNINGS)])
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_midpoint_velocity_kernel_and_mlp(model, data):
    fuzz_call(
        data,
        velocity_fit_predict,
        {**VELOCITY_VALID, "model": model},
        check=predicts_rows,
        mutate=["M", "alpha", "hidden", "max_iter", "n_components"],
        strategies={
            "hidden": st.one_of(small(3, 8), st.sampled_from([(), (2, 2), [0], ("x",), (2**63,)])),
            "max_iter": small(5, 10),
            "n_components": small(4, 8),
        },
        related={"M": ["D"]},
    )


@pytest.fixture(scope="module")
def fitted_velocity():
    return MidpointVelocity().fit(M, D)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_midpoint_velocity_predict(fitted_velocity, data):
    fuzz_call(data, fitted_velocity.predict, {"M": M[:3]}, check=predicts_rows)


def test_midpoint_velocity_linear_is_least_squares_and_refusals(fitted_velocity):
    ref = LinearRegression().fit(M, D)
    np.testing.assert_allclose(fitted_velocity.predict(M), ref.predict(M), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fitted_velocity.coef_, ref.coef_, rtol=1e-12)
    with pytest.raises(NotFittedError):
        MidpointVelocity().predict(M)
    rejects(fitted_velocity.predict, M[:, :1], name="M")  # the wrong width
    rejects(MidpointVelocity(LinearRegression).fit, M, D, name="model")  # a class, not an instance


# ------------------------------------------------------------------------------- Gaussian closed forms
GAUSS_RELATED = {"mean0": ["mean1", "cov0", "cov1"], "mean1": ["mean0"], "cov0": ["cov1"], "cov1": ["cov0"]}
GAUSS_VALID = {"mean0": MEAN0, "cov0": COV0, "mean1": MEAN1, "cov1": COV1}


@FUZZ.covers(gaussian_zero_flow_divergence)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_gaussian_zero_flow_divergence(data):
    fuzz_call(
        data,
        gaussian_zero_flow_divergence,
        GAUSS_VALID,
        check=lambda zf: finite_float(zf) and zf >= 0.0,
        related=GAUSS_RELATED,
    )


@FUZZ.covers(gaussian_midpoint_velocity)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_gaussian_midpoint_velocity(data):
    def check(out) -> bool:
        a, b = out
        return a.shape == (len(a), len(a)) and b.shape == (len(a),) and not non_finite(out)

    fuzz_call(data, gaussian_midpoint_velocity, GAUSS_VALID, check=check, related=GAUSS_RELATED)


def test_gaussian_closed_forms_values_and_refusals():
    # 1-D: ZF = (mu1 - mu0)^2 + (s1 - s0)^2 / (s0 + s1); v*(m) = 2 (s1 - s0) / (s0 + s1) (m - 1/2) + 1
    assert gaussian_zero_flow_divergence([0.0], [[1.0]], [1.0], [[3.0]]) == pytest.approx(2.0, rel=1e-14)
    a, b = gaussian_midpoint_velocity([0.0], [[1.0]], [1.0], [[3.0]])
    np.testing.assert_allclose(a, [[1.0]], rtol=1e-14)
    np.testing.assert_allclose(b, [0.5], rtol=1e-14)
    rejects(gaussian_zero_flow_divergence, MEAN0, COV0, MEAN1, [[2.0, 0.5], [0.1, 1.0]], name="cov1")
    rejects(gaussian_zero_flow_divergence, MEAN0, [[1.0, 2.0], [2.0, 1.0]], MEAN1, COV1, name="cov0")
    rejects(gaussian_zero_flow_divergence, MEAN0, np.eye(3), MEAN1, COV1, name="cov0")
    rejects(gaussian_midpoint_velocity, MEAN0, COV0, np.ones(3), COV1, name="mean1")
    rejects(gaussian_midpoint_velocity, MEAN0, 0 * COV0, MEAN1, 0 * COV1, name=["cov0", "cov1"])


# ------------------------------------------------------------------------------------------------ tests
def flips(scores, n_flips, method, random_state):
    return sign_flip_p_value(scores, n_flips=n_flips, method=method, random_state=random_state)


@FUZZ.covers(sign_flip_p_value)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_sign_flip_p_value(data):
    method = data.draw(st.sampled_from(["auto", "exact", "monte-carlo"]), label="valid method")
    fuzz_call(
        data,
        flips,
        {"scores": SCORES, "n_flips": 99, "method": method, "random_state": 0},
        check=lambda p: finite_float(p) and 0.0 < p <= 1.0,
        strategies={"random_state": seeds(), "method": st.one_of(hostile(method), st.just(["auto"]))},
    )


def test_sign_flip_p_value_exact_by_brute_force():
    s = np.array([1.5, -0.5, 0.25, 2.0])
    count = sum(np.dot(signs, s) >= s.sum() - 1e-12 for signs in itertools.product((-1.0, 1.0), repeat=4))
    assert sign_flip_p_value(s, method="exact") == count / 16
    p = sign_flip_p_value(s, n_flips=999, method="monte-carlo", random_state=0)
    assert p * 1000 == pytest.approx(round(p * 1000)) and 0 < p <= 1
    err = rejects(sign_flip_p_value, RNG.normal(size=31), method="exact", name="method")
    assert "31" in str(err)
    for bad in (0, -3, True):
        rejects(sign_flip_p_value, s, n_flips=bad, method="monte-carlo", name="n_flips")


def two_sample(x0, x1, velocity, train_size, n_flips, method, random_state):
    return zero_flow_two_sample_test(
        x0,
        x1,
        velocity=velocity,
        train_size=train_size,
        n_flips=n_flips,
        method=method,
        random_state=random_state,
    )


TWO_SAMPLE_VALID = {
    "x0": X0,
    "x1": X1,
    "velocity": "linear",
    "train_size": 0.5,
    "n_flips": 99,
    "method": "auto",
    "random_state": 0,
}


@FUZZ.covers(zero_flow_two_sample_test, ZeroFlowTestResult)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_zero_flow_two_sample_test(data):
    result = fuzz_call(
        data,
        two_sample,
        TWO_SAMPLE_VALID,
        check=is_result(N),
        strategies={"velocity": velocities(), "random_state": seeds()},
        related={"x0": ["x1"], "x1": ["x0"]},
    )
    if isinstance(result, ZeroFlowTestResult):  # its one method
        fuzz_call(
            data,
            result.reject,
            {"alpha": 0.05},
            check=lambda r: isinstance(r, bool),
        )


def test_two_sample_split_refusals_name_the_sizes():
    err = rejects(zero_flow_two_sample_test, X0[:3], X1[:3], name=["x0", "train_size"])
    assert "3 pairs" in str(err) and "2 to fit and 1 to test" in str(err)
    for bad in (0, 1, math.nan, True, 0.05):
        rejects(zero_flow_two_sample_test, X0, X1, train_size=bad, name="train_size")
    rejects(zero_flow_two_sample_test, X0, X1, method="exactly", name="method")
    r = zero_flow_two_sample_test(X0, X1, random_state=0)
    assert (r.n_train, r.n_test, r.method) == (6, 6, "exact") and r.p_value * 64 == round(r.p_value * 64)
    assert r.reject(0.999) is (r.p_value <= 0.999) and r.reject(1e-9) is False


def ci_test(x, y, z, sampler, velocity, train_size, n_flips, method, random_state):
    return zero_flow_ci_test(
        x,
        y,
        z,
        sampler,
        velocity=velocity,
        train_size=train_size,
        n_flips=n_flips,
        method=method,
        random_state=random_state,
    )


def known_sampler(z, rng):
    """The true law of X given Z in the fixture: N(z, 0.25)."""
    return z + 0.5 * rng.standard_normal(z.shape)


class WrongShapeSampler:
    def sample(self, Z, random_state=None):
        return np.zeros((len(Z), 2))


BAD_SAMPLERS = [
    GaussianConditionalSampler,  # a class, not an instance
    WrongShapeSampler(),
    lambda z, rng: np.zeros((3, 1)),  # too few rows
    lambda z, rng: np.zeros((1, len(z))),  # transposed
    lambda z, rng: np.full(z.shape, math.nan),
    lambda z, rng: np.full(z.shape, "x"),
    lambda z, rng: None,
]


@FUZZ.covers(zero_flow_ci_test)
@pytest.mark.parametrize("sampler", ["gaussian", known_sampler], ids=["gaussian", "known"])
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_zero_flow_ci_test(sampler, data):
    fuzz_call(
        data,
        ci_test,
        {
            "x": CX,
            "y": CY,
            "z": CZ,
            "sampler": sampler,
            "velocity": "linear",
            "train_size": 0.5,
            "n_flips": 99,
            "method": "auto",
            "random_state": 0,
        },
        check=is_result(N),
        strategies={
            "sampler": st.one_of(hostile("gaussian"), st.sampled_from(BAD_SAMPLERS)),
            "velocity": velocities(),
            "random_state": seeds(),
        },
        # a known sampler draws X's columns: x of another width breaks its agreement with the sampler
        related={"x": ["y", "z", "sampler"], "y": ["x"], "z": ["x", "sampler"]},
    )


def sampler_fit_sample(Z, X, ridge, random_state):
    return GaussianConditionalSampler(ridge).fit(Z, X).sample(np.asarray(Z)[:3], random_state)


@FUZZ.covers(GaussianConditionalSampler)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_gaussian_conditional_sampler(data):
    fuzz_call(
        data,
        sampler_fit_sample,
        {"Z": CZ, "X": CX, "ridge": 1e-6, "random_state": 0},
        check=lambda x: x.shape[0] == 3 and x.ndim == 2 and not non_finite(x),
        strategies={"random_state": seeds()},
        related={"Z": ["X"], "X": ["Z"], "ridge": ["X"]},
    )


@pytest.fixture(scope="module")
def fitted_sampler():
    return GaussianConditionalSampler().fit(CZ, CX)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_gaussian_conditional_sampler_sample(fitted_sampler, data):
    fuzz_call(
        data,
        fitted_sampler.sample,
        {"Z": CZ[:3], "random_state": 0},
        check=lambda x: x.ndim == 2 and x.shape[1] == 1 and not non_finite(x),  # one row per row of Z
        strategies={"random_state": seeds()},
    )


def test_gaussian_conditional_sampler_fits_least_squares(fitted_sampler):
    ref = LinearRegression().fit(CZ, CX)
    np.testing.assert_allclose(fitted_sampler.mean_model_.coef_, ref.coef_, rtol=1e-12)
    resid = CX - ref.predict(CZ)
    expected = np.var(resid, ddof=1) * (1 + 1e-6)
    np.testing.assert_allclose(fitted_sampler.cov_, [[expected]], rtol=1e-12)
    with pytest.raises(NotFittedError):
        GaussianConditionalSampler().sample(CZ)
    rejects(fitted_sampler.sample, np.c_[CZ, CZ], name="Z")


# ------------------------------------------------------------------------------------------- sufficiency
def certificate(x, y, encoder, velocity, n_noise, test_size, random_state):
    return sufficiency_certificate(
        x,
        y,
        encoder,
        velocity=velocity,
        n_noise=n_noise,
        test_size=test_size,
        random_state=random_state,
    )


def is_certificate(c) -> bool:
    return (
        isinstance(c, SufficiencyCertificate)
        and all(finite_float(v) for v in (c.certificate, c.risk_encoded, c.risk_full))
        and c.standard_error >= 0
        and c.n_test >= 2
        and not math.isnan(c.z)
    )


ENCODERS = [
    [5],  # out of range
    [-1],
    [0.5],
    [[0]],
    [True, False],  # a mask of the wrong length
    lambda y: y[:5],  # too few rows
    lambda y: np.r_[y, y],  # too many rows
    lambda y: y.T,
    lambda y: y[:, :, None],
    lambda y: np.full(y.shape, math.nan),
    lambda y: np.full(y.shape, "x"),
    lambda y: None,
    [],  # valid: no column (tests independence)
    [True, False, True],  # valid mask
    lambda y: y[:, 0],  # valid: one column
]


@FUZZ.covers(sufficiency_certificate, SufficiencyCertificate)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_sufficiency_certificate(data):
    fuzz_call(
        data,
        certificate,
        {
            "x": SX,
            "y": SY,
            "encoder": [0],
            "velocity": "linear",
            "n_noise": 2,
            "test_size": 0.5,
            "random_state": 0,
        },
        check=is_certificate,
        strategies={
            "encoder": st.one_of(hostile([0]), st.sampled_from(ENCODERS)),
            "velocity": velocities(),
            "n_noise": small(2, 20),
            "random_state": seeds(),
        },
        related={"x": ["y"], "y": ["x", "encoder"]},
    )


def test_sufficiency_certificate_values_and_refusals():
    # every column of y kept: the two regressions are the same fit, the certificate exactly 0
    full = sufficiency_certificate(SX, SY, [0, 1, 2], n_noise=2, random_state=0)
    assert full.certificate == 0.0 and full.standard_error == 0.0 and full.z == 0.0
    assert full.risk_encoded == full.risk_full and full.n_test == 6
    empty = sufficiency_certificate(SX, SY, [], n_noise=2, random_state=0)  # no column: X indep. of Y?
    assert empty.risk_full == full.risk_full  # the same split, noise and full fit
    assert empty.certificate == pytest.approx(empty.risk_encoded - empty.risk_full, rel=1e-12)
    err = rejects(sufficiency_certificate, SX[:3], SY[:3], [0], name=["x", "test_size"])
    assert "3 rows" in str(err)
    for bad in (0, 1, math.nan, True):
        rejects(sufficiency_certificate, SX, SY, [0], test_size=bad, name="test_size")
    for bad in (0, -1, True):
        rejects(sufficiency_certificate, SX, SY, [0], n_noise=bad, name="n_noise")


# ------------------------------------------------------------------------------------------------ blanket
def blanket_fit(X, hidden, steps, batch_size, lr, sparsity, gate_init, random_state):
    est = ZeroFlowMarkovBlanket(hidden, steps, batch_size, lr, sparsity, gate_init, random_state)
    return est.fit(X)


BLANKET_VALID = {
    "X": XB,
    "hidden": 4,
    "steps": 3,
    "batch_size": 4,
    "lr": 3e-3,
    "sparsity": 0.02,
    "gate_init": 2.0,
    "random_state": 0,
}


def is_blanket(est) -> bool:
    p = est.n_features_in_
    g = est.gates_
    return (
        g.shape == (p, p)
        and not non_finite(g)
        and bool(np.all(np.diag(g) == 0))
        and bool(np.all((g >= 0) & (g <= 1)))
        and np.array_equal(est.blanket_scores_, (g + g.T) / 2)
        and est.loss_curve_.shape == (est.steps,)
    )


@FUZZ.covers(ZeroFlowMarkovBlanket)
@pytest.mark.usefixtures("one_torch_thread")
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_zero_flow_markov_blanket_fit(data):
    fuzz_call(
        data,
        blanket_fit,
        BLANKET_VALID,
        check=is_blanket,
        strategies={
            "hidden": small(4, 16),
            "steps": small(3, 10),
            "batch_size": small(4, 64),
            "random_state": st.one_of(
                hostile(0), st.sampled_from([np.random.RandomState(0), np.random.default_rng(0), 2**32])
            ),
        },
    )


@pytest.fixture(scope="module")
def fitted_blanket(one_torch_thread):
    return blanket_fit(**BLANKET_VALID)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_zero_flow_markov_blanket_blanket(fitted_blanket, data):
    def check(nodes) -> bool:
        return nodes.ndim == 1 and bool(np.all(np.diff(nodes) > 0)) and nodes.size <= 2  # never itself

    fuzz_call(data, fitted_blanket.blanket, {"node": 1, "threshold": 0.5}, check=check)


def test_zero_flow_markov_blanket_blanket_reads_the_scores(fitted_blanket):
    scores = fitted_blanket.blanket_scores_
    for node in range(3):
        for threshold in (0.0, float(np.sort(scores[node])[-1]), 1.0):
            expected = [j for j in range(3) if j != node and scores[node, j] >= threshold]
            assert fitted_blanket.blanket(node, threshold).tolist() == expected
    with pytest.raises(NotFittedError):
        ZeroFlowMarkovBlanket().blanket(0)
    for node in (3, -1, True, 1.0):
        rejects(fitted_blanket.blanket, node, name="node")
    rejects(ZeroFlowMarkovBlanket(steps=1).fit, XB[:, :1], name="X")
    rejects(ZeroFlowMarkovBlanket(steps=1).fit, np.where(XB > 1, np.inf, XB), name="X")


# --------------------------------------------------------------------------------- scikit-learn contract
ESTIMATORS = [
    (MidpointVelocity("kernel", alpha=0.5, n_components=4, random_state=3), (M, D)),
    (GaussianConditionalSampler(ridge=1e-3), (CZ, CX)),
    (ZeroFlowMarkovBlanket(hidden=4, steps=3, batch_size=4, random_state=0), (XB,)),
]


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("est, args", ESTIMATORS, ids=lambda e: type(e).__name__ if hasattr(e, "fit") else "")
def test_scikit_learn_contract(est, args):
    params = est.get_params()
    twin = clone(est)
    assert twin is not est and twin.get_params() == params
    assert type(est)(**params).get_params() == params  # get_params round-trips through the constructor
    assert est.fit(*args) is est  # fit returns self
    assert twin.fit(*args) is twin
    assert est.n_features_in_ == args[0].shape[1]
    fitted = [k for k in vars(est) if k.endswith("_") and not k.startswith("_")]
    assert fitted and not any(k.endswith("_") for k in vars(clone(est)))  # clone drops fitted state
    for k in fitted:  # the same seed gives the same fit
        a, b = getattr(est, k), getattr(twin, k)
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------- breaches, replayed exactly
def _must_refuse(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, failing if it returns: for calls whose silent result is the breach."""
    result = fn(*args, **kwargs)
    raise AssertionError(f"accepted, returning {result!r}")


# name: (call, the arguments a refusal may name, the reason); each must keep the contract once fixed
BREACHES = {
    "divergence_velocity_class": (
        lambda: zero_flow_divergence(X0, X1, velocity=LinearRegression),
        ("velocity",),
        "was: scikit-learn's clone TypeError 'Cannot clone object ... a class' naming no argument",
    ),
    "two_sample_velocity_midpoint_class": (
        lambda: zero_flow_two_sample_test(X0, X1, velocity=MidpointVelocity),
        ("velocity",),
        "was: clone TypeError naming no argument",
    ),
    "divergence_unknown_velocity": (
        lambda: zero_flow_divergence(X0, X1, velocity="x"),
        ("velocity",),
        "was: ValueError naming model, not the argument velocity",
    ),
    "midpoint_velocity_model_class": (
        lambda: MidpointVelocity(LinearRegression).fit(M, D),
        ("model",),
        "was: clone TypeError naming no argument (a class has fit and predict attributes)",
    ),
    "midpoint_velocity_hidden_2_63": (
        lambda: MidpointVelocity("mlp", hidden=(2**63,), max_iter=2).fit(M, D),
        ("hidden",),
        "was: no upper bound on hidden, numpy's 'Maximum allowed dimension exceeded'",
    ),
    "midpoint_velocity_huge_m_kernel": (
        lambda: MidpointVelocity("kernel").fit(M * 1e307, D),
        ("M",),
        "was: Nystroem's InvalidParameterError 'gamma ... Got nan' (the median distance overflows)",
    ),
    "midpoint_velocity_huge_m_linear": (
        lambda: _must_refuse(MidpointVelocity().fit(M * 1e307, D).predict, M),
        ("M",),
        "was: a silent constant field (the least-squares fit breaks down) from finite M",
    ),
    "midpoint_velocity_nan_m": (
        lambda: MidpointVelocity().fit(M * math.nan, D),
        ("M",),
        "was: scikit-learn's 'Input X contains NaN', naming X for the argument M",
    ),
    "midpoint_velocity_1d_target_regressor": (
        lambda: MidpointVelocity(SVR()).fit(M, D),
        ("model",),
        "was: a regressor without 2-D targets, its ValueError 'y should be a 1d array' naming no argument",
    ),
    "sign_flip_n_flips_2_63": (
        lambda: sign_flip_p_value(SCORES, n_flips=2**63, method="monte-carlo"),
        ("n_flips",),
        "was: no upper bound on n_flips, a loop of 2**47 chunks (hangs)",
    ),
    "sign_flip_random_state_exact": (
        lambda: _must_refuse(sign_flip_p_value, SCORES, random_state="x"),
        ("random_state",),
        "was: random_state checked only on the Monte Carlo path, 'x' accepted silently when exact",
    ),
    "sign_flip_overflowing_scores": (
        lambda: _must_refuse(sign_flip_p_value, np.full(8, 1e308)),
        ("scores",),
        "was: the sum of |scores| overflows, the tie tolerance becomes inf and every pattern counts: p = 1",
    ),
    "divergence_huge_x": (
        lambda: _must_refuse(zero_flow_divergence, X0 * 1e200, X1 * 1e200),
        ("x0", "x1"),
        "was: NaN from finite input (with only numpy's overflow warnings)",
    ),
    "two_sample_huge_x": (
        lambda: zero_flow_two_sample_test(X0 * 1e200, X1 * 1e200),
        ("x0", "x1"),
        "was: ValueError 'scores must not contain NaN' naming an internal, not x0 or x1",
    ),
    "two_sample_too_few_pairs": (
        lambda: zero_flow_two_sample_test(X0[:1], X1),
        ("x0",),
        "was: the split refusal named train_size only, not the data that had too few pairs",
    ),
    "ci_sampler_class": (
        lambda: zero_flow_ci_test(CX, CY, CZ, GaussianConditionalSampler),
        ("sampler",),
        "was: TypeError 'sample() missing 1 required positional argument' naming no argument",
    ),
    "ci_sampler_strings": (
        lambda: zero_flow_ci_test(CX, CY, CZ, lambda z, rng: np.full(z.shape, "x")),
        ("sampler",),
        "was: numpy's 'could not convert string to float' naming no argument",
    ),
    "ci_sampler_transposed": (
        lambda: _must_refuse(zero_flow_ci_test, CX, CY, CZ, lambda z, rng: np.zeros((1, len(z)))),
        ("sampler",),
        "was: any draw of the right size was reshaped silently, a (1, n) draw accepted",
    ),
    "ci_sampler_huge": (
        lambda: zero_flow_ci_test(CX, CY, CZ, lambda z, rng: np.full(z.shape, 1e308)),
        ("sampler",),
        "was: LinearRegression's 'array must not contain infs or NaNs' naming no argument",
    ),
    "ci_huge_x": (
        lambda: zero_flow_ci_test(CX * 1e200, CY, CZ),
        ("x",),
        "was: the Gaussian sampler's draws overflow and the refusal blamed sampler, not x",
    ),
    "gaussian_sampler_huge_x": (
        lambda: _must_refuse(GaussianConditionalSampler().fit(CZ, CX * 1e200).sample, CZ, 0),
        ("X",),
        "was: inf draws from finite input (the residual covariance overflows), only a numpy warning",
    ),
    "gaussian_sampler_nan_z": (
        lambda: GaussianConditionalSampler().fit(CZ * math.nan, CX),
        ("Z",),
        "was: 'Input X contains NaN' for the argument Z, while X is another argument",
    ),
    "gaussian_sampler_ridge_overflows": (
        lambda: _must_refuse(GaussianConditionalSampler(ridge=1e308).fit(CZ, CX * 1e140).sample, CZ, 0),
        ("ridge",),
        "was: an inf covariance accepted; sampling then gave inf draws",
    ),
    "gaussian_divergence_huge_cov": (
        lambda: _must_refuse(gaussian_zero_flow_divergence, MEAN0, COV0 * 1e308, MEAN1, COV1),
        ("cov0", "cov1"),
        "was: inf from finite input, only numpy's overflow warning",
    ),
    "gaussian_divergence_cov_sum_overflows": (
        lambda: _must_refuse(gaussian_zero_flow_divergence, MEAN0, COV0 * 1e308, MEAN1, COV0 * 1e308),
        ("cov0", "cov1"),
        "was: cov0 + cov1 = inf passed the definiteness check (eigvalsh gives NaN)",
    ),
    "gaussian_velocity_huge_means": (
        lambda: _must_refuse(gaussian_midpoint_velocity, MEAN0 - 1e308, COV0, MEAN1 + 1e308, COV1),
        ("mean0", "mean1"),
        "was: an inf offset b from finite means, only numpy's overflow warning",
    ),
    "certificate_empty_selection": (
        lambda: sufficiency_certificate(SX, SY, [], n_noise=2, random_state=0),
        ("encoder",),
        "was: IndexError 'arrays used as indices must be of integer type' for the documented empty selection",
    ),
    "certificate_encoder_too_many_rows": (
        lambda: _must_refuse(sufficiency_certificate, SX, SY, lambda y: np.r_[y, y]),
        ("encoder",),
        "was: (2n, k) reshaped silently to (n, 2k): rows of f(y) matched to the wrong rows of x",
    ),
    "certificate_encoder_strings": (
        lambda: sufficiency_certificate(SX, SY, lambda y: np.full(y.shape, "x")),
        ("encoder",),
        "was: numpy's 'could not convert string to float' naming no argument",
    ),
    "certificate_encoder_huge": (
        lambda: sufficiency_certificate(SX, SY, lambda y: y * 1e307),
        ("encoder",),
        "was: LinearRegression's 'array must not contain infs or NaNs' naming no argument",
    ),
    "certificate_huge_y": (
        lambda: sufficiency_certificate(SX, SY * 1e307, [0]),
        ("y",),
        "was: LinearRegression's 'array must not contain infs or NaNs' naming no argument",
    ),
    "certificate_huge_x": (
        lambda: _must_refuse(sufficiency_certificate, SX * 1e307, SY, [0]),
        ("x",),
        "was: the spread of x overflows, x standardizes to 0 and the certificate is silently ~0",
    ),
    "certificate_n_noise_2_63": (
        lambda: sufficiency_certificate(SX, SY, [0], n_noise=2**63),
        ("n_noise",),
        "was: no upper bound, numpy's 'Maximum allowed dimension exceeded'",
    ),
    "certificate_too_few_rows": (
        lambda: sufficiency_certificate(SX[:3], SY[:3], [0]),
        ("x",),
        "was: the split refusal named test_size only, not the data that had too few rows",
    ),
    "blanket_hidden_2_63": (
        lambda: blanket_fit(**{**BLANKET_VALID, "hidden": 2**63}),
        ("hidden",),
        "was: torch's TypeError 'empty(): ... Overflow when unpacking long long'",
    ),
    "blanket_steps_2_63": (
        lambda: blanket_fit(**{**BLANKET_VALID, "steps": 2**63}),
        ("steps",),
        "was: numpy's 'Maximum allowed dimension exceeded'",
    ),
    "blanket_batch_size_2_40": (
        lambda: blanket_fit(**{**BLANKET_VALID, "batch_size": 2**40}),
        ("batch_size",),
        "was: torch's RuntimeError 'DefaultCPUAllocator: can't allocate memory'",
    ),
    "blanket_lr_1e300": (
        lambda: blanket_fit(**{**BLANKET_VALID, "lr": 1e300}),
        ("lr",),
        "was: torch's RuntimeError 'value cannot be converted to type float without overflow'",
    ),
    "blanket_lr_diverges": (
        lambda: blanket_fit(**{**BLANKET_VALID, "lr": 1e30}),
        ("lr",),
        "was: FloatingPointError (neither ValueError nor TypeError)",
    ),
    "blanket_sparsity_1e40": (
        lambda: blanket_fit(**{**BLANKET_VALID, "sparsity": 1e40}),
        ("sparsity",),
        "was: FloatingPointError blaming lr (sparsity overflows float32)",
    ),
    "blanket_gate_init_1e300": (
        lambda: blanket_fit(**{**BLANKET_VALID, "gate_init": 1e300}),
        ("gate_init",),
        "was: torch's RuntimeError 'value cannot be converted to type float without overflow'",
    ),
    "blanket_huge_x": (
        lambda: _must_refuse(blanket_fit, **{**BLANKET_VALID, "X": XB * 1e160}),
        ("X",),
        "was: the spread of X overflows, X standardizes to 0 and the gates are learnt from nothing",
    ),
}


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("case", sorted(BREACHES))
def test_found_breaches(case):
    fn, names, _ = BREACHES[case]
    keeps_contract(fn, names, tolerate=(NotFittedError,))


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(
        icml_stats.zeroflow,
        icml_stats.zeroflow.velocity,
        icml_stats.zeroflow.testing,
        icml_stats.zeroflow.blanket,
    )
