"""ConditionalCoverageDiagnostic: scikit-learn's estimator checks, one cross-fit behind every ERT, report, plot."""

import sys

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.utils.estimator_checks import check_estimator

from icml_stats.coverage import ConditionalCoverageDiagnostic, coverage_gap, ert

# Two checks feed a two-valued y coded {1, 2} (or built from integer features), not a 0/1 cover vector;
# a cover vector is binary by definition, so the diagnostic rightly refuses it.
EXPECTED_FAILED_CHECKS = {
    "check_estimators_dtypes": "its y is not a 0/1 cover vector",
    "check_fit2d_1feature": "its y is not a 0/1 cover vector",
}


def test_scikit_learn_estimator_checks():
    est = ConditionalCoverageDiagnostic(classifier=LogisticRegression(), cv=2, n_directions=20)
    results = check_estimator(est, expected_failed_checks=EXPECTED_FAILED_CHECKS, on_fail=None)
    failed = [r["check_name"] for r in results if r["status"] == "failed"]
    assert failed == []
    assert {r["check_name"] for r in results if r["status"] == "xfail"} == set(EXPECTED_FAILED_CHECKS)


def _data(n=800, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 2))
    p = np.where(x[:, 1] > 0.3, 0.7, 0.95)
    return x, (rng.random(n) < p).astype(int)


def test_fit_matches_the_functions_and_reports():
    x, z = _data()
    diag = ConditionalCoverageDiagnostic(
        classifier=LogisticRegression(), cv=4, n_directions=50, random_state=0
    )
    assert diag.fit(x, z) is diag
    for loss in ("l1", "l2", "kl"):
        direct = ert(x, z, 0.9, loss=loss, classifier=LogisticRegression(), cv=4, random_state=0)
        assert diag.ert_[(loss, None)].estimate == pytest.approx(direct.estimate, abs=1e-12)
    assert diag.score() == diag.ert_[("l1", None)].estimate > 0
    assert diag.metrics_["CovGap"] == pytest.approx(coverage_gap(x, z, 0.9, random_state=0))
    rows = diag.report()
    assert len(rows) == 9 + len(diag.metrics_)
    assert {r["metric"] for r in rows} >= {"ERT", "CovGap", "WeightedCovGap", "FSC", "WSC", "WSC_split"}
    direction = diag.most_miscovered_direction()
    assert abs(direction[1]) > 0.9  # coverage changes along the second feature
    # held-out score on fresh data from the same law also finds the violation
    x2, z2 = _data(seed=1)
    assert diag.score(x2, z2) > 0
    assert diag.predict(x2).shape == (800,)
    unfitted = clone(diag)
    assert not hasattr(unfitted, "ert_")


def test_raw_prediction_gives_size_and_outcome_metrics():
    x, z = _data(n=400)
    y = np.zeros(400)
    intervals = np.where(z[:, None] == 1, [[-1.0, 1.0]], [[0.5, 0.6]])
    diag = ConditionalCoverageDiagnostic(classifier=LogisticRegression(), n_directions=20, random_state=0)
    diag.fit(x, y, y_intervals=intervals)
    np.testing.assert_array_equal(diag.cover_, z)
    assert {"SSC", "Pearson", "HSIC", "EOC"} <= set(diag.metrics_)
    assert diag.metrics_["Pearson"] == pytest.approx(1.0)  # width 2 iff covered


def test_a_random_state_instance_seeds_groups_wsc_and_hsic():
    x, z = _data(n=300)
    sizes = np.random.default_rng(2).integers(1, 4, 300)

    def fit(global_seed):
        np.random.seed(global_seed)  # noqa: NPY002 (only numpy's global RNG differs between the fits)
        rs = np.random.RandomState(0)
        diag = ConditionalCoverageDiagnostic(
            classifier=LogisticRegression(), cv=2, n_groups=5, n_directions=20, random_state=rs
        )
        before = np.random.get_state()[1].copy()  # noqa: NPY002 (the global RNG is the state under test)
        diag.fit(x, z, sizes=sizes)
        assert np.array_equal(np.random.get_state()[1], before)  # noqa: NPY002 (never drawn from)
        return diag.metrics_

    first, second = fit(1), fit(2)
    assert {"CovGap", "WSC", "WSC_split", "HSIC"} <= set(first)
    assert first == second


def test_plot():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    x, z = _data(n=300)
    diag = ConditionalCoverageDiagnostic(
        classifier=LogisticRegression(), n_directions=20, random_state=0
    ).fit(x, z)
    ax = diag.plot()
    assert "ERT" in ax.get_title() and len(ax.lines) == 2


def test_plot_without_matplotlib(monkeypatch):
    x, z = _data(n=200)
    diag = ConditionalCoverageDiagnostic(
        classifier=LogisticRegression(), n_directions=20, random_state=0
    ).fit(x, z)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match="pip install matplotlib"):
        diag.plot()


def test_bad_parameters():
    x, z = _data(n=100)
    with pytest.raises(ValueError, match="losses must be"):
        ConditionalCoverageDiagnostic(losses=("l3",)).fit(x, z)
    with pytest.raises(ValueError, match="requires y to be passed"):
        ConditionalCoverageDiagnostic().fit(x)
    with pytest.raises(ValueError, match=r"target must lie in \(0, 1\)"):
        ConditionalCoverageDiagnostic(classifier=LogisticRegression()).fit(x, z, target=np.ones(100))


def test_a_refused_refit_leaves_the_diagnostic_as_it_was():
    x, z = _data(n=300)
    diag = ConditionalCoverageDiagnostic(classifier=LogisticRegression(), n_directions=20, random_state=0)
    diag.fit(x, z)
    before = dict(vars(diag))
    predicted, score = diag.predict(x[:5]), diag.score()
    rng = np.random.default_rng(1)
    x_new, z_new = rng.normal(size=(150, 4)), (rng.random(150) < 0.5).astype(int)
    # refused early (y of the wrong length: the old code had already taken the new X's 4 features, so
    # predict refused the 2-feature X the model was fitted on) and late (sizes of the wrong length: the
    # old code had already replaced cover_, proba_ and ert_, and score() gave 0.433 for the earlier 0.089)
    for bad in ({"y": z_new[:100]}, {"y": z_new, "sizes": np.ones(3)}):
        with pytest.raises(ValueError, match=r"(y|sizes) must have shape"):
            diag.fit(x_new, **bad)
        assert diag.n_features_in_ == 2 and diag.score() == score
        assert vars(diag).keys() == before.keys()
        assert all(vars(diag)[k] is v for k, v in before.items())  # the very same attributes
        np.testing.assert_array_equal(diag.predict(x[:5]), predicted)
    unfitted = ConditionalCoverageDiagnostic(classifier=LogisticRegression(), n_directions=20)
    with pytest.raises(ValueError, match="sizes must have shape"):
        unfitted.fit(x, z, sizes=np.ones(3))
    assert not hasattr(unfitted, "n_features_in_") and not hasattr(unfitted, "ert_")
