"""The noisy-ratio trace study (:mod:`icml_generative_experiments.cache.noisy_ratio`): the vectorised rules against
the library's estimators step by step, a planted constant ratio, the matching, the traces and bad input."""

import math

import numpy as np
import pytest

import icml_generative_experiments.cache.noisy_ratio as nr
from icml_generative.cache.estimators import InstantRatio, RatioKalman


def _reference(k, d, eps, noise, rule, threshold, align):
    """One lane, one threshold, step by step with the library's estimators (NaviCache's accumulate-and-skip)."""
    steps = len(k)
    est = {"filtered": RatioKalman(nr.PROCESS_NOISE, nr.MEASUREMENT_NOISE), "instant": InstantRatio()}.get(
        rule
    )
    last, acc, skips, error = 0, 0.0, 0, 0.0
    for t in range(1, steps):
        true_err = float(np.sum(k[last + 1 : t + 1] * d[last + 1 : t + 1]))
        if t < align or t == steps - 1:
            skip = False
        else:
            k_hat = k[t] if rule == "oracle" else est.predict(t - last)
            acc += k_hat * d[t]
            skip = acc < threshold
        if skip:
            skips += 1
            error += true_err
            continue
        z = true_err / float(np.sum(d[last + 1 : t + 1])) * math.exp(noise * eps[t])
        if est is not None:
            if t < align:
                est.align(z, t)
            else:
                est.update(z, t, 0.0)
        acc, last = 0.0, t
    return skips, error


@pytest.mark.parametrize("rule", nr.RULES)
@pytest.mark.parametrize("noise", [0.0, 0.4])
def test_vectorised_rules_equal_the_library_estimators_step_by_step(rule, noise):
    family = nr.TraceFamily()
    rng = np.random.default_rng(7)
    k, d = nr.make_traces(family, 4, rng)
    eps = rng.standard_normal(k.shape)
    scale = (k * d)[:, 1:].mean(axis=1, keepdims=True)
    factors = np.array([0.05, 0.5, 1.0, 2.0, 5.0, 50.0])
    skips, error = nr.simulate(k, d, eps, noise, rule, scale * factors, family.alignment_steps)
    seen = set()
    for lane in range(4):
        for g, factor in enumerate(factors):
            want = _reference(k[lane], d[lane], eps[lane], noise, rule, scale[lane, 0] * factor, 6)
            assert skips[lane, g] == want[0]
            assert error[lane, g] == pytest.approx(want[1], rel=1e-12, abs=1e-15)
            seen.add(want[0])
    assert len(seen) >= 4  # the thresholds cover several skip counts, from none to many


def test_a_constant_noise_free_ratio_makes_every_rule_decide_alike():
    family = nr.TraceFamily(trend=0.0, walk=0.0)
    k, d = nr.make_traces(family, 3, np.random.default_rng(1))
    assert np.allclose(k, 1.0)
    eps = np.random.default_rng(2).standard_normal(k.shape)
    thresholds = np.outer((k * d)[:, 1:].mean(1), nr.THRESHOLD_FACTORS)
    runs = {rule: nr.simulate(k, d, eps, 0.0, rule, thresholds, 6) for rule in nr.RULES}
    for rule in ("filtered", "instant"):
        assert np.array_equal(runs[rule][0], runs["oracle"][0])
        assert np.allclose(runs[rule][1], runs["oracle"][1], rtol=1e-12)
    # with noise the instantaneous ratio errs, and the oracle's skips differ from it
    noisy = nr.simulate(k, d, eps, 0.4, "instant", thresholds, 6)
    assert not np.array_equal(noisy[0], runs["oracle"][0])


def test_thresholds_span_no_skip_to_every_skip():
    family = nr.TraceFamily()
    k, d = nr.make_traces(family, 5, np.random.default_rng(3))
    eps = np.zeros_like(k)
    thresholds = np.outer((k * d)[:, 1:].mean(1), nr.THRESHOLD_FACTORS)
    skippable = family.steps - family.alignment_steps - 1
    for rule in nr.RULES:
        skips, error = nr.simulate(k, d, eps, 0.0, rule, thresholds, family.alignment_steps)
        assert (skips[:, 0] == 0).all() and (skips[:, -1] == skippable).all()
        assert (error[:, 0] == 0).all() and (error[:, -1] > 0).all()
        matched = nr.matched_errors(skips, error)
        assert matched.shape == (5, len(nr.SKIP_TARGETS)) and np.isfinite(matched).all()


def test_matched_errors_average_ties_and_interpolate():
    skips = np.array([[0, 8, 10, 10, 23]])
    error = np.array([[0.0, 1.0, 2.0, 4.0, 9.0]])
    # S = 9 between 8 (1.0) and 10 (mean 3.0); S = 12 between 10 (3.0) and 23 (9.0)
    matched = nr.matched_errors(skips, error, (9, 10, 12))
    assert matched.shape == (1, 3) and matched[0].tolist() == pytest.approx([2.0, 3.0, 3.0 + 6.0 * 2 / 13])


def test_traces_are_seeded_positive_and_follow_the_schedule():
    family = nr.TraceFamily()
    k1, d1 = nr.make_traces(family, 6, np.random.default_rng([24, 0]))
    k2, d2 = nr.make_traces(family, 6, np.random.default_rng([24, 0]))
    assert np.array_equal(k1, k2) and np.array_equal(d1, d2)
    assert k1.shape == d1.shape == (6, family.steps)
    assert (k1 > 0).all() and (d1[:, 0] == 0).all() and (d1[:, 1:] > 0).all()
    # the trend spans at most exp(±trend) and the walk starts at 0: k_0 = 1
    assert np.allclose(k1[:, 0], 1.0)


def test_regime_study_rows(monkeypatch):
    monkeypatch.setitem(nr.SIZES, "quick", (3, 2))
    monkeypatch.setattr(nr, "BOOTSTRAP", 200)
    result = nr.regime_study("quick", 0)
    rows = result["rows"]
    assert len(rows) == 2 * len(nr.SIGMAS)
    assert {r["comparison"] for r in rows} == {"oracle vs instant", "filtered vs instant"}
    for r in rows:
        assert r["role"] == ("reported" if r["sigma"] not in nr.DECIDING_SIGMAS else r["role"])
        assert r["ci_low"] <= r["mean_log_error_ratio"] <= r["ci_high"]
    assert isinstance(result["passed"], bool) and result["passed"] == (
        result["headroom"] and result["criterion"]
    )


def test_bad_input():
    with pytest.raises(ValueError, match="alignment_steps"):
        nr.TraceFamily(alignment_steps=29)
    with pytest.raises(ValueError, match="walk"):
        nr.TraceFamily(walk=-0.1)
    k, d = nr.make_traces(nr.TraceFamily(), 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="rule"):
        nr.simulate(k, d, np.zeros_like(k), 0.0, "kalman", np.ones((2, 3)), 6)
    with pytest.raises(ValueError, match="thresholds"):
        nr.simulate(k, d, np.zeros_like(k), 0.0, "instant", np.ones((3, 3)), 6)
    with pytest.raises(ValueError, match="noise"):
        nr.simulate(k, d, np.zeros_like(k), -1.0, "instant", np.ones((2, 3)), 6)
    with pytest.raises(ValueError, match="budget"):
        nr.regime_study("medium")
