"""Baselines SKCI is compared with: e-CRT (sequential, Model-X), SKIT (sequential, unconditional) and
batch KCI.

* :class:`ECRT`: the sequential conditional randomization test of Shaer, Maman & Romano (AISTATS 2023)
  with an estimated Model-X conditional. On past data fit a regression ``f: (a, c) -> b``; for a new
  batch draw ``K`` dummy copies ``a~ ~ P^(A | C)`` and bet on ``g = mean_k sign(MSE(f(a~_k, c)) - MSE(f(a, c)))``
  (``g in [-1, 1]``; under H0 with the true conditional ``a`` and ``a~`` are exchangeable given ``(b, c)``,
  so ``E[g] = 0``), with the wealth averaged over 1000 constant fractions (:class:`MixtureWealth`).
  Our own choices: kernel ridge regression (RBF, ridge by closed-form LOO) for ``f`` and for the mean of
  ``A | C``, with Gaussian dummies whose standard deviation is that of the past residuals (the official
  SKCI code uses MLPs and takes the residual scale from the batch being bet on); bandwidths and ridges
  re-chosen on SKCI's geometric schedule.
* :class:`SKIT`: the sequential kernel independence test of Podkopaev et al. (ICML 2023) for
  ``A _||_ B`` (no ``C``). Points are paired within batches; the HSIC witness ``f(a, b)`` from the past
  (empirically centered RBF features) pays ``g = f(a1, b1) + f(a2, b2) - f(a1, b2) - f(a2, b1)``, which
  is antisymmetric under swapping ``b1, b2`` and so has mean 0 under independence. Our own choice: the
  payoff is scaled by the largest ``|g|`` of earlier pairs and clipped to ``[-1, 1]`` (clipping keeps
  the antisymmetry), with ONS fractions.
* :func:`kci_test`: batch KCI (Zhang et al., UAI 2011), statistic ``T = tr(K~_{AC|C} K~_{B|C}) / n`` with
  ``K~_{.|C} = R K~ R``, ``R = eps (K~_C + eps I)^-1``, and the gamma approximation of its null
  distribution: mean ``tr(K~_{AC|C} o K~_{B|C}) / n`` and variance ``2 |K~_{AC|C} o K~_{B|C}|_F^2 / n^2``
  (``o`` the elementwise product). Median-heuristic RBF kernels on standardized data.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.stats import gamma as gamma_dist
from threadpoolctl import threadpool_limits  # a scikit-learn dependency

from icml_stats.seqci.betting import (
    MixtureWealth,
    SequentialTestResult,
    WealthProcess,
    make_strategy,
    result_from_process,
)
from icml_stats.seqci.kernels import (
    RBF,
    ConditionalMeanEmbedding,
    Linear,
    median_bandwidth,
)
from icml_stats.seqci.skci import REFRESH_GROWTH, check_model_x
from icml_stats.validation import as_batch, as_matched_samples, check_int, check_real


def _standardizer(x: np.ndarray):
    mu, sd = x.mean(0), x.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    return lambda z: (z - mu) / sd


class _KernelRegressor:
    """Kernel ridge regression of a vector target on standardized inputs (RBF, median heuristic, LOO ridge).

    ``reuse`` takes the kernel and ridge of an earlier regressor instead of choosing them again."""

    kernel: RBF | Linear
    ridge: float

    def __init__(self, x: np.ndarray, y: np.ndarray, seed: int, reuse: _KernelRegressor | None = None):
        self._scale = _standardizer(x)
        kernel, ridge = (None, None) if reuse is None else (reuse.kernel, reuse.ridge)
        self._cme = ConditionalMeanEmbedding(kernel, Linear(), ridge=ridge, random_state=seed).fit(
            self._scale(x), y
        )
        self.kernel, self.ridge = self._cme.input_kernel_, self._cme.ridge_
        self.residual_std = np.sqrt(
            np.mean((y - self.predict(x)) ** 2, axis=0) * x.shape[0] / max(x.shape[0] - 1, 1)
        )

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self._cme.predict_mean(self._scale(x))


class ECRT:
    """Sequential conditional randomization test (e-CRT) of ``A _||_ B | C`` with an estimated Model-X conditional.

    Args:
        alpha: level.
        model_x: ``"online"`` (``A | C`` estimated from the past), ``"pretrained"`` (from ``pretrain=(a, c)``)
            or ``"oracle"`` (``conditional``, a :class:`GaussianConditional`).
        n_dummies: dummy copies ``K`` per batch.
        grid_size: fractions in the mixture wealth.
        max_past, warmup: as in :class:`~icml_stats.seqci.skci.SKCI` (default window 1000 here).
        random_state: seeds the dummy draws.
    """

    def __init__(
        self,
        alpha: float = 0.05,
        *,
        model_x: str = "online",
        conditional=None,
        pretrain=None,
        n_dummies: int = 5,
        grid_size: int = 1000,
        max_past: int = 1000,
        warmup: int = 40,
        random_state=None,
    ):
        self.alpha = check_real(alpha, "alpha", "(0, 1)")
        self.model_x = model_x
        self._pretrain = check_model_x(model_x, conditional, pretrain)
        self.conditional = conditional
        self.n_dummies = check_int(n_dummies, "n_dummies", 1)
        self.max_past = check_int(max_past, "max_past", 4)
        self.warmup = check_int(warmup, "warmup", 4)
        self._rng = np.random.default_rng(random_state)
        self._process = MixtureWealth(grid_size, self.alpha)
        self._past: list[np.ndarray] | None = None
        self._dims: tuple[int, ...] | None = None
        self._n_seen = 0
        self._bet_n: list[int] = []
        self._sampler: tuple[Callable[[np.ndarray], np.ndarray], np.ndarray] | None = None
        self._last: dict[str, _KernelRegressor] = {}
        self._chosen_at: dict[str, int] = {}

    def _model_x(self, A, C, seed):
        if self.model_x == "oracle":
            return lambda c: self.conditional._means(c, A.shape[1]), np.full(A.shape[1], self.conditional.std)
        if self.model_x == "pretrained":
            if self._sampler is None:
                pa, pc = self._pretrain
                reg = _KernelRegressor(pc, pa, seed)
                self._sampler = (reg.predict, reg.residual_std)
            return self._sampler
        reg = _KernelRegressor(C, A, seed, self._reuse("x", A.shape[0]))
        self._last["x"] = reg
        return reg.predict, reg.residual_std

    def _reuse(self, key: str, n: int):
        """The last regressor of this kind if the past grew by less than REFRESH_GROWTH since its hyperparameters were chosen."""
        last = self._last.get(key)
        if last is None or n >= REFRESH_GROWTH * self._chosen_at.get(key, 0):
            self._chosen_at[key] = n
            return None
        return last

    def update(self, a_batch, b_batch, c_batch) -> SequentialTestResult:
        (a, b, c), self._dims = as_batch(self._dims, a_batch=a_batch, b_batch=b_batch, c_batch=c_batch)
        if self._past is not None and self._past[0].shape[0] >= self.warmup:
            A, B, C = self._past
            seed = int(self._rng.integers(2**31))
            f = _KernelRegressor(np.hstack([A, C]), B, seed, self._reuse("f", A.shape[0]))
            self._last["f"] = f
            mean, std = self._model_x(A, C, seed)
            mu = mean(c)  # (m, p)
            q = np.mean((f.predict(np.hstack([a, c])) - b) ** 2)
            g = 0.0
            for _ in range(self.n_dummies):
                dummy = mu + std * self._rng.standard_normal(a.shape)
                g += np.sign(np.mean((f.predict(np.hstack([dummy, c])) - b) ** 2) - q)
            self._process.step(g / self.n_dummies)
            self._bet_n.append(self._n_seen + a.shape[0])
        self._n_seen += a.shape[0]
        new = (a, b, c)
        self._past = (
            [x.copy() for x in new]  # never the caller's arrays, which it may refill
            if self._past is None
            else [np.concatenate([p, x])[-self.max_past :] for p, x in zip(self._past, new, strict=True)]
        )
        return self.result()

    def run(self, a, b, c, batch_size: int = 20) -> SequentialTestResult:
        a, b, c = as_matched_samples(a=a, b=b, c=c)
        batch_size = check_int(batch_size, "batch_size", 1)
        with threadpool_limits(limits=1, user_api="blas"):  # small matrices: see SKCI.run
            for start in range(0, a.shape[0], batch_size):
                self.update(
                    a[start : start + batch_size],
                    b[start : start + batch_size],
                    c[start : start + batch_size],
                )
        return self.result()

    def result(self) -> SequentialTestResult:
        return result_from_process(self._process, self._bet_n, "e-CRT")


def _centered(K: np.ndarray) -> np.ndarray:
    return K - K.mean(0, keepdims=True) - K.mean(1, keepdims=True) + K.mean()


class SKIT:
    """Sequential kernel independence test of ``A _||_ B`` by betting on the HSIC witness (pairs of points).

    Args:
        alpha: level.
        betting: a strategy name or object (default ``"ons"``).
        max_past: the witness uses at most this many most recent samples.
        warmup: samples seen before the first bet.
    """

    def __init__(self, alpha: float = 0.05, *, betting="ons", max_past: int = 500, warmup: int = 20):
        self.alpha = check_real(alpha, "alpha", "(0, 1)")
        self._process = WealthProcess(make_strategy(betting), self.alpha)
        self.max_past = check_int(max_past, "max_past", 4)
        self.warmup = check_int(warmup, "warmup", 2)
        self._past: list[np.ndarray] | None = None
        self._held: tuple[np.ndarray, np.ndarray] | None = None  # an unpaired point carried to the next batch
        self._dims: tuple[int, ...] | None = None
        self._n_seen = 0
        self._bet_n: list[int] = []
        self._scale = 4.0  # |g| <= 4 for kernels in [0, 1]; then the largest |g| of earlier pairs
        self._largest = 0.0

    def update(self, a_batch, b_batch) -> SequentialTestResult:
        """Bet on the consecutive pairs of one batch (an odd point waits for the next batch)."""
        (a, b), self._dims = as_batch(self._dims, a_batch=a_batch, b_batch=b_batch)
        self._n_seen += a.shape[0]
        if self._held is not None:
            a, b = np.vstack([self._held[0], a]), np.vstack([self._held[1], b])
        used = 2 * (a.shape[0] // 2)
        if self._past is not None and self._past[0].shape[0] >= self.warmup and used:
            for r in self._pair_payoffs(a[:used], b[:used]):
                self._process.step(float(np.clip(r / self._scale, -1.0, 1.0)))
                self._bet_n.append(self._n_seen)
                self._largest = max(self._largest, abs(float(r)))
                self._scale = self._largest if self._largest > 0 else 4.0  # predictable: earlier pairs only
        # copies, never views of the caller's arrays, which it may refill
        self._held = (a[used:].copy(), b[used:].copy()) if used < a.shape[0] else None
        if used:
            new = (a[:used], b[:used])
            self._past = (
                [x.copy() for x in new]
                if self._past is None
                else [np.concatenate([p, x])[-self.max_past :] for p, x in zip(self._past, new, strict=True)]
            )
        return self.result()

    def _pair_payoffs(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``f(a1, b1) + f(a2, b2) - f(a1, b2) - f(a2, b1)`` for the pairs (rows 2t, 2t+1), witness from the past."""
        assert self._past is not None  # bets start after the warm-up
        A, B = self._past
        k, l_ = RBF(median_bandwidth(A)), RBF(median_bandwidth(B))
        KA, LB = k(A, A), l_(B, B)
        # empirically centered features: k(a, A_i) - mean_j k(a, A_j) - mean_j k(A_i, A_j) + mean k(A, A)
        ka, lb = k(a, A), l_(b, B)  # (2P, n)
        ka = ka - ka.mean(1, keepdims=True) - KA.mean(0)[None, :] + KA.mean()
        lb = lb - lb.mean(1, keepdims=True) - LB.mean(0)[None, :] + LB.mean()
        F = ka @ lb.T / A.shape[0]  # (2P, 2P): F[u, v] = witness(a_u, b_v)
        i, j = np.arange(0, a.shape[0], 2), np.arange(1, a.shape[0], 2)
        return F[i, i] + F[j, j] - F[i, j] - F[j, i]

    def run(self, a, b, batch_size: int = 20) -> SequentialTestResult:
        a, b = as_matched_samples(a=a, b=b)
        batch_size = check_int(batch_size, "batch_size", 1)
        for start in range(0, a.shape[0], batch_size):
            self.update(a[start : start + batch_size], b[start : start + batch_size])
        return self.result()

    def result(self) -> SequentialTestResult:
        return result_from_process(self._process, self._bet_n, "SKIT")


def kci_test(a, b, c, eps: float = 1e-3) -> tuple[float, float]:
    """Batch KCI test of ``A _||_ B | C``: ``(statistic, p_value)`` by the gamma approximation."""
    a, b, c = as_matched_samples(a=a, b=b, c=c)
    eps = check_real(eps, "eps", "(0, inf)")
    n = a.shape[0]
    if n < 4:
        raise ValueError(f"kci_test needs at least 4 samples, got {n}")
    a, b, c = (_standardizer(x)(x) for x in (a, b, c))
    ac = np.hstack([a, c])
    Kac, Kb, Kc = (_centered(RBF(median_bandwidth(x))(x, x)) for x in (ac, b, c))
    R = eps * np.linalg.solve(Kc + eps * np.eye(n), np.eye(n))  # (n, n)
    Kx, Ky = R @ Kac @ R, R @ Kb @ R
    stat = float(np.sum(Kx * Ky) / n)
    P = Kx * Ky
    mean, var = float(np.trace(P) / n), float(2.0 * np.sum(P * P) / n**2)
    if mean <= 0 or var <= 0:
        return stat, 1.0
    p = float(gamma_dist.sf(stat, a=mean**2 / var, scale=var / mean))
    return stat, p
