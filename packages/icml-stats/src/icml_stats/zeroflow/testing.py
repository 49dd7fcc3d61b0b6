"""Tests from the zero-flow criterion: a two-sample test and a Model-X conditional-independence test,
both with exact finite-sample p-values by sign flips.

Under the null, a held-out pair's ``(M, D)`` has the law of ``(M, -D)`` (two-sample: ``X0, X1`` i.i.d.;
Model-X: ``X`` and ``X~ ~ P(X | Z)`` exchangeable given ``Y, Z`` when ``X`` is independent of ``Y`` given
``Z``). A velocity ``v`` fitted on the other pairs is fixed, so the held-out scores ``a_j = <v_j, D_j>`` are
symmetric about 0 and independent: the p-value of ``sum_j a_j`` against its ``2^n`` sign flips is exact
at every ``n`` (enumerated when ``2^n`` is small, else Monte Carlo counting the observed signs as one
draw, which keeps it valid). The reported statistic ``mean_j [2 a_j - ||v_j||^2]`` is the held-out
zero-flow divergence; its flip distribution differs from that of ``sum_j a_j`` by a constant. A Model-X
test is exact when the sampler of ``X | Z`` is; with an estimated sampler (``"gaussian"``) it is only
approximately so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.linear_model import LinearRegression
from sklearn.utils.validation import check_is_fitted

from icml_stats.validation import (
    as_array,
    as_matched_samples,
    as_rng,
    as_samples,
    check_choice,
    check_int,
    check_real,
)
from icml_stats.zeroflow.velocity import (
    check_magnitude,
    excess_risk_scores,
    midpoint_pairs,
    seeded_velocity,
    validate_named,
)

__all__ = [
    "GaussianConditionalSampler",
    "ZeroFlowTestResult",
    "sign_flip_p_value",
    "zero_flow_ci_test",
    "zero_flow_two_sample_test",
]

METHODS = ("auto", "exact", "monte-carlo")
EXACT_MAX = 20  # "auto" enumerates every sign pattern up to this many scores (2^20 patterns)
MAX_FLIPS = 10**9
_CHUNK = 1 << 16


def sign_flip_p_value(scores, *, n_flips: int = 9999, method: str = "auto", random_state=None) -> float:
    """One-sided p-value of ``sum(scores)`` against random signs: ``P(sum_j s_j scores_j >= sum_j scores_j)``.

    ``method="exact"`` enumerates all ``2^n`` patterns (refused past 30 scores), ``"monte-carlo"`` draws
    ``n_flips`` (at most 10^9) patterns and returns ``(1 + #{flipped >= observed}) / (1 + n_flips)`` (never
    0, valid at every ``n``), ``"auto"`` enumerates up to 20 scores. Ties count as ``>=`` up to a relative
    1e-12."""
    s = as_array(scores, "scores", ("n",), hint=" (one score per held-out pair)")
    check_choice(method, "method", METHODS)
    n_flips = check_int(n_flips, "n_flips", 1, MAX_FLIPS)
    rng = as_rng(random_state)
    with np.errstate(over="ignore"):
        scale = float(np.abs(s).sum())
    if not np.isfinite(scale):
        raise ValueError("scores are too large in magnitude: their sum overflows")
    observed = float(s.sum())
    tol = 1e-12 * scale  # relative: rescaling the scores leaves the p-value unchanged
    if method == "exact" or (method == "auto" and len(s) <= EXACT_MAX):
        if len(s) > 30:
            raise ValueError(f"method='exact' enumerates 2^n sign patterns: at most 30 scores, got {len(s)}")
        bits = np.arange(len(s))
        total, count = 1 << len(s), 0
        for first in range(0, total, _CHUNK):
            codes = np.arange(first, min(total, first + _CHUNK))
            signs = 1.0 - 2.0 * ((codes[:, None] >> bits) & 1)
            count += int(np.sum(signs @ s >= observed - tol))
        return count / total
    count = 0
    for first in range(0, n_flips, _CHUNK):
        signs = rng.choice((-1.0, 1.0), size=(min(_CHUNK, n_flips - first), len(s)))
        count += int(np.sum(signs @ s >= observed - tol))
    return (1 + count) / (1 + n_flips)


@dataclasses.dataclass(frozen=True)
class ZeroFlowTestResult:
    """A zero-flow test's outcome.

    ``statistic``: the held-out zero-flow divergence ``mean_j [2 <v_j, D_j> - ||v_j||^2]``; ``p_value``:
    the sign-flip p-value; ``n_train`` and ``n_test``: pairs used to fit the velocity and to test;
    ``method``: how the p-value was computed (``"exact"`` or ``"monte-carlo"``)."""

    statistic: float
    p_value: float
    n_train: int
    n_test: int
    method: str

    def reject(self, alpha: float = 0.05) -> bool:
        """Whether the null is rejected at level ``alpha`` (``p_value <= alpha``)."""
        return self.p_value <= check_real(alpha, "alpha", "(0, 1)")


def _split(n: int, train_size: float, rng: np.random.Generator, data: str) -> tuple[np.ndarray, np.ndarray]:
    train_size = check_real(train_size, "train_size", "(0, 1)")
    n_train = round(train_size * n)
    if n_train < 2 or n - n_train < 2:
        raise ValueError(
            f"the split needs at least 2 pairs on each side: {n} pairs of {data} with train_size={train_size} "
            f"give {n_train} to fit and {n - n_train} to test"
        )
    order = rng.permutation(n)
    return order[:n_train], order[n_train:]


def _held_out_test(features, d, train, test, velocity, n_flips, method, rng, data) -> ZeroFlowTestResult:
    """The held-out zero-flow test; ``data`` names the arguments the pairs come from (for the refusals)."""
    check_choice(method, "method", METHODS)
    check_magnitude(data, features, d)
    v = seeded_velocity(velocity, rng).fit(features[train], d[train]).predict(features[test])
    inner, norm = excess_risk_scores(v, d[test])
    if not (np.isfinite(inner).all() and np.isfinite(norm).all()):
        raise ValueError(f"{data} are too large in magnitude: the held-out scores overflow; rescale them")
    p = sign_flip_p_value(inner, n_flips=n_flips, method=method, random_state=rng)
    exact = method == "exact" or (method == "auto" and len(test) <= EXACT_MAX)
    statistic = float(np.mean(2.0 * inner - norm))
    return ZeroFlowTestResult(statistic, p, len(train), len(test), "exact" if exact else "monte-carlo")


def zero_flow_two_sample_test(
    x0,
    x1,
    *,
    velocity="linear",
    train_size: float = 0.5,
    n_flips: int = 9999,
    method: str = "auto",
    random_state=None,
) -> ZeroFlowTestResult:
    """Test ``P = Q`` from ``x0 ~ P`` ``(n0, d)`` and ``x1 ~ Q`` ``(n1, d)`` (a 1-D array is one feature).

    ``min(n0, n1)`` random pairs; a :class:`~icml_stats.zeroflow.MidpointVelocity` (``velocity``: a model
    name, a scikit-learn regressor or a configured ``MidpointVelocity``) is fitted on ``train_size`` of
    them and the rest give the sign-flip p-value (see the module doc; ``n_flips`` and ``method`` as in
    :func:`sign_flip_p_value`). ``random_state`` (None, an int or a numpy Generator) draws the pairing, the
    split, the model seeds and the flips."""
    rng = as_rng(random_state)
    m, d = midpoint_pairs(x0, x1, rng)
    train, test = _split(len(d), train_size, rng, "x0 and x1")
    return _held_out_test(m, d, train, test, velocity, n_flips, method, rng, "x0 and x1")


class GaussianConditionalSampler(BaseEstimator):
    """An estimated Model-X sampler: ``X | Z ~ N(a + B z, S)`` fitted by least squares.

    ``fit(Z, X)`` estimates the affine mean and the residual covariance (a ``ridge * trace / d`` jitter
    keeps it positive definite); ``sample(Z, random_state)`` draws one ``X`` per row of ``Z``.
    Fitted attributes: ``mean_model_`` (a ``LinearRegression``), ``cov_`` ``(d, d)``, ``n_features_in_``."""

    def __init__(self, ridge: float = 1e-6):
        self.ridge = ridge

    def fit(self, Z, X):
        ridge = check_real(self.ridge, "ridge", "[0, inf)")
        z = validate_named(self, Z, "Z", reset=True)
        x = as_samples(X, "X", z.shape[0])
        check_magnitude("Z", z)
        check_magnitude("X", x)
        self.mean_model_ = LinearRegression().fit(z, x)
        resid = x - self.mean_model_.predict(z).reshape(x.shape)
        cov = np.atleast_2d(np.cov(resid, rowvar=False, bias=False)) if len(x) > 1 else np.eye(x.shape[1])
        with np.errstate(over="ignore", invalid="ignore"):
            self.cov_ = cov + ridge * max(np.trace(cov) / cov.shape[0], 1e-12) * np.eye(cov.shape[0])
        if not np.isfinite(self.cov_).all():
            raise ValueError(f"ridge ({ridge:g}) is too large for the residual covariance of X: it overflows")
        return self

    def sample(self, Z, random_state=None) -> np.ndarray:
        """One draw of ``X`` for each row of ``Z``: ``(n, d)``."""
        check_is_fitted(self, "cov_")
        z = validate_named(self, Z, "Z", reset=False)
        check_magnitude("Z", z)
        mean = self.mean_model_.predict(z).reshape(len(z), -1)
        chol = np.linalg.cholesky(self.cov_)
        return mean + as_rng(random_state).standard_normal(mean.shape) @ chol.T


def _draw(sampler, z: np.ndarray, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    if hasattr(sampler, "sample") and not isinstance(sampler, type):
        out = sampler.sample(z, random_state=rng)
    elif callable(sampler) and not isinstance(sampler, type):
        out = sampler(z, rng)
    else:
        raise TypeError(
            "sampler must be 'gaussian', a callable (z, rng) -> x or an object with sample(z, random_state) "
            f"(an instance, not a class), got {sampler!r}"
        )
    try:
        x = np.asarray(out, dtype=float)
    except (TypeError, ValueError):
        x = None
    if x is not None and x.shape == (shape[0],) and shape[1] == 1:
        x = x[:, None]  # one feature: a 1-D draw is its column
    if x is None or x.shape != shape or not np.isfinite(x).all():
        raise ValueError(
            f"sampler must return {shape[0]} finite draws of X, shape {shape}, got {np.shape(out)}"
        )
    return x


def zero_flow_ci_test(
    x,
    y,
    z,
    sampler: str | Callable | object = "gaussian",
    *,
    velocity="linear",
    train_size: float = 0.5,
    n_flips: int = 9999,
    method: str = "auto",
    random_state=None,
) -> ZeroFlowTestResult:
    """Test ``X`` independent of ``Y`` given ``Z`` in Model-X form, from matched rows ``x``, ``y``, ``z``.

    ``sampler`` draws ``X~ ~ P(X | Z)``: a callable ``(z, rng) -> x~`` or an object with
    ``sample(z, random_state)`` (known: the test is exact), or ``"gaussian"`` (a
    :class:`GaussianConditionalSampler` fitted on the training rows: approximate). With ``X1 = x`` and
    ``X0 = x~``, the velocity regresses ``D = x - x~`` on ``(M, y, z)``; the rest is as in
    :func:`zero_flow_two_sample_test`."""
    x, y, z = as_matched_samples(x=x, y=y, z=z)
    check_magnitude("x, y and z", x, y, z)
    rng = as_rng(random_state)
    train, test = _split(len(x), train_size, rng, "x, y and z")
    if isinstance(sampler, str):
        check_choice(sampler, "sampler", ("gaussian",))
        sampler = GaussianConditionalSampler().fit(z[train], x[train])
    x_tilde = _draw(sampler, z, x.shape, rng)
    features = np.hstack([(x + x_tilde) / 2.0, y, z])
    d = x - x_tilde
    # the rows that fitted an estimated sampler also fit the velocity: the test rows stay untouched
    return _held_out_test(
        features, d, train, test, velocity, n_flips, method, rng, "x, y, z and the sampler's draws"
    )
