"""Neural logistic bandits (issue 37, "Must hold"): the confidence matrices against their definitions
(Sherman–Morrison against a direct inverse, the diagonal rule), the effective dimension against its
closed form, the reward network's symmetric initialization and hand-written gradients against autograd,
reproducibility from the seed, the regret of ``play`` against brute force, NeuralLog-UCB-2's weights,
Li et al.'s replay on a classification dataset, learning on an easy problem, and bad input."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml_theory.bandits import (
    GLMUCB,
    DiagonalConfidence,
    EpsilonGreedy,
    FullConfidence,
    NeuralLogUCB1,
    NeuralLogUCB2,
    NeuralTS,
    NeuralUCB,
    RewardNetwork,
    UniformRandom,
    classification_bandit,
    effective_dimension,
    log_uniform,
    ntk_gram,
    play,
    replay,
)
from icml_tools.fuzz import rejects

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def rel_fro(a, b) -> float:
    """``‖a − b‖_F / ‖b‖_F``."""
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


def logistic_problem(T: int, K: int, d: int, seed: int, scale: float = 1.0):
    """Contexts ``(T, K, d)``, Bernoulli rewards ``(T, K)`` and their means ``σ(scale · xᵀθ)``, from numpy."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=d)
    theta /= np.linalg.norm(theta)
    contexts = rng.normal(size=(T, K, d))
    means = 1.0 / (1.0 + np.exp(-scale * contexts @ theta))
    rewards = (rng.random((T, K)) < means).astype(np.float64)
    return contexts, rewards, means


SMALL = {"width": 16, "steps": 5, "train_every": 5}
POLICIES = [  # (name, factory(seed)) for every policy class, both confidences where they apply
    *[
        (f"NeuralLogUCB1-{c}", lambda s, c=c: NeuralLogUCB1(3, kappa=10.0, confidence=c, seed=s, **SMALL))
        for c in ("full", "diagonal")
    ],
    *[
        (f"NeuralLogUCB2-{c}", lambda s, c=c: NeuralLogUCB2(3, kappa=10.0, confidence=c, seed=s, **SMALL))
        for c in ("full", "diagonal")
    ],
    *[
        (f"NeuralUCB-{c}", lambda s, c=c: NeuralUCB(3, confidence=c, seed=s, **SMALL))
        for c in ("full", "diagonal")
    ],
    *[
        (f"NeuralTS-{c}", lambda s, c=c: NeuralTS(3, confidence=c, seed=s, **SMALL))
        for c in ("full", "diagonal")
    ],
    ("EpsilonGreedy", lambda s: EpsilonGreedy(3, epsilon=0.5, seed=s, **SMALL)),
    ("GLMUCB", lambda s: GLMUCB(3, seed=s)),
    ("UniformRandom", lambda s: UniformRandom(3, seed=s)),
]
POLICY_IDS = [name for name, _ in POLICIES]
FACTORIES = [f for _, f in POLICIES]


# ---------------------------------------------------------------- confidence matrices
@st.composite
def update_sequences(draw):
    dim = draw(st.integers(1, 12))
    n = draw(st.integers(1, 30))
    entries = st.floats(-3.0, 3.0, allow_nan=False, allow_infinity=False)
    gs = np.array(draw(st.lists(st.lists(entries, min_size=dim, max_size=dim), min_size=n, max_size=n)))
    weights = np.array(draw(st.lists(st.floats(0.0, 5.0), min_size=n, max_size=n)))
    lam = draw(st.floats(0.1, 10.0))
    return dim, gs, weights, lam


def direct_matrix(dim, gs, weights, lam) -> torch.Tensor:
    """``λ I + Σ w g gᵀ`` summed term by term."""
    A = lam * torch.eye(dim, dtype=torch.float64)
    for g, w in zip(gs, weights, strict=True):
        g = torch.as_tensor(g, dtype=torch.float64)
        A = A + w * torch.outer(g, g)
    return A


@settings(max_examples=60, deadline=None)
@given(update_sequences(), st.integers(0, 2**32 - 1))
def test_sherman_morrison_equals_direct_inverse(case, seed):
    dim, gs, weights, lam = case
    sm, explicit = FullConfidence(dim, lam), FullConfidence(dim, lam, method="explicit")
    for g, w in zip(gs, weights, strict=True):
        sm.update(g, w)
        explicit.update(g, w)
    A = direct_matrix(dim, gs, weights, lam)
    A_inv = torch.linalg.inv(A)
    assert rel_fro(sm.matrix, A) <= 1e-12
    assert rel_fro(sm.inverse, torch.linalg.inv(sm.matrix)) <= 1e-8
    assert rel_fro(sm.inverse, A_inv) <= 1e-8
    assert rel_fro(explicit.inverse, A_inv) <= 1e-8
    assert sm.count == explicit.count == len(gs)
    G = torch.from_numpy(np.random.default_rng(seed).normal(size=(5, dim)))
    expected = torch.sqrt(torch.diag(G @ A_inv @ G.T))
    assert torch.allclose(sm.norms(G), expected, rtol=1e-8, atol=1e-12)
    assert torch.allclose(explicit.norms(G), expected, rtol=1e-8, atol=1e-12)
    assert math.isclose(sm.logdet(), float(torch.linalg.slogdet(A)[1]), rel_tol=1e-10, abs_tol=1e-10)


@settings(max_examples=60, deadline=None)
@given(update_sequences(), st.integers(0, 2**32 - 1))
def test_diagonal_confidence_is_its_rule(case, seed):
    dim, gs, weights, lam = case
    conf = DiagonalConfidence(dim, lam)
    for g, w in zip(gs, weights, strict=True):
        conf.update(g, w)
    diagonal = lam + (weights[:, None] * gs**2).sum(0)
    assert np.allclose(conf.diagonal.numpy(), diagonal, rtol=1e-12, atol=0)
    assert np.allclose(conf.inverse.numpy(), 1.0 / diagonal, rtol=1e-12, atol=0)
    G = np.random.default_rng(seed).normal(size=(5, dim))
    assert np.allclose(conf.norms(G).numpy(), np.sqrt((G**2 / diagonal).sum(1)), rtol=1e-12, atol=1e-15)
    assert math.isclose(conf.logdet(), float(np.log(diagonal).sum()), rel_tol=1e-12, abs_tol=1e-12)


# ---------------------------------------------------------------- effective dimension
@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(0.0, 100.0), min_size=1, max_size=10),
    st.floats(0.05, 20.0),
    st.none() | st.integers(1, 1000),
    st.integers(0, 2**32 - 1),
)
def test_effective_dimension_closed_form_and_rotation(h, lam, n, seed):
    h = np.array(h)
    size = len(h) if n is None else n
    closed = np.log1p(h / lam).sum() / math.log1p(size / lam)
    assert math.isclose(effective_dimension(np.diag(h), lam, n), closed, rel_tol=1e-10, abs_tol=1e-12)
    Q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(len(h), len(h))))
    rotated = Q @ np.diag(h) @ Q.T
    rotated = (rotated + rotated.T) / 2  # symmetric to the last bit
    assert math.isclose(effective_dimension(rotated, lam, n), closed, rel_tol=1e-8, abs_tol=1e-10)


@pytest.mark.parametrize(
    ("h", "lam"),
    [
        ([1.0, 1.0, 1.0], 1e12),
        ([1.0, 1.0, 1.0], 1e15),
        ([1e-3, 2e-3, 5e-4], 1e6),
        ([1e-12, 1e-12], 1.0),
        ([1e-17, 1e-17], 1.0),
        ([1e150, 0.0], 1e-300),  # x / λ overflows: the log(x / λ) branch
    ],
)
def test_effective_dimension_accurate_when_gram_is_small_next_to_lam(h, lam):
    # log(λ + x) − log λ cancelled for x << λ: measured relative errors 1.2e-3 (λ = 1e12), 1.0 (λ = 1e15: 0
    # for 1.0000000000000010), 8.3e-8 (λ = 1e6), 8.9e-5 and 1.0 (eigenvalues 1e-12, 1e-17 at λ = 1) before
    # the fix; at most 1.9e-16 against mpmath (50 digits) after it, so 1e-13 leaves a margin of 500
    terms = [
        math.log1p(x / lam) if x <= lam else math.log(x) - math.log(lam) + math.log1p(lam / x) for x in h
    ]
    closed = math.fsum(terms) / math.log1p(len(h) / lam)
    assert math.isclose(effective_dimension(np.diag(h), lam), closed, rel_tol=1e-13)


def test_effective_dimension_rejects_bad_gram():
    rejects(effective_dimension, np.ones((2, 3)), name="gram")
    rejects(effective_dimension, np.array([[1.0, 2.0], [0.0, 1.0]]), name="gram")
    rejects(effective_dimension, np.diag([1.0, -1.0]), name="gram")
    rejects(effective_dimension, np.eye(2), lam=0.0, name="lam")


# ---------------------------------------------------------------- the reward network
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_network_is_zero_at_init_and_gradients_match_autograd(depth):
    net = RewardNetwork(4, width=10, depth=depth, seed=depth)
    X = torch.from_numpy(np.random.default_rng(depth).normal(size=(20, 4)) * 3)
    with torch.no_grad():  # the halves cancel up to the rounding of one dot product
        assert float(net(X).abs().max()) <= 1e-13
        half = net.width // 2
        out = net.layers[-1].weight[0]
        assert torch.equal(out[:half], -out[half:])
        hidden = net.layers[:-1](X)
        assert torch.allclose(hidden[:, :half], hidden[:, half:], rtol=1e-14, atol=1e-14)  # identical halves
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():  # break the symmetry so that the ReLU patterns of the halves differ
        for p in net.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
        assert bool((net(X) != 0).any())
    hand, auto = net.gradients(X), net._gradients_autograd(X)
    assert hand.shape == (20, net.num_parameters)
    assert float((hand - auto).abs().max()) <= 1e-12 * max(1.0, float(auto.abs().max()))
    K = ntk_gram(net, X)
    assert torch.allclose(K, hand @ hand.T, rtol=1e-12, atol=1e-12)
    assert torch.allclose(K, K.T)
    assert float(torch.linalg.eigvalsh(K).min()) >= -1e-10 * float(K.abs().max())


# ---------------------------------------------------------------- reproducibility and play
@pytest.mark.parametrize("factory", FACTORIES, ids=POLICY_IDS)
def test_same_seed_same_arms(factory):
    contexts, rewards, means = logistic_problem(60, 4, 3, seed=1)
    a = play(factory(5), contexts, rewards, means)
    b = play(factory(5), contexts, rewards, means)
    assert np.array_equal(a.arms, b.arms)
    assert np.array_equal(a.regret, b.regret)


@pytest.mark.parametrize(
    "factory",
    [f for name, f in POLICIES if name.split("-")[0] in ("NeuralTS", "UniformRandom", "EpsilonGreedy")],
)
def test_different_seed_different_arms(factory):
    contexts, rewards, _ = logistic_problem(60, 4, 3, seed=1)
    assert not np.array_equal(
        play(factory(0), contexts, rewards).arms, play(factory(1), contexts, rewards).arms
    )


class Oracle:
    """Plays the arm of largest mean, round by round (knows ``means``)."""

    def __init__(self, means):
        self.means, self.t = means, 0

    def select(self, contexts):
        return int(np.argmax(self.means[self.t]))

    def update(self, context, reward):
        self.t += 1


def test_play_regret_is_brute_force():
    contexts, rewards, means = logistic_problem(40, 4, 3, seed=2)
    run = play(NeuralUCB(3, seed=0, **SMALL), contexts, rewards, means)
    T, K = means.shape
    for t in range(T):
        best = max(range(K), key=lambda k: means[t, k])
        assert run.optimal_arms[t] == best
        assert run.regret[t] == means[t, best] - means[t, run.arms[t]]
        assert run.rewards[t] == rewards[t, run.arms[t]]
    assert np.array_equal(run.cumulative_regret, np.cumsum(run.regret))
    assert (run.regret >= 0).all()
    oracle = play(Oracle(means), contexts, rewards, means)
    assert np.array_equal(oracle.arms, oracle.optimal_arms)
    assert oracle.cumulative_regret[-1] == 0.0
    # without ``expected`` the regret is against the realized rewards
    realized = play(UniformRandom(3), contexts, rewards)
    idx = np.arange(T)
    assert np.array_equal(realized.regret, rewards.max(1) - rewards[idx, realized.arms])


def test_neurallog_ucb2_weights_are_floored_derivatives():
    contexts, rewards, _ = logistic_problem(40, 4, 3, seed=3, scale=4.0)
    kappa = 4.5  # floor 1/κ ≈ 0.222 binds once |f| > 0.69
    policy = NeuralLogUCB2(3, kappa=kappa, width=16, steps=20, train_every=3, lr=0.1, seed=0)
    lam = policy.lam
    H = lam * torch.eye(policy.network.num_parameters, dtype=torch.float64)
    weights = []
    for t in range(contexts.shape[0]):
        a = policy.select(contexts[t])
        x = torch.from_numpy(contexts[t, a])
        with torch.no_grad():
            f = float(policy.network(x[None])[0])
        g = policy.network.gradients(x[None])[0]
        mu = 1.0 / (1.0 + math.exp(-f))
        w = max(mu * (1.0 - mu), 1.0 / kappa)
        weights.append(w)
        H += w * torch.outer(g, g)
        policy.update(contexts[t, a], rewards[t, a])
    assert rel_fro(policy.confidence.matrix, H) <= 1e-10
    assert rel_fro(policy.confidence.inverse, torch.linalg.inv(H)) <= 1e-8
    assert min(weights) == 1.0 / kappa and max(weights) > 1.0 / kappa  # both branches of the max


# ---------------------------------------------------------------- replay (Li et al. 2011)
class LabelOracle:
    """Plays the true label of each event (read from precomputed labels, one per ``select``)."""

    def __init__(self, labels):
        self.labels, self.i = labels, 0

    def select(self, contexts):
        self.i += 1
        return int(self.labels[self.i - 1])

    def update(self, context, reward):
        pass


class Constant:
    """Always plays ``arm``."""

    def __init__(self, arm):
        self.arm = arm

    def select(self, contexts):
        return self.arm

    def update(self, context, reward):
        pass


def test_replay_is_unbiased_on_digits():
    datasets = pytest.importorskip("sklearn.datasets")
    X, y = datasets.load_digits(return_X_y=True)
    X = X / 16.0
    contexts, rewards = classification_bandit(X, y)
    n, K = rewards.shape
    assert K == 10 and contexts.shape == (n, K, K * X.shape[1])
    assert np.array_equal(rewards.argmax(1), y) and (rewards.sum(1) == 1).all()
    actions, observed = log_uniform(contexts, rewards, seed=3)
    assert np.array_equal(observed, rewards[np.arange(n), actions])

    def within(value, truth, m):  # 4 binomial standard deviations of a mean of m events
        return abs(value - truth) <= 4 * math.sqrt(max(truth * (1 - truth), 1e-3) / m)

    uniform = replay(UniformRandom(K * X.shape[1], seed=1), contexts, actions, observed)
    assert abs(uniform.accepted - n / K) <= 4 * math.sqrt(n * (1 / K) * (1 - 1 / K))
    assert within(uniform.value, 1 / K, uniform.accepted)
    assert (
        math.isclose(uniform.running_value[-1], uniform.value)
        and len(uniform.running_value) == uniform.accepted
    )

    best = replay(LabelOracle(y), contexts, actions, observed)
    assert best.value == 1.0  # its true value
    assert abs(best.accepted - n / K) <= 4 * math.sqrt(n * (1 / K) * (1 - 1 / K))
    assert best.accepted == int((actions == y).sum())

    for arm in (0, 7):
        truth = float(np.mean(y == arm))  # the true value of always playing arm
        const = replay(Constant(arm), contexts, actions, observed)
        assert const.accepted == int((actions == arm).sum())
        assert within(const.value, truth, const.accepted)


# ---------------------------------------------------------------- learning happens
def test_learning_beats_uniform():
    contexts, rewards, means = logistic_problem(300, 5, 3, seed=4, scale=6.0)
    uniform = play(UniformRandom(3, seed=0), contexts, rewards, means).cumulative_regret[-1]
    for policy in (NeuralLogUCB2(3, kappa=20.0, seed=0), GLMUCB(3, seed=0)):
        regret = play(policy, contexts, rewards, means).cumulative_regret[-1]
        assert regret < 0.7 * uniform, (type(policy).__name__, regret, uniform)


# ---------------------------------------------------------------- bad input
LAM_POLICIES = [
    lambda lam: NeuralLogUCB1(3, kappa=10.0, lam=lam),
    lambda lam: NeuralLogUCB2(3, kappa=10.0, lam=lam),
    lambda lam: NeuralUCB(3, lam=lam),
    lambda lam: NeuralTS(3, lam=lam),
    lambda lam: EpsilonGreedy(3, lam=lam),
    lambda lam: GLMUCB(3, lam=lam),
    lambda lam: FullConfidence(3, lam),
    lambda lam: DiagonalConfidence(3, lam),
]


def state(policy):
    """What an update changes: the count and the confidence matrix (if any)."""
    conf = getattr(policy, "confidence", None)
    if conf is None:
        return policy.t, None
    return policy.t, (conf.diagonal if isinstance(conf, DiagonalConfidence) else conf.matrix).clone()


@pytest.mark.parametrize("factory", FACTORIES, ids=POLICY_IDS)
def test_policies_reject_bad_input(factory):
    policy = factory(0)
    X = np.random.default_rng(0).normal(size=(4, 3))
    for bad in (np.ones((4, 4)), np.ones(3), np.ones((1, 4, 3)), np.ones((4, 2))):
        rejects(policy.select, bad, name="contexts")
        rejects(policy.scores, bad, name="contexts")
    for _ in range(6):
        policy.update(X[policy.select(X)], 1.0)
    before = state(policy)
    policy.select(X)
    for bad in (np.ones(4), np.ones(2), np.ones((1, 3))):
        rejects(policy.update, bad, 1.0, name="context")
    for bad in (-0.1, 1.5, math.nan):
        rejects(policy.update, X[0], bad, name="reward")
    after = state(policy)
    assert after[0] == before[0] == 6
    assert (after[1] is None and before[1] is None) or torch.equal(after[1], before[1])


@pytest.mark.parametrize("factory", LAM_POLICIES)
@pytest.mark.parametrize("lam", [0.0, -1.0])
def test_lam_must_be_positive(factory, lam):
    rejects(factory, lam, name="lam")


def test_other_arguments_are_checked():
    for cls in (NeuralLogUCB1, NeuralLogUCB2):
        rejects(cls, 3, kappa=3.9, name="kappa")
        rejects(cls, 3, kappa=-1.0, name="kappa")
    rejects(RewardNetwork, 3, width=7, name="width")
    rejects(NeuralUCB, 3, width=7, name="width")
    contexts, rewards, _ = logistic_problem(5, 4, 3, seed=0)
    for bad in (rewards - 0.5, rewards + 0.5):
        rejects(play, UniformRandom(3), contexts, bad, name="rewards")
    _, observed = log_uniform(contexts, rewards)
    for bad in (np.full(5, 4), np.full(5, -1)):
        rejects(replay, UniformRandom(3), contexts, bad, observed, name="actions")
