"""Running a policy: :func:`play` on a simulated problem whose rewards of every arm are drawn in advance
(so every policy meets the same contexts and the same noise), and :func:`replay`, the offline evaluator of
Li et al. (2011) on logged data with uniformly random logged actions; :func:`classification_bandit` and
:func:`log_uniform` turn a classification dataset into such a log.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from icml_theory.bandits._checks import as_tensor
from icml_theory.validation import check_seed


@dataclass(frozen=True)
class BanditRun:
    """One run of :func:`play`: per round the arm played, its reward, the optimal arm (by brute force over
    the expected rewards) and the round's regret ``max_a m[t, a] − m[t, a_t]``."""

    arms: np.ndarray
    rewards: np.ndarray
    optimal_arms: np.ndarray
    regret: np.ndarray

    @property
    def cumulative_regret(self) -> np.ndarray:
        return np.cumsum(self.regret)


@dataclass(frozen=True)
class ReplayResult:
    """:func:`replay`: the mean reward over the accepted events (an unbiased estimate of the policy's value
    under uniform logging), how many were accepted, and the running mean after each acceptance."""

    value: float
    accepted: int
    running_value: np.ndarray


def _check_policy(policy) -> None:
    if not (callable(getattr(policy, "select", None)) and callable(getattr(policy, "update", None))):
        raise TypeError(
            f"policy must have select(contexts) and update(context, reward), got {type(policy).__name__}"
        )


def _problem(contexts, rewards):
    """``contexts`` ``(n, K, d)`` as a tensor and ``rewards`` ``(n, K)`` in [0, 1] as an array."""
    X = as_tensor(contexts, "contexts", 3)
    R = as_tensor(rewards, "rewards", 2).numpy()
    if R.shape != tuple(X.shape[:2]):
        raise ValueError(f"rewards must have shape (n, K) = {tuple(X.shape[:2])}, got {R.shape}")
    if R.min() < 0 or R.max() > 1:
        raise ValueError("rewards must lie in [0, 1]")
    return X, R


def _check_arm(a, K: int) -> None:
    if isinstance(a, bool | np.bool_) or not (isinstance(a, int | np.integer) and 0 <= a < K):
        raise ValueError(f"policy.select returned {a!r}, not an arm index in [0, {K})")


def _check_progress(progress) -> Callable[[int, int], None] | None:
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be None or a callable (t, T), got {type(progress).__name__}")
    return progress


def play(policy, contexts, rewards, expected=None, *, progress=None) -> BanditRun:
    """Run ``policy`` for ``T`` rounds: ``contexts`` ``(T, K, d)``, ``rewards`` ``(T, K)`` in [0, 1] (the
    reward each arm would give), ``expected`` ``(T, K)`` the mean rewards for the pseudo-regret (default:
    the realized ``rewards``). ``progress(t, T)`` is called after each round."""
    _check_policy(policy)
    X, R = _problem(contexts, rewards)
    M = R if expected is None else as_tensor(expected, "expected", 2).numpy()
    if M.shape != R.shape:
        raise ValueError(f"expected must have shape (T, K) = {R.shape}, got {M.shape}")
    if M.min() < 0 or M.max() > 1:
        raise ValueError("expected must lie in [0, 1] (mean rewards)")
    progress = _check_progress(progress)
    T = X.shape[0]
    arms = np.empty(T, dtype=np.int64)
    for t in range(T):
        a = policy.select(X[t])
        _check_arm(a, X.shape[1])
        policy.update(X[t, a], float(R[t, a]))
        arms[t] = a
        if progress is not None:
            progress(t + 1, T)
    idx = np.arange(T)
    optimal = M.argmax(axis=1)
    return BanditRun(arms, R[idx, arms], optimal, M[idx, optimal] - M[idx, arms])


def classification_bandit(X, y) -> tuple[np.ndarray, np.ndarray]:
    """A classification dataset as a ``K``-armed bandit (``K`` = number of classes): arm ``a``'s feature row
    is ``x`` placed in block ``a`` of a ``K·d`` vector (zeros elsewhere), its reward 1 if ``a`` is the
    label. Returns ``contexts`` ``(n, K, K·d)`` and ``rewards`` ``(n, K)``; classes are the sorted labels."""
    X = as_tensor(X, "X", 2).numpy()
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(f"y must be 1-D with {X.shape[0]} labels (one per row of X), got shape {y.shape}")
    classes, labels = np.unique(y, return_inverse=True)
    K, (n, d) = len(classes), X.shape
    if K < 2:
        raise ValueError(f"y must hold at least 2 classes, got {K}")
    if n * K * K * d > 2e8:
        raise ValueError(f"X is too large for the block encoding ({n} rows x {K}^2 x {d} entries)")
    contexts = np.zeros((n, K, K * d))
    for a in range(K):
        contexts[:, a, a * d : (a + 1) * d] = X
    rewards = (labels[:, None] == np.arange(K)[None, :]).astype(np.float64)
    return contexts, rewards


def log_uniform(contexts, rewards, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A log of a uniformly random logging policy over the rows: ``(actions, observed rewards)``, each ``(n,)``."""
    X, R = _problem(contexts, rewards)
    rng = np.random.default_rng(check_seed(seed))
    actions = rng.integers(0, X.shape[1], size=X.shape[0])
    return actions, R[np.arange(X.shape[0]), actions]


def replay(policy, contexts, actions, rewards, *, progress=None) -> ReplayResult:
    """Li et al.'s (2011) replay: for each logged event ``(contexts[t], actions[t], rewards[t])``, if the
    policy selects the logged action it learns from it and the reward counts; otherwise the event is
    skipped. Unbiased for the policy's value when the logged actions were uniformly random."""
    _check_policy(policy)
    X = as_tensor(contexts, "contexts", 3)
    n, K = X.shape[:2]
    a = np.asarray(actions)
    if a.shape != (n,) or a.dtype.kind not in "iu":
        raise ValueError(
            f"actions must be {n} integer arm indices (one per event), got {a.dtype} of shape {a.shape}"
        )
    if a.min() < 0 or a.max() >= K:
        raise ValueError(f"actions must lie in [0, {K}), got {a.min()}..{a.max()}")
    r = as_tensor(rewards, "rewards", 1).numpy()
    if r.shape != (n,):
        raise ValueError(f"rewards must be {n} logged rewards, got shape {r.shape}")
    if r.min() < 0 or r.max() > 1:
        raise ValueError("rewards must lie in [0, 1]")
    progress = _check_progress(progress)
    gained: list[float] = []
    for t in range(n):
        chosen = policy.select(X[t])
        _check_arm(chosen, K)
        if chosen == a[t]:
            policy.update(X[t, a[t]], float(r[t]))
            gained.append(float(r[t]))
        if progress is not None:
            progress(t + 1, n)
    running = np.cumsum(gained) / np.arange(1, len(gained) + 1) if gained else np.empty(0)
    if not gained:
        warnings.warn(
            "replay: the policy never chose a logged action; its value is NaN (no events)",
            RuntimeWarning,
            stacklevel=2,
        )
    return ReplayResult(float(running[-1]) if gained else float("nan"), len(gained), running)
