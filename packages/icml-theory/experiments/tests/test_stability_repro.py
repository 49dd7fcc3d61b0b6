"""The lp-coverage testbed (its sampler and exact population risk) and the reproduction end to end."""

from __future__ import annotations

import math

import numpy as np
import pytest

from icml_theory_experiments.stability import bench, repro
from icml_tools.protocol import validate_result


def test_features_have_unit_variance_and_the_noise_its_student_t_variance():
    rows = repro.sample(np.random.default_rng(0), 400_000)
    x, y = rows[:, :-1], rows[:, -1]
    np.testing.assert_allclose(x.var(axis=0), 1.0, rtol=0.05)
    assert abs(np.corrcoef(x[:, 0], x[:, 1])[0, 1]) < 0.01
    assert (y - x @ repro.W_STAR).var() == pytest.approx(repro.NOISE_VAR, rel=0.05)


def test_the_gap_uses_the_exact_population_risk():
    """R(ŵ) in the gap equals a large fresh-sample estimate of the risk of the same ŵ."""
    rng = np.random.default_rng(1)
    data = repro.sample(rng, 3 * 100).reshape(3, 100, -1)
    w = repro.MODEL.fit(data)
    fresh = repro.sample(rng, 1_000_000)
    for b in range(3):
        risk = float(np.mean((fresh[:, -1] - fresh[:, :-1] @ w[b]) ** 2))
        exact = repro.gaps(data[b : b + 1])[0] + float(repro.MODEL.loss(w[b : b + 1], data[b : b + 1]).mean())
        assert exact == pytest.approx(risk, rel=0.02)


def test_binomial_cover_test():
    assert repro._covers(10, 1000, 0.01)[0]  # 10 of 1000 at delta = 0.01: as expected
    assert not repro._covers(20, 1000, 0.01)[0]  # twice as many: rejected (p ~ 0.003)


def test_the_benchmark_compares_equal_estimates():
    rows = bench.run("quick")
    assert all(r["correct"] for r in rows) and rows[0]["speedup_vs_loop"] > 0


@pytest.mark.slow
def test_quick_reproduction_runs_and_decides_by_its_criterion():
    result = repro.run("quick", 0)
    validate_result(result)
    rows = result["rows"]
    assert len(rows) == len(repro.SIZES) * len(repro.DELTAS)
    # the verdict is the criterion applied to the rows
    checks = result["checks"]
    assert checks["lp covers"] == all(r["lp covers"] and r["fuk-nagaev covers"] for r in rows)
    assert checks["chebyshev covers"] == all(r["chebyshev covers"] for r in rows)
    assert checks["slopes in range"] == all(-0.65 <= s <= -0.35 for s in checks["slopes"].values())
    holds = checks["lp covers"] and checks["chebyshev covers"] and checks["slopes in range"]
    assert result["passed"] == (result["headroom"]["holds"] and holds)
    for r in rows:  # a bound that covers has a violation rate its binomial test accepts
        assert r["lp covers"] == (r["lp p"] > repro.TEST_LEVEL)
        assert math.isfinite(r["lp width"]) and r["lp width"] > 0
