"""The neurallog-kappa testbed (kappa calibration, pairing by seed), the benchmark, and the reproduction end to end."""

from __future__ import annotations

import math

import numpy as np
import pytest

from icml_theory_experiments.bandits import bench, repro
from icml_theory_experiments.bandits.environment import make_problem, scale_for
from icml_tools.protocol import validate_result


@pytest.mark.parametrize("kappa", repro.KAPPAS)
def test_realized_kappa_is_within_5_percent_of_its_target(kappa):
    assert 2 + 2 * math.cosh(scale_for(kappa)) == pytest.approx(kappa, rel=1e-12)
    for seed in range(3):
        problem = make_problem(kappa, 2000, seed=seed)
        assert abs(problem.realized_kappa / kappa - 1) <= 0.05
        assert problem.realized_kappa <= kappa * (1 + 1e-9)  # sup over all contexts bounds the drawn ones


@pytest.mark.parametrize("kappa", repro.KAPPAS)
def test_fixed_arms_hit_kappa_and_make_the_best_arm_the_quietest(kappa):
    for seed in range(3):
        problem = make_problem(kappa, 50, seed=seed, arms="fixed")
        assert (problem.contexts == problem.contexts[:1]).all()  # the same arms every round
        np.testing.assert_allclose(np.linalg.norm(problem.contexts[0], axis=1), 1.0, rtol=1e-12)
        assert problem.realized_kappa == pytest.approx(kappa, rel=1e-9)
        best = problem.means[0].max()
        assert best * (1 - best) == pytest.approx(1 / kappa, rel=1e-9)  # the optimal arm has variance 1/kappa
        assert len(np.unique(problem.means[0].round(12))) == repro.K


def test_the_problem_is_what_its_means_say():
    problem = make_problem(50.0, 4000, K=10, d=8, seed=0)
    np.testing.assert_allclose(problem.means, 1 / (1 + np.exp(-problem.logit(problem.contexts))), rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(problem.contexts, axis=-1), 1.0, rtol=1e-12)
    # Bernoulli draws: the realized rewards match the means on average (40k draws)
    assert abs(problem.rewards.mean() - problem.means.mean()) < 4 * 0.5 / math.sqrt(problem.rewards.size)
    assert set(np.unique(problem.rewards)) <= {0.0, 1.0}


def test_problems_are_paired_by_seed():
    a, b, c = (make_problem(5.0, 50, seed=s) for s in (1, 1, 2))
    np.testing.assert_array_equal(a.contexts, b.contexts)
    np.testing.assert_array_equal(a.rewards, b.rewards)
    assert not np.array_equal(a.contexts, c.contexts)


def test_large_kappa_makes_the_best_arms_low_variance():
    low, high = make_problem(5.0, 500, seed=0), make_problem(200.0, 500, seed=0)
    assert high.optimal_variance < 0.1 < low.optimal_variance


def test_the_slope_of_a_power_law_is_its_exponent():
    t = np.arange(1, 2001, dtype=float)
    assert repro._slope(3 * t**0.5) == pytest.approx(0.5, abs=1e-9)
    assert repro._slope(0.1 * t) == pytest.approx(1.0, abs=1e-9)


def test_the_benchmark_times_equal_inverses():
    rows = bench.run("quick")
    ops = [r for r in rows if r["measure"] == "confidence ops"]
    assert ops and all(r["correct"] and r["SM relative error"] <= 1e-8 for r in ops)
    assert all(r["median_ms_per_round"] > 0 for r in rows)
    assert {r["impl"] for r in rows} == set(bench.KINDS)


@pytest.mark.slow
def test_quick_reproduction_runs_and_decides_by_its_criterion():
    result = repro.run("quick", 0)
    validate_result(result)
    rows = result["rows"]
    assert {(r["kappa"], r["method"]) for r in rows} == {
        (k, m) for k in repro.KAPPAS for m in (*repro.METHODS, *repro.REFERENCES)
    }
    # the verdict is the criterion applied to the rows
    means = {(r["kappa"], r["method"]): r["final regret"] for r in rows}
    low = result["checks"]["kappa=5"]
    assert low["UCB-2 <= UCB-1"] == (means[5.0, repro.OURS] <= means[5.0, "NeuralLog-UCB-1"])
    for k in repro.KAPPAS[1:]:
        for r in rows:
            if r["kappa"] == k and r["method"] in repro.METHODS and r["method"] != repro.OURS:
                assert result["checks"][f"kappa={k:g}"][f"UCB-2 below {r['method']}"] == (
                    r["diff ci high"] < 0
                )
    holds = all(all(p.values()) for p in result["checks"].values())
    assert result["passed"] == (result["headroom"]["holds"] and holds)
    assert all(r["final regret"] >= 0 for r in rows)
