"""ERT against the authors' package, covmetrics, on identical folds and classifiers (skipped without it)."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from icml_stats.coverage import ert

covmetrics = pytest.importorskip("covmetrics.ERT")
losses = pytest.importorskip("covmetrics.losses")


def _data(n=800, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 3))
    p = 0.9 + 0.08 * np.sin(np.pi * x[:, 0])  # true conditional coverage
    return x, (rng.random(n) < p).astype(float)


@pytest.mark.parametrize(
    "ours, theirs",
    [
        (("l2", None), "brier_score"),
        (("l1", None), "L1_miscoverage"),
        (("kl", None), "logloss"),
        (("l2", "over"), "brier_score_over"),
        (("l2", "under"), "brier_score_under"),
        (("l1", "over"), "L1_miscoverage_over"),
        (("l1", "under"), "L1_miscoverage_under"),
    ],
)
def test_ert_equals_covmetrics_on_identical_folds(ours, theirs):
    x, z = _data()
    loss, side = ours
    # covmetrics folds: KFold(n_splits, shuffle=True, random_state); a fresh model per fold; alpha = 1 - target
    reference = covmetrics.ERT(LogisticRegression, C=0.5).evaluate(
        x, z, 0.1, n_splits=5, random_state=42, loss=getattr(losses, theirs)
    )
    result = ert(x, z, 0.9, loss=loss, side=side, classifier=LogisticRegression(C=0.5), cv=5, random_state=42)
    assert result.estimate == pytest.approx(reference, abs=1e-10)


def _raw(n, seed):
    """Features, covers, integer set sizes, and exact intervals (integers) with those covers and widths."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    cover = (rng.random(n) < 0.8).astype(float)
    y = rng.integers(-10, 10, n).astype(float)
    width = rng.integers(1, 6, n).astype(float)
    low = np.where(cover == 1, y - np.floor(rng.random(n) * (width + 1)), y + 1)
    return x, cover, y, np.stack([low, low + width], axis=1)


@pytest.mark.parametrize("seed", range(3))
def test_the_other_metrics_equal_covmetrics_and_mapie(seed):
    from covmetrics import EOC, FSC, SSC, CovGap, PearsonCorrelation
    from covmetrics.dependence_metrics import hsic_statistic

    from icml_stats.coverage import (
        coverage_gap,
        equal_opportunity_coverage,
        feature_stratified_coverage,
        hsic,
        pearson_correlation,
        size_stratified_coverage,
    )

    # largest differences measured over 200 random cases (ties, all/none covered, 5 to 200 samples):
    # 1e-15; the tolerance leaves a factor 1000
    x, cover, y, intervals = _raw(150, seed)
    groups = np.random.default_rng(seed).integers(0, 4, 150)
    labels = np.random.default_rng(seed + 10).integers(0, 3, 150)  # few outcomes: one group each
    sizes = intervals[:, 1] - intervals[:, 0]
    for weighted in (False, True):
        mine = coverage_gap(x, cover, 0.9, groups=groups, weighted=weighted)
        assert mine == pytest.approx(CovGap(0.1).evaluate(groups, cover, weighted=weighted), abs=1e-12)
    assert feature_stratified_coverage(x, cover, groups=groups) == FSC().evaluate(groups, cover)
    assert equal_opportunity_coverage(labels, cover) == pytest.approx(
        EOC(0.1).evaluate(labels, cover), abs=1e-12
    )
    assert equal_opportunity_coverage(labels, cover, statistic="min") == EOC().evaluate_FSC(labels, cover)
    assert size_stratified_coverage(cover, sizes) == pytest.approx(SSC(0.1).evaluate(sizes, cover), abs=1e-12)
    assert pearson_correlation(cover, sizes) == pytest.approx(
        PearsonCorrelation().evaluate(sizes, cover), abs=1e-12
    )

    # HSIC: covmetrics' statistic at our median-distance bandwidths, scaled from 1/(n - 1)^2 to 1/n^2
    def median_sq_distance(v):
        d2 = (v[:, None] - v[None, :]) ** 2
        return float(np.median(d2[d2 > 0]))

    theirs = hsic_statistic(
        cover[:, None], sizes[:, None], median_sq_distance(cover), median_sq_distance(sizes)
    )
    mine = hsic(y=y, y_intervals=intervals)
    assert mine == pytest.approx(float(theirs) * (149 / 150) ** 2, abs=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_mapie_metrics_on_its_own_layouts(seed):
    conditional = pytest.importorskip("mapie.metrics.conditional")
    from mapie.metrics.classification import classification_ssc_score

    from icml_stats.coverage import coverage_gap, excess_risk_target_coverage, size_stratified_coverage

    x, _, y, intervals = _raw(150, seed)
    groups = np.random.default_rng(seed).integers(0, 4, 150)
    for weighted in (False, True):  # MAPIE's (n, 2, 1) intervals
        mine = coverage_gap(
            x, None, 0.9, y=y, y_intervals=intervals[:, :, None], groups=groups, weighted=weighted
        )
        theirs = conditional.coverage_gap(
            y, groups, 0.9, y_intervals=intervals[:, :, None], weighted=weighted
        )
        assert mine == pytest.approx(theirs, abs=1e-12)  # measured: 1e-15
    rng = np.random.default_rng(seed)
    sets, labels = rng.random((150, 4, 1)) < 0.5, rng.integers(0, 4, 150)
    # the smallest coverage over set-size groups: MAPIE's classification_ssc_score with one bin per size
    mine = size_stratified_coverage(y=labels, y_sets=sets, statistic="min", n_groups=5)
    assert mine == classification_ssc_score(labels, sets[:, :, 0])[0]
    mine = excess_risk_target_coverage(
        x, labels, 0.8, y_sets=sets, classifier=LogisticRegression(), cv=4, random_state=3
    )
    theirs = conditional.excess_risk_target_coverage(
        x, labels, 0.8, y_sets=sets, model_cls=LogisticRegression, n_splits=4, random_state=3
    )
    assert mine == pytest.approx(theirs, abs=1e-12)  # measured: 0.0


@pytest.mark.parametrize("seed", range(3))
def test_worst_slab_coverage_on_a_full_grid_equals_covmetrics(seed, monkeypatch):
    import covmetrics.slab_metrics as slab_metrics

    from icml_stats.coverage import worst_slab_coverage

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(80, 2))
    x = (x - x.mean(axis=0)) / x.std(axis=0)  # we standardise; covmetrics does not
    cover = (rng.random(80) < 0.8).astype(float)
    directions = np.random.default_rng(seed).standard_normal((20, 2))  # the directions we draw
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    monkeypatch.setattr(slab_metrics, "sample_sphere_numpy", lambda m, d: directions.copy())
    theirs = slab_metrics.WSC().evaluate(x, cover, delta=0.1, M=20)  # every start and end
    mine = worst_slab_coverage(x, cover, delta=0.1, n_directions=20, n_grid=80, random_state=seed)
    assert mine == theirs  # measured: equal in 150 of 150 random cases


def test_mapie_keywords_are_refused_naming_ours_which_give_mapies_numbers():
    # MAPIE's n_splits / model_cls raised "ert() got an unexpected keyword argument 'n_splits'", naming a
    # function the user did not call. They are not taken as aliases: with MAPIE's other defaults (seed 42,
    # a plain HistGradientBoostingClassifier) the same call would give other numbers (measured on these
    # data: MAPIE 0.1824, ours with its defaults and seed 42 0.2136). The message names our equivalents,
    # and those give MAPIE's numbers exactly
    conditional = pytest.importorskip("mapie.metrics.conditional")
    from sklearn.ensemble import HistGradientBoostingClassifier

    from icml_stats.coverage import excess_risk_target_coverage

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(1500, 2))
    y = x[:, 0] + (0.2 + np.abs(x[:, 0])) * rng.standard_normal(1500)
    intervals = np.stack([x[:, 0] - 0.6, x[:, 0] + 0.6], axis=1)
    for keyword, equivalent in (
        ({"n_splits": 3}, r"pass cv=n_splits instead"),
        ({"model_cls": LogisticRegression}, r"pass classifier=model_cls\(\*\*model_kwargs\) instead"),
        ({"model_kwargs": {"C": 0.5}}, r"pass classifier=model_cls\(\*\*model_kwargs\) instead"),
        ({"fit_kwargs": {}}, "pass a classifier whose fit needs no extra arguments"),
    ):
        with pytest.raises(
            TypeError, match=rf"excess_risk_target_coverage does not take MAPIE's .*{equivalent}"
        ):
            excess_risk_target_coverage(x, y, 0.8, y_intervals=intervals, **keyword)
    theirs = conditional.excess_risk_target_coverage(
        x, y, 0.8, y_intervals=intervals, model_cls=LogisticRegression, model_kwargs={"C": 0.5}, n_splits=3
    )
    mine = excess_risk_target_coverage(
        x, y, 0.8, y_intervals=intervals, classifier=LogisticRegression(C=0.5), cv=3, random_state=42
    )
    assert mine == theirs  # measured: bit-equal
    theirs = conditional.excess_risk_target_coverage(x, y, 0.8, y_intervals=intervals)  # MAPIE's defaults
    mine = excess_risk_target_coverage(
        x,
        y,
        0.8,
        y_intervals=intervals,
        classifier=HistGradientBoostingClassifier(random_state=42),
        random_state=42,
    )
    assert mine == theirs  # measured: 0.1824 from both, bit-equal
