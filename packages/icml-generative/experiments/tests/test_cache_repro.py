"""The reproduction ``navicache-frontier`` (:mod:`icml_generative_experiments.cache.repro`): its budgets and
sweeps, and (slow) one run through the runner on a small, briefly trained testbed."""

import math

import numpy as np
import pytest

import icml_generative_experiments.cache.repro as repro
from icml_generative_experiments.cache.matching import interp_at
from icml_generative_experiments.cache.testbed import DiTTestbedConfig, TestbedConfig
from icml_tools.repro import run_reproduction


def test_reproduction_budgets_have_their_own_testbeds_and_dense_sweeps():
    quick, full = repro.BUDGETS["quick"]["testbed"], repro.BUDGETS["full"]["testbed"]
    # both budgets run the tiled DiT; the quick one trains briefly, under a cache key of its own
    assert isinstance(full, DiTTestbedConfig) and isinstance(quick, DiTTestbedConfig)
    assert quick.key() != full.key() and quick.train_steps < full.train_steps
    assert quick.num_layers == full.num_layers and quick.frames == full.frames
    # the earlier Wan recipes keep the keys their published numbers were measured on
    assert repro.WAN_FULL_TESTBED == TestbedConfig() and repro.WAN_FULL_TESTBED.key() == "2ef5169bf5ec"
    assert repro.BUDGETS["full"]["seeds"] == 3
    for budget in repro.BUDGETS.values():
        assert budget["motion_clips"] >= 32 and len(budget["sweep"]) >= 5
    assert all(list(t) == sorted(t) and len(t) == 12 for t in repro.THRESHOLDS.values())
    # sweep points with equal forwards are averaged, and exact hits need no neighbour
    assert interp_at([(10, 30.0), (12, 40.0), (12, 44.0), (14, 50.0)], 12) == 42.0
    assert interp_at([(10, 30.0), (12, 40.0), (12, 44.0)], 11) == 36.0
    assert math.isnan(interp_at([(10, 30.0), (12, 40.0)], 13))
    assert interp_at([(10, 30.0), (12, math.inf), (14, 50.0)], 12) == 40.0  # an infinite PSNR is left out
    # issue 24: the oracle arm sweeps the same thresholds as NaviCache, the non-inferiority margin is 0.5 dB
    assert repro.THRESHOLDS["Oracle"] == repro.THRESHOLDS["NaviCache"] and repro.NONINFERIORITY_DB == -0.5
    # an undefined matched value makes the interval undefined (a criterion on it is not met)
    assert all(math.isnan(v) for v in repro._paired_interval(np.array([[1.0, math.nan]])))
    lo, hi = repro._paired_interval(np.array([[1.0, 2.0], [1.5, 2.5]]))
    assert 1.0 <= lo < hi <= 2.5


@pytest.mark.slow
def test_reproduction_follows_the_protocol(tmp_path, monkeypatch):
    # a small, briefly trained testbed in a temporary cache: the protocol and the bookkeeping, not the numbers
    monkeypatch.setenv("ICML_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(
        repro.BUDGETS["quick"], "testbed", DiTTestbedConfig(size=8, train_steps=40, batch_size=4)
    )
    result = run_reproduction("navicache-frontier", "quick", 0)  # loads this same module
    assert any(tmp_path.iterdir())  # the trained weights were cached
    methods = {r["method"] for r in result["rows"] if "method" in r}
    assert methods == {"uncached", "fewer-steps", *repro.THRESHOLDS}
    useful = {r["comparison"]: r for r in result["rows"] if r.get("kind") == "usefulness"}
    assert set(useful) == {"Oracle - fewer-steps", "NaviCache - EasyCache", "NaviCache - fewer-steps"}
    regime = [r for r in result["rows"] if r.get("kind") == "regime"]
    assert len(regime) == 8 and all(isinstance(r["below_zero"], bool) for r in regime)
    for row in result["rows"]:
        if row.get("method") not in (None, "uncached"):
            assert 0 < row["forwards"] <= 30 and row["psnr"] > 0
    preset = next(r for r in result["rows"] if r.get("kind") == "balanced_preset")
    assert preset["uncached_forwards"] == 30 and 0 < preset["forwards"] <= 30
    assert isinstance(result["passed"], bool)
