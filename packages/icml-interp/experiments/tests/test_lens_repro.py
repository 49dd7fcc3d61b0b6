"""The reproduction ``lens-smollm2`` (slow: runs the cached SmolLM2)."""

import pytest

from icml_tools.repro import run_reproduction


@pytest.mark.slow
def test_repro_follows_the_protocol():
    result = run_reproduction("lens-smollm2", "quick", 0)
    assert result["system"] == "lens-smollm2"
    assert result["ours"] <= 1e-4 < 1.0 < result["baseline"]
    row = result["rows"][0]
    assert row["answer"] == " Paris" and row["effect_patch_all"] == pytest.approx(1.0, abs=1e-4)
    assert row["effect_patch_none"] == 0
    assert result["passed"] == row["passed"]
