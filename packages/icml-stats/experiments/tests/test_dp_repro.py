"""The cond-dp-spectra reproduction: the testbed's known structure, the paired bootstrap, a verdict that can
fail, and the protocol end to end on a tiny budget (the noise calibration stubbed: it is tested in
icml-stats' and icml-theory's own tests)."""

import numpy as np
import pytest

from icml_stats_experiments.dp import repro
from icml_stats_experiments.dp.testbed import condition_number, real, spectral
from icml_tools.repro import run_reproduction, validate_result


def test_spectral_tasks_have_unit_signal_and_the_planted_decay():
    for a in (0.0, 1.0, 2.0):
        t = spectral(a, 0)
        assert t.x.shape == (10_000, 50) and t.x_test.shape == (5_000, 50)
        assert np.var(t.y) == pytest.approx(1.01, rel=0.1)  # unit signal + 0.1^2 noise
        s = np.linalg.svd(t.x, compute_uv=False)
        np.testing.assert_allclose(s / s[0], np.arange(1, 51, dtype=float) ** -a, rtol=0.25)
    assert condition_number(0.0) < 2 < condition_number(0.5) < condition_number(1.0) < condition_number(2.0)
    np.testing.assert_array_equal(spectral(1.0, 3).y, spectral(1.0, 3).y)


def test_real_tasks_are_standardized_splits():
    for name, n in (("diabetes", 442), ("fair", 6366)):
        t = real(name, 0)
        assert len(t.y) + len(t.y_test) == n and len(t.y) == int(0.75 * n)
        X = np.vstack([t.x, t.x_test])
        np.testing.assert_allclose(X.mean(0), 0, atol=1e-12)
        np.testing.assert_allclose(X.std(0), 1, atol=1e-12)


def test_paired_bootstrap_interval():
    assert repro.paired_bootstrap_interval(np.full(10, -0.3)) == pytest.approx([-0.3, -0.3])
    d = np.random.default_rng(0).normal(-1.0, 0.5, size=200)
    lo, hi = repro.paired_bootstrap_interval(d)
    assert lo < d.mean() < hi < 0
    assert hi - lo == pytest.approx(2 * 1.96 * d.std() / np.sqrt(200), rel=0.15)


TINY = {
    "decays": (0.0, 1.0),
    "epsilons": (1.0,),
    "seeds": 2,
    "tune_seeds": 1,
    "lrs": (0.3, 1.0),
    "datasets": ("diabetes",),
    "real_epsilons": (1.0,),
    "real_seeds": 1,
}


@pytest.fixture
def tiny(monkeypatch, one_torch_thread):
    monkeypatch.setitem(repro.BUDGETS, "quick", TINY)
    monkeypatch.setattr(repro, "noise_for", lambda job: (job, 2.0))


def test_run_follows_the_protocol(tiny):
    result = validate_result(repro.run("quick", 0, workers=1))
    assert set(result["summaries"]) == {"a=0 eps=1", "a=1 eps=1", "diabetes eps=1"}
    row = result["summaries"]["a=1 eps=1"]
    assert row["seeds"] == 2 and row["noise multiplier"] == 2.0
    assert set(row["learning rate"].values()) <= {0.3, 1.0}
    assert isinstance(result["passed"], bool)
    assert set(result["headroom"]["condition number of X^T X"]) == {"a=0", "a=1"}
    # the criterion says what this budget judges: one epsilon, so no largest-gain check
    assert "judges decays [0.0, 1.0] at epsilons [1.0]" in result["criterion"]
    assert "largest-gain check does not apply" in result["criterion"]
    assert not any("largest gain" in k for k in result["checks"])


def test_the_verdict_fails_when_cond_dp_is_dp_sgd(tiny, monkeypatch):
    # "Cond-DP" run with the identity: the same runs as DP-SGD, so no interval lies below 0
    monkeypatch.setitem(repro.CONDITIONING, "Cond-DP", ("identity", 1.0))
    result = repro.run("quick", 0, workers=1)
    assert result["summaries"]["a=1 eps=1"]["paired bootstrap 95% interval"] == [0.0, 0.0]
    assert result["checks"]["a=1: Cond-DP below DP-SGD at every epsilon (interval < 0)"] is False
    assert result["checks"]["a=0: interval within +-log(1.05) at every epsilon"] is True
    assert result["passed"] is False


@pytest.mark.slow
def test_quick_reproduction_runs():
    result = run_reproduction("cond-dp-spectra", "quick", 0)
    assert isinstance(result["passed"], bool)
    assert result["headroom"]["holds"] in (True, False)
