"""The bad-input contract (GUIDE "Bad input", issue 22): one fuzz test per public API of icml_stats.conformal,
icml_stats.coverage and icml_stats.seqci. Every case returns a result its check accepts or raises
ValueError/TypeError naming the argument; no NaN/inf from finite input without a warning."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LinearRegression, LogisticRegression
from threadpoolctl import threadpool_limits

from icml_stats import conformal, coverage, seqci
from icml_stats.conformal import (
    aps_sets,
    conformal_quantile,
    cqr_interval,
    lac_sets,
    normalized_conformal_interval,
    split_conformal_interval,
)
from icml_stats.coverage import (
    ConditionalCoverageDiagnostic,
    ERTResult,
    auto_groups,
    coverage_gap,
    cross_fit_proba,
    default_classifier,
    equal_opportunity_coverage,
    ert,
    ert_from_proba,
    excess_risk_target_coverage,
    feature_stratified_coverage,
    hsic,
    pearson_correlation,
    pointwise_loss,
    size_stratified_coverage,
    small_sample_classifier,
    worst_slab_coverage,
)
from icml_stats.coverage.metrics import MAX_DIRECTIONS
from icml_stats.seqci import (
    AGRAPA,
    ONS,
    RBF,
    SKCI,
    Affine,
    CIData,
    ConditionalMeanEmbedding,
    ConstantFraction,
    GaussianConditional,
    Linear,
    MixtureWealth,
    RBFLinear,
    SequentialTestResult,
    SigmoidFraction,
    WealthProcess,
    anytime_p_value,
    confounded_ci,
    gaussian_ci,
    krr_loo_loss,
    loo_losses,
    median_bandwidth,
    run_ablation,
    select_ridge,
    shift_for,
    sinusoidal_ci,
    ville_threshold,
)
from icml_stats.seqci.datasets import MAX_SIZE
from icml_tools.fuzz import Coverage, fuzz_call, hostile, rejects

FUZZ = Coverage()
FUZZ.exempt(ERTResult, "a frozen result container only ert/ert_from_proba build (their fuzz tests check it)")
FUZZ.exempt(
    CIData, "a frozen data container only gaussian_ci/sinusoidal_ci build (their fuzz tests check it)"
)
for _estimator in (
    conformal.SplitConformalRegressor,
    conformal.NormalizedConformalRegressor,
    conformal.ConformalizedQuantileRegressor,
    conformal.SplitConformalClassifier,
):
    FUZZ.exempt(
        _estimator, "fuzzed in test_conformal_estimators.py (fit, conformalize, predict_interval/set)"
    )

RNG = np.random.default_rng(0)
# regression split: fit 30, calibration 20, test 5 points of 2 features
X_FIT, X_CALIB, X_TEST = RNG.normal(size=(30, 2)), RNG.normal(size=(20, 2)), RNG.normal(size=(5, 2))
Y_FIT = X_FIT @ [1.0, -0.5] + RNG.normal(size=30)
Y_CALIB = X_CALIB @ [1.0, -0.5] + RNG.normal(size=20)
# classification split: 3 classes, every class present in fit and calibration
L_FIT, L_CALIB = np.arange(30) % 3, np.arange(20) % 3
# coverage diagnostics: 40 samples of 1 feature, covers, intervals and sets
N = 40
X1 = np.linspace(-1.0, 1.0, N)[:, None]
COVER = (np.arange(N) % 5 != 0).astype(float)  # coverage 0.8
Y_OUT = np.linspace(0.0, 1.0, N)
INTERVALS = np.stack([Y_OUT - 0.1, Y_OUT + 0.1 * (COVER * 2 - 1)], axis=1)  # covers y exactly where COVER
SIZES = np.abs(RNG.normal(size=N)) + 0.5
BAD_MODELS = st.sampled_from([None, "x", 3, object(), LinearRegression])  # the class, not an instance
BAD_CLASSIFIERS = st.sampled_from(["x", 3, object(), LinearRegression(), LogisticRegression])


def size_arg(refused_above: int) -> st.SearchStrategy:
    """hostile() of a size argument without its large valid values (a million directions or samples are
    valid, only slow): wrong types, NaN/inf, zero and negatives, small sizes, and sizes past the cap."""
    return st.one_of(
        st.sampled_from([None, "x", b"x", object(), (), 0.5, 2.0, True, math.nan, math.inf, 2**63]),
        st.integers(-(2**40), 20),
        st.integers(refused_above + 1, 2**40),
    )


@pytest.fixture(autouse=True)
def _one_blas_thread():  # small matrices: several BLAS threads only fight over busy cores
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def is_interval_array(r):
    """One closed interval [lower, upper] per test point (a mutated X_test may hold other rows)."""
    return r.ndim == 2 and r.shape[1] == 2 and r.shape[0] >= 1 and bool(np.all(r[:, 0] <= r[:, 1]))


SPLIT = {"X_fit": X_FIT, "y_fit": Y_FIT, "X_calib": X_CALIB, "y_calib": Y_CALIB, "X_test": X_TEST}
# a mutated part can break its agreement with the parts it must match (columns of X_fit, rows of its y)
SPLIT_RELATED = {
    "X_fit": ["y_fit", "X_calib", "X_test"],
    "y_fit": ["X_fit"],
    "X_calib": ["y_calib", "X_fit"],
    "y_calib": ["X_calib"],
    "X_test": ["X_fit"],
}


# ------------------------------------------------------------------------------------------ conformal
@FUZZ.covers(conformal_quantile)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_conformal_quantile(data):
    scores = np.abs(RNG.normal(size=9))
    assert conformal_quantile(scores, 0.2) == np.sort(scores)[7]  # rank ceil(10 * 0.8) = 8
    fuzz_call(
        data,
        conformal_quantile,
        {"scores": scores, "alpha": 0.2},
        # one of the scores (any reals; CQR's can be negative), or inf (with a warning) when alpha < 1/(n + 1)
        check=lambda q: isinstance(q, float) and not math.isnan(q),
    )


@FUZZ.covers(conformal.coverage)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_coverage(data):
    fuzz_call(
        data,
        conformal.coverage,
        {"y": Y_OUT, "intervals": INTERVALS},
        check=lambda c: isinstance(c, float) and 0.0 <= c <= 1.0,
        related={"y": ["intervals"], "intervals": ["y"]},
    )


@FUZZ.covers(conformal.coverage)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_coverage_levels(data):
    # MAPIE's (n, 2, n_levels) layout of predict_interval: one coverage per level
    levels = np.stack(
        [INTERVALS, INTERVALS + np.array([-0.2, 0.2])], axis=2
    )  # (N, 2, 2), coverage 0.8 and 1.0
    np.testing.assert_array_equal(conformal.coverage(Y_OUT, levels), [0.8, 1.0])
    fuzz_call(
        data,
        conformal.coverage,
        {"y": Y_OUT, "intervals": levels},
        check=lambda c: isinstance(c, np.ndarray) and c.ndim == 1 and bool(np.all((c >= 0) & (c <= 1))),
        related={"y": ["intervals"], "intervals": ["y"]},
    )


@FUZZ.covers(split_conformal_interval)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_split_conformal_interval(data):
    fuzz_call(
        data,
        split_conformal_interval,
        {"estimator": LinearRegression(), **SPLIT, "alpha": 0.2},
        check=is_interval_array,
        strategies={"estimator": BAD_MODELS},
        related=SPLIT_RELATED,
    )


@FUZZ.covers(normalized_conformal_interval)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_normalized_conformal_interval(data):
    fuzz_call(
        data,
        normalized_conformal_interval,
        {
            "estimator": LinearRegression(),
            **SPLIT,
            "alpha": 0.2,
            "scale_estimator": LinearRegression(),
            "cv": 3,
        },
        check=is_interval_array,
        strategies={"estimator": BAD_MODELS, "scale_estimator": BAD_MODELS.filter(lambda m: m is not None)},
        related=SPLIT_RELATED,
    )


@FUZZ.covers(cqr_interval)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_cqr_interval(data):
    fuzz_call(
        data,
        cqr_interval,
        {**SPLIT, "alpha": 0.2, "lower_estimator": LinearRegression(), "upper_estimator": LinearRegression()},
        check=is_interval_array,
        strategies={
            "lower_estimator": BAD_MODELS.filter(lambda m: m is not None),
            "upper_estimator": BAD_MODELS.filter(lambda m: m is not None),
        },
        related=SPLIT_RELATED,
    )


@FUZZ.covers(lac_sets, aps_sets)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_lac_and_aps_sets(data):
    valid = {
        "classifier": LogisticRegression(),
        "X_fit": X_FIT,
        "y_fit": L_FIT,
        "X_calib": X_CALIB,
        "y_calib": L_CALIB,
        "X_test": X_TEST,
        "alpha": 0.2,
    }
    fn = lac_sets
    if data.draw(st.booleans(), label="aps"):
        fn = aps_sets
        valid |= {"randomized": True, "random_state": 0}
    fuzz_call(
        data,
        fn,
        valid,
        check=lambda s: s.ndim == 2 and s.shape[1] == 3 and s.dtype == bool,
        # randomized is a flag read by its truth; any value is a valid choice of the two versions
        mutate=[k for k in valid if k != "randomized"],
        strategies={"classifier": BAD_CLASSIFIERS},
        related=SPLIT_RELATED,
    )


# ------------------------------------------------------------------------------------------- coverage
def _raw_or_cover(data, valid, *, with_sets=False):
    """The valid call in one of the input forms: covers, (y, y_intervals) or (y, y_sets)."""
    form = data.draw(st.sampled_from(["cover", "intervals", "sets"] if with_sets else ["cover", "intervals"]))
    if form == "intervals":
        valid = {**valid, "cover": None, "y": Y_OUT, "y_intervals": INTERVALS}
    elif form == "sets":
        sets = np.zeros((N, 3), dtype=bool)
        labels = np.arange(N) % 3
        sets[np.arange(N), labels] = COVER.astype(bool)
        sets[:, 0] |= True
        cover = sets[np.arange(N), labels].astype(float)
        valid = {**valid, "cover": None, "y": labels, "y_sets": sets}
        return valid, cover
    return valid, COVER


COVER_RELATED = {
    "x": ["cover", "y", "y_intervals", "y_sets", "groups", "confidence_level"],
    "cover": ["x", "y"],
    "y": ["x", "cover", "y_intervals", "y_sets"],
    "y_intervals": ["x", "y"],
    "y_sets": ["x", "y"],
    "groups": ["x", "cover"],
    "confidence_level": ["x"],
}


@FUZZ.covers(ert, excess_risk_target_coverage)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_ert(data):
    valid, _ = _raw_or_cover(
        data,
        {
            "x": X1,
            "cover": COVER,
            "confidence_level": 0.8,
            "loss": "l2",
            "side": None,
            "classifier": LogisticRegression(),
            "cv": 3,
            "random_state": 0,
            "level": 0.9,
        },
        with_sets=True,
    )

    def check(r):
        return isinstance(r, ERTResult) and r.lower_bound <= r.estimate and 0.0 <= r.p_value <= 1.0

    if data.draw(st.booleans(), label="MAPIE name") and "y" in valid:
        del valid["cover"]
        fuzz_call(
            data,
            excess_risk_target_coverage,
            valid,
            check=lambda e: isinstance(e, float),
            strategies={"classifier": BAD_CLASSIFIERS},
            related=COVER_RELATED,
        )
        return
    fuzz_call(
        data, ert, valid, check=check, strategies={"classifier": BAD_CLASSIFIERS}, related=COVER_RELATED
    )


@FUZZ.covers(ert_from_proba)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_ert_from_proba(data):
    proba = np.clip(0.8 + 0.1 * X1[:, 0], 0, 1)
    fuzz_call(
        data,
        ert_from_proba,
        {
            "cover": COVER,
            "proba": proba,
            "fold": np.arange(N) % 4,
            "confidence_level": 0.8,
            "loss": "kl",
            "side": "over",
            "level": 0.9,
        },
        check=lambda r: (
            r.lower_bound <= r.estimate
            and r.fold_estimates.shape == np.unique(r.fold).shape
            and r.proba.shape == (N,)
        ),
        related={"cover": ["proba", "fold", "confidence_level"]},
    )


@FUZZ.covers(cross_fit_proba)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_cross_fit_proba(data):
    def check(out):
        proba, fold = out
        return (
            proba.shape == fold.shape == (N,)
            and np.all((proba >= 0) & (proba <= 1))
            and set(fold) == {0, 1, 2}
        )

    fuzz_call(
        data,
        cross_fit_proba,
        {"x": X1, "cover": COVER, "classifier": LogisticRegression(), "cv": 3, "random_state": 0},
        check=check,
        strategies={"classifier": BAD_CLASSIFIERS},
        related={"x": ["cover"], "cover": ["x"]},
    )


@FUZZ.covers(pointwise_loss)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_pointwise_loss(data):
    q = np.linspace(0.0, 1.0, 7)
    z = np.array([0, 1, 1, 0, 1, 1, 1], dtype=float)
    loss = data.draw(st.sampled_from(["l1", "l2", "kl"]), label="valid loss")
    fuzz_call(
        data,
        pointwise_loss,
        {"q": q, "z": z, "target": 0.8, "loss": loss},
        check=lambda v: v.size == 7 and bool(np.all(v >= 0) or loss == "l1"),
        related={"q": ["z", "target"], "z": ["q", "target"], "target": ["q", "z"]},
    )


@FUZZ.covers(default_classifier)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_default_classifier(data):
    fuzz_call(
        data,
        default_classifier,
        {"random_state": 3},
        # a fresh, regularised gradient-boosting classifier (random_state is checked when it is built)
        check=lambda c: isinstance(c, HistGradientBoostingClassifier) and c.min_samples_leaf == 200,
    )


@FUZZ.covers(small_sample_classifier)
def test_small_sample_classifier():
    clf = small_sample_classifier()
    proba = clf.fit(X1, COVER.astype(int)).predict_proba(X1)
    assert proba.shape == (N, 2) and np.all((proba >= 0) & (proba <= 1))
    assert small_sample_classifier() is not small_sample_classifier()  # a fresh estimator each call
    with pytest.raises(TypeError):
        small_sample_classifier(0)


@FUZZ.covers(auto_groups)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_auto_groups(data):
    values = RNG.normal(size=(N, data.draw(st.sampled_from([1, 2]), label="columns")))
    fuzz_call(
        data,
        auto_groups,
        {"values": values, "n_groups": 4, "random_state": 0},
        # labels 0 .. k - 1, every one used (k <= n_groups, which a mutation may change)
        check=lambda g: (
            g.ndim == 1
            and np.issubdtype(g.dtype, np.integer)
            and np.array_equal(np.unique(g), np.arange(g.max() + 1))
        ),
    )


# group labels numpy cannot sort, or missing (NaN / NaT), besides hostile()'s values
BAD_GROUPS = st.one_of(
    hostile(np.arange(N) % 4),
    st.sampled_from(
        [
            np.array([None, "a"] * (N // 2), dtype=object),
            np.where(np.arange(N) % 4 == 0, np.nan, np.arange(N) % 4),
            np.array([np.nan, 1.0] * (N // 2), dtype=object),
            np.array(["2020-01-01", "NaT"] * (N // 2), dtype="datetime64[D]"),
        ]
    ),
)


@FUZZ.covers(coverage_gap, feature_stratified_coverage)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_coverage_gap_and_fsc(data):
    valid, cover = _raw_or_cover(
        data,
        {
            "x": X1,
            "cover": COVER,
            "confidence_level": 0.8,
            "groups": np.arange(N) % 4,
            "weighted": data.draw(st.booleans(), label="weighted"),
            "n_groups": 4,
            "random_state": 0,
        },
        with_sets=True,
    )
    if data.draw(st.booleans(), label="FSC"):
        del valid["confidence_level"], valid["weighted"]
        fuzz_call(
            data,
            feature_stratified_coverage,
            valid,
            check=lambda v: 0.0 <= v <= cover.mean(),
            strategies={"groups": BAD_GROUPS},
            related=COVER_RELATED,
        )
        return
    fuzz_call(
        data,
        coverage_gap,
        valid,
        check=lambda v: 0.0 <= v <= 1.0,
        strategies={"groups": BAD_GROUPS},
        related=COVER_RELATED,
    )


@FUZZ.covers(size_stratified_coverage, equal_opportunity_coverage)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_ssc_and_eoc(data):
    common = {
        "confidence_level": 0.8,
        "n_groups": 4,
        "statistic": data.draw(st.sampled_from(["gap", "min"])),
        "weighted": data.draw(st.booleans(), label="weighted"),
    }
    if data.draw(st.booleans(), label="EOC"):
        valid = {"y": Y_OUT, "cover": COVER, **common}
        if data.draw(st.booleans(), label="raw"):
            valid |= {"cover": None, "y_intervals": INTERVALS}
        fn = equal_opportunity_coverage
    else:
        valid = {"cover": COVER, "sizes": SIZES, **common}
        if data.draw(st.booleans(), label="raw"):
            valid |= {"cover": None, "sizes": None, "y": Y_OUT, "y_intervals": INTERVALS}
        fn = size_stratified_coverage
    fuzz_call(
        data,
        fn,
        valid,
        check=lambda v: isinstance(v, float) and 0.0 <= v <= 1.0,
        related={
            "y": ["cover", "y_intervals", "confidence_level"],
            "cover": ["y", "sizes", "confidence_level"],
            "sizes": ["cover", "y"],
            "y_intervals": ["y"],
            "confidence_level": ["cover", "y"],
        },
    )


@FUZZ.covers(worst_slab_coverage)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_worst_slab_coverage(data):
    valid, _ = _raw_or_cover(
        data,
        {
            "x": np.hstack([X1, X1**2]),
            "cover": COVER,
            "delta": 0.2,
            "n_directions": 8,
            "n_grid": 10,
            "split": data.draw(st.booleans(), label="split"),
            "random_state": 0,
        },
    )
    fuzz_call(
        data,
        worst_slab_coverage,
        valid,
        check=lambda v: isinstance(v, float) and (0.0 <= v <= 1.0 or (valid["split"] and math.isnan(v))),
        strategies={"n_directions": size_arg(MAX_DIRECTIONS)},
        related=COVER_RELATED,
    )


@FUZZ.covers(pearson_correlation, hsic)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_pearson_and_hsic(data):
    valid = {"cover": COVER, "sizes": SIZES}
    if data.draw(st.booleans(), label="raw"):
        valid = {"cover": None, "sizes": None, "y": Y_OUT, "y_intervals": INTERVALS}
    fn = pearson_correlation
    # NaN only with a warning (infinite sizes: unbounded intervals)
    check = lambda v: isinstance(v, float) and (math.isnan(v) or -1.0 <= v <= 1.0)  # noqa: E731
    if data.draw(st.booleans(), label="HSIC"):
        fn, valid = hsic, {**valid, "max_samples": 30, "random_state": 0}
        check = lambda v: isinstance(v, float) and (math.isnan(v) or v >= -1e-12)  # noqa: E731  (trace(KHLH) of PSD Grams)
    fuzz_call(
        data,
        fn,
        valid,
        check=check,
        related={
            "cover": ["sizes", "y"],
            "sizes": ["cover"],
            "y": ["cover", "y_intervals"],
            "y_intervals": ["y"],
        },
    )


@FUZZ.covers(ConditionalCoverageDiagnostic)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_conditional_coverage_diagnostic(data):
    def fit(
        X, y, confidence_level, classifier, cv, losses, n_groups, delta, n_directions, level, random_state
    ):
        return ConditionalCoverageDiagnostic(
            confidence_level=confidence_level,
            classifier=classifier,
            cv=cv,
            losses=losses,
            n_groups=n_groups,
            delta=delta,
            n_directions=n_directions,
            level=level,
            random_state=random_state,
        ).fit(X, y)

    def check(diag):
        p = diag.predict(X1)
        rows = diag.report()
        return (
            p.shape == (N,)
            and np.all((p >= 0) & (p <= 1))
            and len(rows) >= 3
            and diag.score() == rows[0]["estimate"]
        )

    fuzz_call(
        data,
        fit,
        {
            "X": X1,
            "y": COVER,
            "confidence_level": 0.8,
            "classifier": LogisticRegression(),
            "cv": 3,
            "losses": ("l1",),
            "n_groups": 4,
            "delta": 0.2,
            "n_directions": 5,
            "level": 0.9,
            "random_state": 0,
        },
        check=check,
        strategies={"classifier": BAD_CLASSIFIERS, "n_directions": size_arg(MAX_DIRECTIONS)},
        related={"X": ["y"], "y": ["X"]},
    )


# --------------------------------------------------------------------------------------------- seqci
@FUZZ.covers(ville_threshold)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_ville_threshold(data):
    fuzz_call(data, ville_threshold, {"alpha": 0.05}, check=lambda w: w > 1.0)


@FUZZ.covers(anytime_p_value)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_anytime_p_value(data):
    fuzz_call(
        data, anytime_p_value, {"wealth": np.array([1.0, 2.0, 0.5, 4.0])}, check=lambda p: 0.0 <= p <= 1.0
    )


@FUZZ.covers(shift_for)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_shift_for(data):
    fuzz_call(
        data, shift_for, {"sigma": 0.5}, check=lambda g: g >= 0.0 and math.isfinite(g)
    )  # gamma = sigma Phi(.) in [0, sigma]


@FUZZ.covers(ConstantFraction, ONS, AGRAPA, SigmoidFraction)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_betting_strategies(data):
    cls, valid = data.draw(
        st.sampled_from(
            [
                (ConstantFraction, {"fraction": 0.5}),
                (ONS, {"max_fraction": 0.5}),
                (AGRAPA, {"max_fraction": 0.5, "prior_second_moment": 1.0}),
                (SigmoidFraction, {"max_fraction": 0.9, "beta0": 0.0, "scale": 3.0}),
            ]
        ),
        label="strategy",
    )
    out = fuzz_call(data, cls, valid, check=lambda s: 0.0 <= s.fraction() <= 1.0)
    strategy = cls(**valid)
    fuzz_call(data, strategy.observe, {"payoff": 0.3}, check=lambda _: 0.0 <= strategy.fraction() <= 1.0)
    if isinstance(out, SigmoidFraction):
        fuzz_call(
            data, out.fit, {"payoffs": np.array([0.2, -0.5, 1.0])}, check=lambda s: 0.0 < s.fraction() < 1.0
        )


@FUZZ.covers(WealthProcess, MixtureWealth)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_wealth_processes(data):
    if data.draw(st.booleans(), label="mixture"):
        process = fuzz_call(
            data, MixtureWealth, {"grid_size": 10, "alpha": 0.1}, check=lambda p: p.grid.size >= 1
        )
        valid_step = {"payoff": 0.5}
    else:
        process = fuzz_call(
            data,
            WealthProcess,
            {"strategy": "agrapa", "alpha": 0.1},
            check=lambda p: p.wealth == 1.0,
            strategies={
                "strategy": st.sampled_from(["", "ONS", 3, object(), ONS])
            },  # None is a valid "no strategy"
        )
        valid_step = {"payoff": 0.5, "fraction": 0.25}
    if isinstance(process, Exception):
        return
    fuzz_call(data, process.step, valid_step, check=lambda w: w >= 0.0)


@FUZZ.covers(SequentialTestResult)
@settings(max_examples=30, deadline=None)
@given(st.data())
def test_sequential_test_result(data):
    # built by the tests (result_from_process); its public method takes the one argument fuzzed here
    process = WealthProcess("constant", alpha=0.5)  # wealth 1.5, 2.25, 3.375: reaches 1/alpha = 2 at bet 2
    for g in (1.0, 1.0, 1.0):
        process.step(g)
    from icml_stats.seqci.betting import result_from_process

    result = result_from_process(process, [10, 20, 30], "test")
    assert result.rejected and result.stopping_time == 20 and result.final_wealth == pytest.approx(1.5**3)
    fuzz_call(data, result.rejected_by, {"n": 25}, check=lambda r: isinstance(r, bool))


SAMPLE_SIZES = {"n": size_arg(MAX_SIZE), "d": size_arg(MAX_SIZE)}


@FUZZ.covers(gaussian_ci, sinusoidal_ci, confounded_ci)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_datasets(data):
    def check(d):
        n = len(d)
        return (
            d.a.shape == d.b.shape == (n, 1)
            and d.c.shape[0] == n
            and np.allclose(d.conditional().mean(d.c), d.a_mean)
        )

    which = data.draw(st.sampled_from(["sinusoidal", "gaussian", "confounded"]), label="dataset")
    if which == "confounded":
        valid = {"n": 12, "d": 3, "strength": 1.5, "effect": 0.0, "seed": 1, "data_seed": 2}
        fuzz_call(
            data, confounded_ci, valid, check=check, strategies=SAMPLE_SIZES, related={"n": ["d"], "d": ["n"]}
        )
    elif which == "sinusoidal":
        valid = {
            "n": 12,
            "d": 3,
            "effect": 0.5,
            "freq": 2.0,
            "noise": 0.1,
            "seed": 1,
            "index_a": 0,
            "index_b": 1,
            "index_r": 2,
        }
        fuzz_call(
            data,
            sinusoidal_ci,
            valid,
            check=check,
            strategies=SAMPLE_SIZES,
            related={"d": ["index_a", "index_b", "index_r"], "n": ["d"]},
        )
    else:
        valid = {"n": 12, "d": 3, "effect": 0.5, "seed": 1, "data_seed": 2}
        fuzz_call(
            data, gaussian_ci, valid, check=check, strategies=SAMPLE_SIZES, related={"n": ["d"], "d": ["n"]}
        )


@FUZZ.covers(median_bandwidth)
@settings(max_examples=40, deadline=None)
@given(st.data())
def test_median_bandwidth(data):
    fuzz_call(
        data,
        median_bandwidth,
        {"x": RNG.normal(size=(20, 2)), "max_points": 10, "rng": np.random.default_rng(0)},
        check=lambda h: h > 0 and math.isfinite(h),
    )


K_X = np.exp(-((X1 - X1.T) ** 2))  # (N, N) RBF Gram
K_Y = np.outer(Y_OUT, Y_OUT)


@FUZZ.covers(krr_loo_loss, loo_losses, select_ridge)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_kernel_ridge_loo(data):
    related = {"K_x": ["K_y"], "K_y": ["K_x"]}
    which = data.draw(st.sampled_from(["one", "many", "select"]), label="api")
    if which == "one":
        fuzz_call(
            data,
            krr_loo_loss,
            {"K_x": K_X, "K_y": K_Y, "ridge": 0.1},
            check=lambda v: math.isnan(v) or v >= -1e-9,
            related=related,
        )  # NaN only with a warning
    elif which == "many":
        fuzz_call(
            data,
            loo_losses,
            {"K_x": K_X, "K_y": K_Y, "ridges": np.array([0.01, 0.1, 1.0])},
            check=lambda v: v.ndim == 1 and v.size >= 1 and not np.any(v < -1e-9),  # one loss per ridge
            related=related,
        )
    else:
        grid = (1e-4, 1e-2, 1.0)
        fuzz_call(
            data,
            select_ridge,
            {"K_x": K_X, "K_y": K_Y, "grid": grid},
            check=lambda lam: lam in grid,
            related=related,
        )


@FUZZ.covers(RBF, Linear, RBFLinear, Affine)
@settings(max_examples=80, deadline=None)
@given(st.data())
def test_kernels(data):
    x, y = RNG.normal(size=(6, 2)), RNG.normal(size=(4, 2))
    which = data.draw(st.sampled_from(["RBF", "Linear", "RBFLinear", "Affine"]), label="kernel")
    if which in ("RBFLinear", "Affine"):
        cls = RBFLinear if which == "RBFLinear" else Affine
        fuzz_call(data, cls, {"bandwidth": 1.5}, check=lambda k: k.bandwidth is None or k.bandwidth > 0)
        fuzz_call(data, cls().fitted, {"x": x, "rng": None}, check=lambda k: k.bandwidth > 0)
        kernel = cls(1.5)
        linear = 1.0 + x @ y.T / 1.5**2 if cls is Affine else RBF(1.5)(x, y) + x @ y.T / 1.5**2
        np.testing.assert_allclose(kernel(x, y), linear)
        check = lambda k: k.ndim == 2 and k.size >= 1  # noqa: E731
    elif which == "RBF":
        # bandwidth None is valid: the median heuristic sets it in fitted()
        fuzz_call(data, RBF, {"bandwidth": 1.5}, check=lambda k: k.bandwidth is None or k.bandwidth > 0)
        kernel = RBF(1.5)
        # without a bandwidth the median heuristic of x sets one
        fuzz_call(data, RBF().fitted, {"x": x, "rng": None}, check=lambda k: k.bandwidth > 0)
        assert np.allclose(np.diag(kernel(x, x)), 1.0)
        check = lambda k: k.ndim == 2 and k.size >= 1 and np.all((k >= 0) & (k <= 1))  # noqa: E731
    else:
        kernel = Linear()
        assert kernel.fitted(x) is kernel
        np.testing.assert_allclose(kernel(x, y), x @ y.T)
        check = lambda k: k.ndim == 2 and k.size >= 1  # noqa: E731  (rows and columns of the mutated inputs)
    fuzz_call(data, kernel, {"x": x, "y": y}, check=check, related={"x": ["y"], "y": ["x"]})


BAD_KERNELS = st.sampled_from(["rbf", 3, object(), RBF])  # the class, not an instance


@FUZZ.covers(ConditionalMeanEmbedding)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_conditional_mean_embedding(data):
    c, y = RNG.normal(size=(20, 2)), RNG.normal(size=(20, 1))

    def fit(c, y, input_kernel, output_kernel, ridge, grid, max_select, random_state):
        return ConditionalMeanEmbedding(
            input_kernel, output_kernel, ridge, grid, max_select, random_state
        ).fit(c, y)

    def check(cme):
        k = cme.centered_gram(cme.C_[:5], cme.Y_[:5])  # the fitted (possibly mutated) samples
        return cme.weights(cme.C_[:3]).shape == (3, cme.n_) and k.shape == (5, 5) and np.allclose(k, k.T)

    ridge = data.draw(st.sampled_from([None, 0.01]), label="ridge")
    fuzz_call(
        data,
        fit,
        {
            "c": c,
            "y": y,
            "input_kernel": RBF(),
            "output_kernel": Linear(),
            "ridge": ridge,
            "grid": (1e-3, 1e-1),
            "max_select": 10,
            "random_state": 0,
        },
        check=check,
        strategies={
            "input_kernel": BAD_KERNELS,
            "output_kernel": BAD_KERNELS,
            **(
                {"ridge": st.sampled_from(["x", -1.0, 0.0, math.nan, math.inf, True])}
                if ridge is None
                else {}
            ),
        },
        related={"c": ["y"], "y": ["c"]},
    )


@FUZZ.covers(GaussianConditional)
@settings(max_examples=50, deadline=None)
@given(st.data())
def test_gaussian_conditional(data):
    c, a = RNG.normal(size=(6, 2)), RNG.normal(size=(6, 1))
    cond = fuzz_call(
        data,
        GaussianConditional,
        {"mean": lambda cc: cc[:, :1], "std": 0.5},
        check=lambda g: g.std >= 0.0,
        strategies={"mean": st.sampled_from([None, "x", 3.0, np.zeros(3)])},
    )
    if isinstance(cond, Exception):
        return
    fuzz_call(
        data,
        GaussianConditional.estimate,
        {"c": c, "y": a, "input_kernel": None, "ridge": None, "grid": (1e-3, 1e-1), "max_select": 300},
        check=lambda g: math.isfinite(g.std) and g.std >= 0.0 and g.explained_ <= 1.0,  # c may be mutated
        strategies={"input_kernel": BAD_KERNELS},
        related={"c": ["y"], "y": ["c"]},
    )
    fuzz_call(
        data,
        cond.centered_gram,
        {"kernel": RBF(1.0), "c1": c, "a1": a, "c2": c[:4], "a2": a[:4]},
        check=lambda k: k.shape == (6, 4),
        strategies={"kernel": st.sampled_from([None, RBF(), Linear(), "rbf"])},
        related={"c1": ["a1", "c2"], "a1": ["c1", "a2"], "c2": ["a2", "c1"], "a2": ["c2", "a1"]},
    )


D = gaussian_ci(60, 1, 1.0, seed=0)
SMALL = {"max_past": 60, "n_anchors": 20, "warmup": 20}


@FUZZ.covers(SKCI)
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_skci(data):
    def run(
        a,
        b,
        c,
        batch_size,
        alpha,
        estimator,
        betting,
        max_past,
        n_anchors,
        warmup,
        c_bandwidth_factors,
        eps,
        random_state,
    ):
        return SKCI(
            alpha,
            estimator=estimator,
            betting=betting,
            max_past=max_past,
            n_anchors=n_anchors,
            warmup=warmup,
            c_bandwidth_factors=c_bandwidth_factors,
            eps=eps,
            random_state=random_state,
        ).run(a, b, c, batch_size)

    def check(r):
        return (
            isinstance(r, SequentialTestResult)
            and np.all(r.wealth >= 0)
            and 0 < r.p_value <= 1
            and r.wealth.size == r.n_seen.size
        )

    fuzz_call(
        data,
        run,
        {
            "a": D.a,
            "b": D.b,
            "c": D.c,
            "batch_size": 20,
            "alpha": 0.05,
            "estimator": data.draw(st.sampled_from(["gaussian", "cme"]), label="estimator"),
            "betting": data.draw(st.sampled_from(["sigmoid", "ons"]), label="betting"),
            **SMALL,
            "c_bandwidth_factors": (1.0, 2.0),
            "eps": 1e-6,
            "random_state": 0,
        },
        check=check,
        related={"a": ["b", "c"], "b": ["a", "c"], "c": ["a", "b"], "max_past": ["warmup"]},
    )


@FUZZ.covers(run_ablation)
@settings(max_examples=20, deadline=None)
@given(st.data())
def test_run_ablation(data):
    def check(out):
        # the variants bet on the same batches (none when one batch is all warm-up)
        return set(out) == {"skci", "no shift"} and len({tuple(r.n_seen) for r in out.values()}) == 1

    fuzz_call(
        data,
        run_ablation,
        {
            "a": D.a,
            "b": D.b,
            "c": D.c,
            "variants": {"skci": {}, "no shift": {"shift": False}},
            "batch_size": 20,
            **SMALL,
            "random_state": 0,
        },
        check=check,
        strategies={"variants": st.sampled_from([{}, None, "x", [{}], {"v": {"alpha": 0.1}}, {"v": None}])},
        related={"a": ["b", "c"], "b": ["a", "c"], "c": ["a", "b"], "max_past": ["warmup"]},
    )


def test_named_refusals():
    """Cases hostile() does not reach: wrong mode combinations and non-finite data arrays."""
    rejects(SKCI, model_x="oracle", name="model_x")
    rejects(SKCI, model_x="exact", name="model_x")
    rejects(ert, X1, COVER, y=Y_OUT, name=["y", "cover"])
    rejects(ert, X1, None, y_intervals=INTERVALS, name="y")
    rejects(coverage_gap, X1, COVER, y_sets=np.ones((N, 2), dtype=bool), name=["cover", "y_sets"])


def test_every_public_api_is_fuzzed():
    FUZZ.assert_complete(conformal, coverage, seqci)
