"""The split-conformal reproduction follows the protocol and its verdict comes from the numbers."""

import pytest

from icml_stats.conformal.repro import run


def test_quick_run_passes_and_follows_the_protocol():
    pytest.importorskip("icml_tools.assets")
    from icml_tools.protocol import validate_result

    result = validate_result(run("quick", 0))
    assert result["passed"] is True
    assert "Placeholder until ERT lands" in result["claim"]
    assert abs(result["ours"] - 0.9) < 0.03
    by_bin = [r["coverage"] for r in result["rows"]]
    assert sum(r["n_test"] for r in result["rows"]) == 10_000
    # one interval width for growing noise: over-coverage at small x0, under-coverage at large x0
    assert by_bin[0] > 0.99 and by_bin[-1] < 0.8
    assert by_bin == sorted(by_bin, reverse=True)


def test_bad_budget():
    with pytest.raises(ValueError, match="budget"):
        run("medium", 0)
