"""The NaviCache mechanism diagnostic (:mod:`icml_generative_experiments.cache.ratio_prediction`) on a synthetic
trajectory whose output/input change ratio is a known constant (the script's run itself needs the trained
testbed)."""

import pytest
import torch

from icml_generative_experiments.cache.ratio_prediction import ESTIMATORS, judgment, ratios, score

K, STEPS, ALIGN = 0.7, 30, 6  # the budgets: 30 steps, alignment over the first ceil(0.2 · 30)


def _trajectory():
    # |x_t - x_s| = |t - s|
    xs = [torch.full((2, 5), float(t + 1), dtype=torch.float64) for t in range(STEPS)]
    return xs, [K * x for x in xs]  # out = K·x: every interval's ratio is K


@pytest.mark.parametrize("gap", [1, 2, 3])
def test_every_estimator_predicts_a_constant_ratio(gap):
    xs, outs = _trajectory()
    zs = ratios(xs, outs, gap)
    assert [t for t, _ in zs] == list(range(gap, STEPS, gap))
    assert [z for _, z in zs] == pytest.approx([K] * len(zs), rel=1e-6)
    sigmas = torch.linspace(1.0, 0.0, STEPS + 1, dtype=torch.float64)
    for make in ESTIMATORS.values():
        errors = score(zs, zs, ALIGN, sigmas, make)
        assert len(errors) == sum(t >= ALIGN for t, _ in zs)
        assert errors == pytest.approx([0.0] * len(errors), abs=1e-6)


@pytest.mark.parametrize("every", [2, 3, 4])
def test_error_judgment_on_a_fixed_schedule_is_exact_for_a_constant_ratio(every):
    xs, outs = _trajectory()
    sigmas = torch.linspace(1.0, 0.0, STEPS + 1, dtype=torch.float64)
    skipped = [t for t in range(STEPS) if not (t < ALIGN or t == STEPS - 1 or (t - ALIGN) % every == 0)]
    for make in ESTIMATORS.values():
        predicted, true = judgment(xs, outs, every, ALIGN, sigmas, make)
        assert len(predicted) == len(true) == len(skipped)
        assert predicted == pytest.approx(true, rel=1e-6)
