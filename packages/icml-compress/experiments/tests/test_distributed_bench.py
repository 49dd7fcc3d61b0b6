"""The proteus-distributed benchmark: correctness before speed (its torchrun commands faked), and one quick
run as ``icml-bench`` runs it."""

import pytest

from icml_compress_experiments.quantize import distributed_bench
from icml_tools.bench import run_benchmark


@pytest.mark.parametrize("same", [True, False])
def test_speedups_are_left_empty_when_the_models_differ(monkeypatch, same):
    seconds = {1: (10.0, 8.0), 2: (6.0, 4.0)}  # (wall, quantize) by process count

    def fake(nproc, threads, budget, seed, out):
        wall, quantize = seconds[nproc]
        digest = "a" * 64 if same or nproc == 1 else "b" * 64
        return {
            "wall_s": wall,
            "quantize_s": quantize,
            "tensors_sha256": digest,
            "layers_per_rank": [1] * nproc,
            "weights": 7,
            "packed_hash": digest,
        }

    monkeypatch.setattr(distributed_bench, "launch", fake)
    rows = run_benchmark("proteus-distributed", "quick", 0)
    assert [(r["processes"], r["threads_each"]) for r in rows] == [(1, 2), (2, 1)]
    assert all(r["equal_to_one_process"] is same for r in rows)
    if same:
        assert rows[1]["speedup_quantize"] == 2.0 and rows[1]["speedup_wall"] == pytest.approx(
            10 / 6, abs=1e-3
        )
        assert rows[0]["speedup_quantize"] == 1.0
    else:
        assert all(r["speedup_wall"] is None and r["speedup_quantize"] is None for r in rows)


@pytest.mark.slow
def test_quick_benchmark_runs_torchrun_and_the_models_are_equal():
    rows = run_benchmark("proteus-distributed", "quick", 0)
    assert [r["layers_per_rank"] for r in rows] == ["14", "7/7"]
    assert all(r["equal_to_one_process"] for r in rows) and rows[1]["speedup_quantize"] > 0
