"""The reproduction ``bedtime-harness`` (:mod:`icml_agents_experiments.bedtime`): the three networks, the
realism check, the slope interval, the benchmark, and (slow) one tiny run through the runner."""

import numpy as np
import pytest

import icml_agents_experiments.bedtime.repro as repro
from icml_agents.bedtime import (
    build_differentiation,
    build_recognition,
    evaluate,
    generate_series,
    random_attributes,
)
from icml_agents_experiments.bedtime import bench
from icml_agents_experiments.bedtime.nets import PlotCNN, SeriesCNN, TextCNN, train
from icml_tools.repro import run_reproduction


@pytest.mark.parametrize("cls", [SeriesCNN, PlotCNN, TextCNN])
def test_networks_read_their_modality_and_train(cls):
    model = cls()
    series = [generate_series(random_attributes(i), 120, i) for i in range(3)] + [
        np.r_[np.arange(30.0), np.nan]
    ]
    probs = model.predict_proba(series)
    assert all(p.shape[0] == 4 and np.allclose(p.sum(1), 1) for p in probs.values())
    log = train(model, 3, seed=0, batch=8)
    assert np.isfinite(log["loss_last"]) and not model.training
    row = evaluate(model, build_recognition(8, seed=1), batch_size=4)
    assert row["modality"] == cls.modality and row["n"] == 8


def test_realism_finds_the_nile_changepoint():
    found = repro.realism()
    assert found["nile"]["event"] == "shift down" and found["nile"]["position"] == "beginning"
    assert found["co2 (last 120 months)"]["trend"] == "increasing"


def test_slope_interval_and_length_classifier():
    severities = np.array([0.0, 0.5, 1.0])
    correct = np.array([[1] * 90 + [0] * 10, [1] * 60 + [0] * 40, [1] * 30 + [0] * 70])
    slope, lo, hi = repro._slope_interval(correct, severities, 0)
    assert slope == pytest.approx(-0.6) and lo < slope < hi < 0
    length = repro.length_classifier(0)
    assert 0.4 < length["accuracy"] < 0.6


def test_benchmark_rows(monkeypatch):
    monkeypatch.setitem(bench.BUDGETS, "quick", {"items": 8, "repeats": 1, "lm_items": 2})
    rows = bench.run("quick")
    assert {r["describer"] for r in rows} >= {
        "feature describer",
        "tiny random Llama (text)",
        "scripted backend (text)",
    }
    assert [
        r["ratio to feature describer (medians)"] for r in rows if r["describer"] == "feature describer"
    ] == [1.0]


@pytest.mark.slow
def test_reproduction_follows_the_protocol(monkeypatch):
    tiny = {"seeds": 1, "steps": 3, "test": 20, "robust": 20, "severities": (0.0, 1.0), "smollm2": 2}
    monkeypatch.setitem(repro.BUDGETS, "quick", tiny)
    monkeypatch.setattr(repro, "SANITY_ITEMS", 200)
    result = run_reproduction("bedtime-harness", "quick", 0)
    assert set(result["comparison"]) == {"recognition", "differentiation"}
    assert len(result["fragility"]) == 15
    assert result["ours"] == result["comparison"]["recognition"]["plot_accuracy"]
    assert result["passed"] == (
        all(result["sanity"].values()) and result["headroom"]["holds"] and all(result["checks"].values())
    )
    assert any(r.get("describer") == "SmolLM2-135M" for r in result["rows"])
    assert build_differentiation(2, 4, 0)[0].task == "differentiation"
