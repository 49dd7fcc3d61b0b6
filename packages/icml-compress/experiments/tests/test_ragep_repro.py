"""The ragep-tiny-moe reproduction's helpers (fast), one end-to-end seed on a briefly trained testbed (slow),
and its quick run (heavy: trains the testbed on a fresh cache)."""

import dataclasses

import numpy as np
import pytest
import torch

from icml_compress_experiments.ragep.repro import (
    METHODS,
    PRUNED,
    RANDOM_DRAWS,
    kl_per_sequence,
    run_seed,
    seed_spread,
)
from icml_compress_experiments.ragep.testbed import TestbedConfig
from icml_tools.repro import run_reproduction


def test_kl_per_sequence_is_zero_for_equal_models_and_matches_the_closed_form():
    logp = torch.randn(3, 5, 7, dtype=torch.float64).log_softmax(-1)
    assert np.allclose(kl_per_sequence(logp, logp), 0)
    other = torch.randn(3, 5, 7, dtype=torch.float64).log_softmax(-1)
    expected = [
        np.mean([sum(p * (np.log(p) - np.log(q))) for p, q in zip(a, b, strict=True)])
        for a, b in zip(logp.exp().numpy(), other.exp().numpy(), strict=True)
    ]
    assert np.allclose(kl_per_sequence(logp, other), expected)


def test_seed_spread_is_the_std_across_seeds_or_the_standard_error_with_one_seed():
    assert seed_spread([1.0, 2.0, 3.0], np.zeros(4)) == pytest.approx(1.0)
    x = np.random.default_rng(0).normal(size=400)
    assert seed_spread([x.mean()], x) == pytest.approx(x.std() / np.sqrt(len(x)), rel=0.1)


@pytest.mark.slow
def test_one_seed_end_to_end_on_a_briefly_trained_testbed():
    cfg = dataclasses.replace(TestbedConfig(seed=0), steps=40, eval_n=64)
    out = run_seed(0, 32, cfg, cache=False)
    assert set(out["ratios"]) == set(PRUNED) and len(out["effective_ranks"]) == cfg.n_layers
    half = out["ratios"][0.5]
    assert half["roundtrip_identical"] and half["generated_tokens"] == 8
    for pruned in PRUNED:
        for method in METHODS:
            r = out["ratios"][pruned][method]
            assert sum(r["budgets"].values()) == round((1 - pruned) * cfg.n_experts * cfg.n_layers)
            assert (
                r["kl"].shape == (32,)
                and (r["kl"] >= -1e-12).all()
                and ((0 <= r["acc"]) & (r["acc"] <= 1)).all()
            )
        assert len(out["ratios"][pruned]["random"]["kl_draws"]) == RANDOM_DRAWS
    # NAEE minimizes each layer's output error; on the whole model it should not lose to random by much
    assert half["naee"]["kl"].mean() <= half["random"]["kl_median"] * 1.5


@pytest.mark.heavy
def test_quick_run_follows_the_protocol():
    result = run_reproduction("ragep-tiny-moe", "quick", 0)
    assert {r["pruned"] for r in result["rows"]} == set(PRUNED)
    assert result["checks"]["save/load logits identical"]
