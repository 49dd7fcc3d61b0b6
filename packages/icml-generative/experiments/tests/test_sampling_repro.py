"""The reproduction ``pf-ode-heun`` (:mod:`icml_generative_experiments.sampling.repro`), run through the runner."""

import pytest

from icml_generative_experiments.sampling.repro import CLAIM
from icml_tools.repro import run_reproduction


@pytest.mark.slow
def test_repro_follows_the_protocol():
    result = run_reproduction("pf-ode-heun", "quick", 0)
    headline = next(r for r in result["rows"] if r["nfe"] == 32)
    assert result["ours"] == headline["heun_sw2"] and result["baseline"] == headline["euler_sw2"]
    assert result["passed"] == (result["ours"] < result["baseline"])
    assert result["claim"] == CLAIM and result["claim"].startswith("Karras et al. 2022 (EDM)")
    # Noise-free solver error: Heun's falls ~4x per doubling of NFE at 32 -> 64, Euler's ~2x.
    r32, r64 = headline, next(r for r in result["rows"] if r["nfe"] == 64)
    assert r32["heun_ode_error"] / r64["heun_ode_error"] > 3.0
    assert 1.5 < r32["euler_ode_error"] / r64["euler_ode_error"] < 2.5
