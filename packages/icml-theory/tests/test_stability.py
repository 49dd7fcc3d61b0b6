"""L_p stability: the moment inequality against exact enumeration, each bound against its closed form,
the replace-one estimator against known differences and the coverage of its intervals, the
generalization bounds' stated formulas, the ERM learners against scikit-learn, bad input and fuzzing."""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

import icml_theory.stability as stab
from icml_theory.stability import (
    DEVIATIONS,
    ERMModel,
    best_order,
    chebyshev_deviation,
    erm_gap_bound,
    erm_stability,
    exact_moments,
    fuk_nagaev_deviation,
    logistic,
    lp_deviation,
    lp_moment_bound,
    mcdiarmid_deviation,
    meta_learning_gap_bound,
    replace_one_differences,
    replace_one_stability,
    ridge,
    transductive_gap_bound,
)
from icml_tools.fuzz import Coverage, fuzz_call, rejects

FUZZ = Coverage()


# ---------------------------------------------------------------- exact enumeration and Rio's inequality
def brute_moments(values, marginals, p):
    """The same quantities by explicit loops over the product space (no broadcasting)."""
    shape = values.shape
    cells = list(itertools.product(*(range(k) for k in shape)))
    prob = {x: math.prod(marginals[i][x[i]] for i in range(len(x))) for x in cells}
    mean = sum(prob[x] * values[x] for x in cells)
    centered = sum(prob[x] * abs(values[x] - mean) ** p for x in cells) ** (1 / p)
    diffs = []
    for i, k in enumerate(shape):
        total = 0.0
        for x in cells:
            for y in range(k):
                x2 = (*x[:i], y, *x[i + 1 :])
                total += prob[x] * marginals[i][y] * abs(values[x] - values[x2]) ** p
        diffs.append(total ** (1 / p))
    return mean, centered, np.array(diffs)


tables = st.lists(st.integers(2, 3), min_size=1, max_size=8).flatmap(
    lambda shape: st.tuples(
        st.just(tuple(shape)),
        st.integers(0, 2**32 - 1),
        st.sampled_from(["gaussian", "heavy", "sparse"]),
        st.floats(2.0, 8.0),
    )
)


def random_case(shape, seed, kind):
    rng = np.random.default_rng(seed)
    if kind == "gaussian":
        values = rng.normal(size=shape)
    elif kind == "heavy":
        values = rng.standard_t(1.5, size=shape)
    else:  # a rare large value: heavy tails in the discrete world
        values = np.where(rng.random(shape) < 0.05, 50.0, 0.0) + rng.normal(size=shape) * 0.01
    marginals = [rng.dirichlet(np.ones(k) * 0.7) for k in shape]
    return values, marginals


@settings(max_examples=80, deadline=None)
@given(tables)
def test_rio_moment_inequality_holds_on_exactly_enumerated_functions(case):
    shape, seed, kind, p = case
    values, marginals = random_case(shape, seed, kind)
    ex = exact_moments(values, marginals, p)
    assert ex.centered <= lp_moment_bound(ex.differences, p) * (1 + 1e-12) + 1e-12
    # and the deviation bound that follows by Markov holds for the exact distribution
    delta = 0.05
    t = lp_deviation(ex.differences, p, delta)
    weight = np.ones(values.shape)
    for i, m in enumerate(marginals):
        weight = weight * m.reshape([-1 if j == i else 1 for j in range(values.ndim)])
    assert weight[np.abs(values - ex.mean) >= t].sum() <= delta + 1e-12


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(2, 3), min_size=1, max_size=4), st.integers(0, 2**32 - 1), st.floats(1.0, 5.0))
def test_exact_moments_equal_a_brute_force_loop(shape, seed, p):
    values, marginals = random_case(tuple(shape), seed, "gaussian")
    ex = exact_moments(values, marginals, p)
    mean, centered, diffs = brute_moments(values, marginals, p)
    assert ex.mean == pytest.approx(mean, rel=1e-12, abs=1e-12)
    assert ex.centered == pytest.approx(centered, rel=1e-10)
    np.testing.assert_allclose(ex.differences, diffs, rtol=1e-10)


def test_exact_moments_of_a_sum_of_fair_signs():
    # Z = sum of m Rademacher signs: c_i = ||X_i - X_i'||_p = 2 * P(X != X')^(1/p) = 2 * 2^(-1/p)
    m, p = 6, 4.0
    values = np.zeros((2,) * m)
    for x in itertools.product((0, 1), repeat=m):
        values[x] = sum(2 * b - 1 for b in x)
    ex = exact_moments(values, [np.array([0.5, 0.5])] * m, p)
    np.testing.assert_allclose(ex.differences, 2 * 0.5 ** (1 / p))
    # E Z^4 = 3 m^2 - 2 m for m signs
    assert ex.centered == pytest.approx((3 * m * m - 2 * m) ** 0.25, rel=1e-12)
    assert ex.mean == pytest.approx(0.0, abs=1e-12)


# ---------------------------------------------------------------- bound calculators: closed forms
def test_exact_moments_centre_accurately_when_the_spread_is_small_next_to_the_values():
    # Z = 1e16 + 2B, B a fair bit: ‖Z − EZ‖_2 = 1 exactly (every value representable); the old code took
    # the mean first and centred 1e16 + {0, 2} about the rounded 1e16, giving sqrt 2 (41 % high)
    ex = exact_moments(np.array([1e16, 1e16 + 2]), [np.array([0.5, 0.5])], 2)
    assert ex.centered == 1.0 and ex.mean == 1e16  # EZ = 1e16 + 1 rounds to 1e16 (ties to even)
    # a constant Φ has Z − EZ = 0: the old code gave 8.9e-16 (mean 7.000000000000001 from ten weights 0.1)
    assert exact_moments(np.full(10, 7.0), [np.full(10, 0.1)], 3).centered == 0.0
    # marginals are accepted when they sum to 1 within 1e-9 and are used normalized: the old code gave a
    # constant 1e6 the mean 1000000.0005 and ‖Z − EZ‖_2 = 5.0e-4
    ex = exact_moments(np.full(2, 1e6), [np.array([0.5, 0.5 + 5e-10])], 2)
    assert (ex.mean, ex.centered) == (1e6, 0.0)
    # against exact rational arithmetic on random tables with a large offset (p = 2): measured worst
    # relative error 4.2e-16 after the fix (4.38 before, over 1000 such tables); 1e-13 leaves a margin of 200
    rng = np.random.default_rng(0)
    for _ in range(40):
        shape = tuple(int(k) for k in rng.integers(1, 4, size=rng.integers(1, 4)))
        values = 10.0 ** rng.integers(0, 17) + 10.0 ** rng.integers(-5, 3) * rng.random(shape)
        marginals = [rng.dirichlet(np.ones(k)) for k in shape]
        exact = [[Fraction(float(x)) for x in m] for m in marginals]
        probs = [[x / sum(m) for x in m] for m in exact]
        cells = list(itertools.product(*(range(k) for k in shape)))
        w = {c: math.prod(probs[i][j] for i, j in enumerate(c)) for c in cells}
        mean = sum(w[c] * Fraction(float(values[c])) for c in cells)
        var = sum(w[c] * (Fraction(float(values[c])) - mean) ** 2 for c in cells)
        ex = exact_moments(values, marginals, 2)
        assert math.isclose(ex.centered, math.sqrt(var), rel_tol=1e-13, abs_tol=0.0)
        assert math.isclose(ex.mean, float(mean), rel_tol=1e-15)  # measured at most 1.4e-16 (1000 tables)


def test_each_bound_equals_its_closed_form_on_hand_worked_cases():
    c = np.array([0.1, 0.2, 0.2])  # sum of squares 0.09
    assert lp_moment_bound(c, 3.0) == pytest.approx(math.sqrt(2 * 0.09))
    assert lp_moment_bound(c, 3.0, constant=1.0) == pytest.approx(0.3)
    # delta = 0.1: L = log 10 = 2.3026 > 2, q* = L + sqrt(L^2 - 2L) = 3.1056, clipped to p = 3
    assert best_order(0.1, 3.0) == 3.0
    big_l = math.log(1000)
    assert best_order(1e-3, 50.0) == pytest.approx(big_l + math.sqrt(big_l**2 - 2 * big_l))
    assert best_order(0.2, 10.0) == 2.0  # L < 2: the lowest order
    assert lp_deviation(c, 3.0, 0.1, optimize_order=False) == pytest.approx(math.sqrt(0.18) * 10 ** (1 / 3))
    q = best_order(1e-3, 50.0)
    assert lp_deviation(c, 50.0, 1e-3) == pytest.approx(math.sqrt((q - 1) * 0.09) * 1000 ** (1 / q))
    # q* minimises the order's bound: no order on a grid does better
    grid = np.linspace(2, 50, 2000)
    assert lp_deviation(c, 50.0, 1e-3) <= np.min(np.sqrt((grid - 1) * 0.09) * 1000 ** (1 / grid)) + 1e-12
    assert mcdiarmid_deviation(c, 0.05) == pytest.approx(math.sqrt(0.09 * math.log(20) / 2))
    assert mcdiarmid_deviation(c, 0.05, two_sided=True) == pytest.approx(math.sqrt(0.09 * math.log(40) / 2))
    assert chebyshev_deviation(c, 0.04, two_sided=True) == pytest.approx(math.sqrt(0.045) / 0.2)
    assert chebyshev_deviation(c, 0.04) == pytest.approx(math.sqrt(0.045) * math.sqrt(0.96 / 0.04))
    # Fuk-Nagaev: the returned t solves A S_p / t^p + exp(-B t^2 / S_2) = delta
    p, delta = 3.0, 0.01
    t = fuk_nagaev_deviation(c, c, p, delta)
    a, b = (1 + 2 / p) ** p, 2 / ((p + 2) ** 2 * math.e**p)
    assert a * np.sum(c**p) / t**p + math.exp(-b * t * t / 0.09) == pytest.approx(delta, rel=1e-9)
    t2 = fuk_nagaev_deviation(c, c, p, delta, a=1.0, b=0.5, two_sided=True)
    assert np.sum(c**p) / t2**p + math.exp(-0.5 * t2 * t2 / 0.09) == pytest.approx(delta / 2, rel=1e-9)


def test_the_order_optimised_bound_reaches_the_sub_gaussian_rate_with_many_moments():
    n, delta = 1000, 1e-6
    c = np.full(n, 1 / n)
    sub_gaussian = math.sqrt(2 * math.e * np.sum(c**2) * math.log(1 / delta))
    assert lp_deviation(c, 100.0, delta) <= 1.05 * sub_gaussian
    assert lp_deviation(c, 2.0, delta) > 100 * sub_gaussian  # two moments: the polynomial rate


# ---------------------------------------------------------------- the replace-one estimator
def gaussian_mean_c(n, p):
    """c_p of the mean of n standard normals: (X_i - X_i')/n ~ N(0, 2/n^2)."""
    abs_moment = 2 ** (p / 2) * special.gamma((p + 1) / 2) / math.sqrt(math.pi)
    return math.sqrt(2) / n * abs_moment ** (1 / p)


def normal_rows(rng, k):
    return rng.normal(size=k)


def batched_mean(datasets):
    return datasets.mean(axis=1)


@pytest.mark.parametrize("p", [2.0, 3.0])
def test_replace_one_estimator_recovers_the_gaussian_mean_difference(p):
    n = 40
    est = replace_one_stability(batched_mean, normal_rows, n, p=p, n_pairs=20000, batched=True, seed=1)
    assert est.value == pytest.approx(gaussian_mean_c(n, p), rel=0.03)
    assert est.low <= gaussian_mean_c(n, p) <= est.high


def test_batched_and_looped_estimators_agree_exactly():
    looped = replace_one_differences(lambda s: float(s.mean()), normal_rows, 15, 300, chunk=64, seed=3)
    batched = replace_one_differences(batched_mean, normal_rows, 15, 300, batched=True, chunk=64, seed=3)
    again = replace_one_differences(batched_mean, normal_rows, 15, 300, batched=True, chunk=64, seed=3)
    np.testing.assert_allclose(looped, batched, rtol=0, atol=1e-13)
    np.testing.assert_array_equal(batched, again)


def test_confidence_intervals_cover_at_the_nominal_rate():
    # 200 repetitions of a 95% interval: the count of covers is Binomial(200, 0.95) if the interval is
    # exact; accept within 2.5 binomial standard deviations (about 182..198)
    n, p, reps = 25, 2.0, 200
    truth = gaussian_mean_c(n, p)
    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(reps):
        est = replace_one_stability(batched_mean, normal_rows, n, p=p, n_pairs=400, batched=True, seed=rng)
        covered += est.low <= truth <= est.high
    sd = math.sqrt(reps * 0.95 * 0.05)
    assert abs(covered - 0.95 * reps) <= 2.5 * sd, covered


def test_a_fixed_coordinate_is_estimated_alone():
    # Phi = 3 X_0 + X_1: c_0 = 3 sqrt(2), c_1 = sqrt(2) in L_2
    phi = lambda s: s[:, 0] * 3 + s[:, 1]  # noqa: E731
    for i, want in ((0, 3 * math.sqrt(2)), (1, math.sqrt(2))):
        est = replace_one_stability(phi, normal_rows, 2, coordinate=i, n_pairs=20000, batched=True, seed=i)
        assert est.value == pytest.approx(want, rel=0.03)


# ---------------------------------------------------------------- generalization bounds
def test_generalization_bounds_reduce_to_their_stated_formulas():
    n, p, delta, gamma, beta, moment = 200, 3.0, 0.05, 0.01, 0.002, 1.7
    c = 2 * beta + 2 * moment / n
    want = gamma + math.sqrt((p - 1) * n) * c * delta ** (-1 / p)
    kw = {"mean_stability": gamma, "stability": beta, "loss_moment": moment, "p": p, "deviation": "rio"}
    assert erm_gap_bound(n, delta, **kw) == pytest.approx(want, rel=1e-12)
    m, u = 150, 60
    c = 2 * beta + 2 * moment * (1 / m + 1 / u)
    want = gamma + math.sqrt((p - 1) * u) * c * delta ** (-1 / p)
    assert transductive_gap_bound(m, u, delta, **kw) == pytest.approx(want, rel=1e-12)
    tasks = 30
    want = gamma + math.sqrt((p - 1) * tasks) * (2 * beta + 2 * moment / tasks) * delta ** (-1 / p)
    assert meta_learning_gap_bound(tasks, delta, **kw) == pytest.approx(want, rel=1e-12)
    # pluggable constants
    kw["constants"] = (1.0, 0.5)
    want = gamma + math.sqrt((p - 1) * n) * (beta + 0.5 * moment / n) * delta ** (-1 / p)
    assert erm_gap_bound(n, delta, **kw) == pytest.approx(want, rel=1e-12)
    # every deviation is the concentration bound applied to the same n differences
    kw["constants"] = (2.0, 2.0)
    cs = np.full(n, 2 * beta + 2 * moment / n)
    for deviation, dev in (
        ("lp", lp_deviation(cs, p, delta)),
        ("fuk-nagaev", fuk_nagaev_deviation(cs, cs, p, delta)),
        ("chebyshev", chebyshev_deviation(cs, delta)),
    ):
        kw["deviation"] = deviation
        assert erm_gap_bound(n, delta, **kw) == pytest.approx(gamma + dev, rel=1e-12)


def test_ridge_and_logistic_fits_match_scikit_learn():
    sklearn_linear = pytest.importorskip("sklearn.linear_model")
    rng = np.random.default_rng(0)
    n, d, lam = 60, 4, 0.3
    x = rng.normal(size=(n, d))
    y = x @ rng.normal(size=d) + rng.normal(size=n)
    w = ridge(lam).fit(np.concatenate([x, y[:, None]], 1)[None])[0]
    ref = sklearn_linear.Ridge(alpha=n * lam, fit_intercept=False).fit(x, y).coef_
    np.testing.assert_allclose(w, ref, rtol=1e-10)
    labels = (rng.random(n) < 1 / (1 + np.exp(-x[:, 0]))).astype(float)
    w = logistic(lam).fit(np.concatenate([x, labels[:, None]], 1)[None])[0]
    ref = sklearn_linear.LogisticRegression(
        C=1 / (2 * n * lam), fit_intercept=False, tol=1e-12, max_iter=10000
    )
    np.testing.assert_allclose(w, ref.fit(x, labels).coef_[0], rtol=1e-6, atol=1e-9)


def test_ridge_fit_of_nearly_collinear_offset_features_matches_mpmath():
    # three sensors reading the same ~1e5 g mass: the normal equations square the condition number
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 60
    rng = np.random.default_rng(0)
    n, d, lam = 200, 3, 1e-4
    mass = 1e5 + 1e3 * rng.normal(size=n)
    x = mass[:, None] + 0.1 * rng.normal(size=(n, d))
    y = 2e-5 * mass + 0.1 * rng.normal(size=n)
    w = ridge(lam).fit(np.concatenate([x, y[:, None]], 1)[None])[0]
    xm, ym = mp.matrix(x.tolist()), mp.matrix(y.tolist())
    ref = mp.lu_solve((xm.T * xm) / n + lam * mp.eye(d), (xm.T * ym) / n)
    np.testing.assert_allclose(w, [float(v) for v in ref], rtol=1e-9)


def test_erm_stability_of_ridge_shrinks_like_one_over_n():
    d = 3

    def rows(rng, k):
        x = rng.normal(size=(k, d))
        return np.concatenate([x, (x.sum(1) + rng.normal(size=k))[:, None]], 1)

    small, large = (erm_stability(ridge(0.5), rows, n, n_pairs=4000, seed=0) for n in (25, 100))
    ratio = small.stability.value / large.stability.value
    assert 3.0 <= ratio <= 5.5  # beta_p ~ 1/n for a strongly convex, smooth objective
    assert small.mean_stability > 0  # replacing the point one is scored on raises its loss on average
    assert small.loss_moment > 0.5


# ---------------------------------------------------------------- bad input and fuzzing
def test_bad_input_names_the_argument():
    rejects(lp_deviation, [0.1], 1.5, 0.1, name="p")  # Rio's inequality needs p >= 2
    rejects(lp_moment_bound, [0.1], 1.0, name="p")
    for delta in (0.0, 1.0, -0.1, math.nan, 2.0):
        rejects(lp_deviation, [0.1], 2.0, delta, name="delta")
        rejects(mcdiarmid_deviation, [0.1], delta, name="delta")
    rejects(lp_deviation, [0.1, math.inf], 2.0, 0.1, name="c")
    rejects(chebyshev_deviation, [-0.1], 0.1, name="c2")
    rejects(fuk_nagaev_deviation, [0.1, 0.2], [0.1], 3.0, 0.1, name="c2")

    def nan_loss(datasets):
        return np.where(datasets.mean(axis=1) > 0, np.nan, 0.0)

    rejects(replace_one_stability, nan_loss, normal_rows, 10, batched=True, name="phi")
    rejects(
        replace_one_stability,
        batched_mean,
        lambda rng, k: np.full(k, np.inf),
        10,
        batched=True,
        name="sample",
    )
    rejects(
        erm_gap_bound, 10, 0.1, mean_stability=math.nan, stability=0.1, loss_moment=1.0, name="mean_stability"
    )
    rejects(erm_gap_bound, 10, 0.1, mean_stability=0.0, stability=0.1, loss_moment=1.0, p=1.5, name="p")
    rejects(
        erm_gap_bound,
        10,
        0.1,
        mean_stability=0.0,
        stability=0.1,
        loss_moment=1.0,
        deviation="mc",
        name="deviation",
    )
    rejects(exact_moments, np.ones((2, 2)), [np.array([0.5, 0.5])], 2.0, name="marginals")
    rejects(
        exact_moments, np.ones((2, 2)), [np.array([0.5, 0.6]), np.array([0.5, 0.5])], 2.0, name="marginals[0]"
    )


C = np.array([0.1, 0.05, 0.2])
SIZES = st.sampled_from([0, -1, 1, 2, 1.5, None, "5", True, 3.0])


@FUZZ.covers(lp_moment_bound, lp_deviation, best_order, mcdiarmid_deviation, chebyshev_deviation)
@settings(max_examples=120, deadline=None)
@given(st.data())
def test_fuzz_concentration_bounds(data):
    fn, valid = data.draw(
        st.sampled_from(
            [
                (lp_moment_bound, {"c": C, "p": 3.0}),
                (lp_deviation, {"c": C, "p": 3.0, "delta": 0.05, "two_sided": False}),
                (best_order, {"delta": 0.05, "p": 4.0}),
                (mcdiarmid_deviation, {"c": C, "delta": 0.05, "two_sided": True}),
                (chebyshev_deviation, {"c2": C, "delta": 0.05}),
            ]
        )
    )
    fuzz_call(data, fn, valid, check=lambda t: isinstance(t, float) and t >= 0)


@FUZZ.covers(fuk_nagaev_deviation)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_fuzz_fuk_nagaev(data):
    valid = {"c2": C, "cp": C * 1.5, "p": 3.0, "delta": 0.05, "a": 1.0, "b": 0.1}
    fuzz_call(data, fuk_nagaev_deviation, valid, related={"c2": ["cp"], "cp": ["c2"]}, check=lambda t: t > 0)


@FUZZ.covers(exact_moments)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_fuzz_exact_moments(data):
    valid = {
        "values": np.arange(6.0).reshape(2, 3),
        "marginals": [np.array([0.5, 0.5]), np.ones(3) / 3],
        "p": 2.0,
    }
    fuzz_call(
        data,
        exact_moments,
        valid,
        related={"values": ["marginals"]},
        check=lambda ex: (
            ex.centered <= lp_moment_bound(ex.differences, max(ex.p, 2.0)) + 1e-12
            if ex.p >= 2
            else ex.centered >= 0
        ),
    )


@FUZZ.covers(stab.stability_from_differences)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_fuzz_stability_from_differences(data):
    valid = {"differences": np.array([0.1, -0.3, 0.2, 0.05]), "p": 2.0, "confidence": 0.9}
    fuzz_call(data, stab.stability_from_differences, valid, check=lambda e: 0 <= e.low <= e.value <= e.high)


@FUZZ.covers(replace_one_stability, replace_one_differences)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_fuzz_replace_one(data):
    fn = data.draw(st.sampled_from([replace_one_stability, replace_one_differences]))
    valid = {"phi": batched_mean, "sample": normal_rows, "n": 5, "batched": True, "seed": 0}
    valid.update({"n_pairs": 50} if fn is replace_one_differences else {"p": 2.0, "confidence": 0.9})
    bad = st.sampled_from([None, 3, "mean"])  # a callable raising its own error is the caller's to see
    fuzz_call(
        data,
        fn,
        valid,
        # a huge n is a valid request that takes long, not bad input: the hostile sizes stay small
        strategies={
            "phi": bad,
            "sample": bad,
            "n": SIZES,
            **({"n_pairs": SIZES} if "n_pairs" in valid else {}),
        },
        related={"phi": ["batched"], "sample": ["n"]},
        check=lambda r: np.all(np.isfinite(r)) if isinstance(r, np.ndarray) else r.low <= r.value <= r.high,
    )


@FUZZ.covers(erm_gap_bound, transductive_gap_bound, meta_learning_gap_bound)
@settings(max_examples=120, deadline=None)
@given(st.data())
def test_fuzz_generalization_bounds(data):
    common = {"mean_stability": 0.01, "stability": 0.02, "loss_moment": 1.0, "p": 2.5, "deviation": "lp"}
    fn, valid = data.draw(
        st.sampled_from(
            [
                (erm_gap_bound, {"n": 100, "delta": 0.05, **common}),
                (transductive_gap_bound, {"m": 80, "u": 40, "delta": 0.05, **common}),
                (meta_learning_gap_bound, {"n_tasks": 20, "delta": 0.05, **common, "constants": (1.0, 1.0)}),
            ]
        )
    )
    fuzz_call(
        data,
        fn,
        valid,
        # any finite real is a valid mean stability (it may be negative); NaN is refused in the bad-input test
        mutate=[k for k in valid if k != "mean_stability"],
        strategies={"deviation": st.sampled_from(["LP", "mcdiarmid", None, 3, *DEVIATIONS])},
        check=lambda b: b >= valid["mean_stability"],  # inf only with the overflow warning
    )


@FUZZ.covers(ridge, logistic, erm_stability, ERMModel)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_fuzz_erm(data):
    def rows(rng, k):
        x = rng.normal(size=(k, 2))
        return np.concatenate([x, (rng.random((k, 1)) < 0.5)], 1)

    which = data.draw(st.sampled_from(["ridge", "logistic", "stability"]))
    if which == "ridge":
        fuzz_call(data, ridge, {"lam": 0.5}, check=lambda m: isinstance(m, ERMModel))
    elif which == "logistic":
        fuzz_call(data, logistic, {"lam": 0.5, "iterations": 20}, check=lambda m: isinstance(m, ERMModel))
    else:
        fuzz_call(
            data,
            erm_stability,
            {"model": logistic(0.5), "sample": rows, "n": 8, "p": 2.0, "n_pairs": 20, "seed": 0},
            strategies={
                "model": st.sampled_from([None, ridge, "ridge", 1.0]),
                "sample": st.sampled_from([None, 2]),
                "n": SIZES,
                "n_pairs": SIZES,
            },
            related={"sample": ["n"]},
            check=lambda s: s.stability.value >= 0 and s.loss_moment > 0,
        )


FUZZ.exempt(stab.StabilityEstimate, "result container built by replace_one_stability and erm_stability")
FUZZ.exempt(stab.ExactMoments, "result container built by exact_moments")
FUZZ.exempt(stab.ERMStability, "result container built by erm_stability")


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(stab)
