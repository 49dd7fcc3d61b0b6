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
