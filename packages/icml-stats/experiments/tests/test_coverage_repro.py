"""The ert-power and ert-benchmark reproductions: protocol, ground truth, and verdicts that can fail."""

import math

import numpy as np
import pytest

from icml_stats_experiments.coverage import repro, repro_benchmark
from icml_tools.repro import run_reproduction


def test_true_miscoverage_matches_closed_forms():
    axis = repro.true_miscoverage("axis", 400_000, 0)
    assert axis["l1"] == pytest.approx(0.08 * 2 / math.pi, rel=0.01)  # E|sin(pi U)| = 2/pi
    assert axis["l2"] == pytest.approx(0.08**2 / 2, rel=0.01)  # E sin^2 = 1/2
    inter = repro.true_miscoverage("interaction", 10_000, 0)
    assert inter["l1"] == pytest.approx(0.08) and inter["l2"] == pytest.approx(0.0064)
    assert repro.true_miscoverage("null", 1000, 0) == {"l1": 0.0, "l2": 0.0, "kl": 0.0}


def test_permutation_tests_separate_null_and_violation():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (2000, 5))
    groups = np.clip(((x[:, 0] + 1) / 2 * 10).astype(int), 0, 9)
    null = (rng.random(2000) < 0.9).astype(int)
    axis = (rng.random(2000) < repro.coverage_probability(x, "axis")).astype(int)
    assert repro.covgap_pvalue(groups, axis, 100, rng) <= 0.02
    assert repro.covgap_pvalue(groups, null, 100, rng) > 0.05
    assert repro.wsc_pvalue(x, axis, 50, rng) <= 0.05


def _rows(**overrides):
    rows = []
    for scenario in repro.SCENARIOS:
        for n in (500, 2000, 10000):
            row = {
                "scenario": scenario,
                "n": n,
                "reps": 100,
                "reject_ert_l1": 0.04,
                "reject_covgap": 0.05,
                "max_additivity_residual": 0.0,
            }
            for loss in repro.LOSSES:
                truth = 0.0 if scenario == "null" else 0.01
                row |= {
                    f"true_{loss}": truth,
                    f"mean_ert_{loss}": 0.8 * truth - (0.001 if scenario == "null" else 0),
                    f"se_ert_{loss}": 0.0001,
                    f"ratio_{loss}": 0.8 if truth else float("nan"),
                }
            if scenario == "interaction" and n == 2000:
                row["reject_ert_l1"] = 0.9
            rows.append(row)
    return rows


def test_the_verdict_fails_when_a_check_fails():
    sizes = [500, 2000, 10000]
    assert all(repro.evaluate(_rows(), sizes).values())
    bad = _rows()
    next(r for r in bad if r["scenario"] == "null" and r["n"] == 2000)["reject_ert_l1"] = 0.2
    assert repro.evaluate(bad, sizes)["null_size"] is False
    bad = _rows()
    next(r for r in bad if r["scenario"] == "axis" and r["n"] == 10000)["ratio_l2"] = 0.5
    assert repro.evaluate(bad, sizes)["l2_ratio"] is False
    bad = _rows()
    next(r for r in bad if r["scenario"] == "interaction" and r["n"] == 2000)["reject_covgap"] = 0.7
    assert repro.evaluate(bad, sizes)["power"] is False


def test_power_run_follows_the_protocol(monkeypatch):
    monkeypatch.setitem(repro.BUDGETS, "quick", {"reps": {300: 2, 600: 2}, "perms": 10, "mc": 2000})
    monkeypatch.setattr(repro, "POWER_N", 600)
    result = run_reproduction("ert-power", "quick", 1)
    assert len(result["rows"]) == 6 and isinstance(result["passed"], bool)
    assert all(r["max_additivity_residual"] <= 1e-12 for r in result["rows"])


def test_benchmark_run_follows_the_protocol(monkeypatch):
    monkeypatch.setitem(
        repro_benchmark.BUDGETS, "quick", {"sizes": (300, 300, 600), "reps": 1, "diabetes_reps": 1}
    )
    result = run_reproduction("ert-benchmark", "quick", 0)
    assert {r["dataset"] for r in result["rows"]} == {"synthetic", "diabetes"}
    for row in result["rows"]:
        assert 0.8 < row["coverage"] < 1.0  # every conformal method near its 0.9 marginal guarantee
    assert -1 <= result["ours"] <= 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ert-power", "ert-benchmark"])
def test_quick_reproductions_pass(name):
    assert run_reproduction(name, "quick", 0)["passed"] is True
