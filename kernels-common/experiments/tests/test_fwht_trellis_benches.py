"""The fwht and trellis-decode benchmarks, run as ``icml-bench`` runs them on a CPU, with a stand-in clock:
the rows and their ratios, not the timing, are under test."""

from __future__ import annotations

import pytest
import torch

from icml_kernels_experiments.fwht import bench as fwht_bench
from icml_kernels_experiments.trellis import bench as trellis_bench

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="the CUDA configurations are long benchmarks"
)

# a dense median whose rounding in the rows (to 5 and 4 decimals) moves its ratio in the third decimal
DENSE_MS, OTHER_MS = 0.00074949, 0.00037


def clock(fn, device, *args, **kwargs):
    """The stand-in median (and quantiles) of the implementation ``fn`` calls."""
    ms = DENSE_MS if fn.func in (torch.matmul, torch.nn.functional.linear) else OTHER_MS
    return ms, ms, ms


@pytest.mark.parametrize("bench", [fwht_bench, trellis_bench], ids=["fwht", "trellis-decode"])
def test_speedups_come_from_the_unrounded_medians(bench, monkeypatch, one_torch_thread):
    monkeypatch.setattr(bench, "time_ms", clock)
    rows = bench.run("quick", 0)
    assert rows and all(row["correct"] for row in rows)
    for row in rows:
        expected = 1.0 if row["impl"].startswith("dense") else round(DENSE_MS / OTHER_MS, 3)
        assert row["speedup_vs_dense"] == expected, (
            row
        )  # from the rounded medians: 0.999 (fwht dense), 1.874 (trellis fused)
