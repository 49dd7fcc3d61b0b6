"""ERT: equality with a straightforward re-computation, the over/under split, the z-test, the input contract."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold, ShuffleSplit, StratifiedKFold

from icml_stats.coverage import ert, ert_from_proba, excess_risk_target_coverage, pointwise_loss


def _data(n=600, delta=0.08, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 3))
    p = 0.9 + delta * np.sin(np.pi * x[:, 0])  # true conditional coverage
    return x, (rng.random(n) < p).astype(int), p


def test_l2_equals_a_straightforward_computation():
    x, z, _ = _data()
    t = 0.9
    result = ert(x, z, t, loss="l2", classifier=LogisticRegression(C=0.5), cv=5, random_state=3)
    # independent computation: the same folds, a fresh model per fold, Brier of t minus Brier of p_hat
    fold_values = []
    for train, test in KFold(5, shuffle=True, random_state=3).split(x):
        model = LogisticRegression(C=0.5).fit(x[train], z[train])
        p_hat = model.predict_proba(x[test])[:, 1]
        fold_values.append(np.mean((t - z[test]) ** 2) - np.mean((p_hat - z[test]) ** 2))
    assert result.estimate == pytest.approx(np.mean(fold_values), abs=1e-10)
    np.testing.assert_allclose(result.fold_estimates, fold_values, atol=1e-10)
    assert result.proba.shape == (600,) and np.all((result.proba > 0) & (result.proba < 1))


@pytest.mark.parametrize("loss", ["l1", "l2", "kl"])
def test_over_plus_under_is_the_whole(loss):
    x, z, _ = _data(seed=1)
    t = np.linspace(0.85, 0.95, x.shape[0])  # non-constant target
    parts = {
        side: ert(x, z, t, loss=loss, side=side, classifier=LogisticRegression(), cv=4, random_state=0)
        for side in (None, "over", "under")
    }
    assert abs(parts[None].estimate - parts["over"].estimate - parts["under"].estimate) < 1e-12
    np.testing.assert_allclose(
        parts["over"].per_sample + parts["under"].per_sample, parts[None].per_sample, atol=1e-12
    )


def test_losses_by_hand():
    q, z, t = np.array([0.8, 0.95, 0.9, 0.7]), np.array([1.0, 0.0, 1.0, 0.0]), np.full(4, 0.9)
    np.testing.assert_allclose(pointwise_loss(q, z, t, "l2"), [0.04, 0.9025, 0.01, 0.49])
    np.testing.assert_allclose(pointwise_loss(q, z, t, "kl"), -np.log([0.8, 0.05, 0.9, 0.3]))
    # sign(q - t)(t - z): below target -0.1*(-1)... each by hand
    np.testing.assert_allclose(pointwise_loss(q, z, t, "l1"), [0.1, 0.9, 0.0, -0.9])


def test_true_probabilities_give_the_miscoverage():
    # with p_hat = p the expected L1-ERT is E|p - t| and the expected L2-ERT is E(p - t)^2
    rng = np.random.default_rng(5)
    n = 200_000
    p = rng.uniform(0.75, 0.99, n)
    z = (rng.random(n) < p).astype(int)
    fold = np.arange(n) % 5
    l1 = ert_from_proba(z, p, fold, 0.9, loss="l1")
    l2 = ert_from_proba(z, p, fold, 0.9, loss="l2")
    assert l1.estimate == pytest.approx(np.mean(np.abs(p - 0.9)), abs=4 * l1.std_error)
    assert l2.estimate == pytest.approx(np.mean((p - 0.9) ** 2), abs=4 * l2.std_error)
    assert l1.p_value < 1e-10 and l1.lower_bound > 0


def test_z_test_is_calibrated_under_the_null():
    # p_hat independent of the covers, covers at the target: L1 differences have mean exactly 0
    rng = np.random.default_rng(7)
    rejections = []
    for _ in range(400):
        z = (rng.random(500) < 0.9).astype(int)
        p_hat = rng.uniform(0.8, 1.0, 500)
        rejections.append(ert_from_proba(z, p_hat, np.arange(500) % 5, 0.9, loss="l1").p_value < 0.05)
    rate = np.mean(rejections)
    assert 0.05 - 3 * np.sqrt(0.05 * 0.95 / 400) < rate < 0.05 + 3 * np.sqrt(0.05 * 0.95 / 400)


def test_detects_a_violation_and_not_a_correct_target():
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, size=(1500, 2))
    t = 0.8 + 0.15 * (x[:, 0] > 0)  # a non-constant target, met exactly
    z = (rng.random(1500) < t).astype(int)
    clf = LogisticRegression()
    right = ert(x, z, t, loss="l1", classifier=clf, random_state=0)
    wrong = ert(x, z, float(t.mean()), loss="l1", classifier=clf, random_state=0)
    assert right.p_value > 0.01
    assert wrong.p_value < 1e-6 and wrong.estimate > 0.05


def test_raw_intervals_and_sets_give_the_covers():
    x, z, _ = _data(n=200)
    y = np.zeros(200)
    intervals = np.where(z[:, None] == 1, [[-1.0, 1.0]], [[0.5, 1.0]])  # (200, 2): covers y = 0 iff z
    sets = np.stack([z == 1, z == 0], axis=1)  # class 0 in the set iff covered
    kwargs = {"loss": "l2", "classifier": LogisticRegression(), "random_state": 0}
    base = ert(x, z, 0.9, **kwargs).estimate
    assert ert(x, None, 0.9, y=y, y_intervals=intervals, **kwargs).estimate == base
    assert ert(x, None, 0.9, y=y, y_intervals=intervals[:, :, None], **kwargs).estimate == base
    assert ert(x, None, 0.9, y=y.astype(int), y_sets=sets, **kwargs).estimate == base
    assert excess_risk_target_coverage(x, y, 0.9, y_sets=sets[:, :, None], **kwargs) == base


def test_any_partitioning_splitter():
    x, z, _ = _data(n=300)
    r = ert(x, z, 0.9, classifier=LogisticRegression(), cv=StratifiedKFold(3, shuffle=True, random_state=0))
    assert r.fold_estimates.shape == (3,)
    with pytest.raises(ValueError, match="exactly one test fold"):
        ert(x, z, 0.9, classifier=LogisticRegression(), cv=ShuffleSplit(3, test_size=0.2, random_state=0))


def test_default_classifier_runs_with_few_misses():
    # n = 600: training folds of 480, large enough for the boosting default (early stopping switched off)
    x, _, _ = _data(n=600)
    z = np.ones(600, dtype=int)
    z[:5] = 0  # a fold may see no miss at all: the fit is then the constant
    r = ert(x, z, 0.9, loss="kl", random_state=0)
    assert np.isfinite(r.estimate)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"cover": np.ones(9)}, r"cover must have shape \(10,\) \(one entry per row of x\)"),
        ({"cover": np.r_[np.ones(9), 2.0]}, "cover must be binary"),
        ({"cover": np.r_[np.ones(9), np.nan]}, "cover must not contain NaN"),
        ({"cover": np.ones(10), "confidence_level": 1.0}, r"confidence_level must lie in \(0, 1\)"),
        (
            {"cover": np.ones(10), "confidence_level": np.full(9, 0.9)},
            r"confidence_level must have shape \(10,\)",
        ),
        (
            {"cover": np.ones(10), "confidence_level": np.r_[np.full(9, 0.9), np.nan]},
            "confidence_level must not contain NaN",
        ),
        ({"cover": np.ones(10), "loss": "l3"}, "loss must be one of"),
        ({"cover": np.ones(10), "side": "both"}, "side must be one of"),
        ({"cover": np.ones(10), "cv": 1}, r"cv == 1, must be >= 2"),
        ({}, "pass exactly one of cover"),
        ({"y_intervals": np.zeros((10, 2))}, "y_intervals needs the true outcomes y"),
        ({"y": np.zeros(10), "y_intervals": np.zeros((10, 3))}, r"y_intervals must have shape \(10, 2\)"),
        ({"y": np.zeros(10), "y_intervals": np.zeros((10, 2, 3))}, "holds 3 confidence levels"),
        ({"y": np.zeros(10), "y_intervals": np.tile([1.0, 0.0], (10, 1))}, "lower <= upper"),
        ({"y": np.full(10, 2), "y_sets": np.ones((10, 2), bool)}, r"class indices in \[0, 2\)"),
        ({"y": np.full(10, 0.5), "y_sets": np.ones((10, 2), bool)}, "integer class indices"),
    ],
)
def test_bad_input(kwargs, match):
    x = np.zeros((10, 2))
    kwargs = {"confidence_level": 0.9, **kwargs}
    cover = kwargs.pop("cover", None)
    with pytest.raises(ValueError, match=match):
        ert(x, cover, **kwargs)


def test_bad_types_and_features():
    with pytest.raises(ValueError, match="x must not contain NaN"):
        ert(np.full((4, 1), np.nan), np.ones(4))
    with pytest.raises(TypeError, match="classifier must be a scikit-learn classifier"):
        ert(np.zeros((4, 1)), np.ones(4), classifier=object())
    with pytest.raises(TypeError, match="cv must be an int"):
        ert(np.zeros((4, 1)), np.ones(4), cv="five")
    with pytest.raises(TypeError, match="confidence_level must be a number"):
        ert(np.zeros((4, 1)), np.ones(4), confidence_level=True)


def test_cross_fitted_test_is_valid_under_the_null():
    # a classifier that predicts the training folds' coverage: its sign(p_hat - t) is the same in
    # every fold and tracks the overall coverage, the case where pooling all n differences into one
    # z-test over-rejects (the folds are dependent); the fold-wise Bonferroni test must not.
    from sklearn.dummy import DummyClassifier

    rng = np.random.default_rng(11)
    p_values = []
    for _ in range(400):
        x = rng.normal(size=(300, 2))
        z = (rng.random(300) < 0.9).astype(int)
        r = ert(x, z, 0.9, loss="l1", classifier=DummyClassifier(strategy="prior"), cv=5, random_state=0)
        p_values.append(r.p_value)
    assert np.mean(np.array(p_values) < 0.05) <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 400)


# Issue 22, item 3: the lower confidence bound at small n, level/alpha mix-ups, small folds.


def _null_data(n, rng, t=0.9):
    """Correct conditional coverage: covers Bernoulli(t) independent of x ~ N(0, I_2)."""
    return rng.normal(size=(n, 2)), (rng.random(n) < t).astype(int)


def test_bound_never_exceeds_the_estimate_at_n_12():
    # the mechanism: a fold of 3 samples predicted below target and all missed gives per-sample
    # L1 differences 0.9 with sample sd 0; the old bound (largest per-fold mean - z sd / sqrt(n_k)) was
    # 0.9 against an estimate of 0.093 here (0.9 against 0.167 in the issue)
    fold = np.array([0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 0, 1])
    proba = np.where(fold == 0, 0.5, 0.95)
    z = np.array([0, 0, 1, 0, 1, 1, 1, 0, 1, 1, 0, 1])
    for loss in ("l1", "l2", "kl"):
        for side in (None, "over", "under"):
            r = ert_from_proba(z, proba, fold, 0.9, loss=loss, side=side)
            assert r.lower_bound <= r.estimate
            assert r.lower_bound < 0  # 12 samples cannot establish miscoverage at level 0.95


def test_bound_is_the_finite_sample_formula():
    rng = np.random.default_rng(1)
    z = (rng.random(100) < 0.9).astype(int)
    fold = np.arange(100) % 4
    r = ert_from_proba(z, rng.uniform(0.8, 1.0, 100), fold, 0.9, loss="l1", level=0.9)
    # L1 differences at t = 0.9 lie in [-0.9, 0.9]; four folds of 25: eps = w sqrt(mean(1/n_k) log(1/a) / 2)
    assert r.lower_bound == pytest.approx(r.estimate - 1.8 * np.sqrt(np.log(10) / 25 / 2), abs=1e-12)


def test_default_classifier_at_small_n_warns_and_is_bounded():
    rng = np.random.default_rng(0)
    x, z = _null_data(12, rng)
    with pytest.warns(UserWarning, match="folds too small for the gradient-boosting classifier"):
        r = ert(x, z, 0.9, random_state=0)
    assert r.lower_bound <= r.estimate and r.lower_bound < 0


def test_n_60_with_the_default_classifier_is_quick_and_warns():
    # the default boosting (min_samples_leaf 200) cannot split folds of 48: it used to boost 500
    # constant trees per fold (80 s on 2 cores); now a logistic regression is used there, with a warning
    rng = np.random.default_rng(3)
    x, z = _null_data(60, rng)
    with pytest.warns(
        UserWarning, match=r"training fold of 48 leaves only 48.*replaced by a standardised logistic"
    ):
        r = ert(x, z, 0.9, loss="l2", random_state=0)
    assert np.isfinite(r.estimate) and r.lower_bound <= r.estimate
    assert np.unique(np.round(r.proba, 12)).size > 5  # not the constant fit of trees that cannot split


def test_small_folds_warn_for_a_given_boosting_classifier():
    from sklearn.ensemble import HistGradientBoostingClassifier

    rng = np.random.default_rng(4)
    x, z = _null_data(100, rng)
    clf = HistGradientBoostingClassifier(min_samples_leaf=200, max_iter=3)
    with pytest.warns(UserWarning, match="pass a classifier suited to small samples"):
        ert(x, z, 0.9, classifier=clf, random_state=0)


def test_no_small_fold_warning_with_enough_data():
    import warnings

    x, z, _ = _data(n=3000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ert(x, z, 0.9, classifier=LogisticRegression(), random_state=0)


@pytest.mark.parametrize("level", [0.05, 0.1, 0.01])
def test_level_that_looks_like_alpha_is_refused(level):
    x, z, _ = _data(n=100)
    with pytest.raises(ValueError, match="looks like alpha"):
        ert(x, z, 0.9, classifier=LogisticRegression(), level=level)
    with pytest.raises(ValueError, match="looks like alpha"):
        ert_from_proba(z, np.full(100, 0.9), np.arange(100) % 5, 0.9, level=level)


def test_target_coverage_that_looks_like_alpha_warns():
    # confidence_level is the target coverage t = 1 - alpha of the prediction sets, not the bound's level
    x, z, _ = _data(n=100)
    with pytest.warns(UserWarning, match="did you pass alpha"):
        ert(x, z, 0.1, classifier=LogisticRegression())
    with pytest.warns(UserWarning, match="did you pass alpha"):
        ert_from_proba(z, np.full(100, 0.9), np.arange(100) % 5, np.full(100, 0.2))


@pytest.mark.slow
@pytest.mark.parametrize("n", [30, 100, 500])
def test_lower_bound_is_valid_under_the_null(n):
    # the default classifier at every n (below n ~ 560 with 5 folds it is the logistic fallback)
    import warnings

    rng = np.random.default_rng(100 + n)
    reps = 400
    positive = {"l1": 0, "l2": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the small-fold warning, expected here
        for _ in range(reps):
            x, z = _null_data(n, rng)
            for loss in positive:
                r = ert(x, z, 0.9, loss=loss, random_state=int(rng.integers(2**31)))
                assert r.lower_bound <= r.estimate
                positive[loss] += r.lower_bound > 0
    for loss, count in positive.items():
        assert count / reps <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / reps), (loss, count)
