"""The PRISM reproduction ``prism-synthetic`` (:mod:`icml_stats_experiments.shape.repro`): the testbed's
analytic law and Fisher information, the bump, the bootstrap, and (slow) one small run through the runner."""

import numpy as np
import pytest
import torch

import icml_stats_experiments.shape.repro as repro
from icml_stats.shape import estimate_covariate, fisher_information
from icml_stats_experiments.shape.testbed import (
    AnalyticModel,
    add_bump,
    analytic_fisher,
    radial_std,
    subjects,
)
from icml_tools.repro import run_reproduction


def test_the_analytic_fisher_information_is_the_models():
    data = subjects(5, 32, np.random.default_rng(0))
    exact = fisher_information(AnalyticModel(), data["points"], data["covariates"])
    assert np.allclose(exact, analytic_fisher(data["points"], data["covariates"]), rtol=1e-10)


def test_samples_follow_the_analytic_law():
    data = subjects(400, 16, np.random.default_rng(1))
    with torch.no_grad():
        mean, cov = AnalyticModel()(torch.as_tensor(data["points"]), torch.as_tensor(data["covariates"]))
    resid = data["displacements"] - mean.numpy()
    m = np.einsum("ni,ni->n", resid, np.linalg.solve(cov.numpy(), resid[..., None])[..., 0])
    assert abs(m.mean() - 2.0) < 0.05  # E chi2_2 = 2 over 6400 points (sd of the mean ~0.025)


def test_the_oracle_estimates_age_near_the_cramer_rao_bound():
    data = subjects(60, 64, np.random.default_rng(2))
    est = estimate_covariate(
        AnalyticModel(), data["points"], data["displacements"], (-0.1, 1.1), groups=data["subject"]
    )
    rmse = np.sqrt(np.mean((est.estimate - data["ages"]) ** 2))
    assert rmse < 1.25 * np.sqrt(np.mean(est.standard_error**2))


def test_a_bump_moves_only_its_subject_radially_by_its_strength():
    rng = np.random.default_rng(3)
    data = subjects(3, 32, rng)
    before = data["displacements"].copy()
    add_bump(data, np.array([1]), 32, 4.0, rng)
    change = data["displacements"] - before
    assert np.array_equal(change[:32], 0 * change[:32]) and np.array_equal(change[64:], 0 * change[64:])
    rows = slice(32, 64)
    radial = np.einsum("ni,ni->n", change[rows], data["points"][rows])
    assert np.allclose(np.linalg.norm(change[rows], axis=1), np.abs(radial))  # along the normal
    assert np.isclose((radial / radial_std(data["points"][rows], data["covariates"][rows])).max(), 4.0)


@pytest.mark.slow
def test_reproduction_follows_the_protocol(monkeypatch):
    small = {"seeds": 1, "train": 20, "test": 10, "anomaly": 10, "epochs": 30, "bootstrap": 50}
    monkeypatch.setitem(repro.BUDGETS, "quick", small)
    result = run_reproduction("prism-synthetic", "quick", 0)
    (row,) = result["rows"]
    assert result["ours"] == row["ours_spearman"] and result["baseline"] == row["baseline_spearman"]
    assert result["passed"] == (result["headroom"]["holds"] and all(result["checks"].values()))
    low, high = result["intervals"]["rmse_difference_ci"]
    assert low <= high and result["checks"]["rmse_below_baseline"] == (high < 0)
    assert row["fisher_range"] > 10
