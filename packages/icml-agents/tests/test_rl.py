import statistics

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_agents.rl import exact_match_reward, group_relative_advantages, normalize_answer

rewards_and_groups = st.integers(2, 6).flatmap(
    lambda g: st.tuples(
        st.lists(st.floats(-100, 100, allow_nan=False), min_size=g, max_size=4 * g).map(
            lambda r: r[: len(r) // g * g]
        ),
        st.just(g),
    )
)


@settings(max_examples=60, deadline=None)
@given(rewards_and_groups)
def test_advantages_equal_a_per_group_brute_force(case):
    rewards, g = case
    adv = group_relative_advantages(rewards, g)
    assert isinstance(adv, np.ndarray) and adv.shape == (len(rewards),) and np.isfinite(adv).all()
    for start in range(0, len(rewards), g):
        group = rewards[start : start + g]
        mean, sd = statistics.fmean(group), statistics.stdev(group)
        expected = [(r - mean) / (sd + 1e-4) for r in group]
        np.testing.assert_allclose(adv[start : start + g], expected, rtol=1e-9, atol=1e-9)
        assert abs(adv[start : start + g].sum()) < 1e-6 * max(1.0, np.abs(adv[start : start + g]).max())


def test_advantages_have_zero_mean_and_unit_std_per_group():
    rewards = torch.tensor([0.0, 1.0, 1.0, 0.0, 3.0, -2.0, 7.5, 0.5, 2.0, 2.0, 2.0, 2.0], dtype=torch.float64)
    adv = group_relative_advantages(rewards, 4, eps=0.0).view(3, 4)
    torch.testing.assert_close(adv[:2].mean(dim=1), torch.zeros(2, dtype=torch.float64), atol=1e-15, rtol=0)
    torch.testing.assert_close(adv[:2].std(dim=1), torch.ones(2, dtype=torch.float64))
    # A constant group has no signal: zeros, not NaN, with the default eps.
    assert group_relative_advantages(rewards, 4).view(3, 4)[2].tolist() == [0.0, 0.0, 0.0, 0.0]
    # With eps the std shrinks to s / (s + eps): for {0, 1, 1, 0}, s = sqrt(1/3).
    s = (1 / 3) ** 0.5
    assert group_relative_advantages(rewards, 4).view(3, 4)[0].std().item() == pytest.approx(
        s / (s + 1e-4), rel=1e-12
    )


def test_advantages_without_std_normalization_only_subtract_the_group_mean():
    adv = group_relative_advantages([1.0, 2.0, 6.0, 10.0, 10.0, 13.0], 3, normalize_std=False)
    np.testing.assert_allclose(adv, [-2.0, -1.0, 3.0, -1.0, -1.0, 2.0])


def test_advantages_keep_the_input_kind():
    t = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float32)
    out = group_relative_advantages(t, 2)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    ints = group_relative_advantages(torch.tensor([1, 0, 0, 0]), 2)
    assert ints.is_floating_point()
    torch.testing.assert_close(ints, out)
    assert group_relative_advantages([1, 0], 2).dtype == np.float64


def test_advantages_bad_input_raises():
    for bad in (1, 0, True, 2.0):
        with pytest.raises(ValueError, match="group_size"):
            group_relative_advantages([1.0, 0.0], bad)
    with pytest.raises(ValueError, match="multiple"):
        group_relative_advantages([1.0, 0.0, 1.0], 2)
    with pytest.raises(ValueError, match="1-D"):
        group_relative_advantages(np.zeros((2, 2)), 2)
    with pytest.raises(ValueError, match="1-D"):
        group_relative_advantages([], 2)
    with pytest.raises(ValueError, match="NaN"):
        group_relative_advantages([1.0, float("nan")], 2)
    with pytest.raises(TypeError, match="rewards"):
        group_relative_advantages(["a", "b"], 2)
    with pytest.raises(ValueError, match="eps"):
        group_relative_advantages([1.0, 0.0], 2, eps=-1.0)


def test_exact_match_reward_has_the_trl_signature():
    completions = ["Paris", " paris. ", "The capital is Paris", "Tokyo\n"]
    rewards = exact_match_reward(
        completions,
        answer=["Paris"] * 3 + ["tokyo"],
        prompts=["q"] * 4,
        completion_ids=[[1], [2], [3], [4]],
        trainer_state=None,
    )
    assert rewards == [1.0, 1.0, 0.0, 1.0] and all(type(r) is float for r in rewards)
    conversational = [
        [{"role": "assistant", "content": "Paris."}],
        [{"role": "assistant", "content": "Lyon"}],
    ]
    assert exact_match_reward(conversational, ["Paris", "Paris"]) == [1.0, 0.0]
    assert exact_match_reward([], []) == []


def test_exact_match_reward_skips_rows_without_a_reference():
    """A row whose ``answer`` is None (a concatenated dataset's row from a dataset without that column)
    scored 0.0, and 1.0 for the completion "None" (``str(None)`` was the reference); it gets None now,
    which TRL's GRPOTrainer leaves out of the reward, like ``ssl4rl_reward``'s rows without a task."""
    out = exact_match_reward(["Paris", "x", "None", "42"], answer=["Paris", "Paris", None, None])
    assert out == [1.0, 0.0, None, None]


def test_normalize_answer():
    assert normalize_answer("  New   York. ") == "new york"
    assert normalize_answer("3.14") == "3.14"


def test_exact_match_reward_bad_input_raises():
    with pytest.raises(ValueError, match="one reference per completion"):
        exact_match_reward(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="one reference per completion"):
        exact_match_reward(["a"], "a")
    with pytest.raises(TypeError, match="completions"):
        exact_match_reward("a", ["a"])
    with pytest.raises(TypeError, match="completion must be"):
        exact_match_reward([42], ["42"])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("normalize_std", [True, False])
def test_half_precision_advantages_are_the_float32_ones_cast_back(dtype, normalize_std):
    # in float16, eps / 2^13 underflowed to 0: a tied group of rewards >= 4096 gave 0 / 0 = NaN
    r = torch.tensor([4096.0, 4096.0, 0.0, 1.0, 60000.0, -60000.0, 3.0, 7.0], dtype=dtype)
    adv = group_relative_advantages(r, 2, normalize_std=normalize_std)
    expected = group_relative_advantages(r.float(), 2, normalize_std=normalize_std).to(dtype)
    assert adv.dtype == dtype and torch.isfinite(adv).all()
    torch.testing.assert_close(adv, expected, rtol=0, atol=0)
    if normalize_std:
        assert adv[:2].tolist() == [0.0, 0.0]


def test_advantages_of_rewards_near_the_float32_range_are_finite():
    # 2^e >= max|r| was capped at 2^1023: 2^128 is inf in float32, so r / 2^e was 0 (or NaN for bfloat16)
    r = [3e38, 3e38, 0.0, 1.0]
    expected = torch.from_numpy(group_relative_advantages(r, 4))
    for dtype in (torch.float32, torch.bfloat16):
        adv = group_relative_advantages(torch.tensor(r, dtype=dtype), 4)
        torch.testing.assert_close(adv, expected.to(dtype), rtol=1e-2, atol=0)


@pytest.mark.parametrize("normalize_std", [True, False])
def test_a_tied_group_of_three_or_more_gets_zero_advantages(normalize_std):
    """A tied group's mean is rounded (three or more copies: the sum is), so r - mean was one ulp of noise
    and, divided by a std of the same noise, O(1): eight float32 copies of 1000.1 got A = -0.369 each
    (-6.1e-05 without the std), three float64 copies of 1e30 got -0.816; the exact value is 0."""
    for r, g in ((torch.full((8,), 1000.1), 8), (torch.full((3,), 1e30, dtype=torch.float64), 3)):
        adv = group_relative_advantages(r, g, normalize_std=normalize_std)
        assert adv.tolist() == [0.0] * g
    # one ulp above the tie: exact reference (fractions, mpmath) -0.0627525 and 0.4392673 (was -0.379 and 0.0);
    # measured error 3e-9 relative, tolerance 1e-6
    v = torch.tensor(1000.1)
    r = torch.cat([v.repeat(7), torch.nextafter(v, torch.tensor(2000.0))[None]])
    if normalize_std:
        expected = [-0.06275247231702073] * 7 + [0.4392673062191451]
    else:
        expected = [-7.62939453125e-06] * 7 + [5.340576171875e-05]
    torch.testing.assert_close(
        group_relative_advantages(r, 8, normalize_std=normalize_std).double(),
        torch.tensor(expected, dtype=torch.float64),
        rtol=1e-6,
        atol=0,
    )
