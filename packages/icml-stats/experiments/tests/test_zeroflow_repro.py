"""The zeroflow-markov-blanket reproduction: the testbed's known graph, a verdict that can fail, and the
protocol end to end on a tiny budget."""

from functools import partial

import numpy as np
import pytest

from icml_stats.zeroflow import ZeroFlowMarkovBlanket
from icml_stats_experiments.zeroflow import repro
from icml_stats_experiments.zeroflow.testbed import MODELS, precision_matrix, sample
from icml_tools.repro import run_reproduction


def test_the_testbed_holds_its_graph_and_draws():
    theta = precision_matrix(10, 5, np.random.default_rng(0))
    assert np.all(np.abs(np.diag(theta, 1)) == 0.4)  # the chain
    assert np.count_nonzero(np.triu(theta, 1)) == 9 + 5
    assert np.linalg.eigvalsh(theta).min() >= 0.2 - 1e-12
    gauss, logn = sample("gaussian", 20_000, seed=3), sample("lognormal", 20_000, seed=3)
    np.testing.assert_array_equal(gauss.z, logn.z)  # same graph and draws seed by seed
    np.testing.assert_allclose(logn.x, np.exp(2 * logn.z))
    np.testing.assert_allclose(gauss.z.std(0), 1.0, atol=0.03)  # unit variances
    # the sample precision of Z has the true zero pattern
    est = np.linalg.inv(np.cov(gauss.z, rowvar=False))
    scale = np.sqrt(np.outer(np.diag(est), np.diag(est)))
    partial_corr = np.abs(est / scale)[~np.eye(10, dtype=bool)]
    edges = gauss.edges[~np.eye(10, dtype=bool)]
    assert partial_corr[edges].min() > 0.1 > partial_corr[~edges].max()
    with pytest.raises(ValueError, match="model"):
        sample("cauchy")


def _mean(zf_gauss=1.0, glasso_log=0.7, oracle_log=1.0, zf_log=0.8):
    return {
        "gaussian": {"zero-flow": zf_gauss, "graphical lasso": 1.0, "oracle graphical lasso": 1.0},
        "lognormal": {
            "zero-flow": zf_log,
            "graphical lasso": glasso_log,
            "oracle graphical lasso": oracle_log,
        },
    }


def test_the_verdict_fails_when_a_check_fails():
    headroom, checks = repro.evaluate(_mean(), np.array([0.1, 0.0, 0.05]))
    assert headroom and all(checks.values())
    assert repro.evaluate(_mean(glasso_log=0.9), np.zeros(3))[0] is False
    assert repro.evaluate(_mean(oracle_log=0.9), np.zeros(3))[0] is False
    assert not all(repro.evaluate(_mean(zf_gauss=0.85), np.zeros(3))[1].values())
    assert not all(repro.evaluate(_mean(), np.array([0.1, -0.2, 0.05]))[1].values())


def test_run_follows_the_protocol(monkeypatch):
    monkeypatch.setattr(repro, "N", 300)
    monkeypatch.setitem(repro.BUDGETS, "quick", {"seeds": 2, "null_reps": 4, "power_reps": 2})
    monkeypatch.setattr(repro, "ZeroFlowMarkovBlanket", partial(ZeroFlowMarkovBlanket, hidden=8, steps=20))
    monkeypatch.setattr(repro, "map_spawned", lambda fn, jobs, workers: [fn(j) for j in jobs])
    result = run_reproduction("zeroflow-markov-blanket", "quick", 0)
    assert len(result["rows"]) == 2 * len(MODELS)
    assert isinstance(result["passed"], bool)
    diff = result["lognormal AUC difference"]
    assert len(diff["per seed"]) == 2 and diff["df"] == 1
    assert diff["95% paired t-interval"][0] <= diff["mean"] <= diff["95% paired t-interval"][1]
    assert 0.0 <= result["two-sample test"]["size at n = 200 (4 repetitions)"] <= 1.0
