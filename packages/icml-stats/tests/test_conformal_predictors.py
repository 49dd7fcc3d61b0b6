"""Locally weighted conformal, CQR, LAC and APS: marginal coverage over many seeds, scores by hand."""

import numpy as np
import pytest
from sklearn.linear_model import LinearRegression, LogisticRegression, QuantileRegressor

from icml_stats.conformal import aps_sets, cqr_interval, lac_sets, normalized_conformal_interval
from icml_stats.conformal.classification import aps_scores
from icml_stats.coverage import ert

# the v0 one-shot functions are deprecated wrappers of the estimators (their warning is checked in
# test_conformal_estimators.py); these tests keep their numbers as they were
pytestmark = pytest.mark.filterwarnings("ignore:.* is deprecated and will be removed:DeprecationWarning")

LOW, HIGH = QuantileRegressor(quantile=0.05, alpha=0.0), QuantileRegressor(quantile=0.95, alpha=0.0)


def _regression(rng, n):
    x = rng.uniform(0, 1, size=(n, 1))
    return x, 2 * x[:, 0] + (0.1 + x[:, 0]) * rng.standard_normal(n)


def test_regression_methods_keep_marginal_coverage():
    # n_calib = 19, alpha = 0.1: the threshold is the 18th of 19 scores, so E[coverage] = 18/20 = 0.9
    rng = np.random.default_rng(0)
    cov = {"normalized": [], "cqr": []}
    for _ in range(150):
        x, y = _regression(rng, 319)
        parts = (x[:100], y[:100], x[100:119], y[100:119], x[119:])
        nrm = normalized_conformal_interval(LinearRegression(), *parts, alpha=0.1)
        cqr = cqr_interval(*parts, alpha=0.1, lower_estimator=LOW, upper_estimator=HIGH)
        cov["normalized"].append(np.mean((nrm[:, 0] <= y[119:]) & (y[119:] <= nrm[:, 1])))
        cov["cqr"].append(np.mean((cqr[:, 0] <= y[119:]) & (y[119:] <= cqr[:, 1])))
    for name, values in cov.items():
        # SE over 150 repetitions: sqrt(Var Beta(18, 2) / 150) ~ 0.0055
        assert np.mean(values) == pytest.approx(0.9, abs=0.02), name


def test_normalized_widths_follow_the_noise_and_fix_conditional_coverage():
    rng = np.random.default_rng(1)
    x, y = _regression(rng, 6000)
    parts = (x[:2000], y[:2000], x[2000:3000], y[2000:3000], x[3000:])
    from sklearn.ensemble import GradientBoostingRegressor

    nrm = normalized_conformal_interval(
        LinearRegression(), *parts, alpha=0.1, scale_estimator=GradientBoostingRegressor(max_depth=2)
    )
    width = nrm[:, 1] - nrm[:, 0]
    assert width[x[3000:, 0] > 0.8].mean() > 3 * width[x[3000:, 0] < 0.2].mean()


def test_aps_scores_by_hand():
    proba = np.array([[0.5, 0.3, 0.2]])
    np.testing.assert_allclose(aps_scores(proba, np.ones(1)), [[0.5, 0.8, 1.0]])
    np.testing.assert_allclose(aps_scores(proba, np.full(1, 0.5)), [[0.25, 0.65, 0.9]])


def _classification(rng, n):
    x = rng.normal(size=(n, 2))
    logits = np.stack([x[:, 0], x[:, 1], -x[:, 0] - x[:, 1]], axis=1)
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    return x, y


@pytest.mark.parametrize("method", ["lac", "aps", "aps_randomized"])
def test_classification_sets_keep_marginal_coverage(method):
    rng = np.random.default_rng(2)
    covered = []
    for rep in range(100):
        x, y = _classification(rng, 419)
        parts = (LogisticRegression(), x[:200], y[:200], x[200:219], y[200:219], x[219:])
        if method == "lac":
            sets = lac_sets(*parts, alpha=0.1)
        else:
            sets = aps_sets(*parts, alpha=0.1, randomized=method == "aps_randomized", random_state=rep)
        assert sets.shape == (200, 3) and sets.dtype == bool
        covered.append(sets[np.arange(200), y[219:]].mean())
    # n_calib = 19: E[coverage] = 18/20 = 0.9 exactly for LAC and randomised APS (continuous scores);
    # deterministic APS only adds mass, so it covers at least as often. SE over 100 repetitions ~ 0.007.
    if method == "aps":
        assert np.mean(covered) > 0.9 - 0.02
    else:
        assert np.mean(covered) == pytest.approx(0.9, abs=0.02)


def test_sets_feed_the_diagnostics():
    rng = np.random.default_rng(3)
    x, y = _classification(rng, 1500)
    sets = lac_sets(LogisticRegression(), x[:500], y[:500], x[500:1000], y[500:1000], x[1000:], alpha=0.1)
    r = ert(x[1000:], None, 0.9, y=y[1000:], y_sets=sets, classifier=LogisticRegression(), random_state=0)
    assert np.isfinite(r.estimate) and r.proba.shape == (500,)


def test_bad_classification_input():
    x = np.zeros((4, 1))
    with pytest.raises(ValueError, match="y_fit must contain every class"):
        lac_sets(LogisticRegression(), x, [0, 2, 2, 0], x, [0, 0, 0, 0], x)
    with pytest.raises(ValueError, match="integer class indices"):
        aps_sets(LogisticRegression(), x, [0.5, 1, 1, 0], x, [0, 0, 0, 0], x)
    with pytest.raises(ValueError, match="unseen in y_fit"):
        lac_sets(LogisticRegression(), x, [0, 1, 1, 0], x, [0, 5, 0, 0], x)
    with pytest.raises(ValueError, match="alpha"):
        cqr_interval(x, np.zeros(4), x, np.zeros(4), x, alpha=1.0)


@pytest.mark.parametrize("method", [lac_sets, aps_sets])
def test_string_labels_give_the_sets_of_their_sorted_indices(method):
    """Issue 22, item 8: string labels failed with "could not convert string to float"."""
    rng = np.random.default_rng(4)
    x, y = _classification(rng, 300)
    names = np.array(["setosa", "versicolor", "virginica"])[y]  # sorted, so column k is names' k-th
    by_index = method(LogisticRegression(), x[:100], y[:100], x[100:200], y[100:200], x[200:], alpha=0.1)
    by_name = method(
        LogisticRegression(), x[:100], names[:100], x[100:200], names[100:200], x[200:], alpha=0.1
    )
    np.testing.assert_array_equal(by_name, by_index)
    with pytest.raises(ValueError, match="y_calib has the label 'daisy', unseen in y_fit"):
        method(LogisticRegression(), x[:100], names[:100], x[100:102], ["setosa", "daisy"], x[200:])
    with pytest.raises(TypeError, match="one sortable kind"):
        method(
            LogisticRegression(), x[:4], np.array(["a", 1, "b", 2], dtype=object), x[:2], ["a", "b"], x[:2]
        )
