"""Heavier SAE checks: the ``sae-smollm2`` reproduction at the quick budget (heavy: harvests SmolLM2
activations and trains the AuxK SAE) and the ``sae-train`` and ``sae-distributed`` benchmarks (slow)."""

from __future__ import annotations

import pytest

from icml_tools.bench import run_benchmark
from icml_tools.repro import run_reproduction


@pytest.mark.heavy
def test_sae_smollm2_quick_reproduction_follows_the_protocol_and_passes():
    from icml_interp_experiments.sae.repro import FVU_TARGET, K

    result = run_reproduction("sae-smollm2", "quick", 0)
    (auxk,) = result["rows"]  # the quick budget trains the criterion's run only
    assert result["passed"] == (auxk["fvu"] < FVU_TARGET and abs(auxk["l0"] - K) <= 0.1 * K)
    assert result["passed"], result["rows"]
    assert auxk["run"] == "auxk" and result["cache"].startswith(("built", "hit"))


@pytest.mark.slow
def test_sae_train_benchmark_rows():
    (row,) = run_benchmark("sae-train", "quick", 0)
    assert row["d_in"] == 576 and row["d_sae"] == 9216 and row["k"] == 32
    assert row["tokens_per_second"] > 0


@pytest.mark.slow
def test_sae_distributed_benchmark_rows():
    rows = run_benchmark("sae-distributed", "quick", 0)
    assert [(r["processes"], r["threads_per_process"]) for r in rows] == [(1, 2), (1, 1), (2, 1)]
    assert all(r["correct"] and r["tokens_per_second"] > 0 for r in rows)
    assert rows[0]["speedup_train"] == 1.0 and rows[2]["max_param_rel_diff"] <= 1e-3
