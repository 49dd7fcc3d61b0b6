"""icml_theory.markov: exact Bayes losses, the generator, the model's hooks and lag masses, training logs,
plateau and phase detection on planted curves, the ODE against its closed form, and bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_theory.markov import (
    AttentionOnlyTransformer,
    MixtureOfLagsChain,
    StageODE,
    crossing_times,
    detect_phases,
    find_plateaus,
    integrate,
    lag_mass,
    logistic_half_time,
    logistic_solution,
    match_plateaus,
    strengths,
    train,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: torch's thread start-up dominates


def _dense_entropy_rate(chain: MixtureOfLagsChain) -> float:
    """The entropy rate from the explicit (n^m x n^m) transition matrix of the windows and its Perron
    eigenvector: an independent reference for the power iteration."""
    n, m = chain.n_states, chain.order
    windows = list(itertools.product(range(n), repeat=m))
    index = {w: i for i, w in enumerate(windows)}
    probs = chain.next_distribution(np.array(windows))
    matrix = np.zeros((len(windows), len(windows)))
    for i, w in enumerate(windows):
        for y in range(n):
            matrix[i, index[(*w[1:], y)]] += probs[i, y]
    values, vectors = np.linalg.eig(matrix.T)
    pi = np.real(vectors[:, np.argmin(np.abs(values - 1))])
    pi = pi / pi.sum()
    return float(-(pi[:, None] * probs * np.log(probs)).sum())


@pytest.mark.parametrize("kind", ["geometric", "linear"])
@pytest.mark.parametrize(("n", "lags", "weights"), [(3, (1, 2), (0.7, 0.3)), (4, (1, 3), (0.6, 0.4))])
def test_entropy_rate_matches_dense_reference_and_bayes_loss(kind, n, lags, weights):
    chain = MixtureOfLagsChain(n, lags, weights, concentration=0.7, seed=3, kind=kind)
    rate = chain.entropy_rate()
    assert rate == pytest.approx(_dense_entropy_rate(chain), abs=1e-10)
    assert rate == pytest.approx(chain.partial_loss(lags), abs=1e-10)
    assert chain.stationary().sum() == pytest.approx(1.0)
    losses = chain.bayes_log_loss(chain.sample(3000, 40, seed=5)).ravel()
    se = losses.std() / np.sqrt(losses.size)  # tokens within a sequence are dependent: a loose bound
    assert abs(losses.mean() - rate) < 5 * se + 2e-3


def test_stationary_is_invariant_and_partial_losses_decrease():
    chain = MixtureOfLagsChain(4, (1, 3, 6), (0.5, 0.3, 0.2), concentration=0.5, seed=1)
    p = chain.stationary()
    joint = chain.partial_joint((1, 3, 6))  # the tokens at the lags and the next one
    assert joint.sum() == pytest.approx(1.0)
    windows = np.indices(p.shape).reshape(chain.order, -1).T
    cond = chain.next_distribution(windows).reshape(*p.shape, chain.n_states)
    stepped = (p[..., None] * cond).sum(0)  # one step of the chain from the stationary window distribution
    assert np.abs(stepped - p).max() < 1e-12
    stages = list(chain.stage_losses().values())
    assert all(a > b for a, b in itertools.pairwise(stages))
    assert stages[0] == pytest.approx(chain.partial_loss(()))
    assert stages[-1] == pytest.approx(chain.entropy_rate())


def test_partial_log_loss_estimates_partial_loss():
    chain = MixtureOfLagsChain(4, (1, 3), (0.6, 0.4), concentration=0.5, seed=2)
    data = chain.sample(4000, 30, seed=9)
    for subset in [(), (1,), (3,), (1, 3)]:
        est = chain.partial_log_loss(data, subset)
        assert est.mean() == pytest.approx(chain.partial_loss(subset), abs=0.02)
    assert np.allclose(chain.partial_log_loss(data, (1, 3)), chain.bayes_log_loss(data))


@pytest.mark.parametrize("kind", ["geometric", "linear"])
def test_generator_transitions_pass_chi_square_and_detect_another_chain(kind):
    chain = MixtureOfLagsChain(3, (1, 2), (0.6, 0.4), concentration=1.0, seed=4, kind=kind)
    data = chain.sample(400, 60, seed=1)
    assert chain.transition_chisquare(data).p_value > 1e-3
    other = MixtureOfLagsChain(3, (1, 2), (0.6, 0.4), concentration=1.0, seed=5, kind=kind)
    assert chain.transition_chisquare(other.sample(400, 60, seed=1)).p_value < 1e-6


def test_chi_square_level_over_repeats():
    chain = MixtureOfLagsChain(3, (1, 2), (0.5, 0.5), concentration=1.0, seed=7)
    p_values = [chain.transition_chisquare(chain.sample(100, 40, seed=s)).p_value for s in range(40)]
    assert 0.01 <= np.mean(np.asarray(p_values) < 0.1) <= 0.3  # about 10 % rejections at level 0.1


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"lags": (0, 2), "weights": (0.5, 0.5)}, ValueError, "lags"),
        ({"lags": (-1,), "weights": (1.0,)}, ValueError, "lags"),
        ({"lags": (), "weights": ()}, ValueError, "lags"),
        ({"lags": (1, 1), "weights": (0.5, 0.5)}, ValueError, "lags"),
        ({"lags": (1.5,), "weights": (1.0,)}, TypeError, "lags"),
        ({"lags": (1, 2), "weights": (0.5, 0.6)}, ValueError, "weights must sum to 1"),
        ({"lags": (1, 2), "weights": (1.0,)}, ValueError, "weights"),
        ({"lags": (1, 2), "weights": (1.2, -0.2)}, ValueError, "weights"),
        ({"lags": (1,), "weights": (1.0,), "concentration": 0.0}, ValueError, "concentration"),
        ({"lags": (1,), "weights": (1.0,), "kind": "other"}, ValueError, "kind"),
        ({"lags": (1,), "weights": (1.0,), "transitions": np.ones((1, 3, 2))}, ValueError, "transitions"),
    ],
)
def test_chain_bad_input_names_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        MixtureOfLagsChain(3, **kwargs)


def test_geometric_chain_refuses_zero_transitions_and_large_enumeration():
    t = np.array([[[1.0, 0.0], [0.5, 0.5]]])
    with pytest.raises(ValueError, match="positive"):
        MixtureOfLagsChain(2, (1,), (1.0,), transitions=t)
    assert MixtureOfLagsChain(2, (1,), (1.0,), transitions=t, kind="linear").entropy_rate() >= 0
    with pytest.raises(ValueError, match="enumeration"):
        MixtureOfLagsChain(16, (1, 8), (0.5, 0.5)).entropy_rate()
    with pytest.raises(ValueError, match="windows"):
        MixtureOfLagsChain(3, (1, 2), (0.5, 0.5)).next_distribution(np.array([[0, 5]]))
    with pytest.raises(ValueError, match="sequences"):
        MixtureOfLagsChain(3, (1, 2), (0.5, 0.5)).bayes_log_loss(np.zeros((2, 2), dtype=int))
    for bad in (np.full((2, 5), -1), np.full((2, 5), 3), np.zeros((2, 5))):  # negative, too large, float
        with pytest.raises(ValueError, match="sequences"):
            MixtureOfLagsChain(3, (1, 2), (0.5, 0.5)).partial_log_loss(bad, (1,))


@pytest.mark.parametrize(("kwargs", "match"), [({"heads": 0}, "heads"), ({"heads": 2, "context": 0}, "context"),
                                              ({"heads": 1, "init_scale": 0.0}, "init_scale"),
                                              ({"heads": 1, "d_head": 0}, "d_head")])  # fmt: skip
def test_model_bad_input_names_the_argument(kwargs, match):
    kwargs.setdefault("context", 4)
    with pytest.raises(ValueError, match=match):
        AttentionOnlyTransformer(3, **kwargs)


def test_model_refuses_bad_tokens_and_unknown_hooks():
    model = AttentionOnlyTransformer(3, 4, 2)
    with pytest.raises(ValueError, match="tokens"):
        model(torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="tokens"):
        model(torch.full((2, 3), 3))
    with pytest.raises(TypeError, match="tokens"):
        model(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="unknown hook names"):
        model.run_with_cache(torch.zeros(1, 3, dtype=torch.long), ["blocks.0.attn.hook_nothing"])


# ------------------------------------------------------------------ model, hooks, lag masses
def _direct_pattern(model: AttentionOnlyTransformer, tokens: torch.Tensor) -> torch.Tensor:
    """Attention probabilities from the weights, written out per head and query."""
    x = model.embed(tokens)
    a = model.attn
    batch, seq, _ = x.shape
    out = torch.zeros(batch, model.heads, seq, seq)
    for h in range(model.heads):
        q, k = x @ a.W_Q[h], x @ a.W_K[h]
        for i in range(seq):
            scores = (q[:, i : i + 1] * k[:, : i + 1]).sum(-1) / model.d_head**0.5
            out[:, h, i, : i + 1] = torch.softmax(scores, -1)
    return out


def test_pattern_hook_equals_direct_computation_and_lag_mass_sums_to_one():
    model = AttentionOnlyTransformer(5, 9, 3, init_scale=0.5, seed=2)
    tokens = torch.randint(0, 5, (7, 9), generator=torch.Generator().manual_seed(0))
    logits, cache = model.run_with_cache(tokens)
    assert set(cache) == set(model.hook_names)
    pattern = cache["blocks.0.attn.hook_pattern"]
    assert torch.allclose(pattern, _direct_pattern(model, tokens), atol=1e-6)
    assert torch.equal(cache["blocks.0.hook_attn_out"], logits)
    for start in (0, 4, 8):
        mass = lag_mass(pattern, start)
        assert mass.shape == (3, 9)
        assert torch.allclose(mass.sum(-1), torch.ones(3), atol=1e-6)
        direct = torch.zeros(3, 9)
        for q in range(start, 9):
            for lag in range(1, q + 2):
                direct[:, lag - 1] += pattern[:, :, q, q + 1 - lag].mean(0)
        assert torch.allclose(mass, direct / (9 - start), atol=1e-6)


def test_hooks_replace_and_are_removed_also_on_error():
    model = AttentionOnlyTransformer(4, 6, 2, init_scale=0.3)
    tokens = torch.randint(0, 4, (3, 6), generator=torch.Generator().manual_seed(1))
    base = model(tokens)
    uniform = model.run_with_hooks(tokens, [("blocks.0.attn.hook_attn_scores", lambda t, name: t * 0)])
    assert not torch.allclose(uniform, base)

    def boom(t, name):
        raise RuntimeError("inside the hook")

    with pytest.raises(RuntimeError, match="inside the hook"):
        model.run_with_hooks(tokens, [("blocks.0.attn.hook_z", boom)])
    assert torch.equal(model(tokens), base)
    assert all(not m._forward_hooks for m in model.modules())


def test_lag_mass_refuses_bad_patterns():
    with pytest.raises(ValueError, match="pattern"):
        lag_mass(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="start"):
        lag_mass(torch.zeros(1, 1, 4, 4), start=4)


# ------------------------------------------------------------------ training
def test_train_logs_and_learns_lag_one():
    chain = MixtureOfLagsChain(4, (1, 2), (0.8, 0.2), concentration=0.3, seed=0)
    model = AttentionOnlyTransformer(4, 6, 1, init_scale=0.1, seed=0)
    log = train(model, chain, 300, lr=0.01, optimizer="adam", log_every=50, n_eval=256, seed=1)
    assert log.steps.tolist() == [50, 100, 150, 200, 250, 300]
    assert log.eval_loss is not None and log.mass is not None and log.mass.shape == (6, 1, 6)
    assert np.allclose(log.mass.sum(-1), 1.0, atol=1e-5)
    assert log.eval_loss[-1] < log.eval_loss[0] - 0.05
    assert log.lag_mass((1, 2))[-1, 0, 0] > 0.5  # the head moved to the important lag
    quiet = train(AttentionOnlyTransformer(4, 6, 1, seed=0), chain, 20, log_every=10, full_logging=False)
    assert quiet.eval_loss is None and quiet.mass is None and quiet.train_loss.shape == (2,)
    with pytest.raises(ValueError, match="full_logging"):
        quiet.lag_mass((1,))


@pytest.mark.usefixtures("one_torch_thread")
def test_train_logs_the_attention_masses_of_a_bfloat16_model_in_float32():
    """numpy has no bfloat16: the masses used to fail to convert."""
    chain = MixtureOfLagsChain(3, (1, 2), (0.7, 0.3), seed=0)
    model = AttentionOnlyTransformer(3, 6, 2, seed=0).to(torch.bfloat16)
    log = train(model, chain, 4, lr=0.1, batch_size=8, log_every=2, n_eval=16)
    assert log.mass is not None and log.mass.dtype == np.float32 and log.mass.shape == (2, 2, 6)
    assert np.allclose(log.mass.sum(-1), 1.0, atol=0.05)  # rows of bfloat16 attention
    assert model.attn.W_Q.dtype == torch.bfloat16


def test_train_bad_input():
    chain = MixtureOfLagsChain(4, (1, 3), (0.5, 0.5), seed=0)
    with pytest.raises(ValueError, match="n_states"):
        train(AttentionOnlyTransformer(5, 6, 1), chain, 1)
    with pytest.raises(ValueError, match="context"):
        train(AttentionOnlyTransformer(4, 2, 1), chain, 1)
    with pytest.raises(ValueError, match="optimizer"):
        train(AttentionOnlyTransformer(4, 6, 1), chain, 1, optimizer="lbfgs")
    with pytest.raises(ValueError, match="train_data"):
        train(AttentionOnlyTransformer(4, 6, 1), chain, 1, train_data=np.zeros((3, 5), dtype=int))
    with pytest.raises(TypeError, match="model"):
        train(object(), chain, 1)  # type: ignore[arg-type]


# ------------------------------------------------------------------ plateaus and phases (planted)
def _planted_curve(levels, times, width, n=600, noise=0.002, seed=0):
    steps = np.arange(1, n + 1) * 10.0
    loss = np.full(n, float(levels[0]))
    for drop, (a, b) in zip(times, itertools.pairwise(levels), strict=True):
        loss -= (a - b) / (1 + np.exp(-(steps - drop) / width))
    return steps, loss + np.random.default_rng(seed).normal(0, noise, n)


@pytest.mark.parametrize("seed", range(5))
def test_find_plateaus_recovers_planted_plateaus(seed):
    levels, times = [2.0, 1.75, 1.6, 1.52], [1000.0, 2500.0, 4200.0]
    steps, loss = _planted_curve(levels, times, width=40.0, seed=seed)
    found = find_plateaus(steps, loss, tol=0.01, window=8, min_length=8)
    assert [round(p.level, 2) for p in found] == pytest.approx(levels, abs=0.011)
    for p, (lo, hi) in zip(found, itertools.pairwise([0.0, *times, steps[-1] + 1]), strict=True):
        assert lo - 1 <= p.start and p.end <= hi + 1
        assert p.end - p.start > 0.6 * (hi - lo)
    matched = match_plateaus(found, dict(zip("abcd", levels, strict=True)), tol=0.01)
    assert [k for k, _ in matched] == list("abcd")
    crossings = crossing_times(steps, loss, levels)
    assert np.allclose(crossings, times, atol=60)


def test_find_plateaus_on_a_steady_decline_finds_none():
    steps = np.arange(1, 401, dtype=float)
    assert find_plateaus(steps, 3 - steps * 0.005, tol=0.01, window=8) == []


def test_detect_phases_on_planted_trajectories():
    n, heads, lags = 40, 3, 3
    mass = np.full((n, heads, lags), 0.1)
    mass[10:20, :, 0] = 0.6  # competitive: every head on lag index 0
    mass[20:30, 0, 0] = 0.6
    mass[20:30, 1:, 0] = 0.1
    mass[20:30, 1, 1] = 0.7  # cooperative
    mass[30:, 0, 0], mass[30:, 1, 1], mass[30:, 2, 2] = 0.9, 0.8, 0.85
    trace = detect_phases(mass, threshold=0.3)
    assert trace.labels[:10] == ("unfocused",) * 10
    assert trace.labels[10:20] == ("competitive",) * 10
    assert trace.labels[20:] == ("cooperative",) * 20
    assert (
        trace.first("competitive") == 10
        and trace.first("cooperative") == 20
        and trace.first("single") is None
    )
    assert trace.head_lag[-1].tolist() == [0, 1, 2]
    assert trace.head_lag[25].tolist() == [0, 1, -1]
    single = detect_phases(mass[:, :1], threshold=0.3)
    assert single.labels[15] == "single"


def test_dynamics_bad_input():
    with pytest.raises(ValueError, match="steps"):
        find_plateaus([1, 1, 2], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="equal lengths"):
        find_plateaus([1, 2, 3], [1.0, 1.0])
    with pytest.raises(ValueError, match="loss"):
        find_plateaus([1, 2], [1.0, np.nan])
    with pytest.raises(ValueError, match="levels"):
        crossing_times([1, 2], [1.0, 0.5], [1.0, 1.0])
    with pytest.raises(ValueError, match="mass"):
        detect_phases(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="levels"):
        match_plateaus([], {})


# ------------------------------------------------------------------ ODE
@pytest.mark.parametrize(
    ("s", "w0", "half"),
    # half times from mpmath (60 digits) at the float64 inputs
    [
        (1e10, 1e-300, 3.5690068941407708e-8),
        (1.0, 5e-324, 372.22003596069063),
        (1.0, 0.5 - 1e-10, 2.000000165480742e-10),
    ],
)
def test_logistic_closed_forms_at_extreme_initial_values(s, w0, half):
    # before: s / w0 overflowed, so the half time was inf and the solution NaN once exp(-2 s t) underflowed
    # ([0, nan] at t = 0, 1 for s = 1e10, w0 = 1e-300); near w0 = s / 2 ln(s / w0 - 1) lost 2.0e-10 relative.
    # After: at most 1.6e-16 relative against mpmath over 11 (s, w0) pairs, so 1e-14 leaves a margin of 60
    assert math.isclose(logistic_half_time(s, w0), half, rel_tol=1e-14)
    # w(0) = w0, w(half) = s / 2, w(half + 40 / s) = s / (1 + e^-80) = s: measured at most 2.4e-14 relative
    # (exp amplifies the ulp of ln(s / w0 - 1), up to ~713 here), so 1e-12 leaves a margin of 40
    w = logistic_solution(np.array([0.0, half, half + 40.0 / s]), s, w0)
    assert math.isclose(w[0], w0, rel_tol=1e-12) and math.isclose(w[1], s / 2, rel_tol=1e-12) and w[2] == s


@pytest.mark.parametrize(("s", "w0"), [(0.5, 1e-6), (2.0, 1e-4)])
def test_ode_one_head_one_lag_matches_closed_form_at_two_tolerances(s, w0):
    ode = StageODE((s,), (1,), heads=1, candidates=1)
    y0 = np.array([0.0, np.sqrt(w0), np.sqrt(w0)])
    half = logistic_half_time(s, w0)
    plateaus = []
    for rtol in (1e-6, 1e-9):
        sol = integrate(ode, 3 * half, 400, rtol=rtol, atol=rtol * 1e-3, y0=y0)
        w = sol.readout[:, 0, 0]
        assert np.abs(w - logistic_solution(sol.times, s, w0)).max() < 1e3 * rtol * s
        # the plateau's end: where the loss crosses the midpoint of its two levels (interpolated)
        level = 0.5 * s**2
        i = np.nonzero(sol.loss <= level / 4)[0][0]  # w = s/2  <=>  loss = (s/2)^2 / 2
        t = np.interp(level / 4, sol.loss[i : i - 2 : -1], sol.times[i : i - 2 : -1])
        plateaus.append(t)
    assert plateaus[0] == pytest.approx(half, rel=0.01)
    assert plateaus[1] == pytest.approx(half, rel=0.01)
    assert plateaus[0] == pytest.approx(plateaus[1], rel=0.01)


def test_ode_learns_lags_in_strength_order_with_three_heads():
    ode = StageODE((3.0, 2.0, 1.2), (1, 3, 6), heads=3, candidates=8, init=1e-3)
    sol = integrate(ode, 60.0, 400, seed=0)
    crossings = crossing_times(sol.times, sol.loss, ode.levels())
    assert np.all(np.isfinite(crossings)) and np.all(np.diff(crossings) > 0)
    final = sol.attention[-1][:, [0, 2, 5]]
    assert sorted(final.argmax(1).tolist()) == [0, 1, 2] and final.max(1).min() > 0.5
    assert sol.loss[-1] < 0.05 * sol.loss[0]


def test_ode_gradient_is_the_loss_gradient():
    ode = StageODE((1.5, 0.7), (1, 2), heads=2, candidates=3, init=0.3)
    y = ode.initial(4)
    eps = 1e-6
    numeric = np.array([(ode.loss(y + eps * e) - ode.loss(y - eps * e)) / (2 * eps) for e in np.eye(y.size)])
    assert np.allclose(-ode.rhs(0.0, y), numeric, atol=1e-7)


def test_strengths_and_ode_bad_input():
    chain = MixtureOfLagsChain(4, (1, 3), (0.7, 0.3), concentration=0.3, seed=0)
    s = strengths(chain)
    assert s.shape == (2,) and np.all(s > 0) and s[0] > s[1]
    with pytest.raises(ValueError, match="strengths"):
        StageODE((0.0,), (1,), 1, 1)
    with pytest.raises(ValueError, match="lags"):
        StageODE((1.0,), (3,), 1, 2)
    with pytest.raises(ValueError, match="heads"):
        StageODE((1.0,), (1,), 0, 2)
    with pytest.raises(TypeError, match="chain"):
        strengths("chain")  # type: ignore[arg-type]


# ------------------------------------------------------------------ fuzz
@settings(max_examples=40, deadline=None)
@given(
    lags=st.lists(st.integers(-2, 5), min_size=0, max_size=3),
    weights=st.lists(st.one_of(st.floats(-0.5, 1.5), st.just(float("nan")), st.just(0.5)), max_size=3),
    kind=st.sampled_from(["geometric", "linear"]),
)
def test_fuzz_chain_constructor_and_exact_quantities(lags, weights, kind):
    try:
        chain = MixtureOfLagsChain(3, lags, weights, seed=0, kind=kind)
    except (ValueError, TypeError) as err:
        assert any(word in str(err) for word in ("lags", "weights"))
        return
    rate = chain.entropy_rate()
    assert 0 <= rate <= np.log(3) + 1e-9
    assert chain.partial_loss(()) >= rate - 1e-9


@settings(max_examples=40, deadline=None)
@given(seq=st.integers(1, 7), start=st.integers(0, 6), seed=st.integers(0, 100))
def test_fuzz_lag_mass_sums_to_one(seq, start, seed):
    scores = torch.randn(2, 3, seq, seq, generator=torch.Generator().manual_seed(seed))
    pattern = torch.softmax(
        scores.masked_fill(~torch.ones(seq, seq, dtype=torch.bool).tril(), float("-inf")), -1
    )
    if start >= seq:
        with pytest.raises(ValueError, match="start"):
            lag_mass(pattern, start)
        return
    assert torch.allclose(lag_mass(pattern, start).sum(-1), torch.ones(3), atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(
    loss=st.lists(st.floats(-5, 5, allow_nan=False), min_size=2, max_size=60),
    tol=st.floats(1e-4, 1.0),
    window=st.integers(1, 12),
)
def test_fuzz_find_plateaus(loss, tol, window):
    steps = np.arange(len(loss), dtype=float)
    found = find_plateaus(steps, loss, tol=tol, window=window, min_length=2)
    starts = [p.start for p in found]
    assert starts == sorted(starts)
    for p in found:
        assert p.start <= p.end and min(loss) - 1e-9 <= p.level <= max(loss) + 1e-9


@settings(max_examples=40, deadline=None)
@given(shape=st.tuples(st.integers(1, 5), st.integers(1, 4), st.integers(1, 4)), seed=st.integers(0, 50))
def test_fuzz_detect_phases(shape, seed):
    mass = np.random.default_rng(seed).dirichlet(np.ones(shape[2]), size=shape[:2])
    trace = detect_phases(mass)
    assert len(trace.labels) == shape[0]
    assert set(trace.labels) <= {"unfocused", "single", "competitive", "cooperative"}
    assert trace.head_lag.shape == shape[:2] and trace.head_lag.max() < shape[2]
