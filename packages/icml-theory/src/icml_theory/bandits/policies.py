"""Contextual bandit policies: ``select(contexts) -> arm`` and ``update(context, reward)``.

``contexts`` is a ``(K, dim)`` array, one feature row per arm; ``update`` takes the row of the arm played
and its reward in ``[0, 1]``. Scores (``scores(contexts)``) are what ``select`` maximizes; ties are broken
at random from the policy's seed, so a run is reproducible from ``seed``.

NeuralLog-UCB-1 and -2 follow the structure of Bae & Lee (ICML 2026) as far as we could read it (abstract
and secondary summaries); the exact confidence radii, which parameters the gradients use and the
second-order term of UCB-2 are **our reconstruction**, each exposed as an argument (see the docs page).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np
import torch

from icml_theory.bandits._checks import as_tensor, check_reward
from icml_theory.bandits.confidence import DiagonalConfidence, FullConfidence
from icml_theory.bandits.networks import RewardNetwork
from icml_theory.validation import check_choice, check_int, check_real, check_seed

CONFIDENCES = ("full", "diagonal")
# beyond these, 1/λ or ν² leave float64's comfortable range (scores of rewards in [0, 1] need neither)
LAM_RANGE, NU_RANGE = "[1e-12, 1e12]", "[0, 1e6]"
# |mu''| <= 1/(6 sqrt 3) for the logistic link: half of it bounds the Taylor remainder of mu
SECOND_ORDER = 1.0 / (12.0 * math.sqrt(3.0))


class BanditPolicy:
    """The protocol: ``select(contexts) -> int``, ``scores(contexts)``, ``update(context, reward)``; ``t`` counts updates."""

    def __init__(self, dim: int, seed: int = 0) -> None:
        self.dim = check_int(dim, "dim", 1, 1 << 16)
        self.seed = check_seed(seed)
        self._rng = np.random.default_rng(self.seed)
        self.t = 0

    def scores(self, contexts) -> np.ndarray:
        """The index of each arm (float64, ``(K,)``): what :meth:`select` maximizes."""
        X = as_tensor(contexts, "contexts", 2, self.dim)
        s = self._scores(X)
        if not np.all(np.isfinite(s)):
            raise ValueError(
                "contexts gave non-finite scores: features this large overflow the model; scale them"
            )
        return s

    def select(self, contexts) -> int:
        """The arm to play: the index of the largest score (ties at random)."""
        s = self.scores(contexts)
        top = np.flatnonzero(s >= s.max() - 1e-12 * max(1.0, abs(float(s.max()))))
        return int(top[0] if top.size == 1 else self._rng.choice(top))

    def update(self, context, reward) -> None:
        """Learn from the played arm's feature row ``context`` (``(dim,)``) and its ``reward`` in [0, 1]."""
        x = as_tensor(context, "context", 1, self.dim)
        r = check_reward(reward)
        self._learn(x, r)
        self.t += 1

    def _scores(self, X: torch.Tensor) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _learn(self, x: torch.Tensor, r: float) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim}, t={self.t})"


class UniformRandom(BanditPolicy):
    """Plays an arm uniformly at random (the no-learning reference)."""

    def _scores(self, X: torch.Tensor) -> np.ndarray:
        return self._rng.random(X.shape[0])

    def _learn(self, x: torch.Tensor, r: float) -> None:
        pass


class NeuralBandit(BanditPolicy):
    """Base of the neural policies: a :class:`RewardNetwork` trained on every observation so far and a
    confidence matrix over its gradient features.

    Training (every ``train_every`` updates, ``steps`` Adam steps at learning rate ``lr``, warm-started, on
    the whole history or, past ``batch_size`` observations, on a random minibatch of that size) minimizes
    ``Σ_i loss(f(x_i; θ), r_i) + (m λ / 2) ‖θ − θ_0‖²`` (divided by the number of observations), with the
    logistic loss (``f`` is a logit) or the squared loss (``f`` is the mean), so that the
    confidence matrix ``λ I + Σ w_i g_i g_iᵀ`` is the Hessian of the linearized objective.
    ``confidence="diagonal"`` keeps only its diagonal. ``nu`` scales the exploration.

    The defaults (``λ = 0.01``, ``lr = 0.03``, 10 steps every 5 rounds, width 32) are the shared settings
    of the ``neurallog-kappa`` reproduction: in its pilot, NeuralUCB's ``λ = 1`` held the networks so close
    to ``θ_0`` that even greedy play had near-linear regret (docs page)."""

    loss = "logistic"
    uses_confidence = True

    def __init__(
        self,
        dim: int,
        *,
        lam: float = 0.01,
        nu: float = 0.03,
        width: int = 32,
        depth: int = 1,
        confidence: str = "full",
        lr: float = 0.03,
        steps: int = 10,
        train_every: int = 5,
        batch_size: int = 256,
        seed: int = 0,
    ) -> None:
        super().__init__(dim, seed)
        self.lam = check_real(lam, "lam", LAM_RANGE)
        self.nu = check_real(nu, "nu", NU_RANGE)
        self.lr = check_real(lr, "lr", "(0, 10]")
        self.steps = check_int(steps, "steps", 0, 1 << 20)
        self.train_every = check_int(train_every, "train_every", 1)
        self.batch_size = check_int(batch_size, "batch_size", 1)
        self._generator = torch.Generator().manual_seed(self.seed)
        self.network = RewardNetwork(self.dim, width, depth, self.seed)
        p = self.network.num_parameters
        kind = check_choice(confidence, "confidence", CONFIDENCES)
        self.confidence: FullConfidence | DiagonalConfidence | None = (
            (FullConfidence(p, self.lam) if kind == "full" else DiagonalConfidence(p, self.lam))
            if self.uses_confidence
            else None
        )
        self._optimizer = torch.optim.Adam(self.network.parameters(), lr=self.lr, foreach=True)
        self._X = torch.empty(64, self.dim, dtype=torch.float64)  # observations so far (grown by doubling)
        self._r = torch.empty(64, dtype=torch.float64)
        self._cache: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def _predict(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``f(X)`` and the gradient features ``G`` (cached for the update of the arm played)."""
        with torch.no_grad():
            f = self.network(X)
        G = (
            self.network._gradients(X)
            if self.uses_confidence
            else torch.empty(X.shape[0], 0, dtype=torch.float64)
        )
        self._cache = (X, f, G)
        return f, G

    def _scores(self, X: torch.Tensor) -> np.ndarray:
        f, G = self._predict(X)
        norms = self.confidence._norms(G) if self.confidence is not None else None
        return self._index(f, norms).numpy()

    def _index(
        self, f: torch.Tensor, norms: torch.Tensor | None
    ) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _weight(self, f: float) -> float:
        """The weight of an observation with prediction ``f`` in the confidence matrix."""
        return 1.0

    def _learn(self, x: torch.Tensor, r: float) -> None:
        if self.confidence is not None:
            hit = None
            if self._cache is not None:
                X, f_all, G_all = self._cache
                rows = (X == x).all(dim=1).nonzero()
                hit = int(rows[0]) if rows.numel() else None
            if hit is not None:
                f, g = float(f_all[hit]), G_all[hit]
            else:
                with torch.no_grad():
                    f = float(self.network(x[None])[0])
                g = self.network._gradients(x[None])[0]
            if not (math.isfinite(f) and torch.isfinite(g).all()):
                raise ValueError(
                    "context gave a non-finite prediction or gradient: features this large overflow the model; scale them"
                )
            try:
                self.confidence.update(g, self._weight(f))
            except ValueError as err:
                raise ValueError(
                    f"context is too large for the confidence matrix ({err}); scale the features"
                ) from None
        self._cache = None
        if self.t == self._X.shape[0]:
            self._X = torch.cat([self._X, torch.empty_like(self._X)])
            self._r = torch.cat([self._r, torch.empty_like(self._r)])
        self._X[self.t] = x
        self._r[self.t] = r
        if (self.t + 1) % self.train_every == 0:
            self._train(self.t + 1)

    def _train(self, n: int) -> None:
        if not self.steps:
            return
        params = list(self.network.parameters())
        saved = [p.detach().clone() for p in params]
        decay = self.network.width * self.lam / n  # gradient of (m λ / 2) ‖θ − θ_0‖², divided by n
        for _ in range(self.steps):
            if n > self.batch_size:  # an unbiased minibatch of the objective
                idx = torch.randint(n, (self.batch_size,), generator=self._generator)
                X, r, scale = self._X[idx], self._r[idx], 1.0 / self.batch_size
            else:
                X, r, scale = self._X[:n], self._r[:n], 1.0 / n
            self._optimizer.zero_grad()
            out = self.network(X)
            if self.loss == "logistic":
                data = torch.nn.functional.binary_cross_entropy_with_logits(out, r, reduction="sum")
            else:
                data = 0.5 * ((out - r) ** 2).sum()
            (data * scale).backward()
            with torch.no_grad():
                for p, p0 in zip(params, self.network.initial, strict=True):
                    assert p.grad is not None
                    p.grad.add_(p - p0, alpha=decay)
            self._optimizer.step()
        if not all(torch.isfinite(p).all() for p in params):  # diverged: keep the last finite network
            with torch.no_grad():
                for p, old in zip(params, saved, strict=True):
                    p.copy_(old)
            self._optimizer = torch.optim.Adam(params, lr=self.lr, foreach=True)
            warnings.warn(
                f"{type(self).__name__}: training diverged (non-finite parameters); kept the previous network. "
                "Lower lr or scale the contexts.",
                RuntimeWarning,
                stacklevel=4,
            )

    def __repr__(self) -> str:
        kind = (
            "none"
            if self.confidence is None
            else "diagonal"
            if self.confidence.method == "diagonal"
            else "full"
        )
        return f"{type(self).__name__}(dim={self.dim}, nu={self.nu}, lam={self.lam}, confidence={kind!r}, t={self.t})"


def _check_kappa(kappa) -> float:
    # mu'(z) <= 1/4 everywhere, so kappa = sup 1/mu' >= 4
    return check_real(kappa, "kappa", "[4, 1e12]")


class NeuralLogUCB1(NeuralBandit):
    """NeuralLog-UCB-1: logistic loss; index ``μ(f(x)) + ν sqrt(κ) ‖g(x)‖_{V⁻¹}`` with the unweighted
    ``V = λ I + Σ g gᵀ``. ``kappa`` is the known bound ``κ >= sup 1/μ̇`` of the analysis (regret
    ``Õ(d̃ sqrt(κ T))``). The ``sqrt(κ)`` radius is our reading of the analysis (``‖·‖_{H⁻¹} <= sqrt(κ) ‖·‖_{V⁻¹}``)."""

    def __init__(self, dim: int, *, kappa: float, **kwargs) -> None:
        self.kappa = _check_kappa(kappa)
        super().__init__(dim, **kwargs)

    def _index(self, f, norms):
        return torch.sigmoid(f) + self.nu * math.sqrt(self.kappa) * norms


class NeuralLogUCB2(NeuralBandit):
    """NeuralLog-UCB-2: logistic loss; variance-weighted ``H = λ I + Σ max(μ̇(f(x_i)), 1/κ) g_i g_iᵀ`` (each
    weight from the network when ``x_i`` was played) and index
    ``μ(f) + ν μ̇(f) ‖g‖_{H⁻¹} + c ν² ‖g‖²_{H⁻¹}``, ``c = second_order`` (default ``1/(12 sqrt 3)``, half the
    largest ``|μ̈|``: the Taylor remainder). Regret ``Õ(d̃ sqrt(T/κ))`` in the paper. The weights' floor,
    the remainder term and its constant are our reconstruction."""

    def __init__(self, dim: int, *, kappa: float, second_order: float = SECOND_ORDER, **kwargs) -> None:
        self.kappa = _check_kappa(kappa)
        self.second_order = check_real(second_order, "second_order", NU_RANGE)
        super().__init__(dim, **kwargs)

    def _weight(self, f: float) -> float:
        mu = 1.0 / (1.0 + math.exp(-min(max(f, -700.0), 700.0)))
        return max(mu * (1.0 - mu), 1.0 / self.kappa)

    def _index(self, f, norms):
        mu = torch.sigmoid(f)
        return mu + self.nu * mu * (1 - mu) * norms + self.second_order * (self.nu * self.nu) * norms**2


class NeuralUCB(NeuralBandit):
    """NeuralUCB (Zhou, Li & Gu 2020): squared loss on the rewards; index ``f(x) + ν ‖g(x)‖_{Z⁻¹}``."""

    loss = "squared"

    def _index(self, f, norms):
        return f + self.nu * norms


class NeuralTS(NeuralBandit):
    """NeuralTS (Zhang et al. 2021): squared loss; each arm's score is a draw from ``N(f(x), ν² ‖g(x)‖²_{Z⁻¹})``."""

    loss = "squared"

    def _index(self, f, norms):
        return f + self.nu * norms * torch.from_numpy(self._rng.standard_normal(f.shape[0]))


class EpsilonGreedy(NeuralBandit):
    """The same network with the logistic loss, greedy on ``μ(f(x))``, a uniformly random arm with
    probability ``epsilon``. No confidence matrix (``nu``, ``confidence`` unused)."""

    uses_confidence = False

    def __init__(self, dim: int, *, epsilon: float = 0.05, **kwargs) -> None:
        self.epsilon = check_real(epsilon, "epsilon", "[0, 1]")
        super().__init__(dim, **kwargs)

    def _index(self, f, norms):
        if self._rng.random() < self.epsilon:
            return torch.from_numpy(self._rng.random(f.shape[0]))
        return torch.sigmoid(f)


def _with_bias(X: np.ndarray) -> np.ndarray:
    return np.concatenate([X, np.ones((X.shape[0], 1))], axis=1)


class GLMUCB(BanditPolicy):
    """GLM-UCB (Filippi et al. 2010) with the logistic link on features ``φ(x)`` (default: ``x`` and a
    constant 1): ``θ̂`` the ridge-penalized maximum-likelihood estimate (``newton_steps`` Newton steps,
    warm-started, every ``train_every`` updates), index ``μ(φᵀθ̂) + ν ‖φ‖_{V⁻¹}``, ``V = λ I + Σ φ φᵀ``.

    ``features`` maps a ``(K, dim)`` float64 array to ``(K, q)``: given the true logit ``h(x)`` it is the
    oracle-feature baseline of the reproduction."""

    def __init__(
        self,
        dim: int,
        *,
        features: Callable[[np.ndarray], np.ndarray] | None = None,
        lam: float = 1.0,
        nu: float = 1.0,
        train_every: int = 1,
        newton_steps: int = 5,
        seed: int = 0,
    ) -> None:
        super().__init__(dim, seed)
        if features is not None and not callable(features):
            raise TypeError(
                f"features must be a callable from (K, dim) arrays to (K, q) arrays, got {type(features).__name__}"
            )
        self.features = features if features is not None else _with_bias
        self.lam = check_real(lam, "lam", LAM_RANGE)
        self.nu = check_real(nu, "nu", NU_RANGE)
        self.train_every = check_int(train_every, "train_every", 1)
        self.newton_steps = check_int(newton_steps, "newton_steps", 0, 1000)
        self.confidence: FullConfidence | None = None  # made at the first call, when q is known
        self.theta = np.zeros(0)
        self._Phi: list[np.ndarray] = []
        self._r: list[float] = []

    def _phi(self, X: torch.Tensor) -> np.ndarray:
        Phi = self.features(X.numpy())
        try:
            Phi = np.asarray(Phi, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError("features must return a (K, q) array of real numbers") from None
        if Phi.ndim != 2 or Phi.shape[0] != X.shape[0] or Phi.shape[1] == 0:
            raise ValueError(
                f"features must return a (K, q) array with K = {X.shape[0]} rows, got shape {Phi.shape}"
            )
        if self.confidence is not None and Phi.shape[1] != self.confidence.dim:
            raise ValueError(
                f"features must return {self.confidence.dim} columns every call, got {Phi.shape[1]}"
            )
        if not np.all(np.isfinite(Phi)):
            raise ValueError("features (of these contexts) must be finite, got NaN or inf")
        if self.confidence is None:
            self.confidence = FullConfidence(Phi.shape[1], self.lam)
            self.theta = np.zeros(Phi.shape[1])
        return Phi

    def _scores(self, X: torch.Tensor) -> np.ndarray:
        Phi = self._phi(X)
        assert self.confidence is not None
        z = np.clip(Phi @ self.theta, -700, 700)
        norms = self.confidence._norms(torch.from_numpy(Phi)).numpy()
        return 1.0 / (1.0 + np.exp(-z)) + self.nu * norms

    def _learn(self, x: torch.Tensor, r: float) -> None:
        phi = self._phi(x[None])[0]
        assert self.confidence is not None
        try:
            self.confidence.update(phi)
        except ValueError as err:
            raise ValueError(f"context has features too large for the confidence matrix ({err})") from None
        self._Phi.append(phi)
        self._r.append(r)
        if (self.t + 1) % self.train_every == 0:
            self._fit()

    def _fit(self) -> None:
        Phi, r = np.asarray(self._Phi), np.asarray(self._r)
        theta = self.theta.copy()
        eye = np.eye(Phi.shape[1])
        for _ in range(self.newton_steps):
            mu = 1.0 / (1.0 + np.exp(-np.clip(Phi @ theta, -700, 700)))
            gradient = Phi.T @ (mu - r) + self.lam * theta
            hessian = (Phi * (mu * (1 - mu))[:, None]).T @ Phi + self.lam * eye
            try:
                step = np.linalg.solve(hessian, gradient)
            except np.linalg.LinAlgError:  # numerically singular (tiny λ): the least-squares step
                step = np.linalg.lstsq(hessian, gradient, rcond=None)[0]
            theta -= step
            if np.max(np.abs(step)) < 1e-10:
                break
        if np.all(np.isfinite(theta)):
            self.theta = theta
