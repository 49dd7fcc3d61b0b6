"""The MAPIE v1-shaped conformal estimators (issue 23, item 5): prefit intervals equal to the v0 functions
and to MAPIE 1.x on the same split, marginal coverage, nested levels, the scikit-learn contract, bad input."""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
from sklearn.dummy import DummyRegressor
from sklearn.ensemble import GradientBoostingRegressor, HistGradientBoostingRegressor
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LinearRegression, LogisticRegression, QuantileRegressor, Ridge
from sklearn.model_selection import cross_val_predict
from threadpoolctl import threadpool_limits

from icml_stats.conformal import (
    ConformalizedQuantileRegressor,
    NormalizedConformalRegressor,
    SplitConformalClassifier,
    SplitConformalRegressor,
    aps_sets,
    cqr_interval,
    lac_sets,
    normalized_conformal_interval,
    split_conformal_interval,
)
from icml_tools.fuzz import Coverage, fuzz_call

OLD = pytest.mark.filterwarnings("ignore:.* is deprecated and will be removed:DeprecationWarning")
RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def regression(rng, n, d=2):
    x = rng.uniform(-1, 1, size=(n, d))
    return x, 2 * x[:, 0] + (0.2 + np.abs(x[:, 0])) * rng.standard_normal(n)


def classification(rng, n):
    x = rng.normal(size=(n, 2))
    logits = np.stack([x[:, 0], x[:, 1], -x[:, 0] - x[:, 1]], axis=1)
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return x, (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)


def split(x, y, n_fit, n_cal):
    return x[:n_fit], y[:n_fit], x[n_fit : n_fit + n_cal], y[n_fit : n_fit + n_cal], x[n_fit + n_cal :]


X_R, Y_R = regression(RNG, 260)
PARTS_R = split(X_R, Y_R, 120, 40)  # fit 120, calibration 40, test 100
X_C, Y_C = classification(RNG, 300)
PARTS_C = split(X_C, Y_C, 120, 80)


# -------------------------------------------------------------------- prefit == the v0 functions, exactly
@OLD
@pytest.mark.parametrize("alpha", [0.1, 0.25, 1 / 3, 0.7])
def test_split_prefit_equals_v0(alpha):
    X_fit, y_fit, X_cal, y_cal, X_test = PARTS_R
    model = LinearRegression().fit(X_fit, y_fit)
    scr = SplitConformalRegressor(model, confidence_level=1 - alpha, prefit=True).conformalize(X_cal, y_cal)
    y_pred, y_pis = scr.predict_interval(X_test)
    assert scr.estimator_ is model and y_pis.shape == (100, 2, 1)  # used as it is, not cloned
    np.testing.assert_array_equal(y_pred, model.predict(X_test))
    assert np.array_equal(y_pis[:, :, 0], split_conformal_interval(LinearRegression(), *PARTS_R, alpha=alpha))
    # the threshold by hand: the ceil(41 (1 - alpha))-th smallest of the 40 residuals
    q = np.sort(np.abs(y_cal - model.predict(X_cal)))[math.ceil(41 * (1 - alpha) - 1e-9) - 1]
    assert scr.thresholds_.tolist() == [q]
    np.testing.assert_array_equal(y_pis[:, :, 0], np.stack([y_pred - q, y_pred + q], axis=1))


@OLD
def test_normalized_prefit_equals_v0():
    X_fit, y_fit, X_cal, y_cal, X_test = PARTS_R
    mean = LinearRegression().fit(X_fit, y_fit)
    residual = np.abs(y_fit - cross_val_predict(LinearRegression(), X_fit, y_fit, cv=5))
    scale = GradientBoostingRegressor(max_depth=2, random_state=0).fit(X_fit, residual)
    nrm = NormalizedConformalRegressor(mean, scale, confidence_level=0.9, prefit=True)
    _, y_pis = nrm.conformalize(X_cal, y_cal).predict_interval(X_test)
    v0 = normalized_conformal_interval(
        LinearRegression(),
        *PARTS_R,
        alpha=0.1,
        scale_estimator=GradientBoostingRegressor(max_depth=2, random_state=0),
    )
    assert np.array_equal(y_pis[:, :, 0], v0)
    assert nrm.estimator_ is mean and nrm.scale_estimator_ is scale
    # the same with prefit=False (the training path) and the v0 floor, 1e-6 times the mean residual
    trained = NormalizedConformalRegressor(
        LinearRegression(), GradientBoostingRegressor(max_depth=2, random_state=0), 0.9, prefit=False
    ).fit(X_fit, y_fit)
    assert trained.sigma_floor_ == pytest.approx(1e-6 * residual.mean(), rel=1e-12)
    assert np.array_equal(trained.conformalize(X_cal, y_cal).predict_interval(X_test)[1][:, :, 0], v0)


@OLD
def test_cqr_prefit_equals_v0():
    X_fit, y_fit, X_cal, y_cal, X_test = PARTS_R
    lo, hi = QuantileRegressor(quantile=0.05, alpha=0.0), QuantileRegressor(quantile=0.95, alpha=0.0)
    cqr = ConformalizedQuantileRegressor(
        clone(lo).fit(X_fit, y_fit), clone(hi).fit(X_fit, y_fit), 0.9, prefit=True
    )
    y_pred, y_pis = cqr.conformalize(X_cal, y_cal).predict_interval(X_test)
    assert np.array_equal(
        y_pis[:, :, 0], cqr_interval(*PARTS_R, alpha=0.1, lower_estimator=lo, upper_estimator=hi)
    )
    lo_t, hi_t = cqr.lower_estimator_.predict(X_test), cqr.upper_estimator_.predict(X_test)
    np.testing.assert_array_equal(y_pred, (lo_t + hi_t) / 2)
    np.testing.assert_array_equal(
        y_pis[:, 0, 0], np.minimum(lo_t - cqr.thresholds_[0], hi_t + cqr.thresholds_[0])
    )


@OLD
@pytest.mark.parametrize(("score", "randomized"), [("lac", False), ("aps", False), ("aps", True)])
def test_classifier_prefit_equals_v0(score, randomized):
    X_fit, y_fit, X_cal, y_cal, X_test = PARTS_C
    model = LogisticRegression().fit(X_fit, y_fit)
    scc = SplitConformalClassifier(
        model, 0.9, conformity_score=score, prefit=True, randomized=randomized, random_state=7
    ).conformalize(X_cal, y_cal)
    y_pred, y_pss = scc.predict_set(X_test)
    if score == "lac":
        v0 = lac_sets(LogisticRegression(), *PARTS_C, alpha=0.1)
    else:
        v0 = aps_sets(LogisticRegression(), *PARTS_C, alpha=0.1, randomized=randomized, random_state=7)
    assert y_pss.shape == (100, 3, 1) and y_pss.dtype == bool and scc.estimator_ is model
    assert np.array_equal(y_pss[:, :, 0], v0)
    np.testing.assert_array_equal(y_pred, model.predict(X_test))
    if score == "lac":  # LAC by hand: 1 - p_k(x) <= the ceil(81 * 0.9) = 73rd smallest calibration score
        q = np.sort(1 - model.predict_proba(X_cal)[np.arange(80), y_cal])[72]
        np.testing.assert_array_equal(y_pss[:, :, 0], 1 - model.predict_proba(X_test) <= q)


def test_string_labels_follow_the_classifier_classes():
    X_fit, y_fit, X_cal, y_cal, X_test = PARTS_C
    names = np.array(["setosa", "versicolor", "virginica"])
    model = LogisticRegression().fit(X_fit, names[y_fit])
    by_name = SplitConformalClassifier(model, [0.8, 0.9]).conformalize(X_cal, names[y_cal])
    by_index = SplitConformalClassifier(LogisticRegression().fit(X_fit, y_fit), [0.8, 0.9]).conformalize(
        X_cal, y_cal
    )
    np.testing.assert_array_equal(by_name.classes_, names)
    assert np.array_equal(by_name.predict_set(X_test)[1], by_index.predict_set(X_test)[1])
    assert set(by_name.predict(X_test)) <= set(names)
    with pytest.raises(ValueError, match="y_conformalize has the label 'daisy', unknown to the classifier"):
        SplitConformalClassifier(model).conformalize(X_cal[:2], ["setosa", "daisy"])


def test_regressor_by_hand():
    X = np.zeros((5, 1))
    zero = DummyRegressor(strategy="constant", constant=0.0).fit(X, np.zeros(5))
    scr = SplitConformalRegressor(zero, confidence_level=[0.6, 0.8]).conformalize(X, [1.0, -2, 3, 4, -5])
    np.testing.assert_array_equal(scr.thresholds_, [4.0, 5.0])  # ranks ceil(6 * 0.6) = 4, ceil(6 * 0.8) = 5
    y_pred, y_pis = scr.predict_interval(np.zeros((2, 1)))
    np.testing.assert_array_equal(y_pred, [0.0, 0.0])
    np.testing.assert_array_equal(y_pis, [[[-4.0, -5.0], [4.0, 5.0]]] * 2)
    np.testing.assert_array_equal(scr.conformity_scores_, [1.0, 2, 3, 4, 5])


# ----------------------------------------------------------------------------- MAPIE 1.x, same split
def test_split_regressor_equals_mapie():
    mapie = pytest.importorskip("mapie.regression")
    X_fit, y_fit, X_cal, y_cal, X_test = PARTS_R
    model, levels = LinearRegression().fit(X_fit, y_fit), [0.5, 0.8, 0.9, 0.95]
    ours = SplitConformalRegressor(model, levels).conformalize(X_cal, y_cal).predict_interval(X_test)
    theirs = mapie.SplitConformalRegressor(model, confidence_level=levels, prefit=True)
    theirs = theirs.conformalize(X_cal, y_cal).predict_interval(X_test)
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_array_equal(ours[1], theirs[1])


def test_cqr_equals_mapie_with_symmetric_correction():
    mapie = pytest.importorskip("mapie.regression")
    X_fit, y_fit, X_cal, y_cal, X_test = PARTS_R
    lo, hi, med = (QuantileRegressor(quantile=q, alpha=0.0).fit(X_fit, y_fit) for q in (0.05, 0.95, 0.5))
    ours = ConformalizedQuantileRegressor(lo, hi, 0.9, prefit=True).conformalize(X_cal, y_cal)
    theirs = mapie.ConformalizedQuantileRegressor([lo, hi, med], confidence_level=0.9, prefit=True)
    theirs.conformalize(X_cal, y_cal)
    # our single correction is MAPIE's symmetric_correction=True (its default corrects each end separately)
    np.testing.assert_array_equal(
        ours.predict_interval(X_test)[1], theirs.predict_interval(X_test, symmetric_correction=True)[1]
    )


def test_fit_params_reach_the_models_as_in_mapie():
    # fit(..., fit_params={"sample_weight": w}), MAPIE's way to train a weighted model, raised TypeError
    # ("unexpected keyword argument 'fit_params'"). On this split MAPIE's weighted intervals differ from its
    # unweighted ones by up to 0.163 and 12 of its 100 LAC sets change: ours now equal MAPIE's to the bit
    mapie_r = pytest.importorskip("mapie.regression")
    mapie_c = pytest.importorskip("mapie.classification")
    rng = np.random.default_rng(9)
    X_fit, y_fit, X_cal, y_cal, X_test = PARTS_R
    w = rng.uniform(0.1, 3.0, size=len(y_fit))
    ours = SplitConformalRegressor(LinearRegression(), 0.9, prefit=False)
    ours.fit(X_fit, y_fit, fit_params={"sample_weight": w}).conformalize(X_cal, y_cal)
    theirs = mapie_r.SplitConformalRegressor(LinearRegression(), confidence_level=0.9, prefit=False)
    theirs.fit(X_fit, y_fit, fit_params={"sample_weight": w}).conformalize(X_cal, y_cal)
    for got, expected in zip(ours.predict_interval(X_test), theirs.predict_interval(X_test), strict=True):
        np.testing.assert_array_equal(got, expected)
    Xc_fit, yc_fit, Xc_cal, yc_cal, Xc_test = PARTS_C
    wc = rng.uniform(0.1, 3.0, size=len(yc_fit))
    clf = SplitConformalClassifier(LogisticRegression(), 0.8, prefit=False)
    clf.fit(Xc_fit, yc_fit, fit_params={"sample_weight": wc}).conformalize(Xc_cal, yc_cal)
    ref = mapie_c.SplitConformalClassifier(LogisticRegression(), confidence_level=0.8, prefit=False)
    ref.fit(Xc_fit, yc_fit, fit_params={"sample_weight": wc}).conformalize(Xc_cal, yc_cal)
    np.testing.assert_array_equal(clf.predict_set(Xc_test)[1], ref.predict_set(Xc_test)[1])
    # the normalized and CQR models are all trained with them (MAPIE's CQR passes them to each model)
    weighted = LinearRegression().fit(X_fit, y_fit, sample_weight=w)
    nrm = NormalizedConformalRegressor(cv=3).fit(X_fit, y_fit, fit_params={"sample_weight": w})
    np.testing.assert_array_equal(nrm.estimator_.coef_, weighted.coef_)
    cqr = ConformalizedQuantileRegressor().fit(X_fit, y_fit, fit_params={"sample_weight": w})
    lower = HistGradientBoostingRegressor(loss="quantile", quantile=0.05, random_state=0)
    lower.fit(X_fit, y_fit, sample_weight=w)
    np.testing.assert_array_equal(cqr.lower_estimator_.predict(X_test), lower.predict(X_test))
    with pytest.raises(TypeError, match="fit_params must be None or a dict"):
        SplitConformalRegressor(prefit=False).fit(X_fit, y_fit, fit_params=[w])
    with pytest.raises(TypeError, match=r"fit_params \['sample_wt'\] are not accepted by LinearRegression"):
        SplitConformalRegressor(prefit=False).fit(X_fit, y_fit, fit_params={"sample_wt": w})


class Shifted(RegressorMixin, BaseEstimator):
    """A linear fit whose ``predict(X, shift=None)`` adds ``shift`` (default: the parameter ``default``)."""

    def __init__(self, default=0.0):
        self.default = default

    def fit(self, X, y):
        self.linear_ = LinearRegression().fit(X, y)
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X, shift=None):
        return self.linear_.predict(X) + (self.default if shift is None else shift)


class Tempered(ClassifierMixin, BaseEstimator):
    """Logistic regression whose ``predict_proba(X, temperature=1.0)`` flattens its probabilities."""

    def fit(self, X, y):
        self.logistic_ = LogisticRegression().fit(X, y)
        self.classes_, self.n_features_in_ = self.logistic_.classes_, X.shape[1]
        return self

    def predict_proba(self, X, temperature=1.0):
        p = self.logistic_.predict_proba(X) ** (1 / temperature)
        return p / p.sum(axis=1, keepdims=True)

    def predict(self, X, temperature=1.0):
        return self.classes_[np.argmax(self.predict_proba(X, temperature), axis=1)]


def test_predict_params_reach_the_models_as_in_mapie():
    # conformalize(..., predict_params={...}), MAPIE's way to pass keyword arguments to the model's predict
    # (and predict_proba), raised TypeError ("unexpected keyword argument 'predict_params'")
    mapie_r = pytest.importorskip("mapie.regression")
    mapie_c = pytest.importorskip("mapie.classification")
    Xc_fit, yc_fit, Xc_cal, yc_cal, Xc_test = PARTS_C
    model, params = Tempered().fit(Xc_fit, yc_fit), {"temperature": 3.0}
    ours = SplitConformalClassifier(model, [0.7, 0.9]).conformalize(Xc_cal, yc_cal, predict_params=params)
    theirs = mapie_c.SplitConformalClassifier(model, confidence_level=[0.7, 0.9], prefit=True)
    theirs.conformalize(Xc_cal, yc_cal, predict_params=params)
    for got, expected in zip(ours.predict_set(Xc_test), theirs.predict_set(Xc_test), strict=True):
        np.testing.assert_array_equal(got, expected)  # bit-equal
    plain = SplitConformalClassifier(model, [0.7, 0.9]).conformalize(Xc_cal, yc_cal).predict_set(Xc_test)[1]
    assert not np.array_equal(
        ours.predict_set(Xc_test)[1], plain
    )  # measured: 19 of 100 rows (14 at 0.7, 5 at 0.9)
    # regression: the intervals of a model whose predict has the parameters bound (MAPIE 1.6 passes them to
    # predict_interval and predict, but its prefit calibration calls predict without them: with shift 0.7
    # on 200 + 200 points its intervals covered 0.595 / 0.74 at levels 0.8 / 0.9, ours 0.725 / 0.845)
    X_fit, y_fit, X_cal, y_cal, X_test = PARTS_R
    model, bound, params = Shifted().fit(X_fit, y_fit), Shifted(0.7).fit(X_fit, y_fit), {"shift": 0.7}
    scr = SplitConformalRegressor(model, [0.8, 0.9]).conformalize(X_cal, y_cal, predict_params=params)
    ref = mapie_r.SplitConformalRegressor(bound, confidence_level=[0.8, 0.9], prefit=True)
    ref.conformalize(X_cal, y_cal)
    for got, expected in zip(scr.predict_interval(X_test), ref.predict_interval(X_test), strict=True):
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(scr.predict(X_test), bound.predict(X_test))
    theirs = mapie_r.SplitConformalRegressor(model, confidence_level=[0.8, 0.9], prefit=True)
    theirs.conformalize(X_cal, y_cal, predict_params=params)
    np.testing.assert_array_equal(scr.predict_interval(X_test)[0], theirs.predict_interval(X_test)[0])
    assert scr.predict_params_ == params
    # every model of the normalized and CQR regressors predicts with them
    for cls, kwargs in (
        (NormalizedConformalRegressor, {"prefit": True}),
        (ConformalizedQuantileRegressor, {"prefit": True, "confidence_level": 0.8}),
    ):
        got = cls(model, Shifted(0.3).fit(X_fit, np.abs(y_fit)), **kwargs)
        got.conformalize(X_cal, y_cal, predict_params=params)
        expected = cls(bound, Shifted(0.7).fit(X_fit, np.abs(y_fit)), **kwargs).conformalize(X_cal, y_cal)
        for a, b in zip(got.predict_interval(X_test), expected.predict_interval(X_test), strict=True):
            np.testing.assert_array_equal(a, b)
    # a later conformalize without them, or a refit, drops them; a model that refuses them names them
    assert scr.conformalize(X_cal, y_cal).predict_params_ == {}
    np.testing.assert_array_equal(scr.predict(X_test), model.predict(X_test))
    est = SplitConformalRegressor(Shifted(), prefit=False).fit(X_fit, y_fit)
    est.conformalize(X_cal, y_cal, predict_params=params)
    assert not hasattr(est.fit(X_fit, y_fit), "predict_params_")
    with pytest.raises(TypeError, match="predict_params must be None or a dict of keyword arguments"):
        scr.conformalize(X_cal, y_cal, predict_params=[0.7])
    before = scr.predict_interval(X_test)
    with pytest.raises(TypeError, match=r"predict_params \['shfit'\] are not accepted by Shifted.predict"):
        scr.conformalize(X_cal, y_cal, predict_params={"shfit": 0.7})
    assert scr.predict_params_ == {}  # the refused calibration left the earlier one whole
    for got, expected in zip(scr.predict_interval(X_test), before, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_lac_classifier_equals_mapie():
    mapie = pytest.importorskip("mapie.classification")
    X_fit, y_fit, X_cal, y_cal, X_test = PARTS_C
    model, levels = LogisticRegression().fit(X_fit, y_fit), [0.7, 0.9]
    ours = SplitConformalClassifier(model, levels, "lac").conformalize(X_cal, y_cal).predict_set(X_test)
    theirs = mapie.SplitConformalClassifier(
        model, confidence_level=levels, conformity_score="lac", prefit=True
    )
    theirs = theirs.conformalize(X_cal, y_cal).predict_set(X_test)
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_array_equal(ours[1], theirs[1])


def _frame(x, y):
    """``x`` as a data frame with named columns, a string column and a non-default index (as users hold
    data), ``y`` as a Series on the same index."""
    pd = pytest.importorskip("pandas")
    index = np.arange(len(y)) + 1000
    frame = pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "kind": np.where(x[:, 1] > 0, "up", "down")}, index)
    return frame, pd.Series(y, index=index)


def _by_name(final):
    """A Pipeline that selects and encodes columns by name, ending in ``final``."""
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    columns = ColumnTransformer([("num", StandardScaler(), ["b", "a"]), ("cat", OneHotEncoder(), ["kind"])])
    return make_pipeline(columns, final)


def test_prefit_pipeline_on_a_data_frame_equals_mapie():
    # a model trained on a DataFrame gets the DataFrame, as in MAPIE (the old code made a float array of
    # it: "Specifying the columns using strings is only supported for dataframes", or TypeError for the
    # string column)
    mapie_r = pytest.importorskip("mapie.regression")
    mapie_c = pytest.importorskip("mapie.classification")
    X_fit, y_fit, X_cal, y_cal, X_test = split(*_frame(X_R, Y_R), 120, 40)
    model = _by_name(LinearRegression()).fit(X_fit, y_fit)
    ours = SplitConformalRegressor(model, [0.8, 0.9]).conformalize(X_cal, y_cal).predict_interval(X_test)
    theirs = mapie_r.SplitConformalRegressor(model, confidence_level=[0.8, 0.9], prefit=True)
    theirs = theirs.conformalize(X_cal, y_cal).predict_interval(X_test)
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_array_equal(ours[1], theirs[1])
    X_fit, y_fit, X_cal, y_cal, X_test = split(*_frame(X_C, np.array(["x", "y", "z"])[Y_C]), 120, 80)
    clf = _by_name(LogisticRegression()).fit(X_fit, y_fit)
    ours = SplitConformalClassifier(clf, 0.9).conformalize(X_cal, y_cal).predict_set(X_test)
    theirs = mapie_c.SplitConformalClassifier(clf, confidence_level=0.9, prefit=True)
    theirs = theirs.conformalize(X_cal, y_cal).predict_set(X_test)
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_array_equal(ours[1], theirs[1])


def test_data_frames_reach_the_trained_models_with_their_feature_names():
    X_fit, y_fit, X_cal, y_cal, X_test = split(*_frame(X_R, Y_R), 120, 40)
    numeric = [X_fit[["a", "b"]], X_cal[["a", "b"]], X_test[["a", "b"]]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the old code: "X does not have valid feature names" at each call
        plain = SplitConformalRegressor(LinearRegression().fit(numeric[0], y_fit), 0.9)
        got = plain.conformalize(numeric[1], y_cal).predict_interval(numeric[2])[1]
        trained = NormalizedConformalRegressor(_by_name(LinearRegression()), cv=3).fit(X_fit, y_fit)
        trained.conformalize(X_cal, y_cal).predict_interval(X_test)
    arrays = SplitConformalRegressor(LinearRegression().fit(numeric[0].to_numpy(), y_fit), 0.9)
    expected = arrays.conformalize(numeric[1].to_numpy(), y_cal).predict_interval(numeric[2].to_numpy())[1]
    np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match=r"X must have shape \(n_X, 3\), got \(100, 2\)"):
        trained.predict_interval(numeric[2])


@pytest.mark.parametrize("kind", ["split", "normalized", "cqr", "lac"])
def test_a_refit_drops_the_old_calibration(kind):
    # the old code kept the thresholds calibrated for the first model and gave intervals around the new one
    is_classifier = kind == "lac"
    x, y = (classification if is_classifier else regression)(np.random.default_rng(4), 300)
    est = {
        "split": SplitConformalRegressor(prefit=False),
        "normalized": NormalizedConformalRegressor(cv=3),
        "cqr": ConformalizedQuantileRegressor(),
        "lac": SplitConformalClassifier(prefit=False),
    }[kind]
    est.fit(x[:100], y[:100]).conformalize(x[100:200], y[100:200])
    est.fit(x[100:200, :1], y[100:200])  # another model, on one feature
    predict = est.predict_set if is_classifier else est.predict_interval
    with pytest.raises(NotFittedError):
        predict(x[200:, :1])
    est.conformalize(x[200:250, :1], y[200:250])
    assert predict(x[250:, :1])[1].shape[0] == 50


def test_a_refused_conformalize_or_refit_keeps_the_earlier_calibration_whole():
    # was: conformalize took the new prefit model before refusing y_conformalize, so predict_interval gave
    # intervals around the new model with the old model's threshold (1.277, where the new model's own is
    # 4.160: the first test row's interval moved from [-3.326, -0.772] to [-7.423, -4.869], no error)
    x, y = regression(np.random.default_rng(8), 300)
    first, other = LinearRegression().fit(x, y), LinearRegression().fit(x, 3 * y)
    est = SplitConformalRegressor(first).conformalize(x[:100], y[:100])
    before = est.predict_interval(x[200:])
    with pytest.raises(ValueError, match="y_conformalize must have shape"):
        est.set_params(estimator=other).conformalize(x[100:200], y[100:150])
    assert est.estimator_ is first
    for got, expected in zip(est.predict_interval(x[200:]), before, strict=True):
        np.testing.assert_array_equal(got, expected)
    # a refit whose scale model refuses the data (lbfgs needs positive=True) kept the new mean model beside
    # the old scale model: conformalize then calibrated that mixture without an error
    nrm = NormalizedConformalRegressor(cv=3).fit(x[:100], y[:100]).conformalize(x[100:200], y[100:200])
    models, before = (nrm.estimator_, nrm.scale_estimator_), nrm.predict_interval(x[200:])
    with pytest.raises(ValueError, match="fitting Ridge"):
        nrm.set_params(scale_estimator=Ridge(solver="lbfgs")).fit(x[:100], 2 * y[:100])
    assert (nrm.estimator_, nrm.scale_estimator_) == models
    for got, expected in zip(nrm.predict_interval(x[200:]), before, strict=True):
        np.testing.assert_array_equal(got, expected)


# ------------------------------------------------------------------------ coverage and nested levels
def _prefit(kind, rng):
    """One trained model per method (on 500 points), and the call giving covers of a fresh split."""
    x, y = (classification if kind == "lac" or kind.startswith("aps") else regression)(rng, 500)
    if kind == "split":
        return SplitConformalRegressor(LinearRegression().fit(x, y), 0.9)
    if kind == "normalized":
        resid = np.abs(y - cross_val_predict(LinearRegression(), x, y, cv=5))
        return NormalizedConformalRegressor(
            LinearRegression().fit(x, y), LinearRegression().fit(x, resid), 0.9, prefit=True
        )
    if kind == "cqr":
        lo, hi = (QuantileRegressor(quantile=q, alpha=0.0).fit(x, y) for q in (0.05, 0.95))
        return ConformalizedQuantileRegressor(lo, hi, 0.9, prefit=True)
    return SplitConformalClassifier(
        LogisticRegression().fit(x, y), 0.9, kind[:3], randomized=kind == "aps-randomized", random_state=0
    )


@pytest.mark.parametrize("kind", ["split", "normalized", "cqr", "lac", "aps-randomized", "aps"])
def test_marginal_coverage_within_binomial_tolerance(kind):
    # n_calib = 19, level 0.9: the threshold is the 18th of 19 scores, so E[coverage] = 18/20 = 0.9
    # exactly for continuous scores (deterministic APS only adds mass: at least 0.9)
    rng = np.random.default_rng(5)
    model, covered = _prefit(kind, rng), []
    for _ in range(300):
        if isinstance(model, SplitConformalClassifier):
            x, y = classification(rng, 219)
            sets = model.conformalize(x[:19], y[:19]).predict_set(x[19:])[1][:, :, 0]
            covered.append(sets[np.arange(200), y[19:]].mean())
        else:
            x, y = regression(rng, 219)
            box = model.conformalize(x[:19], y[:19]).predict_interval(x[19:])[1][:, :, 0]
            covered.append(np.mean((box[:, 0] <= y[19:]) & (y[19:] <= box[:, 1])))
    # SE over 300 repetitions: sqrt((Var Beta(18, 2) + 0.09 / 200) / 300) ~ 0.004; 4 SE
    if kind == "aps":
        assert np.mean(covered) > 0.9 - 0.016
    else:
        assert np.mean(covered) == pytest.approx(0.9, abs=0.016)


@pytest.mark.parametrize("kind", ["split", "normalized", "lac", "aps"])
def test_a_list_of_levels_gives_nested_predictions(kind):
    levels = [0.5, 0.8, 0.9, 0.95]
    model = _prefit(kind, np.random.default_rng(6)).set_params(confidence_level=levels)
    # (a clone would unfit the trained models inside: scikit-learn clones nested estimators)
    single = [type(model)(**{**model.get_params(deep=False), "confidence_level": c}) for c in levels]
    data = classification if isinstance(model, SplitConformalClassifier) else regression
    x, y = data(np.random.default_rng(7), 150)
    if isinstance(model, SplitConformalClassifier):
        model.estimator, model.prefit = _prefit(kind, np.random.default_rng(6)).estimator, True
        sets = model.conformalize(x[:100], y[:100]).predict_set(x[100:])[1]
        assert np.all(sets[:, :, :-1] <= sets[:, :, 1:])  # each set inside the next level's
        for j, one in enumerate(single):
            one.estimator = model.estimator
            assert np.array_equal(
                one.conformalize(x[:100], y[:100]).predict_set(x[100:])[1][:, :, 0], sets[:, :, j]
            )
    else:
        model.estimator = _prefit(kind, np.random.default_rng(6)).estimator
        box = model.conformalize(x[:100], y[:100]).predict_interval(x[100:])[1]
        assert np.all(box[:, 0, 1:] <= box[:, 0, :-1]) and np.all(box[:, 1, :-1] <= box[:, 1, 1:])
        assert np.all(np.diff(box[:, 1] - box[:, 0], axis=1) > 0)  # continuous scores: strictly wider
        for j, one in enumerate(single):
            one.estimator = model.estimator
            assert np.array_equal(
                one.conformalize(x[:100], y[:100]).predict_interval(x[100:])[1][:, :, 0], box[:, :, j]
            )


# --------------------------------------------------------------------------- the scikit-learn contract
@pytest.mark.parametrize(
    "est",
    [
        SplitConformalRegressor(LinearRegression(), [0.8, 0.9], prefit=False),
        NormalizedConformalRegressor(LinearRegression(), cv=3, sigma_floor=1e-3),
        ConformalizedQuantileRegressor(confidence_level=0.8),
        SplitConformalClassifier(
            LogisticRegression(C=2.0), 0.8, "aps", prefit=False, randomized=True, random_state=3
        ),
    ],
)
def test_clone_and_get_params_round_trip(est):
    params = est.get_params(deep=False)
    copy = clone(est)
    for name, value in copy.get_params(deep=False).items():
        if hasattr(value, "get_params"):
            assert type(value) is type(params[name]) and value.get_params() == params[name].get_params()
        else:
            assert value == params[name], name
    assert type(est)(**params).get_params(deep=False) == params  # __init__ stores its arguments only
    is_classifier = isinstance(est, SplitConformalClassifier)
    x, y = (classification if is_classifier else regression)(np.random.default_rng(8), 200)
    fitted = est.fit(x[:100], y[:100]).conformalize(x[100:180], y[100:180])
    assert not hasattr(clone(fitted), "thresholds_")  # a clone is unfitted
    again = clone(fitted).fit(x[:100], y[:100]).conformalize(x[100:180], y[100:180])
    if is_classifier:
        assert np.array_equal(
            again.predict_set(x[180:])[1],
            clone(fitted).fit(x[:100], y[:100]).conformalize(x[100:180], y[100:180]).predict_set(x[180:])[1],
        )
    else:
        assert np.array_equal(again.predict_interval(x[180:])[1], fitted.predict_interval(x[180:])[1])
        assert isinstance(fitted.score(x[180:], y[180:]), float)  # RegressorMixin's R^2 of predict


# --------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("level", "error"),
    [
        (0, ValueError),
        (1, ValueError),
        (1.5, ValueError),
        (math.nan, ValueError),
        (True, TypeError),
        ("0.9", TypeError),
        (None, TypeError),
        ([], ValueError),
        ([0.8, 1.2], ValueError),
        ([0.8, "x"], TypeError),
    ],
)
def test_bad_confidence_level_names_it(level, error):
    x, y = regression(np.random.default_rng(9), 40)
    with pytest.raises(error, match="confidence_level"):
        SplitConformalRegressor(LinearRegression(), level, prefit=False).fit(x, y)
    with pytest.raises(error, match="confidence_level"):
        SplitConformalRegressor(LinearRegression().fit(x, y), level).conformalize(x, y)


def test_bad_input_names_the_argument():
    x, y = regression(np.random.default_rng(10), 60)
    trained = LinearRegression().fit(x, y)
    with pytest.raises(ValueError, match="fit must be skipped when prefit=True"):
        SplitConformalRegressor(trained).fit(x, y)
    with pytest.raises(NotFittedError, match="estimator must be a trained model when prefit=True"):
        SplitConformalRegressor(LinearRegression()).conformalize(x, y)
    with pytest.raises(NotFittedError, match="call fit"):
        SplitConformalRegressor(prefit=False).conformalize(x, y)
    with pytest.raises(NotFittedError):
        SplitConformalRegressor(trained).predict_interval(x)
    with pytest.raises(NotFittedError):
        SplitConformalClassifier(LogisticRegression()).predict_set(x)
    with pytest.raises(
        ValueError, match=r"y_conformalize must have shape \(60,\) \(one per row of X_conformalize\)"
    ):
        SplitConformalRegressor(trained).conformalize(x, y[:50])
    with pytest.raises(ValueError, match=r"y_train must have shape \(60,\)"):
        SplitConformalRegressor(prefit=False).fit(x, y[:3])
    fitted = SplitConformalRegressor(LinearRegression(), prefit=False).fit(x, y)
    with pytest.raises(ValueError, match=r"X_conformalize must have shape \(n_X_conformalize, 2\)"):
        fitted.conformalize(x[:, :1], y)
    with pytest.raises(ValueError, match=r"X must have shape \(n_X, 2\)"):
        fitted.conformalize(x, y).predict_interval(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="X must not contain NaN"):
        fitted.predict(np.full((1, 2), np.nan))
    with pytest.raises(TypeError, match="X must be an array of real numbers, got complex values"):
        fitted.predict(x[:3] + 1j)  # cast to float with only a ComplexWarning before
    with pytest.raises(TypeError, match="prefit must be True or False"):
        SplitConformalRegressor(trained, prefit="yes").conformalize(x, y)
    with pytest.raises(TypeError, match="estimator must be a scikit-learn regressor"):
        SplitConformalRegressor("model", prefit=False).fit(x, y)
    with pytest.raises(ValueError, match="scale_estimator must be a trained regressor when prefit=True"):
        NormalizedConformalRegressor(trained, prefit=True).conformalize(x, y)
    with pytest.raises(ValueError, match="sigma_floor"):
        NormalizedConformalRegressor(sigma_floor=0.0).fit(x, y)
    with pytest.raises(
        ValueError, match="confidence_level must be one number for ConformalizedQuantileRegressor"
    ):
        ConformalizedQuantileRegressor(confidence_level=[0.8, 0.9]).fit(x, y)
    xc, yc = classification(np.random.default_rng(11), 60)
    with pytest.raises(ValueError, match="conformity_score must be one of"):
        SplitConformalClassifier(LogisticRegression().fit(xc, yc), conformity_score="raps").conformalize(
            xc, yc
        )
    with pytest.raises(TypeError, match="estimator must be a scikit-learn classifier"):
        SplitConformalClassifier(LinearRegression(), prefit=False).fit(xc, yc)
    with pytest.raises(ValueError, match="y_conformalize has the label 7, unknown to the classifier"):
        SplitConformalClassifier(LogisticRegression().fit(xc, yc)).conformalize(xc[:2], [0, 7])


def test_too_few_calibration_points_warn_then_refuse_or_give_infinite_bounds():
    x, y = regression(np.random.default_rng(12), 30)
    scr = SplitConformalRegressor(LinearRegression().fit(x, y), [0.5, 0.95])
    with pytest.warns(UserWarning, match=r"confidence_level = 0.95 is above n/\(n \+ 1\) = 0.9 for n = 9"):
        scr.conformalize(x[:9], y[:9])  # ceil(10 * 0.95) = 10 > 9
    with pytest.raises(
        ValueError, match=r"confidence_level = 0\.95 needs at least 19 calibration points, got 9"
    ):
        scr.predict_interval(x)
    _, y_pis = scr.predict_interval(x, allow_infinite_bounds=True)
    assert (
        np.isfinite(y_pis[:, :, 0]).all()
        and np.all(y_pis[:, 0, 1] == -np.inf)
        and np.all(y_pis[:, 1, 1] == np.inf)
    )
    xc, yc = classification(np.random.default_rng(12), 30)
    with pytest.warns(UserWarning, match="confidence_level = 0.95"):
        scc = SplitConformalClassifier(LogisticRegression().fit(xc, yc), 0.95).conformalize(xc[:9], yc[:9])
    assert scc.predict_set(xc)[1].all()  # every class in every set


@pytest.mark.parametrize(
    ("call", "replacement"),
    [
        (lambda: split_conformal_interval(LinearRegression(), *PARTS_R), "SplitConformalRegressor"),
        (lambda: normalized_conformal_interval(LinearRegression(), *PARTS_R), "NormalizedConformalRegressor"),
        (
            lambda: cqr_interval(
                *PARTS_R, lower_estimator=LinearRegression(), upper_estimator=LinearRegression()
            ),
            "ConformalizedQuantileRegressor",
        ),
        (lambda: lac_sets(LogisticRegression(), *PARTS_C), "SplitConformalClassifier"),
        (lambda: aps_sets(LogisticRegression(), *PARTS_C), "SplitConformalClassifier"),
    ],
)
def test_v0_functions_are_deprecated_naming_the_estimator(call, replacement):
    with pytest.warns(DeprecationWarning, match=rf"is deprecated .* use {replacement}\(") as record:
        call()
    assert record[0].filename == __file__  # the warning points at the caller


def test_our_own_estimators_raise_no_deprecation_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        X_fit, y_fit, X_cal, y_cal, X_test = PARTS_R
        for est in (
            SplitConformalRegressor(prefit=False),
            NormalizedConformalRegressor(cv=3),
            ConformalizedQuantileRegressor(),
        ):
            est.fit(X_fit, y_fit).conformalize(X_cal, y_cal).predict_interval(X_test)
        SplitConformalClassifier(prefit=False, conformity_score="aps").fit(*PARTS_C[:2]).conformalize(
            *PARTS_C[2:4]
        ).predict_set(PARTS_C[4])


# ------------------------------------------------------------------------------------------------ fuzz
FUZZ = Coverage()  # test_fuzz.py exempts these four, pointing here
BAD_MODELS = st.sampled_from(["x", 3, object(), LinearRegression, LogisticRegression()])
R_RELATED = {
    "X_train": ["y_train", "X_conformalize", "X"],
    "y_train": ["X_train"],
    "X_conformalize": ["y_conformalize", "X_train"],
    "y_conformalize": ["X_conformalize"],
    "X": ["X_train"],
}


def _regression_run(cls, **params):
    def run(X_train, y_train, X_conformalize, y_conformalize, X, confidence_level, **rest):
        est = cls(confidence_level=confidence_level, prefit=False, **rest)
        return est.fit(X_train, y_train).conformalize(X_conformalize, y_conformalize).predict_interval(X)

    return run


def _is_intervals(out):
    y_pred, y_pis = out
    return (
        y_pis.ndim == 3 and y_pis.shape[:2] == (y_pred.size, 2) and bool(np.all(y_pis[:, 0] <= y_pis[:, 1]))
    )


R_VALID = {
    "X_train": PARTS_R[0][:30],
    "y_train": PARTS_R[1][:30],
    "X_conformalize": PARTS_R[2][:20],
    "y_conformalize": PARTS_R[3][:20],
    "X": PARTS_R[4][:5],
}


@FUZZ.covers(SplitConformalRegressor, NormalizedConformalRegressor, ConformalizedQuantileRegressor)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_fuzz_regressors(data):
    cls = data.draw(
        st.sampled_from(
            [SplitConformalRegressor, NormalizedConformalRegressor, ConformalizedQuantileRegressor]
        )
    )
    valid = {**R_VALID, "confidence_level": [0.5, 0.8]}
    strategies = {}
    if cls is ConformalizedQuantileRegressor:
        valid |= {
            "confidence_level": 0.8,
            "lower_estimator": LinearRegression(),
            "upper_estimator": LinearRegression(),
        }
        strategies = {"lower_estimator": BAD_MODELS, "upper_estimator": BAD_MODELS}
    else:
        valid["estimator"] = LinearRegression()
        strategies = {"estimator": BAD_MODELS}
    if cls is NormalizedConformalRegressor:
        valid |= {"cv": 3, "sigma_floor": 1e-3}
    fuzz_call(
        data, _regression_run(cls), valid, check=_is_intervals, strategies=strategies, related=R_RELATED
    )


@FUZZ.covers(SplitConformalClassifier)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_fuzz_classifier(data):
    def run(X_train, y_train, X_conformalize, y_conformalize, X, **params):
        est = SplitConformalClassifier(prefit=False, **params)
        return est.fit(X_train, y_train).conformalize(X_conformalize, y_conformalize).predict_set(X)

    def check(out):
        y_pred, sets = out
        return sets.dtype == bool and sets.ndim == 3 and sets.shape[0] == y_pred.size and sets.shape[2] >= 1

    valid = {
        "X_train": PARTS_C[0][:40],
        "y_train": np.arange(40) % 3,
        "X_conformalize": PARTS_C[2][:20],
        "y_conformalize": np.arange(20) % 3,
        "X": PARTS_C[4][:5],
        "estimator": LogisticRegression(),
        "confidence_level": [0.5, 0.8],
        "conformity_score": data.draw(st.sampled_from(["lac", "aps"])),
        "randomized": True,
        "random_state": 0,
    }
    fuzz_call(
        data,
        run,
        valid,
        check=check,
        strategies={"estimator": BAD_MODELS},
        related=R_RELATED
        | {"y_train": ["X_train", "y_conformalize"], "y_conformalize": ["X_conformalize", "y_train"]},
    )
