"""The proteus-gaussian reproduction and the proteus-viterbi and proteus-quantize-speed benchmarks, run as
the runners run them."""

import pytest

from icml_compress.proteus import CODE_NAMES
from icml_compress_experiments.proteus import bench
from icml_tools.bench import run_benchmark
from icml_tools.repro import run_reproduction


@pytest.mark.slow
def test_quick_reproduction_follows_the_protocol_and_passes():
    result = run_reproduction("proteus-gaussian", "quick", 0)
    assert result["passed"] is True
    assert {r["code"] for r in result["rows"]} >= set(CODE_NAMES)
    assert result["ours"] <= 1.03 * result["baseline"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_paired_tiles_are_never_the_runs_own(monkeypatch, seed):
    import torch

    from icml_compress_experiments.proteus import repro

    calls = []

    def fake(code, L, K, V, n_tiles, seed):  # a stand-in MSE per tile: records which tiles were used
        calls.append((n_tiles, seed))
        return torch.full((n_tiles,), 0.05)

    monkeypatch.setattr(repro, "gaussian_tile_mse", fake)
    repro.run("quick", seed)
    paired = {s for n, s in calls if n == repro.PAIRED_TILES}
    chosen = {s for n, s in calls if n == repro.BUDGETS["quick"]["n_tiles"]}
    assert chosen == {seed} and len(paired) == 1 and seed not in paired
    assert paired == ({repro.PAIRED_SEED} if seed != repro.PAIRED_SEED else {0})


def test_viterbi_benchmark_checks_correctness_first(monkeypatch):
    monkeypatch.setattr(bench, "TILES", {"quick": 8})
    monkeypatch.setattr(bench, "LS", (8,))
    rows = run_benchmark("proteus-viterbi", "quick", 0)
    assert {r["mode"] for r in rows} == {"tail-biting", "free"} and all(r["L"] == 8 for r in rows)
    assert all(r["correct"] and r["weights_per_s"] > 0 for r in rows)


def test_quantize_speed_benchmark_checks_paths_first(monkeypatch):
    from icml_compress_experiments.quantize import speed

    monkeypatch.setitem(speed.BUDGETS, "quick", {"tiles": 40, "repeats": 1, "models": False})
    rows = run_benchmark("proteus-quantize-speed", "quick", 0)
    assert [r["mode"] for r in rows][:2] == ["one core", "all cores"]
    assert all(r["equal_to_one_core"] and r["weights_per_s"] > 0 for r in rows)
    assert rows[0]["ratio_to_one_core"] == 1.0
