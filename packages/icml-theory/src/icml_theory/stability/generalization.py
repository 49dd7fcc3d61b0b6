"""Generalization-gap bounds from L_p stability: ERM, transductive regression and meta-learning.

The paper's exact theorems and constants were not available to us; the bounds below are **our
reconstruction** from the standard stability arguments, with the constants as arguments. Each one is
"expected gap + deviation", the deviation coming from :mod:`icml_theory.stability.concentration` applied to
the gap as a function of independent pieces with L_p differences ``c``:

- ERM on n samples, gap(S) = R(A_S) − R̂_S(A_S). E gap = E[ℓ(A_{S^{(i)}}, z_i) − ℓ(A_S, z_i)] =: γ (the mean
  replace-one stability), and replacing z_i moves the gap by at most ‖·‖_p ≤ a β_p + b M_p / n, with β_p =
  ‖ℓ(A_S, z) − ℓ(A_{S^{(i)}}, z)‖_p, M_p = ‖ℓ(A_S, z)‖_p and (a, b) = (2, 2): the population risk moves by
  β_p, the empirical risk by β_p plus the swapped loss terms (2 M_p / n). With Rio's deviation at order p:

      gap ≤ γ + sqrt((p − 1) n) (2 β_p + 2 M_p / n) δ^{−1/p}.

- Transductive regression: m training points drawn without replacement from N = m + u fixed points, gap =
  test mean loss − training mean loss. Swapping a training and a test point moves the gap by at most
  a β_p + b M_p (1/m + 1/u); revealing the smaller side one point at a time is a martingale of
  k = min(m, u) steps with differences bounded by that swap (El-Yaniv and Pechyony's argument, in L_p):

      gap ≤ γ + sqrt((p − 1) min(m, u)) (2 β_p + 2 M_p (1/m + 1/u)) δ^{−1/p}.

- Meta-learning over T independent tasks (each task with its own sample is one independent piece), gap =
  transfer risk − mean empirical risk over tasks, with task-level stability β_p (one task replaced):

      gap ≤ γ + sqrt((p − 1) T) (2 β_p + 2 M_p / T) δ^{−1/p}.

``deviation`` picks the concentration bound: ``"lp"`` (Rio at the best order ≤ p, the default), ``"rio"``
(Rio at order p, the formulas above), ``"fuk-nagaev"`` and ``"chebyshev"`` (the L_p differences bound the
L_2 ones, so they serve as both). The classical McDiarmid bound needs almost-sure ranges, not moments, and
is left to :func:`~icml_theory.stability.concentration.mcdiarmid_deviation`.

:func:`erm_stability` estimates γ, β_p and M_p for a batched ``fit``/``loss`` pair (:func:`ridge`,
:func:`logistic`) by replace-one resampling.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from icml_theory.stability.concentration import (
    chebyshev_deviation,
    fuk_nagaev_deviation,
    lp_deviation,
)
from icml_theory.stability.estimate import StabilityEstimate, as_generator, draw_rows, lp_norm, norm_estimate
from icml_theory.validation import check_choice, check_int, check_real

__all__ = [
    "DEVIATIONS",
    "ERMModel",
    "ERMStability",
    "erm_gap_bound",
    "erm_stability",
    "logistic",
    "meta_learning_gap_bound",
    "ridge",
    "transductive_gap_bound",
]

DEVIATIONS = ("lp", "rio", "fuk-nagaev", "chebyshev")


def _deviation(c: float, count: int, p: float, delta: float, deviation: str) -> float:
    """The deviation bound for ``count`` equal differences c, from one coordinate carrying the same sums
    (c sqrt(count) for Σ c², c count^{1/p} for Σ c^p), so a huge count allocates nothing."""
    check_choice(deviation, "deviation", DEVIATIONS)
    c2 = np.array([c * math.sqrt(count)])
    if not (math.isfinite(c) and np.isfinite(c2).all()):
        warnings.warn(
            "the bounded difference a * stability + b * loss_moment / size overflows float64; returning inf",
            RuntimeWarning,
            stacklevel=3,
        )
        return math.inf
    if deviation == "lp":
        return lp_deviation(c2, p, delta)
    if deviation == "rio":
        return lp_deviation(c2, p, delta, optimize_order=False)
    if deviation == "fuk-nagaev":
        return fuk_nagaev_deviation(c2, np.array([c * count ** (1 / p)]), p, delta)
    return chebyshev_deviation(c2, delta)


def _constants(constants) -> tuple[float, float]:
    if not isinstance(constants, tuple | list) or len(constants) != 2:
        raise TypeError(f"constants must be a pair (a, b), got {constants!r}")
    return check_real(constants[0], "constants[0]", "[0, inf)"), check_real(
        constants[1], "constants[1]", "[0, inf)"
    )


def _common(delta, mean_stability, stability, loss_moment, p):
    return (
        check_real(delta, "delta", "(0, 1)"),
        check_real(mean_stability, "mean_stability"),
        check_real(stability, "stability", "[0, inf)"),
        check_real(loss_moment, "loss_moment", "[0, inf)"),
        check_real(p, "p", "[2, inf)"),
    )


def erm_gap_bound(
    n, delta, *, mean_stability, stability, loss_moment, p=2.0, deviation="lp", constants=(2.0, 2.0)
) -> float:
    """ERM: γ + deviation(n differences of a β_p + b M_p / n) (module docstring)."""
    n = check_int(n, "n", 1)
    delta, gamma, beta, moment, p = _common(delta, mean_stability, stability, loss_moment, p)
    a, b = _constants(constants)
    return gamma + _deviation(a * beta + b * moment / n, n, p, delta, deviation)


def transductive_gap_bound(
    m, u, delta, *, mean_stability, stability, loss_moment, p=2.0, deviation="lp", constants=(2.0, 2.0)
) -> float:
    """Transductive: γ + deviation(min(m, u) differences of a β_p + b M_p (1/m + 1/u)) (module docstring)."""
    m, u = check_int(m, "m", 1), check_int(u, "u", 1)
    delta, gamma, beta, moment, p = _common(delta, mean_stability, stability, loss_moment, p)
    a, b = _constants(constants)
    return gamma + _deviation(a * beta + b * moment * (1 / m + 1 / u), min(m, u), p, delta, deviation)


def meta_learning_gap_bound(
    n_tasks, delta, *, mean_stability, stability, loss_moment, p=2.0, deviation="lp", constants=(2.0, 2.0)
) -> float:
    """Meta-learning: γ + deviation(T differences of a β_p + b M_p / T), β_p the task-level stability."""
    t = check_int(n_tasks, "n_tasks", 1)
    delta, gamma, beta, moment, p = _common(delta, mean_stability, stability, loss_moment, p)
    a, b = _constants(constants)
    return gamma + _deviation(a * beta + b * moment / t, t, p, delta, deviation)


@dataclass(frozen=True)
class ERMModel:
    """A batched learner: ``fit(data)`` maps datasets ``(B, n, d + 1)`` (features, then the target) to
    parameters ``(B, d)``; ``loss(params, rows)`` maps rows ``(B, k, d + 1)`` to losses ``(B, k)``."""

    fit: Callable[[np.ndarray], np.ndarray]
    loss: Callable[[np.ndarray, np.ndarray], np.ndarray]


def _lam(lam) -> float:
    return check_real(lam, "lam", "(0, inf)")


def ridge(lam=1.0) -> ERMModel:
    """Ridge regression, argmin_w (1/n) Σ (y − x·w)² + λ |w|², closed form; squared loss.

    The fit solves the least-squares problem ``[x/√n; √λ I] w ≈ [y/√n; 0]`` by QR, not the normal
    equations ``(xᵀx/n + λI) w = xᵀy/n``, whose condition number is the square of the features'."""
    lam = _lam(lam)

    def fit(data: np.ndarray) -> np.ndarray:
        x, y = data[..., :-1], data[..., -1]
        b, n, d = x.shape
        root_n = math.sqrt(n)
        aug = np.concatenate([x / root_n, np.broadcast_to(math.sqrt(lam) * np.eye(d), (b, d, d))], axis=-2)
        q, r = np.linalg.qr(aug)  # reduced: q (B, n + d, d), r (B, d, d) upper triangular
        rhs = np.einsum("bki,bk->bi", q[:, :n], y / root_n)  # qᵀ [y/√n; 0]
        return np.linalg.solve(r, rhs[..., None])[..., 0]

    def loss(w: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return (rows[..., -1] - np.einsum("bki,bi->bk", rows[..., :-1], w)) ** 2

    return ERMModel(fit, loss)


def logistic(lam=1.0, iterations=50) -> ERMModel:
    """L2-regularised logistic regression (targets in {0, 1}), argmin_w (1/n) Σ log-loss + λ |w|², by
    Newton's method (strictly convex, so it converges from 0); log-loss."""
    lam = _lam(lam)
    iterations = check_int(iterations, "iterations", 1)

    def fit(data: np.ndarray) -> np.ndarray:
        x, y = data[..., :-1], data[..., -1]
        n, d = x.shape[-2], x.shape[-1]
        w = np.zeros((x.shape[0], d))
        for _ in range(iterations):
            prob = 1 / (1 + np.exp(-np.einsum("bni,bi->bn", x, w)))
            grad = np.einsum("bni,bn->bi", x, prob - y) / n + 2 * lam * w
            hess = np.einsum("bni,bn,bnj->bij", x, prob * (1 - prob), x) / n + 2 * lam * np.eye(d)
            step = np.linalg.solve(hess, grad[..., None])[..., 0]
            w = w - step
            if np.abs(step).max() < 1e-12:
                break
        return w

    def loss(w: np.ndarray, rows: np.ndarray) -> np.ndarray:
        z = np.einsum("bki,bi->bk", rows[..., :-1], w)
        return np.logaddexp(0, z) - rows[..., -1] * z

    return ERMModel(fit, loss)


@dataclass(frozen=True)
class ERMStability:
    """γ (``mean_stability``, with its standard error), β_p (``stability``) and M_p (``loss_moment``)."""

    mean_stability: float
    mean_stability_se: float
    stability: StabilityEstimate
    loss_moment: float


def erm_stability(
    model: ERMModel, sample: Callable, n, *, p=2.0, n_pairs=1000, chunk=256, seed=None
) -> ERMStability:
    """Estimate γ, β_p and M_p of ``model`` on n draws of ``sample(rng, size) -> rows`` from ``n_pairs``
    replace-one pairs, each scored at the replaced point (γ) and at one fresh point (β_p, M_p)."""
    if not isinstance(model, ERMModel):
        raise TypeError(f"model must be an ERMModel (ridge(), logistic()), got {type(model).__name__}")
    if not callable(sample):
        raise TypeError(f"sample must be a callable (rng, size) -> rows, got {type(sample).__name__}")
    n, n_pairs, chunk = check_int(n, "n", 1), check_int(n_pairs, "n_pairs", 2), check_int(chunk, "chunk", 1)
    p = check_real(p, "p", "[1, inf)")
    rng = as_generator(seed)
    gammas, diffs, losses = [], [], []
    for start in range(0, n_pairs, chunk):
        b = min(chunk, n_pairs - start)
        rows = draw_rows(sample, rng, b * (n + 2))
        rows = rows.reshape(b, n + 2, *rows.shape[1:])
        data, fresh, probe = rows[:, :n], rows[:, n], rows[:, n + 1]
        where = rng.integers(0, n, size=b)
        other = (where + rng.integers(1, n, size=b)) % n if n > 1 else where  # a training point j != i
        replaced = data.copy()
        replaced[np.arange(b), where] = fresh
        w, w_rep = model.fit(data), model.fit(replaced)
        # each probe: the replaced point z_i (gamma), a fresh point and a kept training point (beta, M)
        points = np.stack([data[np.arange(b), where], probe, data[np.arange(b), other]], axis=1)
        ell, ell_rep = model.loss(w, points), model.loss(w_rep, points)
        gammas.append(ell_rep[:, 0] - ell[:, 0])
        diffs.append(ell[:, 1:] - ell_rep[:, 1:])
        losses.append(ell[:, 1:])
    g, d, ell = (np.concatenate(v) for v in (gammas, diffs, losses))
    if not (np.isfinite(g).all() and np.isfinite(d).all() and np.isfinite(ell).all()):
        raise ValueError("the model's fit or loss returned NaN or inf on a sampled dataset")
    # beta_p and M_p must serve at fresh points and at kept training points alike: the larger of the two
    fresh_est, kept_est = (norm_estimate(np.abs(d[:, k]), p, 0.95) for k in (0, 1))
    return ERMStability(
        mean_stability=float(g.mean()),
        mean_stability_se=float(g.std(ddof=1) / math.sqrt(g.size)),
        stability=max(fresh_est, kept_est, key=lambda e: e.value),
        loss_moment=float(np.max(lp_norm(ell, p, axis=0))),
    )
