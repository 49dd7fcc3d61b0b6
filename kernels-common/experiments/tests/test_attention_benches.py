"""The block-sparse-attention and echo-combine benchmarks, run as ``icml-bench`` runs them (on a CPU: their
small reference-only configuration)."""

from __future__ import annotations

import pytest
import torch

from icml_kernels_experiments import timing
from icml_kernels_experiments.block_sparse_attention import bench
from icml_kernels_experiments.echo_combine import bench as echo_bench
from icml_tools.bench import run_benchmark

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="the CUDA configuration is a long benchmark"
)


@pytest.fixture(autouse=True)
def one_sample(monkeypatch):
    """One timed call after the warm-up: the rows, not the timing, are under test."""
    for module in (bench, echo_bench):
        monkeypatch.setattr(module, "time_ms", lambda fn, device: timing.time_ms(fn, device, 1, 1))


def test_block_sparse_attention_benchmark_checks_correctness_first():
    rows = run_benchmark("block-sparse-attention", "quick", 0)
    assert [r["impl"] for r in rows] == ["sdpa", "reference", "reference"]
    assert all(r["correct"] and r["median_ms"] > 0 and r["speedup_vs_sdpa"] > 0 for r in rows)
    assert rows[0]["speedup_vs_sdpa"] == 1.0 and rows[0]["kept_fraction"] == 1.0
    assert 0 < rows[1]["kept_fraction"] < rows[2]["kept_fraction"] == 1.0  # densities 0.25 and 1.0


def test_block_sparse_attention_benchmark_gives_a_wrong_implementation_no_ratio(monkeypatch):
    real = bench.attention_reference
    # the timed reference (float32 q) is wrong; the float64 truth (float64 q) stays right
    monkeypatch.setattr(
        bench,
        "attention_reference",
        lambda q, *a: (real(q, *a)[0] * (1.1 if q.dtype == torch.float32 else 1.0), None),
    )
    rows = bench.run("quick", 0)
    assert [r["correct"] for r in rows] == [True, False, False]
    assert [r["speedup_vs_sdpa"] is None for r in rows] == [False, True, True]


def test_echo_combine_benchmark():
    (row,) = run_benchmark("echo-combine", "quick", 0)
    assert row["impl"] == "reference" and row["correct"] and row["speedup_vs_reference"] == 1.0
    assert row["rel_rms_error"] < 1e-6 and row["gbps"] > 0
