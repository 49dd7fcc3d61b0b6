"""The skci-type1-power reproduction: protocol and a verdict that can fail."""

import pytest

from icml_stats_experiments.seqci import repro
from icml_tools.repro import run_reproduction


def _rates(type1=0.03, oracle=0.02, power05=0.9, curve=(0.1, 0.3, 0.9, 1.0), early=0.2):
    t1 = {m: type1 for m in repro.NULL_METHODS} | {"SKCI oracle": oracle}
    power = {}
    for a, p in zip(repro.EFFECTS, curve, strict=True):
        for m in repro.POWER_METHODS:
            for n in repro.CHECKPOINTS:
                power[(m, a, n)] = p if n == repro.N else early
    power[("SKCI", 0.5, repro.N)] = power05
    return t1, power


def test_the_verdict_fails_when_a_check_fails():
    assert all(repro.evaluate(*_rates(), r_null=200, r_power=100).values())
    assert repro.evaluate(*_rates(type1=0.09), 200, 100)["type1_skci"] is False
    assert repro.evaluate(*_rates(oracle=0.1), 200, 100)["type1_oracle"] is False
    assert repro.evaluate(*_rates(power05=0.7), 200, 100)["power_at_0.5"] is False
    assert repro.evaluate(*_rates(curve=(0.1, 0.6, 0.9, 0.3)), 200, 100)["rises_with_effect"] is False
    assert repro.evaluate(*_rates(early=0.8), 200, 100)["rises_with_samples"] is False
    confounded = {p: 0.05 for p in repro.CONFOUNDED}
    assert repro.evaluate(*_rates(), 200, 100, confounded, 100)["type1_confounded"] is True
    confounded[(3.0, 20)] = 0.1  # above 0.05 + 2 sqrt(0.05 * 0.95 / 100) = 0.094
    assert repro.evaluate(*_rates(), 200, 100, confounded, 100)["type1_confounded"] is False


def test_run_follows_the_protocol(monkeypatch):
    monkeypatch.setitem(repro.BUDGETS, "quick", {"null": 1, "power": 1, "confounded": 1})
    monkeypatch.setattr(repro, "N", 120)
    monkeypatch.setattr(repro, "CHECKPOINTS", (60, 120))
    monkeypatch.setattr(repro, "EFFECTS", (0.5, 1.0))
    monkeypatch.setattr(repro, "_map", lambda jobs, workers: [repro._call(j) for j in jobs])  # in-process
    result = run_reproduction("skci-type1-power", "quick", 1)
    expected = len(repro.NULL_METHODS) + 2 * len(repro.POWER_METHODS) + 2 * len(repro.CONFOUNDED_METHODS)
    assert len(result["rows"]) == expected
    assert isinstance(result["passed"], bool) and 0 <= result["ours"] <= 1


@pytest.mark.slow
def test_quick_reproduction_runs():
    result = run_reproduction("skci-type1-power", "quick", 0)
    assert isinstance(result["passed"], bool) and len(result["rows"]) == 6 + 8 + 8
