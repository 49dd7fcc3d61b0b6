"""Betting machinery: wealth processes stay nonnegative supermartingales under H0, Ville's bound holds."""

import math

import numpy as np
import pytest

from icml_stats.seqci import (
    AGRAPA,
    ONS,
    ConstantFraction,
    MixtureWealth,
    SigmoidFraction,
    WealthProcess,
    anytime_p_value,
    ville_threshold,
)
from icml_stats.seqci.betting import result_from_process

STRATEGIES = {
    "ons": lambda: ONS(),
    "agrapa": lambda: AGRAPA(),
    "constant": lambda: ConstantFraction(0.5),
    "sigmoid-online": lambda: SigmoidFraction(max_fraction=0.5),
}


def simulate(strategy, payoffs):
    """Wealth paths ``(paths, steps)`` of one strategy object per path."""
    out = np.empty_like(payoffs)
    for p in range(payoffs.shape[0]):
        process = WealthProcess(strategy(), alpha=0.05)
        for t, g in enumerate(payoffs[p]):
            out[p, t] = process.step(g)
    return out


def null_payoffs(rng, paths, steps, mean):
    """Skewed i.i.d. payoffs in [-1, 1] with the given mean: -1 w.p. q, else uniform on [0, 1]."""
    # E = -q + (1 - q) / 2  =>  q = (1 - 2 mean) / 3
    q = (1 - 2 * mean) / 3
    return np.where(rng.random((paths, steps)) < q, -1.0, rng.random((paths, steps)))


@pytest.mark.parametrize(("name", "mean"), [("ons", 0.0), ("agrapa", 0.0), ("constant", 0.0), ("ons", -0.05)])
def test_wealth_is_a_nonnegative_supermartingale(name, mean):
    rng = np.random.default_rng(0)
    paths, steps = 2000, 30
    w = simulate(STRATEGIES[name], null_payoffs(rng, paths, steps, mean))
    assert (w >= 0).all()
    # E[W_t - W_{t-1} | past] = lambda_t W_{t-1} E[g] <= 0, so E[W_t] <= 1 at every t (up to MC error,
    # 4 SE for 30 looks), and the total drift W_T - 1 averages <= 0 (3 SE)
    se = w.std(axis=0, ddof=1) / math.sqrt(paths)
    assert (w.mean(axis=0) <= 1 + 4 * se).all()
    assert w[:, -1].mean() - 1 <= 3 * se[-1]


def test_villes_bound_holds_empirically():
    rng = np.random.default_rng(1)
    paths, steps, alpha = 1500, 60, 0.1
    for name in ("ons", "agrapa"):
        w = simulate(STRATEGIES[name], null_payoffs(rng, paths, steps, 0.0))
        crossed = (w.max(axis=1) >= 1 / alpha).mean()
        assert crossed <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / paths)
        # the bound is not vacuous here: some paths do get rich
        assert (w.max(axis=1) >= 2).mean() > 0.05


def test_positive_drift_makes_the_wealth_grow():
    rng = np.random.default_rng(2)
    for name in ("ons", "agrapa", "sigmoid-online"):
        w = simulate(STRATEGIES[name], null_payoffs(rng, 10, 150, 0.3))
        assert np.median(np.log(w[:, -1])) > math.log(20)


def test_sigmoid_fraction_maximises_the_penalised_log_wealth():
    g = np.array([0.8, -0.5, 0.3, 0.9, -0.2, 0.4])
    s = SigmoidFraction(max_fraction=0.95, beta0=0.0, scale=3.0).fit(g)
    betas = np.linspace(-12, math.log(0.95 / 0.05), 20001)
    lam = 1 / (1 + np.exp(-betas))
    objective = np.log1p(lam[:, None] * g).sum(1) - betas**2 / 18
    assert s.beta == pytest.approx(betas[np.argmax(objective)], abs=2e-3)
    # losing folds pull the fraction down; the Gaussian prior on beta keeps it moderate while folds are few
    few, many = (
        SigmoidFraction().fit([-0.5, -0.3]).fraction(),
        SigmoidFraction().fit([-0.5, -0.3] * 20).fraction(),
    )
    assert many < 0.05 < few < 0.5


def test_mixture_wealth_is_the_average_of_constant_bettors():
    g = [0.3, -0.6, 0.9, 0.1]
    mix = MixtureWealth(grid_size=10)
    for x in g:
        mix.step(x)
    grid = np.arange(1, 11) / 11
    assert mix.wealth == pytest.approx(np.mean([np.prod([1 + lam * x for x in g]) for lam in grid]))


def test_rejection_is_sticky_and_the_result_reports_it():
    process = WealthProcess(ConstantFraction(0.5), alpha=0.5)
    for g in (1.0, 1.0, -1.0, -1.0):  # wealth 1.5, 2.25 (>= 1/alpha = 2), 1.125, 0.5625
        process.step(g)
    assert process.stopping_index == 1 and process.rejected
    res = result_from_process(process, [20, 40, 60, 80], "demo")
    assert res.stopping_time == 40 and res.rejected and res.rejected_by(40) and not res.rejected_by(20)
    assert res.p_value == pytest.approx(1 / 2.25)
    np.testing.assert_allclose(res.wealth, [1.5, 2.25, 1.125, 0.5625])


def test_p_value_and_threshold():
    assert ville_threshold(0.05) == pytest.approx(20.0)
    assert anytime_p_value([0.5, 0.8]) == 1.0
    assert anytime_p_value([2.0, 40.0, 1.0]) == pytest.approx(0.025)
    for bad in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="alpha"):
            ville_threshold(bad)
    with pytest.raises(TypeError, match="alpha"):
        WealthProcess("ons", alpha="0.05")


def test_bad_payoffs_and_fractions():
    process = WealthProcess("ons")
    with pytest.raises(ValueError, match="payoff"):
        process.step(-1.5)
    with pytest.raises(ValueError, match="payoff"):
        process.step(float("nan"))
    with pytest.raises(ValueError, match="fraction"):
        process.step(0.5, fraction=1.5)
    with pytest.raises(ValueError, match="betting"):
        WealthProcess("kelly")
    with pytest.raises(ValueError, match="max_fraction"):
        ONS(max_fraction=0.0)
    with pytest.raises(ValueError, match="fraction="):
        WealthProcess(None).step(0.1)


def test_ons_with_the_full_fraction_survives_a_total_loss():
    # ONS(max_fraction=1) reaches the fraction 1 after a payoff of 1; a payoff of -1 then made
    # 1 + lambda g = 0 and observe raised ZeroDivisionError, after the wealth process had already set its
    # wealth to 0 (path and fractions one step short). The wealth is 0 from then on; the ONS step's limit
    # (z -> -inf: z / (curvature + z^2) -> 0) leaves the fraction at 1 with an infinite curvature.
    strategy = ONS(max_fraction=1.0)
    process = WealthProcess(strategy, alpha=0.05)
    for g in (1.0, -1.0, 1.0, 0.5, -0.3):
        process.step(g)
    assert process.path == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert process.fractions == [0.0, 1.0, 1.0, 1.0, 1.0]
    assert math.isinf(strategy._curvature)
    # the limit of payoffs -1 + eps as eps -> 0: fraction 0.99999999998 and curvature 1e28 at eps = 1e-14
    near = ONS(max_fraction=1.0)
    near.observe(1.0)
    near.observe(-1.0 + 1e-14)
    assert near.fraction() > 1 - 1e-10 and near._curvature > 1e27


def test_wealth_plot():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    process = WealthProcess(ConstantFraction(0.5), alpha=0.5)
    for g in (1.0, 1.0, -0.5):
        process.step(g)
    ax = result_from_process(process, [20, 40, 60], "demo").plot()
    assert ax.get_yscale() == "log" and len(ax.lines) == 3  # wealth, 1/alpha, stopping time
