"""The desi-simulations reproduction: the simulations' known truth, the statistics of the criterion, a
verdict that can fail, and the protocol end to end on a tiny budget."""

import itertools
from functools import partial

import numpy as np
import pytest

from icml_stats.frechet import DeSI
from icml_stats_experiments.frechet import repro
from icml_stats_experiments.frechet.testbed import SIMULATIONS, simulate
from icml_tools.repro import run_reproduction


def test_simulations_hold_valid_objects_and_their_truth():
    for name in SIMULATIONS:
        sim = simulate(name, 50, 10, 0)
        sim.space.check(sim.y)
        sim.space.check(sim.truth)
        np.testing.assert_allclose(sim.u, sim.x @ sim.theta)
        assert sim.theta @ sim.theta == pytest.approx(1.0)
    a, b = simulate("spd", 50, 10, 3), simulate("spd", 50, 10, 3)
    np.testing.assert_array_equal(a.y, b.y)


def test_oracle_index_local_frechet_regression_error_falls_with_n_on_the_spd_simulation():
    from icml_stats.frechet import LocalFrechetRegressor

    errors = []
    for n in (100, 300, 900):
        per_seed = []
        for seed in range(3):
            sim = simulate("spd", n, 10, seed)
            model = LocalFrechetRegressor(sim.space, random_state=seed).fit(sim.u[:, None], sim.y)
            per_seed.append(sim.space.dist2(model.predict(sim.u_test[:, None]), sim.truth).mean())
        errors.append(float(np.mean(per_seed)))
    assert errors[0] > errors[1] > errors[2], errors
    assert errors[2] < 0.5 * errors[0], errors


def test_sign_flip_p_is_exact():
    d = np.array([0.3, -0.1, 0.5, 0.2, -0.05, 0.4])
    brute = np.mean(
        [np.mean(np.array(s) * d) >= d.mean() - 1e-12 for s in itertools.product((1, -1), repeat=6)]
    )
    assert repro.sign_flip_p(d) == pytest.approx(brute)
    assert repro.sign_flip_p(np.ones(20)) == pytest.approx(2.0**-20)
    # more than 22 values: 2^20 random patterns, the observed one counted in, so never 0
    assert repro.sign_flip_p(np.ones(30)) == pytest.approx(1 / (2**20 + 1))


def _summary(ratio_lfr_gfr=0.1, cos=0.99, p=0.001, ratio=1.1):
    return {
        "median err(oracle LFR) / err(GFR)": ratio_lfr_gfr,
        "median |cos|": cos,
        "sign-flip p (GFR - DeSI > 0)": p,
        "median err(DeSI) / err(oracle LFR)": ratio,
    }


def test_the_verdict_fails_when_a_check_fails():
    headroom, checks = repro.evaluate(_summary())
    assert headroom and all(checks.values())
    assert repro.evaluate(_summary(ratio_lfr_gfr=0.7))[0] is False
    for bad in ({"cos": 0.9}, {"p": 0.2}, {"ratio": 1.5}):
        assert not all(repro.evaluate(_summary(**bad))[1].values())


def test_run_follows_the_protocol(monkeypatch, one_torch_thread):
    monkeypatch.setitem(
        repro.BUDGETS, "quick", {"n": 60, "reps": {"wasserstein": 2, "spd": 1, "compositional": 1}}
    )
    monkeypatch.setattr(repro, "DeSI", partial(DeSI, epochs=15, n_init=1))
    monkeypatch.setattr(repro, "map_repetitions", lambda jobs, workers: [repro.repetition(j) for j in jobs])
    result = run_reproduction("desi-simulations", "quick", 0)
    assert len(result["rows"]) == 4
    assert set(result["summaries"]) == set(SIMULATIONS)
    assert isinstance(result["passed"], bool) and result["passed"] is False  # 2 repetitions: p >= 1/4
    assert result["summaries"]["wasserstein"]["sign-flip p (GFR - DeSI > 0)"] >= 0.25


@pytest.mark.slow
def test_quick_reproduction_runs():
    result = run_reproduction("desi-simulations", "quick", 0)
    assert isinstance(result["passed"], bool) and len(result["rows"]) == 4
    assert result["headroom"]["holds"] in (True, False)
