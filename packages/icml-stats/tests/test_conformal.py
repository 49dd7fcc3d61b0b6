"""Split conformal: the finite-sample quantile, the marginal guarantee over many seeds, bad input."""

import math

import numpy as np
import pytest
from sklearn.dummy import DummyRegressor
from sklearn.linear_model import LinearRegression

from icml_stats.conformal import conformal_quantile, coverage, split_conformal_interval

# the v0 one-shot functions are deprecated wrappers of the estimators (their warning is checked in
# test_conformal_estimators.py); these tests keep their numbers as they were
pytestmark = pytest.mark.filterwarnings("ignore:.* is deprecated and will be removed:DeprecationWarning")


def test_quantile_by_hand():
    scores = [3.0, 1.0, 2.0, 5.0, 4.0]  # n = 5
    assert conformal_quantile(scores, 0.2) == 5.0  # ceil(6 * 0.8) = ceil(4.8) = 5
    assert conformal_quantile(scores, 0.4) == 4.0  # ceil(6 * 0.6) = ceil(3.6) = 4
    assert conformal_quantile(scores, 0.5) == 3.0  # ceil(6 * 0.5) = 3 exactly, no float push to 4
    with pytest.warns(UserWarning, match=r"alpha = 0.1 is below 1/\(n \+ 1\) = 0.167 for n = 5"):
        assert conformal_quantile(scores, 0.1) == math.inf  # ceil(5.4) = 6 > n: trivial sets, said aloud
    assert conformal_quantile(np.arange(1.0, 20.0), 0.1) == 18.0  # n = 19: ceil(20 * 0.9) = 18


def test_interval_by_hand():
    # a constant-zero model: the calibration residuals are |y| and the interval is [-q, q]
    X = np.zeros((5, 1))
    intervals = split_conformal_interval(
        DummyRegressor(strategy="constant", constant=0.0),
        X,
        np.zeros(5),
        X,
        np.array([1.0, -2, 3, 4, -5]),
        np.zeros((3, 1)),
        alpha=0.2,
    )
    np.testing.assert_array_equal(intervals, [[-5.0, 5.0]] * 3)
    assert coverage([4.9, -5.0, 5.1], intervals) == pytest.approx(2 / 3)


def test_marginal_coverage_over_many_seeds():
    # n_calib = 14, alpha = 0.1: rank ceil(15 * 0.9) = 14, so E[coverage] = 14/15 exactly for
    # continuous exchangeable data; the plain 0.9 quantile would give about 0.87 instead.
    rng = np.random.default_rng(0)
    covered = []
    for _ in range(400):
        X = rng.normal(size=(164, 2))
        y = X @ np.array([1.0, -2.0]) + rng.standard_t(df=3, size=164)  # heavy-tailed noise
        intervals = split_conformal_interval(
            LinearRegression(), X[:50], y[:50], X[50:64], y[50:64], X[64:], alpha=0.1
        )
        covered.append(coverage(y[64:], intervals))
    # SE of the mean over 400 repetitions: sqrt(Var Beta(14, 2) / 400) + test noise ~ 0.004
    assert np.mean(covered) == pytest.approx(14 / 15, abs=0.015)


def test_estimator_is_cloned():
    model = LinearRegression()
    X = np.arange(20.0).reshape(10, 2)
    split_conformal_interval(model, X, np.arange(10.0), X, np.arange(10.0), X, alpha=0.5)
    assert not hasattr(model, "coef_")


@pytest.mark.parametrize(
    ("alpha", "error"),
    [
        (0, ValueError),
        (1, ValueError),
        (1.5, ValueError),
        (-0.1, ValueError),
        (float("nan"), ValueError),
        (True, TypeError),
        ("0.1", TypeError),
    ],
)
def test_bad_alpha(alpha, error):
    with pytest.raises(error, match="alpha"):
        conformal_quantile([1.0, 2.0], alpha)


def test_bad_data():
    X, y = np.zeros((4, 1)), np.zeros(4)
    model = LinearRegression()
    with pytest.raises(ValueError, match=r"y_calib must have shape \(4,\) \(one per row of X_calib\)"):
        split_conformal_interval(model, X, y, X, y[:3], X)
    with pytest.raises(ValueError, match=r"y_fit must have shape \(2,\)"):
        split_conformal_interval(model, X[:2], y, X, y, X)
    with pytest.raises(ValueError, match="y_calib must not contain NaN"):
        split_conformal_interval(model, X, y, X, np.array([0.0, np.nan, 0, 0]), X)
    with pytest.raises(ValueError, match="X_test must be finite"):
        split_conformal_interval(model, X, y, X, y, np.array([[np.inf]]))
    with pytest.raises(ValueError, match=r"X_test must have shape \(n_test, 1\)"):
        split_conformal_interval(model, X, y, X, y, np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"X_fit must have shape \(n_fit, n_features\)"):
        split_conformal_interval(model, np.zeros(4), y, X, y, X)
    with pytest.raises(ValueError, match="scores must not contain NaN"):
        conformal_quantile([1.0, np.nan], 0.1)


def test_bad_coverage_input():
    with pytest.raises(ValueError, match=r"intervals must have shape \(2, 2\)"):
        coverage([0.0, 1.0], [[0.0, 1.0]])
    with pytest.raises(ValueError, match="lower <= upper"):
        coverage([0.0], [[1.0, 0.0]])
    with pytest.raises(ValueError, match="intervals must not contain NaN"):
        coverage([0.0], [[np.nan, 1.0]])
    with pytest.raises(ValueError, match="y must not contain NaN"):
        coverage([np.nan], [[0.0, 1.0]])


def test_coverage_of_mapie_level_layout_matches_mapie():
    # predict_interval's y_pis are (n, 2, n_levels) (MAPIE v1); coverage refused them ("intervals must
    # have shape (n, 2)") where MAPIE 1.6's regression_coverage_score gives one coverage per level
    from mapie.metrics.regression import regression_coverage_score
    from sklearn.neighbors import KNeighborsRegressor

    from icml_stats.conformal import SplitConformalRegressor

    rng = np.random.default_rng(0)
    for k in (1, 3):
        y = rng.normal(size=200)
        bounds = np.sort(rng.normal(size=(200, 2, k)), axis=1)
        # ties on both bounds: MAPIE's (and our) bounds are inclusive
        bounds[:20, 0, :], bounds[:20, 1, :] = y[:20, None], np.maximum(bounds[:20, 1, :], y[:20, None])
        bounds[20:40, 1, :], bounds[20:40, 0, :] = (
            y[20:40, None],
            np.minimum(bounds[20:40, 0, :], y[20:40, None]),
        )
        got = coverage(y, bounds)
        expected = regression_coverage_score(y, bounds)
        assert isinstance(got, np.ndarray) and got.dtype == np.float64 and got.shape == (k,)
        np.testing.assert_array_equal(got, expected)  # bit-equal
        assert np.all(got >= 40 / 200)  # the 40 tied rows are covered at every level
        for j in range(k):  # each level is the (n, 2) coverage of its slice, still a float
            sliced = coverage(y, bounds[:, :, j])
            assert type(sliced) is float and sliced == got[j]
    X = rng.uniform(size=(900, 1))
    y = np.sin(6 * X[:, 0]) + 0.3 * rng.standard_normal(900)
    model = KNeighborsRegressor(20).fit(X[:300], y[:300])
    scr = SplitConformalRegressor(model, confidence_level=[0.5, 0.8, 0.9], prefit=True)
    _, y_pis = scr.conformalize(X[300:600], y[300:600]).predict_interval(X[600:])
    got = coverage(y[600:], y_pis)
    np.testing.assert_array_equal(got, regression_coverage_score(y[600:], y_pis))
    assert got.shape == (3,) and np.all(np.diff(got) > 0)  # coverage grows with the level
    np.testing.assert_array_equal(coverage(y[600:], y_pis[:, :, 1:2]), got[1:2])  # (n, 2, 1)


def test_coverage_of_mapie_target_layouts_matches_mapie():
    # MAPIE 1.6's regression_coverage_score also takes y as a column (n, 1) and, with (n, 2, k)
    # intervals, as (n, k): column j the targets of level j; ours refused both ("y must have shape (n,)")
    from mapie.metrics.regression import regression_coverage_score

    rng = np.random.default_rng(1)
    y, Y = rng.normal(size=200), rng.normal(size=(200, 3))
    bounds = np.sort(1.3 * rng.normal(size=(200, 2, 3)), axis=1)
    # ties with the per-level targets: closed bounds, covered
    bounds[:10, 0, :], bounds[:10, 1, :] = Y[:10], np.maximum(bounds[:10, 1, :], Y[:10])
    got = coverage(Y, bounds)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64 and got.shape == (3,)
    np.testing.assert_array_equal(got, regression_coverage_score(Y, bounds))  # bit-equal
    for j in range(3):  # level j is the coverage of its own targets
        assert got[j] == coverage(Y[:, j], bounds[:, :, j])
    # measured: [0.415, 0.42, 0.375] with per-level targets, [0.425, 0.395, 0.36] with one y
    assert not np.array_equal(got, coverage(y, bounds))
    np.testing.assert_array_equal(coverage(y[:, None], bounds), regression_coverage_score(y[:, None], bounds))
    np.testing.assert_array_equal(coverage(y[:, None], bounds), coverage(y, bounds))
    column = coverage(y[:, None], bounds[:, :, 0])  # (n, 2) intervals still give a float
    assert type(column) is float and column == regression_coverage_score(y[:, None], bounds[:, :, 0])[0]
    # what MAPIE only broadcasts is refused: k targets against one interval, k != n_levels
    with pytest.raises(ValueError, match=r"y of shape \(200, 3\) .* needs intervals of shape \(200, 2, 3\)"):
        coverage(Y, bounds[:, :, 0])
    with pytest.raises(ValueError, match=r"y of shape \(200, 2\) must have one column per confidence level"):
        coverage(Y[:, :2], bounds)
    with pytest.raises(ValueError, match=r"y must have shape \(n,\) or \(n, 1\)"):
        coverage(Y[:, :, None], bounds)
    with pytest.raises(ValueError, match=r"intervals must have shape \(200, 2, n_levels\)"):
        coverage(Y, bounds[:100])


def test_bad_level_layout_input():
    ok = np.zeros((3, 2, 2))
    with pytest.raises(ValueError, match=r"intervals must have shape \(3, 2, n_levels\)"):
        coverage(np.zeros(3), np.zeros((3, 3, 2)))
    with pytest.raises(ValueError, match=r"intervals must have shape \(4, 2, n_levels\)"):
        coverage(np.zeros(4), ok)
    with pytest.raises(ValueError, match=r"intervals must have shape \(3, 2, n_levels\)"):
        coverage(np.zeros(3), np.zeros((3, 2, 0)))
    with pytest.raises(ValueError, match=r"intervals must have shape \(3, 2\) .* or \(3, 2, n_levels\)"):
        coverage(np.zeros(3), np.zeros((3, 2, 1, 1)))
    bad = ok.copy()
    bad[1, 0, 1] = 1.0
    with pytest.raises(ValueError, match="intervals must have lower <= upper in every row and level"):
        coverage(np.zeros(3), bad)
    bad[1, 0, 1] = np.nan
    with pytest.raises(ValueError, match="intervals must not contain NaN"):
        coverage(np.zeros(3), bad)
    with pytest.raises(TypeError, match="intervals must be an array of real numbers"):
        coverage(np.zeros(3), ok.astype(complex))


@pytest.mark.parametrize(
    ("y_shape", "bounds_shape"), [((0,), (0, 2)), ((0, 1), (0, 2)), ((0, 3), (0, 2, 3)), ((0,), (0, 2, 3))]
)
def test_coverage_of_no_targets_raises(y_shape, bounds_shape):
    # taking MAPIE's (n, 1) and (n, n_levels) targets dropped the n >= 1 check: these gave NaN and a
    # RuntimeWarning ("Mean of empty slice")
    with pytest.raises(ValueError, match=r"y must have shape"):
        coverage(np.zeros(y_shape), np.zeros(bounds_shape))
