"""The fourier-majority reproduction follows the protocol and its verdict comes from the numbers."""

import math

from icml_tools.repro import run_reproduction


def test_quick_run_passes_and_follows_the_protocol():
    result = run_reproduction("fourier-majority", "quick", 0)
    assert result["passed"] is True
    assert "Placeholder" in result["claim"]
    assert [r["n"] for r in result["rows"]] == [3, 5, 7, 9, 11, 13, 15]
    assert result["ours"] <= 1e-12
    # the sampled baseline is a Monte-Carlo estimate: its error is far above rounding
    assert result["baseline"] > 1e-3
    w1 = {r["n"]: r["W1"] for r in result["rows"]}
    assert w1[3] == 0.75 and 0 < w1[15] - 2 / math.pi < 0.025
