"""The grpo-bandit placeholder reproduction: the bandit trainer and the protocol."""

import numpy as np
import pytest

from icml_agents_experiments.rl.repro import ARM_PROBS, train
from icml_tools.repro import run_reproduction


def test_bandit_training_starts_uniform_and_is_reproducible():
    curve = train("grpo", runs=4, steps=20, seed=3)
    assert curve.shape == (21, 4)
    np.testing.assert_allclose(curve[0], ARM_PROBS.mean())  # zero logits: the uniform policy
    np.testing.assert_array_equal(curve, train("grpo", runs=4, steps=20, seed=3))
    assert ((curve >= ARM_PROBS.min()) & (curve <= ARM_PROBS.max())).all()
    with pytest.raises(ValueError, match="method"):
        train("ppo", runs=1, steps=1, seed=0)


def test_repro_follows_the_protocol():
    result = run_reproduction("grpo-bandit", "quick", 0)
    rows = {r["method"]: r for r in result["rows"]}
    assert result["ours"] == rows["grpo"]["final_expected_reward"]
    assert result["baseline"] == rows["reinforce"]["final_expected_reward"]
    paired = rows["grpo - reinforce (paired)"]
    assert paired["final_expected_reward"] == pytest.approx(result["ours"] - result["baseline"])
    assert result["passed"] == (paired["final_expected_reward"] > 2 * paired["standard_error"])
    assert result["claim"].startswith("Placeholder")
