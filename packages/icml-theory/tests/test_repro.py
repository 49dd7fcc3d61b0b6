"""The fourier-majority reproduction follows the protocol and its verdict comes from the numbers."""

import math

import pytest

from icml_theory.boolean.repro import run


def test_quick_run_passes_and_follows_the_protocol():
    result = run("quick", 0)
    protocol = pytest.importorskip("icml_tools.protocol")
    protocol.validate_result(result)
    assert result["passed"] is True
    assert "Placeholder" in result["claim"]
    assert [r["n"] for r in result["rows"]] == [3, 5, 7, 9, 11, 13, 15]
    assert result["ours"] <= 1e-12
    # the sampled baseline is a Monte-Carlo estimate: its error is far above rounding
    assert result["baseline"] > 1e-3
    w1 = {r["n"]: r["W1"] for r in result["rows"]}
    assert w1[3] == 0.75 and 0 < w1[15] - 2 / math.pi < 0.025


def test_bad_budget():
    with pytest.raises(ValueError, match="budget"):
        run("medium", 0)
