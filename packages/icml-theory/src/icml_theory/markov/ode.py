"""A simplified gradient-flow model of the stage-wise dynamics, integrated with scipy.

Our reconstruction (the paper's exact system was not available to us): each lag ``j`` carries a signal of
strength ``s_j`` in its own direction, orthogonal to the others. Head ``h`` has attention logits ``a[h, k]``
over ``K`` candidate lags (attention ``p[h] = softmax(a[h])``) and, per direction ``j``, a value factorized
as ``o[h, j] * v[h, j]`` (the output and value maps of a head). What the model reads at lag ``k`` in
direction ``j`` is ``M[k, j] = sum_h p[h, k] o[h, j] v[h, j]``, fit to the target ``S[k, j] = s_j`` when ``k``
is lag ``j``, else 0, by gradient flow on ``L = 1/2 sum (M - S)^2``: a non-negative factorization of the
(lag x direction) target by ``H`` rank-one terms whose position factors live on the simplex (the link to
tensor factorization). Small initial values give the plateaus: a lag is learned once its value grows,
which needs attention on it, which needs a value to pay for it.

With one head and one candidate lag ``p = 1`` and balanced factors ``o = v = sqrt(w0)``, ``w = o v`` obeys
``dw/dt = 2 w (s - w)``, whose logistic solution :func:`logistic_solution` is the closed-form check.

:func:`strengths` gives the strengths the chain implies for a softmax-output model near its start
(uniform predictions): the gradient of the log loss with respect to lag ``j``'s logit table is the
covariance ``C_j = E[(e_y - 1/V) e_{x_{t-j}}^T]``, and the loss curvature there is ``1/V^2`` per entry,
so ``s_j = V^2 ||C_j||_F`` and one unit of ODE time is ``V^2`` units of ``lr * steps`` of plain gradient
descent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.integrate import solve_ivp

from icml_theory.markov.chain import MixtureOfLagsChain
from icml_theory.validation import as_array, check_int, check_real, check_seed


@dataclass(frozen=True)
class StageODE:
    """The simplified system: ``strengths[j]`` of the signal at candidate lag ``lags[j]`` (1-based, at
    most ``candidates``), ``heads`` heads, initial factor scale ``init`` (attention logits start at
    ``init``-scale noise around 0, the value factors at ``|N(0, init^2)|``)."""

    strengths: tuple[float, ...]
    lags: tuple[int, ...]
    heads: int
    candidates: int
    init: float = 1e-3

    def __post_init__(self):
        s = as_array(self.strengths, "strengths", "(0, inf)", "signal strengths").ravel()
        check_int(self.heads, "heads", minimum=1)
        check_int(self.candidates, "candidates", minimum=1)
        lags = tuple(check_int(lag, "lags", minimum=1, maximum=self.candidates) for lag in self.lags)
        if len(lags) != s.size or len(set(lags)) != len(lags):
            raise ValueError(f"lags must be distinct, one per strength ({s.size}), got {self.lags}")
        check_real(self.init, "init", "(0, inf)")
        object.__setattr__(self, "strengths", tuple(s.tolist()))
        object.__setattr__(self, "lags", lags)

    @property
    def shapes(self) -> tuple[tuple[int, int], tuple[int, int]]:
        return (self.heads, self.candidates), (self.heads, len(self.strengths))

    def target(self) -> np.ndarray:
        out = np.zeros((self.candidates, len(self.strengths)))
        for j, (lag, s) in enumerate(zip(self.lags, self.strengths, strict=True)):
            out[lag - 1, j] = s
        return out

    def unpack(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        (h, k), (_, j) = self.shapes
        a = y[: h * k].reshape(h, k)
        o = y[h * k : h * k + h * j].reshape(h, j)
        v = y[h * k + h * j :].reshape(h, j)
        return a, o, v

    def initial(self, seed: int = 0) -> np.ndarray:
        rng = np.random.default_rng(check_seed(seed))
        (h, k), (_, j) = self.shapes
        a = rng.normal(0.0, self.init, size=(h, k))
        o = np.abs(rng.normal(0.0, self.init, size=(h, j)))
        v = np.abs(rng.normal(0.0, self.init, size=(h, j)))
        return np.concatenate([a.ravel(), o.ravel(), v.ravel()])

    def attention(self, a: np.ndarray) -> np.ndarray:
        e = np.exp(a - a.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def readout(self, y: np.ndarray) -> np.ndarray:
        """``M[k, j]``: what the heads read at lag ``k + 1`` in direction ``j``."""
        a, o, v = self.unpack(y)
        return self.attention(a).T @ (o * v)

    def loss(self, y: np.ndarray) -> float:
        return 0.5 * float(((self.readout(y) - self.target()) ** 2).sum())

    def rhs(self, t: float, y: np.ndarray) -> np.ndarray:
        """``-grad L`` at the flattened state ``y = (a, o, v)``."""
        a, o, v = self.unpack(y)
        p = self.attention(a)
        r = p.T @ (o * v) - self.target()  # (K, J)
        pr = p @ r  # (H, J): sum_k p[h, k] r[k, j]
        grad_o, grad_v = pr * v, pr * o
        g = r @ (o * v).T  # (K, H): dL/dp[h, k] = sum_j r[k, j] o[h, j] v[h, j]
        g = g.T
        grad_a = p * (g - (p * g).sum(axis=1, keepdims=True))
        return -np.concatenate([grad_a.ravel(), grad_o.ravel(), grad_v.ravel()])

    def levels(self) -> np.ndarray:
        """The loss on each plateau: all lags unlearned, then the strongest learned, and so on, down to 0."""
        s = np.sort(np.asarray(self.strengths))[::-1]
        return np.array([0.5 * float((s[k:] ** 2).sum()) for k in range(s.size + 1)])


@dataclass(frozen=True)
class ODESolution:
    times: np.ndarray  # (n,)
    loss: np.ndarray  # (n,)
    readout: np.ndarray  # (n, K, J)
    attention: np.ndarray  # (n, H, K)
    evaluations: int


def integrate(ode: StageODE, t_max: float, n_points: int = 400, rtol: float = 1e-6, atol: float = 1e-9, seed: int = 0,
              y0=None) -> ODESolution:  # fmt: skip
    """Integrate the gradient flow from ``ode.initial(seed)`` (or ``y0``) to ``t_max`` (scipy's LSODA),
    recording ``n_points`` log-spaced times from ``t_max * 1e-4``."""
    if not isinstance(ode, StageODE):
        raise TypeError(f"ode must be a StageODE, got {type(ode).__name__}")
    t_max = check_real(t_max, "t_max", "(0, inf)")
    n_points = check_int(n_points, "n_points", minimum=2)
    rtol = check_real(rtol, "rtol", "(0, 1)")
    atol = check_real(atol, "atol", "(0, 1)")
    start = ode.initial(seed) if y0 is None else as_array(y0, "y0", "(-inf, inf)", "state values").ravel()
    times = np.concatenate([[0.0], np.geomspace(t_max * 1e-4, t_max, n_points - 1)])
    sol = solve_ivp(ode.rhs, (0.0, t_max), start, method="LSODA", t_eval=times, rtol=rtol, atol=atol)
    if not sol.success:
        raise RuntimeError(f"the ODE integration failed: {sol.message}")
    states = sol.y.T
    return ODESolution(
        times=sol.t,
        loss=np.array([ode.loss(y) for y in states]),
        readout=np.stack([ode.readout(y) for y in states]),
        attention=np.stack([ode.attention(ode.unpack(y)[0]) for y in states]),
        evaluations=int(sol.nfev),
    )


def logistic_solution(t, s: float, w0: float) -> np.ndarray:
    """The closed form for one head and one lag: ``w(t) = s / (1 + (s / w0 - 1) exp(-2 s t))``."""
    s = check_real(s, "s", "(0, inf)")
    w0 = check_real(w0, "w0", "(0, inf)")
    tt = as_array(t, "t", "[0, inf)", "times")
    if w0 >= s:  # from above (or at) s: s / w0 - 1 is in (-1, 0], nothing overflows
        return s / (1.0 + (s / w0 - 1.0) * np.exp(-2.0 * s * tt))
    # from below: s * sigmoid(2 s t - L), L = ln(s / w0 - 1), in logs, since s / w0 overflows for tiny w0
    # (s = 1e10, w0 = 1e-300) and inf * exp(-2 s t) = inf * 0 is NaN once the exponential underflows
    x = _log_ratio_minus_one(s, w0) - 2.0 * s * tt  # ln(s / w(t) - 1)
    with np.errstate(over="ignore"):
        return np.where(
            x >= 0, np.exp(math.log(s) - x) / (1.0 + np.exp(-np.abs(x))), s / (1.0 + np.exp(-np.abs(x)))
        )


def _log_ratio_minus_one(s: float, w0: float) -> float:
    """``ln(s / w0 − 1)`` for ``0 < w0 < s`` without overflow (tiny ``w0``) or cancellation (``w0`` near
    ``s / 2``, where the value is near 0)."""
    if w0 < s / 4:  # the value is at least ln 3: a difference of logs loses nothing
        return math.log(s - w0) - math.log(w0)
    return math.log1p((s - 2.0 * w0) / w0)


def logistic_half_time(s: float, w0: float) -> float:
    """When the closed form reaches ``s / 2`` (the end of the plateau): ``ln(s / w0 - 1) / (2 s)``."""
    s = check_real(s, "s", "(0, inf)")
    w0 = check_real(w0, "w0", "(0, inf)")
    if w0 >= s / 2:
        return 0.0
    return _log_ratio_minus_one(s, w0) / (2.0 * s)


def strengths(chain: MixtureOfLagsChain) -> np.ndarray:
    """``s_j = V^2 ||C_j||_F`` for each lag of ``chain`` (see the module docstring), in ``chain.lags`` order."""
    if not isinstance(chain, MixtureOfLagsChain):
        raise TypeError(f"chain must be a MixtureOfLagsChain, got {type(chain).__name__}")
    v = chain.n_states
    out = []
    for lag in chain.lags:
        joint = chain.partial_joint((lag,))  # (x, y)
        cov = joint.T - np.outer(np.full(v, 1.0 / v), joint.sum(axis=1))  # (y, x)
        out.append(v**2 * float(np.linalg.norm(cov)))
    return np.asarray(out)
