"""The gaussian-rasterize benchmark, run as ``icml-bench`` runs it (on a CPU: its small reference-only
configuration)."""

from __future__ import annotations

import pytest
import torch

from icml_kernels_experiments import timing
from icml_kernels_experiments.gaussian_rasterize import bench
from icml_tools.bench import run_benchmark

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="the CUDA configuration is a long benchmark"
)


@pytest.fixture(autouse=True)
def one_sample(monkeypatch):
    """One timed call after the warm-up: the rows, not the timing, are under test."""
    monkeypatch.setattr(bench, "time_ms", lambda fn, device: timing.time_ms(fn, device, 1, 1))


def test_gaussian_rasterize_benchmark():
    (row,) = run_benchmark("gaussian-rasterize", "quick", 0)
    assert row["impl"] == "reference" and row["correct"] and row["speedup_vs_reference"] == 1.0
    assert row["rel_rms_error"] < 1e-5 and row["mpix_per_s"] > 0
    assert (row["width"], row["height"], row["N"], row["C"]) == (64, 64, 500, 3)


def test_gaussian_rasterize_benchmark_gives_a_wrong_implementation_no_ratio(monkeypatch):
    real = bench.rasterize_reference

    # the timed reference (float32) is wrong; the float64 truth stays right
    def wrong(means2d, *args, **kwargs):
        image, alpha = real(means2d, *args, **kwargs)
        return image * (1.1 if means2d.dtype == torch.float32 else 1.0), alpha

    monkeypatch.setattr(bench, "rasterize_reference", wrong)
    (row,) = bench.run("quick", 0)
    assert not row["correct"] and row["speedup_vs_reference"] is None
