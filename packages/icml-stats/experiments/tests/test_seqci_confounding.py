"""The skci-confounding reproduction: a verdict per grid point that can fail, and the protocol."""

from icml_stats_experiments.seqci import confounding
from icml_tools.repro import run_reproduction


def test_the_verdict_fails_at_any_point_above_the_bound():
    rates = {(s, d): 0.05 for s in confounding.STRENGTHS for d in confounding.DIMS}
    assert all(confounding.evaluate(rates, 300).values())
    assert confounding.bound(300) == 0.05 + 2 * (0.05 * 0.95 / 300) ** 0.5
    rates[(3.0, 20)] = 0.08  # above 0.075
    checks = confounding.evaluate(rates, 300)
    assert [k for k, ok in checks.items() if not ok] == ["|w|=3, d=20"]


def test_run_follows_the_protocol(monkeypatch):
    monkeypatch.setitem(confounding.BUDGETS, "quick", {"streams": 2, "diagnosis": 1})
    monkeypatch.setattr(confounding, "STRENGTHS", (3.0,))
    monkeypatch.setattr(confounding, "DIMS", (5,))
    monkeypatch.setattr(confounding, "N", 120)
    monkeypatch.setattr(confounding, "_map", lambda jobs, workers: [confounding._call(j) for j in jobs])
    result = run_reproduction("skci-confounding", "quick", 0)
    rows = {r["method"]: r for r in result["rows"]}
    assert set(rows) == set(confounding.METHODS)
    assert rows["SKCI"]["streams"] == 2 and rows["SKCI (cme)"]["streams"] == 1
    assert 0 <= rows["SKCI (cme)"]["warned"] <= 1 and isinstance(result["passed"], bool)
